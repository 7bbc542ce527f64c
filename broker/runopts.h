/* broker/runopts.h — generation options shared by the verbs that run a
 * model (run, chat, bench), parsed from Ollama-style flags and from chat
 * `/set` commands. */
#ifndef MLXR_RUNOPTS_H
#define MLXR_RUNOPTS_H

#include <stddef.h>

#include "common/wcapi.h"

typedef struct {
	const char *model;
	const char *prompt;   /* joined from the positional words after MODEL */
	char *prompt_buf;
	const char *system;
	int ctx;              /* --ctx: context tokens (0 = default 4096, capped by the model) */
	int no_think;
	int verbose;
	int raw;              /* --raw: no chat template */
	int sealed;           /* --sealed: weights in sealed memfds */
	int no_sandbox;       /* --no-sandbox: debugging only */
	wc_request req;       /* sampling, max tokens, stop strings */
} run_opts;

#define RUNOPTS_USAGE(what) \
	"usage: mlxr " what " [--max N] [--temp F] [--top-p F] [--top-k N] [--min-p F]\n" \
	"       [--repeat-penalty F] [--repeat-last-n N] [--presence-penalty F] [--frequency-penalty F]\n" \
	"       [--seed N] [--stop S]... [--system TEXT] [--ctx N] [--no-think] [--raw] [--verbose]\n" \
	"       [--sealed] [--device auto|cpu|cuda] [--fast-prefill] [--no-sandbox]\n"

void runopts_defaults(run_opts *o);
/* argv[0] is the verb. Returns 0, or -1 with err. */
int runopts_parse(run_opts *o, int argc, char **argv, char *err, size_t errlen);
/* "temperature 0.2"-style settings from the chat. */
int runopts_set(run_opts *o, const char *kv, char *err, size_t errlen);
void runopts_free(run_opts *o);

#endif

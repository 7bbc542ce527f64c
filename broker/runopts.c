/* broker/runopts.c — see runopts.h. */
#include "broker/runopts.h"
#include "broker/wclient.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void runopts_defaults(run_opts *o)
{
	memset(o, 0, sizeof(*o));
	wc_request_defaults(&o->req);
}

static int num(const char *s, double lo, double hi, double *out)
{
	char *e;
	errno = 0;
	double v = strtod(s, &e);
	if (e == s || *e || errno || !isfinite(v) || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* Settings by name: the flag names (without --) and Ollama's parameter
 * names; errors name the setting as the user wrote it (shown: "--top-p"
 * for a flag, "top_p" for /set). Every bound is checked here, NaN and
 * infinities included: top_p 0 is greedy (worker/sampler.h), so a value
 * outside [0, 1] is an error, never "off". */
static int set_one(run_opts *o, const char *k, const char *shown, const char *v, char *err, size_t errlen)
{
	double d;
	struct {
		const char *a, *b;
		double lo, hi;
		int kind; /* 0 float temp, 1 top_p, 2 top_k, 3 min_p, 4 rep, 5 last_n, 6 pres, 7 freq, 8 seed, 9 max, 10 ctx */
	} tab[] = {
		{ "temp", "temperature", 0, 100, 0 },  { "top-p", "top_p", 0, 1, 1 },
		{ "top-k", "top_k", 0, 1e9, 2 },      { "min-p", "min_p", 0, 1, 3 },
		{ "repeat-penalty", "repeat_penalty", 0, 100, 4 },
		{ "repeat-last-n", "repeat_last_n", 0, 1e9, 5 },
		{ "presence-penalty", "presence_penalty", -100, 100, 6 },
		{ "frequency-penalty", "frequency_penalty", -100, 100, 7 },
		{ "seed", "seed", 0, 18446744073709551615.0, 8 },
		{ "max", "num_predict", -1, 1e9, 9 },
		{ "ctx", "num_ctx", 1, 1 << 24, 10 },
	};
	for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
		if (strcmp(k, tab[i].a) && strcmp(k, tab[i].b))
			continue;
		if (num(v, tab[i].lo, tab[i].hi, &d)) {
			snprintf(err, errlen, "%s: '%s' is not a number in [%g, %g]", shown, v, tab[i].lo, tab[i].hi);
			return -1;
		}
		switch (tab[i].kind) {
		case 0: o->req.temperature = (float)d; break;
		case 1: o->req.top_p = (float)d; break;
		case 2: o->req.top_k = (int)d; break;
		case 3: o->req.min_p = (float)d; break;
		case 4: o->req.repeat_penalty = (float)d; break;
		case 5: o->req.repeat_last_n = (int)d; break;
		case 6: o->req.presence_penalty = (float)d; break;
		case 7: o->req.frequency_penalty = (float)d; break;
		case 8: o->req.seed = strtoull(v, NULL, 10); break;
		case 9: o->req.max_tokens = (int)d; break;
		case 10: o->ctx = (int)d; break;
		}
		return 0;
	}
	snprintf(err, errlen, "unknown setting '%s'", shown);
	return -1;
}

int runopts_set(run_opts *o, const char *kv, char *err, size_t errlen)
{
	if (!strcmp(kv, "think")) { o->no_think = 0; return 0; }
	if (!strcmp(kv, "nothink")) { o->no_think = 1; return 0; }
	if (!strcmp(kv, "verbose")) { o->verbose = 1; return 0; }
	if (!strcmp(kv, "quiet")) { o->verbose = 0; return 0; }
	char k[64];
	const char *sp = strchr(kv, ' ');
	if (!sp || (size_t)(sp - kv) >= sizeof(k)) {
		snprintf(err, errlen, "usage: /set NAME VALUE (see /?)");
		return -1;
	}
	memcpy(k, kv, (size_t)(sp - kv));
	k[sp - kv] = 0;
	while (*sp == ' ')
		sp++;
	if (!strcmp(k, "ctx") || !strcmp(k, "num_ctx")) {
		snprintf(err, errlen, "the context size is fixed when the model loads (--ctx)");
		return -1;
	}
	return set_one(o, k, k, sp, err, errlen);
}

int runopts_parse(run_opts *o, int argc, char **argv, char *err, size_t errlen)
{
	size_t plen = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (a[0] == '-' && a[1] == '-' && a[2]) {
			const char *k = a + 2;
			if (!strcmp(k, "no-think")) { o->no_think = 1; continue; }
			if (!strcmp(k, "verbose")) { o->verbose = 1; continue; }
			if (!strcmp(k, "raw")) { o->raw = 1; continue; }
			if (!strcmp(k, "sealed")) { o->sealed = 1; continue; }
			if (!strcmp(k, "no-sandbox")) { o->no_sandbox = 1; continue; }
			if (!strcmp(k, "fast-prefill")) { wclient_set_fast_prefill(); continue; }
			if (i + 1 >= argc) {
				snprintf(err, errlen, "%s needs a value", a);
				return -1;
			}
			const char *v = argv[++i];
			if (!strcmp(k, "system")) { o->system = v; continue; }
			if (!strcmp(k, "device")) {
				if (wclient_set_device(v)) {
					snprintf(err, errlen, "--device %s: expected auto, cpu or cuda", v);
					return -1;
				}
				continue;
			}
			if (!strcmp(k, "stop")) {
				if (o->req.n_stops >= WC_MAX_STOPS || !*v) {
					snprintf(err, errlen, "--stop: at most %d non-empty stop strings", WC_MAX_STOPS);
					return -1;
				}
				o->req.stops[o->req.n_stops++] = v;
				continue;
			}
			if (set_one(o, k, a, v, err, errlen))
				return -1;
			continue;
		}
		if (!o->model) {
			o->model = a;
			continue;
		}
		/* Positional words after MODEL form the prompt. */
		size_t al = strlen(a);
		char *nb = realloc(o->prompt_buf, plen + al + 2);
		if (!nb) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		o->prompt_buf = nb;
		if (plen)
			nb[plen++] = ' ';
		memcpy(nb + plen, a, al + 1);
		plen += al;
		o->prompt = o->prompt_buf;
	}
	return 0;
}

void runopts_free(run_opts *o)
{
	free(o->prompt_buf);
	o->prompt_buf = NULL;
}

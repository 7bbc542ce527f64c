/* broker/openai.h — the OpenAI API on top of wclient: request validation
 * (loop thread; everything the client sends is checked here, and every
 * failure is a 4xx with an OpenAI error object naming the parameter) and
 * the response writers (generation thread; JSON bodies and SSE streams).
 *
 * Nothing here reads a socket: oai_parse works on a parsed JSON document
 * and oai_run writes bytes through sj_write (broker/serve_int.h). */
#ifndef MLXR_OPENAI_H
#define MLXR_OPENAI_H

#include <stddef.h>

#include "broker/wclient.h"
#include "common/json.h"

typedef enum {
	OAI_CHAT,        /* POST /v1/chat/completions */
	OAI_COMPLETION,  /* POST /v1/completions */
	OAI_RESPONSES,   /* POST /v1/responses */
	OAI_TOKENIZE,    /* POST /tokenize (llama-server's shape) */
	OAI_DETOKENIZE,  /* POST /detokenize */
	OAI_KIND_COUNT
} oai_kind;

/* An error answer: status, OpenAI type/code, the offending parameter. */
typedef struct {
	int status;
	const char *type;   /* "invalid_request_error", "server_error", ... */
	const char *code;   /* NULL: null */
	char param[96];     /* "": null */
	char msg[600];
	int has_ctx;        /* exceed_context_size_error: the two sizes */
	size_t n_prompt;
	int n_ctx;
} oai_err;

/* A validated request. Strings point into the JSON document, which the
 * job keeps alive; msgs/joined/ids are owned here. */
typedef struct {
	oai_kind kind;
	wc_request req;
	wc_msg *msgs;
	char **joined;      /* message texts built from content-part arrays */
	size_t n_joined;
	int stream, include_usage;
	const char *instructions; /* responses: echoed back */
	int max_output;     /* responses: echoed back (0: null) */
	/* tokenize / detokenize */
	const char *text;
	size_t text_len;
	int parse_special, with_pieces;
	int *ids;
	size_t n_ids;
} oai_call;

void oai_err_set(oai_err *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
/* {"error":{"message","type","param","code"}} (+ n_prompt_tokens, n_ctx). */
void oai_error_body(jw_buf *w, const oai_err *e);

/* Validates root for kind; 0, or -1 with e (always a 4xx). */
int oai_parse(oai_kind kind, const json_value *root, oai_call *c, oai_err *e);
void oai_call_free(oai_call *c);

struct sjob;
/* Generation thread: runs the job's call on w and writes the whole HTTP
 * response through sj_write. */
void oai_run(wclient *w, const char *model_id, struct sjob *j);

/* GET /v1/models (and /v1/models/ID when id != NULL: -1 if no such model). */
int oai_models_body(jw_buf *w, const char *model_id, const wclient_info *info, const char *id);

#endif

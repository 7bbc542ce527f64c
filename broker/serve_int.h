/* broker/serve_int.h — what the server loop (serve.c) and the API mapping
 * (openai.c) share: the queued job and the generation thread's output
 * calls. Internal to broker/. */
#ifndef MLXR_SERVE_INT_H
#define MLXR_SERVE_INT_H

#include <stddef.h>

#include "broker/openai.h"
#include "common/json.h"

struct server;

/* One model request. The loop thread fills the fixed part before queueing
 * and never changes it afterwards; the shared part is under the server's
 * mutex. A job is freed by whichever side lets go of it last (the
 * connection when it is done and drained, the generation thread when the
 * connection has gone: `orphan`). */
typedef struct sjob {
	/* fixed */
	struct server *srv;
	json_doc doc;
	oai_call call;
	int keep_alive;         /* the response says Connection: keep-alive */
	char origin[256];       /* echoed in Access-Control-Allow-Origin ("" none) */
	double t_deadline;      /* monotonic seconds: cancel after this */
	/* shared (server mutex) */
	jw_buf out;             /* response bytes not yet written */
	size_t out_off;         /* bytes of out already written */
	int cancelled;          /* the client left, or the server stops */
	int timed_out;          /* the deadline passed */
	int running, done, orphan;
	int status;             /* for the request log */
	size_t prompt_tokens, completion_tokens;
	struct sjob *next;      /* queue */
} sjob;

/* Generation thread: appends response bytes (waits while the client is
 * more than a few MiB behind). */
void sj_write(sjob *j, const char *p, size_t n);
/* 1 when the request must stop: client gone, deadline passed, shutdown. */
int sj_stop(sjob *j);
void sj_note(sjob *j, int status, size_t prompt_tokens, size_t completion_tokens);

/* Status line and the headers every response carries. clen < 0: chunked. */
void serve_head(jw_buf *w, int status, const char *ctype, long clen, int keep_alive, const char *origin);

double serve_now(void);

#endif

/* broker/serve.h — `mlxr serve`: a locked-down local HTTP/1.1 server for
 * the OpenAI API on one model.
 *
 * Threads: one event-loop thread (poll, non-blocking sockets) owns every
 * connection: it parses requests (broker/http.h), enforces the policy
 * (Host, Origin, API key, content type, limits, timeouts) and answers what
 * needs no model. One generation thread takes the queued model requests
 * in arrival order and runs them through wclient (the sandboxed worker);
 * it appends response bytes to the job's output buffer and wakes the loop
 * through a pipe. A client that disconnects sets its job's cancel flag,
 * which the generation callback returns to the worker.
 */
#ifndef MLXR_SERVE_H
#define MLXR_SERVE_H

#include <stddef.h>

#include "broker/http.h"

#define SERVE_MAX_LIST 16

typedef struct {
	const char *model_dir;  /* resolved model directory */
	const char *model_id;   /* the name /v1/models reports */
	const char *host;       /* NULL: 127.0.0.1 and ::1 (0.0.0.0 and :: with lan) */
	unsigned port;          /* 0: any free port (printed) */
	int lan;                /* allow a non-loopback bind (needs api_key) */
	const char *api_key;    /* NULL: any Bearer token (or none) is accepted */
	const char *origins[SERVE_MAX_LIST];     /* allowed browser Origins, exact */
	int n_origins;
	const char *allow_hosts[SERVE_MAX_LIST]; /* extra Host names (lan) */
	int n_allow_hosts;
	http_limits lim;
	int max_conns;          /* open connections (default 64) */
	int max_queue;          /* model requests waiting (default 16) */
	double read_timeout;    /* a request's headers and body (default 10 s) */
	double idle_timeout;    /* keep-alive idle, and a stalled reader (default 60 s) */
	double deadline;        /* a request from arrival to its last byte (default 600 s) */
	int ctx;                /* context tokens (0: 4096, capped by the model) */
	int log_prompts;        /* request log includes the request body */
} serve_opts;

void serve_opts_default(serve_opts *o);
/* Runs until SIGINT/SIGTERM. 0 on a clean stop; -1 with err (bind
 * failure, model failed to load). */
int serve_run(const serve_opts *o, char *err, size_t errlen);

#endif

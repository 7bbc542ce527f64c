/* broker/serve.c — the event loop, the connection state machine, the
 * policy checks, the request queue and the generation thread of
 * `mlxr serve` (see serve.h for the threads, openai.c for the API). */
#include "broker/serve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "broker/serve_int.h"

/* A client more than this far behind the generation makes the generation
 * thread wait (bounded memory per connection, whatever the client does). */
#define SJ_MAX_PENDING (4u << 20)
/* After an error answer with Connection: close, unread request bytes are
 * discarded for up to this long so the client sees the answer, not a RST. */
#define LINGER_S 2.0

typedef enum { C_FREE, C_READ, C_BODY, C_BUSY, C_LINGER } cstate;

typedef struct {
	int fd;
	cstate st;
	char *in;
	size_t in_len, in_cap;
	size_t need;        /* header_len + content_length of the current request */
	int idle;           /* C_READ: no byte of the next request yet */
	int fresh;          /* accepted after this iteration's poll: its revents are not its own */
	double t_timer;     /* read / idle / linger deadline */
	double t_req;       /* when the current request's first byte arrived */
	double t_progress;  /* last time output moved or none was waiting (C_BUSY) */
	jw_buf out;         /* an answer the loop wrote itself */
	size_t out_off;
	sjob *job;
	int keep_alive, close_after;
	char origin[256];   /* the allowed Origin of the current request */
	/* request log */
	char peer[64], method[16], path[160];
	int status, logged;
	char *log_body;     /* --log-prompts: the request body */
} conn;

typedef struct server {
	const serve_opts *o;
	int lfd[2], n_lfd;
	unsigned port;
	int wake[2];
	conn *c;
	int n_open;
	unsigned char key_hash[crypto_generichash_BYTES];
	pthread_mutex_t mu;
	pthread_cond_t work, drained;
	sjob *qhead, *qtail;
	int n_queued, stop, ready, load_failed;
	char load_err[600];
	wclient_info info;
	pthread_t gen;
} server;

static volatile sig_atomic_t g_signal;
static int g_wake_fd = -1;

static void on_signal(int sig)
{
	g_signal = sig;
	if (g_wake_fd >= 0) {
		ssize_t r = write(g_wake_fd, "s", 1);
		(void)r;
	}
}

double serve_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void serve_opts_default(serve_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->port = 11435;
	http_limits_default(&o->lim);
	o->max_conns = 64;
	o->max_queue = 16;
	o->read_timeout = 10;
	o->idle_timeout = 60;
	o->deadline = 600;
}

void serve_head(jw_buf *w, int status, const char *ctype, long clen, int keep_alive, const char *origin)
{
	jw_fmt(w, "HTTP/1.1 %d %s\r\n", status, http_reason(status));
	if (ctype)
		jw_fmt(w, "Content-Type: %s\r\n", ctype);
	if (clen >= 0)
		jw_fmt(w, "Content-Length: %ld\r\n", clen);
	else
		jw_cstr(w, "Transfer-Encoding: chunked\r\n");
	jw_cstr(w, keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n");
	jw_cstr(w, "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n");
	/* Never a wildcard: only an allowlisted Origin is echoed back. */
	if (origin && origin[0])
		jw_fmt(w, "Access-Control-Allow-Origin: %s\r\nVary: Origin\r\n", origin);
}

static void wake(server *s)
{
	ssize_t r = write(s->wake[1], "w", 1);
	(void)r; /* a full pipe already means "wake up" */
}

/* ---- generation thread side ---- */

void sj_write(sjob *j, const char *p, size_t n)
{
	server *s = j->srv;
	pthread_mutex_lock(&s->mu);
	while (j->out.len - j->out_off > SJ_MAX_PENDING && !j->cancelled && !s->stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 200000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&s->drained, &s->mu, &ts);
		if (serve_now() > j->t_deadline) {
			j->timed_out = 1;
			break;
		}
	}
	/* After the deadline the error event and the stream's end still go
	 * out; after a disconnect nothing does. */
	if (!j->cancelled)
		jw_raw(&j->out, p, n);
	pthread_mutex_unlock(&s->mu);
	wake(s);
}

int sj_stop(sjob *j)
{
	server *s = j->srv;
	pthread_mutex_lock(&s->mu);
	if (serve_now() > j->t_deadline)
		j->timed_out = 1;
	int r = j->cancelled || j->timed_out || s->stop || j->out.oom;
	pthread_mutex_unlock(&s->mu);
	return r;
}

void sj_note(sjob *j, int status, size_t pt, size_t ct)
{
	pthread_mutex_lock(&j->srv->mu);
	j->status = status;
	j->prompt_tokens = pt;
	j->completion_tokens = ct;
	pthread_mutex_unlock(&j->srv->mu);
}

static void job_free(sjob *j)
{
	json_free(&j->doc);
	oai_call_free(&j->call);
	jw_free(&j->out);
	free(j);
}

static void *gen_main(void *arg)
{
	server *s = arg;
	wclient_opts wo;
	memset(&wo, 0, sizeof(wo));
	wo.ctx = s->o->ctx;
	wclient *w = NULL;
	wc_error e;
	if (wclient_start(&w, s->o->model_dir, &wo, &e)) {
		pthread_mutex_lock(&s->mu);
		s->load_failed = 1;
		snprintf(s->load_err, sizeof(s->load_err), "%s", e.msg);
		pthread_mutex_unlock(&s->mu);
		wake(s);
		w = NULL;
	} else {
		pthread_mutex_lock(&s->mu);
		s->info = *wclient_info_get(w);
		s->ready = 1;
		pthread_mutex_unlock(&s->mu);
		wake(s);
	}
	for (;;) {
		pthread_mutex_lock(&s->mu);
		while (!s->qhead && !s->stop)
			pthread_cond_wait(&s->work, &s->mu);
		if (s->stop) {
			/* Whatever still waits is answered by nobody: mark it done
			 * so its connection frees it, or free it if orphaned. */
			while (s->qhead) {
				sjob *j = s->qhead;
				s->qhead = j->next;
				if (j->orphan)
					job_free(j);
				else
					j->done = 1;
			}
			s->qtail = NULL;
			pthread_mutex_unlock(&s->mu);
			break;
		}
		sjob *j = s->qhead;
		s->qhead = j->next;
		if (!s->qhead)
			s->qtail = NULL;
		s->n_queued--;
		j->running = 1;
		pthread_mutex_unlock(&s->mu);
		if (!sj_stop(j) && w)
			oai_run(w, s->o->model_id, j);
		pthread_mutex_lock(&s->mu);
		if (j->timed_out && !j->cancelled && j->out.len == 0 && j->status == 0) {
			/* Timed out before a byte was written: a real 408. */
			oai_err er;
			oai_err_set(&er, 408, "timeout_error", "timeout", NULL,
				    "the request did not finish within the server's deadline");
			jw_buf b = { 0 };
			oai_error_body(&b, &er);
			serve_head(&j->out, 408, "application/json", (long)b.len, 0, j->origin);
			jw_cstr(&j->out, "\r\n");
			jw_raw(&j->out, b.buf, b.len);
			jw_free(&b);
			j->status = 408;
			j->keep_alive = 0;
		}
		j->running = 0;
		j->done = 1;
		int orphan = j->orphan;
		if (orphan)
			job_free(j);
		pthread_mutex_unlock(&s->mu);
		wake(s);
	}
	wclient_stop(w);
	return NULL;
}

/* ---- loop thread: connections ---- */

static void log_request(server *s, conn *c, sjob *j)
{
	if (c->logged || !c->method[0])
		return;
	c->logged = 1;
	size_t pt = 0, ct = 0;
	int status = c->status;
	if (j) {
		pthread_mutex_lock(&s->mu);
		pt = j->prompt_tokens;
		ct = j->completion_tokens;
		if (j->status)
			status = j->status;
		if (!j->done)
			status = 499; /* the client left before the answer was complete */
		pthread_mutex_unlock(&s->mu);
	}
	char ts[32];
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
	fprintf(stderr, "%s %s %s %s %d prompt_tokens=%zu completion_tokens=%zu %.3fs%s%s\n", ts, c->peer, c->method,
		c->path, status, pt, ct, serve_now() - c->t_req, c->log_body ? " body=" : "",
		c->log_body ? c->log_body : "");
	fflush(stderr);
}

static void conn_close(server *s, conn *c)
{
	sjob *j = c->job;
	log_request(s, c, j);
	if (j) {
		pthread_mutex_lock(&s->mu);
		int done = j->done;
		if (!done && !j->running) {
			/* Still queued: leave the queue now, so the slot is free
			 * for the next client at once. */
			sjob **pp = &s->qhead, *prev = NULL;
			while (*pp && *pp != j) {
				prev = *pp;
				pp = &(*pp)->next;
			}
			if (*pp) {
				*pp = j->next;
				if (s->qtail == j)
					s->qtail = prev;
				s->n_queued--;
				done = 1;
			}
		}
		if (!done) {
			j->cancelled = 1; /* the generation callback returns nonzero */
			j->orphan = 1;
			pthread_cond_broadcast(&s->drained);
		}
		pthread_mutex_unlock(&s->mu);
		if (done)
			job_free(j);
	}
	close(c->fd);
	free(c->in);
	jw_free(&c->out);
	free(c->log_body);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
	c->st = C_FREE;
	s->n_open--;
}

static void begin_linger(conn *c, double now)
{
	shutdown(c->fd, SHUT_WR);
	c->st = C_LINGER;
	c->t_timer = now + LINGER_S;
}

/* The loop's own answer: status, JSON body; queued in c->out. */
static void respond(conn *c, int status, const char *body, size_t n, int close_after, const char *extra)
{
	c->out.len = 0;
	c->out_off = 0;
	if (close_after)
		c->close_after = 1;
	serve_head(&c->out, status, "application/json", (long)n, c->keep_alive && !c->close_after, c->origin);
	if (extra)
		jw_cstr(&c->out, extra);
	jw_cstr(&c->out, "\r\n");
	jw_raw(&c->out, body, n);
	c->status = status;
	c->st = C_BUSY;
	c->t_progress = serve_now();
}

static void respond_err(conn *c, const oai_err *e, int close_after, const char *extra)
{
	jw_buf b = { 0 };
	oai_error_body(&b, e);
	if (jw_finish(&b) == 0)
		respond(c, e->status, b.buf, b.len, close_after, extra);
	else
		respond(c, 500, "{}", 2, 1, NULL);
	jw_free(&b);
}

static void reject(conn *c, int status, const char *type, const char *code, const char *msg, int close_after)
{
	oai_err e;
	oai_err_set(&e, status, type, code, NULL, "%s", msg);
	respond_err(c, &e, close_after, NULL);
}

static int origin_allowed(server *s, http_str o)
{
	for (int i = 0; i < s->o->n_origins; i++)
		if (strlen(s->o->origins[i]) == o.n && !memcmp(s->o->origins[i], o.p, o.n))
			return 1;
	return 0;
}

static int host_allowed(server *s, http_str h)
{
	if (http_host_is_loopback(h, s->port))
		return 1;
	if (!s->o->lan)
		return 0;
	/* --lan: an IP literal cannot be DNS-rebound; names must be listed. */
	http_str name;
	unsigned port;
	if (http_host_split(h, &name, &port) || port != s->port || name.n >= 64)
		return 0;
	char buf[64];
	unsigned char addr[16];
	if (name.p[0] == '[') {
		memcpy(buf, name.p + 1, name.n - 2);
		buf[name.n - 2] = 0;
		if (inet_pton(AF_INET6, buf, addr) == 1)
			return 1;
	} else {
		memcpy(buf, name.p, name.n);
		buf[name.n] = 0;
		if (inet_pton(AF_INET, buf, addr) == 1)
			return 1;
	}
	for (int i = 0; i < s->o->n_allow_hosts; i++)
		if (http_str_ieq(name, s->o->allow_hosts[i]))
			return 1;
	return 0;
}

/* Constant time: both sides hashed, the hashes compared with sodium_memcmp. */
static int key_ok(server *s, http_str auth)
{
	http_str tok;
	if (!s->o->api_key)
		return 1; /* the official client always sends some Bearer token */
	if (!auth.p || http_bearer(auth, &tok))
		return 0;
	unsigned char h[crypto_generichash_BYTES];
	crypto_generichash(h, sizeof(h), (const unsigned char *)tok.p, tok.n, NULL, 0);
	return sodium_memcmp(h, s->key_hash, sizeof(h)) == 0;
}

typedef enum { R_HEALTH, R_MODELS, R_MODEL, R_CHAT, R_COMPLETION, R_RESPONSES, R_TOKENIZE, R_DETOKENIZE, R_COUNT } route;

static const struct {
	const char *path;
	int prefix;
	http_method method;
} routes[R_COUNT] = {
	[R_HEALTH] = { "/health", 0, HTTP_M_GET },
	[R_MODELS] = { "/v1/models", 0, HTTP_M_GET },
	[R_MODEL] = { "/v1/models/", 1, HTTP_M_GET },
	[R_CHAT] = { "/v1/chat/completions", 0, HTTP_M_POST },
	[R_COMPLETION] = { "/v1/completions", 0, HTTP_M_POST },
	[R_RESPONSES] = { "/v1/responses", 0, HTTP_M_POST },
	[R_TOKENIZE] = { "/tokenize", 0, HTTP_M_POST },
	[R_DETOKENIZE] = { "/detokenize", 0, HTTP_M_POST },
};

static int find_route(http_str path)
{
	for (int r = 0; r < R_COUNT; r++) {
		size_t n = strlen(routes[r].path);
		if (routes[r].prefix ? (path.n > n && !memcmp(path.p, routes[r].path, n))
				     : (path.n == n && !memcmp(path.p, routes[r].path, n)))
			return r;
	}
	return -1;
}

static void grow_in(conn *c, size_t want)
{
	if (c->in_cap >= want)
		return;
	char *p = realloc(c->in, want);
	if (!p)
		return; /* the read below gets no room; the timeout ends it */
	c->in = p;
	c->in_cap = want;
}

/* Checks on the header section alone, before a byte of the body is read.
 * Every rejection here closes the connection (the body is not read). */
static void on_headers(server *s, conn *c, const http_request *r)
{
	const http_limits *lim = &s->o->lim;
	c->keep_alive = r->keep_alive;
	snprintf(c->method, sizeof(c->method), "%.*s", (int)r->method_str.n, r->method_str.p);
	snprintf(c->path, sizeof(c->path), "%.*s", (int)(r->path.n < 150 ? r->path.n : 150), r->path.p);
	c->need = r->header_len + (r->has_length ? r->content_length : 0);
	if (!r->host.p || !host_allowed(s, r->host)) {
		reject(c, 403, "invalid_request_error", "host_not_allowed",
		       "the Host header must name this server by a loopback name or address and its port", 1);
		return;
	}
	if (r->origin.p) {
		if (!origin_allowed(s, r->origin)) {
			reject(c, 403, "invalid_request_error", "origin_not_allowed",
			       "this Origin is not allowed (see --allow-origin)", 1);
			return;
		}
		snprintf(c->origin, sizeof(c->origin), "%.*s", (int)r->origin.n, r->origin.p);
	}
	int rt = find_route(r->path);
	if (r->method == HTTP_M_OPTIONS) {
		/* CORS preflight: only for an allowlisted Origin (checked above). */
		c->close_after = r->has_length && r->content_length > 0;
		const char *extra = c->origin[0] ? "Access-Control-Allow-Methods: GET, POST, OPTIONS\r\n"
						   "Access-Control-Allow-Headers: Authorization, Content-Type, "
						   "OpenAI-Organization, OpenAI-Project, X-Stainless-Arch, "
						   "X-Stainless-Lang, X-Stainless-OS, X-Stainless-Package-Version, "
						   "X-Stainless-Retry-Count, X-Stainless-Runtime, "
						   "X-Stainless-Runtime-Version, X-Stainless-Timeout\r\n"
						   "Access-Control-Max-Age: 600\r\n"
						 : "Allow: GET, POST, OPTIONS\r\n";
		respond(c, 204, "", 0, c->close_after, extra);
		return;
	}
	if (rt != R_HEALTH && !key_ok(s, r->authorization)) {
		reject(c, 401, "invalid_request_error", "invalid_api_key",
		       "a valid API key is required: Authorization: Bearer KEY", 1);
		return;
	}
	if (rt < 0) {
		reject(c, 404, "invalid_request_error", "not_found", "no such endpoint", 1);
		return;
	}
	if (r->method != routes[rt].method) {
		oai_err e;
		oai_err_set(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "use %s on %s",
			    routes[rt].method == HTTP_M_GET ? "GET" : "POST", routes[rt].path);
		respond_err(c, &e, 1, routes[rt].method == HTTP_M_GET ? "Allow: GET\r\n" : "Allow: POST\r\n");
		return;
	}
	if (r->method == HTTP_M_POST && (!r->content_type.p || !http_is_json_type(r->content_type))) {
		reject(c, 415, "invalid_request_error", "unsupported_media_type",
		       "the request body must be Content-Type: application/json", 1);
		return;
	}
	c->st = C_BODY;
	grow_in(c, c->need > lim->max_header_bytes + 1 ? c->need : lim->max_header_bytes + 1);
}

static void dispatch(server *s, conn *c, const http_request *r)
{
	int rt = find_route(r->path);
	pthread_mutex_lock(&s->mu);
	int ready = s->ready;
	pthread_mutex_unlock(&s->mu);
	const char *body = c->in + r->header_len;
	size_t blen = r->has_length ? r->content_length : 0;
	if (rt == R_HEALTH) {
		if (ready)
			respond(c, 200, "{\"status\":\"ok\"}", 15, 0, NULL);
		else
			reject(c, 503, "unavailable_error", "model_loading", "Loading model", 0);
		return;
	}
	if (rt == R_MODELS || rt == R_MODEL) {
		if (!ready) {
			reject(c, 503, "unavailable_error", "model_loading", "Loading model", 0);
			return;
		}
		jw_buf b = { 0 };
		char id[160];
		snprintf(id, sizeof(id), "%.*s", (int)(r->path.n - 11 < 150 ? r->path.n - 11 : 150), r->path.p + 11);
		if (oai_models_body(&b, s->o->model_id, &s->info, rt == R_MODEL ? id : NULL)) {
			reject(c, 404, "invalid_request_error", "model_not_found", "no such model", 0);
		} else if (jw_finish(&b) == 0) {
			respond(c, 200, b.buf, b.len, 0, NULL);
		}
		jw_free(&b);
		return;
	}
	static const oai_kind kinds[R_COUNT] = { [R_CHAT] = OAI_CHAT, [R_COMPLETION] = OAI_COMPLETION,
						 [R_RESPONSES] = OAI_RESPONSES, [R_TOKENIZE] = OAI_TOKENIZE,
						 [R_DETOKENIZE] = OAI_DETOKENIZE };
	sjob *j = calloc(1, sizeof(*j));
	oai_err e;
	char jerr[200];
	if (!j) {
		reject(c, 500, "server_error", NULL, "out of memory", 1);
		return;
	}
	if (s->o->log_prompts) {
		jw_buf lb = { 0 };
		jw_str(&lb, body, blen);
		if (jw_finish(&lb) == 0)
			c->log_body = lb.buf;
		else
			jw_free(&lb);
	}
	if (json_parse(body, blen, &j->doc, jerr, sizeof(jerr))) {
		free(j);
		oai_err_set(&e, 400, "invalid_request_error", "invalid_json", NULL, "the body is not valid JSON: %s",
			    jerr);
		respond_err(c, &e, 0, NULL);
		return;
	}
	if (!j->doc.root || j->doc.root->type != JSON_OBJECT) {
		oai_err_set(&e, 400, "invalid_request_error", "invalid_json", NULL, "the body must be a JSON object");
		goto fail;
	}
	if (oai_parse(kinds[rt], j->doc.root, &j->call, &e))
		goto fail;
	j->srv = s;
	j->keep_alive = c->keep_alive;
	snprintf(j->origin, sizeof(j->origin), "%s", c->origin);
	j->t_deadline = c->t_req + s->o->deadline;
	pthread_mutex_lock(&s->mu);
	if (s->n_queued >= s->o->max_queue) {
		pthread_mutex_unlock(&s->mu);
		oai_err_set(&e, 429, "rate_limit_exceeded", "queue_full", NULL,
			    "the server's request queue is full (%d waiting); retry later", s->o->max_queue);
		goto fail;
	}
	if (s->qtail)
		s->qtail->next = j;
	else
		s->qhead = j;
	s->qtail = j;
	s->n_queued++;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->mu);
	c->job = j;
	c->st = C_BUSY;
	c->t_progress = serve_now();
	return;
fail:
	json_free(&j->doc);
	oai_call_free(&j->call);
	free(j);
	respond_err(c, &e, 0, NULL);
}

/* Parses what is buffered; moves the connection on when a request is
 * complete. Loops for pipelined requests only through finish(). */
static void try_parse(server *s, conn *c)
{
	http_request r;
	if (c->st == C_READ) {
		http_parse_result pr = http_parse(c->in, c->in_len, &s->o->lim, &r);
		if (pr == HTTP_PARSE_MORE)
			return;
		if (pr == HTTP_PARSE_ERROR) {
			snprintf(c->method, sizeof(c->method), "-");
			snprintf(c->path, sizeof(c->path), "-");
			reject(c, r.status, "invalid_request_error", NULL, r.why, 1);
			return;
		}
		on_headers(s, c, &r);
	}
	if (c->st == C_BODY && c->in_len >= c->need) {
		/* Re-parse: the buffer may have moved while the body was read. */
		if (http_parse(c->in, c->in_len, &s->o->lim, &r) != HTTP_PARSE_OK) {
			reject(c, 500, "server_error", NULL, "internal error: request changed", 1);
			return;
		}
		dispatch(s, c, &r);
	}
}

/* The current answer is fully written: log, then keep-alive or close. */
static void finish(server *s, conn *c, double now)
{
	sjob *j = c->job;
	int ka = c->keep_alive && !c->close_after;
	if (j)
		ka = ka && j->keep_alive;
	log_request(s, c, j);
	if (j) {
		job_free(j);
		c->job = NULL;
	}
	free(c->log_body);
	c->log_body = NULL;
	if (!ka) {
		begin_linger(c, now);
		return;
	}
	size_t used = c->need < c->in_len ? c->need : c->in_len;
	memmove(c->in, c->in + used, c->in_len - used);
	c->in_len -= used;
	if (c->in_cap > 64 * 1024 && c->in_len < 16 * 1024) {
		/* Keep memory flat: give back a body-sized buffer. */
		char *p = realloc(c->in, 16 * 1024 + 1);
		if (p) {
			c->in = p;
			c->in_cap = 16 * 1024 + 1;
		}
	}
	if (c->out.cap > 64 * 1024) {
		jw_free(&c->out);
		memset(&c->out, 0, sizeof(c->out));
	}
	c->out.len = c->out_off = 0;
	c->st = C_READ;
	c->idle = c->in_len == 0;
	c->t_req = now;
	c->t_timer = now + (c->idle ? s->o->idle_timeout : s->o->read_timeout);
	c->need = 0;
	c->method[0] = 0;
	c->logged = 0;
	c->status = 0;
	c->origin[0] = 0;
	c->close_after = 0;
	if (!c->idle)
		try_parse(s, c);
}

/* Writes what is pending; returns -1 when the connection must close. */
static int flush(server *s, conn *c, double now)
{
	while (c->out_off < c->out.len) {
		ssize_t n = send(c->fd, c->out.buf + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
		c->out_off += (size_t)n;
		c->t_progress = now;
	}
	int done = 1;
	if (c->job) {
		sjob *j = c->job;
		pthread_mutex_lock(&s->mu);
		int err = 0;
		while (j->out_off < j->out.len) {
			ssize_t n = send(c->fd, j->out.buf + j->out_off, j->out.len - j->out_off, MSG_NOSIGNAL);
			if (n < 0) {
				err = !(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
				break;
			}
			j->out_off += (size_t)n;
			c->t_progress = now;
		}
		if (j->out_off == j->out.len) {
			j->out.len = j->out_off = 0;
			if (j->out.cap > SJ_MAX_PENDING) {
				jw_free(&j->out);
				memset(&j->out, 0, sizeof(j->out));
			}
			pthread_cond_broadcast(&s->drained);
		}
		done = j->done && j->out.len == 0;
		if (j->out.len == 0 && c->out_off == c->out.len)
			c->t_progress = now; /* nothing waits: see on_timers */
		pthread_mutex_unlock(&s->mu);
		if (err)
			return -1;
	} else if (c->out_off == c->out.len) {
		c->t_progress = now;
	}
	if (done && c->out_off == c->out.len)
		finish(s, c, now);
	return 0;
}

static void on_readable(server *s, conn *c, double now)
{
	if (c->st == C_LINGER) {
		char junk[16384];
		ssize_t n = recv(c->fd, junk, sizeof(junk), 0);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			conn_close(s, c);
		return;
	}
	size_t cap = c->st == C_BODY ? c->need : s->o->lim.max_header_bytes + 1;
	if (c->in_len >= cap)
		return;
	grow_in(c, cap < 16 * 1024 + 1 ? cap : (c->st == C_BODY ? cap : s->o->lim.max_header_bytes + 1));
	size_t room = (c->in_cap < cap ? c->in_cap : cap) - c->in_len;
	if (room == 0)
		return;
	ssize_t n = recv(c->fd, c->in + c->in_len, room, 0);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
		conn_close(s, c);
		return;
	}
	if (n < 0)
		return;
	if (c->idle) {
		c->idle = 0;
		c->t_req = now;
		c->t_timer = now + s->o->read_timeout;
	}
	c->in_len += (size_t)n;
	try_parse(s, c);
}

static void on_timers(server *s, conn *c, double now)
{
	switch (c->st) {
	case C_READ:
	case C_BODY:
		if (now < c->t_timer)
			return;
		if (c->idle) { /* keep-alive idle: close quietly */
			conn_close(s, c);
			return;
		}
		if (!c->method[0]) {
			snprintf(c->method, sizeof(c->method), "-");
			snprintf(c->path, sizeof(c->path), "-");
		}
		reject(c, 408, "invalid_request_error", "request_timeout",
		       "the request was not received within the read timeout", 1);
		return;
	case C_BUSY: {
		int pending = c->out_off < c->out.len;
		if (c->job) {
			pthread_mutex_lock(&s->mu);
			pending = pending || c->job->out_off < c->job->out.len;
			pthread_mutex_unlock(&s->mu);
		}
		/* A client that stopped reading, or a job far past its deadline.
		 * t_progress is the last time output moved or none was waiting
		 * (flush, just before this, sets it), so the clock runs only while
		 * the client leaves output unread: never while the request waits
		 * in the queue or generates, however long that takes. (It was the
		 * time of dispatch: output appended between flush and this check,
		 * after a generation longer than --idle-timeout, closed the
		 * connection without its answer.) */
		if ((pending && now - c->t_progress > s->o->idle_timeout) ||
		    (c->job && now > c->job->t_deadline + 30))
			conn_close(s, c);
		return;
	}
	case C_LINGER:
		if (now >= c->t_timer)
			conn_close(s, c);
		return;
	default:
		return;
	}
}

/* 1 when the client has closed its side and nothing it sent is left
 * unread: the connection can never carry another request. */
static int peer_gone(int fd)
{
	char b;
	ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* At the limit, before a newcomer is refused: free the slots of
 * connections whose client has already closed but whose end the loop has
 * not read yet (it came after this iteration's poll, or poll reported it
 * but the loop handles connections after accepting). A client that closes
 * its connections and opens a new one must not get a 503 for the ones it
 * closed. Only connections that owe nothing are freed: waiting for a
 * request with no byte of it buffered, lingering after a final answer,
 * and busy ones whose client left (which the loop cancels anyway). A half
 * request with the end behind it is left to the loop (it may still
 * complete and be answered). */
static void reclaim_closed(server *s)
{
	for (int i = 0; i < s->o->max_conns; i++) {
		conn *c = &s->c[i];
		if (c->st == C_LINGER) {
			/* What it sent after its answer is discarded anyway;
			 * a bounded drain, so a client still sending is left be. */
			char junk[16384];
			ssize_t n = 1;
			for (int k = 0; k < 4 && n > 0; k++)
				n = recv(c->fd, junk, sizeof(junk), MSG_DONTWAIT);
			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
				conn_close(s, c);
		} else if ((c->st == C_READ && c->in_len == 0) || c->st == C_BUSY) {
			if (peer_gone(c->fd))
				conn_close(s, c); /* C_BUSY: cancels its generation */
		}
	}
}

static void accept_all(server *s, int lfd, double now)
{
	int reclaimed = 0;
	for (;;) {
		struct sockaddr_storage sa;
		socklen_t sl = sizeof(sa);
		int fd = accept4(lfd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		if (s->n_open >= s->o->max_conns && !reclaimed) {
			reclaimed = 1; /* once per call: O(max_conns) syscalls, not per newcomer */
			reclaim_closed(s);
		}
		if (s->n_open >= s->o->max_conns) {
			static const char body[] =
				"{\"error\":{\"message\":\"too many open connections\",\"type\":\"unavailable_error\","
				"\"param\":null,\"code\":\"too_many_connections\"}}";
			char busy[512];
			int bn = snprintf(busy, sizeof(busy),
					  "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
					  "Content-Length: %zu\r\nConnection: close\r\nRetry-After: 1\r\n\r\n%s",
					  sizeof(body) - 1, body);
			ssize_t r = send(fd, busy, (size_t)bn, MSG_NOSIGNAL);
			(void)r;
			shutdown(fd, SHUT_WR);
			close(fd);
			fprintf(stderr, "mlxr serve: connection refused: %d open (--max-connections)\n", s->n_open);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		conn *c = NULL;
		for (int i = 0; i < s->o->max_conns; i++)
			if (s->c[i].st == C_FREE) {
				c = &s->c[i];
				break;
			}
		memset(c, 0, sizeof(*c));
		c->fd = fd;
		c->fresh = 1;
		c->st = C_READ;
		c->t_req = now;
		c->t_timer = now + s->o->read_timeout;
		char host[INET6_ADDRSTRLEN] = "?";
		if (sa.ss_family == AF_INET)
			inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, host, sizeof(host));
		else if (sa.ss_family == AF_INET6)
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, host, sizeof(host));
		snprintf(c->peer, sizeof(c->peer), "%s", host);
		s->n_open++;
	}
}

/* ---- listening ---- */

static int is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(a) ||
		       (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return 0;
}

static int listen_on(server *s, const char *addr, unsigned port, int lan, char *err, size_t errlen)
{
	struct addrinfo hints = { 0 }, *ai;
	hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE | AI_NUMERICSERV;
	hints.ai_socktype = SOCK_STREAM;
	char ps[8];
	snprintf(ps, sizeof(ps), "%u", port);
	int rc = getaddrinfo(addr, ps, &hints, &ai);
	if (rc) {
		snprintf(err, errlen, "--host %s: not a numeric IP address (%s)", addr, gai_strerror(rc));
		return -1;
	}
	if (!lan && !is_loopback(ai->ai_addr)) {
		snprintf(err, errlen, "--host %s is not a loopback address; use --lan (with an API key) to serve "
			 "other machines", addr);
		freeaddrinfo(ai);
		return -1;
	}
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	if (fd >= 0) {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (ai->ai_family == AF_INET6)
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	}
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128)) {
		snprintf(err, errlen, "cannot listen on %s port %u: %s", addr, port, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	struct sockaddr_storage sa;
	socklen_t sl = sizeof(sa);
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	s->port = ntohs(sa.ss_family == AF_INET ? ((struct sockaddr_in *)&sa)->sin_port
						 : ((struct sockaddr_in6 *)&sa)->sin6_port);
	s->lfd[s->n_lfd++] = fd;
	fprintf(stderr, "mlxr serve: listening on http://%s%s%s:%u\n", strchr(addr, ':') ? "[" : "", addr,
		strchr(addr, ':') ? "]" : "", s->port);
	return 0;
}

static int open_listeners(server *s, char *err, size_t errlen)
{
	const serve_opts *o = s->o;
	if (o->host)
		return listen_on(s, o->host, o->port, o->lan, err, errlen);
	const char *v4 = o->lan ? "0.0.0.0" : "127.0.0.1", *v6 = o->lan ? "::" : "::1";
	if (listen_on(s, v4, o->port, o->lan, err, errlen))
		return -1;
	/* The v6 twin on the same port; a host without IPv6 serves v4 only. */
	char e2[256];
	if (listen_on(s, v6, s->port, o->lan, e2, sizeof(e2)))
		fprintf(stderr, "mlxr serve: not listening on %s: %s\n", v6, e2);
	return 0;
}

int serve_run(const serve_opts *o, char *err, size_t errlen)
{
	server *s = calloc(1, sizeof(*s));
	if (!s || sodium_init() < 0) {
		snprintf(err, errlen, "out of memory / libsodium init failed");
		free(s);
		return -1;
	}
	s->o = o;
	s->wake[0] = s->wake[1] = -1;
	if (o->api_key)
		crypto_generichash(s->key_hash, sizeof(s->key_hash), (const unsigned char *)o->api_key,
				   strlen(o->api_key), NULL, 0);
	s->c = calloc((size_t)o->max_conns, sizeof(conn));
	struct pollfd *pf = calloc((size_t)o->max_conns + 3, sizeof(*pf));
	int rc = -1, gen_started = 0;
	if (!s->c || !pf) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	for (int i = 0; i < o->max_conns; i++)
		s->c[i].fd = -1;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->work, NULL);
	pthread_cond_init(&s->drained, NULL);
	if (pipe2(s->wake, O_NONBLOCK | O_CLOEXEC)) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		goto out;
	}
	if (open_listeners(s, err, errlen))
		goto out;
	g_wake_fd = s->wake[1];
	struct sigaction sa = { 0 };
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	fprintf(stderr, "mlxr serve: loading %s\n", o->model_id);
	/* The generation thread loads the model; /health is 503 until then. */
	if (pthread_create(&s->gen, NULL, gen_main, s)) {
		snprintf(err, errlen, "cannot start the generation thread");
		goto out;
	}
	gen_started = 1;
	int announced = 0;
	while (!g_signal) {
		int n = 0;
		pf[n++] = (struct pollfd){ s->wake[0], POLLIN, 0 };
		for (int i = 0; i < s->n_lfd; i++)
			pf[n++] = (struct pollfd){ s->lfd[i], POLLIN, 0 };
		int base = n;
		for (int i = 0; i < o->max_conns; i++) {
			conn *c = &s->c[i];
			short ev = 0;
			c->fresh = 0;
			if (c->st == C_READ || c->st == C_BODY || c->st == C_LINGER)
				ev = POLLIN;
			else if (c->st == C_BUSY)
				ev = POLLRDHUP | POLLOUT; /* POLLOUT only matters with output pending */
			if (c->st == C_BUSY) {
				int pending = c->out_off < c->out.len;
				if (c->job) {
					pthread_mutex_lock(&s->mu);
					pending = pending || c->job->out_off < c->job->out.len;
					pthread_mutex_unlock(&s->mu);
				}
				if (!pending)
					ev = POLLRDHUP;
			}
			pf[base + i] = (struct pollfd){ c->st == C_FREE ? -1 : c->fd, ev, 0 };
		}
		n = base + o->max_conns;
		if (poll(pf, (nfds_t)n, 250) < 0 && errno != EINTR) {
			snprintf(err, errlen, "poll: %s", strerror(errno));
			goto out;
		}
		double now = serve_now();
		if (pf[0].revents & POLLIN) {
			char junk[256];
			while (read(s->wake[0], junk, sizeof(junk)) > 0)
				;
		}
		pthread_mutex_lock(&s->mu);
		int failed = s->load_failed, ready = s->ready;
		pthread_mutex_unlock(&s->mu);
		if (failed) {
			snprintf(err, errlen, "cannot load the model: %s", s->load_err);
			goto out;
		}
		if (ready && !announced) {
			announced = 1;
			fprintf(stderr, "mlxr serve: model ready (%s, context %d tokens, loaded in %.2f s)\n",
				s->info.model_type, s->info.ctx, s->info.load_s);
		}
		for (int i = 0; i < s->n_lfd; i++)
			if (pf[1 + i].revents & POLLIN)
				accept_all(s, s->lfd[i], now);
		for (int i = 0; i < o->max_conns; i++) {
			conn *c = &s->c[i];
			short re = pf[base + i].revents;
			/* A slot freed and refilled by accept_all in this iteration
			 * may hold the same fd number: its revents are the old
			 * connection's. */
			if (c->st == C_FREE || c->fresh || pf[base + i].fd != c->fd)
				continue;
			if (c->st == C_BUSY && (re & (POLLRDHUP | POLLHUP | POLLERR))) {
				conn_close(s, c); /* the client left: cancels its generation */
				continue;
			}
			if (re & (POLLIN | POLLHUP | POLLERR))
				on_readable(s, c, now);
			if (c->st == C_BUSY && flush(s, c, now))
				conn_close(s, c);
			if (c->st != C_FREE)
				on_timers(s, c, now);
		}
	}
	rc = 0;
out:
	if (gen_started) {
		pthread_mutex_lock(&s->mu);
		s->stop = 1;
		for (int i = 0; i < o->max_conns; i++)
			if (s->c[i].job)
				s->c[i].job->cancelled = 1;
		pthread_cond_broadcast(&s->work);
		pthread_cond_broadcast(&s->drained);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->gen, NULL);
	}
	if (s->c)
		for (int i = 0; i < o->max_conns; i++)
			if (s->c[i].st != C_FREE)
				conn_close(s, &s->c[i]);
	g_wake_fd = -1;
	for (int i = 0; i < s->n_lfd; i++)
		close(s->lfd[i]);
	if (s->wake[0] >= 0) {
		close(s->wake[0]);
		close(s->wake[1]);
	}
	if (rc == 0)
		fprintf(stderr, "mlxr serve: stopped (signal %d)\n", (int)g_signal);
	free(pf);
	free(s->c);
	free(s);
	return rc;
}

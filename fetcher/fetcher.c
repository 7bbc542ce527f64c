/* fetcher/fetcher.c — the fetcher's request loop: one IPC_FETCH at a time,
 * HTTPS GET with redirects, body written through the broker's descriptor.
 *
 * Policy enforced here (fetch.h, broker/fclient.h):
 *  - every hop is https (fetch_url_parse refuses http://);
 *  - at most FETCH_MAX_REDIRECTS redirects, and a URL seen twice is a loop;
 *  - Authorization only to token_host:token_port, never to another host a
 *    redirect leads to;
 *  - resume: Range from the file's offset with If-Range; a 200 restarts the
 *    file (truncate), a 206 must start exactly at the offset;
 *  - body bounded by max_bytes and by Content-Length / Content-Range.
 */
#include "fetcher/fint.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RBUF (HTTP1_MAX_HEAD + 64 * 1024)

static char ca_error[512];

typedef struct {
	int sock;
	uint64_t id;
	int kind;
	uint32_t status;
	char err[1024];
} fctx;

static int fail(fctx *f, int kind, uint32_t status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(fctx *f, int kind, uint32_t status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(f->err, sizeof(f->err), fmt, ap);
	va_end(ap);
	f->kind = kind;
	f->status = status;
	return -1;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int send_event(fctx *f, const fetch_event *e)
{
	uint8_t buf[1024];
	ipc_wr w;
	ipc_wr_init(&w, buf, sizeof(buf));
	fetch_event_encode(e, &w);
	return w.bad ? -1 : ipc_send(f->sock, IPC_EVENT, f->id, buf, w.len, NULL, 0);
}

/* Header values we put on the wire: printable ASCII only (no CR/LF
 * injection from a token or an ETag). */
static int printable(const char *s)
{
	return fetch_ascii(s, 0x20);
}

static int write_at(int fd, const uint8_t *p, size_t n, uint64_t off)
{
	while (n) {
		ssize_t w = pwrite(fd, p, n, (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w, n -= (size_t)w, off += (uint64_t)w;
	}
	return 0;
}

/* One GET on an open connection: the body goes to fd from *off. Returns
 * 0 done, 1 redirect (loc filled), -1 error. */
static int get_once(fctx *f, tls_conn *c, const fetch_url *u, const fetch_req *rq, int fd, uint64_t *off,
		    uint8_t *buf, char *loc, size_t loclen, fetch_done *d)
{
	char req[FETCH_URL_MAX + 2048], hostport[FETCH_HOST_MAX + 8];
	if (u->port == 443)
		snprintf(hostport, sizeof(hostport), "%s", u->host);
	else
		snprintf(hostport, sizeof(hostport), "%s:%u", u->host, (unsigned)u->port);
	int n = snprintf(req, sizeof(req),
			 "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: mlxr-fetcher/1\r\nAccept: */*\r\n"
			 "Accept-Encoding: identity\r\nConnection: close\r\n",
			 u->path, hostport);
	/* The token goes to the Hub's own host and port only. */
	if ((rq->flags & FETCH_F_TOKEN) && rq->token[0] && !strcmp(u->host, rq->token_host) &&
	    u->port == rq->token_port)
		n += snprintf(req + n, sizeof(req) - (size_t)n, "Authorization: Bearer %s\r\n", rq->token);
	if (*off > 0) {
		n += snprintf(req + n, sizeof(req) - (size_t)n, "Range: bytes=%llu-\r\n", (unsigned long long)*off);
		if (rq->if_range[0])
			n += snprintf(req + n, sizeof(req) - (size_t)n, "If-Range: %s\r\n", rq->if_range);
	}
	n += snprintf(req + n, sizeof(req) - (size_t)n, "\r\n");
	if (n <= 0 || (size_t)n >= sizeof(req))
		return fail(f, FETCH_ERR_URL, 0, "request too long");
	if (tls_write_all(c, req, (size_t)n, f->err, sizeof(f->err))) {
		f->kind = FETCH_ERR_NET;
		return -1;
	}
	/* Head. */
	size_t have = 0;
	http1_resp r;
	int hl = 0;
	while ((hl = http1_parse_head(buf, have, &r, f->err, sizeof(f->err))) == 0) {
		long k = tls_read(c, buf + have, RBUF - have, f->err, sizeof(f->err));
		if (k <= 0) {
			if (k == 0)
				snprintf(f->err, sizeof(f->err), "%s: connection closed before the response header", u->host);
			f->kind = FETCH_ERR_NET;
			return -1;
		}
		have += (size_t)k;
	}
	if (hl < 0) {
		char why[256];
		snprintf(why, sizeof(why), "%.200s", f->err);
		return fail(f, FETCH_ERR_HTTP, 0, "%s: %s", u->host, why);
	}
	if (r.status == 301 || r.status == 302 || r.status == 303 || r.status == 307 || r.status == 308) {
		if (!r.location[0])
			return fail(f, FETCH_ERR_HTTP, (uint32_t)r.status, "%s: redirect without a Location", u->host);
		snprintf(loc, loclen, "%s", r.location);
		return 1;
	}
	if (r.status != 200 && r.status != 206)
		return fail(f, FETCH_ERR_STATUS, (uint32_t)r.status, "%s: HTTP %d", u->host, r.status);
	uint64_t total = 0, expect = 0;
	int known = 0;
	if (r.status == 200) {
		if (*off > 0 && ftruncate(fd, 0))
			return fail(f, FETCH_ERR_IO, 0, "truncating the output file: %s", strerror(errno));
		*off = 0; /* the server sent the whole file: start over */
		if (r.content_length >= 0)
			total = expect = (uint64_t)r.content_length, known = 1;
	} else {
		if (*off == 0 || !r.has_range)
			return fail(f, FETCH_ERR_RANGE, 206, "%s: unexpected partial response", u->host);
		if (r.range_first != *off)
			return fail(f, FETCH_ERR_RANGE, 206,
				    "%s: partial response starts at byte %llu, the file has %llu", u->host,
				    (unsigned long long)r.range_first, (unsigned long long)*off);
		expect = r.range_last - r.range_first + 1;
		known = 1;
		total = r.range_total;
		if (r.content_length >= 0 && (uint64_t)r.content_length != expect)
			return fail(f, FETCH_ERR_HTTP, 206, "%s: Content-Length disagrees with Content-Range", u->host);
	}
	if (!known && !r.chunked)
		return fail(f, FETCH_ERR_HTTP, (uint32_t)r.status, "%s: response without a length", u->host);
	if (rq->max_bytes && ((known && *off + expect > rq->max_bytes) || total > rq->max_bytes))
		return fail(f, FETCH_ERR_LIMIT, (uint32_t)r.status, "%s: response larger than %llu bytes", u->host,
			    (unsigned long long)rq->max_bytes);
	fetch_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.kind = FETCH_EV_HEAD;
	ev.status = (uint32_t)r.status;
	ev.start = *off;
	ev.total = total;
	/* An ETag that is not printable ASCII could not go back as If-Range
	 * (do_fetch refuses it): send none, as for a server without ETags
	 * (the broker's decoder refuses a non-printable one). */
	const char *tag = r.etag[0] ? r.etag : r.linked_etag;
	snprintf(ev.etag, sizeof(ev.etag), "%s", printable(tag) ? tag : "");
	if (send_event(f, &ev))
		return fail(f, FETCH_ERR_IO, 0, "broker gone");
	snprintf(d->etag, sizeof(d->etag), "%s", ev.etag);
	d->status = (uint32_t)r.status;

	/* Body: what followed the head, then the rest. */
	http1_chunked ch;
	http1_chunked_init(&ch);
	uint64_t got = 0;
	size_t pend = have - (size_t)hl;
	memmove(buf, buf + hl, pend);
	double last = now_s();
	for (;;) {
		if (pend) {
			long k = (long)pend;
			if (r.chunked) {
				k = http1_chunked_decode(&ch, buf, pend, f->err, sizeof(f->err));
				if (k < 0) {
					char why[256];
					snprintf(why, sizeof(why), "%.200s", f->err);
					return fail(f, FETCH_ERR_HTTP, (uint32_t)r.status, "%s: %s", u->host, why);
				}
			}
			if (known && got + (uint64_t)k > expect)
				return fail(f, FETCH_ERR_HTTP, (uint32_t)r.status, "%s: more body bytes than announced",
					    u->host);
			if (rq->max_bytes && *off + (uint64_t)k > rq->max_bytes)
				return fail(f, FETCH_ERR_LIMIT, (uint32_t)r.status, "%s: response larger than %llu bytes",
					    u->host, (unsigned long long)rq->max_bytes);
			if (k && write_at(fd, buf, (size_t)k, *off))
				return fail(f, FETCH_ERR_IO, 0, "writing the output file: %s", strerror(errno));
			*off += (uint64_t)k;
			got += (uint64_t)k;
			pend = 0;
			double t = now_s();
			if (t - last >= 0.1) {
				last = t;
				ev.kind = FETCH_EV_PROGRESS;
				ev.done = *off;
				if (send_event(f, &ev))
					return fail(f, FETCH_ERR_IO, 0, "broker gone");
			}
		}
		if (r.chunked ? ch.done : got == expect)
			break;
		long k = tls_read(c, buf, RBUF, f->err, sizeof(f->err));
		if (k <= 0) {
			char why[256];
			snprintf(why, sizeof(why), "%.200s", k == 0 ? "connection closed" : f->err);
			if (r.chunked)
				return fail(f, FETCH_ERR_NET, (uint32_t)r.status, "%s: %s inside the chunked body", u->host,
					    why);
			return fail(f, FETCH_ERR_NET, (uint32_t)r.status, "%s: %s after %llu of %llu bytes", u->host,
				    why, (unsigned long long)got, (unsigned long long)expect);
		}
		pend = (size_t)k;
	}
	d->size = *off;
	return 0;
}

static int do_fetch(fctx *f, const fetch_req *rq, int fd, fetch_done *d)
{
	static uint8_t buf[RBUF];
	static char seen[FETCH_MAX_REDIRECTS + 1][FETCH_URL_MAX];
	char url[FETCH_URL_MAX], loc[FETCH_URL_MAX];
	uint64_t off = (rq->flags & FETCH_F_RESUME) ? rq->offset : 0;
	memset(d, 0, sizeof(*d));
	if (ca_error[0])
		return fail(f, FETCH_ERR_TLS, 0, "%s", ca_error);
	if (!printable(rq->token) || !printable(rq->if_range) || !printable(rq->url))
		return fail(f, FETCH_ERR_URL, 0, "request carries a control byte");
	snprintf(url, sizeof(url), "%s", rq->url);
	for (int hop = 0;; hop++) {
		fetch_url u;
		if (fetch_url_parse(url, &u, f->err, sizeof(f->err))) {
			f->kind = FETCH_ERR_URL;
			return -1;
		}
		fetch_url_format(&u, url, sizeof(url));
		for (int i = 0; i < hop; i++)
			if (!strcmp(seen[i], url))
				return fail(f, FETCH_ERR_REDIRECT, 0, "redirect loop at %.300s", url);
		snprintf(seen[hop], sizeof(seen[hop]), "%s", url);
		tls_conn *c;
		int kind;
		if (tls_open(&c, u.host, u.port, f->err, sizeof(f->err), &kind)) {
			f->kind = kind;
			return -1;
		}
		int r = get_once(f, c, &u, rq, fd, &off, buf, loc, sizeof(loc), d);
		tls_close(c);
		if (r < 0)
			return -1;
		if (r == 0) {
			snprintf(d->final_url, sizeof(d->final_url), "%s", url);
			d->redirects = (uint32_t)hop;
			return 0;
		}
		if (hop + 1 > FETCH_MAX_REDIRECTS)
			return fail(f, FETCH_ERR_REDIRECT, 0, "more than %d redirects", FETCH_MAX_REDIRECTS);
		char next[FETCH_URL_MAX];
		if (fetch_url_join(&u, loc, next, sizeof(next), f->err, sizeof(f->err))) {
			f->kind = FETCH_ERR_URL;
			return -1;
		}
		snprintf(url, sizeof(url), "%s", next);
	}
}

int fetcher_serve(int sock, int ca_fd, const char *ca_path)
{
	if (tls_ca_load(ca_fd, ca_path, ca_error, sizeof(ca_error)) == 0)
		ca_error[0] = 0;
	static ipc_msg m;
	char err[256];
	for (;;) {
		int r = ipc_recv(sock, &m, err, sizeof(err));
		if (r == 1)
			return 0;
		if (r < 0) {
			fprintf(stderr, "mlxr-fetcher: %s\n", err);
			return 1;
		}
		/* Only the broker talks to us; a message we do not expect means
		 * something is wrong: stop. */
		fetch_req rq;
		if (m.type != IPC_FETCH || m.nfds != 1 || fetch_req_decode(&rq, m.payload, m.len)) {
			ipc_close_fds(&m);
			fprintf(stderr, "mlxr-fetcher: malformed request from the broker\n");
			return 1;
		}
		fctx f;
		memset(&f, 0, sizeof(f));
		f.sock = sock;
		f.id = m.id;
		fetch_done d;
		int rc = do_fetch(&f, &rq, m.fds[0], &d);
		memset(rq.token, 0, sizeof(rq.token));
		ipc_close_fds(&m);
		uint8_t buf[FETCH_URL_MAX + 2048];
		ipc_wr w;
		ipc_wr_init(&w, buf, sizeof(buf));
		if (rc == 0)
			fetch_done_encode(&d, &w);
		else
			fetch_error_encode((uint32_t)f.kind, f.status, f.err, &w);
		if (w.bad || ipc_send(sock, rc == 0 ? IPC_DONE : IPC_ERROR, m.id, buf, w.len, NULL, 0))
			return 1;
	}
}

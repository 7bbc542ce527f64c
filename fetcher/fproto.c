/* fetcher/fproto.c — broker<->fetcher message codec (see fetch.h). Each
 * decoder checks every length against its field and the payload's end;
 * strings must be NUL-free and fit their field. The replies (event, done)
 * come from the fetcher, which talks to the network: their numbers are
 * checked against what fetcher.c can send, and their strings are printable
 * ASCII (an ETag goes back on the wire as If-Range, a URL may be shown). */
#include "fetcher/fetch.h"

#include <string.h>

static int get_str(ipc_rd *r, char *dst, size_t cap)
{
	size_t n;
	const uint8_t *p = ipc_get_bytes(r, cap - 1, &n);
	if (!p || memchr(p, 0, n))
		return -1;
	memcpy(dst, p, n);
	dst[n] = 0;
	return 0;
}

int fetch_ascii(const char *s, unsigned char lo)
{
	for (; *s; s++)
		if ((unsigned char)*s < lo || (unsigned char)*s > 0x7e)
			return 0;
	return 1;
}

/* The fetcher reports only a final 200 (whole file, from byte 0) or a 206
 * (a resume, from the partial file's size, never 0); other statuses end
 * as errors (fetch_error). */
static int status_ok(uint32_t status, uint64_t start)
{
	return (status == 200 && start == 0) || (status == 206 && start > 0);
}

static void put_str(ipc_wr *w, const char *s)
{
	ipc_put_bytes(w, s, strlen(s));
}

int fetch_req_encode(const fetch_req *r, ipc_wr *w)
{
	ipc_put_u32(w, FETCH_PROTO_VERSION);
	ipc_put_u32(w, r->flags);
	ipc_put_u64(w, r->offset);
	ipc_put_u64(w, r->max_bytes);
	put_str(w, r->url);
	put_str(w, r->if_range);
	put_str(w, r->token);
	put_str(w, r->token_host);
	ipc_put_u32(w, r->token_port);
	return w->bad ? -1 : 0;
}

int fetch_req_decode(fetch_req *r, const uint8_t *p, size_t n)
{
	ipc_rd rd;
	memset(r, 0, sizeof(*r));
	ipc_rd_init(&rd, p, n);
	if (ipc_get_u32(&rd) != FETCH_PROTO_VERSION)
		return -1;
	r->flags = ipc_get_u32(&rd);
	r->offset = ipc_get_u64(&rd);
	r->max_bytes = ipc_get_u64(&rd);
	if (rd.bad || (r->flags & ~(FETCH_F_RESUME | FETCH_F_TOKEN)) || get_str(&rd, r->url, sizeof(r->url)) ||
	    get_str(&rd, r->if_range, sizeof(r->if_range)) || get_str(&rd, r->token, sizeof(r->token)) ||
	    get_str(&rd, r->token_host, sizeof(r->token_host)))
		return -1;
	uint32_t port = ipc_get_u32(&rd);
	if (rd.bad || rd.left || port > 65535)
		return -1;
	r->token_port = (uint16_t)port;
	return 0;
}

void fetch_event_encode(const fetch_event *e, ipc_wr *w)
{
	ipc_put_u32(w, e->kind);
	ipc_put_u32(w, e->status);
	ipc_put_u64(w, e->start);
	ipc_put_u64(w, e->total);
	ipc_put_u64(w, e->done);
	put_str(w, e->etag);
}

int fetch_event_decode(fetch_event *e, const uint8_t *p, size_t n)
{
	ipc_rd rd;
	memset(e, 0, sizeof(*e));
	ipc_rd_init(&rd, p, n);
	e->kind = ipc_get_u32(&rd);
	e->status = ipc_get_u32(&rd);
	e->start = ipc_get_u64(&rd);
	e->total = ipc_get_u64(&rd);
	e->done = ipc_get_u64(&rd);
	if (rd.bad || get_str(&rd, e->etag, sizeof(e->etag)) || rd.left)
		return -1;
	if (e->kind != FETCH_EV_HEAD && e->kind != FETCH_EV_PROGRESS)
		return -1;
	/* total 0: unknown (chunked, or a Content-Range total of "*"); else the file
	 * holds it all: start <= total (http1 checks last < total) and done
	 * <= total (the fetcher stops at the announced length). PROGRESS:
	 * done counts from start (a HEAD's done is 0). */
	if (!status_ok(e->status, e->start) || (e->total && (e->start > e->total || e->done > e->total)) ||
	    (e->kind == FETCH_EV_PROGRESS && e->done < e->start) || !fetch_ascii(e->etag, 0x20))
		return -1;
	return 0;
}

void fetch_done_encode(const fetch_done *d, ipc_wr *w)
{
	ipc_put_u32(w, d->status);
	ipc_put_u64(w, d->size);
	ipc_put_u32(w, d->redirects);
	put_str(w, d->final_url);
	put_str(w, d->etag);
}

int fetch_done_decode(fetch_done *d, const uint8_t *p, size_t n)
{
	ipc_rd rd;
	memset(d, 0, sizeof(*d));
	ipc_rd_init(&rd, p, n);
	d->status = ipc_get_u32(&rd);
	d->size = ipc_get_u64(&rd);
	d->redirects = ipc_get_u32(&rd);
	if (rd.bad || get_str(&rd, d->final_url, sizeof(d->final_url)) || get_str(&rd, d->etag, sizeof(d->etag)) ||
	    rd.left)
		return -1;
	/* The final URL is what fetch_url_format wrote: "https://" and no
	 * space or control byte. */
	if ((d->status != 200 && d->status != 206) || d->redirects > FETCH_MAX_REDIRECTS ||
	    strncmp(d->final_url, "https://", 8) || !fetch_ascii(d->final_url, 0x21) || !fetch_ascii(d->etag, 0x20))
		return -1;
	return 0;
}

void fetch_error_encode(uint32_t kind, uint32_t status, const char *msg, ipc_wr *w)
{
	ipc_put_u32(w, kind);
	ipc_put_u32(w, status);
	size_t n = strlen(msg);
	ipc_put_bytes(w, msg, n > 1024 ? 1024 : n);
}

int fetch_error_decode(uint32_t *kind, uint32_t *status, char *msg, size_t msglen, const uint8_t *p, size_t n)
{
	ipc_rd rd;
	ipc_rd_init(&rd, p, n);
	*kind = ipc_get_u32(&rd);
	*status = ipc_get_u32(&rd);
	size_t ml;
	const uint8_t *m = ipc_get_bytes(&rd, 1024, &ml);
	if (rd.bad || !m || rd.left || *kind == FETCH_ERR_NONE || *kind >= FETCH_ERR_COUNT || !msglen)
		return -1;
	size_t k = 0;
	for (size_t i = 0; i < ml && k + 1 < msglen; i++)
		msg[k++] = (m[i] >= 0x20 && m[i] < 0x7f) ? (char)m[i] : '?';
	msg[k] = 0;
	return 0;
}

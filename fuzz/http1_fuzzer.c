/* fuzz/http1_fuzzer.c — the fetcher's pure parsers (fetcher/fetch.h) on
 * arbitrary bytes: the HTTP/1.1 response head, the chunked body decoder,
 * URL parsing and redirect joining, and the broker-side decoders of the
 * fetcher's messages (everything the fetcher sends is hostile).
 *
 * The first byte picks the target; the rest is its input. Checked:
 *  - no memory error, leak or UB (sanitizers; exact-size copies);
 *  - head: a complete head is <= HTTP1_MAX_HEAD and <= the input, its
 *    status is 100..599, never both chunked and a Content-Length, every
 *    string NUL-terminated inside its field, and parsing exactly the head
 *    again gives the same verdict; "need more" only below the limit;
 *  - chunked: decoding in two pieces (split point from the input) gives the
 *    same bytes and verdict as in one, output never longer than input;
 *  - URL: an accepted URL has a non-empty [a-z0-9.-] host, a port, a path
 *    starting with '/', and formats to a URL that parses to the same parts;
 *    a joined redirect is again such a URL;
 *  - messages: a decoded event/done/error round-trips through its encoder. */
#include <string.h>

#include "fetcher/fetch.h"
#include "fuzz/fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

static void check_str(const char *s, size_t cap)
{
	FUZZ_CHECK(memchr(s, 0, cap) != NULL, "unterminated field");
}

static void fuzz_head(const uint8_t *d, size_t n)
{
	uint8_t *b = malloc(n ? n : 1);
	memcpy(b, d, n);
	http1_resp r;
	char err[256];
	int h = http1_parse_head(b, n, &r, err, sizeof(err));
	FUZZ_CHECK(h >= -1, "verdict %d", h);
	if (h == 0)
		FUZZ_CHECK(n < HTTP1_MAX_HEAD, "need more at %zu bytes", n);
	if (h > 0) {
		FUZZ_CHECK((size_t)h <= n && h <= HTTP1_MAX_HEAD, "head %d of %zu", h, n);
		FUZZ_CHECK(r.status >= 100 && r.status <= 599, "status %d", r.status);
		FUZZ_CHECK(!(r.chunked && r.content_length >= 0), "chunked + length");
		check_str(r.location, sizeof(r.location));
		check_str(r.etag, sizeof(r.etag));
		check_str(r.linked_etag, sizeof(r.linked_etag));
		FUZZ_CHECK(!r.has_range || r.range_first <= r.range_last, "range order");
		http1_resp r2;
		FUZZ_CHECK(http1_parse_head(b, (size_t)h, &r2, err, sizeof(err)) == h, "head alone differs");
		FUZZ_CHECK(r2.status == r.status && r2.content_length == r.content_length, "head alone differs");
	}
	free(b);
}

static void fuzz_chunked(const uint8_t *d, size_t n)
{
	if (!n)
		return;
	size_t split = d[0] % (n + 0);
	d++, n--;
	if (split > n)
		split = n;
	uint8_t *a = malloc(n ? n : 1), *b = malloc(n ? n : 1);
	memcpy(a, d, n);
	memcpy(b, d, n);
	char err[256];
	http1_chunked c1, c2;
	http1_chunked_init(&c1);
	http1_chunked_init(&c2);
	long whole = http1_chunked_decode(&c1, a, n, err, sizeof(err));
	FUZZ_CHECK(whole <= (long)n, "output longer than input");
	long p1 = http1_chunked_decode(&c2, b, split, err, sizeof(err));
	if (p1 >= 0) {
		uint8_t *rest = malloc(n - split ? n - split : 1);
		memcpy(rest, d + split, n - split);
		long p2 = http1_chunked_decode(&c2, rest, n - split, err, sizeof(err));
		if (whole >= 0) {
			FUZZ_CHECK(p2 >= 0 && p1 + p2 == whole, "split decode differs: %ld+%ld vs %ld", p1, p2, whole);
			FUZZ_CHECK(!memcmp(a, b, (size_t)p1) && !memcmp(a + p1, rest, (size_t)p2), "split bytes differ");
			FUZZ_CHECK(c1.done == c2.done, "done differs");
		} else {
			FUZZ_CHECK(p2 < 0, "split accepted what whole refused");
		}
		free(rest);
	} else {
		FUZZ_CHECK(whole < 0, "prefix refused, whole accepted");
	}
	free(a);
	free(b);
}

static void check_url(const fetch_url *u)
{
	FUZZ_CHECK(u->host[0] && u->port && u->path[0] == '/', "url parts");
	for (const char *p = u->host; *p; p++)
		FUZZ_CHECK((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '.' || *p == '-', "host char");
	char s[FETCH_URL_MAX + 300];
	FUZZ_CHECK(fetch_url_format(u, s, sizeof(s)) == 0, "format");
	fetch_url v;
	char err[256];
	if (strlen(s) < FETCH_URL_MAX) {
		FUZZ_CHECK(fetch_url_parse(s, &v, err, sizeof(err)) == 0, "reparse: %s", err);
		FUZZ_CHECK(!strcmp(u->host, v.host) && u->port == v.port && !strcmp(u->path, v.path), "reparse differs");
	}
}

static void fuzz_url(const uint8_t *d, size_t n)
{
	char *s = malloc(n + 1);
	memcpy(s, d, n);
	s[n] = 0;
	char *nl = memchr(s, '\n', n);
	char *loc = NULL;
	if (nl) {
		*nl = 0;
		loc = nl + 1;
	}
	fetch_url u;
	char err[256];
	if (fetch_url_parse(s, &u, err, sizeof(err)) == 0) {
		check_url(&u);
		if (loc) {
			char out[FETCH_URL_MAX];
			if (fetch_url_join(&u, loc, out, sizeof(out), err, sizeof(err)) == 0) {
				fetch_url j;
				FUZZ_CHECK(fetch_url_parse(out, &j, err, sizeof(err)) == 0, "joined URL does not parse");
				check_url(&j);
			}
		}
	}
	free(s);
}

static void fuzz_msgs(const uint8_t *d, size_t n)
{
	uint8_t *b = malloc(n ? n : 1);
	memcpy(b, d, n);
	uint8_t out[FETCH_URL_MAX + 4096];
	ipc_wr w;
	fetch_event e;
	if (fetch_event_decode(&e, b, n) == 0) {
		ipc_wr_init(&w, out, sizeof(out));
		fetch_event_encode(&e, &w);
		FUZZ_CHECK(!w.bad && w.len == n && !memcmp(out, b, n), "event round trip");
	}
	fetch_done dn;
	if (fetch_done_decode(&dn, b, n) == 0) {
		ipc_wr_init(&w, out, sizeof(out));
		fetch_done_encode(&dn, &w);
		FUZZ_CHECK(!w.bad && w.len == n && !memcmp(out, b, n), "done round trip");
	}
	fetch_req rq;
	if (fetch_req_decode(&rq, b, n) == 0) {
		ipc_wr_init(&w, out, sizeof(out));
		FUZZ_CHECK(fetch_req_encode(&rq, &w) == 0 && w.len == n && !memcmp(out, b, n), "request round trip");
	}
	uint32_t k, st;
	char msg[64];
	if (fetch_error_decode(&k, &st, msg, sizeof(msg), b, n) == 0) {
		FUZZ_CHECK(k > 0 && k < FETCH_ERR_COUNT, "kind");
		for (char *p = msg; *p; p++)
			FUZZ_CHECK(*p >= 0x20 && *p < 0x7f, "unsanitised message");
	}
	free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	switch (data[0] & 3) {
	case 0: fuzz_head(data + 1, size - 1); break;
	case 1: fuzz_chunked(data + 1, size - 1); break;
	case 2: fuzz_url(data + 1, size - 1); break;
	default: fuzz_msgs(data + 1, size - 1); break;
	}
	return 0;
}

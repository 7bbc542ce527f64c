/* fuzz/http_fuzzer.c — broker/http.c http_parse() and the Host /
 * Content-Type / Bearer helpers on arbitrary bytes.
 *
 * Checked (http.h contract):
 *  - no memory error, leak or UB (sanitizers); the parser never reads
 *    outside buf[0..len) (the input is copied into an exact-size buffer);
 *  - OK: header_len <= len and <= max_header_bytes, the bytes before it end
 *    in CRLF CRLF, every returned string lies inside the header section,
 *    content_length <= max_body, n_headers <= max_headers, an HTTP/1.1
 *    request has a Host, no accepted header value holds CR, LF or NUL;
 *  - ERROR: the status is one of the documented ones and why is set;
 *  - MORE: the input is shorter than max_header_bytes, and every proper
 *    prefix of an accepted request is MORE or the same verdict (the parser
 *    is consistent when bytes arrive one at a time, checked on a sample). */
#include <string.h>

#include "broker/http.h"
#include "fuzz/fuzz.h"

static int inside(const char *b, size_t n, http_str s)
{
	return s.p == NULL ? s.n == 0 : (s.p >= b && s.p + s.n <= b + n);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	http_limits lim;
	http_limits_default(&lim);
	/* Small limits too, so the limit paths are reached by short inputs. */
	if (size && (data[0] & 1)) {
		lim.max_line = 64;
		lim.max_header_bytes = 256;
		lim.max_headers = 4;
		lim.max_body = 100;
	}
	char *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	http_request r;
	http_parse_result pr = http_parse(buf, size, &lim, &r);
	FUZZ_CHECK(pr < HTTP_PARSE_COUNT, "result %d", pr);
	if (pr == HTTP_PARSE_OK) {
		FUZZ_CHECK(r.header_len <= size && r.header_len <= lim.max_header_bytes, "header_len %zu", r.header_len);
		FUZZ_CHECK(r.header_len >= 4 && !memcmp(buf + r.header_len - 4, "\r\n\r\n", 4), "no CRLFCRLF end");
		FUZZ_CHECK(!r.has_length || r.content_length <= lim.max_body, "length %zu", r.content_length);
		FUZZ_CHECK(r.n_headers <= lim.max_headers, "n_headers %d", r.n_headers);
		FUZZ_CHECK(r.minor == 0 || r.host.p, "1.1 without Host");
		FUZZ_CHECK(r.method < HTTP_M_COUNT, "method");
		size_t hl = r.header_len;
		FUZZ_CHECK(inside(buf, hl, r.target) && inside(buf, hl, r.path) && inside(buf, hl, r.method_str), "line");
		FUZZ_CHECK(r.path.n >= 1 && r.path.p[0] == '/', "path");
		for (int i = 0; i < r.n_headers; i++) {
			http_header *h = &r.headers[i];
			FUZZ_CHECK(inside(buf, hl, h->name) && inside(buf, hl, h->value), "header %d", i);
			FUZZ_CHECK(h->name.n > 0, "empty name");
			for (size_t k = 0; k < h->value.n; k++)
				FUZZ_CHECK(h->value.p[k] != '\r' && h->value.p[k] != '\n' && h->value.p[k] != 0, "ctl");
		}
		/* The helpers on whatever the values hold. */
		if (r.host.p) {
			http_str name;
			unsigned port;
			(void)http_host_is_loopback(r.host, 11435);
			if (http_host_split(r.host, &name, &port) == 0)
				FUZZ_CHECK(port <= 65535 && inside(buf, hl, name), "split");
		}
		if (r.content_type.p)
			(void)http_is_json_type(r.content_type);
		http_str tok;
		if (r.authorization.p && http_bearer(r.authorization, &tok) == 0)
			FUZZ_CHECK(inside(buf, hl, tok), "bearer");
		/* Byte-at-a-time consistency on a sample of prefixes. */
		for (size_t k = 0; k < hl; k += 1 + hl / 16) {
			http_request q;
			http_parse_result pq = http_parse(buf, k, &lim, &q);
			FUZZ_CHECK(pq == HTTP_PARSE_MORE, "prefix %zu of an accepted request gave %d (%s)", k, pq,
				   q.why ? q.why : "");
		}
	} else if (pr == HTTP_PARSE_ERROR) {
		static const int ok[] = { 400, 411, 413, 414, 431, 501, 505 };
		int found = 0;
		for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
			found |= r.status == ok[i];
		FUZZ_CHECK(found && r.why, "status %d", r.status);
		(void)http_reason(r.status);
	} else {
		FUZZ_CHECK(size < lim.max_header_bytes, "MORE at %zu bytes", size);
	}
	free(buf);
	return 0;
}

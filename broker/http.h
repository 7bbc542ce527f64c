/* broker/http.h — a strict HTTP/1.1 request parser (RFC 9110, RFC 9112)
 * and the small pure helpers the server's policy checks use.
 *
 * Contract:
 *  - http_parse() is a pure function over buf[0..len): no allocation, no
 *    I/O, no global state. It MAY be called again with more bytes; it
 *    re-parses from the start (the header section is bounded, so this costs
 *    at most max_header_bytes per call).
 *  - It returns HTTP_PARSE_MORE while the header section is incomplete and
 *    within the limits, HTTP_PARSE_OK when the request line and every header
 *    are complete and valid (req filled; the body is NOT read: it is the
 *    next req->content_length bytes after req->header_len), or
 *    HTTP_PARSE_ERROR with req->status (400, 411, 413, 414, 431, 501, 505)
 *    and req->why (a static string) set.
 *  - Every pointer in req points into buf; req is valid as long as buf is.
 *  - A request the parser accepts is unambiguous: one Host, at most one
 *    Content-Length (digits only), no Transfer-Encoding (a request body
 *    must be framed by Content-Length; chunked request bodies are
 *    rejected), CRLF line endings only, no obsolete line folding, no
 *    whitespace between a field name and its colon, no control bytes.
 *    This removes request-smuggling ambiguity with any front end.
 */
#ifndef MLXR_HTTP_H
#define MLXR_HTTP_H

#include <stddef.h>
#include <stdint.h>

/* Room in http_request for headers; the configurable limit is <= this. */
#define HTTP_MAX_HEADERS 128

typedef struct {
	size_t max_line;         /* request line, CRLF excluded (default 8 KiB) */
	size_t max_header_bytes; /* request line + headers + final CRLF (default 16 KiB) */
	int max_headers;         /* header fields (default 100, <= HTTP_MAX_HEADERS) */
	size_t max_body;         /* Content-Length (default 8 MiB) */
} http_limits;

typedef enum {
	HTTP_PARSE_MORE,
	HTTP_PARSE_OK,
	HTTP_PARSE_ERROR,
	HTTP_PARSE_COUNT
} http_parse_result;

typedef enum {
	HTTP_M_GET,
	HTTP_M_HEAD,
	HTTP_M_POST,
	HTTP_M_OPTIONS,
	HTTP_M_OTHER, /* a valid token we do not serve: 405 */
	HTTP_M_COUNT
} http_method;

typedef struct {
	const char *p;
	size_t n;
} http_str;

typedef struct {
	http_str name, value; /* value without leading/trailing whitespace */
} http_header;

typedef struct {
	http_method method;
	http_str method_str;
	http_str target; /* origin-form: "/path?query" */
	http_str path;   /* target without the query */
	int minor;       /* HTTP/1.<minor>: 0 or 1 */
	http_header headers[HTTP_MAX_HEADERS];
	int n_headers;
	size_t header_len; /* bytes of request line + headers + empty line */
	int has_length;
	size_t content_length;
	int keep_alive;    /* 1.1 default on, 1.0 default off; Connection overrides */
	/* Single-valued fields the server checks (absent: p == NULL). A
	 * second copy of any of them is a 400. */
	http_str host, origin, authorization, content_type;
	int status;        /* HTTP_PARSE_ERROR: the status to answer */
	const char *why;   /* HTTP_PARSE_ERROR: reason, static */
} http_request;

void http_limits_default(http_limits *l);
http_parse_result http_parse(const char *buf, size_t len, const http_limits *lim, http_request *req);

/* Case-insensitive ASCII equality of s with the C string lit. */
int http_str_ieq(http_str s, const char *lit);

/* Host header check against DNS rebinding: 1 when host is
 * "localhost", a "*.localhost" name, a 127.0.0.0/8 dotted quad or "[::1]",
 * each followed by ":port" equal to `port` (a missing port means 80).
 * Names compare case-insensitively; anything else is 0. */
int http_host_is_loopback(http_str host, unsigned port);
/* Splits "name:port" / "[v6]:port": 0 with name (brackets kept) and port
 * (80 when absent), -1 when malformed. */
int http_host_split(http_str host, http_str *name, unsigned *port);

/* Content-Type is application/json, with optional parameters ("; charset=utf-8"). */
int http_is_json_type(http_str ct);

/* "Bearer TOKEN" → token (scheme case-insensitive); -1 when not Bearer. */
int http_bearer(http_str auth, http_str *token);

const char *http_reason(int status);

#endif

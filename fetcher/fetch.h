/* fetcher/fetch.h — the fetcher's pure parts: URL parsing, the HTTP/1.1
 * response parser (head + chunked body), and the broker<->fetcher message
 * codec. Nothing here touches a socket, a file or TLS, so every function is
 * a function over bytes, fuzzed by fuzz/http1_fuzzer.c. The TLS client
 * (fetcher/tls.c) and the request loop (fetcher/fetcher.c) link only into
 * mlxr-fetcher.
 *
 * Protocol (common/ipc.h transport):
 *   broker -> fetcher  IPC_FETCH, fds: [out] (a regular file opened
 *       read-write by the broker), payload: fetch_req.
 *   fetcher -> broker  IPC_EVENT (FETCH_EV_HEAD once the final response's
 *       head arrived; FETCH_EV_PROGRESS while the body arrives), then
 *       exactly one IPC_DONE (fetch_done) or IPC_ERROR (u32 kind, message).
 * The broker decodes every reply with the fetch_*_decode functions, which
 * check every length; a violation ends the fetcher.
 */
#ifndef MLXR_FETCH_H
#define MLXR_FETCH_H

#include <stddef.h>
#include <stdint.h>

#include "common/ipc.h"

/* ---- URLs ---- */
#define FETCH_URL_MAX 4096   /* a signed CDN link is ~1.5 KB */
#define FETCH_HOST_MAX 253   /* RFC 1035 name length */

typedef struct {
	char host[FETCH_HOST_MAX + 1]; /* lower-cased; no IP-literal brackets */
	uint16_t port;                 /* 443 when absent */
	char path[FETCH_URL_MAX];      /* "/..." with query; "/" when empty */
} fetch_url;

/* Parses an absolute https:// URL (scheme compared case-insensitively). No
 * userinfo, no fragment kept, host [A-Za-z0-9.-] only (IDNs arrive as
 * punycode), port 1..65535, no control bytes or spaces. 0, or -1 with err
 * ("http:// is refused" for plain http). */
int fetch_url_parse(const char *url, fetch_url *u, char *err, size_t errlen);
/* Resolves a Location value against base into out (absolute https URL):
 * absolute "https://...", scheme-relative "//host/...", absolute path
 * "/...". Relative paths without '/' are refused (the Hub never sends them).
 * 0 or -1 with err. */
int fetch_url_join(const fetch_url *base, const char *loc, char *out, size_t outlen, char *err, size_t errlen);
/* Formats u back to "https://host[:port]/path". */
int fetch_url_format(const fetch_url *u, char *out, size_t outlen);

/* ---- HTTP/1.1 responses (RFC 9112) ---- */
/* Head ≤ 32 KiB: a Hub or CDN response head is ~2 KB (the longest part is
 * a signed Location); more is hostile or broken. */
#define HTTP1_MAX_HEAD (32 * 1024)
#define HTTP1_MAX_HEADERS 100
#define HTTP1_ETAG_MAX 256

typedef struct {
	int status;                 /* 100..599 */
	int64_t content_length;     /* -1: absent */
	int chunked;                /* Transfer-Encoding: chunked */
	int has_range;              /* Content-Range: bytes a-b/total */
	uint64_t range_first, range_last, range_total; /* total 0: "*" */
	char location[FETCH_URL_MAX];
	char etag[HTTP1_ETAG_MAX];  /* ETag, else X-Linked-Etag; as sent */
	char linked_etag[HTTP1_ETAG_MAX];
	uint64_t linked_size;       /* X-Linked-Size (Hub, LFS), 0: absent */
} http1_resp;

/* Parses a response head from p[0..n). Returns the head's length (> 0,
 * through the blank line) when complete; 0 when more bytes are needed (n <
 * HTTP1_MAX_HEAD); -1 with err when malformed or too large. Rules: status
 * line "HTTP/1.x NNN reason"; header names are tokens; values without
 * control bytes; obsolete line folding refused; duplicate Content-Length
 * must agree; Transfer-Encoding other than exactly "chunked" refused; both
 * Content-Length and chunked refused (request smuggling shape). */
int http1_parse_head(const uint8_t *p, size_t n, http1_resp *r, char *err, size_t errlen);

/* Chunked body decoder (RFC 9112 §7.1), incremental and in place. */
typedef struct {
	int state;        /* private */
	uint64_t left;    /* data bytes left in the current chunk */
	int digits;       /* hex digits seen in the size */
	size_t line;      /* bytes of the current extension/trailer line */
	int done;         /* 1 after the last chunk and trailers */
} http1_chunked;

void http1_chunked_init(http1_chunked *c);
/* Decodes buf[0..n) in place: the data bytes end up at buf[0..ret).
 * Returns that count, or -1 with err. Bytes after the end (c->done) are
 * an error. Chunk size ≤ 2^48, extension/trailer lines ≤ 4 KiB. */
long http1_chunked_decode(http1_chunked *c, uint8_t *buf, size_t n, char *err, size_t errlen);

/* ---- broker <-> fetcher messages ---- */
#define FETCH_PROTO_VERSION 1
#define FETCH_MAX_REDIRECTS 5 /* fetch_done.redirects <= this */
#define FETCH_F_RESUME 1u   /* send Range from offset (If-Range: etag) */
#define FETCH_F_TOKEN 2u    /* send the token to token_host:token_port */

typedef struct {
	uint32_t flags;
	uint64_t offset;              /* resume: bytes already in the file */
	uint64_t max_bytes;           /* body limit (0: none) */
	char url[FETCH_URL_MAX];
	char if_range[HTTP1_ETAG_MAX];
	char token[512];              /* Hub tokens are ~40 bytes */
	char token_host[FETCH_HOST_MAX + 1];
	uint16_t token_port;
} fetch_req;

enum { FETCH_EV_HEAD = 1, FETCH_EV_PROGRESS = 2 };

typedef struct {
	uint32_t kind;
	uint32_t status;      /* 200 (start 0) or 206 (start > 0) */
	uint64_t start;       /* offset the body is written from */
	uint64_t total;       /* full file size, 0: unknown; else >= start */
	uint64_t done;        /* PROGRESS: bytes in the file, start..total */
	char etag[HTTP1_ETAG_MAX];
} fetch_event;

typedef struct {
	uint32_t status;      /* 200 or 206 */
	uint64_t size;        /* bytes in the file at the end */
	uint32_t redirects;   /* <= FETCH_MAX_REDIRECTS */
	char final_url[FETCH_URL_MAX]; /* "https://...", no space or control */
	char etag[HTTP1_ETAG_MAX];     /* printable ASCII (events' too) */
} fetch_done;

/* Error kinds, so the broker can word its message (and tests can tell a
 * TLS failure from an HTTP one). */
typedef enum {
	FETCH_ERR_NONE,
	FETCH_ERR_URL,      /* bad or non-https URL, redirect to http:// */
	FETCH_ERR_NET,      /* resolve, connect, timeout, connection cut */
	FETCH_ERR_TLS,      /* handshake or certificate */
	FETCH_ERR_HTTP,     /* malformed response */
	FETCH_ERR_STATUS,   /* an HTTP error status (code in the message) */
	FETCH_ERR_REDIRECT, /* loop or too many */
	FETCH_ERR_RANGE,    /* a 206 that does not continue the file */
	FETCH_ERR_IO,       /* writing the output file */
	FETCH_ERR_LIMIT,    /* body larger than max_bytes */
	FETCH_ERR_COUNT
} fetch_err;

/* 1 when every byte of s is in [lo, 0x7e]: lo 0x20 for printable ASCII
 * (header values the fetcher puts on the wire, ETags), 0x21 for a URL
 * (fetch_url_parse refuses spaces too). */
int fetch_ascii(const char *s, unsigned char lo);

int fetch_req_encode(const fetch_req *r, ipc_wr *w);
int fetch_req_decode(fetch_req *r, const uint8_t *p, size_t n);
void fetch_event_encode(const fetch_event *e, ipc_wr *w);
int fetch_event_decode(fetch_event *e, const uint8_t *p, size_t n);
void fetch_done_encode(const fetch_done *d, ipc_wr *w);
int fetch_done_decode(fetch_done *d, const uint8_t *p, size_t n);
void fetch_error_encode(uint32_t kind, uint32_t status, const char *msg, ipc_wr *w);
/* msg gets a sanitised copy (printable ASCII only). */
int fetch_error_decode(uint32_t *kind, uint32_t *status, char *msg, size_t msglen, const uint8_t *p, size_t n);

#endif

/* broker/http.c — see http.h. Section numbers are RFC 9112 (HTTP/1.1
 * message syntax) unless marked RFC 9110 (semantics). */
#include "broker/http.h"

#include <string.h>

void http_limits_default(http_limits *l)
{
	l->max_line = 8 * 1024;          /* nginx's large_client_header_buffers line size */
	l->max_header_bytes = 16 * 1024; /* a real client request is < 1 KiB */
	l->max_headers = 100;            /* the openai client sends ~15 */
	l->max_body = 8u << 20;          /* a long conversation of text is < 1 MiB */
}

/* RFC 9110 §5.6.2 tchar. */
static int is_tchar(unsigned char c)
{
	if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
		return 1;
	return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int lower(int c)
{
	return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

int http_str_ieq(http_str s, const char *lit)
{
	size_t n = strlen(lit);
	if (s.n != n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (lower((unsigned char)s.p[i]) != lower((unsigned char)lit[i]))
			return 0;
	return 1;
}

static http_parse_result fail(http_request *r, int status, const char *why)
{
	r->status = status;
	r->why = why;
	return HTTP_PARSE_ERROR;
}

/* §3: request-line = method SP request-target SP HTTP-version. */
static http_parse_result parse_request_line(const char *s, size_t n, http_request *r)
{
	size_t i = 0;
	while (i < n && is_tchar((unsigned char)s[i]))
		i++;
	if (i == 0 || i > 16 || i >= n || s[i] != ' ')
		return fail(r, 400, "malformed request line: method");
	r->method_str = (http_str){ s, i };
	static const char *const names[] = { "GET", "HEAD", "POST", "OPTIONS" };
	r->method = HTTP_M_OTHER;
	for (int m = 0; m < 4; m++) /* §3.1: the method token is case-sensitive */
		if (i == strlen(names[m]) && !memcmp(s, names[m], i))
			r->method = (http_method)m;
	size_t t0 = ++i;
	/* §3.2.1 origin-form only: we are not a proxy (no absolute-form) and
	 * serve no "OPTIONS *". Visible ASCII, no fragment. */
	if (i >= n || s[i] != '/')
		return fail(r, 400, "malformed request line: the target must start with '/'");
	while (i < n && s[i] != ' ') {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x21 || c > 0x7e || c == '#')
			return fail(r, 400, "malformed request line: invalid byte in the target");
		i++;
	}
	if (i >= n)
		return fail(r, 400, "malformed request line: no HTTP version");
	r->target = (http_str){ s + t0, i - t0 };
	const char *q = memchr(r->target.p, '?', r->target.n);
	r->path = (http_str){ r->target.p, q ? (size_t)(q - r->target.p) : r->target.n };
	i++;
	/* §2.3: HTTP-version = "HTTP" "/" DIGIT "." DIGIT, case-sensitive. */
	if (n - i != 8 || memcmp(s + i, "HTTP/", 5) || s[i + 5] < '0' || s[i + 5] > '9' || s[i + 6] != '.' ||
	    s[i + 7] < '0' || s[i + 7] > '9')
		return fail(r, 400, "malformed request line: HTTP version");
	if (s[i + 5] != '1' || (s[i + 7] != '0' && s[i + 7] != '1'))
		return fail(r, 505, "only HTTP/1.0 and HTTP/1.1 are supported");
	r->minor = s[i + 7] - '0';
	return HTTP_PARSE_OK;
}

/* Sets *slot to v; a second occurrence of the field is an error (we never
 * guess which of two Host or Origin values a front end would have used). */
static int set_once(http_str *slot, http_str v)
{
	if (slot->p)
		return -1;
	*slot = v;
	return 0;
}

/* §6.2: Content-Length = 1*DIGIT. Bounded by max: overflow-safe. */
static int parse_length(http_str v, size_t max, size_t *out, int *too_big)
{
	size_t x = 0;
	*too_big = 0;
	if (v.n == 0)
		return -1;
	for (size_t i = 0; i < v.n; i++) {
		if (v.p[i] < '0' || v.p[i] > '9')
			return -1;
		if (!*too_big) {
			x = x * 10 + (size_t)(v.p[i] - '0');
			if (x > max)
				*too_big = 1;
		}
	}
	*out = x;
	return 0;
}

/* RFC 9110 §7.6.1 Connection: comma-separated tokens. */
static void parse_connection(http_str v, http_request *r)
{
	size_t i = 0;
	while (i < v.n) {
		while (i < v.n && (v.p[i] == ' ' || v.p[i] == '\t' || v.p[i] == ','))
			i++;
		size_t b = i;
		while (i < v.n && v.p[i] != ',' && v.p[i] != ' ' && v.p[i] != '\t')
			i++;
		http_str t = { v.p + b, i - b };
		if (http_str_ieq(t, "close"))
			r->keep_alive = 0;
		else if (http_str_ieq(t, "keep-alive") && r->minor == 0)
			r->keep_alive = 1;
	}
}

http_parse_result http_parse(const char *buf, size_t len, const http_limits *lim, http_request *r)
{
	memset(r, 0, sizeof(*r));
	/* Request line: CRLF within max_line + 2 bytes, else 414. */
	size_t scan = len < lim->max_line + 2 ? len : lim->max_line + 2;
	const char *nl = memchr(buf, '\n', scan);
	if (!nl) {
		if (len >= lim->max_line + 2)
			return fail(r, 414, "request line too long");
		/* Reject a visibly wrong start at once (a TLS hello, binary
		 * noise) rather than holding the slot until the timeout. */
		size_t i = 0;
		while (i < len && is_tchar((unsigned char)buf[i]))
			i++;
		if (i < len && (buf[i] != ' ' || i == 0))
			return fail(r, 400, "malformed request line: method");
		for (; i < len; i++)
			if ((unsigned char)buf[i] < 0x20 ? buf[i] != '\r' : (unsigned char)buf[i] > 0x7e)
				return fail(r, 400, "malformed request line: invalid byte");
		return HTTP_PARSE_MORE;
	}
	size_t rl = (size_t)(nl - buf);
	/* §2.2: a bare LF or CR is not a line ending we accept. */
	if (rl == 0 || buf[rl - 1] != '\r')
		return fail(r, 400, "malformed request line: lines must end with CRLF");
	if (memchr(buf, '\r', rl - 1))
		return fail(r, 400, "malformed request line: bare CR");
	if (parse_request_line(buf, rl - 1, r) != HTTP_PARSE_OK)
		return HTTP_PARSE_ERROR;
	r->keep_alive = r->minor == 1;

	/* Header section ends at the first CRLF CRLF; bounded by max_header_bytes. */
	size_t lim_h = len < lim->max_header_bytes ? len : lim->max_header_bytes;
	const char *end = lim_h > rl - 1 ? memmem(buf + rl - 1, lim_h - (rl - 1), "\r\n\r\n", 4) : NULL;
	if (!end) {
		if (len >= lim->max_header_bytes)
			return fail(r, 431, "request header section too large");
		/* Reject what is already visibly wrong without waiting (a sender
		 * of garbage should not hold a slot until the timeout). */
		const char *p = buf + rl + 1;
		const char *e = buf + len;
		while (p < e) {
			unsigned char c = (unsigned char)*p;
			if (c == 0 || c == 0x7f)
				return fail(r, 400, "control byte in the header section");
			p++;
		}
		return HTTP_PARSE_MORE;
	}
	r->header_len = (size_t)(end - buf) + 4;

	/* §5: field-line = field-name ":" OWS field-value OWS, one per CRLF line. */
	const char *p = buf + rl + 1;
	const char *hend = end + 2; /* the CRLF ending the last field line */
	int has_te = 0;
	while (p < hend) {
		const char *le = memchr(p, '\n', (size_t)(hend - p));
		if (!le || le == p || le[-1] != '\r')
			return fail(r, 400, "malformed header: lines must end with CRLF");
		size_t ln = (size_t)(le - p) - 1;
		if (p[0] == ' ' || p[0] == '\t')
			return fail(r, 400, "obsolete line folding is not accepted");
		size_t c = 0;
		while (c < ln && is_tchar((unsigned char)p[c]))
			c++;
		if (c == 0 || c >= ln || p[c] != ':')
			return fail(r, 400, "malformed header field name");
		size_t vb = c + 1, ve = ln;
		for (size_t k = vb; k < ve; k++) {
			unsigned char ch = (unsigned char)p[k];
			/* §5.5: field-vchar / SP / HTAB; obs-text (>= 0x80) allowed. */
			if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
				return fail(r, 400, "control byte in a header value");
		}
		while (vb < ve && (p[vb] == ' ' || p[vb] == '\t'))
			vb++;
		while (ve > vb && (p[ve - 1] == ' ' || p[ve - 1] == '\t'))
			ve--;
		if (r->n_headers >= lim->max_headers || r->n_headers >= HTTP_MAX_HEADERS)
			return fail(r, 431, "too many header fields");
		http_header *h = &r->headers[r->n_headers++];
		h->name = (http_str){ p, c };
		h->value = (http_str){ p + vb, ve - vb };
		int dup = 0;
		if (http_str_ieq(h->name, "host")) {
			dup = set_once(&r->host, h->value);
		} else if (http_str_ieq(h->name, "origin")) {
			dup = set_once(&r->origin, h->value);
		} else if (http_str_ieq(h->name, "authorization")) {
			dup = set_once(&r->authorization, h->value);
		} else if (http_str_ieq(h->name, "content-type")) {
			dup = set_once(&r->content_type, h->value);
		} else if (http_str_ieq(h->name, "transfer-encoding")) {
			has_te = 1;
		} else if (http_str_ieq(h->name, "content-length")) {
			int big;
			if (r->has_length)
				return fail(r, 400, "more than one Content-Length");
			if (parse_length(h->value, lim->max_body, &r->content_length, &big))
				return fail(r, 400, "malformed Content-Length");
			if (big)
				return fail(r, 413, "request body too large");
			r->has_length = 1;
		} else if (http_str_ieq(h->name, "connection")) {
			parse_connection(h->value, r);
		}
		if (dup)
			return fail(r, 400, "a Host, Origin, Authorization or Content-Type header appears twice");
		p = le + 1;
	}
	/* §6.1/§6.3: both framings at once is the classic smuggling vector. */
	if (has_te && r->has_length)
		return fail(r, 400, "both Content-Length and Transfer-Encoding");
	if (has_te)
		return fail(r, 411, "Transfer-Encoding request bodies are not supported: send Content-Length");
	/* §3.2.2: a 1.1 request without Host is a 400. */
	if (r->minor == 1 && !r->host.p)
		return fail(r, 400, "missing Host header");
	if (r->method == HTTP_M_POST && !r->has_length)
		return fail(r, 411, "POST needs a Content-Length");
	return HTTP_PARSE_OK;
}

int http_host_split(http_str h, http_str *name, unsigned *port)
{
	size_t colon;
	if (h.n && h.p[0] == '[') {
		const char *rb = memchr(h.p, ']', h.n);
		if (!rb)
			return -1;
		colon = (size_t)(rb - h.p) + 1;
		if (colon < h.n && h.p[colon] != ':')
			return -1;
	} else {
		colon = 0;
		while (colon < h.n && h.p[colon] != ':')
			colon++;
	}
	*name = (http_str){ h.p, colon };
	if (colon == 0)
		return -1;
	if (colon == h.n) {
		*port = 80;
		return 0;
	}
	size_t i = colon + 1;
	if (i == h.n || h.n - i > 5)
		return -1;
	unsigned x = 0;
	for (; i < h.n; i++) {
		if (h.p[i] < '0' || h.p[i] > '9')
			return -1;
		x = x * 10 + (unsigned)(h.p[i] - '0');
	}
	if (x > 65535)
		return -1;
	*port = x;
	return 0;
}

/* A dotted quad 127.a.b.c, each part 0-255 without leading zeros. */
static int is_loopback_v4(http_str s)
{
	int parts = 0;
	size_t i = 0;
	while (parts < 4) {
		size_t b = i;
		unsigned v = 0;
		while (i < s.n && s.p[i] >= '0' && s.p[i] <= '9' && i - b < 3)
			v = v * 10 + (unsigned)(s.p[i++] - '0');
		if (i == b || v > 255 || (i - b > 1 && s.p[b] == '0'))
			return 0;
		if (parts == 0 && v != 127)
			return 0;
		parts++;
		if (parts < 4) {
			if (i >= s.n || s.p[i] != '.')
				return 0;
			i++;
		}
	}
	return i == s.n;
}

int http_host_is_loopback(http_str host, unsigned port)
{
	http_str name;
	unsigned p;
	if (http_host_split(host, &name, &p) || p != port)
		return 0;
	if (http_str_ieq(name, "localhost") || http_str_ieq(name, "[::1]") || is_loopback_v4(name))
		return 1;
	/* RFC 6761 §6.3: *.localhost resolves to loopback without DNS. */
	if (name.n > 10 && http_str_ieq((http_str){ name.p + name.n - 10, 10 }, ".localhost")) {
		for (size_t i = 0; i < name.n - 10; i++) {
			unsigned char c = (unsigned char)name.p[i];
			if (!(c == '-' || c == '.' || (c >= '0' && c <= '9') || (lower(c) >= 'a' && lower(c) <= 'z')))
				return 0;
		}
		return 1;
	}
	return 0;
}

int http_is_json_type(http_str ct)
{
	size_t n = 0;
	while (n < ct.n && ct.p[n] != ';' && ct.p[n] != ' ' && ct.p[n] != '\t')
		n++;
	if (!http_str_ieq((http_str){ ct.p, n }, "application/json"))
		return 0;
	while (n < ct.n && (ct.p[n] == ' ' || ct.p[n] == '\t'))
		n++;
	return n == ct.n || ct.p[n] == ';';
}

int http_bearer(http_str a, http_str *tok)
{
	if (a.n < 7 || !http_str_ieq((http_str){ a.p, 6 }, "bearer") || a.p[6] != ' ')
		return -1;
	size_t i = 7;
	while (i < a.n && a.p[i] == ' ')
		i++;
	*tok = (http_str){ a.p + i, a.n - i };
	return 0;
}

const char *http_reason(int s)
{
	switch (s) {
	case 200: return "OK";
	case 204: return "No Content";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 411: return "Length Required";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 415: return "Unsupported Media Type";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 503: return "Service Unavailable";
	case 505: return "HTTP Version Not Supported";
	default: return "Unknown";
	}
}

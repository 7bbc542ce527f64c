/* fetcher/http1.c — URLs, HTTP/1.1 response heads and chunked bodies (see
 * fetch.h). Pure functions over bytes: every input is hostile (it comes from
 * the network, through TLS we verified, but from a server we do not trust). */
#include "fetcher/fetch.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ---- URLs ---- */

static int host_char(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
}

int fetch_url_parse(const char *url, fetch_url *u, char *err, size_t errlen)
{
	memset(u, 0, sizeof(*u));
	size_t len = strlen(url);
	if (len >= FETCH_URL_MAX) {
		snprintf(err, errlen, "URL longer than %d bytes", FETCH_URL_MAX - 1);
		return -1;
	}
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)url[i] <= 0x20 || (unsigned char)url[i] >= 0x7f) {
			snprintf(err, errlen, "URL contains a space or control byte");
			return -1;
		}
	if (!strncasecmp(url, "http://", 7)) {
		snprintf(err, errlen, "plain http:// is refused (https only): %.200s", url);
		return -1;
	}
	if (strncasecmp(url, "https://", 8)) {
		snprintf(err, errlen, "not an https:// URL: %.200s", url);
		return -1;
	}
	const char *h = url + 8, *end = h + strcspn(h, "/?#");
	if (memchr(h, '@', (size_t)(end - h))) {
		snprintf(err, errlen, "URL with user information is refused");
		return -1;
	}
	const char *colon = memchr(h, ':', (size_t)(end - h));
	const char *hend = colon ? colon : end;
	size_t hl = (size_t)(hend - h);
	if (hl == 0 || hl > FETCH_HOST_MAX) {
		snprintf(err, errlen, "URL has no valid host");
		return -1;
	}
	for (size_t i = 0; i < hl; i++) {
		if (!host_char(h[i])) {
			snprintf(err, errlen, "URL host has a character outside [A-Za-z0-9.-]");
			return -1;
		}
		u->host[i] = (char)tolower((unsigned char)h[i]);
	}
	if (u->host[0] == '.' || u->host[0] == '-' || strstr(u->host, "..")) {
		snprintf(err, errlen, "URL host is malformed");
		return -1;
	}
	u->port = 443;
	if (colon) {
		unsigned long p = 0;
		const char *q = colon + 1;
		if (q == end || end - q > 5) {
			snprintf(err, errlen, "URL port is malformed");
			return -1;
		}
		for (; q < end; q++) {
			if (*q < '0' || *q > '9') {
				snprintf(err, errlen, "URL port is malformed");
				return -1;
			}
			p = p * 10 + (unsigned long)(*q - '0');
		}
		if (p == 0 || p > 65535) {
			snprintf(err, errlen, "URL port out of range");
			return -1;
		}
		u->port = (uint16_t)p;
	}
	/* Path and query; the fragment is the client's, never sent. */
	size_t pl = strcspn(end, "#");
	if (pl == 0 || end[0] == '?') {
		u->path[0] = '/';
		memcpy(u->path + 1, end, pl);
		u->path[pl + 1] = 0;
	} else {
		memcpy(u->path, end, pl);
		u->path[pl] = 0;
	}
	return 0;
}

int fetch_url_format(const fetch_url *u, char *out, size_t outlen)
{
	int n = u->port == 443 ? snprintf(out, outlen, "https://%s%s", u->host, u->path)
			       : snprintf(out, outlen, "https://%s:%u%s", u->host, (unsigned)u->port, u->path);
	return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

int fetch_url_join(const fetch_url *base, const char *loc, char *out, size_t outlen, char *err, size_t errlen)
{
	fetch_url u;
	int n;
	if (!strncasecmp(loc, "http://", 7)) {
		snprintf(err, errlen, "redirect to plain http:// refused (https only): %.200s", loc);
		return -1;
	}
	if (!strncmp(loc, "//", 2))
		n = snprintf(out, outlen, "https:%s", loc);
	else if (loc[0] == '/') {
		u = *base;
		if (strlen(loc) >= sizeof(u.path)) {
			snprintf(err, errlen, "redirect location too long");
			return -1;
		}
		snprintf(u.path, sizeof(u.path), "%s", loc);
		if (fetch_url_format(&u, out, outlen)) {
			snprintf(err, errlen, "redirect location too long");
			return -1;
		}
		n = (int)strlen(out);
	} else if (!strncasecmp(loc, "https://", 8))
		n = snprintf(out, outlen, "%s", loc);
	else {
		snprintf(err, errlen, "redirect to an unsupported location: %.200s", loc);
		return -1;
	}
	if (n < 0 || (size_t)n >= outlen) {
		snprintf(err, errlen, "redirect location too long");
		return -1;
	}
	/* Normalise through the parser (same checks as any URL). */
	if (fetch_url_parse(out, &u, err, errlen) || fetch_url_format(&u, out, outlen)) {
		if (!err[0])
			snprintf(err, errlen, "redirect location too long");
		return -1;
	}
	return 0;
}

/* ---- response head ---- */

static int tchar(int c)
{
	return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Parses a decimal u64 of p[0..n); -1 on anything else or overflow. */
static int parse_u64(const char *p, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	if (n == 0 || n > 19)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -1;
		v = v * 10 + (uint64_t)(p[i] - '0');
	}
	*out = v;
	return 0;
}

static void copy_val(char *dst, size_t cap, const char *v, size_t n)
{
	if (n >= cap)
		n = cap - 1;
	memcpy(dst, v, n);
	dst[n] = 0;
}

/* Content-Range: bytes first-last/total (RFC 9110 §14.4); total may be '*'. */
static int parse_range(http1_resp *r, const char *v, size_t n)
{
	if (n < 6 || strncasecmp(v, "bytes ", 6))
		return -1;
	v += 6, n -= 6;
	const char *dash = memchr(v, '-', n), *sl = memchr(v, '/', n);
	if (!dash || !sl || sl < dash)
		return -1;
	if (parse_u64(v, (size_t)(dash - v), &r->range_first) ||
	    parse_u64(dash + 1, (size_t)(sl - dash - 1), &r->range_last) || r->range_last < r->range_first)
		return -1;
	size_t tl = n - (size_t)(sl + 1 - v);
	if (tl == 1 && sl[1] == '*')
		r->range_total = 0;
	else if (parse_u64(sl + 1, tl, &r->range_total) || r->range_last >= r->range_total)
		return -1;
	r->has_range = 1;
	return 0;
}

int http1_parse_head(const uint8_t *p, size_t n, http1_resp *r, char *err, size_t errlen)
{
	/* Find the end of the head: CRLFCRLF (bare LF line ends accepted, as
	 * RFC 9112 §2.2 allows a recipient to). */
	size_t end = 0;
	size_t lim = n < HTTP1_MAX_HEAD ? n : HTTP1_MAX_HEAD;
	for (size_t i = 0; i < lim; i++) {
		if (p[i] != '\n')
			continue;
		if (i >= 1 && p[i - 1] == '\n') {
			end = i + 1;
			break;
		}
		if (i >= 2 && p[i - 1] == '\r' && p[i - 2] == '\n') {
			end = i + 1;
			break;
		}
	}
	if (!end) {
		if (n >= HTTP1_MAX_HEAD) {
			snprintf(err, errlen, "response header larger than %d bytes", HTTP1_MAX_HEAD);
			return -1;
		}
		return 0;
	}
	memset(r, 0, sizeof(*r));
	r->content_length = -1;
	const char *s = (const char *)p;
	size_t pos = 0;
	int line_no = 0, saw_te = 0;
	while (pos < end) {
		size_t le = pos;
		while (le < end && s[le] != '\n')
			le++;
		size_t ll = le - pos;
		if (ll && s[pos + ll - 1] == '\r')
			ll--;
		const char *l = s + pos;
		pos = le + 1;
		for (size_t i = 0; i < ll; i++)
			if ((unsigned char)l[i] < 0x20 && l[i] != '\t') {
				snprintf(err, errlen, "control byte in the response header");
				return -1;
			}
		if (line_no++ == 0) {
			/* status-line = HTTP-version SP status-code SP [reason] */
			if (ll < 12 || memcmp(l, "HTTP/1.", 7) || (l[7] != '0' && l[7] != '1') || l[8] != ' ' ||
			    !isdigit((unsigned char)l[9]) || !isdigit((unsigned char)l[10]) ||
			    !isdigit((unsigned char)l[11]) || (ll > 12 && l[12] != ' ')) {
				snprintf(err, errlen, "malformed HTTP status line");
				return -1;
			}
			r->status = (l[9] - '0') * 100 + (l[10] - '0') * 10 + (l[11] - '0');
			if (r->status < 100 || r->status > 599) {
				snprintf(err, errlen, "HTTP status %d out of range", r->status);
				return -1;
			}
			continue;
		}
		if (ll == 0)
			break; /* end of head */
		if (line_no > HTTP1_MAX_HEADERS + 1) {
			snprintf(err, errlen, "more than %d response header fields", HTTP1_MAX_HEADERS);
			return -1;
		}
		if (l[0] == ' ' || l[0] == '\t') {
			snprintf(err, errlen, "obsolete header line folding");
			return -1;
		}
		const char *colon = memchr(l, ':', ll);
		if (!colon || colon == l) {
			snprintf(err, errlen, "malformed response header line");
			return -1;
		}
		size_t nl = (size_t)(colon - l);
		for (size_t i = 0; i < nl; i++)
			if (!tchar((unsigned char)l[i])) {
				snprintf(err, errlen, "malformed response header name");
				return -1;
			}
		const char *v = colon + 1;
		size_t vl = ll - nl - 1;
		while (vl && (*v == ' ' || *v == '\t'))
			v++, vl--;
		while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
			vl--;
#define IS(name) (nl == sizeof(name) - 1 && !strncasecmp(l, name, nl))
		if (IS("Content-Length")) {
			uint64_t cl;
			if (parse_u64(v, vl, &cl) || cl > ((uint64_t)1 << 50)) {
				snprintf(err, errlen, "malformed Content-Length");
				return -1;
			}
			if (r->content_length >= 0 && (uint64_t)r->content_length != cl) {
				snprintf(err, errlen, "conflicting Content-Length headers");
				return -1;
			}
			r->content_length = (int64_t)cl;
		} else if (IS("Transfer-Encoding")) {
			if (saw_te || vl != 7 || strncasecmp(v, "chunked", 7)) {
				snprintf(err, errlen, "unsupported Transfer-Encoding");
				return -1;
			}
			saw_te = 1;
			r->chunked = 1;
		} else if (IS("Location")) {
			if (vl >= sizeof(r->location)) {
				snprintf(err, errlen, "Location header longer than %zu bytes", sizeof(r->location) - 1);
				return -1;
			}
			copy_val(r->location, sizeof(r->location), v, vl);
		} else if (IS("ETag")) {
			copy_val(r->etag, sizeof(r->etag), v, vl);
		} else if (IS("X-Linked-Etag")) {
			copy_val(r->linked_etag, sizeof(r->linked_etag), v, vl);
		} else if (IS("X-Linked-Size")) {
			if (parse_u64(v, vl, &r->linked_size))
				r->linked_size = 0;
		} else if (IS("Content-Range")) {
			if (parse_range(r, v, vl)) {
				snprintf(err, errlen, "malformed Content-Range");
				return -1;
			}
		}
#undef IS
	}
	if (r->chunked && r->content_length >= 0) {
		snprintf(err, errlen, "both Content-Length and chunked Transfer-Encoding");
		return -1;
	}
	return (int)end;
}

/* ---- chunked bodies ---- */

enum { CH_SIZE, CH_EXT, CH_SIZE_LF, CH_DATA, CH_DATA_CR, CH_DATA_LF, CH_TRAILER, CH_TRAILER_LF, CH_DONE };

#define CH_LINE_MAX 4096
#define CH_SIZE_MAX ((uint64_t)1 << 48)

void http1_chunked_init(http1_chunked *c)
{
	memset(c, 0, sizeof(*c));
	c->state = CH_SIZE;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

long http1_chunked_decode(http1_chunked *c, uint8_t *buf, size_t n, char *err, size_t errlen)
{
	size_t out = 0, i = 0;
	while (i < n) {
		uint8_t b = buf[i];
		switch (c->state) {
		case CH_SIZE: {
			int h = hexval(b);
			if (h >= 0) {
				if (c->left > CH_SIZE_MAX / 16) {
					snprintf(err, errlen, "malformed chunked body: chunk size too large");
					return -1;
				}
				c->left = c->left * 16 + (uint64_t)h;
				c->digits++;
				i++;
				break;
			}
			if (!c->digits) {
				snprintf(err, errlen, "malformed chunked body: bad chunk size");
				return -1;
			}
			if (b == ';' || b == ' ' || b == '\t') {
				c->state = CH_EXT;
				c->line = 0;
			} else if (b == '\r') {
				c->state = CH_SIZE_LF;
			} else if (b == '\n') {
				c->state = c->left ? CH_DATA : CH_TRAILER;
				c->line = 0;
			} else {
				snprintf(err, errlen, "malformed chunked body: bad chunk size");
				return -1;
			}
			i++;
			break;
		}
		case CH_EXT:
			if (++c->line > CH_LINE_MAX) {
				snprintf(err, errlen, "malformed chunked body: chunk extension too long");
				return -1;
			}
			if (b == '\n') {
				c->state = c->left ? CH_DATA : CH_TRAILER;
				c->line = 0;
			} else if (b < 0x20 && b != '\t' && b != '\r') {
				snprintf(err, errlen, "malformed chunked body: control byte in extension");
				return -1;
			}
			i++;
			break;
		case CH_SIZE_LF:
			if (b != '\n') {
				snprintf(err, errlen, "malformed chunked body: CR without LF");
				return -1;
			}
			c->state = c->left ? CH_DATA : CH_TRAILER;
			c->line = 0;
			i++;
			break;
		case CH_DATA: {
			size_t k = n - i;
			if ((uint64_t)k > c->left)
				k = (size_t)c->left;
			memmove(buf + out, buf + i, k);
			out += k;
			i += k;
			c->left -= k;
			if (!c->left)
				c->state = CH_DATA_CR;
			break;
		}
		case CH_DATA_CR:
			if (b == '\r')
				c->state = CH_DATA_LF;
			else if (b == '\n')
				c->state = CH_SIZE, c->digits = 0;
			else {
				snprintf(err, errlen, "malformed chunked body: chunk data longer than its size");
				return -1;
			}
			i++;
			break;
		case CH_DATA_LF:
			if (b != '\n') {
				snprintf(err, errlen, "malformed chunked body: CR without LF");
				return -1;
			}
			c->state = CH_SIZE;
			c->digits = 0;
			i++;
			break;
		case CH_TRAILER:
			/* trailer-section: field lines, then an empty line. */
			if (b == '\n') {
				if (c->line == 0) {
					c->state = CH_DONE;
					c->done = 1;
				}
				c->line = 0;
			} else if (b == '\r') {
				if (c->line == 0)
					c->state = CH_TRAILER_LF;
				else
					c->line++;
			} else {
				if (++c->line > CH_LINE_MAX || (b < 0x20 && b != '\t')) {
					snprintf(err, errlen, "malformed chunked body: bad trailer");
					return -1;
				}
			}
			i++;
			break;
		case CH_TRAILER_LF:
			if (b != '\n') {
				snprintf(err, errlen, "malformed chunked body: CR without LF");
				return -1;
			}
			c->state = CH_DONE;
			c->done = 1;
			i++;
			break;
		default:
			snprintf(err, errlen, "malformed chunked body: bytes after the last chunk");
			return -1;
		}
	}
	return (long)out;
}

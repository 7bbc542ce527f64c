/* common/json.c — see json.h for the contract. RFC 8259 references inline. */
#include "json.h"
#include "common/utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <math.h>

/* Arena: values and strings live in blocks freed together. */
typedef struct block {
	struct block *next;
	size_t used, cap;
	max_align_t data[];
} block;

typedef struct {
	const unsigned char *p, *end, *start;
	json_doc *doc;
	char *err;
	size_t errlen;
	int failed;
} parser;

static void *arena_alloc(json_doc *doc, size_t n)
{
	block *b = doc->blocks;
	n = (n + 15) & ~(size_t)15;
	if (!b || b->cap - b->used < n) {
		size_t cap = n > 65536 ? n : 65536;
		block *nb = malloc(sizeof(block) + cap);
		if (!nb)
			return NULL;
		nb->next = b;
		nb->used = 0;
		nb->cap = cap;
		doc->blocks = nb;
		b = nb;
	}
	void *r = (char *)b->data + b->used;
	b->used += n;
	return r;
}

static int fail(parser *ps, const char *why)
{
	if (!ps->failed && ps->err && ps->errlen)
		snprintf(ps->err, ps->errlen, "offset %zu: %s", (size_t)(ps->p - ps->start), why);
	ps->failed = 1;
	return -1;
}

static void skip_ws(parser *ps)
{
	/* RFC 8259 §2: ws = space, tab, LF, CR only. */
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
		ps->p++;
}

static int hex4(parser *ps, uint32_t *out)
{
	uint32_t v = 0;
	if (ps->end - ps->p < 4)
		return fail(ps, "truncated \\u escape");
	for (int i = 0; i < 4; i++) {
		unsigned c = ps->p[i];
		v <<= 4;
		if (c >= '0' && c <= '9') v |= c - '0';
		else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
		else return fail(ps, "bad hex digit in \\u escape");
	}
	ps->p += 4;
	*out = v;
	return 0;
}

static size_t put_utf8(unsigned char *o, uint32_t cp)
{
	if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
	if (cp < 0x800) { o[0] = 0xC0 | (cp >> 6); o[1] = 0x80 | (cp & 0x3F); return 2; }
	if (cp < 0x10000) { o[0] = 0xE0 | (cp >> 12); o[1] = 0x80 | ((cp >> 6) & 0x3F); o[2] = 0x80 | (cp & 0x3F); return 3; }
	o[0] = 0xF0 | (cp >> 18); o[1] = 0x80 | ((cp >> 12) & 0x3F); o[2] = 0x80 | ((cp >> 6) & 0x3F); o[3] = 0x80 | (cp & 0x3F);
	return 4;
}

static int parse_string(parser *ps, const char **out, uint32_t *outn)
{
	/* Caller checked the opening quote. First pass: find the end and an
	 * upper bound of the decoded size (decoded <= raw length). */
	ps->p++;
	const unsigned char *s = ps->p;
	size_t raw = 0;
	while (s + raw < ps->end && s[raw] != '"') {
		if (s[raw] == '\\') raw++;
		raw++;
	}
	if (s + raw >= ps->end)
		return fail(ps, "unterminated string");
	if (raw > UINT32_MAX - 1)
		return fail(ps, "string too long");
	unsigned char *o = arena_alloc(ps->doc, raw + 1);
	if (!o)
		return fail(ps, "out of memory");
	size_t n = 0;
	while (*ps->p != '"') {
		unsigned c = *ps->p;
		if (c < 0x20)
			return fail(ps, "control character in string"); /* §7 */
		if (c == '\\') {
			ps->p++;
			c = *ps->p++;
			switch (c) {
			case '"': o[n++] = '"'; break;
			case '\\': o[n++] = '\\'; break;
			case '/': o[n++] = '/'; break;
			case 'b': o[n++] = '\b'; break;
			case 'f': o[n++] = '\f'; break;
			case 'n': o[n++] = '\n'; break;
			case 'r': o[n++] = '\r'; break;
			case 't': o[n++] = '\t'; break;
			case 'u': {
				uint32_t cp, lo;
				if (hex4(ps, &cp)) return -1;
				if (cp >= 0xDC00 && cp <= 0xDFFF)
					return fail(ps, "lone low surrogate escape");
				if (cp >= 0xD800 && cp <= 0xDBFF) {
					if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u')
						return fail(ps, "lone high surrogate escape");
					ps->p += 2;
					if (hex4(ps, &lo)) return -1;
					if (lo < 0xDC00 || lo > 0xDFFF)
						return fail(ps, "bad surrogate pair");
					cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
				}
				/* \uXXXX (6 raw bytes) decodes to <= 3 bytes; a pair (12) to 4. */
				n += put_utf8(o + n, cp);
				break;
			}
			default:
				ps->p--;
				return fail(ps, "bad escape");
			}
		} else {
			uint32_t cp;
			size_t l = utf8_decode(ps->p, (size_t)(ps->end - ps->p), &cp);
			if (!l)
				return fail(ps, "invalid UTF-8 in string");
			memcpy(o + n, ps->p, l);
			n += l;
			ps->p += l;
		}
	}
	ps->p++;
	o[n] = 0;
	*out = (const char *)o;
	*outn = (uint32_t)n;
	return 0;
}

static int parse_number(parser *ps, json_value *v)
{
	/* §6: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? */
	const unsigned char *s = ps->p;
	int frac = 0;
	if (ps->p < ps->end && *ps->p == '-') ps->p++;
	if (ps->p >= ps->end) return fail(ps, "truncated number");
	if (*ps->p == '0') ps->p++;
	else if (*ps->p >= '1' && *ps->p <= '9') while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
	else return fail(ps, "bad number");
	if (ps->p < ps->end && *ps->p == '.') {
		frac = 1;
		ps->p++;
		if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, "bad fraction");
		while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
	}
	if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
		frac = 1;
		ps->p++;
		if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-')) ps->p++;
		if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, "bad exponent");
		while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
	}
	size_t n = (size_t)(ps->p - s);
	if (n > 64)
		return fail(ps, "number longer than 64 characters");
	char tmp[72];
	memcpy(tmp, s, n);
	tmp[n] = 0;
	v->type = JSON_NUMBER;
	v->num = strtod(tmp, NULL);
	v->is_int = 0;
	if (!frac) {
		errno = 0;
		long long ll = strtoll(tmp, NULL, 10);
		if (errno == 0) {
			v->is_int = 1;
			v->i = ll;
		}
	}
	return 0;
}

static int parse_value(parser *ps, json_value *v, int depth);

static int parse_container(parser *ps, json_value *v, int depth, int is_obj)
{
	/* Collect children in a temporary growable array, then copy into the
	 * arena so the tree is contiguous per container. */
	size_t cap = 8, n = 0;
	if (depth >= JSON_MAX_DEPTH) /* depth counts the containers around this one */
		return fail(ps, "nesting deeper than 64");
	json_value *tmp = malloc(cap * sizeof(*tmp));
	if (!tmp)
		return fail(ps, "out of memory");
	ps->p++;
	skip_ws(ps);
	char close = is_obj ? '}' : ']';
	if (ps->p < ps->end && *ps->p == close) {
		ps->p++;
		goto done;
	}
	for (;;) {
		if (n + 2 > cap) {
			cap *= 2;
			json_value *t2 = realloc(tmp, cap * sizeof(*tmp));
			if (!t2) { free(tmp); return fail(ps, "out of memory"); }
			tmp = t2;
		}
		skip_ws(ps);
		if (is_obj) {
			if (ps->p >= ps->end || *ps->p != '"') { free(tmp); return fail(ps, "expected object key"); }
			memset(&tmp[n], 0, sizeof(tmp[n]));
			tmp[n].type = JSON_STRING;
			if (parse_string(ps, &tmp[n].str, &tmp[n].n)) { free(tmp); return -1; }
			n++;
			skip_ws(ps);
			if (ps->p >= ps->end || *ps->p != ':') { free(tmp); return fail(ps, "expected ':'"); }
			ps->p++;
		}
		if (parse_value(ps, &tmp[n], depth + 1)) { free(tmp); return -1; }
		n++;
		skip_ws(ps);
		if (ps->p >= ps->end) { free(tmp); return fail(ps, "unterminated container"); }
		if (*ps->p == ',') { ps->p++; continue; }
		if (*ps->p == close) { ps->p++; break; }
		free(tmp);
		return fail(ps, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
	}
done:
	if (is_obj) {
		/* Reject duplicate keys. Quadratic for small objects; sort-free
		 * hashing keeps big ones (tokenizer vocab: ~150k keys) linear. */
		size_t m = n / 2;
		if (m > 1) {
			size_t hcap = 16;
			while (hcap < m * 2) hcap <<= 1;
			uint32_t *h = calloc(hcap, sizeof(uint32_t));
			if (!h) { free(tmp); return fail(ps, "out of memory"); }
			for (size_t k = 0; k < m; k++) {
				const json_value *key = &tmp[2 * k];
				uint64_t hv = 1469598103934665603ull;
				for (uint32_t j = 0; j < key->n; j++) hv = (hv ^ (unsigned char)key->str[j]) * 1099511628211ull;
				size_t slot = hv & (hcap - 1);
				while (h[slot]) {
					const json_value *o = &tmp[2 * (h[slot] - 1)];
					if (o->n == key->n && memcmp(o->str, key->str, key->n) == 0) {
						free(h); free(tmp);
						return fail(ps, "duplicate object key");
					}
					slot = (slot + 1) & (hcap - 1);
				}
				h[slot] = (uint32_t)k + 1;
			}
			free(h);
		}
	}
	v->type = is_obj ? JSON_OBJECT : JSON_ARRAY;
	v->n = (uint32_t)(is_obj ? n / 2 : n);
	v->items = NULL;
	if (n) {
		v->items = arena_alloc(ps->doc, n * sizeof(json_value));
		if (!v->items) { free(tmp); return fail(ps, "out of memory"); }
		memcpy(v->items, tmp, n * sizeof(json_value));
	}
	free(tmp);
	return 0;
}

static int lit(parser *ps, const char *w, size_t n)
{
	if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, w, n) != 0)
		return fail(ps, "bad literal");
	ps->p += n;
	return 0;
}

static int parse_value(parser *ps, json_value *v, int depth)
{
	memset(v, 0, sizeof(*v));
	skip_ws(ps);
	if (ps->p >= ps->end)
		return fail(ps, "unexpected end of input");
	switch (*ps->p) {
	case '{': return parse_container(ps, v, depth, 1);
	case '[': return parse_container(ps, v, depth, 0);
	case '"': v->type = JSON_STRING; return parse_string(ps, &v->str, &v->n);
	case 't': v->type = JSON_TRUE; return lit(ps, "true", 4);
	case 'f': v->type = JSON_FALSE; return lit(ps, "false", 5);
	case 'n': v->type = JSON_NULL; return lit(ps, "null", 4);
	default: return parse_number(ps, v);
	}
}

int json_parse(const char *buf, size_t len, json_doc *doc, char *err, size_t errlen)
{
	parser ps = { (const unsigned char *)buf, (const unsigned char *)buf + len,
		      (const unsigned char *)buf, doc, err, errlen, 0 };
	doc->root = NULL;
	doc->blocks = NULL;
	json_value *root = arena_alloc(doc, sizeof(json_value));
	if (!root) {
		fail(&ps, "out of memory");
		return -1;
	}
	if (parse_value(&ps, root, 0))
		goto bad;
	skip_ws(&ps);
	if (ps.p != ps.end) {
		fail(&ps, "trailing bytes after JSON value");
		goto bad;
	}
	doc->root = root;
	return 0;
bad:
	json_free(doc);
	return -1;
}

void json_free(json_doc *doc)
{
	block *b = doc->blocks;
	while (b) {
		block *n = b->next;
		free(b);
		b = n;
	}
	doc->blocks = NULL;
	doc->root = NULL;
}

const json_value *json_get(const json_value *obj, const char *key)
{
	if (!obj || obj->type != JSON_OBJECT)
		return NULL;
	size_t kl = strlen(key);
	for (uint32_t i = 0; i < obj->n; i++) {
		const json_value *k = &obj->items[2 * i];
		if (k->n == kl && memcmp(k->str, key, kl) == 0)
			return &obj->items[2 * i + 1];
	}
	return NULL;
}

const json_value *json_at(const json_value *arr, uint32_t idx)
{
	if (!arr || arr->type != JSON_ARRAY || idx >= arr->n)
		return NULL;
	return &arr->items[idx];
}

int json_get_int(const json_value *obj, const char *key, int64_t *out)
{
	const json_value *v = json_get(obj, key);
	if (!v || v->type == JSON_NULL) return 1;
	if (v->type != JSON_NUMBER) return -1;
	if (v->is_int) { *out = v->i; return 0; }
	/* 1.0 or 1e3 written as float but integral: accept when exact. */
	if (v->num == floor(v->num) && fabs(v->num) < 9e15) { *out = (int64_t)v->num; return 0; }
	return -1;
}

int json_get_num(const json_value *obj, const char *key, double *out)
{
	const json_value *v = json_get(obj, key);
	if (!v || v->type == JSON_NULL) return 1;
	if (v->type != JSON_NUMBER) return -1;
	*out = v->num;
	return 0;
}

int json_get_bool(const json_value *obj, const char *key, int *out)
{
	const json_value *v = json_get(obj, key);
	if (!v || v->type == JSON_NULL) return 1;
	if (v->type == JSON_TRUE) { *out = 1; return 0; }
	if (v->type == JSON_FALSE) { *out = 0; return 0; }
	return -1;
}

int json_get_str(const json_value *obj, const char *key, const char **out)
{
	const json_value *v = json_get(obj, key);
	if (!v || v->type == JSON_NULL) return 1;
	if (v->type != JSON_STRING) return -1;
	*out = v->str;
	return 0;
}

/* ---- writer ---- */

static int jw_grow(jw_buf *w, size_t extra)
{
	if (w->oom) return -1;
	if (w->cap - w->len > extra) return 0;
	size_t nc = w->cap ? w->cap : 256;
	while (nc - w->len <= extra) {
		if (nc > SIZE_MAX / 2) { w->oom = 1; return -1; }
		nc *= 2;
	}
	char *nb = realloc(w->buf, nc);
	if (!nb) { w->oom = 1; return -1; }
	w->buf = nb;
	w->cap = nc;
	return 0;
}

void jw_raw(jw_buf *w, const char *s, size_t n)
{
	if (jw_grow(w, n)) return;
	memcpy(w->buf + w->len, s, n);
	w->len += n;
}

void jw_cstr(jw_buf *w, const char *s) { jw_raw(w, s, strlen(s)); }

void jw_str(jw_buf *w, const char *s, size_t n)
{
	static const char hexd[] = "0123456789abcdef";
	jw_raw(w, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char e[6];
		switch (c) {
		case '"': jw_raw(w, "\\\"", 2); break;
		case '\\': jw_raw(w, "\\\\", 2); break;
		case '\n': jw_raw(w, "\\n", 2); break;
		case '\r': jw_raw(w, "\\r", 2); break;
		case '\t': jw_raw(w, "\\t", 2); break;
		default:
			if (c < 0x20) {
				e[0] = '\\'; e[1] = 'u'; e[2] = '0'; e[3] = '0';
				e[4] = hexd[c >> 4]; e[5] = hexd[c & 15];
				jw_raw(w, e, 6);
			} else {
				jw_raw(w, (const char *)&c, 1);
			}
		}
	}
	jw_raw(w, "\"", 1);
}

void jw_fmt(jw_buf *w, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || jw_grow(w, (size_t)n + 1)) return;
	va_start(ap, fmt);
	vsnprintf(w->buf + w->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	w->len += (size_t)n;
}

int jw_finish(jw_buf *w)
{
	if (jw_grow(w, 1)) return -1;
	w->buf[w->len] = 0;
	return w->oom ? -1 : 0;
}

void jw_free(jw_buf *w)
{
	free(w->buf);
	memset(w, 0, sizeof(*w));
}

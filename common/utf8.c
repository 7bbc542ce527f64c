/* common/utf8.c — see utf8.h. */
#include "common/utf8.h"

#include <string.h>

/* RFC 3629 §4 table: the second byte's range narrows for E0 (no
 * overlong), ED (no surrogate), F0 (no overlong), F4 (<= U+10FFFF). */
size_t utf8_decode(const unsigned char *p, size_t n, uint32_t *cp)
{
	unsigned c = p[0];
	size_t len;
	unsigned lo = 0x80, hi = 0xBF;
	uint32_t v;
	if (c < 0x80) { *cp = c; return 1; }
	if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; }
	else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
	else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
	else return 0;
	if (n < len || p[1] < lo || p[1] > hi)
		return 0;
	v = (v << 6) | (p[1] & 0x3F);
	for (size_t i = 2; i < len; i++) {
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		v = (v << 6) | (p[i] & 0x3F);
	}
	*cp = v;
	return len;
}

int utf8_valid(const void *pv, size_t n)
{
	const unsigned char *p = pv;
	uint32_t cp;
	for (size_t i = 0, k; i < n; i += k)
		if (!(k = utf8_decode(p + i, n - i, &cp)))
			return 0;
	return 1;
}

int utf8_partial(const unsigned char *p, size_t n)
{
	unsigned c = p[0];
	size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
	if (c < 0xC2 || c > 0xF4 || n >= need) return 0;
	for (size_t i = 1; i < n; i++) {
		unsigned lo = 0x80, hi = 0xBF;
		if (i == 1) {
			if (c == 0xE0) lo = 0xA0;
			if (c == 0xED) hi = 0x9F;
			if (c == 0xF0) lo = 0x90;
			if (c == 0xF4) hi = 0x8F;
		}
		if (p[i] < lo || p[i] > hi) return 0;
	}
	return 1;
}

static size_t repl(char *out, int flags)
{
	if (flags & UTF8_REPL_FFFD) {
		memcpy(out, "\xEF\xBF\xBD", 3);
		return 3;
	}
	*out = '?';
	return 1;
}

/* One well-formed character p[0..k) (code point cp) into out. */
static size_t put_char(char *out, const unsigned char *p, size_t k, uint32_t cp, int flags)
{
	/* controls (C0, DEL, C1) and the bidirectional embeddings, overrides
	 * and isolates (LRE..RLO, LRI..PDI), which make a terminal that
	 * reorders text show it in another order than it is (CVE-2021-42574) */
	int ctl = cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) ||
		  (cp >= 0x2066 && cp <= 0x2069);
	if (ctl && !(flags & UTF8_KEEP_CONTROLS) && !((flags & UTF8_KEEP_NL_TAB) && (cp == '\n' || cp == '\t')))
		return repl(out, flags);
	memcpy(out, p, k);
	return k;
}

size_t utf8_clean(utf8_hold *h, const void *sv, size_t n, int final, int flags, char *out)
{
	const unsigned char *s = sv;
	size_t o = 0, i = 0;
	uint32_t cp;
	if (h && h->n) {
		/* The held bytes are a proper prefix of a character: complete it
		 * with at most 3 more bytes, or (still a prefix) keep holding, or
		 * (invalid) replace each held byte: the lead byte is invalid and
		 * the rest are continuation bytes, which start nothing. */
		unsigned char t[6];
		size_t hn = h->n, tn = hn + (n < 3 ? n : 3);
		memcpy(t, h->b, hn);
		memcpy(t + hn, s, tn - hn);
		h->n = 0;
		size_t k = utf8_decode(t, tn, &cp);
		if (k) {
			o += put_char(out, t, k, cp, flags);
			i = k - hn;
		} else if (!final && utf8_partial(t, tn)) {
			memcpy(h->b, t, tn); /* tn < 4, and all of s is in t */
			h->n = tn;
			return 0;
		} else {
			for (size_t j = 0; j < hn; j++)
				o += repl(out + o, flags);
		}
	}
	while (i < n) {
		size_t k = utf8_decode(s + i, n - i, &cp);
		if (k) {
			o += put_char(out + o, s + i, k, cp, flags);
			i += k;
		} else if (h && !final && utf8_partial(s + i, n - i)) {
			memcpy(h->b, s + i, n - i); /* n - i < 4: a prefix */
			h->n = n - i;
			break;
		} else {
			o += repl(out + o, flags);
			i++;
		}
	}
	return o;
}

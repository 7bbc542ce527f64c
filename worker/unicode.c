/* worker/unicode.c — see unicode.h. NFC follows UAX #15 (decompose,
 * canonical order, compose), with Hangul handled algorithmically
 * (Unicode §3.12). */
#include "worker/unicode.h"

#include <stdlib.h>
#include <string.h>

size_t uni_encode(uint32_t cp, unsigned char *o)
{
	if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
	if (cp < 0x800) { o[0] = (unsigned char)(0xC0 | (cp >> 6)); o[1] = (unsigned char)(0x80 | (cp & 0x3F)); return 2; }
	if (cp < 0x10000) {
		o[0] = (unsigned char)(0xE0 | (cp >> 12)); o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		o[2] = (unsigned char)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (unsigned char)(0xF0 | (cp >> 18)); o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
	o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (unsigned char)(0x80 | (cp & 0x3F));
	return 4;
}

static int range_find(const uni_range *r, size_t n, uint32_t cp)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (cp < r[mid].lo) hi = mid;
		else if (cp > r[mid].hi) lo = mid + 1;
		else return r[mid].v;
	}
	return 0;
}

int uni_class(uint32_t cp)
{
	if (cp < 0x80) {
		if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return UNI_LETTER;
		if (cp >= '0' && cp <= '9') return UNI_NUMBER;
		return UNI_OTHER;
	}
	return range_find(uni_class_ranges, uni_class_nranges, cp);
}

int uni_is_space(uint32_t cp)
{
	/* White_Space (PropList.txt); stable since Unicode 6.3. */
	return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
	       cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
	       cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

int uni_ccc(uint32_t cp)
{
	if (cp < 0x300) return 0;
	return range_find(uni_ccc_ranges, uni_ccc_nranges, cp);
}

int uni_nfc_quick(const unsigned char *p, size_t n)
{
	size_t i = 0;
	while (i < n) {
		uint32_t cp;
		if (p[i] < 0x80) { i++; continue; }
		size_t l = utf8_decode(p + i, n - i, &cp);
		if (!l) return 0;
		if (cp >= 0x300 && range_find(uni_nfc_maybe_ranges, uni_nfc_maybe_nranges, cp))
			return 0;
		i += l;
	}
	return 1;
}

/* Hangul constants, Unicode §3.12. */
enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7,
       LCOUNT = 19, VCOUNT = 21, TCOUNT = 28, NCOUNT = 588, SCOUNT = 11172 };

static const uni_decomp *decomp_find(uint32_t cp)
{
	size_t lo = 0, hi = uni_ndecomps;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (cp < uni_decomps[mid].cp) hi = mid;
		else if (cp > uni_decomps[mid].cp) lo = mid + 1;
		else return &uni_decomps[mid];
	}
	return NULL;
}

static uint32_t compose(uint32_t a, uint32_t b)
{
	if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
		return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
	if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 &&
	    b > TBASE && b < TBASE + TCOUNT)
		return a + (b - TBASE);
	size_t lo = 0, hi = uni_ncomps;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const uni_comp *c = &uni_comps[mid];
		if (a < c->a || (a == c->a && b < c->b)) hi = mid;
		else if (a > c->a || b > c->b) lo = mid + 1;
		else return c->cp;
	}
	return 0;
}

typedef struct { uint32_t cp; size_t src; } nfc_ch;

/* Appends the full canonical decomposition of cp. Canonical decompositions
 * nest at most 4 deep in practice; the depth cap only guards the tables. */
static void decompose(uint32_t cp, size_t src, nfc_ch *buf, size_t *n, int depth)
{
	if (cp >= SBASE && cp < SBASE + SCOUNT) {
		uint32_t s = cp - SBASE;
		buf[(*n)++] = (nfc_ch){ LBASE + s / NCOUNT, src };
		buf[(*n)++] = (nfc_ch){ VBASE + (s % NCOUNT) / TCOUNT, src };
		if (s % TCOUNT)
			buf[(*n)++] = (nfc_ch){ TBASE + s % TCOUNT, src };
		return;
	}
	const uni_decomp *d = depth < 8 ? decomp_find(cp) : NULL;
	if (!d) {
		buf[(*n)++] = (nfc_ch){ cp, src };
		return;
	}
	decompose(d->a, src, buf, n, depth + 1);
	if (d->b)
		buf[(*n)++] = (nfc_ch){ d->b, src };
}

int uni_nfc(const unsigned char *in, size_t n, unsigned char **out, size_t *outn, size_t **map)
{
	/* Every code point decomposes into at most 4 (the longest canonical
	 * decomposition in UnicodeData.txt has 4 code points, after
	 * recursion), and takes at least 1 input byte. */
	nfc_ch *buf = NULL;
	unsigned char *o = NULL;
	size_t *m = NULL, nb = 0, i = 0;
	*out = NULL;
	*map = NULL;
	*outn = 0;
	if (n > SIZE_MAX / (4 * sizeof(nfc_ch)) - 1)
		return -1;
	buf = malloc((4 * n + 1) * sizeof(nfc_ch));
	if (!buf)
		return -1;
	while (i < n) {
		uint32_t cp;
		size_t l = utf8_decode(in + i, n - i, &cp);
		if (!l) { free(buf); return -1; }
		decompose(cp, i, buf, &nb, 0);
		i += l;
	}
	/* Canonical ordering: stable insertion sort of non-starter runs. */
	for (size_t k = 1; k < nb; k++) {
		int c = uni_ccc(buf[k].cp);
		if (!c) continue;
		size_t j = k;
		nfc_ch x = buf[k];
		while (j > 0) {
			int pc = uni_ccc(buf[j - 1].cp);
			if (pc <= c) break;
			buf[j] = buf[j - 1];
			j--;
		}
		buf[j] = x;
	}
	/* Canonical composition (UAX #15 §X). */
	size_t w = 0;
	if (nb) {
		size_t starter = 0;
		int last = uni_ccc(buf[0].cp) ? 256 : 0;
		w = 1;
		for (size_t k = 1; k < nb; k++) {
			int c = uni_ccc(buf[k].cp);
			uint32_t comp = compose(buf[starter].cp, buf[k].cp);
			if (comp && (last < c || last == 0)) {
				buf[starter].cp = comp;
				continue;
			}
			if (c == 0)
				starter = w;
			last = c;
			buf[w++] = buf[k];
		}
	}
	o = malloc(4 * w + 1);
	m = malloc((4 * w + 1) * sizeof(size_t));
	if (!o || !m) {
		free(buf); free(o); free(m);
		return -1;
	}
	size_t ol = 0;
	for (size_t k = 0; k < w; k++) {
		size_t l = uni_encode(buf[k].cp, o + ol);
		for (size_t j = 0; j < l; j++)
			m[ol + j] = buf[k].src;
		ol += l;
	}
	free(buf);
	*out = o;
	*outn = ol;
	*map = m;
	return 0;
}

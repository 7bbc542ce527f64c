/* worker/tok_encode.c — text to ids, in Hugging Face tokenizers' order:
 *   1. split the text around added tokens that are matched on raw text
 *      (normalized=false), leftmost longest (AddedVocabulary);
 *   2. normalize each remaining piece, then split it around added tokens
 *      matched on normalized text (normalized=true);
 *   3. pre-tokenize each remaining piece (Split / Digits / Metaspace /
 *      ByteLevel steps, each refining the list of pieces);
 *   4. run BPE on each piece (BPE::tokenize_with_cache without the cache:
 *      word construction with unk / byte fallback, then merges lowest rank
 *      first, leftmost on ties, through a binary heap: O(k log k) for a
 *      piece of k characters).
 * special_mask gates special added tokens: see tokenizer.h. */
#include "worker/tok_int.h"
#include "worker/unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Text limit: ids are counted in size_t but stored as int; 1 GiB of text
 * is far beyond any context window. */
#define TOK_MAX_TEXT ((size_t)1 << 30)

typedef struct { int *v; size_t n, cap; int oom; } ivec;

static void iv_push(ivec *a, int x)
{
	if (a->oom) return;
	if (a->n == a->cap) {
		size_t nc = a->cap ? a->cap * 2 : 64;
		int *nv = realloc(a->v, nc * sizeof(int));
		if (!nv) { a->oom = 1; return; }
		a->v = nv;
		a->cap = nc;
	}
	a->v[a->n++] = x;
}

/* A growable byte buffer with a parallel mask. */
typedef struct { char *b; unsigned char *m; size_t n, cap; int oom; } mbuf;

static void mb_put(mbuf *o, const char *s, size_t n, unsigned char mask)
{
	if (o->oom) return;
	if (o->cap - o->n < n + 1) {
		size_t nc = o->cap ? o->cap : 64;
		while (nc - o->n < n + 1) nc *= 2;
		char *nb = realloc(o->b, nc);
		if (!nb) { o->oom = 1; return; }
		o->b = nb;
		unsigned char *nm = realloc(o->m, nc);
		if (!nm) { o->oom = 1; return; }
		o->m = nm;
		o->cap = nc;
	}
	memcpy(o->b + o->n, s, n);
	memset(o->m + o->n, mask, n);
	o->n += n;
}

int tok_normalize(const tokenizer *t, const char *s, size_t n, const unsigned char *mask,
		  char **out, size_t *outn, unsigned char **outmask)
{
	mbuf cur = { 0 };
	*out = NULL;
	*outmask = NULL;
	*outn = 0;
	mb_put(&cur, s, n, 0);
	if (cur.oom) goto fail;
	if (mask) memcpy(cur.m, mask, n);
	for (size_t k = 0; k < t->nnorm; k++) {
		const tok_norm *nm = &t->norm[k];
		const char *a = t->pool + nm->a.off;
		mbuf o = { 0 };
		if (nm->type == TOK_NORM_REPLACE) {
			size_t i = 0;
			while (i < cur.n) {
				if (cur.n - i >= nm->a.len && !memcmp(cur.b + i, a, nm->a.len)) {
					unsigned char mk = 1;
					for (size_t j = 0; j < nm->a.len; j++) mk &= cur.m[i + j];
					mb_put(&o, t->pool + nm->b.off, nm->b.len, mk);
					i += nm->a.len;
				} else {
					mb_put(&o, cur.b + i, 1, cur.m[i]);
					i++;
				}
			}
		} else if (nm->type == TOK_NORM_PREPEND) {
			/* Prepend::normalize: only non-empty strings. */
			if (cur.n) mb_put(&o, a, nm->a.len, cur.m[0]);
			mb_put(&o, cur.b, cur.n, 0);
			if (!o.oom && cur.n) memcpy(o.m + o.n - cur.n, cur.m, cur.n);
		} else if (nm->type == TOK_NORM_NFC) {
			if (uni_nfc_quick((const unsigned char *)cur.b, cur.n))
				continue;
			unsigned char *ns;
			size_t nn, *map;
			if (uni_nfc((const unsigned char *)cur.b, cur.n, &ns, &nn, &map)) goto fail;
			mb_put(&o, (const char *)ns, nn, 0);
			if (!o.oom)
				for (size_t j = 0; j < nn; j++) o.m[j] = cur.m[map[j]];
			free(ns);
			free(map);
		}
		mb_put(&o, "", 0, 0); /* never leave b NULL */
		free(cur.b);
		free(cur.m);
		cur = o;
		if (cur.oom) goto fail;
	}
	*out = cur.b;
	*outmask = cur.m;
	*outn = cur.n;
	return 0;
fail:
	free(cur.b);
	free(cur.m);
	return -1;
}

/* ---- added tokens ---- */

static size_t prev_char(const unsigned char *s, size_t i)
{
	size_t j = i - 1;
	while (j > 0 && (s[j] & 0xC0) == 0x80) j--;
	return j;
}

static int word_char_at(const unsigned char *s, size_t n, size_t i)
{
	uint32_t cp;
	if (!utf8_decode(s + i, n - i, &cp)) return 0;
	return cp == '_' || uni_class(cp) != UNI_OTHER;
}

static int space_at(const unsigned char *s, size_t n, size_t i, size_t *len)
{
	uint32_t cp;
	*len = utf8_decode(s + i, n - i, &cp);
	return *len && uni_is_space(cp);
}

/* Leftmost-longest match of an added token of set `as` in s[from, n)
 * (HF AddedVocabulary::split_with_indices, aho-corasick LeftmostLongest).
 * A special token needs mask 1 on every byte it covers. */
static int find_added(const tokenizer *t, const tok_aset *as, const unsigned char *s, size_t n,
		      const unsigned char *mask, size_t from, size_t *ms, size_t *me, int *idx)
{
	if (!as->cap) return 0;
	for (size_t p = from; p < n; p++) {
		if (!as->first[s[p]] || (s[p] & 0xC0) == 0x80) continue;
		for (size_t li = 0; li < as->nlens; li++) {
			size_t L = as->lens[li];
			if (L > n - p) continue;
			int k = tok_aset_find(t, as, (const char *)s + p, L);
			if (k < 0) continue;
			const tok_added *a = &t->added[k];
			if (a->special) {
				if (!mask) continue;
				size_t j = 0;
				while (j < L && mask[p + j]) j++;
				if (j < L) continue;
			}
			if (a->single_word &&
			    ((p > 0 && word_char_at(s, n, prev_char(s, p))) || (p + L < n && word_char_at(s, n, p + L))))
				continue;
			size_t st = p, en = p + L, cl;
			if (a->lstrip)
				while (st > from) {
					size_t q = prev_char(s, st);
					if (!space_at(s, n, q, &cl)) break;
					st = q;
				}
			if (a->rstrip)
				while (en < n && space_at(s, n, en, &cl)) en += cl;
			*ms = st;
			*me = en;
			*idx = k;
			return 1;
		}
	}
	return 0;
}

/* ---- pre-tokenization ---- */

typedef struct { size_t off, len; int at_start; } span;
typedef struct { span *v; size_t n, cap; int oom; } spvec;

static void sp_push(spvec *a, size_t off, size_t len, int at_start)
{
	if (a->oom || len == 0) return; /* HF drops empty splits */
	if (a->n == a->cap) {
		size_t nc = a->cap ? a->cap * 2 : 16;
		span *nv = realloc(a->v, nc * sizeof(span));
		if (!nv) { a->oom = 1; return; }
		a->v = nv;
		a->cap = nc;
	}
	a->v[a->n++] = (span){ off, len, at_start };
}

typedef struct { size_t s, e; int m; } mrange;
typedef struct { mrange *v; size_t n, cap; int oom; } mrvec;

static void mr_push(mrvec *a, size_t s, size_t e, int m)
{
	if (a->oom) return;
	if (a->n == a->cap) {
		size_t nc = a->cap ? a->cap * 2 : 16;
		mrange *nv = realloc(a->v, nc * sizeof(mrange));
		if (!nv) { a->oom = 1; return; }
		a->v = nv;
		a->cap = nc;
	}
	a->v[a->n++] = (mrange){ s, e, m };
}

/* Splits one span by a pattern with a behavior (HF
 * NormalizedString::split and SplitDelimiterBehavior). */
static int split_span(const tok_pattern pat, const char *str, size_t strn, tok_behavior beh, int invert,
		      const unsigned char *buf, span sp, spvec *out, mrvec *mr)
{
	const unsigned char *s = buf + sp.off;
	size_t n = sp.len, i = 0, gap = 0;
	mr->n = 0;
	while (i < n) {
		size_t L;
		if (pat == TOK_PAT_STRING)
			L = (n - i >= strn && !memcmp(s + i, str, strn)) ? strn : 0;
		else
			L = tok_pat_match(pat, s, n, i);
		if (L) {
			if (gap < i) mr_push(mr, gap, i, 0);
			mr_push(mr, i, i + L, 1);
			i += L;
			gap = i;
		} else {
			i++;
			while (i < n && (s[i] & 0xC0) == 0x80) i++;
		}
	}
	if (gap < n) mr_push(mr, gap, n, 0);
	if (mr->oom) return -1;
	if (invert)
		for (size_t k = 0; k < mr->n; k++) mr->v[k].m = !mr->v[k].m;
	/* Fold by behavior into mr itself (w <= k), then emit. */
	size_t w = 0;
	switch (beh) {
	case TOK_BEH_REMOVED:
		for (size_t k = 0; k < mr->n; k++)
			if (!mr->v[k].m) mr->v[w++] = mr->v[k];
		break;
	case TOK_BEH_ISOLATED:
		w = mr->n;
		break;
	case TOK_BEH_MERGED_PREV: {
		int prevm = 0;
		for (size_t k = 0; k < mr->n; k++) {
			mrange r = mr->v[k];
			if (r.m && !prevm && w) mr->v[w - 1].e = r.e;
			else mr->v[w++] = r;
			prevm = r.m;
		}
		break;
	}
	case TOK_BEH_MERGED_NEXT: {
		/* Right to left: a match joins the piece after it. */
		int prevm = 0;
		size_t top = mr->n; /* write from the end backwards */
		for (size_t k = mr->n; k-- > 0;) {
			mrange r = mr->v[k];
			if (r.m && !prevm && top < mr->n) mr->v[top].s = r.s;
			else mr->v[--top] = r;
			prevm = r.m;
		}
		memmove(mr->v, mr->v + top, (mr->n - top) * sizeof(mrange));
		w = mr->n - top;
		break;
	}
	case TOK_BEH_CONTIGUOUS: {
		int prevm = 0;
		for (size_t k = 0; k < mr->n; k++) {
			mrange r = mr->v[k];
			if (r.m == prevm && w) mr->v[w - 1].e = r.e;
			else mr->v[w++] = r;
			prevm = r.m;
		}
		break;
	}
	default:
		return -1;
	}
	for (size_t k = 0; k < w; k++)
		sp_push(out, sp.off + mr->v[k].s, mr->v[k].e - mr->v[k].s, sp.at_start && mr->v[k].s == 0);
	return out->oom ? -1 : 0;
}

/* ---- BPE ---- */

typedef struct { uint32_t rank, pos; int32_t id; } hent;

typedef struct {
	int *sid;
	int *prev, *next;
	size_t cap;
	hent *heap;
	size_t hn, hcap;
	char *scratch;
	size_t scap;
} bpe_ctx;

static int hless(const hent *a, const hent *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static int heap_push(bpe_ctx *c, hent e)
{
	if (c->hn == c->hcap) {
		size_t nc = c->hcap ? c->hcap * 2 : 64;
		hent *nh = realloc(c->heap, nc * sizeof(hent));
		if (!nh) return -1;
		c->heap = nh;
		c->hcap = nc;
	}
	size_t i = c->hn++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!hless(&e, &c->heap[p])) break;
		c->heap[i] = c->heap[p];
		i = p;
	}
	c->heap[i] = e;
	return 0;
}

static hent heap_pop(bpe_ctx *c)
{
	hent top = c->heap[0], last = c->heap[--c->hn];
	size_t i = 0;
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		const hent *mv = &last;
		if (l < c->hn && hless(&c->heap[l], mv)) { m = l; mv = &c->heap[l]; }
		if (r < c->hn && hless(&c->heap[r], mv)) { m = r; mv = &c->heap[r]; }
		if (m == i) break;
		c->heap[i] = c->heap[m];
		i = m;
	}
	if (c->hn) c->heap[i] = last;
	return top;
}

static int ctx_reserve(bpe_ctx *c, size_t n)
{
	if (n <= c->cap) return 0;
	size_t nc = c->cap ? c->cap : 64;
	while (nc < n) nc *= 2;
	int *a = realloc(c->sid, nc * sizeof(int));
	if (!a) return -1;
	c->sid = a;
	a = realloc(c->prev, nc * sizeof(int));
	if (!a) return -1;
	c->prev = a;
	a = realloc(c->next, nc * sizeof(int));
	if (!a) return -1;
	c->next = a;
	c->cap = nc;
	return 0;
}

static int try_pair(const tokenizer *t, bpe_ctx *c, int pos)
{
	int nx = c->next[pos];
	if (nx < 0) return 0;
	const tok_merge *m = tok_merge_find(t, c->sid[pos], c->sid[nx]);
	if (!m) return 0;
	return heap_push(c, (hent){ m->rank, (uint32_t)pos, m->id });
}

static int bpe_word(const tokenizer *t, bpe_ctx *c, const unsigned char *w, size_t n, ivec *out)
{
	if (!n) return 0;
	/* Byte-level words are looked up in their mapped form (each byte as
	 * its GPT-2 code point). */
	const char *word = (const char *)w;
	size_t wn = n;
	if (t->byte_level) {
		if (c->scap < 2 * n) {
			char *ns = realloc(c->scratch, 2 * n);
			if (!ns) return -1;
			c->scratch = ns;
			c->scap = 2 * n;
		}
		wn = 0;
		for (size_t i = 0; i < n; i++)
			wn += uni_encode(tok_byte_to_cp(w[i]), (unsigned char *)c->scratch + wn);
		word = c->scratch;
	}
	if (t->ignore_merges) {
		int id = tok_vocab_find(t, word, wn);
		if (id >= 0) { iv_push(out, id); return 0; }
	}
	if (ctx_reserve(c, 4 * wn + 1)) return -1;
	/* Word construction (BPE::merge_word). */
	size_t ns = 0, i = 0;
	int unk = 0;
	while (i < wn) {
		uint32_t cp;
		size_t cl = utf8_decode((const unsigned char *)word + i, wn - i, &cp);
		if (!cl) cl = 1;
		int id = tok_vocab_find(t, word + i, cl);
		if (id >= 0) {
			if (unk) { c->sid[ns++] = t->unk_id; unk = 0; }
			c->sid[ns++] = id;
		} else {
			int done = 0;
			if (t->byte_fallback) {
				size_t j = 0;
				while (j < cl && t->fb_id[(unsigned char)word[i + j]] >= 0) j++;
				if (j == cl) {
					/* HF adds the bytes without flushing a pending unk. */
					for (j = 0; j < cl; j++) c->sid[ns++] = t->fb_id[(unsigned char)word[i + j]];
					done = 1;
				}
			}
			if (!done && t->unk_id >= 0) {
				if (unk && !t->fuse_unk) c->sid[ns++] = t->unk_id;
				unk = 1;
			}
		}
		i += cl;
	}
	if (unk) c->sid[ns++] = t->unk_id;
	for (size_t k = 0; k < ns; k++) {
		c->prev[k] = (int)k - 1;
		c->next[k] = k + 1 < ns ? (int)k + 1 : -1;
	}
	c->hn = 0;
	for (size_t k = 0; k + 1 < ns; k++)
		if (try_pair(t, c, (int)k)) return -1;
	/* Merge loop (Word::merge_all): stale entries are detected by the
	 * pair no longer producing the entry's id. Removed symbols get
	 * sid -1. */
	while (c->hn) {
		hent e = heap_pop(c);
		int pos = (int)e.pos;
		if (c->sid[pos] < 0) continue;
		int nx = c->next[pos];
		if (nx < 0) continue;
		const tok_merge *m = tok_merge_find(t, c->sid[pos], c->sid[nx]);
		if (!m || m->id != e.id) continue;
		c->sid[pos] = e.id;
		c->sid[nx] = -1;
		c->next[pos] = c->next[nx];
		if (c->next[nx] >= 0) c->prev[c->next[nx]] = pos;
		if (c->prev[pos] >= 0 && try_pair(t, c, c->prev[pos])) return -1;
		if (try_pair(t, c, pos)) return -1;
	}
	for (size_t k = 0; k < ns; k++)
		if (c->sid[k] >= 0) iv_push(out, c->sid[k]);
	return out->oom ? -1 : 0;
}

/* ---- the pipeline ---- */

typedef struct {
	const tokenizer *t;
	ivec out;
	bpe_ctx bpe;
	mrvec mr;
	char *err;
	size_t errlen;
} enc;

/* Steps 3 and 4 for one piece of normalized text. */
static int pretok_model(enc *e, const char *s, size_t n, int at_start)
{
	const tokenizer *t = e->t;
	mbuf buf = { 0 };
	spvec cur = { 0 }, nxt = { 0 };
	int rc = -1;
	mb_put(&buf, s, n, 0);
	sp_push(&cur, 0, n, at_start);
	if (buf.oom || cur.oom) goto done;
	for (size_t k = 0; k < t->npre; k++) {
		const tok_pre *p = &t->pre[k];
		mbuf nb = { 0 };
		nxt.n = 0;
		switch (p->type) {
		case TOK_PRE_SPLIT:
		case TOK_PRE_DIGITS:
			for (size_t j = 0; j < cur.n; j++)
				if (split_span(p->pat, t->pool + p->str.off, p->str.len, p->behavior, p->invert,
					       (const unsigned char *)buf.b, cur.v[j], &nxt, &e->mr))
					goto done;
			break;
		case TOK_PRE_BYTELEVEL:
			/* ByteLevel::pre_tokenize: a space before each piece not
			 * starting with one (add_prefix_space), then the GPT-2
			 * regex, Isolated. Byte-to-char mapping happens in BPE. */
			for (size_t j = 0; j < cur.n; j++) {
				span sp = cur.v[j];
				size_t start = nb.n;
				if (p->add_prefix_space && buf.b[sp.off] != ' ') mb_put(&nb, " ", 1, 0);
				mb_put(&nb, buf.b + sp.off, sp.len, 0);
				if (nb.oom) goto done;
				span ns = { start, nb.n - start, sp.at_start };
				if (p->use_regex) {
					if (split_span(TOK_PAT_GPT2, NULL, 0, TOK_BEH_ISOLATED, 0,
						       (const unsigned char *)nb.b, ns, &nxt, &e->mr))
						goto done;
				} else {
					sp_push(&nxt, ns.off, ns.len, ns.at_start);
				}
			}
			break;
		case TOK_PRE_METASPACE: {
			/* Metaspace::pre_tokenize: ' ' -> replacement, prepend it
			 * (always, or only at the start of the text for "first"),
			 * then split MergedWithNext on it. */
			const char *r = t->pool + p->str.off;
			size_t rl = p->str.len;
			spvec tmp = { 0 };
			for (size_t j = 0; j < cur.n; j++) {
				span sp = cur.v[j];
				size_t start = nb.n;
				int starts = sp.len >= rl && !memcmp(buf.b + sp.off, r, rl);
				if (!starts && buf.b[sp.off] != ' ' &&
				    (p->prepend == TOK_PREPEND_ALWAYS || (p->prepend == TOK_PREPEND_FIRST && sp.at_start)))
					mb_put(&nb, r, rl, 0);
				for (size_t q = 0; q < sp.len; q++) {
					if (buf.b[sp.off + q] == ' ') mb_put(&nb, r, rl, 0);
					else mb_put(&nb, buf.b + sp.off + q, 1, 0);
				}
				sp_push(&tmp, start, nb.n - start, sp.at_start);
			}
			if (nb.oom || tmp.oom) { free(tmp.v); free(nb.b); free(nb.m); goto done; }
			for (size_t j = 0; j < tmp.n; j++) {
				if (p->split) {
					if (split_span(TOK_PAT_STRING, r, rl, TOK_BEH_MERGED_NEXT, 0,
						       (const unsigned char *)nb.b, tmp.v[j], &nxt, &e->mr)) {
						free(tmp.v); free(nb.b); free(nb.m);
						goto done;
					}
				} else {
					sp_push(&nxt, tmp.v[j].off, tmp.v[j].len, tmp.v[j].at_start);
				}
			}
			free(tmp.v);
			break;
		}
		default:
			goto done;
		}
		if (nxt.oom || nb.oom) { free(nb.b); free(nb.m); goto done; }
		if (p->type == TOK_PRE_BYTELEVEL || p->type == TOK_PRE_METASPACE) {
			free(buf.b);
			free(buf.m);
			buf = nb;
		}
		spvec sw = cur;
		cur = nxt;
		nxt = sw;
	}
	for (size_t j = 0; j < cur.n; j++)
		if (bpe_word(t, &e->bpe, (const unsigned char *)buf.b + cur.v[j].off, cur.v[j].len, &e->out))
			goto done;
	rc = 0;
done:
	free(buf.b);
	free(buf.m);
	free(cur.v);
	free(nxt.v);
	return rc;
}

/* Step 2 (normalize, normalized added tokens) then 3-4, for one piece of
 * the original text. */
static int segment(enc *e, const char *s, size_t n, const unsigned char *mask, int at_start)
{
	const tokenizer *t = e->t;
	char *ns;
	size_t nn;
	unsigned char *nm;
	if (tok_normalize(t, s, n, mask, &ns, &nn, &nm)) return -1;
	size_t pos = 0;
	int rc = 0;
	for (;;) {
		size_t ms, me;
		int k;
		int found = find_added(t, &t->anorm, (const unsigned char *)ns, nn, mask ? nm : NULL, pos, &ms, &me, &k);
		size_t gend = found ? ms : nn;
		if (gend > pos && pretok_model(e, ns + pos, gend - pos, at_start && pos == 0)) { rc = -1; break; }
		if (!found) break;
		iv_push(&e->out, t->added[k].id);
		pos = me;
	}
	free(ns);
	free(nm);
	return rc;
}

int tok_encode(const tokenizer *t, const char *text, size_t len, const unsigned char *special_mask,
	       int **ids, size_t *n, char *err, size_t errlen)
{
	enc e;
	memset(&e, 0, sizeof(e));
	e.t = t;
	e.err = err;
	e.errlen = errlen;
	*ids = NULL;
	*n = 0;
	if (len > TOK_MAX_TEXT) {
		snprintf(err, errlen, "tokenize: text longer than %zu bytes", TOK_MAX_TEXT);
		return -1;
	}
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		size_t l = utf8_decode((const unsigned char *)text + i, len - i, &cp);
		if (!l) {
			snprintf(err, errlen, "tokenize: invalid UTF-8 at byte %zu", i);
			return -1;
		}
		i += l;
	}
	size_t pos = 0;
	int rc = 0;
	for (;;) {
		size_t ms, me;
		int k;
		int found = find_added(t, &t->araw, (const unsigned char *)text, len, special_mask, pos, &ms, &me, &k);
		size_t gend = found ? ms : len;
		if (gend > pos &&
		    segment(&e, text + pos, gend - pos, special_mask ? special_mask + pos : NULL, pos == 0)) {
			rc = -1;
			break;
		}
		if (!found) break;
		iv_push(&e.out, t->added[k].id);
		pos = me;
	}
	free(e.bpe.sid);
	free(e.bpe.prev);
	free(e.bpe.next);
	free(e.bpe.heap);
	free(e.bpe.scratch);
	free(e.mr.v);
	if (rc || e.out.oom) {
		free(e.out.v);
		snprintf(err, errlen, "tokenize: out of memory");
		return -1;
	}
	if (!e.out.v) {
		e.out.v = malloc(sizeof(int));
		if (!e.out.v) {
			snprintf(err, errlen, "tokenize: out of memory");
			return -1;
		}
	}
	*ids = e.out.v;
	*n = e.out.n;
	return 0;
}

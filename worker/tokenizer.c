/* worker/tokenizer.c — loading tokenizer.json, lookups, decoding and
 * streaming decoding. Encoding is in tok_encode.c, split regexes in
 * tok_split.c. Reference: Hugging Face tokenizers (Rust), whose
 * serialization tokenizer.json is; each behaviour below names the part of
 * it that it reproduces. */
#include "worker/tok_int.h"
#include "worker/unicode.h"
#include "common/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Limits, with reasons:
 *  - file <= 512 MiB: the largest real tokenizer.json (Gemma 3, 262k vocab,
 *    515k merges) is ~33 MB;
 *  - ids < 2^22 (4M): the largest real vocabularies are ~262k;
 *  - a piece or added token <= 4096 bytes: real ones are < 300;
 *  - merges <= 2^23. */
#define TOK_MAX_JSON ((size_t)512 << 20)
#define TOK_MAX_IDS (1 << 22)
#define TOK_MAX_PIECE 4096
#define TOK_MAX_MERGES ((size_t)1 << 23)

static const char PAT_GPT2_STR[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char PAT_LLAMA3_STR[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char PAT_QWEN2_STR[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* ---- small helpers ---- */

static int errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int errf(char *err, size_t errlen, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		int k = snprintf(err, errlen, "tokenizer.json: ");
		if (k >= 0 && (size_t)k < errlen)
			vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
		va_end(ap);
	}
	return -1;
}

uint64_t tok_hash(const void *p, size_t n)
{
	const unsigned char *s = p;
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 1099511628211ull;
	return h ^ (h >> 29);
}

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33; x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

uint32_t tok_byte_to_cp(unsigned b)
{
	/* GPT-2 bytes_to_unicode(): printable Latin-1 maps to itself, the
	 * other 68 bytes to U+0100.. in byte order. */
	if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
		return b;
	unsigned k = 0;
	for (unsigned x = 0; x < b; x++)
		if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174))
			k++;
	return 256 + k;
}

int tok_cp_to_byte(uint32_t cp)
{
	if (cp < 256)
		return ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || cp >= 174) ? (int)cp : -1;
	if (cp >= 256 + 68)
		return -1;
	unsigned k = 0;
	for (unsigned x = 0; x < 256; x++)
		if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) {
			if (k == cp - 256) return (int)x;
			k++;
		}
	return -1;
}

static int pool_add(tokenizer *t, const char *s, size_t n, tok_str *out)
{
	if (n > UINT32_MAX - 1 || t->pool_len > UINT32_MAX - 1 - n)
		return -1;
	if (t->pool_cap - t->pool_len < n + 1) {
		size_t nc = t->pool_cap ? t->pool_cap : 1 << 16;
		while (nc - t->pool_len < n + 1) nc *= 2;
		char *np = realloc(t->pool, nc);
		if (!np) return -1;
		t->pool = np;
		t->pool_cap = nc;
	}
	memcpy(t->pool + t->pool_len, s, n);
	t->pool[t->pool_len + n] = 0;
	out->off = (uint32_t)t->pool_len;
	out->len = (uint32_t)n;
	t->pool_len += n + 1;
	return 0;
}

static size_t pow2_at_least(size_t n)
{
	size_t c = 16;
	while (c < n) c <<= 1;
	return c;
}

int tok_vocab_find(const tokenizer *t, const char *s, size_t n)
{
	if (!t->vcap) return -1;
	size_t slot = tok_hash(s, n) & (t->vcap - 1);
	while (t->vslots[slot]) {
		int id = (int)t->vslots[slot] - 1;
		const tok_str *p = &t->piece[id];
		if (p->len == n && memcmp(t->pool + p->off, s, n) == 0)
			return id;
		slot = (slot + 1) & (t->vcap - 1);
	}
	return -1;
}

const tok_merge *tok_merge_find(const tokenizer *t, int a, int b)
{
	uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
	size_t slot = mix64(key) & (t->mcap - 1);
	while (t->mslots[slot].key) {
		if (t->mslots[slot].key == key)
			return &t->mslots[slot];
		slot = (slot + 1) & (t->mcap - 1);
	}
	return NULL;
}

int tok_aset_find(const tokenizer *t, const tok_aset *as, const char *s, size_t n)
{
	if (!as->cap) return -1;
	size_t slot = tok_hash(s, n) & (as->cap - 1);
	while (as->slots[slot]) {
		int k = (int)as->slots[slot] - 1;
		const tok_str *p = &t->added[k].match;
		if (p->len == n && memcmp(t->pool + p->off, s, n) == 0)
			return k;
		slot = (slot + 1) & (as->cap - 1);
	}
	return -1;
}

/* ---- parsing sections ---- */

static int get_string(const json_value *o, const char *key, const char **s, size_t *n)
{
	const json_value *v = json_get(o, key);
	if (!v || v->type != JSON_STRING) return -1;
	*s = v->str;
	*n = v->n;
	return 0;
}

/* Optional bool: absent/null -> def. -1 when present with another type. */
static int opt_bool(const json_value *o, const char *key, int def, int *out)
{
	int r = json_get_bool(o, key, out);
	if (r == 1) *out = def;
	return r < 0 ? -1 : 0;
}

/* {"String": s} pattern; -1 when not a String pattern. */
static int string_pattern(const json_value *o, const char **s, size_t *n)
{
	const json_value *p = json_get(o, "pattern");
	if (!p || p->type != JSON_OBJECT) return -1;
	return get_string(p, "String", s, n);
}

static int one_char(const char *s, size_t n)
{
	uint32_t cp;
	return n > 0 && utf8_decode((const unsigned char *)s, n, &cp) == n;
}

static int parse_prepend_scheme(const json_value *o, tok_prepend *out)
{
	const char *s;
	size_t n;
	int aps;
	if (get_string(o, "prepend_scheme", &s, &n) == 0) {
		if (!strcmp(s, "always")) *out = TOK_PREPEND_ALWAYS;
		else if (!strcmp(s, "first")) *out = TOK_PREPEND_FIRST;
		else if (!strcmp(s, "never")) *out = TOK_PREPEND_NEVER;
		else return -1;
		return 0;
	}
	/* Older files: add_prefix_space (default true). */
	if (opt_bool(o, "add_prefix_space", 1, &aps)) return -1;
	*out = aps ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
	return 0;
}

static int parse_normalizer(tokenizer *t, const json_value *o, int depth, char *err, size_t errlen)
{
	const char *type, *s, *c;
	size_t sn, cn;
	if (!o || o->type == JSON_NULL) return 0;
	if (o->type != JSON_OBJECT || json_get_str(o, "type", &type) != 0)
		return errf(err, errlen, "normalizer without a type");
	if (!strcmp(type, "Sequence")) {
		const json_value *a = json_get(o, "normalizers");
		if (!a || a->type != JSON_ARRAY || depth > 2)
			return errf(err, errlen, "normalizer Sequence: bad 'normalizers'");
		for (uint32_t i = 0; i < a->n; i++)
			if (parse_normalizer(t, &a->items[i], depth + 1, err, errlen)) return -1;
		return 0;
	}
	if (t->nnorm >= TOK_MAX_STEPS)
		return errf(err, errlen, "more than %d normalizers", TOK_MAX_STEPS);
	tok_norm *nm = &t->norm[t->nnorm];
	memset(nm, 0, sizeof(*nm));
	if (!strcmp(type, "Replace")) {
		if (string_pattern(o, &s, &sn) || sn == 0)
			return errf(err, errlen, "normalizer Replace: only non-empty String patterns are supported");
		if (get_string(o, "content", &c, &cn))
			return errf(err, errlen, "normalizer Replace: missing content");
		nm->type = TOK_NORM_REPLACE;
		if (pool_add(t, s, sn, &nm->a) || pool_add(t, c, cn, &nm->b)) return errf(err, errlen, "out of memory");
	} else if (!strcmp(type, "Prepend")) {
		if (get_string(o, "prepend", &s, &sn))
			return errf(err, errlen, "normalizer Prepend: missing prepend");
		nm->type = TOK_NORM_PREPEND;
		if (pool_add(t, s, sn, &nm->a)) return errf(err, errlen, "out of memory");
	} else if (!strcmp(type, "NFC")) {
		nm->type = TOK_NORM_NFC;
	} else {
		return errf(err, errlen, "normalizer type '%.64s' is not supported", type);
	}
	t->nnorm++;
	return 0;
}

static int parse_behavior(const json_value *o, tok_behavior *b)
{
	const char *s;
	size_t n;
	if (get_string(o, "behavior", &s, &n)) return -1;
	if (!strcmp(s, "Removed")) *b = TOK_BEH_REMOVED;
	else if (!strcmp(s, "Isolated")) *b = TOK_BEH_ISOLATED;
	else if (!strcmp(s, "MergedWithPrevious")) *b = TOK_BEH_MERGED_PREV;
	else if (!strcmp(s, "MergedWithNext")) *b = TOK_BEH_MERGED_NEXT;
	else if (!strcmp(s, "Contiguous")) *b = TOK_BEH_CONTIGUOUS;
	else return -1;
	return 0;
}

static int parse_pretok(tokenizer *t, const json_value *o, int depth, char *err, size_t errlen)
{
	const char *type, *s;
	size_t sn;
	if (!o || o->type == JSON_NULL) return 0;
	if (o->type != JSON_OBJECT || json_get_str(o, "type", &type) != 0)
		return errf(err, errlen, "pre_tokenizer without a type");
	if (!strcmp(type, "Sequence")) {
		const json_value *a = json_get(o, "pretokenizers");
		if (!a || a->type != JSON_ARRAY || depth > 2)
			return errf(err, errlen, "pre_tokenizer Sequence: bad 'pretokenizers'");
		for (uint32_t i = 0; i < a->n; i++)
			if (parse_pretok(t, &a->items[i], depth + 1, err, errlen)) return -1;
		return 0;
	}
	if (t->npre >= TOK_MAX_STEPS)
		return errf(err, errlen, "more than %d pre-tokenizers", TOK_MAX_STEPS);
	if (t->byte_level)
		return errf(err, errlen, "pre_tokenizer '%.64s' after ByteLevel is not supported (ByteLevel must be last)", type);
	tok_pre *p = &t->pre[t->npre];
	memset(p, 0, sizeof(*p));
	if (!strcmp(type, "ByteLevel")) {
		p->type = TOK_PRE_BYTELEVEL;
		if (opt_bool(o, "add_prefix_space", 1, &p->add_prefix_space) ||
		    opt_bool(o, "use_regex", 1, &p->use_regex))
			return errf(err, errlen, "pre_tokenizer ByteLevel: bad options");
		t->byte_level = 1;
	} else if (!strcmp(type, "Split")) {
		const json_value *pat = json_get(o, "pattern");
		p->type = TOK_PRE_SPLIT;
		if (!pat || pat->type != JSON_OBJECT)
			return errf(err, errlen, "pre_tokenizer Split: missing pattern");
		if (get_string(pat, "String", &s, &sn) == 0) {
			if (sn == 0) return errf(err, errlen, "pre_tokenizer Split: empty String pattern");
			p->pat = TOK_PAT_STRING;
			if (pool_add(t, s, sn, &p->str)) return errf(err, errlen, "out of memory");
		} else if (get_string(pat, "Regex", &s, &sn) == 0) {
			if (!strcmp(s, PAT_GPT2_STR)) p->pat = TOK_PAT_GPT2;
			else if (!strcmp(s, PAT_LLAMA3_STR)) p->pat = TOK_PAT_LLAMA3;
			else if (!strcmp(s, PAT_QWEN2_STR)) p->pat = TOK_PAT_QWEN2;
			else return errf(err, errlen, "pre_tokenizer Split: regex '%.200s' is not supported (known: GPT-2, Llama 3, Qwen2)", s);
		} else {
			return errf(err, errlen, "pre_tokenizer Split: pattern is neither String nor Regex");
		}
		if (parse_behavior(o, &p->behavior))
			return errf(err, errlen, "pre_tokenizer Split: unknown behavior");
		if (opt_bool(o, "invert", 0, &p->invert))
			return errf(err, errlen, "pre_tokenizer Split: bad invert");
	} else if (!strcmp(type, "Digits")) {
		int ind;
		p->type = TOK_PRE_DIGITS;
		p->pat = TOK_PAT_DIGIT;
		if (opt_bool(o, "individual_digits", 0, &ind))
			return errf(err, errlen, "pre_tokenizer Digits: bad individual_digits");
		p->behavior = ind ? TOK_BEH_ISOLATED : TOK_BEH_CONTIGUOUS;
	} else if (!strcmp(type, "Metaspace")) {
		p->type = TOK_PRE_METASPACE;
		if (get_string(o, "replacement", &s, &sn) || !one_char(s, sn))
			return errf(err, errlen, "pre_tokenizer Metaspace: replacement must be one character");
		if (parse_prepend_scheme(o, &p->prepend) || opt_bool(o, "split", 1, &p->split))
			return errf(err, errlen, "pre_tokenizer Metaspace: bad options");
		if (pool_add(t, s, sn, &p->str)) return errf(err, errlen, "out of memory");
	} else {
		return errf(err, errlen, "pre_tokenizer type '%.64s' is not supported", type);
	}
	t->npre++;
	return 0;
}

static int parse_decoder(tokenizer *t, const json_value *o, int depth, char *err, size_t errlen)
{
	const char *type, *s, *c;
	size_t sn, cn;
	if (!o || o->type == JSON_NULL) return 0;
	if (o->type != JSON_OBJECT || json_get_str(o, "type", &type) != 0)
		return errf(err, errlen, "decoder without a type");
	t->has_decoder = 1;
	if (!strcmp(type, "Sequence")) {
		const json_value *a = json_get(o, "decoders");
		if (!a || a->type != JSON_ARRAY || depth > 2)
			return errf(err, errlen, "decoder Sequence: bad 'decoders'");
		for (uint32_t i = 0; i < a->n; i++)
			if (parse_decoder(t, &a->items[i], depth + 1, err, errlen)) return -1;
		return 0;
	}
	if (t->ndec >= TOK_MAX_STEPS)
		return errf(err, errlen, "more than %d decoders", TOK_MAX_STEPS);
	tok_dec *d = &t->dec[t->ndec];
	memset(d, 0, sizeof(*d));
	if (!strcmp(type, "ByteLevel")) {
		d->type = TOK_DEC_BYTELEVEL;
	} else if (!strcmp(type, "Replace")) {
		if (string_pattern(o, &s, &sn) || sn == 0)
			return errf(err, errlen, "decoder Replace: only non-empty String patterns are supported");
		if (get_string(o, "content", &c, &cn))
			return errf(err, errlen, "decoder Replace: missing content");
		d->type = TOK_DEC_REPLACE;
		if (pool_add(t, s, sn, &d->a) || pool_add(t, c, cn, &d->b)) return errf(err, errlen, "out of memory");
	} else if (!strcmp(type, "ByteFallback")) {
		d->type = TOK_DEC_BYTEFALLBACK;
	} else if (!strcmp(type, "Fuse")) {
		d->type = TOK_DEC_FUSE;
	} else if (!strcmp(type, "Strip")) {
		int64_t a, b;
		d->type = TOK_DEC_STRIP;
		if (get_string(o, "content", &s, &sn) || !one_char(s, sn) ||
		    json_get_int(o, "start", &a) || json_get_int(o, "stop", &b) ||
		    a < 0 || b < 0 || a > 1024 || b > 1024)
			return errf(err, errlen, "decoder Strip: bad content/start/stop");
		d->start = (int)a;
		d->stop = (int)b;
		/* After Fuse the text is one token: streaming cannot strip its
		 * end, or more than the first token's start, so decode and the
		 * stream would differ (found by fuzz/tokenizer_fuzzer). Real
		 * files (Llama 2, Mistral) use start 1, stop 0. */
		for (size_t k = 0; k < t->ndec; k++)
			if (t->dec[k].type == TOK_DEC_FUSE && (a > 1 || b > 0))
				return errf(err, errlen, "decoder Strip after Fuse: only start <= 1, stop 0 are supported");
		if (pool_add(t, s, sn, &d->a)) return errf(err, errlen, "out of memory");
	} else if (!strcmp(type, "Metaspace")) {
		d->type = TOK_DEC_METASPACE;
		if (get_string(o, "replacement", &s, &sn) || !one_char(s, sn))
			return errf(err, errlen, "decoder Metaspace: replacement must be one character");
		if (parse_prepend_scheme(o, &d->prepend))
			return errf(err, errlen, "decoder Metaspace: bad options");
		if (pool_add(t, s, sn, &d->a)) return errf(err, errlen, "out of memory");
	} else {
		return errf(err, errlen, "decoder type '%.64s' is not supported", type);
	}
	t->ndec++;
	return 0;
}

/* Model section: vocab first (ids must be known before added tokens). */
static int parse_vocab(tokenizer *t, const json_value *vocab, int max_added_id, char *err, size_t errlen)
{
	int maxid = max_added_id;
	for (uint32_t i = 0; i < vocab->n; i++) {
		const json_value *v = &vocab->items[2 * i + 1];
		if (v->type != JSON_NUMBER || !v->is_int || v->i < 0 || v->i >= TOK_MAX_IDS)
			return errf(err, errlen, "model.vocab: id of '%.64s' is not an integer in [0, %d)",
				    vocab->items[2 * i].str, TOK_MAX_IDS);
		if (vocab->items[2 * i].n > TOK_MAX_PIECE)
			return errf(err, errlen, "model.vocab: piece longer than %d bytes", TOK_MAX_PIECE);
		if ((int)v->i > maxid) maxid = (int)v->i;
	}
	t->nids = maxid + 1;
	t->piece = malloc((size_t)t->nids * sizeof(*t->piece));
	t->added_of = malloc((size_t)t->nids * sizeof(*t->added_of));
	t->vcap = pow2_at_least((size_t)vocab->n * 2 + 2);
	t->vslots = calloc(t->vcap, sizeof(*t->vslots));
	if (!t->piece || !t->added_of || !t->vslots)
		return errf(err, errlen, "out of memory");
	for (int i = 0; i < t->nids; i++) {
		t->piece[i].off = 0;
		t->piece[i].len = TOK_HOLE;
		t->added_of[i] = -1;
	}
	for (uint32_t i = 0; i < vocab->n; i++) {
		const json_value *k = &vocab->items[2 * i];
		int id = (int)vocab->items[2 * i + 1].i;
		if (t->piece[id].len != TOK_HOLE)
			return errf(err, errlen, "model.vocab: id %d is given to two pieces", id);
		if (pool_add(t, k->str, k->n, &t->piece[id]))
			return errf(err, errlen, "out of memory");
		/* Pieces are distinct: the JSON parser rejects duplicate keys. */
		size_t slot = tok_hash(k->str, k->n) & (t->vcap - 1);
		while (t->vslots[slot]) slot = (slot + 1) & (t->vcap - 1);
		t->vslots[slot] = (uint32_t)id + 1;
	}
	return 0;
}

static int parse_merges(tokenizer *t, const json_value *merges, char *err, size_t errlen)
{
	char buf[2 * TOK_MAX_PIECE + 2];
	if (!merges || merges->type == JSON_NULL) {
		t->mcap = 16;
	} else {
		if (merges->type != JSON_ARRAY || merges->n > TOK_MAX_MERGES)
			return errf(err, errlen, "model.merges: not an array of at most %zu merges", TOK_MAX_MERGES);
		t->mcap = pow2_at_least((size_t)merges->n * 2 + 2);
	}
	t->mslots = calloc(t->mcap, sizeof(*t->mslots));
	if (!t->mslots)
		return errf(err, errlen, "out of memory");
	if (!merges || merges->type == JSON_NULL)
		return 0;
	for (uint32_t r = 0; r < merges->n; r++) {
		const json_value *m = &merges->items[r];
		const char *a, *b;
		size_t an, bn;
		if (m->type == JSON_STRING) {
			/* "a b": exactly one space (HF splits on ' ', needs 2 parts). */
			const char *sp = memchr(m->str, ' ', m->n);
			if (!sp || memchr(sp + 1, ' ', m->n - (size_t)(sp + 1 - m->str)))
				return errf(err, errlen, "model.merges[%u]: '%.64s' is not two pieces", r, m->str);
			a = m->str; an = (size_t)(sp - m->str);
			b = sp + 1; bn = m->n - an - 1;
		} else if (m->type == JSON_ARRAY && m->n == 2 && m->items[0].type == JSON_STRING &&
			   m->items[1].type == JSON_STRING) {
			a = m->items[0].str; an = m->items[0].n;
			b = m->items[1].str; bn = m->items[1].n;
		} else {
			return errf(err, errlen, "model.merges[%u]: neither \"a b\" nor [a, b]", r);
		}
		if (an > TOK_MAX_PIECE || bn > TOK_MAX_PIECE)
			return errf(err, errlen, "model.merges[%u]: piece too long", r);
		int ia = tok_vocab_find(t, a, an), ib = tok_vocab_find(t, b, bn);
		memcpy(buf, a, an);
		memcpy(buf + an, b, bn);
		int inew = tok_vocab_find(t, buf, an + bn);
		if (ia < 0 || ib < 0 || inew < 0)
			return errf(err, errlen, "model.merges[%u]: '%.64s' + '%.64s' names a piece not in the vocabulary",
				    r, a, b);
		/* A repeated pair takes the later rank, as HF's HashMap collect does. */
		uint64_t key = ((uint64_t)(uint32_t)ia << 32 | (uint32_t)ib) + 1;
		size_t slot = mix64(key) & (t->mcap - 1);
		while (t->mslots[slot].key && t->mslots[slot].key != key)
			slot = (slot + 1) & (t->mcap - 1);
		t->mslots[slot].key = key;
		t->mslots[slot].rank = r;
		t->mslots[slot].id = inew;
	}
	return 0;
}

static int build_aset(tokenizer *t, tok_aset *as, int normalized)
{
	size_t cnt = 0;
	for (size_t i = 0; i < t->nadded; i++)
		if (t->added[i].normalized == normalized) cnt++;
	if (!cnt) return 0;
	as->cap = pow2_at_least(cnt * 2 + 2);
	as->slots = calloc(as->cap, sizeof(*as->slots));
	if (!as->slots) return -1;
	for (size_t i = 0; i < t->nadded; i++) {
		tok_added *a = &t->added[i];
		if (a->normalized != normalized || a->match.len == 0) continue;
		/* Two tokens with one match string: the first wins. */
		if (tok_aset_find(t, as, t->pool + a->match.off, a->match.len) >= 0) continue;
		size_t slot = tok_hash(t->pool + a->match.off, a->match.len) & (as->cap - 1);
		while (as->slots[slot]) slot = (slot + 1) & (as->cap - 1);
		as->slots[slot] = (uint32_t)i + 1;
		as->first[(unsigned char)t->pool[a->match.off]] = 1;
		size_t k = 0;
		while (k < as->nlens && as->lens[k] > a->match.len) k++;
		if (k < as->nlens && as->lens[k] == a->match.len) continue;
		if (as->nlens == 64) return -1;
		memmove(&as->lens[k + 1], &as->lens[k], (as->nlens - k) * sizeof(as->lens[0]));
		as->lens[k] = a->match.len;
		as->nlens++;
	}
	return 0;
}

static int parse_added(tokenizer *t, const json_value *arr, char *err, size_t errlen)
{
	if (!arr || arr->type == JSON_NULL || arr->n == 0) return 0;
	t->added = calloc(arr->n, sizeof(*t->added));
	if (!t->added) return errf(err, errlen, "out of memory");
	for (uint32_t i = 0; i < arr->n; i++) {
		const json_value *o = &arr->items[i];
		tok_added *a = &t->added[i];
		const char *c;
		size_t cn;
		int64_t id;
		int sp, ls, rs, sw, nm;
		if (json_get_int(o, "id", &id) || get_string(o, "content", &c, &cn))
			return errf(err, errlen, "added_tokens[%u]: needs an integer id and a content string", i);
		if (cn == 0 || cn > TOK_MAX_PIECE)
			return errf(err, errlen, "added_tokens[%u]: content empty or longer than %d bytes", i, TOK_MAX_PIECE);
		if (opt_bool(o, "special", 0, &sp) || opt_bool(o, "lstrip", 0, &ls) ||
		    opt_bool(o, "rstrip", 0, &rs) || opt_bool(o, "single_word", 0, &sw) ||
		    opt_bool(o, "normalized", !sp, &nm))
			return errf(err, errlen, "added_tokens[%u]: flags must be booleans", i);
		a->id = (int)id;
		a->special = (uint8_t)sp; a->lstrip = (uint8_t)ls; a->rstrip = (uint8_t)rs;
		a->single_word = (uint8_t)sw; a->normalized = (uint8_t)nm;
		if (t->added_of[id] >= 0)
			return errf(err, errlen, "added_tokens[%u]: id %d appears twice", i, (int)id);
		t->added_of[id] = (int32_t)i;
		if (pool_add(t, c, cn, &a->content))
			return errf(err, errlen, "out of memory");
		t->nadded++;
	}
	return 0;
}

int tok_load(tokenizer **out, const char *json, size_t len, char *err, size_t errlen)
{
	json_doc doc = { 0 };
	char jerr[128];
	tokenizer *t = NULL;
	const char *s;
	*out = NULL;
	if (err && errlen) err[0] = 0;
	if (len > TOK_MAX_JSON)
		return errf(err, errlen, "larger than %zu bytes", TOK_MAX_JSON);
	if (json_parse(json, len, &doc, jerr, sizeof(jerr)))
		return errf(err, errlen, "not valid JSON (%s)", jerr);
	t = calloc(1, sizeof(*t));
	if (!t) { errf(err, errlen, "out of memory"); goto fail; }
	const json_value *root = doc.root;
	if (root->type != JSON_OBJECT) { errf(err, errlen, "not a JSON object"); goto fail; }
	const json_value *model = json_get(root, "model");
	if (!model || model->type != JSON_OBJECT) { errf(err, errlen, "missing 'model' object"); goto fail; }
	int r = json_get_str(model, "type", &s);
	if (r < 0 || (r == 0 && strcmp(s, "BPE"))) {
		errf(err, errlen, "model type '%.64s' is not supported (BPE only)", r == 0 ? s : "?");
		goto fail;
	}
	const json_value *vocab = json_get(model, "vocab");
	if (!vocab || vocab->type != JSON_OBJECT || vocab->n == 0) { errf(err, errlen, "model.vocab: missing or empty"); goto fail; }
	if (vocab->n > TOK_MAX_IDS) { errf(err, errlen, "model.vocab: more than %d pieces", TOK_MAX_IDS); goto fail; }
	if (r == 1 && !json_get(model, "merges")) { errf(err, errlen, "model without a type is not BPE"); goto fail; }

	/* Highest added id first, so the id tables cover them. */
	const json_value *added = json_get(root, "added_tokens");
	int maxadded = -1;
	if (added && added->type != JSON_NULL) {
		if (added->type != JSON_ARRAY || added->n > TOK_MAX_IDS) { errf(err, errlen, "added_tokens: not an array"); goto fail; }
		for (uint32_t i = 0; i < added->n; i++) {
			int64_t id;
			if (json_get_int(&added->items[i], "id", &id) || id < 0 || id >= TOK_MAX_IDS) {
				errf(err, errlen, "added_tokens[%u]: id missing or not in [0, %d)", i, TOK_MAX_IDS);
				goto fail;
			}
			if (id > maxadded) maxadded = (int)id;
		}
	}
	if (parse_vocab(t, vocab, maxadded, err, errlen)) goto fail;
	if (parse_added(t, added, err, errlen)) goto fail;

	/* BPE options. */
	const json_value *v;
	if (opt_bool(model, "byte_fallback", 0, &t->byte_fallback) || opt_bool(model, "fuse_unk", 0, &t->fuse_unk) ||
	    opt_bool(model, "ignore_merges", 0, &t->ignore_merges)) {
		errf(err, errlen, "model: byte_fallback/fuse_unk/ignore_merges must be booleans");
		goto fail;
	}
	v = json_get(model, "dropout");
	if (v && v->type != JSON_NULL && !(v->type == JSON_NUMBER && v->num == 0.0)) {
		errf(err, errlen, "model.dropout is not supported (tokenization would be random)");
		goto fail;
	}
	const char *fields[] = { "continuing_subword_prefix", "end_of_word_suffix" };
	for (int i = 0; i < 2; i++) {
		v = json_get(model, fields[i]);
		if (v && v->type != JSON_NULL && !(v->type == JSON_STRING && v->n == 0)) {
			errf(err, errlen, "model.%s is not supported", fields[i]);
			goto fail;
		}
	}
	t->unk_id = -1;
	v = json_get(model, "unk_token");
	if (v && v->type != JSON_NULL) {
		if (v->type != JSON_STRING || (t->unk_id = tok_vocab_find(t, v->str, v->n)) < 0) {
			errf(err, errlen, "model.unk_token is not in the vocabulary");
			goto fail;
		}
	}
	if (parse_merges(t, json_get(model, "merges"), err, errlen)) goto fail;
	if (parse_normalizer(t, json_get(root, "normalizer"), 0, err, errlen)) goto fail;
	if (parse_pretok(t, json_get(root, "pre_tokenizer"), 0, err, errlen)) goto fail;
	if (parse_decoder(t, json_get(root, "decoder"), 0, err, errlen)) goto fail;

	for (unsigned b = 0; b < 256; b++) {
		unsigned char u[4];
		char fb[8];
		size_t ul = uni_encode(tok_byte_to_cp(b), u);
		t->byte_id[b] = tok_vocab_find(t, (const char *)u, ul);
		snprintf(fb, sizeof(fb), "<0x%02X>", b);
		t->fb_id[b] = tok_vocab_find(t, fb, 6);
	}
	/* Match strings of added tokens: normalized ones are matched against
	 * normalized text, so their content is normalized too (HF
	 * AddedVocabulary::refresh_added_tokens). */
	for (size_t i = 0; i < t->nadded; i++) {
		tok_added *a = &t->added[i];
		a->match = a->content;
		if (a->normalized && t->nnorm) {
			char *ns;
			size_t nn;
			unsigned char *nmask;
			char tmp[TOK_MAX_PIECE];
			memcpy(tmp, t->pool + a->content.off, a->content.len);
			if (tok_normalize(t, tmp, a->content.len, NULL, &ns, &nn, &nmask)) {
				errf(err, errlen, "out of memory");
				goto fail;
			}
			int rc = pool_add(t, ns, nn, &a->match);
			free(ns);
			free(nmask);
			if (rc) { errf(err, errlen, "out of memory"); goto fail; }
		}
	}
	if (build_aset(t, &t->araw, 0) || build_aset(t, &t->anorm, 1)) {
		errf(err, errlen, "added_tokens: out of memory or more than 64 distinct lengths");
		goto fail;
	}
	json_free(&doc);
	*out = t;
	return 0;
fail:
	json_free(&doc);
	tok_free(t);
	return -1;
}

void tok_free(tokenizer *t)
{
	if (!t) return;
	free(t->pool);
	free(t->piece);
	free(t->added_of);
	free(t->vslots);
	free(t->mslots);
	free(t->added);
	free(t->araw.slots);
	free(t->anorm.slots);
	free(t);
}

int tok_vocab_size(const tokenizer *t) { return t->nids; }

int tok_id(const tokenizer *t, const char *piece, size_t len)
{
	for (size_t i = 0; i < t->nadded; i++)
		if (t->added[i].content.len == len && !memcmp(t->pool + t->added[i].content.off, piece, len))
			return t->added[i].id;
	return tok_vocab_find(t, piece, len);
}

const char *tok_piece(const tokenizer *t, int id, size_t *len)
{
	if (id < 0 || id >= t->nids) return NULL;
	if (t->added_of[id] >= 0) {
		const tok_str *c = &t->added[t->added_of[id]].content;
		*len = c->len;
		return t->pool + c->off;
	}
	if (t->piece[id].len == TOK_HOLE) return NULL;
	*len = t->piece[id].len;
	return t->pool + t->piece[id].off;
}

int tok_is_special(const tokenizer *t, int id)
{
	return id >= 0 && id < t->nids && t->added_of[id] >= 0 && t->added[t->added_of[id]].special;
}

/* ---- decoding ---- */

/* A list of strings in one growable byte buffer. */
typedef struct {
	char *b;
	size_t len, cap;
	size_t *off;   /* n + 1 offsets */
	size_t n, ncap;
	int oom;
} slist;

static void sl_bytes(slist *l, const void *p, size_t n)
{
	if (l->oom) return;
	if (l->cap - l->len < n + 1) {
		size_t nc = l->cap ? l->cap : 256;
		while (nc - l->len < n + 1) nc *= 2;
		char *nb = realloc(l->b, nc);
		if (!nb) { l->oom = 1; return; }
		l->b = nb;
		l->cap = nc;
	}
	if (n) /* p may be NULL when n == 0 (an empty list fused) */
		memcpy(l->b + l->len, p, n);
	l->len += n;
}

/* Ends the current string. */
static void sl_end(slist *l)
{
	sl_bytes(l, "", 0); /* allocates b: SL_S of an empty string is never NULL + 0 */
	if (l->oom) return;
	if (l->n + 2 > l->ncap) {
		size_t nc = l->ncap ? l->ncap * 2 : 16;
		size_t *no = realloc(l->off, nc * sizeof(size_t));
		if (!no) { l->oom = 1; return; }
		if (!l->off) no[0] = 0;
		l->off = no;
		l->ncap = nc;
	}
	l->off[++l->n] = l->len;
}

static void sl_init(slist *l)
{
	memset(l, 0, sizeof(*l));
	l->off = malloc(16 * sizeof(size_t));
	if (!l->off) { l->oom = 1; return; }
	l->off[0] = 0;
	l->ncap = 16;
}

static void sl_free(slist *l) { free(l->b); free(l->off); }

#define SL_S(l, i) ((l)->b + (l)->off[i])
#define SL_N(l, i) ((l)->off[(i) + 1] - (l)->off[i])

/* Appends bytes with invalid UTF-8 replaced by U+FFFD, one per maximal
 * invalid subpart (what Rust's String::from_utf8_lossy does). */
static void sl_lossy(slist *l, const unsigned char *p, size_t n)
{
	size_t i = 0;
	while (i < n) {
		uint32_t cp;
		size_t k = utf8_decode(p + i, n - i, &cp);
		if (k) { sl_bytes(l, p + i, k); i += k; continue; }
		/* Maximal subpart: the longest prefix of a valid sequence. */
		size_t m = 1;
		unsigned c = p[i];
		size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 1;
		if (c >= 0xF5) need = 1;
		while (m < need && i + m < n) {
			unsigned lo = 0x80, hi = 0xBF, x = p[i + m];
			if (m == 1) {
				if (c == 0xE0) lo = 0xA0;
				if (c == 0xED) hi = 0x9F;
				if (c == 0xF0) lo = 0x90;
				if (c == 0xF4) hi = 0x8F;
			}
			if (x < lo || x > hi) break;
			m++;
		}
		sl_bytes(l, "\xEF\xBF\xBD", 3);
		i += m;
	}
}

static int is_fallback_piece(const char *s, size_t n, unsigned char *b)
{
	/* "<0xXX>" (HF ByteFallback: six bytes, s[3..5] parsed by Rust's
	 * u8::from_str_radix(_, 16), which also takes a leading '+': "<0x+A>"
	 * is byte 0x0A in HF too). */
	if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return 0;
	unsigned v = 0;
	for (int i = s[3] == '+' ? 4 : 3; i < 5; i++) {
		char c = s[i];
		v <<= 4;
		if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
		else return 0;
	}
	*b = (unsigned char)v;
	return 1;
}

static void replace_into(slist *o, const char *s, size_t n, const char *a, size_t an, const char *b, size_t bn)
{
	size_t i = 0;
	while (i < n) {
		if (n - i >= an && !memcmp(s + i, a, an)) {
			sl_bytes(o, b, bn);
			i += an;
		} else {
			sl_bytes(o, s + i, 1);
			i++;
		}
	}
}

/* Runs the decoder chain over l (consumed). raw: ByteFallback and
 * ByteLevel leave bytes as they are (streaming assembles UTF-8 itself).
 * first: index of l's first token in the whole sequence (Metaspace and a
 * Strip after Fuse act on the very first token only in streaming). */
static int run_decoders(const tokenizer *t, slist *l, int raw, size_t first, int stream)
{
	int fused = 0;
	for (size_t k = 0; k < t->ndec; k++) {
		const tok_dec *d = &t->dec[k];
		slist o;
		sl_init(&o);
		const char *a = t->pool + d->a.off;
		switch (d->type) {
		case TOK_DEC_BYTELEVEL: {
			/* ByteLevel::decode_chain: a token whose chars all map to
			 * bytes becomes those bytes, any other stays as it is; the
			 * concatenation is read lossily into one string. */
			slist tmp;
			sl_init(&tmp);
			for (size_t i = 0; i < l->n; i++) {
				const unsigned char *s = (const unsigned char *)SL_S(l, i);
				size_t n = SL_N(l, i), j = 0, mark = tmp.len;
				int ok = 1;
				while (j < n) {
					uint32_t cp;
					size_t cl = utf8_decode(s + j, n - j, &cp);
					int b = cl ? tok_cp_to_byte(cp) : -1;
					if (b < 0) { ok = 0; break; }
					unsigned char c = (unsigned char)b;
					sl_bytes(&tmp, &c, 1);
					j += cl;
				}
				if (!ok) {
					tmp.len = mark;
					sl_bytes(&tmp, s, n);
				}
			}
			if (raw) sl_bytes(&o, tmp.b, tmp.len);
			else sl_lossy(&o, (const unsigned char *)tmp.b, tmp.len);
			sl_end(&o);
			if (tmp.oom) o.oom = 1;
			sl_free(&tmp);
			fused = 1;
			break;
		}
		case TOK_DEC_REPLACE:
			for (size_t i = 0; i < l->n; i++) {
				replace_into(&o, SL_S(l, i), SL_N(l, i), a, d->a.len, t->pool + d->b.off, d->b.len);
				sl_end(&o);
			}
			break;
		case TOK_DEC_BYTEFALLBACK: {
			/* ByteFallback::decode_chain: a run of consecutive <0xXX>
			 * tokens becomes one token when its bytes are valid UTF-8,
			 * else one U+FFFD token per byte. A run has no length
			 * limit: it is a whole text's worth of characters when the
			 * vocabulary lacks them (a fixed 64-byte run buffer that
			 * called longer runs invalid turned 67 ASCII bytes into
			 * U+FFFD: fuzz/tokenizer_text_seed_corpus/
			 * regress-gemma-long-byte-run). The run is written into o
			 * directly from o.len == start and checked when it ends. */
			size_t start = 0, run = 0;
			for (size_t i = 0; i <= l->n; i++) {
				unsigned char b;
				int fb = i < l->n && is_fallback_piece(SL_S(l, i), SL_N(l, i), &b);
				if (fb && !raw) {
					if (!run) start = o.len;
					sl_bytes(&o, &b, 1);
					run++;
					continue;
				}
				if (run) {
					if (!o.oom && utf8_valid((const unsigned char *)o.b + start, o.len - start)) {
						sl_end(&o);
					} else {
						o.len = start;
						for (size_t j = 0; j < run; j++) { sl_bytes(&o, "\xEF\xBF\xBD", 3); sl_end(&o); }
					}
					run = 0;
				}
				if (i == l->n) break;
				if (fb) sl_bytes(&o, &b, 1);
				else sl_bytes(&o, SL_S(l, i), SL_N(l, i));
				sl_end(&o);
			}
			break;
		}
		case TOK_DEC_FUSE:
			sl_bytes(&o, l->b, l->len);
			sl_end(&o);
			fused = 1;
			break;
		case TOK_DEC_STRIP:
			for (size_t i = 0; i < l->n; i++) {
				const char *s = SL_S(l, i);
				size_t n = SL_N(l, i), cl = d->a.len;
				int apply = !stream || !fused || first + i == 0;
				for (int c = 0; apply && c < d->start && n >= cl && !memcmp(s, a, cl); c++) { s += cl; n -= cl; }
				for (int c = 0; apply && c < d->stop && n >= cl && !memcmp(s + n - cl, a, cl); c++) n -= cl;
				sl_bytes(&o, s, n);
				sl_end(&o);
			}
			break;
		case TOK_DEC_METASPACE:
			/* Metaspace::decode_chain: the replacement becomes ' ',
			 * except in the first token where it is dropped (unless
			 * prepend_scheme is never). */
			for (size_t i = 0; i < l->n; i++) {
				int drop = first + i == 0 && d->prepend != TOK_PREPEND_NEVER;
				replace_into(&o, SL_S(l, i), SL_N(l, i), a, d->a.len, " ", drop ? 0 : 1);
				sl_end(&o);
			}
			break;
		default:
			break;
		}
		int bad = o.oom;
		sl_free(l);
		*l = o;
		if (bad) return -1;
	}
	return 0;
}

static int collect(const tokenizer *t, const int *ids, size_t n, int skip_special, slist *l)
{
	sl_init(l);
	for (size_t i = 0; i < n; i++) {
		size_t pl;
		const char *p = tok_piece(t, ids[i], &pl);
		if (!p || (skip_special && tok_is_special(t, ids[i]))) continue;
		sl_bytes(l, p, pl);
		sl_end(l);
	}
	return l->oom ? -1 : 0;
}

int tok_decode(const tokenizer *t, const int *ids, size_t n, int skip_special, char **out, size_t *outlen)
{
	slist l;
	*out = NULL;
	*outlen = 0;
	if (collect(t, ids, n, skip_special, &l) || run_decoders(t, &l, 0, 0, 0)) {
		sl_free(&l);
		return -1;
	}
	slist o;
	sl_init(&o);
	/* Without a decoder HF joins tokens with ' '. */
	for (size_t i = 0; i < l.n; i++) {
		if (i && !t->has_decoder) sl_bytes(&o, " ", 1);
		sl_lossy(&o, (const unsigned char *)SL_S(&l, i), SL_N(&l, i));
	}
	sl_bytes(&o, "", 0);
	sl_free(&l);
	if (o.oom || !o.b) {
		if (!o.oom) { *out = calloc(1, 1); sl_free(&o); return *out ? 0 : -1; }
		sl_free(&o);
		return -1;
	}
	o.b[o.len] = 0;
	*out = o.b;
	*outlen = o.len;
	free(o.off);
	return 0;
}

/* ---- streaming ---- */

void tok_stream_init(tok_stream *s, const tokenizer *t, int skip_special)
{
	memset(s, 0, sizeof(*s));
	s->t = t;
	s->skip_special = skip_special;
}

void tok_stream_free(tok_stream *s)
{
	free(s->buf);
	memset(s, 0, sizeof(*s));
}

static int out_reserve(tok_stream *s, size_t n)
{
	if (s->cap >= n) return 0;
	size_t nc = s->cap ? s->cap : 64;
	while (nc < n) nc *= 2;
	char *nb = realloc(s->buf, nc);
	if (!nb) return -1;
	s->buf = nb;
	s->cap = nc;
	return 0;
}

int tok_stream_push(tok_stream *s, int id, const char **out, size_t *outlen)
{
	slist l;
	*out = "";
	*outlen = 0;
	if (collect(s->t, &id, 1, s->skip_special, &l)) { sl_free(&l); return -1; }
	if (l.n == 0) { sl_free(&l); return 0; }
	if (!s->t->has_decoder) {
		/* No decoder: tok_decode joins the pieces with ' ', each read
		 * lossily on its own (HF: tokens.join(" ")), so each token's
		 * text is final: the separator (before every token but the
		 * first, empty pieces included), then the piece. Without this
		 * the stream concatenated the pieces with nothing between
		 * (fuzz/tokenizer_seed_corpus/regress-no-decoder-stream.json). */
		slist o;
		sl_init(&o);
		if (s->ntok++) sl_bytes(&o, " ", 1);
		sl_lossy(&o, (const unsigned char *)l.b, l.len);
		sl_bytes(&o, "", 0);
		sl_free(&l);
		if (o.oom || out_reserve(s, o.len + 1)) { sl_free(&o); return -1; }
		if (o.len) memcpy(s->buf, o.b, o.len);
		s->buf[o.len] = 0;
		*out = s->buf;
		*outlen = o.len;
		sl_free(&o);
		return 0;
	}
	if (run_decoders(s->t, &l, 1, s->ntok, 1)) { sl_free(&l); return -1; }
	s->ntok++;
	/* pending bytes + new bytes; emit complete characters, keep a
	 * trailing prefix that may still complete. */
	size_t n = s->npend + l.len;
	unsigned char *tmp = malloc(n ? n : 1);
	if (!tmp || out_reserve(s, 3 * n + 1)) { free(tmp); sl_free(&l); return -1; }
	memcpy(tmp, s->pend, s->npend);
	if (l.len) memcpy(tmp + s->npend, l.b, l.len);
	sl_free(&l);
	size_t keep = 0;
	for (size_t k = n < 3 ? n : 3; k >= 1; k--)
		if (utf8_partial(tmp + n - k, k)) { keep = k; break; }
	slist o;
	sl_init(&o);
	sl_lossy(&o, tmp, n - keep);
	memcpy(s->pend, tmp + n - keep, keep);
	s->npend = keep;
	free(tmp);
	if (o.oom) { sl_free(&o); return -1; }
	if (o.len) memcpy(s->buf, o.b, o.len);
	s->buf[o.len] = 0;
	*out = s->buf;
	*outlen = o.len;
	sl_free(&o);
	return 0;
}

int tok_stream_flush(tok_stream *s, const char **out, size_t *outlen)
{
	*out = "";
	*outlen = 0;
	if (!s->npend) return 0;
	if (out_reserve(s, 4)) return -1;
	memcpy(s->buf, "\xEF\xBF\xBD", 3); /* an unfinished character */
	s->buf[3] = 0;
	s->npend = 0;
	*out = s->buf;
	*outlen = 3;
	return 0;
}

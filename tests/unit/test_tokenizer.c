/* tests/unit/test_tokenizer.c — known answers on tiny hand-built
 * tokenizer.json files, hostile inputs rejected cleanly (run under ASan by
 * `make asan`), special-token gating by mask, streaming decode never
 * splitting a UTF-8 character. Comparison with Hugging Face on real
 * vocabularies is in tests/py/test_tokenizer.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "worker/tokenizer.h"
#include "worker/unicode.h"

static int failures;

#define CHECK(c, ...) do { if (!(c)) { failures++; printf("FAIL %s:%d: ", __FILE__, __LINE__); \
	printf(__VA_ARGS__); printf("\n"); } } while (0)

/* GPT-2 bytes_to_unicode as UTF-8, for building byte-level vocabularies. */
static void byte_piece(unsigned b, jw_buf *w)
{
	unsigned cp = b;
	if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
		unsigned k = 0;
		for (unsigned x = 0; x < b; x++)
			if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) k++;
		cp = 256 + k;
	}
	unsigned char u[4];
	size_t n = uni_encode(cp, u);
	jw_str(w, (const char *)u, n);
}

/* Byte-level tokenizer: ids 0..255 the bytes, then merges h+e, he+l,
 * hel+l, hell+o, Ġ+w; special <|im_start|> = 300, non-special <x> = 301. */
static char *bytelevel_json(size_t *len)
{
	jw_buf w = { 0 };
	jw_cstr(&w, "{\"version\":\"1.0\",\"added_tokens\":["
		    "{\"id\":300,\"content\":\"<|im_start|>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},"
		    "{\"id\":301,\"content\":\"<x>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":false}],"
		    "\"normalizer\":null,"
		    "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},"
		    "\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},"
		    "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"byte_fallback\":false,\"vocab\":{");
	for (unsigned b = 0; b < 256; b++) {
		byte_piece(b, &w);
		jw_fmt(&w, ":%u,", b);
	}
	jw_cstr(&w, "\"he\":256,\"hel\":257,\"hell\":258,\"hello\":259,\"\xc4\xa0w\":260,\"<|im_start|>\":300},"
		    "\"merges\":[\"h e\",\"he l\",[\"hel\",\"l\"],\"hell o\",\"\xc4\xa0 w\"]}}");
	jw_finish(&w);
	*len = w.len;
	return w.buf;
}

/* SentencePiece-style: <unk>=0, <0xXX>=1..256, then pieces; merges
 * ▁+a, a+b; normalizer Replace ' ' -> ▁; Gemma-like decoder. */
static char *sp_json(size_t *len)
{
	jw_buf w = { 0 };
	jw_cstr(&w, "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true,\"normalized\":false},"
		    "{\"id\":262,\"content\":\"<eos>\",\"special\":true,\"normalized\":false}],"
		    "\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xe2\x96\x81\"},"
		    "\"pre_tokenizer\":null,"
		    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\xe2\x96\x81\"},\"content\":\" \"},"
		    "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}]},"
		    "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true,\"vocab\":{\"<unk>\":0,");
	for (unsigned b = 0; b < 256; b++)
		jw_fmt(&w, "\"<0x%02X>\":%u,", b, b + 1);
	jw_cstr(&w, "\"\xe2\x96\x81\":257,\"a\":258,\"b\":259,\"\xe2\x96\x81" "a\":260,\"ab\":261,\"<eos>\":262},"
		    "\"merges\":[\"\xe2\x96\x81 a\",\"a b\"]}}");
	jw_finish(&w);
	*len = w.len;
	return w.buf;
}

static tokenizer *load(const char *j, size_t n)
{
	tokenizer *t = NULL;
	char err[256];
	if (tok_load(&t, j, n, err, sizeof(err))) {
		printf("load failed: %s\n", err);
		return NULL;
	}
	return t;
}

static int enc_eq(const tokenizer *t, const char *text, const unsigned char *mask, const int *want, size_t nwant)
{
	int *ids;
	size_t n;
	char err[128];
	if (tok_encode(t, text, strlen(text), mask, &ids, &n, err, sizeof(err))) return 0;
	int ok = n == nwant && (n == 0 || !memcmp(ids, want, n * sizeof(int)));
	if (!ok) {
		printf("  got:");
		for (size_t i = 0; i < n; i++) printf(" %d", ids[i]);
		printf("\n");
	}
	free(ids);
	return ok;
}

static void test_bytelevel_known_answers(void)
{
	size_t n;
	char *j = bytelevel_json(&n);
	tokenizer *t = load(j, n);
	CHECK(t, "byte-level tokenizer loads");
	if (!t) { free(j); return; }
	CHECK(tok_vocab_size(t) == 302, "vocab size %d", tok_vocab_size(t));
	int w1[] = { 259, 260, 'x' };
	CHECK(enc_eq(t, "hello wx", NULL, w1, 3), "hello wx");
	int w2[] = { 'h', 'i', ' ', ' ', 259 }; /* "hi", " ", then Ġ + hello (no Ġh merge) */
	CHECK(enc_eq(t, "hi  hello", NULL, w2, 5), "whitespace run before a word");
	int w3[] = { 259 };
	CHECK(enc_eq(t, "hello", NULL, w3, 1), "hello");
	CHECK(enc_eq(t, "", NULL, NULL, 0), "empty text gives no ids");
	/* Special token: plain text never yields it; the mask allows it. */
	const char *s = "<|im_start|>";
	unsigned char ones[12], part[12];
	memset(ones, 1, 12);
	memset(part, 1, 12);
	part[5] = 0;
	int *ids;
	size_t ni;
	char err[128];
	CHECK(tok_encode(t, s, 12, NULL, &ids, &ni, err, sizeof(err)) == 0 && ni > 1 && ids[0] != 300,
	      "plain <|im_start|> is not the control token");
	free(ids);
	int sp[] = { 300 };
	CHECK(enc_eq(t, s, ones, sp, 1), "masked <|im_start|> is the control token");
	CHECK(tok_encode(t, s, 12, part, &ids, &ni, err, sizeof(err)) == 0 && ni > 1 && ids[0] != 300,
	      "a partly unmasked <|im_start|> is not the control token");
	free(ids);
	int nx[] = { 'a', 301, 'b' };
	CHECK(enc_eq(t, "a<x>b", NULL, nx, 3), "non-special added token matched in plain text");
	CHECK(tok_is_special(t, 300) && !tok_is_special(t, 301) && !tok_is_special(t, 5), "is_special");
	CHECK(tok_id(t, "hello", 5) == 259 && tok_id(t, "nope", 4) == -1, "tok_id");
	size_t pl;
	CHECK(tok_piece(t, 280, &pl) == NULL && tok_piece(t, -1, &pl) == NULL && tok_piece(t, 9999, &pl) == NULL,
	      "holes and out-of-range ids have no piece");
	/* Invalid UTF-8 text is refused. */
	CHECK(tok_encode(t, "a\xff", 2, NULL, &ids, &ni, err, sizeof(err)) == -1 && err[0], "invalid UTF-8 rejected");
	/* Decode: bytes back, unknown ids skipped. */
	int d[] = { 259, 260, 9999, -5, 280, 'x' };
	char *o;
	size_t ol;
	CHECK(tok_decode(t, d, 6, 0, &o, &ol) == 0 && ol == 8 && !memcmp(o, "hello wx", 8), "decode");
	free(o);
	int ds[] = { 300, 259 };
	CHECK(tok_decode(t, ds, 2, 1, &o, &ol) == 0 && !strcmp(o, "hello"), "decode skip_special");
	free(o);
	CHECK(tok_decode(t, ds, 2, 0, &o, &ol) == 0 && !strcmp(o, "<|im_start|>hello"), "decode keeps special");
	free(o);
	/* A lone continuation byte decodes to U+FFFD. */
	int bad[] = { 0x9F };
	CHECK(tok_decode(t, bad, 1, 0, &o, &ol) == 0 && !strcmp(o, "\xEF\xBF\xBD"), "lossy decode");
	free(o);
	tok_free(t);
	free(j);
}

/* Every push returns complete UTF-8 only; the concatenation equals the
 * input for text split into single bytes (the worst case). */
static void test_stream_never_splits_utf8(void)
{
	size_t n;
	char *j = bytelevel_json(&n);
	tokenizer *t = load(j, n);
	if (!t) { free(j); failures++; return; }
	const char *text = "a\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD!";
	size_t tl = strlen(text);
	tok_stream s;
	tok_stream_init(&s, t, 0);
	char acc[128];
	size_t al = 0;
	int ok = 1;
	for (size_t i = 0; i < tl; i++) {
		const char *o;
		size_t ol;
		if (tok_stream_push(&s, (unsigned char)text[i], &o, &ol)) { ok = 0; break; }
		for (size_t k = 0; k < ol;) {
			uint32_t cp;
			size_t l = utf8_decode((const unsigned char *)o + k, ol - k, &cp);
			if (!l) { ok = 0; break; }
			k += l;
		}
		memcpy(acc + al, o, ol);
		al += ol;
	}
	const char *o;
	size_t ol;
	CHECK(tok_stream_flush(&s, &o, &ol) == 0 && ol == 0, "nothing pending at the end");
	CHECK(ok, "every push is whole UTF-8 characters");
	CHECK(al == tl && !memcmp(acc, text, tl), "stream concatenation equals the text");
	/* An unfinished character at the end becomes U+FFFD at flush. */
	tok_stream_push(&s, 0xE6, &o, &ol);
	CHECK(ol == 0, "a lead byte waits");
	CHECK(tok_stream_flush(&s, &o, &ol) == 0 && ol == 3 && !memcmp(o, "\xEF\xBF\xBD", 3), "flush of a partial char");
	/* A lead byte followed by a non-continuation: U+FFFD then the byte. */
	tok_stream_push(&s, 0xE6, &o, &ol);
	tok_stream_push(&s, 'a', &o, &ol);
	CHECK(ol == 4 && !memcmp(o, "\xEF\xBF\xBD" "a", 4), "broken sequence is replaced, not held");
	tok_stream_free(&s);
	tok_free(t);
	free(j);
}

static void test_sentencepiece_byte_fallback(void)
{
	size_t n;
	char *j = sp_json(&n);
	tokenizer *t = load(j, n);
	CHECK(t, "SentencePiece-style tokenizer loads");
	if (!t) { free(j); return; }
	/* " ab" -> ▁ a b: merges ▁+a (rank 0) before a+b (rank 1). */
	int w1[] = { 260, 259 };
	CHECK(enc_eq(t, " ab", NULL, w1, 2), "rank order of merges");
	int w2[] = { 261 };
	CHECK(enc_eq(t, "ab", NULL, w2, 1), "ab");
	/* é is not in the vocabulary: byte fallback <0xC3><0xA9>. */
	int w3[] = { 0xC3 + 1, 0xA9 + 1 };
	CHECK(enc_eq(t, "\xC3\xA9", NULL, w3, 2), "byte fallback");
	char *o;
	size_t ol;
	CHECK(tok_decode(t, w3, 2, 0, &o, &ol) == 0 && !strcmp(o, "\xC3\xA9"), "byte fallback decodes");
	free(o);
	int half[] = { 0xC3 + 1, 258 };
	CHECK(tok_decode(t, half, 2, 0, &o, &ol) == 0 && !strcmp(o, "\xEF\xBF\xBD" "a"), "invalid fallback run -> U+FFFD");
	free(o);
	int sp[] = { 260, 257, 259 };
	CHECK(tok_decode(t, sp, 3, 0, &o, &ol) == 0 && !strcmp(o, " a b"), "▁ becomes space");
	free(o);
	/* Streaming over fallback bytes waits for the whole character. */
	tok_stream s;
	const char *so;
	size_t sl;
	tok_stream_init(&s, t, 1);
	tok_stream_push(&s, 0xE6 + 1, &so, &sl);
	CHECK(sl == 0, "first byte of 日 waits");
	tok_stream_push(&s, 0x97 + 1, &so, &sl);
	CHECK(sl == 0, "second byte waits");
	tok_stream_push(&s, 0xA5 + 1, &so, &sl);
	CHECK(sl == 3 && !memcmp(so, "\xE6\x97\xA5", 3), "third byte completes 日");
	tok_stream_push(&s, 262, &so, &sl);
	CHECK(sl == 0, "skipped special token emits nothing");
	tok_stream_free(&s);
	tok_free(t);
	free(j);
}

/* Found by fuzz/tokenizer_fuzzer (regression inputs
 * fuzz/tokenizer_seed_corpus/regress-*.json): decoding nothing, or only
 * empty pieces, passed NULL to memcpy in the Fuse decoder and formed
 * NULL + 0 for an empty piece list (UBSan). */
static void test_decode_empty(void)
{
	for (int k = 0; k < 2; k++) {
		size_t n;
		char *j = k ? sp_json(&n) : bytelevel_json(&n);
		tokenizer *t = load(j, n);
		CHECK(t, "tokenizer %d loads", k);
		if (!t) { free(j); continue; }
		char *o = NULL;
		size_t ol = 1;
		CHECK(tok_decode(t, NULL, 0, 0, &o, &ol) == 0 && o && ol == 0 && o[0] == 0, "no ids decode to \"\"");
		free(o);
		int skipped[] = { k ? 262 : 300 };
		CHECK(tok_decode(t, skipped, 1, 1, &o, &ol) == 0 && o && ol == 0, "only skipped ids decode to \"\"");
		free(o);
		int *ids;
		char err[128];
		CHECK(tok_encode(t, "", 0, NULL, &ids, &n, err, sizeof(err)) == 0 && n == 0, "\"\" encodes to nothing");
		free(ids);
		tok_free(t);
		free(j);
	}
}

/* Found by fuzz/tokenizer_fuzzer (regression input
 * fuzz/tokenizer_seed_corpus/regress-strip-after-fuse.json): Strip with
 * start 2 after Fuse made streaming decode differ from decode; such a chain
 * is now rejected, the real one (start 1, stop 0) still loads. */
static void test_strip_after_fuse(void)
{
	const char *fmt = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
			  "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},"
			  "{\"type\":\"Strip\",\"content\":\" \",\"start\":%d,\"stop\":%d}]}}";
	char j[512], err[256];
	tokenizer *t = NULL;
	snprintf(j, sizeof(j), fmt, 1, 0);
	CHECK(tok_load(&t, j, strlen(j), err, sizeof(err)) == 0, "Strip start 1 after Fuse loads: %s", err);
	tok_free(t);
	t = NULL;
	snprintf(j, sizeof(j), fmt, 2, 0);
	CHECK(tok_load(&t, j, strlen(j), err, sizeof(err)) == -1 && strstr(err, "Strip after Fuse"),
	      "Strip start 2 after Fuse rejected");
	snprintf(j, sizeof(j), fmt, 1, 1);
	CHECK(tok_load(&t, j, strlen(j), err, sizeof(err)) == -1 && strstr(err, "Strip after Fuse"),
	      "Strip stop 1 after Fuse rejected");
}

static int all_fffd(const char *s, size_t n)
{
	if (n % 3) return 0;
	for (size_t i = 0; i < n; i += 3)
		if (memcmp(s + i, "\xEF\xBF\xBD", 3)) return 0;
	return 1;
}

/* Streams ids and returns the concatenation (malloc'd) in *out. */
static int stream_all(const tokenizer *t, const int *ids, size_t n, int skip, char **out, size_t *outlen)
{
	tok_stream s;
	tok_stream_init(&s, t, skip);
	size_t cap = 64, len = 0;
	char *acc = malloc(cap);
	int rc = acc ? 0 : -1;
	for (size_t i = 0; rc == 0 && i <= n; i++) {
		const char *o;
		size_t ol;
		rc = i < n ? tok_stream_push(&s, ids[i], &o, &ol) : tok_stream_flush(&s, &o, &ol);
		if (rc) break;
		if (len + ol + 1 > cap) {
			while (len + ol + 1 > cap) cap *= 2;
			char *na = realloc(acc, cap);
			if (!na) { rc = -1; break; }
			acc = na;
		}
		memcpy(acc + len, o, ol);
		len += ol;
	}
	tok_stream_free(&s);
	if (rc) { free(acc); return -1; }
	acc[len] = 0;
	*out = acc;
	*outlen = len;
	return 0;
}

/* Found by fuzz/tokenizer_text_fuzzer (regression input
 * fuzz/tokenizer_text_seed_corpus/regress-gemma-long-byte-run): a run of
 * more than 64 consecutive <0xXX> tokens (a text of characters the
 * vocabulary lacks, here NUL and control bytes) decoded to one U+FFFD per
 * byte, where HF ByteFallback decodes a run of any length that is valid
 * UTF-8 (67 bytes in, 195 out). An invalid run is still one U+FFFD per
 * byte, however long (HF gives 72 for 70 x <0x41> <0xC3> <0x41>). */
static void test_byte_fallback_long_run_round_trips(void)
{
	size_t n;
	char *j = sp_json(&n);
	tokenizer *t = load(j, n);
	CHECK(t, "SentencePiece-style tokenizer loads");
	if (!t) { free(j); return; }
	char text[200];
	size_t tl = 0;
	while (tl + 8 <= sizeof(text)) { /* no 'a', 'b' or ' ': every byte falls back */
		memcpy(text + tl, "\0\x02\x0e\xc3\xa9<X>", 8);
		tl += 8;
	}
	int *ids;
	char err[128], *o;
	size_t nid, ol;
	CHECK(tok_encode(t, text, tl, NULL, &ids, &nid, err, sizeof(err)) == 0 && nid == tl,
	      "%zu bytes encode to %zu byte-fallback ids", tl, nid);
	CHECK(tok_decode(t, ids, nid, 0, &o, &ol) == 0 && ol == tl && !memcmp(o, text, tl),
	      "a %zu-byte fallback run decodes to the text (%zu bytes out)", tl, ol);
	free(o);
	CHECK(stream_all(t, ids, nid, 0, &o, &ol) == 0 && ol == tl && !memcmp(o, text, tl),
	      "streaming the run gives the text");
	free(o);
	free(ids);
	int bad[72];
	for (int i = 0; i < 72; i++) bad[i] = 0x41 + 1;
	bad[70] = 0xC3 + 1;
	CHECK(tok_decode(t, bad, 72, 0, &o, &ol) == 0 && ol == 72 * 3 && all_fffd(o, ol),
	      "an invalid 72-byte run is 72 x U+FFFD (%zu bytes)", ol);
	free(o);
	tok_free(t);
	free(j);
	/* Rust's u8::from_str_radix takes a leading '+': HF reads "<0x+A>" as
	 * byte 0x0A. */
	const char *plus = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"<0x+A>\":0,\"b\":1},\"merges\":[]},"
			   "\"decoder\":{\"type\":\"ByteFallback\"}}";
	t = load(plus, strlen(plus));
	CHECK(t, "<0x+A> tokenizer loads");
	if (!t) return;
	int pb[] = { 0, 1 };
	CHECK(tok_decode(t, pb, 2, 0, &o, &ol) == 0 && ol == 2 && !memcmp(o, "\nb", 2), "<0x+A> is byte 0x0A");
	free(o);
	tok_free(t);
}

/* Found by fuzz/tokenizer_fuzzer (regression input
 * fuzz/tokenizer_seed_corpus/regress-no-decoder-stream.json): without a
 * decoder HF decode joins the pieces with ' ' (empty pieces included,
 * skipped special tokens not), and streaming decode left the spaces out. */
static void test_no_decoder_stream_joins_with_space(void)
{
	const char *js = "{\"added_tokens\":[{\"id\":4,\"content\":\"<s>\",\"special\":true}],"
			 "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"\xc3\xa9\":1,\"\":2,\"bc\":3,\"<s>\":4},\"merges\":[]}}";
	tokenizer *t = load(js, strlen(js));
	CHECK(t, "tokenizer without a decoder loads");
	if (!t) return;
	int ids[] = { 4, 0, 1, 2, 3, 4, 0 };
	char *d, *s;
	size_t dl, sl;
	CHECK(tok_decode(t, ids, 7, 0, &d, &dl) == 0 && !strcmp(d, "<s> a \xc3\xa9  bc <s> a"), "decode joins with ' ': '%s'", d);
	CHECK(stream_all(t, ids, 7, 0, &s, &sl) == 0 && sl == dl && !memcmp(s, d, dl), "stream equals decode: '%s'", s);
	free(d);
	free(s);
	CHECK(tok_decode(t, ids, 7, 1, &d, &dl) == 0 && !strcmp(d, "a \xc3\xa9  bc a"), "skipped specials get no separator: '%s'", d);
	CHECK(stream_all(t, ids, 7, 1, &s, &sl) == 0 && sl == dl && !memcmp(s, d, dl), "stream equals decode, skipping: '%s'", s);
	free(d);
	free(s);
	tok_free(t);
}

/* Hostile or unsupported inputs: each is rejected with a message, never a
 * crash (ASan/UBSan catch the rest). */
static void test_rejects(void)
{
	static const char *bad[] = {
		"",
		"not json",
		"[]",
		"{}",
		"{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}",
		"{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",0]]}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{}}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1073741824},\"merges\":[]}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1.5},\"merges\":[]}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"a\":1},\"merges\":[]}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a  b\"]}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[[\"a\"]]}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[],\"unk_token\":\"<unk>\"}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[],\"dropout\":0.1}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[],\"continuing_subword_prefix\":\"##\"}}",
		"{\"added_tokens\":[{\"id\":1,\"content\":\"x\"},{\"id\":1,\"content\":\"y\"}],\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		"{\"added_tokens\":[{\"id\":1,\"content\":\"\"}],\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		"{\"added_tokens\":[{\"id\":-3,\"content\":\"x\"}],\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		"{\"added_tokens\":[{\"id\":99999999,\"content\":\"x\"}],\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		"{\"added_tokens\":[{\"id\":2,\"content\":\"x\",\"special\":\"yes\"}],\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		"{\"normalizer\":{\"type\":\"NFKC\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		"{\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" +\"},\"content\":\"x\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		"{\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Sequence\",\"normalizers\":[]}]}]}]},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		"{\"pre_tokenizer\":{\"type\":\"Whitespace\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		"{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\w+\"},\"behavior\":\"Isolated\",\"invert\":false},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		"{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"Sideways\",\"invert\":false},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		"{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"ByteLevel\"},{\"type\":\"Digits\"}]},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		"{\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"ab\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		"{\"decoder\":{\"type\":\"CTC\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		"{\"decoder\":{\"type\":\"Strip\",\"content\":\" \",\"start\":100000,\"stop\":0},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}} trailing",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tokenizer *t = (tokenizer *)1;
		char err[256] = "";
		int r = tok_load(&t, bad[i], strlen(bad[i]), err, sizeof(err));
		CHECK(r == -1 && t == NULL && err[0], "hostile input %zu rejected (%s)", i, err);
		if (r == 0) tok_free(t);
	}
	/* The smallest valid file loads. */
	const char *ok = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}";
	tokenizer *t;
	char err[256];
	CHECK(tok_load(&t, ok, strlen(ok), err, sizeof(err)) == 0, "minimal file loads: %s", err);
	if (t) tok_free(t);
	/* Every truncation of a valid file is rejected cleanly. */
	size_t n;
	char *j = sp_json(&n);
	int all = 1;
	for (size_t k = 0; k < n; k += 7) {
		char *cut = malloc(k + 1);
		memcpy(cut, j, k);
		if (tok_load(&t, cut, k, err, sizeof(err)) == 0) { all = 0; tok_free(t); }
		free(cut);
	}
	CHECK(all, "every truncation rejected");
	free(j);
}

int main(void)
{
	test_bytelevel_known_answers();
	test_stream_never_splits_utf8();
	test_sentencepiece_byte_fallback();
	test_decode_empty();
	test_strip_after_fuse();
	test_byte_fallback_long_run_round_trips();
	test_no_decoder_stream_joins_with_space();
	test_rejects();
	if (failures) {
		printf("test_tokenizer: %d failure(s)\n", failures);
		return 1;
	}
	printf("test_tokenizer: ok\n");
	return 0;
}

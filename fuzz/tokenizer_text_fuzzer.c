/* fuzz/tokenizer_text_fuzzer.c — worker/tokenizer.c tok_encode /
 * tok_decode / streaming decode of fuzzed text with fuzzed special masks,
 * against the real (reduced) tokenizers of tokenizer_seed_corpus/ (all
 * but bad-* and regress-*).
 *
 * Input: byte 0 picks the tokenizer, byte 1 the mask mode (none, all ones,
 * pseudo-random from byte 2), the rest is the text.
 * Checked beyond the sanitizers (fuzz/tok_check.h): invalid UTF-8 rejected;
 * ids in range with pieces; without a mask no special id ever comes out
 * (a user cannot forge <|im_start|>); stream == decode; and the round trip
 * decode(encode(text)) == text for tokenizers that are lossless on every
 * valid UTF-8 text: byte-level BPE without normalizer or prefix space, and
 * SentencePiece-style BPE with byte fallback and no prepended space (Gemma)
 * on texts without U+2581, which its decoder turns into a space as HF's
 * does. */
#include <dirent.h>

#include "fuzz/tok_check.h"

#define MAXT 32
static tokenizer *toks[MAXT];
static int lossless[MAXT];
static unsigned char nopiece[MAXT][256]; /* byte-level: byte b has no piece */
static int ntoks;

/* GPT-2 bytes_to_unicode: the code point byte-level BPE writes for byte b. */
static unsigned bl_char(unsigned b)
{
	if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))
		return b;
	unsigned n = 0;
	for (unsigned x = 0; x < b; x++)
		if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255)))
			n++;
	return 256 + n;
}

/* Real byte-level vocabularies lack a few bytes (SmolLM2: 0x04, 0x06,
 * 0x13, 0x14, 0x16, 0x1D, 0xF1, 0xF2): HF drops those bytes too, so texts
 * containing them are not expected to round-trip. */
static void find_missing_bytes(int k)
{
	for (unsigned b = 0; b < 256; b++) {
		unsigned c = bl_char(b);
		char u[2] = { (char)(0xC0 | (c >> 6)), (char)(0x80 | (c & 0x3F)) };
		if (c < 0x80)
			u[0] = (char)c;
		nopiece[k][b] = tok_id(toks[k], u, c < 0x80 ? 1 : 2) < 0;
	}
}

static int roundtrip_expected(int k, const char *text, size_t len)
{
	if (lossless[k] == 2)
		return !memmem(text, len, "\xe2\x96\x81", 3);
	if (lossless[k] != 1)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (nopiece[k][(unsigned char)text[i]])
			return 0;
	return 1;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	char d[4096];
	snprintf(d, sizeof(d), "%s/tokenizer_seed_corpus", fuzz_dir());
	DIR *dir = opendir(d);
	FUZZ_CHECK(dir != NULL, "cannot open %s", d);
	char *names[64];
	int nn = 0;
	struct dirent *e;
	while ((e = readdir(dir)) && nn < 64)
		if (e->d_name[0] != '.' && strncmp(e->d_name, "bad-", 4) && strncmp(e->d_name, "regress-", 8))
			names[nn++] = strdup(e->d_name);
	closedir(dir);
	qsort(names, (size_t)nn, sizeof(char *), cmp); /* stable byte 0 -> tokenizer */
	for (int i = 0; i < nn; i++) {
		char p[8192], err[256];
		size_t len;
		snprintf(p, sizeof(p), "%s/%s", d, names[i]);
		char *js = fuzz_slurp(p, &len);
		if (ntoks < MAXT && tok_load(&toks[ntoks], js, len, err, sizeof(err)) == 0) {
			/* Lossless on every text: see the header comment. */
			lossless[ntoks] = !strcmp(names[i], "smollm2.json") || !strcmp(names[i], "smollm2-digits.json") ||
					  !strcmp(names[i], "llama3-regex.json") || !strcmp(names[i], "gpt2-split.json");
			if (!strcmp(names[i], "gemma3.json"))
				lossless[ntoks] = 2; /* texts without U+2581 */
			if (lossless[ntoks] == 1)
				find_missing_bytes(ntoks);
			ntoks++;
		} else {
			fprintf(stderr, "tokenizer_text_fuzzer: %s does not load: %s\n", names[i], err);
			abort();
		}
		free(js);
		free(names[i]);
	}
	FUZZ_CHECK(ntoks > 0, "no tokenizer in %s", d);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	int k = data[0] % ntoks, mode = data[1] % 3;
	uint32_t seed = data[2];
	size_t len = size - 3;
	char *text = malloc(len ? len : 1);
	unsigned char *mask = malloc(len ? len : 1);
	memcpy(text, data + 3, len);
	for (size_t i = 0; i < len; i++) {
		seed = seed * 1103515245u + 12345u;
		mask[i] = mode == 1 ? 1 : (seed >> 16) & 1;
	}
	size_t n;
	int *ids = fz_encode_check(toks[k], text, len, mode ? mask : NULL, &n, 1);
	if (ids) {
		char *out;
		size_t ol;
		fz_decode_check(toks[k], ids, n, 0, &out, &ol);
		if (roundtrip_expected(k, text, len))
			FUZZ_CHECK(ol == len && memcmp(out, text, len) == 0,
				   "round trip: %zu bytes in, %zu out (tokenizer %d)", len, ol, k);
		free(out);
		fz_decode_check(toks[k], ids, n, 1, &out, &ol);
		free(out);
		free(ids);
	}
	free(text);
	free(mask);
	return 0;
}

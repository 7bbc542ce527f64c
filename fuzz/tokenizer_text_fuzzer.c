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
static int ntoks;

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
		if (lossless[k] == 1 || (lossless[k] == 2 && !memmem(text, len, "\xe2\x96\x81", 3)))
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

/* fuzz/tokenizer_fuzzer.c — worker/tokenizer.c tok_load() on arbitrary
 * tokenizer.json bytes, then, when it loads, encode / decode / streaming
 * decode of fixed texts and a vocabulary walk.
 *
 * Checked beyond the sanitizers: every piece of an id is found again by
 * tok_id (the same bytes, perhaps another id when an added token shares
 * them); encoding valid UTF-8 succeeds with ids inside the vocabulary;
 * streaming decode equals decode (fuzz/tok_check.h).
 * Text fuzzing against real tokenizers is tokenizer_text_fuzzer. */
#include "fuzz/tok_check.h"

static const char *texts[] = {
	"Hello, world! 123 4567 \xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80  \t\n\n  end",
	"<|im_start|>user\nhi<|im_end|>\n<bos><start_of_turn>model\n",
	"  leading and trailing  ",
	"\xe2\x96\x81 x \xe2\x96\x81\xe2\x96\x81",
	"",
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	tokenizer *t = NULL;
	char err[512] = "";
	if (tok_load(&t, buf, size, err, sizeof(err)) != 0) {
		FUZZ_CHECK(err[0] != 0 && t == NULL, "rejected without a message");
		free(buf);
		return 0;
	}
	free(buf); /* the tokenizer must not keep pointers into the JSON bytes */
	int vs = tok_vocab_size(t);
	FUZZ_CHECK(vs >= 0, "vocab size %d", vs);
	for (int id = -1; id <= vs && id < 5000; id++) {
		size_t pl;
		const char *p = tok_piece(t, id, &pl);
		if (id < 0 || id >= vs) {
			FUZZ_CHECK(p == NULL, "piece for out-of-range id %d", id);
			continue;
		}
		if (!p)
			continue;
		int back = tok_id(t, p, pl);
		size_t bl;
		const char *bp = tok_piece(t, back, &bl);
		FUZZ_CHECK(bp && bl == pl && memcmp(bp, p, pl) == 0, "tok_id(piece(%d)) = %d, another piece", id, back);
	}
	for (size_t k = 0; k < sizeof(texts) / sizeof(texts[0]); k++) {
		size_t len = strlen(texts[k]), n = 0;
		unsigned char *ones = malloc(len + 1);
		memset(ones, 1, len + 1);
		for (int m = 0; m < 2; m++) {
			int *ids = fz_encode_check(t, texts[k], len, m ? ones : NULL, &n, 0);
			char *out;
			size_t ol;
			for (int skip = 0; skip < 2; skip++) {
				fz_decode_check(t, ids, n, skip, &out, &ol);
				free(out);
			}
			free(ids);
		}
		free(ones);
	}
	/* Decoding arbitrary ids, holes and out-of-range ones included. */
	int some[8] = { -1, 0, 1, vs - 1, vs, vs / 2, 2, 0x7fffffff };
	char *out;
	size_t ol;
	fz_decode_check(t, some, 8, 0, &out, &ol);
	free(out);
	tok_free(t);
	return 0;
}

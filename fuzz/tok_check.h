/* fuzz/tok_check.h — checks shared by the two tokenizer harnesses: encode a
 * text, then the tokenizer.h contract on the result (ids in range), decode,
 * and streaming decode equal to decode whenever decode is clean UTF-8. */
#ifndef MLXR_FUZZ_TOK_CHECK_H
#define MLXR_FUZZ_TOK_CHECK_H

#include <string.h>

#include "fuzz/fuzz.h"
#include "worker/tokenizer.h"

static inline int fz_has_fffd(const char *s, size_t n)
{
	for (size_t i = 0; i + 2 < n; i++)
		if ((unsigned char)s[i] == 0xEF && (unsigned char)s[i + 1] == 0xBF && (unsigned char)s[i + 2] == 0xBD)
			return 1;
	return 0;
}

static inline int fz_utf8_ok(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned c = p[i];
		size_t k;
		uint32_t cp;
		if (c < 0x80) { i++; continue; }
		else if (c >= 0xC2 && c <= 0xDF) { k = 1; cp = c & 0x1F; }
		else if (c >= 0xE0 && c <= 0xEF) { k = 2; cp = c & 0x0F; }
		else if (c >= 0xF0 && c <= 0xF4) { k = 3; cp = c & 0x07; }
		else return 0;
		if (n - i <= k) return 0;
		for (size_t j = 1; j <= k; j++) {
			if ((p[i + j] & 0xC0) != 0x80) return 0;
			cp = (cp << 6) | (p[i + j] & 0x3F);
		}
		if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
		    (cp >= 0xD800 && cp <= 0xDFFF))
			return 0;
		i += k + 1;
	}
	return 1;
}

/* Decodes ids both ways and checks they agree; returns the decoded text
 * (caller frees) in *out. */
static inline void fz_decode_check(const tokenizer *t, const int *ids, size_t n, int skip, char **out, size_t *outlen)
{
	FUZZ_CHECK(tok_decode(t, ids, n, skip, out, outlen) == 0, "decode failed");
	FUZZ_CHECK((*out)[*outlen] == 0, "decode not NUL-terminated");
	FUZZ_CHECK(fz_utf8_ok((const unsigned char *)*out, *outlen), "decode is not valid UTF-8");
	tok_stream s;
	tok_stream_init(&s, t, skip);
	char *cat = malloc(*outlen + 64);
	size_t cl = 0, cap = *outlen + 64;
	const char *p;
	size_t pl;
	for (size_t i = 0; i <= n; i++) {
		int r = i < n ? tok_stream_push(&s, ids[i], &p, &pl) : tok_stream_flush(&s, &p, &pl);
		FUZZ_CHECK(r == 0, "stream failed");
		FUZZ_CHECK(fz_utf8_ok((const unsigned char *)p, pl), "stream emitted invalid UTF-8");
		if (cl + pl > cap) {
			cap = 2 * (cl + pl);
			cat = realloc(cat, cap);
			FUZZ_CHECK(cat != NULL, "oom");
		}
		memcpy(cat + cl, p, pl);
		cl += pl;
	}
	if (!fz_has_fffd(*out, *outlen))
		FUZZ_CHECK(cl == *outlen && memcmp(cat, *out, cl) == 0, "stream (%zu bytes) != decode (%zu bytes)", cl,
			   *outlen);
	free(cat);
	tok_stream_free(&s);
}

/* Encodes text (mask may be NULL); checks ids; returns them (caller frees)
 * or NULL when the text is not valid UTF-8 (which must be rejected).
 * check_plain: with no mask, no special id may come out (true of real
 * tokenizers; a hostile tokenizer.json could merge characters into a
 * special token's piece, which HF would do too). */
static inline int *fz_encode_check(const tokenizer *t, const char *text, size_t len, const unsigned char *mask, size_t *n,
			    int check_plain)
{
	int *ids = NULL;
	char err[256] = "";
	int r = tok_encode(t, text, len, mask, &ids, n, err, sizeof(err));
	int valid = fz_utf8_ok((const unsigned char *)text, len);
	if (!valid) {
		FUZZ_CHECK(r != 0, "invalid UTF-8 text accepted");
		return NULL;
	}
	FUZZ_CHECK(r == 0, "encode of valid UTF-8 failed: %s", err);
	int vs = tok_vocab_size(t);
	for (size_t i = 0; i < *n; i++) {
		FUZZ_CHECK(ids[i] >= 0 && ids[i] < vs, "id %d outside [0, %d)", ids[i], vs);
		size_t pl;
		FUZZ_CHECK(tok_piece(t, ids[i], &pl) != NULL, "id %d has no piece", ids[i]);
		if (!mask && check_plain)
			FUZZ_CHECK(!tok_is_special(t, ids[i]) || len == 0, "special id %d from plain text", ids[i]);
	}
	return ids;
}

#endif

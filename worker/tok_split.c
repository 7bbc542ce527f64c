/* worker/tok_split.c — the pre-tokenizer split regexes, each written by
 * hand as a matcher for exactly one pattern string (no regex engine).
 *
 * Semantics are those of Oniguruma's leftmost-first alternation with greedy
 * backtracking, as Hugging Face tokenizers runs them: at a position the
 * first alternative that can match wins, and the caller (find-iter) moves
 * one character on where nothing matches. Classes: \p{L} and \p{N} are the
 * general categories L* and N*; \s is White_Space.
 *
 * GPT-2 (ByteLevel use_regex=true):
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * Llama 3 (Qwen2 is the same with \p{N} instead of \p{N}{1,3}):
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 */
#include "worker/tok_int.h"
#include "worker/unicode.h"

enum { C_L = 1, C_N = 2, C_WS = 3, C_O = 4 };

/* Class of the code point at i (input is valid UTF-8, i < n). */
static int cls_at(const unsigned char *s, size_t n, size_t i, uint32_t *cp, size_t *len)
{
	uint32_t c;
	size_t l = utf8_decode(s + i, n - i, &c);
	if (!l) { c = 0xFFFD; l = 1; } /* unreachable for validated input */
	*cp = c;
	*len = l;
	if (uni_is_space(c)) return C_WS;
	switch (uni_class(c)) {
	case UNI_LETTER: return C_L;
	case UNI_NUMBER: return C_N;
	default: return C_O;
	}
}

/* End of the run of characters of class k starting at i (max chars). */
static size_t run(const unsigned char *s, size_t n, size_t i, int k, size_t max)
{
	size_t cnt = 0;
	while (i < n && cnt < max) {
		uint32_t cp;
		size_t l;
		if (cls_at(s, n, i, &cp, &l) != k) break;
		i += l;
		cnt++;
	}
	return i;
}

static int lower_eq(const unsigned char *s, size_t n, size_t i, char want, int icase, size_t *len)
{
	if (i >= n) return 0;
	if (s[i] == (unsigned char)want || (icase && s[i] == (unsigned char)(want - 32))) {
		*len = 1;
		return 1;
	}
	/* (?i) in Oniguruma folds U+017F LATIN SMALL LETTER LONG S to 's'. */
	if (icase && want == 's' && i + 1 < n && s[i] == 0xC5 && s[i + 1] == 0xBF) {
		*len = 2;
		return 1;
	}
	return 0;
}

/* 's|'t|'re|'ve|'m|'ll|'d at i, case-insensitive when icase. */
static size_t contraction(const unsigned char *s, size_t n, size_t i, int icase)
{
	size_t l1, l2;
	if (s[i] != '\'') return 0;
	i++;
	static const char one[] = "stmd";
	for (int k = 0; one[k]; k++)
		if (lower_eq(s, n, i, one[k], icase, &l1)) return 1 + l1;
	static const char *two[] = { "re", "ve", "ll" };
	for (int k = 0; k < 3; k++)
		if (lower_eq(s, n, i, two[k][0], icase, &l1) &&
		    lower_eq(s, n, i + l1, two[k][1], icase, &l2))
			return 1 + l1 + l2;
	return 0;
}

/* \s+(?!\S)|\s+ at i, where s[i] is whitespace: the whole run when it
 * reaches the end or is one character long, else the run minus its last
 * character (which then starts the next piece, e.g. " hello"). */
static size_t ws_tail(const unsigned char *s, size_t n, size_t i)
{
	size_t j = i, last = i, cnt = 0;
	while (j < n) {
		uint32_t cp;
		size_t l;
		if (cls_at(s, n, j, &cp, &l) != C_WS) break;
		last = j;
		j += l;
		cnt++;
	}
	if (j == n || cnt == 1)
		return j - i;
	return last - i;
}

static size_t match_gpt2(const unsigned char *s, size_t n, size_t i)
{
	uint32_t cp;
	size_t l, m = contraction(s, n, i, 0);
	if (m) return m;
	int k = cls_at(s, n, i, &cp, &l);
	size_t j = i;
	if (cp == ' ' && i + l < n) {
		uint32_t cp2;
		size_t l2;
		int k2 = cls_at(s, n, i + l, &cp2, &l2);
		if (k2 != C_WS) { k = k2; j = i + l; }
	}
	if (k != C_WS)
		return run(s, n, j, k, SIZE_MAX) - i;
	return ws_tail(s, n, i);
}

static size_t match_llama(const unsigned char *s, size_t n, size_t i, size_t maxdig)
{
	uint32_t cp, cp2;
	size_t l, l2, m = contraction(s, n, i, 1);
	if (m) return m;
	int k = cls_at(s, n, i, &cp, &l);
	/* [^\r\n\p{L}\p{N}]?\p{L}+ */
	if (k == C_L)
		return run(s, n, i, C_L, SIZE_MAX) - i;
	if (k != C_N && cp != '\r' && cp != '\n' && i + l < n &&
	    cls_at(s, n, i + l, &cp2, &l2) == C_L)
		return run(s, n, i + l, C_L, SIZE_MAX) - i;
	/* \p{N}{1,3} */
	if (k == C_N)
		return run(s, n, i, C_N, maxdig) - i;
	/*  ?[^\s\p{L}\p{N}]+[\r\n]* */
	size_t j = SIZE_MAX;
	if (k == C_O)
		j = i;
	else if (cp == ' ' && i + l < n && cls_at(s, n, i + l, &cp2, &l2) == C_O)
		j = i + l;
	if (j != SIZE_MAX) {
		j = run(s, n, j, C_O, SIZE_MAX);
		while (j < n && (s[j] == '\r' || s[j] == '\n')) j++;
		return j - i;
	}
	/* k == C_WS. \s*[\r\n]+ : up to the last CR/LF of the whitespace run. */
	size_t e = i, lastnl = SIZE_MAX;
	while (e < n) {
		if (cls_at(s, n, e, &cp2, &l2) != C_WS) break;
		if (cp2 == '\r' || cp2 == '\n') lastnl = e;
		e += l2;
	}
	if (lastnl != SIZE_MAX)
		return lastnl + 1 - i;
	return ws_tail(s, n, i);
}

size_t tok_pat_match(tok_pattern pat, const unsigned char *s, size_t n, size_t i)
{
	switch (pat) {
	case TOK_PAT_GPT2: return match_gpt2(s, n, i);
	case TOK_PAT_LLAMA3: return match_llama(s, n, i, 3);
	case TOK_PAT_QWEN2: return match_llama(s, n, i, 1);
	case TOK_PAT_DIGIT: {
		/* Digits pre-tokenizer: Rust char::is_numeric, i.e. N*. */
		uint32_t cp;
		size_t l;
		return cls_at(s, n, i, &cp, &l) == C_N ? l : 0;
	}
	default: return 0;
	}
}

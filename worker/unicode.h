/* worker/unicode.h — the little Unicode the tokenizer needs.
 *
 * Contract:
 *  - Decoding is common/utf8.h's utf8_decode() (included here), shared
 *    with the broker, which checks the worker's text with it.
 *  - Category predicates follow the general categories of the generated
 *    tables (worker/unicode_tables.c, from Python's unicodedata; the
 *    version is uni_tables_version). \s is the White_Space property,
 *    which is what Oniguruma (the regex engine behind Hugging Face
 *    tokenizers) means by \s for UTF-8.
 *  - uni_nfc() returns the NFC form of valid UTF-8 input in *out
 *    (malloc'd, caller frees) and, in *map (malloc'd), for every output
 *    byte the offset of the input character it came from (a composite
 *    maps to its starter). -1 on allocation failure or invalid UTF-8.
 */
#ifndef MLXR_UNICODE_H
#define MLXR_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#include "common/utf8.h"

typedef struct { uint32_t lo, hi; uint8_t v; } uni_range;
typedef struct { uint32_t cp, a, b; } uni_decomp;
typedef struct { uint32_t a, b, cp; } uni_comp;

/* Generated tables (unicode_tables.c). */
extern const char uni_tables_version[];
extern const uni_range uni_class_ranges[];
extern const size_t uni_class_nranges;
extern const uni_range uni_ccc_ranges[];
extern const size_t uni_ccc_nranges;
extern const uni_decomp uni_decomps[];
extern const size_t uni_ndecomps;
extern const uni_comp uni_comps[];
extern const size_t uni_ncomps;
extern const uni_range uni_nfc_maybe_ranges[];
extern const size_t uni_nfc_maybe_nranges;

enum { UNI_OTHER = 0, UNI_LETTER = 1, UNI_NUMBER = 2 };

size_t uni_encode(uint32_t cp, unsigned char *out); /* out: 4 bytes */
int uni_class(uint32_t cp);      /* UNI_LETTER, UNI_NUMBER or UNI_OTHER */
int uni_is_space(uint32_t cp);   /* White_Space */
int uni_ccc(uint32_t cp);        /* canonical combining class */
/* 1 when the whole string is already NFC by quick check (common case). */
int uni_nfc_quick(const unsigned char *p, size_t n);
/* NFC of valid UTF-8. See contract above. */
int uni_nfc(const unsigned char *in, size_t n, unsigned char **out, size_t *outn, size_t **map);

#endif

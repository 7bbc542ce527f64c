/* worker/tok_int.h — internal to the tokenizer (tokenizer.c, tok_encode.c,
 * tok_split.c). Not a public interface. */
#ifndef MLXR_TOK_INT_H
#define MLXR_TOK_INT_H

#include <stddef.h>
#include <stdint.h>

#include "worker/tokenizer.h"

#define TOK_HOLE UINT32_MAX

typedef struct { uint32_t off, len; } tok_str; /* bytes in tokenizer.pool */

typedef enum { TOK_NORM_REPLACE, TOK_NORM_PREPEND, TOK_NORM_NFC, TOK_NORM_COUNT } tok_norm_type;
typedef struct {
	tok_norm_type type;
	tok_str a, b; /* Replace: a -> b; Prepend: a */
} tok_norm;

typedef enum { TOK_PRE_BYTELEVEL, TOK_PRE_SPLIT, TOK_PRE_DIGITS, TOK_PRE_METASPACE, TOK_PRE_COUNT } tok_pre_type;
typedef enum {
	TOK_BEH_REMOVED, TOK_BEH_ISOLATED, TOK_BEH_MERGED_PREV, TOK_BEH_MERGED_NEXT,
	TOK_BEH_CONTIGUOUS, TOK_BEH_COUNT
} tok_behavior;
/* Split patterns: a literal string, or one of the known regexes. */
typedef enum { TOK_PAT_STRING, TOK_PAT_GPT2, TOK_PAT_LLAMA3, TOK_PAT_QWEN2, TOK_PAT_DIGIT, TOK_PAT_COUNT } tok_pattern;
typedef enum { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER, TOK_PREPEND_COUNT } tok_prepend;
typedef struct {
	tok_pre_type type;
	tok_pattern pat;
	tok_str str;          /* Split String pattern / Metaspace replacement */
	tok_behavior behavior;
	int invert;
	int add_prefix_space; /* ByteLevel */
	int use_regex;        /* ByteLevel */
	tok_prepend prepend;  /* Metaspace */
	int split;            /* Metaspace */
} tok_pre;

typedef enum {
	TOK_DEC_BYTELEVEL, TOK_DEC_REPLACE, TOK_DEC_BYTEFALLBACK, TOK_DEC_FUSE,
	TOK_DEC_STRIP, TOK_DEC_METASPACE, TOK_DEC_COUNT
} tok_dec_type;
typedef struct {
	tok_dec_type type;
	tok_str a, b;       /* Replace a -> b; Strip/Metaspace: a = the character */
	int start, stop;    /* Strip */
	tok_prepend prepend;/* Metaspace */
} tok_dec;

typedef struct {
	int id;
	tok_str content;    /* as written */
	tok_str match;      /* what is matched: content, normalized if normalized */
	uint8_t special, lstrip, rstrip, single_word, normalized;
} tok_added;

/* A set of added tokens matched together (raw or normalized). */
typedef struct {
	uint32_t *slots;    /* hash of match strings: added index + 1, 0 empty */
	size_t cap;
	uint32_t lens[64];  /* distinct match lengths, descending */
	size_t nlens;
	uint8_t first[256]; /* first bytes that start some token */
} tok_aset;

typedef struct { uint64_t key; uint32_t rank; int32_t id; } tok_merge;

#define TOK_MAX_STEPS 16 /* normalizer / pre-tokenizer / decoder steps */

struct tokenizer {
	char *pool;             /* all strings */
	size_t pool_len, pool_cap;
	int nids;               /* max id + 1 */
	tok_str *piece;         /* [nids] model vocabulary piece, len TOK_HOLE = none */
	int32_t *added_of;      /* [nids] index into added, -1 = not added */
	uint32_t *vslots;       /* vocab hash: id + 1 */
	size_t vcap;
	tok_merge *mslots;      /* merges hash, key (a << 32 | b) + 1, 0 empty */
	size_t mcap;
	tok_added *added;
	size_t nadded;
	tok_aset araw, anorm;   /* normalized=false / normalized=true added tokens */
	size_t nraw, nnormd;
	int byte_level;         /* a ByteLevel pre-tokenizer maps bytes to chars */
	int byte_fallback, fuse_unk, ignore_merges, unk_id;
	int byte_id[256];       /* byte_level: id of the mapped char; -1 none */
	int fb_id[256];         /* byte_fallback: id of <0xXX>; -1 none */
	tok_norm norm[TOK_MAX_STEPS];
	size_t nnorm;
	tok_pre pre[TOK_MAX_STEPS];
	size_t npre;
	tok_dec dec[TOK_MAX_STEPS];
	size_t ndec;
	int has_decoder;
};

/* GPT-2 bytes_to_unicode(): byte -> code point, and its inverse (-1). */
uint32_t tok_byte_to_cp(unsigned b);
int tok_cp_to_byte(uint32_t cp);

uint64_t tok_hash(const void *p, size_t n);
int tok_vocab_find(const tokenizer *t, const char *s, size_t n);
const tok_merge *tok_merge_find(const tokenizer *t, int a, int b);
int tok_aset_find(const tokenizer *t, const tok_aset *as, const char *s, size_t n);

/* Split matching (tok_split.c): length of the match of pattern `pat`
 * (not TOK_PAT_STRING) at byte i of valid UTF-8 (s, n); 0 = no match. */
size_t tok_pat_match(tok_pattern pat, const unsigned char *s, size_t n, size_t i);

/* Runs the normalizer chain (tok_encode.c) over (s, n). mask (may be NULL)
 * has one byte per input byte; *outmask gets one per output byte (an output
 * byte carries the mask of the input it came from). Caller frees both. */
int tok_normalize(const tokenizer *t, const char *s, size_t n, const unsigned char *mask,
		  char **out, size_t *outn, unsigned char **outmask);

#endif

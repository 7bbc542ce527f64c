/* worker/tokenizer.h — Hugging Face tokenizer.json: byte-level BPE
 * (GPT-2 / Llama 3 / Qwen2 / SmolLM2) and SentencePiece-style BPE with byte
 * fallback (Gemma, Llama 2, Mistral), encode, decode and streaming decode.
 *
 * Contract:
 *  - tok_load() parses tokenizer.json bytes. The input is untrusted: every
 *    count and length is bounded (limits in tokenizer.c, with reasons), ids
 *    are validated, duplicate ids or pieces are rejected, and every merge
 *    must name vocabulary pieces. Anything the encoder does not implement
 *    exactly — a model other than BPE, a normalizer, pre-tokenizer or
 *    decoder type outside the supported list, a Split regex other than the
 *    GPT-2, Llama 3 and Qwen2 patterns — is rejected with a message naming
 *    it, rather than tokenized approximately. Returns 0 and a tokenizer
 *    the caller frees with tok_free(), or -1 with a message in err
 *    (caller-owned, errlen bytes, always NUL-terminated when errlen > 0).
 *    The post_processor, truncation and padding sections are ignored:
 *    tok_encode() is HF encode(text, add_special_tokens=False).
 *    Supported: model BPE (byte_fallback, fuse_unk, unk_token,
 *    ignore_merges; merges as "a b" strings or [a, b] pairs); normalizers
 *    Replace (String pattern), Prepend, NFC, Sequence; pre-tokenizers
 *    ByteLevel (add_prefix_space, use_regex; must be the last step),
 *    Split (String pattern, or the known regexes; every behavior, invert),
 *    Digits, Metaspace, Sequence; decoders ByteLevel, Replace (String),
 *    ByteFallback, Fuse, Strip, Metaspace, Sequence.
 *  - Ids: tok_vocab_size() is max id + 1 over vocabulary and added tokens;
 *    ids below it without a piece are holes: tok_piece() returns NULL.
 *  - tok_encode(): text MUST be valid UTF-8 (-1 otherwise). special_mask
 *    decides where *special* added tokens (special=true) may be recognised:
 *      NULL  — nowhere: the text is plain text, so a user writing
 *              "<|im_start|>" gets the ids of those characters, never the
 *              control token (HF: encode_special_tokens=True).
 *      else  — one byte per text byte; a special token matches only where
 *              every byte it covers has mask 1. Chat templates mark their
 *              own control text 1 and message text 0, and encode the whole
 *              rendered prompt in one call, so ids equal HF's tokenization
 *              of the same string wherever the mask is 1.
 *    Non-special added tokens (special=false) are matched everywhere, as
 *    HF does with and without encode_special_tokens. Matching is leftmost
 *    longest, with lstrip/rstrip/single_word and normalized=true tokens
 *    matched after normalization, as in HF's AddedVocabulary.
 *    On success *ids (malloc'd; caller frees with free()) holds *n ids.
 *  - tok_decode() is HF Tokenizer.decode(ids, skip_special_tokens): ids
 *    without a piece are skipped, invalid UTF-8 left by the decoder chain
 *    becomes U+FFFD. *out is malloc'd and NUL-terminated; caller frees.
 *  - Streaming: tok_stream_push() returns only complete UTF-8: bytes of a
 *    character split across tokens wait for the next id; a byte sequence
 *    that can no longer become valid is emitted as U+FFFD. The concatenated
 *    output of push... + flush equals tok_decode() of the same ids whenever
 *    that decode is valid UTF-8 without replacement characters. The
 *    returned pointer is owned by the stream and valid until the next call.
 *  - A tokenizer is read-only after tok_load(): any number of threads may
 *    encode and decode with it concurrently (each with its own tok_stream).
 */
#ifndef MLXR_TOKENIZER_H
#define MLXR_TOKENIZER_H

#include <stddef.h>

typedef struct tokenizer tokenizer;

int tok_load(tokenizer **out, const char *json, size_t len, char *err, size_t errlen);
void tok_free(tokenizer *t);

int tok_vocab_size(const tokenizer *t);
/* Id of an exact piece (added tokens first, as HF token_to_id), -1 if absent. */
int tok_id(const tokenizer *t, const char *piece, size_t len);
/* Raw vocabulary string of id (added token content for added ids), NULL
 * for holes and out-of-range ids. Not NUL-terminated: use *len. */
const char *tok_piece(const tokenizer *t, int id, size_t *len);
int tok_is_special(const tokenizer *t, int id);

int tok_encode(const tokenizer *t, const char *text, size_t len,
	       const unsigned char *special_mask, int **ids, size_t *n,
	       char *err, size_t errlen);
int tok_decode(const tokenizer *t, const int *ids, size_t n, int skip_special,
	       char **out, size_t *outlen);

typedef struct {
	const tokenizer *t;
	int skip_special;
	size_t ntok;           /* tokens seen that produced text (for Strip / Metaspace) */
	unsigned char pend[4]; /* bytes of an incomplete UTF-8 character */
	size_t npend;
	char *buf;             /* output buffer returned by push/flush */
	size_t cap;
} tok_stream;

void tok_stream_init(tok_stream *s, const tokenizer *t, int skip_special);
/* Pushes one id; *out and *outlen receive the newly complete text (maybe
 * empty). 0, or -1 on allocation failure. */
int tok_stream_push(tok_stream *s, int id, const char **out, size_t *outlen);
/* Emits what is still pending (an incomplete character becomes U+FFFD). */
int tok_stream_flush(tok_stream *s, const char **out, size_t *outlen);
void tok_stream_free(tok_stream *s);

#endif

/* worker/import_tok.c — tokenizer.json and tokenizer_config.json from a
 * GGUF file's tokenizer.* metadata.
 *
 * Two vocabularies are read:
 *  - "gpt2": byte-level BPE with the file's merges. Tokens are already
 *    spelled in the GPT-2 byte alphabet; one that is not is respelled from
 *    its UTF-8 bytes (as transformers' GGUF converter does). The
 *    pre-tokenizer follows tokenizer.ggml.pre, the way llama.cpp
 *    (llama-vocab.cpp) splits text for that name.
 *  - "llama" (SentencePiece) for the Gemma family: BPE with byte fallback,
 *    spaces normalized to U+2581. The file has no merges, so they are
 *    rebuilt from the vocabulary like transformers' gemma_tokenizer(): every
 *    split of a token into two vocabulary entries, ordered by the token's
 *    position in the file, then by longer left part first. A token made of
 *    spaces is stored with real spaces and respelled as U+2581s.
 * Control tokens (token_type 3) become special added tokens, user-defined
 * ones (4) plain added tokens.
 */
#include "worker/import.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/utf8.h"

#define TOK_MAX_VOCAB (1u << 24) /* the largest real vocabularies are ~260k */
#define TOK_MAX_LEN 4096         /* bytes per token; real ones are < 200 */

/* The official Gemma 3 chat template (google/gemma-3-*-it
 * tokenizer_config.json); GGUF files of base models carry none. */
static const char gemma3_template[] =
	"{{ bos_token }}\n"
	"{%- if messages[0]['role'] == 'system' -%}\n"
	"    {%- if messages[0]['content'] is string -%}\n"
	"        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
	"    {%- else -%}\n"
	"        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n"
	"    {%- endif -%}\n"
	"    {%- set loop_messages = messages[1:] -%}\n"
	"{%- else -%}\n"
	"    {%- set first_user_prefix = \"\" -%}\n"
	"    {%- set loop_messages = messages -%}\n"
	"{%- endif -%}\n"
	"{%- for message in loop_messages -%}\n"
	"    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
	"        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
	"    {%- endif -%}\n"
	"    {%- if (message['role'] == 'assistant') -%}\n"
	"        {%- set role = \"model\" -%}\n"
	"    {%- else -%}\n"
	"        {%- set role = message['role'] -%}\n"
	"    {%- endif -%}\n"
	"    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
	"    {%- if message['content'] is string -%}\n"
	"        {{ message['content'] | trim }}\n"
	"    {%- elif message['content'] is iterable -%}\n"
	"        {%- for item in message['content'] -%}\n"
	"            {%- if item['type'] == 'image' -%}\n"
	"                {{ '<start_of_image>' }}\n"
	"            {%- elif item['type'] == 'text' -%}\n"
	"                {{ item['text'] | trim }}\n"
	"            {%- endif -%}\n"
	"        {%- endfor -%}\n"
	"    {%- else -%}\n"
	"        {{ raise_exception(\"Invalid content type\") }}\n"
	"    {%- endif -%}\n"
	"    {{ '<end_of_turn>\n' }}\n"
	"{%- endfor -%}\n"
	"{%- if add_generation_prompt -%}\n"
	"    {{'<start_of_turn>model\n'}}\n"
	"{%- endif -%}\n";

/* Split regexes, as transformers' GGUF converter and the original
 * tokenizer.json files spell them (llama-vocab.cpp uses the same). */
static const char llama3_split[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
	"| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char qwen2_split[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
	"| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

enum { PRE_GPT2, PRE_DIGITS, PRE_LLAMA3, PRE_QWEN2 };
static const struct { const char *name; int kind; } pre_names[] = {
	{ "default", PRE_GPT2 }, { "gpt2", PRE_GPT2 }, { "gpt-2", PRE_GPT2 },
	/* starcoder-family vocabularies: \p{N} split first, then GPT-2 */
	{ "smollm", PRE_DIGITS }, { "starcoder", PRE_DIGITS }, { "refact", PRE_DIGITS },
	{ "codeshell", PRE_DIGITS },
	{ "llama3", PRE_LLAMA3 }, { "llama-v3", PRE_LLAMA3 }, { "llama-bpe", PRE_LLAMA3 },
	{ "smaug-bpe", PRE_LLAMA3 }, { "falcon3", PRE_LLAMA3 }, { "dbrx", PRE_LLAMA3 },
	{ "qwen2", PRE_QWEN2 }, { "deepseek-r1-qwen", PRE_QWEN2 },
};

typedef struct {
	const char *s; /* not NUL-terminated */
	uint32_t n;
	int32_t id;    /* final id for this spelling (the last one wins) */
} hent;

typedef struct {
	hent *t;
	uint64_t mask;
} hmap;

typedef struct {
	const gguf_file *g;
	uint64_t n;          /* vocabulary size */
	char **sp;           /* spelling of each token (owned) */
	uint32_t *sl;        /* its length */
	hmap h;
	char *err;
	size_t errlen;
} tctx;

static int terr(tctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int terr(tctx *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, c->errlen, fmt, ap);
	va_end(ap);
	return -1;
}

static uint64_t fnv(const char *s, uint32_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (uint32_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
	return h;
}

static hent *hfind(hmap *m, const char *s, uint32_t n)
{
	for (uint64_t i = fnv(s, n) & m->mask;; i = (i + 1) & m->mask) {
		hent *e = &m->t[i];
		if (!e->s || (e->n == n && !memcmp(e->s, s, n)))
			return e;
	}
}

static int32_t hget(hmap *m, const char *s, uint32_t n)
{
	hent *e = hfind(m, s, n);
	return e->s ? e->id : -1;
}

/* GPT-2 bytes_to_unicode(): printable bytes map to themselves, the other
 * 68 to U+0100.. in byte order. */
static uint32_t byte_char(uint8_t b)
{
	if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))
		return b;
	uint32_t k = 0;
	for (uint32_t x = 0; x < b; x++)
		if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE)))
			k++;
	return 0x100 + k;
}

static int in_alphabet(uint32_t cp)
{
	return (cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF) ||
	       (cp >= 0x100 && cp < 0x100 + 68);
}

/* Python str.isspace(), which str.strip() uses. */
static int py_space(uint32_t cp)
{
	return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
	       cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
	       cp == 0x205F || cp == 0x3000;
}

static size_t put_utf8(char *o, uint32_t cp)
{
	if (cp < 0x80)
		return o[0] = (char)cp, 1;
	if (cp < 0x800)
		return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
	if (cp < 0x10000)
		return o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
		       o[2] = (char)(0x80 | (cp & 0x3F)), 3;
	return o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
	       o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F)), 4;
}

/* Spells token i (raw bytes s, n) for the model vocabulary. */
static int spell(tctx *c, uint64_t i, const char *s, uint64_t n, int byte_level)
{
	if (n > TOK_MAX_LEN)
		return terr(c, "token %llu is %llu bytes long (limit %d)", (unsigned long long)i,
			    (unsigned long long)n, TOK_MAX_LEN);
	int all_alpha = 1, has_space = 0, all_space = 1;
	uint64_t ncp = 0;
	for (uint64_t k = 0; k < n;) {
		uint32_t cp, l = utf8_decode((const unsigned char *)s + k, (size_t)(n - k), &cp);
		if (!l)
			return terr(c, "token %llu is not valid UTF-8", (unsigned long long)i);
		all_alpha &= in_alphabet(cp);
		has_space |= cp == ' ';
		all_space &= py_space(cp);
		k += l;
		ncp++;
	}
	char *o;
	uint64_t on;
	if (byte_level && !all_alpha) {
		o = malloc((size_t)n * 2 + 1);
		if (!o)
			return terr(c, "out of memory");
		on = 0;
		for (uint64_t k = 0; k < n; k++)
			on += put_utf8(o + on, byte_char((uint8_t)s[k]));
	} else if (!byte_level && has_space && all_space) {
		o = malloc((size_t)ncp * 3 + 1);
		if (!o)
			return terr(c, "out of memory");
		on = 0;
		for (uint64_t k = 0; k < ncp; k++)
			on += put_utf8(o + on, 0x2581);
	} else {
		o = malloc((size_t)n + 1);
		if (!o)
			return terr(c, "out of memory");
		memcpy(o, s, (size_t)n);
		on = n;
	}
	if (on == 0) {
		free(o);
		return terr(c, "token %llu is empty", (unsigned long long)i);
	}
	o[on] = 0;
	c->sp[i] = o;
	c->sl[i] = (uint32_t)on;
	return 0;
}

static const gguf_kv *arr(const gguf_file *g, const char *key, int str)
{
	const gguf_kv *kv = gguf_find(g, key);
	if (!kv || kv->type != GGUF_V_ARRAY)
		return NULL;
	if (str != (kv->arr_type == GGUF_V_STRING))
		return NULL;
	if (!str && kv->arr_type != GGUF_V_INT32 && kv->arr_type != GGUF_V_UINT32 &&
	    kv->arr_type != GGUF_V_FLOAT32 && kv->arr_type != GGUF_V_INT8 && kv->arr_type != GGUF_V_UINT8)
		return NULL;
	return kv;
}

static void w_tok(jw_buf *w, tctx *c, uint64_t id)
{
	jw_str(w, c->sp[id], c->sl[id]);
}

/* One "added_tokens" entry. */
static void w_added(jw_buf *w, int *first, uint64_t id, const char *s, size_t n, int special)
{
	jw_cstr(w, *first ? "\n    " : ",\n    ");
	*first = 0;
	jw_fmt(w, "{\"id\":%llu,\"content\":", (unsigned long long)id);
	jw_str(w, s, n);
	jw_fmt(w, ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":%s}",
	       special ? "true" : "false");
}

static int opt_id(tctx *c, const char *key, int64_t *id)
{
	uint64_t v;
	int r = gguf_get_u64(c->g, key, &v);
	*id = -1;
	if (r < 0)
		return terr(c, "metadata %s has the wrong type", key);
	if (r == 0) {
		if (v >= c->n)
			return terr(c, "metadata %s = %llu is outside the vocabulary (%llu tokens)", key,
				    (unsigned long long)v, (unsigned long long)c->n);
		*id = (int64_t)v;
	}
	return 0;
}

static void w_post(jw_buf *w, tctx *c, int64_t bos, int add_bos)
{
	jw_cstr(w, "  \"post_processor\": {\"type\":\"TemplateProcessing\",\"single\":[");
	if (add_bos && bos >= 0)
		jw_cstr(w, "{\"SpecialToken\":{\"id\":\"BOS\",\"type_id\":0}},");
	jw_cstr(w, "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[");
	if (add_bos && bos >= 0)
		jw_cstr(w, "{\"SpecialToken\":{\"id\":\"BOS\",\"type_id\":0}},");
	jw_cstr(w, "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},");
	if (add_bos && bos >= 0)
		jw_cstr(w, "{\"SpecialToken\":{\"id\":\"BOS\",\"type_id\":1}},");
	jw_cstr(w, "{\"Sequence\":{\"id\":\"B\",\"type_id\":1}}],\"special_tokens\":{");
	if (add_bos && bos >= 0) {
		jw_cstr(w, "\"BOS\":{\"id\":\"BOS\",\"ids\":[");
		jw_fmt(w, "%lld],\"tokens\":[", (long long)bos);
		w_tok(w, c, (uint64_t)bos);
		jw_cstr(w, "]}");
	}
	jw_cstr(w, "}},\n");
}

int gguf_write_tokenizer(const gguf_file *g, const char *arch, uint64_t context_length, const imp_outs *outs, char *err,
			 size_t errlen)
{
	tctx c = { 0 };
	jw_buf w = { 0 }, tc = { 0 };
	int rc = -1;
	c.g = g;
	c.err = err;
	c.errlen = errlen;
	const char *model, *pre = "default";
	uint64_t mlen, plen = 7;
	if (gguf_get_str(g, "tokenizer.ggml.model", &model, &mlen))
		return terr(&c, "tokenizer.ggml.model is missing or not a string");
	int r = gguf_get_str(g, "tokenizer.ggml.pre", &pre, &plen);
	if (r < 0)
		return terr(&c, "tokenizer.ggml.pre is not a string");
	int byte_level = mlen == 4 && !memcmp(model, "gpt2", 4);
	int gemma = !strncmp(arch, "gemma", 5);
	if (!byte_level && !(mlen == 5 && !memcmp(model, "llama", 5) && gemma))
		return terr(&c, "tokenizer model '%.*s' for architecture '%s' is not supported (gpt2, or llama for gemma)",
			    (int)(mlen > 32 ? 32 : mlen), model, arch);
	int pre_kind = PRE_GPT2;
	if (byte_level) {
		pre_kind = -1;
		for (size_t i = 0; i < sizeof(pre_names) / sizeof(pre_names[0]); i++)
			if (strlen(pre_names[i].name) == plen && !memcmp(pre_names[i].name, pre, plen))
				pre_kind = pre_names[i].kind;
		if (pre_kind < 0)
			return terr(&c, "tokenizer.ggml.pre '%.*s' is not supported", (int)(plen > 32 ? 32 : plen), pre);
	}
	const gguf_kv *toks = arr(g, "tokenizer.ggml.tokens", 1);
	const gguf_kv *types = arr(g, "tokenizer.ggml.token_type", 0);
	const gguf_kv *merges = arr(g, "tokenizer.ggml.merges", 1);
	if (!toks || toks->n == 0 || toks->n > TOK_MAX_VOCAB)
		return terr(&c, "tokenizer.ggml.tokens is missing, not a string array or of a bad size");
	c.n = toks->n;
	if (types && types->n != c.n)
		return terr(&c, "tokenizer.ggml.token_type has %llu entries for %llu tokens",
			    (unsigned long long)types->n, (unsigned long long)c.n);
	if (byte_level && !merges)
		return terr(&c, "tokenizer.ggml.merges is missing");
	c.sp = calloc((size_t)c.n, sizeof(*c.sp));
	c.sl = calloc((size_t)c.n, sizeof(*c.sl));
	uint64_t hcap = 1;
	while (hcap < c.n * 2)
		hcap <<= 1;
	c.h.t = calloc((size_t)hcap, sizeof(hent));
	c.h.mask = hcap - 1;
	if (!c.sp || !c.sl || !c.h.t) {
		terr(&c, "out of memory");
		goto out;
	}
	for (uint64_t i = 0; i < c.n; i++) {
		const char *s;
		uint64_t n;
		gguf_arr_str(g, toks, i, &s, &n);
		if (spell(&c, i, s, n, byte_level))
			goto out;
		hent *e = hfind(&c.h, c.sp[i], c.sl[i]);
		e->s = c.sp[i];
		e->n = c.sl[i];
		e->id = (int32_t)i; /* a repeated spelling keeps the last id, as a dict would */
	}
	int64_t bos, eos, unk, pad;
	if (opt_id(&c, "tokenizer.ggml.bos_token_id", &bos) || opt_id(&c, "tokenizer.ggml.eos_token_id", &eos) ||
	    opt_id(&c, "tokenizer.ggml.unknown_token_id", &unk) || opt_id(&c, "tokenizer.ggml.padding_token_id", &pad))
		goto out;
	int add_bos = gemma, add_eos = 0;
	if (gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos) < 0 ||
	    gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &add_eos) < 0) {
		terr(&c, "tokenizer.ggml.add_*_token is not a bool");
		goto out;
	}

	/* ---- tokenizer.json ---- */
	jw_cstr(&w, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [");
	int first = 1;
	for (uint64_t i = 0; types && i < c.n; i++) {
		int64_t ty = gguf_arr_i64(types, i);
		const char *s;
		uint64_t n;
		gguf_arr_str(g, toks, i, &s, &n);
		if (ty != 3 && ty != 4)
			continue;
		/* The added token's text is the raw token; its id is whatever the
		 * vocabulary maps that text to (transformers' add_special_tokens). */
		int32_t id = n <= TOK_MAX_LEN ? hget(&c.h, s, (uint32_t)n) : -1;
		if (id < 0 || (uint64_t)id != i)
			continue;
		if (ty == 3 && byte_level) {
			/* a control token outside the byte alphabet is a llama.cpp
			 * mislabel (see transformers add_gguf_special_tokens) */
			if (c.sl[i] != n || memcmp(c.sp[i], s, (size_t)n))
				continue;
		}
		w_added(&w, &first, i, s, (size_t)n, ty == 3);
	}
	jw_cstr(&w, "\n  ],\n");
	if (byte_level) {
		jw_cstr(&w, "  \"normalizer\": null,\n  \"pre_tokenizer\": ");
		const char *bl_rx = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}";
		const char *bl = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}";
		if (pre_kind == PRE_GPT2) {
			jw_cstr(&w, bl_rx);
		} else if (pre_kind == PRE_DIGITS) {
			jw_cstr(&w, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true},");
			jw_cstr(&w, bl_rx);
			jw_cstr(&w, "]}");
		} else {
			const char *rx = pre_kind == PRE_LLAMA3 ? llama3_split : qwen2_split;
			jw_cstr(&w, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":");
			jw_str(&w, rx, strlen(rx));
			jw_cstr(&w, "},\"behavior\":\"Isolated\",\"invert\":false},");
			jw_cstr(&w, bl);
			jw_cstr(&w, "]}");
		}
		jw_cstr(&w, ",\n");
		w_post(&w, &c, bos, add_bos);
		jw_cstr(&w, "  \"decoder\": {\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true},\n");
		jw_cstr(&w, "  \"model\": {\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,"
			    "\"continuing_subword_prefix\":\"\",\"end_of_word_suffix\":\"\",\"fuse_unk\":false,"
			    "\"byte_fallback\":false,\"ignore_merges\":false,\n    \"vocab\": {");
	} else {
		jw_cstr(&w, "  \"normalizer\": {\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xe2\x96\x81\"},\n");
		jw_cstr(&w, "  \"pre_tokenizer\": {\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"MergedWithPrevious\",\"invert\":false},\n");
		w_post(&w, &c, bos, add_bos);
		jw_cstr(&w, "  \"decoder\": {\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\xe2\x96\x81\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}]},\n");
		if (unk < 0) {
			int32_t u = hget(&c.h, "<unk>", 5);
			unk = u;
		}
		jw_cstr(&w, "  \"model\": {\"type\":\"BPE\",\"dropout\":null,\"unk_token\":");
		if (unk >= 0)
			w_tok(&w, &c, (uint64_t)unk);
		else
			jw_cstr(&w, "null");
		jw_cstr(&w, ",\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":true,"
			    "\"byte_fallback\":true,\"ignore_merges\":false,\n    \"vocab\": {");
	}
	first = 1;
	for (uint64_t i = 0; i < c.n; i++) {
		if ((uint64_t)hget(&c.h, c.sp[i], c.sl[i]) != i)
			continue; /* an earlier duplicate spelling */
		jw_cstr(&w, first ? "\n      " : ",\n      ");
		first = 0;
		w_tok(&w, &c, i);
		jw_fmt(&w, ":%llu", (unsigned long long)i);
	}
	jw_cstr(&w, "\n    },\n    \"merges\": [");
	first = 1;
	if (byte_level) {
		for (uint64_t i = 0; i < merges->n; i++) {
			const char *s;
			uint64_t n;
			gguf_arr_str(g, merges, i, &s, &n);
			const char *sp = n ? memchr(s, ' ', (size_t)n) : NULL;
			if (!sp || sp == s || sp == s + n - 1 || memchr(sp + 1, ' ', (size_t)(s + n - sp - 1))) {
				terr(&c, "tokenizer.ggml.merges[%llu] is not two tokens separated by one space",
				     (unsigned long long)i);
				goto out;
			}
			if (!utf8_valid(s, (size_t)n)) {
				terr(&c, "tokenizer.ggml.merges[%llu] is not valid UTF-8", (unsigned long long)i);
				goto out;
			}
			jw_cstr(&w, first ? "\n      [" : ",\n      [");
			first = 0;
			jw_str(&w, s, (size_t)(sp - s));
			jw_cstr(&w, ",");
			jw_str(&w, sp + 1, (size_t)(s + n - sp - 1));
			jw_cstr(&w, "]");
		}
	} else {
		/* transformers generate_merges(vocab, scores = -position): tokens
		 * in id order; within one, the longer left part first. */
		for (uint64_t i = 0; i < c.n; i++) {
			if ((uint64_t)hget(&c.h, c.sp[i], c.sl[i]) != i)
				continue;
			const char *s = c.sp[i];
			uint32_t n = c.sl[i];
			/* code point boundaries, longest left part first */
			uint32_t cut[TOK_MAX_LEN];
			uint32_t ncut = 0, k = 0, cp;
			while (k < n) {
				k += utf8_decode((const unsigned char *)s + k, n - k, &cp);
				if (k < n)
					cut[ncut++] = k;
			}
			while (ncut--) {
				uint32_t b = cut[ncut];
				if (hget(&c.h, s, b) < 0 || hget(&c.h, s + b, n - b) < 0)
					continue;
				jw_cstr(&w, first ? "\n      [" : ",\n      [");
				first = 0;
				jw_str(&w, s, b);
				jw_cstr(&w, ",");
				jw_str(&w, s + b, n - b);
				jw_cstr(&w, "]");
			}
		}
	}
	jw_cstr(&w, "\n    ]\n  }\n}\n");
	if (jw_finish(&w)) {
		terr(&c, "out of memory");
		goto out;
	}
	if (imp_write_file(outs->tokenizer, "tokenizer.json", w.buf, w.len, err, errlen))
		goto out;

	/* ---- tokenizer_config.json ---- */
	const char *tmpl = NULL;
	uint64_t tlen = 0;
	if (gguf_get_str(g, "tokenizer.chat_template", &tmpl, &tlen) < 0) {
		terr(&c, "tokenizer.chat_template is not a string");
		goto out;
	}
	if (tmpl) {
		if (!utf8_valid(tmpl, (size_t)tlen)) {
			terr(&c, "tokenizer.chat_template is not valid UTF-8");
			goto out;
		}
	} else if (!strcmp(arch, "gemma3")) {
		tmpl = gemma3_template;
		tlen = strlen(gemma3_template);
	}
	jw_fmt(&tc, "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n  \"add_bos_token\": %s,\n  \"add_eos_token\": %s,\n",
	       add_bos ? "true" : "false", add_eos ? "true" : "false");
	const struct { const char *key; int64_t id; } sp[] = {
		{ "bos_token", bos }, { "eos_token", eos }, { "unk_token", unk }, { "pad_token", pad },
	};
	for (size_t i = 0; i < sizeof(sp) / sizeof(sp[0]); i++) {
		if (sp[i].id < 0)
			continue;
		jw_fmt(&tc, "  \"%s\": ", sp[i].key);
		w_tok(&tc, &c, (uint64_t)sp[i].id);
		jw_cstr(&tc, ",\n");
	}
	if (tmpl) {
		jw_cstr(&tc, "  \"chat_template\": ");
		jw_str(&tc, tmpl, (size_t)tlen);
		jw_cstr(&tc, ",\n");
	}
	jw_fmt(&tc, "  \"clean_up_tokenization_spaces\": false,\n  \"model_max_length\": %llu\n}\n",
	       (unsigned long long)context_length);
	if (jw_finish(&tc)) {
		terr(&c, "out of memory");
		goto out;
	}
	if (imp_write_file(outs->tokenizer_config, "tokenizer_config.json", tc.buf, tc.len, err, errlen))
		goto out;
	rc = 0;
out:
	jw_free(&w);
	jw_free(&tc);
	if (c.sp)
		for (uint64_t i = 0; i < c.n; i++)
			free(c.sp[i]);
	free(c.sp);
	free(c.sl);
	free(c.h.t);
	return rc;
}

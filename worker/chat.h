/* worker/chat.h — chat templates: detect the family of a model's Jinja
 * chat template and render a conversation the way transformers'
 * apply_chat_template(tokenize=False) does, byte for byte, without a Jinja
 * interpreter.
 *
 * Why no Jinja: a template is code shipped with the model; interpreting it
 * means running model-supplied code over user data. Instead the template is
 * only fingerprinted (a few literal substrings of the official templates) and
 * each known family is rendered by straight C below, checked byte for byte
 * against transformers by tests/py/test_chat.py on the real templates in
 * tests/data/templates/.
 *
 * Families (chat_format):
 *   CHAT_FMT_CHATML   <|im_start|>role\n...<|im_end|>\n: SmolLM2 and Qwen2.5,
 *                     with their built-in default system prompt when the
 *                     conversation has none; plain ChatML otherwise.
 *   CHAT_FMT_QWEN3    ChatML + Qwen3's <think> handling; enable_thinking.
 *   CHAT_FMT_LLAMA3   Llama 3 (no system header), 3.1/3.3 (system header
 *                     with "Cutting Knowledge Date" and a fixed date), 3.2
 *                     (date of today from strftime_now). Content is trimmed.
 *   CHAT_FMT_MISTRAL  Mistral-7B-Instruct-v0.3 ("v3" tokenizer): the system
 *                     message goes in front of the LAST user message, and
 *                     only when that message is the last of the
 *                     conversation (the official template drops it
 *                     otherwise); roles must alternate user/assistant.
 *   CHAT_FMT_PHI3     Phi-3-mini / Phi-3.5-mini (<|user|> ... <|end|>); the
 *                     eos_token text ends a conversation rendered without a
 *                     generation prompt.
 *   CHAT_FMT_GEMMA    Gemma 2 (a system message is an error, as in its
 *                     template) and Gemma 3 (system text + "\n\n" folded
 *                     into the first user turn); roles must alternate;
 *                     content is trimmed; assistant is called "model".
 *
 * Message text is trimmed exactly where the official template trims it
 * (Jinja `trim` = Python str.strip(): Unicode whitespace), and is never
 * interpreted: it is copied (or dropped) byte for byte.
 *
 * The mask (security contract). chat_render() returns, next to the prompt
 * bytes, one mask byte per prompt byte: 1 where the template itself wrote
 * the byte, 0 where the byte was copied from a message. The tokenizer MUST
 * match a special token (<|im_start|>, <|eot_id|>, [INST], <start_of_turn>,
 * the BOS text, ...) only where every byte of it has mask 1; bytes with mask
 * 0 are plain text, so a user writing "<|im_start|>system" in a message
 * cannot forge a turn. The mask is not a segmentation boundary: text
 * between two matched special tokens is encoded as one run, as transformers
 * does, whatever its mask, or token ids differ from the reference.
 *
 * BOS. Llama 3, Mistral and Gemma templates write the BOS token's text
 * ("<|begin_of_text|>", "<s>", "<bos>") themselves (chat_config.template_bos
 * says so). transformers tokenizes a rendered chat with
 * add_special_tokens=False, and so MUST the engine: a rendered prompt is
 * encoded without adding a BOS of the tokenizer's own, or the model sees two.
 *
 * Memory: chat_config is a plain value (no allocation, no _free). The
 * rendered bytes and mask are malloc'd and owned by the caller (free()).
 * Errors: functions return 0 on success, <0 on error, and write one line
 * into err[errlen] (caller-owned; may be NULL when errlen is 0). They never
 * print or exit.
 */
#ifndef MLXR_CHAT_H
#define MLXR_CHAT_H

#include <stddef.h>

typedef enum {
	CHAT_ROLE_SYSTEM,
	CHAT_ROLE_USER,
	CHAT_ROLE_ASSISTANT,
	CHAT_ROLE_COUNT
} chat_role;

typedef struct {
	chat_role role;
	const char *text; /* UTF-8, need not be NUL-terminated; NULL only if len == 0 */
	size_t len;       /* bytes */
} chat_msg;

typedef enum {
	CHAT_FMT_CHATML,
	CHAT_FMT_QWEN3,
	CHAT_FMT_LLAMA3,
	CHAT_FMT_MISTRAL,
	CHAT_FMT_PHI3,
	CHAT_FMT_GEMMA,
	CHAT_FMT_COUNT /* also: "no template known yet" after chat_config_load */
} chat_format;

/* Return codes beyond 0 / -1. */
#define CHAT_ERR_INVALID   (-1) /* malformed input, or a conversation the template rejects */
#define CHAT_ERR_UNKNOWN   (-2) /* template present but not of a known family: the caller
                                 * MAY chat_config_fallback_chatml() and warn the user */
#define CHAT_ERR_NO_TEMPLATE (-3) /* tokenizer_config.json has no chat_template */

/* Limits (reasons):
 * - tokenizer_config.json <= 32 MiB: the largest real one (Gemma 3, with
 *   262k added-token entries) is ~1.2 MB.
 * - chat template <= 256 KiB: the largest official templates are ~20 KB.
 * - a special-token string <= 127 bytes: real ones are < 32.
 * - rendered prompt <= 1 GiB: far beyond any context window; stops a
 *   size_t overflow before it can happen. */
#define CHAT_CONFIG_MAX   ((size_t)32 << 20)
#define CHAT_TEMPLATE_MAX ((size_t)256 << 10)
#define CHAT_TOKEN_MAX    127
#define CHAT_OUT_MAX      ((size_t)1 << 30)

/* Variant flags inside a family (chat_config.flags). */
#define CHAT_V_SMOLLM_SYSTEM  0x01u /* ChatML: SmolLM2's default system prompt */
#define CHAT_V_QWEN_SYSTEM    0x02u /* ChatML: Qwen2.5's default system prompt */
#define CHAT_V_LLAMA_SYSHDR   0x04u /* Llama 3.1+: system header with knowledge/today dates */
#define CHAT_V_LLAMA_TODAY    0x08u /* Llama 3.2: today's date (strftime_now) */
#define CHAT_V_GEMMA_SYSFOLD  0x10u /* Gemma 3: system folded into the first user turn */
#define CHAT_V_PHI_SKIP_EMPTY_SYSTEM 0x20u /* Phi-3.5: an empty system message is skipped */

typedef struct {
	chat_format format;            /* CHAT_FMT_COUNT until a template is recognised */
	unsigned flags;                /* CHAT_V_* */
	int template_bos;              /* 1: the template writes bos text (see BOS above) */
	char bos[CHAT_TOKEN_MAX + 1];  /* bos_token text, NUL-terminated; "" if none */
	char eos[CHAT_TOKEN_MAX + 1];  /* eos_token text; "" if none */
	char date[32];                 /* Llama 3.1: the template's fixed "Today Date" */
} chat_config;

typedef struct {
	int add_generation_prompt; /* open an assistant turn at the end (default 1) */
	int continue_final;        /* assistant prefill: end the prompt right after the
	                            * final message's text, its turn left open, as
	                            * transformers' continue_final_message does
	                            * (default 0; exclusive with add_generation_prompt) */
	int enable_thinking;       /* Qwen3 only: 0 adds the empty <think></think>
	                            * block after the generation prompt (default 1) */
	const char *date;          /* Llama 3.1+ "Today Date" ("26 Jul 2024" form),
	                            * overriding the template's (like transformers'
	                            * date_string kwarg); NULL = the template's own:
	                            * 3.1's fixed literal, or for 3.2 today in local
	                            * time (strftime_now). Inside the sandboxed worker
	                            * the time zone file is unreadable, so "today" is
	                            * UTC there: the broker SHOULD pass the date. */
} chat_opts;

/* Defaults: add_generation_prompt 1, continue_final 0, enable_thinking 1. */
void chat_opts_default(chat_opts *opts);

/* Parses tokenizer_config.json bytes (untrusted; len <= CHAT_CONFIG_MAX):
 * bos_token and eos_token (a string, or an AddedToken object's "content"),
 * and chat_template (a string, or the list form, whose entry named
 * "default" is used), whose family it detects.
 * Returns 0 (cfg->format set), CHAT_ERR_NO_TEMPLATE (cfg valid, format
 * CHAT_FMT_COUNT: newer models keep the template in chat_template.jinja,
 * which the caller then passes to chat_config_set_template),
 * CHAT_ERR_UNKNOWN (cfg valid, format CHAT_FMT_COUNT, err names what the
 * template looks like) or CHAT_ERR_INVALID. */
int chat_config_load(chat_config *cfg, const char *json, size_t len, char *err, size_t errlen);

/* Detects the family of a template's text (untrusted; <= CHAT_TEMPLATE_MAX),
 * e.g. the bytes of chat_template.jinja, keeping cfg's bos/eos.
 * Returns 0, CHAT_ERR_UNKNOWN or CHAT_ERR_INVALID. */
int chat_config_set_template(chat_config *cfg, const char *tmpl, size_t len, char *err, size_t errlen);

/* After CHAT_ERR_UNKNOWN / CHAT_ERR_NO_TEMPLATE: plain ChatML, no default
 * system prompt, no BOS text. The caller SHOULD tell the user. */
void chat_config_fallback_chatml(chat_config *cfg);

/* Short lower-case name of a format ("chatml", "qwen3", ...); "unknown"
 * out of range. */
const char *chat_format_name(chat_format f);

/* Renders msgs[0..n) (n >= 1). opts NULL means chat_opts_default.
 * On success *out (NUL-terminated for convenience; *len excludes the NUL)
 * and *mask (*len bytes, each 0 or 1) are malloc'd for the caller.
 * On error both are NULL and *len is 0. Errors: invalid role, text not
 * valid UTF-8, a conversation the family's template rejects (Gemma/Mistral
 * alternation, Gemma 2 system message), continue_final with
 * add_generation_prompt, or a final message the template does not render. */
int chat_render(const chat_config *cfg, const chat_msg *msgs, size_t n, const chat_opts *opts,
		char **out, unsigned char **mask, size_t *len, char *err, size_t errlen);

#endif

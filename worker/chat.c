/* worker/chat.c — chat-template families rendered in C (contract: chat.h).
 *
 * Each render_* function below is the official Jinja template of its family
 * read top to bottom and written as C; the template line it mirrors is
 * quoted above the code that mirrors it. Bytes the template writes go out
 * with mask 1, bytes copied from a message with mask 0.
 */
#include "worker/chat.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/json.h"
#include "common/utf8.h"

static void chat_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void chat_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* ------------------------------------------------------------------ text */

/* Known default system prompts, copied from the official templates. */
static const char SMOLLM_SYSTEM[] = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
static const char QWEN_SYSTEM[] = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

static int has(const char *s, size_t n, const char *lit)
{
	return memmem(s, n, lit, strlen(lit)) != NULL;
}

/* Python's str.isspace(), which Jinja's `trim` (str.strip()) and
 * transformers' rstrip() use: the Unicode White_Space characters plus the
 * four ASCII separators U+001C..U+001F. */
static int py_isspace(uint32_t cp)
{
	return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
	       cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
	       cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* Decodes the (valid) UTF-8 character at s[0..n); sets *k to its length. */
static uint32_t utf8_at(const unsigned char *s, size_t n, size_t *k)
{
	unsigned c = s[0];

	if (c < 0x80 || n < 2) {
		*k = 1;
		return c;
	}
	if (c < 0xe0) {
		*k = 2;
		return ((uint32_t)(c & 0x1f) << 6) | (s[1] & 0x3f);
	}
	if (c < 0xf0 && n >= 3) {
		*k = 3;
		return ((uint32_t)(c & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
	}
	if (n >= 4) {
		*k = 4;
		return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3f) << 12) |
		       ((uint32_t)(s[2] & 0x3f) << 6) | (s[3] & 0x3f);
	}
	*k = 1;
	return c;
}

/* Length of s[0..n) without trailing Python whitespace. */
static size_t py_rstrip_len(const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;

	while (n > 0) {
		size_t start = n - 1, k;

		while (start > 0 && (s[start] & 0xc0) == 0x80 && n - start < 4)
			start--;
		if (!py_isspace(utf8_at(s + start, n - start, &k)) || start + k != n)
			break;
		n = start;
	}
	return n;
}

/* A byte slice of a message. */
typedef struct {
	const char *p;
	size_t n;
} slice;

/* Jinja `| trim` / Python str.strip(). */
static slice py_strip(slice s)
{
	const unsigned char *u = (const unsigned char *)s.p;
	size_t i = 0, k;

	while (i < s.n && py_isspace(utf8_at(u + i, s.n - i, &k)))
		i += k;
	s.p += i;
	s.n = py_rstrip_len(s.p, s.n - i);
	return s;
}

/* Python str.lstrip('\n'), rstrip('\n'). */
static slice lstrip_nl(slice s)
{
	while (s.n && s.p[0] == '\n') {
		s.p++;
		s.n--;
	}
	return s;
}

static slice rstrip_nl(slice s)
{
	while (s.n && s.p[s.n - 1] == '\n')
		s.n--;
	return s;
}

/* Offset of the first / last occurrence of lit in s, or -1. */
static ptrdiff_t find_first(slice s, const char *lit)
{
	const char *q = memmem(s.p, s.n, lit, strlen(lit));

	return q ? q - s.p : -1;
}

static ptrdiff_t find_last(slice s, const char *lit)
{
	size_t m = strlen(lit);
	ptrdiff_t last = -1;
	size_t off = 0;

	while (off <= s.n) {
		const char *q = memmem(s.p + off, s.n - off, lit, m);

		if (!q)
			break;
		last = q - s.p;
		off = (size_t)last + 1;
	}
	return last;
}

/* ------------------------------------------------------------------ output */

typedef struct {
	char *b;
	unsigned char *m;
	size_t len, cap;
	int oom;       /* allocation failed or CHAT_OUT_MAX passed; sticky */
	/* continue_final bookkeeping */
	size_t final_idx;  /* index of the final message */
	size_t final_end;  /* output length right after its text; SIZE_MAX if never written */
	int final_trimmed; /* the template trims (right-strips) the final text */
} outbuf;

static void put(outbuf *o, const char *s, size_t n, unsigned char mask)
{
	if (o->oom || n == 0)
		return;
	if (n > CHAT_OUT_MAX - o->len) {
		o->oom = 1;
		return;
	}
	if (o->len + n + 1 > o->cap) {
		size_t cap = o->cap ? o->cap : 256;
		char *b;
		unsigned char *m;

		while (cap < o->len + n + 1)
			cap = cap > CHAT_OUT_MAX / 2 ? CHAT_OUT_MAX + 1 : cap * 2;
		b = realloc(o->b, cap);
		if (!b) {
			o->oom = 1;
			return;
		}
		o->b = b;
		m = realloc(o->m, cap);
		if (!m) {
			o->oom = 1;
			return;
		}
		o->m = m;
		o->cap = cap;
	}
	memcpy(o->b + o->len, s, n);
	memset(o->m + o->len, mask, n);
	o->len += n;
}

/* Template text (mask 1). */
static void tpl(outbuf *o, const char *lit)
{
	put(o, lit, strlen(lit), 1);
}

/* Message text (mask 0) of message idx; `trimmed` says whether the template
 * right-strips it (see continue_final in chat_render). */
static void msg(outbuf *o, size_t idx, slice s, int trimmed)
{
	put(o, s.p, s.n, 0);
	if (idx == o->final_idx) {
		o->final_end = o->len;
		o->final_trimmed = trimmed;
	}
}

static const char *const role_name[CHAT_ROLE_COUNT] = { "system", "user", "assistant" };

static slice text_of(const chat_msg *m)
{
	slice s = { m->text ? m->text : "", m->len };

	return s;
}

typedef struct {
	const chat_config *cfg;
	const chat_msg *msgs;
	size_t n;
	const chat_opts *opts;
	outbuf *o;
	char *err;
	size_t errlen;
} rctx;

/* ------------------------------------------------------------------ ChatML */

/* SmolLM2:
 *   {% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}
 *   {{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, ...<|im_end|>\n' }}{% endif %}
 *   {{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}
 *   {% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
 * Qwen2.5 writes the same bytes (its default system prompt stands where
 * messages[0] is not a system message; the first system message is written
 * by the block before the loop, in the same form). */
static int render_chatml(rctx *c)
{
	const char *def = NULL;

	if (c->cfg->flags & CHAT_V_SMOLLM_SYSTEM)
		def = SMOLLM_SYSTEM;
	else if (c->cfg->flags & CHAT_V_QWEN_SYSTEM)
		def = QWEN_SYSTEM;
	if (def && c->msgs[0].role != CHAT_ROLE_SYSTEM) {
		tpl(c->o, "<|im_start|>system\n");
		tpl(c->o, def);
		tpl(c->o, "<|im_end|>\n");
	}
	for (size_t i = 0; i < c->n; i++) {
		tpl(c->o, "<|im_start|>");
		tpl(c->o, role_name[c->msgs[i].role]);
		tpl(c->o, "\n");
		msg(c->o, i, text_of(&c->msgs[i]), 0);
		tpl(c->o, "<|im_end|>\n");
	}
	if (c->opts->add_generation_prompt)
		tpl(c->o, "<|im_start|>assistant\n");
	return 0;
}

/* ------------------------------------------------------------------ Qwen3 */

static int starts_with(slice s, const char *lit)
{
	size_t m = strlen(lit);

	return s.n >= m && !memcmp(s.p, lit, m);
}

static int ends_with(slice s, const char *lit)
{
	size_t m = strlen(lit);

	return s.n >= m && !memcmp(s.p + s.n - m, lit, m);
}

/* Qwen3 (Qwen/Qwen3-0.6B … 235B), without tools. */
static int render_qwen3(rctx *c)
{
	size_t last_query = c->n - 1;

	/* {%- if messages[0].role == 'system' %}
	 *     {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }} */
	if (c->msgs[0].role == CHAT_ROLE_SYSTEM) {
		tpl(c->o, "<|im_start|>system\n");
		msg(c->o, 0, text_of(&c->msgs[0]), 0);
		tpl(c->o, "<|im_end|>\n");
	}
	/* ns.last_query_index: the last user message that is not a
	 * <tool_response>…</tool_response> wrapper. (With continue_final,
	 * transformers appends a tag to the final message's text first, so
	 * that message never "ends with" </tool_response>.) */
	for (size_t k = c->n; k-- > 0;) {
		slice s = text_of(&c->msgs[k]);
		int ends = ends_with(s, "</tool_response>") && !(c->opts->continue_final && k == c->n - 1);

		if (c->msgs[k].role == CHAT_ROLE_USER && !(starts_with(s, "<tool_response>") && ends)) {
			last_query = k;
			break;
		}
	}
	for (size_t i = 0; i < c->n; i++) {
		const chat_msg *m = &c->msgs[i];
		slice content = text_of(m), reasoning = { "", 0 };

		if (m->role == CHAT_ROLE_USER || (m->role == CHAT_ROLE_SYSTEM && i > 0)) {
			tpl(c->o, "<|im_start|>");
			tpl(c->o, role_name[m->role]);
			tpl(c->o, "\n");
			msg(c->o, i, content, 0);
			tpl(c->o, "<|im_end|>\n");
			continue;
		}
		if (m->role != CHAT_ROLE_ASSISTANT)
			continue;
		/* {%- if '</think>' in message.content %}
		 *   content = message.content.split('</think>')[-1].lstrip('\n')
		 *   reasoning_content = message.content.split('</think>')[0].rstrip('\n')
		 *                       .split('<think>')[-1].lstrip('\n') */
		if (find_first(content, "</think>") >= 0) {
			slice whole = content, before;
			ptrdiff_t a = find_last(whole, "</think>"), b = find_first(whole, "</think>"), t;

			content.p = whole.p + a + 8;
			content.n = whole.n - (size_t)a - 8;
			content = lstrip_nl(content);
			before.p = whole.p;
			before.n = (size_t)b;
			before = rstrip_nl(before);
			t = find_last(before, "<think>");
			if (t >= 0) {
				before.p += t + 7;
				before.n -= (size_t)t + 7;
			}
			reasoning = lstrip_nl(before);
		}
		/* {%- if loop.index0 > ns.last_query_index %}
		 *   {%- if loop.last or (not loop.last and reasoning_content) %}
		 *     '<|im_start|>' + role + '\n<think>\n' + reasoning_content.strip('\n')
		 *     + '\n</think>\n\n' + content.lstrip('\n')
		 *   {%- else %} '<|im_start|>' + role + '\n' + content
		 * {%- else %} '<|im_start|>' + role + '\n' + content */
		if (i > last_query && (i == c->n - 1 || reasoning.n > 0)) {
			tpl(c->o, "<|im_start|>assistant\n<think>\n");
			msg(c->o, SIZE_MAX, lstrip_nl(rstrip_nl(reasoning)), 0);
			tpl(c->o, "\n</think>\n\n");
			msg(c->o, i, lstrip_nl(content), 0);
		} else {
			tpl(c->o, "<|im_start|>assistant\n");
			msg(c->o, i, content, 0);
		}
		tpl(c->o, "<|im_end|>\n");
	}
	/* {%- if add_generation_prompt %} '<|im_start|>assistant\n'
	 *   {%- if enable_thinking is defined and enable_thinking is false %}
	 *     '<think>\n\n</think>\n\n' */
	if (c->opts->add_generation_prompt) {
		tpl(c->o, "<|im_start|>assistant\n");
		if (!c->opts->enable_thinking)
			tpl(c->o, "<think>\n\n</think>\n\n");
	}
	return 0;
}

/* ------------------------------------------------------------------ Llama 3 */

/* strftime("%d %b %Y") in the C locale, without depending on the locale. */
static void today(char *buf, size_t n)
{
	static const char *const mon[12] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
					     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
	time_t t = time(NULL);
	struct tm tm;

	if (!localtime_r(&t, &tm) || tm.tm_mon < 0 || tm.tm_mon > 11) {
		snprintf(buf, n, "26 Jul 2024");
		return;
	}
	snprintf(buf, n, "%02d %s %04d", tm.tm_mday, mon[tm.tm_mon], tm.tm_year + 1900);
}

static void llama3_turn(rctx *c, size_t i)
{
	/* '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'
	 * + message['content'] | trim + '<|eot_id|>' */
	tpl(c->o, "<|start_header_id|>");
	tpl(c->o, role_name[c->msgs[i].role]);
	tpl(c->o, "<|end_header_id|>\n\n");
	msg(c->o, i, py_strip(text_of(&c->msgs[i])), 1);
	tpl(c->o, "<|eot_id|>");
}

static int render_llama3(rctx *c)
{
	size_t start = 0;

	if (!(c->cfg->flags & CHAT_V_LLAMA_SYSHDR)) {
		/* Llama 3: bos_token before the first turn, then every message. */
		for (size_t i = 0; i < c->n; i++) {
			if (i == 0 && c->cfg->template_bos)
				tpl(c->o, c->cfg->bos);
			llama3_turn(c, i);
		}
	} else {
		/* Llama 3.1 … 3.3: {{- bos_token }}, then the system header,
		 * always, with the (trimmed) system message if messages[0] is one. */
		char date[32];
		slice sys = { "", 0 };

		if (c->opts->date)
			snprintf(date, sizeof(date), "%s", c->opts->date);
		else if (c->cfg->flags & CHAT_V_LLAMA_TODAY)
			today(date, sizeof(date));
		else
			snprintf(date, sizeof(date), "%s", c->cfg->date);
		if (c->cfg->template_bos)
			tpl(c->o, c->cfg->bos);
		tpl(c->o, "<|start_header_id|>system<|end_header_id|>\n\n");
		tpl(c->o, "Cutting Knowledge Date: December 2023\n");
		tpl(c->o, "Today Date: ");
		tpl(c->o, date);
		tpl(c->o, "\n\n");
		if (c->msgs[0].role == CHAT_ROLE_SYSTEM) {
			sys = py_strip(text_of(&c->msgs[0]));
			start = 1;
		}
		msg(c->o, start ? 0 : SIZE_MAX, sys, 1);
		tpl(c->o, "<|eot_id|>");
		for (size_t i = start; i < c->n; i++)
			llama3_turn(c, i);
	}
	if (c->opts->add_generation_prompt)
		tpl(c->o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
	return 0;
}

/* ------------------------------------------------------------------ Mistral */

/* Mistral-7B-Instruct-v0.3, without tools. add_generation_prompt is not
 * read by the template: a prompt ending in [/INST] is already open. */
static int render_mistral(rctx *c)
{
	size_t start = 0, idx = 0;
	int has_sys = 0;

	if (c->msgs[0].role == CHAT_ROLE_SYSTEM) {
		has_sys = 1;
		start = 1;
	}
	/* (message["role"] == "user") != (ns.index % 2 == 0) -> raise_exception */
	for (size_t i = start; i < c->n; i++, idx++) {
		if ((c->msgs[i].role == CHAT_ROLE_USER) != (idx % 2 == 0)) {
			chat_err(c->err, c->errlen, "mistral template: after the optional system message, "
				 "roles must alternate user/assistant/user/assistant/... (message %zu is %s)",
				 i, role_name[c->msgs[i].role]);
			return CHAT_ERR_INVALID;
		}
	}
	if (c->cfg->template_bos)
		tpl(c->o, c->cfg->bos);
	for (size_t i = start; i < c->n; i++) {
		const chat_msg *m = &c->msgs[i];

		if (m->role == CHAT_ROLE_USER) {
			/* {%- if loop.last and system_message is defined %}
			 *   "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]"
			 * {%- else %} "[INST] " + message["content"] + "[/INST]" */
			tpl(c->o, "[INST] ");
			if (i == c->n - 1 && has_sys) {
				msg(c->o, 0, text_of(&c->msgs[0]), 0);
				tpl(c->o, "\n\n");
			}
			msg(c->o, i, text_of(m), 0);
			tpl(c->o, "[/INST]");
		} else if (m->role == CHAT_ROLE_ASSISTANT) {
			/* " " + message["content"]|trim + eos_token */
			tpl(c->o, " ");
			msg(c->o, i, py_strip(text_of(m)), 1);
			tpl(c->o, c->cfg->eos);
		} else {
			chat_err(c->err, c->errlen, "mistral template: only user and assistant roles are supported, "
				 "with the exception of an initial optional system message (message %zu is system)", i);
			return CHAT_ERR_INVALID;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ Phi-3 */

/* {% for message in messages %}{% if message['role'] == 'system' [and message['content']] %}
 * {{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif ... 'user' %}{{'<|user|>\n' ...}}
 * {% elif ... 'assistant' %}{{'<|assistant|>\n' ...}}{% endif %}{% endfor %}
 * {% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %} */
static int render_phi3(rctx *c)
{
	for (size_t i = 0; i < c->n; i++) {
		const chat_msg *m = &c->msgs[i];

		/* Phi-3.5 skips an empty system message (with continue_final
		 * transformers appends a tag first, so the final one is never empty). */
		if (m->role == CHAT_ROLE_SYSTEM && m->len == 0 && (c->cfg->flags & CHAT_V_PHI_SKIP_EMPTY_SYSTEM) &&
		    !(c->opts->continue_final && i == c->n - 1))
			continue;
		tpl(c->o, "<|");
		tpl(c->o, role_name[m->role]);
		tpl(c->o, "|>\n");
		msg(c->o, i, text_of(m), 0);
		tpl(c->o, "<|end|>\n");
	}
	if (c->opts->add_generation_prompt)
		tpl(c->o, "<|assistant|>\n");
	else
		tpl(c->o, c->cfg->eos);
	return 0;
}

/* ------------------------------------------------------------------ Gemma */

static int render_gemma(rctx *c)
{
	size_t start = 0;
	int fold = 0;

	/* {{ bos_token }} */
	if (c->cfg->template_bos)
		tpl(c->o, c->cfg->bos);
	if (c->msgs[0].role == CHAT_ROLE_SYSTEM) {
		if (!(c->cfg->flags & CHAT_V_GEMMA_SYSFOLD)) {
			/* Gemma 2: raise_exception('System role not supported') */
			chat_err(c->err, c->errlen, "gemma template: system role not supported "
				 "(Gemma 2's template rejects a system message)");
			return CHAT_ERR_INVALID;
		}
		/* Gemma 3: first_user_prefix = messages[0]['content'] + '\n\n' */
		fold = 1;
		start = 1;
	}
	for (size_t i = start, k = 0; i < c->n; i++, k++) {
		const chat_msg *m = &c->msgs[i];

		/* (message['role'] == 'user') != (loop.index0 % 2 == 0) -> raise */
		if ((m->role == CHAT_ROLE_USER) != (k % 2 == 0)) {
			chat_err(c->err, c->errlen, "gemma template: conversation roles must alternate "
				 "user/assistant/user/assistant/... (message %zu is %s)", i, role_name[m->role]);
			return CHAT_ERR_INVALID;
		}
		/* '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "")
		 * + message['content'] | trim + '<end_of_turn>\n' */
		tpl(c->o, "<start_of_turn>");
		tpl(c->o, m->role == CHAT_ROLE_ASSISTANT ? "model" : role_name[m->role]);
		tpl(c->o, "\n");
		if (k == 0 && fold) {
			msg(c->o, 0, text_of(&c->msgs[0]), 0);
			tpl(c->o, "\n\n");
		}
		msg(c->o, i, py_strip(text_of(m)), 1);
		tpl(c->o, "<end_of_turn>\n");
	}
	if (c->opts->add_generation_prompt)
		tpl(c->o, "<start_of_turn>model\n");
	return 0;
}

/* ------------------------------------------------------------------ render */

void chat_opts_default(chat_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->add_generation_prompt = 1;
	opts->enable_thinking = 1;
}

const char *chat_format_name(chat_format f)
{
	static const char *const names[CHAT_FMT_COUNT] = { "chatml", "qwen3", "llama3", "mistral", "phi3", "gemma" };

	return (unsigned)f < CHAT_FMT_COUNT ? names[f] : "unknown";
}

int chat_render(const chat_config *cfg, const chat_msg *msgs, size_t n, const chat_opts *opts,
		char **out, unsigned char **mask, size_t *len, char *err, size_t errlen)
{
	chat_opts defaults;
	outbuf o;
	rctx c;
	int rc;

	*out = NULL;
	*mask = NULL;
	*len = 0;
	if (!opts) {
		chat_opts_default(&defaults);
		opts = &defaults;
	}
	if (!cfg || (unsigned)cfg->format >= CHAT_FMT_COUNT) {
		chat_err(err, errlen, "chat template: no known template loaded");
		return CHAT_ERR_INVALID;
	}
	if (!msgs || n == 0) {
		chat_err(err, errlen, "chat template: the conversation has no messages");
		return CHAT_ERR_INVALID;
	}
	if (opts->continue_final && opts->add_generation_prompt) {
		chat_err(err, errlen, "chat template: continue_final and add_generation_prompt are exclusive");
		return CHAT_ERR_INVALID;
	}
	if (opts->date && (strlen(opts->date) == 0 || strlen(opts->date) >= 32)) {
		chat_err(err, errlen, "chat template: date must be 1..31 bytes");
		return CHAT_ERR_INVALID;
	}
	for (size_t i = 0; i < n; i++) {
		if ((unsigned)msgs[i].role >= CHAT_ROLE_COUNT) {
			chat_err(err, errlen, "chat template: message %zu has an invalid role", i);
			return CHAT_ERR_INVALID;
		}
		if (!msgs[i].text && msgs[i].len) {
			chat_err(err, errlen, "chat template: message %zu has no text", i);
			return CHAT_ERR_INVALID;
		}
		if (msgs[i].len > CHAT_OUT_MAX || !utf8_valid((const unsigned char *)msgs[i].text, msgs[i].len)) {
			chat_err(err, errlen, "chat template: message %zu is not valid UTF-8 (or is too long)", i);
			return CHAT_ERR_INVALID;
		}
	}
	memset(&o, 0, sizeof(o));
	o.final_idx = opts->continue_final ? n - 1 : SIZE_MAX;
	o.final_end = SIZE_MAX;
	c.cfg = cfg;
	c.msgs = msgs;
	c.n = n;
	c.opts = opts;
	c.o = &o;
	c.err = err;
	c.errlen = errlen;
	switch (cfg->format) {
	case CHAT_FMT_CHATML: rc = render_chatml(&c); break;
	case CHAT_FMT_QWEN3: rc = render_qwen3(&c); break;
	case CHAT_FMT_LLAMA3: rc = render_llama3(&c); break;
	case CHAT_FMT_MISTRAL: rc = render_mistral(&c); break;
	case CHAT_FMT_PHI3: rc = render_phi3(&c); break;
	case CHAT_FMT_GEMMA: rc = render_gemma(&c); break;
	default: rc = CHAT_ERR_INVALID; break;
	}
	if (rc)
		goto fail;
	if (o.oom) {
		chat_err(err, errlen, "chat template: out of memory (or prompt over %zu bytes)", CHAT_OUT_MAX);
		rc = CHAT_ERR_INVALID;
		goto fail;
	}
	/* continue_final (transformers' continue_final_message): the final
	 * message is tagged, the chat rendered, and the output cut where the
	 * tag begins; when the template stripped the tag's trailing space
	 * (it trims the text), the cut output is also rstrip()ed — which, for
	 * a text that trims to nothing, eats template whitespace before it. */
	if (opts->continue_final) {
		if (o.final_end == SIZE_MAX) {
			chat_err(err, errlen, "chat template: continue_final is set but the %s template does not "
				 "render the final message", chat_format_name(cfg->format));
			rc = CHAT_ERR_INVALID;
			goto fail;
		}
		o.len = o.final_end;
		if (o.final_trimmed)
			o.len = py_rstrip_len(o.b ? o.b : "", o.len);
	}
	if (!o.b) { /* nothing written at all: still hand back valid buffers */
		o.b = malloc(1);
		o.m = malloc(1);
		if (!o.b || !o.m) {
			chat_err(err, errlen, "chat template: out of memory");
			rc = CHAT_ERR_INVALID;
			goto fail;
		}
	}
	o.b[o.len] = '\0';
	*out = o.b;
	*mask = o.m;
	*len = o.len;
	return 0;
fail:
	free(o.b);
	free(o.m);
	return rc;
}

/* ------------------------------------------------------------------ config */

/* Writes a printable-ASCII excerpt of s into buf (for error messages that
 * name an unknown template without echoing control bytes). */
static void excerpt(char *buf, size_t n, const char *s, size_t len)
{
	size_t j = 0;

	for (size_t i = 0; i < len && j + 1 < n && i < 48; i++) {
		unsigned char ch = (unsigned char)s[i];

		buf[j++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : (ch == '\n' ? ' ' : '?');
	}
	buf[j] = '\0';
}

/* Llama 3.1's `{%- set date_string = "26 Jul 2024" %}`: the literal. */
static int llama_date_literal(const char *t, size_t n, char *date, size_t dn)
{
	static const char key[] = "date_string = \"";
	const char *p = memmem(t, n, key, sizeof(key) - 1);
	size_t i, left;

	if (!p)
		return -1;
	p += sizeof(key) - 1;
	left = n - (size_t)(p - t);
	for (i = 0; i < left && i + 1 < dn && p[i] != '"'; i++)
		if (p[i] < 0x20 || p[i] > 0x7e)
			return -1;
	if (i == 0 || i >= left || p[i] != '"')
		return -1;
	memcpy(date, p, i);
	date[i] = '\0';
	return 0;
}

void chat_config_fallback_chatml(chat_config *cfg)
{
	cfg->format = CHAT_FMT_CHATML;
	cfg->flags = 0;
	cfg->template_bos = 0;
}

int chat_config_set_template(chat_config *cfg, const char *t, size_t n, char *err, size_t errlen)
{
	char ex[64];

	cfg->format = CHAT_FMT_COUNT;
	cfg->flags = 0;
	cfg->template_bos = 0;
	cfg->date[0] = '\0';
	if (!t || n == 0) {
		chat_err(err, errlen, "chat template: empty");
		return CHAT_ERR_INVALID;
	}
	if (n > CHAT_TEMPLATE_MAX) {
		chat_err(err, errlen, "chat template: %zu bytes, over the %zu-byte limit", n, CHAT_TEMPLATE_MAX);
		return CHAT_ERR_INVALID;
	}
	excerpt(ex, sizeof(ex), t, n);
	if (has(t, n, "<|im_start|>")) {
		if (has(t, n, "<|im_sep|>")) {
			chat_err(err, errlen, "chat template not recognised: ChatML with <|im_sep|> (Phi-4 style) "
				 "is not supported: \"%s...\"", ex);
			return CHAT_ERR_UNKNOWN;
		}
		if (has(t, n, "enable_thinking") && has(t, n, "<think>")) {
			cfg->format = CHAT_FMT_QWEN3;
			return 0;
		}
		if (has(t, n, "<think>")) {
			chat_err(err, errlen, "chat template not recognised: ChatML with <think> but without Qwen3's "
				 "enable_thinking (a reasoning-only variant): \"%s...\"", ex);
			return CHAT_ERR_UNKNOWN;
		}
		if (has(t, n, SMOLLM_SYSTEM))
			cfg->flags |= CHAT_V_SMOLLM_SYSTEM;
		else if (has(t, n, QWEN_SYSTEM))
			cfg->flags |= CHAT_V_QWEN_SYSTEM;
		else if (has(t, n, "You are")) {
			/* A built-in system prompt we would silently drop. */
			chat_err(err, errlen, "chat template not recognised: ChatML with an unknown built-in "
				 "system prompt: \"%s...\"", ex);
			return CHAT_ERR_UNKNOWN;
		}
		cfg->format = CHAT_FMT_CHATML;
		return 0;
	}
	if (has(t, n, "<|start_header_id|>")) {
		cfg->template_bos = has(t, n, "bos_token");
		if (has(t, n, "Cutting Knowledge Date")) {
			cfg->flags |= CHAT_V_LLAMA_SYSHDR;
			if (has(t, n, "strftime_now"))
				cfg->flags |= CHAT_V_LLAMA_TODAY;
			if (llama_date_literal(t, n, cfg->date, sizeof(cfg->date)) &&
			    !(cfg->flags & CHAT_V_LLAMA_TODAY)) {
				chat_err(err, errlen, "chat template not recognised: Llama 3.1-style system header "
					 "without a date: \"%s...\"", ex);
				return CHAT_ERR_UNKNOWN;
			}
		}
		cfg->format = CHAT_FMT_LLAMA3;
		return 0;
	}
	if (has(t, n, "[INST]")) {
		/* Only the v0.3 ("v3" tokenizer) template: v0.1/v0.2 put spaces
		 * around [/INST], Nemo/Tekken none after [INST], v7 has
		 * [SYSTEM_PROMPT]; rendering them as v0.3 would be wrong. */
		if (has(t, n, "[AVAILABLE_TOOLS] [") && has(t, n, "\"[INST] \" + message[\"content\"] + \"[/INST]\"") &&
		    has(t, n, "\" \" + message[\"content\"]|trim + eos_token")) {
			cfg->template_bos = has(t, n, "bos_token");
			cfg->format = CHAT_FMT_MISTRAL;
			return 0;
		}
		chat_err(err, errlen, "chat template not recognised: a Mistral [INST] template other than "
			 "Mistral-7B-Instruct-v0.3's: \"%s...\"", ex);
		return CHAT_ERR_UNKNOWN;
	}
	if (has(t, n, "<|user|>") && has(t, n, "<|end|>") && has(t, n, "<|assistant|>")) {
		/* Phi-3-mini (2024-05 on) and Phi-3.5-mini; the first Phi-3
		 * template (bos_token, <|assistant|> after every user turn)
		 * differs. */
		if (!has(t, n, "bos_token") && has(t, n, "<|system|>") && has(t, n, "eos_token")) {
			if (has(t, n, "'system' and message['content']"))
				cfg->flags |= CHAT_V_PHI_SKIP_EMPTY_SYSTEM;
			cfg->format = CHAT_FMT_PHI3;
			return 0;
		}
		chat_err(err, errlen, "chat template not recognised: a Phi-3-style template other than "
			 "Phi-3-mini / Phi-3.5-mini's: \"%s...\"", ex);
		return CHAT_ERR_UNKNOWN;
	}
	if (has(t, n, "<start_of_turn>")) {
		cfg->template_bos = has(t, n, "bos_token");
		if (has(t, n, "first_user_prefix")) {
			cfg->flags |= CHAT_V_GEMMA_SYSFOLD;
			cfg->format = CHAT_FMT_GEMMA;
			return 0;
		}
		if (has(t, n, "System role not supported")) {
			cfg->format = CHAT_FMT_GEMMA;
			return 0;
		}
		chat_err(err, errlen, "chat template not recognised: a Gemma-style template other than "
			 "Gemma 2's / Gemma 3's: \"%s...\"", ex);
		return CHAT_ERR_UNKNOWN;
	}
	chat_err(err, errlen, "chat template not recognised (no ChatML, Llama 3, Mistral, Phi-3 or Gemma "
		 "marker): \"%s...\"", ex);
	return CHAT_ERR_UNKNOWN;
}

/* bos_token / eos_token: a string, null, or an AddedToken object
 * {"content": "...", ...}. Absent or null leaves "". */
static int special_token(const json_value *root, const char *key, char *dst, char *err, size_t errlen)
{
	const json_value *v = json_get(root, key);

	dst[0] = '\0';
	if (!v || v->type == JSON_NULL)
		return 0;
	if (v->type == JSON_OBJECT)
		v = json_get(v, "content");
	if (!v || v->type != JSON_STRING) {
		chat_err(err, errlen, "tokenizer_config.json: %s is not a string or {\"content\": string}", key);
		return CHAT_ERR_INVALID;
	}
	if (v->n > CHAT_TOKEN_MAX || memchr(v->str, '\0', v->n)) {
		chat_err(err, errlen, "tokenizer_config.json: %s is over %d bytes or contains NUL", key,
			 CHAT_TOKEN_MAX);
		return CHAT_ERR_INVALID;
	}
	memcpy(dst, v->str, v->n);
	dst[v->n] = '\0';
	return 0;
}

int chat_config_load(chat_config *cfg, const char *json, size_t len, char *err, size_t errlen)
{
	json_doc doc = { 0 };
	const json_value *root, *tv;
	char jerr[160];
	int rc;

	memset(cfg, 0, sizeof(*cfg));
	cfg->format = CHAT_FMT_COUNT;
	if (!json || len > CHAT_CONFIG_MAX) {
		chat_err(err, errlen, "tokenizer_config.json: missing or over %zu bytes", CHAT_CONFIG_MAX);
		return CHAT_ERR_INVALID;
	}
	if (json_parse(json, len, &doc, jerr, sizeof(jerr))) {
		chat_err(err, errlen, "tokenizer_config.json: %s", jerr);
		return CHAT_ERR_INVALID;
	}
	root = doc.root;
	if (!root || root->type != JSON_OBJECT) {
		chat_err(err, errlen, "tokenizer_config.json: top level is not an object");
		rc = CHAT_ERR_INVALID;
		goto out;
	}
	if ((rc = special_token(root, "bos_token", cfg->bos, err, errlen)) ||
	    (rc = special_token(root, "eos_token", cfg->eos, err, errlen)))
		goto out;
	tv = json_get(root, "chat_template");
	if (tv && tv->type == JSON_ARRAY) {
		/* [{"name": "default", "template": "..."}, {"name": "tool_use", ...}] */
		const json_value *pick = NULL;

		for (uint32_t i = 0; i < tv->n; i++) {
			const json_value *e = json_at(tv, i);
			const char *name;

			if (!e || e->type != JSON_OBJECT || json_get_str(e, "name", &name) != 0) {
				chat_err(err, errlen, "tokenizer_config.json: chat_template[%u] is not "
					 "{\"name\": string, \"template\": string}", i);
				rc = CHAT_ERR_INVALID;
				goto out;
			}
			if (!strcmp(name, "default"))
				pick = json_get(e, "template");
		}
		tv = pick;
		if (!tv) {
			chat_err(err, errlen, "tokenizer_config.json: chat_template list has no \"default\" entry");
			rc = CHAT_ERR_NO_TEMPLATE;
			goto out;
		}
	}
	if (!tv || tv->type == JSON_NULL) {
		chat_err(err, errlen, "tokenizer_config.json: no chat_template (look for chat_template.jinja)");
		rc = CHAT_ERR_NO_TEMPLATE;
		goto out;
	}
	if (tv->type != JSON_STRING) {
		chat_err(err, errlen, "tokenizer_config.json: chat_template is not a string");
		rc = CHAT_ERR_INVALID;
		goto out;
	}
	rc = chat_config_set_template(cfg, tv->str, tv->n, err, errlen);
out:
	json_free(&doc);
	return rc;
}

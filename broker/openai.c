/* broker/openai.c — request validation for the OpenAI endpoints (loop
 * thread) and the errors they answer. The response writers are in
 * openai_out.c. Every check names the parameter it rejects, and every
 * rejection is a 4xx (the official client retries 5xx). Unknown fields are
 * ignored; fields we cannot honour are a 400, never silently dropped. */
#include "broker/openai.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bounds (reasons): a conversation of more than 4096 messages cannot fit
 * any context we serve; token ids are int32; a detokenize request of 1M
 * ids is already 8 MiB of JSON. */
#define OAI_MAX_MSGS 4096
#define OAI_MAX_PARTS 256
#define OAI_MAX_IDS (1u << 20)

void oai_err_set(oai_err *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
{
	memset(e, 0, sizeof(*e));
	e->status = status;
	e->type = type;
	e->code = code;
	snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
}

void oai_error_body(jw_buf *w, const oai_err *e)
{
	jw_cstr(w, "{\"error\":{\"message\":");
	jw_str(w, e->msg, strlen(e->msg));
	jw_cstr(w, ",\"type\":");
	jw_str(w, e->type, strlen(e->type));
	jw_cstr(w, ",\"param\":");
	if (e->param[0])
		jw_str(w, e->param, strlen(e->param));
	else
		jw_cstr(w, "null");
	jw_cstr(w, ",\"code\":");
	if (e->code)
		jw_str(w, e->code, strlen(e->code));
	else
		jw_cstr(w, "null");
	if (e->has_ctx)
		jw_fmt(w, ",\"n_prompt_tokens\":%zu,\"n_ctx\":%d", e->n_prompt, e->n_ctx);
	jw_cstr(w, "}}");
}

static int bad(oai_err *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(oai_err *e, const char *param, const char *fmt, ...)
{
	char m[sizeof(e->msg)];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof(m), fmt, ap);
	va_end(ap);
	oai_err_set(e, 400, "invalid_request_error", "invalid_value", param, "%s", m);
	return -1;
}

static int unsupported(oai_err *e, const char *param, const char *what)
{
	oai_err_set(e, 400, "invalid_request_error", "unsupported_parameter", param,
		    "'%s' is not supported by this server: %s", param, what);
	return -1;
}

/* A present, non-null member (null counts as absent, as OpenAI does). */
static const json_value *member(const json_value *o, const char *key)
{
	const json_value *v = json_get(o, key);
	return v && v->type != JSON_NULL ? v : NULL;
}

/* 1 present (out set), 0 absent, -1 error. */
static int num_in(const json_value *o, const char *key, double lo, double hi, float *out, oai_err *e)
{
	const json_value *v = member(o, key);
	if (!v)
		return 0;
	if (v->type != JSON_NUMBER)
		return bad(e, key, "'%s' must be a number", key);
	if (!(v->num >= lo && v->num <= hi))
		return bad(e, key, "'%s' must be between %g and %g", key, lo, hi);
	*out = (float)v->num;
	return 1;
}

static int int_in(const json_value *o, const char *key, int64_t lo, int64_t hi, int64_t *out, oai_err *e)
{
	const json_value *v = member(o, key);
	if (!v)
		return 0;
	if (v->type != JSON_NUMBER || !v->is_int)
		return bad(e, key, "'%s' must be an integer", key);
	if (v->i < lo || v->i > hi)
		return bad(e, key, "'%s' must be between %lld and %lld", key, (long long)lo, (long long)hi);
	*out = v->i;
	return 1;
}

static int bool_in(const json_value *o, const char *key, int *out, oai_err *e)
{
	const json_value *v = member(o, key);
	if (!v)
		return 0;
	if (v->type != JSON_TRUE && v->type != JSON_FALSE)
		return bad(e, key, "'%s' must be a boolean", key);
	*out = v->type == JSON_TRUE;
	return 1;
}

/* Sampling parameters shared by the three generation endpoints. Defaults
 * are the OpenAI API's: temperature 1, top_p 1, no top-k, no penalties.
 * top_p 0 keeps only the most probable token (greedy, as llama.cpp does
 * and OpenAI clients expect); outside [0, 1] it is a 400 naming top_p. */
static int sampling(const json_value *o, wc_request *r, oai_err *e)
{
	r->temperature = 1.0f;
	r->top_p = 1.0f;
	r->top_k = 0;
	r->min_p = 0;
	r->repeat_penalty = 1.0f;
	r->presence_penalty = r->frequency_penalty = 0;
	int64_t i;
	if (num_in(o, "temperature", 0, 2, &r->temperature, e) < 0 || num_in(o, "top_p", 0, 1, &r->top_p, e) < 0 ||
	    num_in(o, "min_p", 0, 1, &r->min_p, e) < 0 ||
	    num_in(o, "repetition_penalty", 0.01, 10, &r->repeat_penalty, e) < 0 ||
	    num_in(o, "presence_penalty", -2, 2, &r->presence_penalty, e) < 0 ||
	    num_in(o, "frequency_penalty", -2, 2, &r->frequency_penalty, e) < 0)
		return -1;
	int k = int_in(o, "top_k", 0, 1 << 20, &i, e);
	if (k < 0)
		return -1;
	if (k)
		r->top_k = (int)i;
	k = int_in(o, "seed", INT64_MIN, INT64_MAX, &i, e);
	if (k < 0)
		return -1;
	if (k)
		r->seed = (uint64_t)i;
	const json_value *st = member(o, "stop");
	if (st) {
		if (st->type == JSON_STRING) {
			if (st->n == 0 || memchr(st->str, 0, st->n))
				return bad(e, "stop", "'stop' must be a non-empty string");
			r->stops[r->n_stops++] = st->str;
		} else if (st->type == JSON_ARRAY) {
			if (st->n > WC_MAX_STOPS)
				return bad(e, "stop", "'stop' holds at most %d strings", WC_MAX_STOPS);
			for (uint32_t j = 0; j < st->n; j++) {
				const json_value *s = &st->items[j];
				if (s->type != JSON_STRING || s->n == 0 || memchr(s->str, 0, s->n))
					return bad(e, "stop", "'stop' must be a list of non-empty strings");
				r->stops[r->n_stops++] = s->str;
			}
		} else {
			return bad(e, "stop", "'stop' must be a string or a list of strings");
		}
	}
	const json_value *n = member(o, "n");
	if (n && !(n->type == JSON_NUMBER && n->is_int && n->i == 1))
		return unsupported(e, "n", "only n = 1 (one choice per request)");
	return 0;
}

static int max_tokens(const json_value *o, const char *key, wc_request *r, oai_err *e)
{
	int64_t i;
	int k = int_in(o, key, 1, 1 << 24, &i, e);
	if (k < 0)
		return -1;
	if (k)
		r->max_tokens = (int)i;
	return 0;
}

/* Message content: a string, or an array of text parts joined by "\n"
 * (other part types are a 400 naming the part). */
static int content_text(oai_call *c, const json_value *v, const char *path, int responses, const char **text,
			size_t *len, oai_err *e)
{
	char p[96];
	if (v->type == JSON_STRING) {
		*text = v->str;
		*len = v->n;
		return 0;
	}
	if (v->type != JSON_ARRAY || v->n > OAI_MAX_PARTS)
		return bad(e, path, "'%s' must be a string or an array of text parts", path);
	size_t total = 0;
	for (uint32_t j = 0; j < v->n; j++) {
		const json_value *part = &v->items[j];
		const char *type = NULL, *t = NULL;
		snprintf(p, sizeof(p), "%s[%u]", path, j);
		if (part->type != JSON_OBJECT || json_get_str(part, "type", &type) != 0)
			return bad(e, p, "'%s' must be an object with a 'type'", p);
		int is_text = responses ? (!strcmp(type, "input_text") || !strcmp(type, "output_text"))
					: !strcmp(type, "text");
		if (!is_text) {
			if (strstr(type, "image") || strstr(type, "audio") || strstr(type, "file"))
				return unsupported(e, p, "this server handles text only (no images, audio or files)");
			return bad(e, p, "unknown content part type '%s'", type);
		}
		const json_value *tv = json_get(part, "text");
		if (!tv || tv->type != JSON_STRING)
			return bad(e, p, "'%s.text' must be a string", p);
		(void)t;
		total += tv->n + 1;
	}
	char *buf = malloc(total + 1), **nj = realloc(c->joined, (c->n_joined + 1) * sizeof(char *));
	if (!buf || !nj) {
		free(buf);
		if (nj)
			c->joined = nj;
		oai_err_set(e, 400, "invalid_request_error", NULL, path, "out of memory");
		return -1;
	}
	c->joined = nj;
	c->joined[c->n_joined++] = buf;
	size_t o = 0;
	for (uint32_t j = 0; j < v->n; j++) {
		const json_value *tv = json_get(&v->items[j], "text");
		if (j)
			buf[o++] = '\n';
		memcpy(buf + o, tv->str, tv->n);
		o += tv->n;
	}
	buf[o] = 0;
	*text = buf;
	*len = o;
	return 0;
}

static int role_of(const char *r, wc_role *out)
{
	if (!strcmp(r, "system") || !strcmp(r, "developer"))
		*out = WC_ROLE_SYSTEM;
	else if (!strcmp(r, "user"))
		*out = WC_ROLE_USER;
	else if (!strcmp(r, "assistant"))
		*out = WC_ROLE_ASSISTANT;
	else
		return -1;
	return 0;
}

static int alloc_msgs(oai_call *c, size_t n, oai_err *e)
{
	c->msgs = calloc(n ? n : 1, sizeof(wc_msg));
	if (!c->msgs) {
		oai_err_set(e, 400, "invalid_request_error", NULL, NULL, "out of memory");
		return -1;
	}
	return 0;
}

/* Thinking off: chat_template_kwargs.enable_thinking = false (vLLM,
 * llama-server), or reasoning_effort "none". */
static int thinking(const json_value *o, wc_request *r, oai_err *e)
{
	const json_value *k = member(o, "chat_template_kwargs");
	if (k) {
		int on = 1;
		if (k->type != JSON_OBJECT)
			return bad(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
		if (bool_in(k, "enable_thinking", &on, e) < 0)
			return -1;
		r->no_think = !on;
	}
	const json_value *re = member(o, "reasoning_effort");
	if (re) {
		if (re->type != JSON_STRING)
			return bad(e, "reasoning_effort", "'reasoning_effort' must be a string");
		if (!strcmp(re->str, "none"))
			r->no_think = 1;
	}
	return 0;
}

static int common_unsupported(const json_value *o, oai_err *e)
{
	const json_value *v;
	if ((v = member(o, "tools")) && !(v->type == JSON_ARRAY && v->n == 0))
		return unsupported(e, "tools", "tools and function calling are not available");
	if ((v = member(o, "tool_choice")) && !(v->type == JSON_STRING && !strcmp(v->str, "none")) &&
	    !(v->type == JSON_STRING && !strcmp(v->str, "auto") && !member(o, "tools")))
		return unsupported(e, "tool_choice", "tools and function calling are not available");
	if (member(o, "functions"))
		return unsupported(e, "functions", "tools and function calling are not available");
	if (member(o, "function_call"))
		return unsupported(e, "function_call", "tools and function calling are not available");
	if ((v = member(o, "top_logprobs")))
		return unsupported(e, "top_logprobs", "log probabilities are not available");
	if ((v = member(o, "logit_bias")) && !(v->type == JSON_OBJECT && v->n == 0))
		return unsupported(e, "logit_bias", "logit bias is not available");
	if (member(o, "audio"))
		return unsupported(e, "audio", "audio output is not available");
	if (member(o, "prediction"))
		return unsupported(e, "prediction", "predicted outputs are not available");
	if (member(o, "web_search_options"))
		return unsupported(e, "web_search_options", "built-in tools are not available");
	if ((v = member(o, "modalities"))) {
		if (v->type != JSON_ARRAY)
			return bad(e, "modalities", "'modalities' must be an array");
		for (uint32_t i = 0; i < v->n; i++)
			if (v->items[i].type != JSON_STRING || strcmp(v->items[i].str, "text"))
				return unsupported(e, "modalities", "text output only");
	}
	return 0;
}

static int stream_flags(const json_value *o, oai_call *c, oai_err *e)
{
	if (bool_in(o, "stream", &c->stream, e) < 0)
		return -1;
	const json_value *so = member(o, "stream_options");
	if (so) {
		if (so->type != JSON_OBJECT)
			return bad(e, "stream_options", "'stream_options' must be an object");
		if (!c->stream)
			return bad(e, "stream_options", "'stream_options' is only allowed with stream: true");
		if (bool_in(so, "include_usage", &c->include_usage, e) < 0)
			return -1;
	}
	return 0;
}

static int parse_chat(const json_value *o, oai_call *c, oai_err *e)
{
	const json_value *v;
	if (common_unsupported(o, e) || sampling(o, &c->req, e) || thinking(o, &c->req, e) || stream_flags(o, c, e))
		return -1;
	if (max_tokens(o, "max_tokens", &c->req, e) || max_tokens(o, "max_completion_tokens", &c->req, e))
		return -1;
	if ((v = member(o, "logprobs")) && v->type != JSON_FALSE)
		return unsupported(e, "logprobs", "log probabilities are not available");
	if ((v = member(o, "response_format"))) {
		const char *t = NULL;
		if (v->type != JSON_OBJECT || json_get_str(v, "type", &t) != 0)
			return bad(e, "response_format", "'response_format' must be an object with a 'type'");
		if (strcmp(t, "text"))
			return unsupported(e, "response_format", "structured (JSON) output is not available");
	}
	const json_value *m = json_get(o, "messages");
	if (!m || m->type != JSON_ARRAY || m->n == 0)
		return bad(e, "messages", "'messages' must be a non-empty array");
	if (m->n > OAI_MAX_MSGS)
		return bad(e, "messages", "at most %d messages", OAI_MAX_MSGS);
	if (alloc_msgs(c, m->n, e))
		return -1;
	for (uint32_t i = 0; i < m->n; i++) {
		const json_value *msg = &m->items[i];
		char p[64];
		const char *role;
		snprintf(p, sizeof(p), "messages[%u]", i);
		if (msg->type != JSON_OBJECT || json_get_str(msg, "role", &role) != 0)
			return bad(e, p, "'%s' must be an object with a string 'role'", p);
		snprintf(p, sizeof(p), "messages[%u].role", i);
		if (!strcmp(role, "tool") || !strcmp(role, "function"))
			return unsupported(e, p, "tools and function calling are not available");
		if (role_of(role, &c->msgs[i].role))
			return bad(e, p, "unknown role '%s' (system, developer, user, assistant)", role);
		if ((v = member(msg, "tool_calls")) && !(v->type == JSON_ARRAY && v->n == 0)) {
			snprintf(p, sizeof(p), "messages[%u].tool_calls", i);
			return unsupported(e, p, "tools and function calling are not available");
		}
		snprintf(p, sizeof(p), "messages[%u].content", i);
		const json_value *ct = member(msg, "content");
		if (!ct)
			return bad(e, p, "'%s' is required", p);
		if (content_text(c, ct, p, 0, &c->msgs[i].text, &c->msgs[i].len, e))
			return -1;
	}
	c->req.msgs = c->msgs;
	c->req.n_msgs = m->n;
	return 0;
}

static int parse_completion(const json_value *o, oai_call *c, oai_err *e)
{
	const json_value *v;
	if (common_unsupported(o, e) || sampling(o, &c->req, e) || stream_flags(o, c, e))
		return -1;
	c->req.max_tokens = 16; /* the legacy endpoint's documented default */
	if (max_tokens(o, "max_tokens", &c->req, e))
		return -1;
	if ((v = member(o, "logprobs")) && !(v->type == JSON_NUMBER && v->is_int && v->i == 0))
		return unsupported(e, "logprobs", "log probabilities are not available");
	if ((v = member(o, "echo")) && v->type != JSON_FALSE)
		return unsupported(e, "echo", "echoing the prompt is not available");
	if ((v = member(o, "suffix")))
		return unsupported(e, "suffix", "insertion (suffix) is not available");
	if ((v = member(o, "best_of")) && !(v->type == JSON_NUMBER && v->is_int && v->i == 1))
		return unsupported(e, "best_of", "only best_of = 1");
	const json_value *p = json_get(o, "prompt");
	if (p && p->type == JSON_ARRAY && p->n == 1 && p->items[0].type == JSON_STRING)
		p = &p->items[0];
	if (p && p->type == JSON_ARRAY && p->n > 1)
		return unsupported(e, "prompt", "one prompt per request");
	if (!p || p->type != JSON_STRING)
		return bad(e, "prompt", "'prompt' must be a string (token-id prompts are not accepted)");
	c->req.prompt = p->str;
	c->req.prompt_len = p->n;
	/* By design: the legacy endpoint is raw text, control tokens included. */
	c->req.parse_special = 1;
	return 0;
}

static int parse_responses(const json_value *o, oai_call *c, oai_err *e)
{
	const json_value *v;
	if (common_unsupported(o, e) || sampling(o, &c->req, e) || stream_flags(o, c, e))
		return -1;
	if (max_tokens(o, "max_output_tokens", &c->req, e))
		return -1;
	c->max_output = c->req.max_tokens;
	if (member(o, "previous_response_id"))
		return unsupported(e, "previous_response_id", "responses are not stored");
	if (member(o, "conversation"))
		return unsupported(e, "conversation", "conversations are not stored");
	if (member(o, "prompt"))
		return unsupported(e, "prompt", "prompt templates are not available");
	if ((v = member(o, "background")) && v->type != JSON_FALSE)
		return unsupported(e, "background", "background responses are not available");
	if ((v = member(o, "text"))) {
		const json_value *f = v->type == JSON_OBJECT ? member(v, "format") : NULL;
		const char *t = NULL;
		if (f && (f->type != JSON_OBJECT || json_get_str(f, "type", &t) != 0))
			return bad(e, "text.format", "'text.format' must be an object with a 'type'");
		if (t && strcmp(t, "text"))
			return unsupported(e, "text.format", "structured (JSON) output is not available");
	}
	if ((v = member(o, "reasoning"))) {
		const char *eff = NULL;
		if (v->type == JSON_OBJECT && json_get_str(v, "effort", &eff) == 0 && !strcmp(eff, "none"))
			c->req.no_think = 1;
	}
	if (thinking(o, &c->req, e))
		return -1;
	const char *ins = NULL;
	size_t ins_len = 0;
	if ((v = member(o, "instructions"))) {
		if (v->type != JSON_STRING)
			return bad(e, "instructions", "'instructions' must be a string");
		ins = v->str;
		ins_len = v->n;
		c->instructions = ins;
	}
	const json_value *in = json_get(o, "input");
	if (!in || (in->type != JSON_STRING && in->type != JSON_ARRAY) || (in->type == JSON_ARRAY && in->n == 0))
		return bad(e, "input", "'input' must be a string or a non-empty array of messages");
	size_t n = (in->type == JSON_STRING ? 1 : in->n) + (ins ? 1 : 0);
	if (n > OAI_MAX_MSGS)
		return bad(e, "input", "at most %d messages", OAI_MAX_MSGS);
	if (alloc_msgs(c, n, e))
		return -1;
	size_t k = 0;
	if (ins) {
		c->msgs[k].role = WC_ROLE_SYSTEM;
		c->msgs[k].text = ins;
		c->msgs[k++].len = ins_len;
	}
	if (in->type == JSON_STRING) {
		c->msgs[k].role = WC_ROLE_USER;
		c->msgs[k].text = in->str;
		c->msgs[k++].len = in->n;
	} else {
		for (uint32_t i = 0; i < in->n; i++) {
			const json_value *it = &in->items[i];
			char p[64];
			const char *role, *type = "message";
			snprintf(p, sizeof(p), "input[%u]", i);
			if (it->type != JSON_OBJECT)
				return bad(e, p, "'%s' must be an object", p);
			if (json_get_str(it, "type", &type) < 0)
				return bad(e, p, "'%s.type' must be a string", p);
			if (strcmp(type, "message"))
				return unsupported(e, p, "only message items (no tool calls, reasoning or references)");
			if (json_get_str(it, "role", &role) != 0 || role_of(role, &c->msgs[k].role))
				return bad(e, p, "'%s.role' must be system, developer, user or assistant", p);
			snprintf(p, sizeof(p), "input[%u].content", i);
			const json_value *ct = json_get(it, "content");
			if (!ct)
				return bad(e, p, "'%s' is required", p);
			if (content_text(c, ct, p, 1, &c->msgs[k].text, &c->msgs[k].len, e))
				return -1;
			k++;
		}
	}
	c->req.msgs = c->msgs;
	c->req.n_msgs = k;
	return 0;
}

static int parse_tokenize(const json_value *o, oai_call *c, oai_err *e)
{
	const json_value *t = json_get(o, "content");
	if (!t || t->type != JSON_STRING)
		return bad(e, "content", "'content' must be a string");
	c->text = t->str;
	c->text_len = t->n;
	c->parse_special = 1; /* llama-server's default */
	if (bool_in(o, "parse_special", &c->parse_special, e) < 0 || bool_in(o, "with_pieces", &c->with_pieces, e) < 0)
		return -1;
	return 0;
}

static int parse_detokenize(const json_value *o, oai_call *c, oai_err *e)
{
	const json_value *t = json_get(o, "tokens");
	if (!t || t->type != JSON_ARRAY)
		return bad(e, "tokens", "'tokens' must be an array of token ids");
	if (t->n > OAI_MAX_IDS)
		return bad(e, "tokens", "at most %u tokens", OAI_MAX_IDS);
	c->ids = malloc((t->n ? t->n : 1) * sizeof(int));
	if (!c->ids)
		return bad(e, "tokens", "out of memory");
	for (uint32_t i = 0; i < t->n; i++) {
		const json_value *x = &t->items[i];
		if (x->type != JSON_NUMBER || !x->is_int || x->i < 0 || x->i > INT32_MAX)
			return bad(e, "tokens", "'tokens[%u]' must be a non-negative integer", i);
		c->ids[i] = (int)x->i;
	}
	c->n_ids = t->n;
	return 0;
}

int oai_parse(oai_kind kind, const json_value *root, oai_call *c, oai_err *e)
{
	memset(c, 0, sizeof(*c));
	c->kind = kind;
	wc_request_defaults(&c->req);
	c->req.trim = 0; /* a prompt that does not fit is a 400, never truncated */
	if (!root || root->type != JSON_OBJECT)
		return bad(e, NULL, "the body must be a JSON object");
	switch (kind) {
	case OAI_CHAT: return parse_chat(root, c, e);
	case OAI_COMPLETION: return parse_completion(root, c, e);
	case OAI_RESPONSES: return parse_responses(root, c, e);
	case OAI_TOKENIZE: return parse_tokenize(root, c, e);
	case OAI_DETOKENIZE: return parse_detokenize(root, c, e);
	default: return bad(e, NULL, "unknown endpoint");
	}
}

void oai_call_free(oai_call *c)
{
	for (size_t i = 0; i < c->n_joined; i++)
		free(c->joined[i]);
	free(c->joined);
	free(c->msgs);
	free(c->ids);
	memset(c, 0, sizeof(*c));
}

/* broker/openai_out.c — the generation thread's side of the OpenAI API:
 * runs a validated call on the worker and writes the HTTP response
 * (JSON body, or an SSE stream in chunked encoding) through sj_write.
 *
 * Text from the worker is untrusted: every delta is re-validated as UTF-8
 * here (invalid bytes become U+FFFD, an incomplete character at the end of
 * a delta waits for the next one), so a content delta never splits a
 * character whatever the worker sends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "broker/openai.h"
#include "broker/serve_int.h"
#include "common/utf8.h"

/* Appends the complete, valid characters of h + s[0..n) to out: invalid
 * bytes become U+FFFD, an incomplete character at the end waits in h
 * (common/utf8.h). Control characters stay: the JSON writer escapes them. */
static void u8clean(utf8_hold *h, const char *s, size_t n, jw_buf *out)
{
	char *b = malloc(UTF8_CLEAN_MAX(n));
	if (!b) {
		out->oom = 1;
		return;
	}
	jw_raw(out, b, utf8_clean(h, s, n, 0, UTF8_KEEP_CONTROLS | UTF8_REPL_FFFD, b));
	free(b);
}

typedef struct {
	sjob *j;
	const oai_call *c;
	const char *model;
	char id[48], item_id[48];
	long created;
	int started;        /* stream: HTTP head and the opening events sent */
	int seq;            /* responses: sequence_number */
	double last_ka;
	jw_buf text, reasoning;
	utf8_hold ht, hr;
	int ended;
	wc_finish finish;
	size_t pt, ct;
} gen;

static void rand_hex(char *out, size_t nbytes)
{
	unsigned char r[24];
	if (nbytes > sizeof(r))
		nbytes = sizeof(r);
	if (getrandom(r, nbytes, 0) != (ssize_t)nbytes)
		memset(r, 0x5a, nbytes);
	for (size_t i = 0; i < nbytes; i++)
		sprintf(out + 2 * i, "%02x", r[i]);
}

static void send_buf(sjob *j, jw_buf *w)
{
	if (!w->oom)
		sj_write(j, w->buf, w->len);
	w->len = 0;
}

/* One chunk of the chunked body (RFC 9112 §7.1). */
static void chunk(gen *g, const jw_buf *data)
{
	if (!data->len || data->oom)
		return;
	jw_buf w = { 0 };
	jw_fmt(&w, "%zx\r\n", data->len);
	jw_raw(&w, data->buf, data->len);
	jw_cstr(&w, "\r\n");
	send_buf(g->j, &w);
	jw_free(&w);
}

static void send_json(gen *g, int status, const jw_buf *body)
{
	jw_buf w = { 0 };
	serve_head(&w, status, "application/json", (long)body->len, g->j->keep_alive, g->j->origin);
	jw_cstr(&w, "\r\n");
	jw_raw(&w, body->buf, body->len);
	send_buf(g->j, &w);
	jw_free(&w);
}

static const char *finish_str(wc_finish f)
{
	return f == WC_FINISH_LENGTH || f == WC_FINISH_CONTEXT ? "length" : "stop";
}

static void usage_obj(jw_buf *w, const gen *g)
{
	jw_fmt(w, "{\"prompt_tokens\":%zu,\"completion_tokens\":%zu,\"total_tokens\":%zu}", g->pt, g->ct,
	       g->pt + g->ct);
}

/* ---- chat.completion / text_completion ---- */

static void chunk_open(jw_buf *w, const gen *g)
{
	int chat = g->c->kind == OAI_CHAT;
	jw_cstr(w, "data: {\"id\":");
	jw_str(w, g->id, strlen(g->id));
	jw_fmt(w, ",\"object\":\"%s\",\"created\":%ld,\"model\":", chat ? "chat.completion.chunk" : "text_completion",
	       g->created);
	jw_str(w, g->model, strlen(g->model));
	jw_cstr(w, ",\"system_fingerprint\":null,\"choices\":[");
}

static void chunk_close(jw_buf *w, const gen *g)
{
	jw_cstr(w, "]");
	if (g->c->include_usage)
		jw_cstr(w, ",\"usage\":null");
	jw_cstr(w, "}\n\n");
}

/* A delta: field "content" / "reasoning_content" (chat) or "text". */
static void emit_delta(gen *g, const char *field, const char *s, size_t n, const char *finish, int role)
{
	jw_buf w = { 0 };
	chunk_open(&w, g);
	if (g->c->kind == OAI_CHAT) {
		jw_cstr(&w, "{\"index\":0,\"delta\":{");
		int comma = 0;
		if (role) {
			jw_cstr(&w, "\"role\":\"assistant\"");
			comma = 1;
		}
		if (field) {
			jw_fmt(&w, "%s\"%s\":", comma ? "," : "", field);
			jw_str(&w, s, n);
		}
		jw_cstr(&w, "},\"logprobs\":null,\"finish_reason\":");
	} else {
		jw_cstr(&w, "{\"index\":0,\"text\":");
		jw_str(&w, s, n);
		jw_cstr(&w, ",\"logprobs\":null,\"finish_reason\":");
	}
	if (finish)
		jw_fmt(&w, "\"%s\"}", finish);
	else
		jw_cstr(&w, "null}");
	chunk_close(&w, g);
	chunk(g, &w);
	jw_free(&w);
}

/* ---- responses ---- */

static void resp_event_open(jw_buf *w, gen *g, const char *type)
{
	jw_fmt(w, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%d", type, type, g->seq++);
}

static void resp_text_part(jw_buf *w, const gen *g, int with_text)
{
	jw_cstr(w, "{\"type\":\"output_text\",\"text\":");
	if (with_text)
		jw_str(w, g->text.buf ? g->text.buf : "", g->text.len);
	else
		jw_cstr(w, "\"\"");
	jw_cstr(w, ",\"annotations\":[],\"logprobs\":[]}");
}

static void resp_item(jw_buf *w, const gen *g, const char *status, int with_content)
{
	jw_cstr(w, "{\"id\":");
	jw_str(w, g->item_id, strlen(g->item_id));
	jw_fmt(w, ",\"type\":\"message\",\"status\":\"%s\",\"role\":\"assistant\",\"content\":[", status);
	if (with_content)
		resp_text_part(w, g, 1);
	jw_cstr(w, "]}");
}

/* status: in_progress, completed, incomplete, failed. */
static void resp_object(jw_buf *w, const gen *g, const char *status, const char *error)
{
	const wc_request *r = &g->c->req;
	jw_cstr(w, "{\"id\":");
	jw_str(w, g->id, strlen(g->id));
	jw_fmt(w, ",\"object\":\"response\",\"created_at\":%ld,\"status\":\"%s\",\"background\":false,\"error\":",
	       g->created, status);
	if (error) {
		jw_cstr(w, "{\"code\":\"server_error\",\"message\":");
		jw_str(w, error, strlen(error));
		jw_cstr(w, "}");
	} else {
		jw_cstr(w, "null");
	}
	jw_cstr(w, ",\"incomplete_details\":");
	jw_cstr(w, !strcmp(status, "incomplete") ? "{\"reason\":\"max_output_tokens\"}" : "null");
	jw_cstr(w, ",\"instructions\":");
	if (g->c->instructions)
		jw_str(w, g->c->instructions, strlen(g->c->instructions));
	else
		jw_cstr(w, "null");
	if (g->c->max_output)
		jw_fmt(w, ",\"max_output_tokens\":%d", g->c->max_output);
	else
		jw_cstr(w, ",\"max_output_tokens\":null");
	jw_cstr(w, ",\"metadata\":{},\"model\":");
	jw_str(w, g->model, strlen(g->model));
	jw_cstr(w, ",\"output\":[");
	if (!strcmp(status, "completed") || !strcmp(status, "incomplete"))
		resp_item(w, g, status, 1);
	jw_fmt(w, "],\"parallel_tool_calls\":false,\"previous_response_id\":null,\"store\":false,"
		  "\"temperature\":%g,\"text\":{\"format\":{\"type\":\"text\"}},\"tool_choice\":\"none\",\"tools\":[],"
		  "\"top_p\":%g,\"truncation\":\"disabled\",\"user\":null,\"usage\":",
	       (double)r->temperature, (double)r->top_p);
	if (!strcmp(status, "completed") || !strcmp(status, "incomplete"))
		jw_fmt(w, "{\"input_tokens\":%zu,\"input_tokens_details\":{\"cached_tokens\":0,\"cache_write_tokens\":0},"
			  "\"output_tokens\":%zu,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":%zu}",
		       g->pt, g->ct, g->pt + g->ct);
	else
		jw_cstr(w, "null");
	jw_cstr(w, "}");
}

static void resp_event_response(gen *g, const char *type, const char *status, const char *error)
{
	jw_buf w = { 0 };
	resp_event_open(&w, g, type);
	jw_cstr(&w, ",\"response\":");
	resp_object(&w, g, status, error);
	jw_cstr(&w, "}\n\n");
	chunk(g, &w);
	jw_free(&w);
}

static void resp_event_item(gen *g, const char *type, const char *status, int with_content)
{
	jw_buf w = { 0 };
	resp_event_open(&w, g, type);
	jw_cstr(&w, ",\"output_index\":0,\"item\":");
	resp_item(&w, g, status, with_content);
	jw_cstr(&w, "}\n\n");
	chunk(g, &w);
	jw_free(&w);
}

static void resp_event_part(gen *g, const char *type, int with_text)
{
	jw_buf w = { 0 };
	resp_event_open(&w, g, type);
	jw_cstr(&w, ",\"item_id\":");
	jw_str(&w, g->item_id, strlen(g->item_id));
	jw_cstr(&w, ",\"output_index\":0,\"content_index\":0,\"part\":");
	resp_text_part(&w, g, with_text);
	jw_cstr(&w, "}\n\n");
	chunk(g, &w);
	jw_free(&w);
}

static void resp_event_text(gen *g, const char *type, const char *field, const char *s, size_t n)
{
	jw_buf w = { 0 };
	resp_event_open(&w, g, type);
	jw_cstr(&w, ",\"item_id\":");
	jw_str(&w, g->item_id, strlen(g->item_id));
	jw_fmt(&w, ",\"output_index\":0,\"content_index\":0,\"%s\":", field);
	jw_str(&w, s, n);
	jw_cstr(&w, ",\"logprobs\":[]}\n\n");
	chunk(g, &w);
	jw_free(&w);
}

/* ---- stream lifecycle ---- */

static void stream_start(gen *g)
{
	if (g->started)
		return;
	g->started = 1;
	jw_buf w = { 0 };
	serve_head(&w, 200, "text/event-stream", -1, g->j->keep_alive, g->j->origin);
	jw_cstr(&w, "\r\n");
	send_buf(g->j, &w);
	jw_free(&w);
	sj_note(g->j, 200, 0, 0);
	if (g->c->kind == OAI_CHAT) {
		emit_delta(g, "content", "", 0, NULL, 1);
	} else if (g->c->kind == OAI_RESPONSES) {
		resp_event_response(g, "response.created", "in_progress", NULL);
		resp_event_response(g, "response.in_progress", "in_progress", NULL);
		resp_event_item(g, "response.output_item.added", "in_progress", 0);
		resp_event_part(g, "response.content_part.added", 0);
	}
}

static void stream_end(gen *g)
{
	static const char end[] = "0\r\n\r\n";
	sj_write(g->j, end, sizeof(end) - 1);
}

static void stream_error(gen *g, const oai_err *e)
{
	jw_buf w = { 0 };
	if (g->c->kind == OAI_RESPONSES) {
		resp_event_response(g, "response.failed", "failed", e->msg);
	} else {
		jw_cstr(&w, "data: ");
		oai_error_body(&w, e);
		jw_cstr(&w, "\n\n");
		chunk(g, &w);
	}
	jw_free(&w);
	stream_end(g);
}

/* Streams acc[before..] (already clean UTF-8) as one delta. */
static void emit_clean(gen *g, int reasoning, size_t before)
{
	jw_buf *acc = reasoning ? &g->reasoning : &g->text;
	size_t n = acc->len - before;
	if (!g->c->stream || n == 0)
		return;
	stream_start(g);
	const char *s = acc->buf + before;
	if (g->c->kind == OAI_RESPONSES) {
		if (!reasoning) /* reasoning is not streamed on /v1/responses */
			resp_event_text(g, "response.output_text.delta", "delta", s, n);
	} else if (g->c->kind == OAI_CHAT) {
		emit_delta(g, reasoning ? "reasoning_content" : "content", s, n, NULL, 0);
	} else if (!reasoning) {
		emit_delta(g, "text", s, n, NULL, 0);
	}
}

static int on_event(void *arg, const wc_event *ev)
{
	gen *g = arg;
	if (sj_stop(g->j))
		return 1;
	if (ev->type == WC_EV_END) {
		g->ended = 1;
		g->finish = ev->finish < WC_FINISH_COUNT ? ev->finish : WC_FINISH_STOP;
		g->pt = ev->prompt_tokens;
		g->ct = ev->completion_tokens;
		return 0;
	}
	if (ev->type == WC_EV_PROGRESS) {
		/* A long prefill: SSE comments keep proxies and clients from
		 * timing out (one a second at most). */
		double now = serve_now();
		if (g->c->stream && now - g->last_ka >= 1.0) {
			stream_start(g);
			jw_buf w = { 0 };
			jw_fmt(&w, ": prefill %zu/%zu\n\n", ev->prefilled, ev->prompt_tokens);
			chunk(g, &w);
			jw_free(&w);
			g->last_ka = now;
		}
		return 0;
	}
	if (ev->type != WC_EV_TEXT && ev->type != WC_EV_REASONING)
		return 0;
	int reasoning = ev->type == WC_EV_REASONING;
	jw_buf *acc = reasoning ? &g->reasoning : &g->text;
	size_t before = acc->len;
	u8clean(reasoning ? &g->hr : &g->ht, ev->text, ev->len, acc);
	if (acc->oom)
		return 1;
	emit_clean(g, reasoning, before);
	return 0;
}

static void finish_ok(gen *g)
{
	jw_buf w = { 0 };
	const char *fin = finish_str(g->finish);
	if (g->c->stream) {
		stream_start(g);
		if (g->c->kind == OAI_RESPONSES) {
			const char *st = !strcmp(fin, "length") ? "incomplete" : "completed";
			resp_event_text(g, "response.output_text.done", "text", g->text.buf ? g->text.buf : "", g->text.len);
			resp_event_part(g, "response.content_part.done", 1);
			resp_event_item(g, "response.output_item.done", st, 1);
			resp_event_response(g, !strcmp(st, "completed") ? "response.completed" : "response.incomplete", st,
					    NULL);
		} else {
			if (g->c->kind == OAI_CHAT)
				emit_delta(g, NULL, NULL, 0, fin, 0);
			else
				emit_delta(g, "text", "", 0, fin, 0);
			if (g->c->include_usage) {
				w.len = 0;
				chunk_open(&w, g);
				jw_cstr(&w, "],\"usage\":");
				usage_obj(&w, g);
				jw_cstr(&w, "}\n\n");
				chunk(g, &w);
				w.len = 0;
			}
			jw_cstr(&w, "data: [DONE]\n\n");
			chunk(g, &w);
		}
		stream_end(g);
		jw_free(&w);
		return;
	}
	const char *text = g->text.buf ? g->text.buf : "";
	if (g->c->kind == OAI_RESPONSES) {
		resp_object(&w, g, !strcmp(fin, "length") ? "incomplete" : "completed", NULL);
	} else if (g->c->kind == OAI_CHAT) {
		jw_cstr(&w, "{\"id\":");
		jw_str(&w, g->id, strlen(g->id));
		jw_fmt(&w, ",\"object\":\"chat.completion\",\"created\":%ld,\"model\":", g->created);
		jw_str(&w, g->model, strlen(g->model));
		jw_cstr(&w, ",\"system_fingerprint\":null,\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
			    "\"content\":");
		jw_str(&w, text, g->text.len);
		if (g->reasoning.len) {
			jw_cstr(&w, ",\"reasoning_content\":");
			jw_str(&w, g->reasoning.buf, g->reasoning.len);
		}
		jw_fmt(&w, ",\"refusal\":null},\"logprobs\":null,\"finish_reason\":\"%s\"}],\"usage\":", fin);
		usage_obj(&w, g);
		jw_cstr(&w, "}");
	} else {
		jw_cstr(&w, "{\"id\":");
		jw_str(&w, g->id, strlen(g->id));
		jw_fmt(&w, ",\"object\":\"text_completion\",\"created\":%ld,\"model\":", g->created);
		jw_str(&w, g->model, strlen(g->model));
		jw_cstr(&w, ",\"system_fingerprint\":null,\"choices\":[{\"index\":0,\"text\":");
		jw_str(&w, text, g->text.len);
		jw_fmt(&w, ",\"logprobs\":null,\"finish_reason\":\"%s\"}],\"usage\":", fin);
		usage_obj(&w, g);
		jw_cstr(&w, "}");
	}
	send_json(g, 200, &w);
	jw_free(&w);
}

static void fail(gen *g, const oai_err *e)
{
	if (g->started) {
		stream_error(g, e);
		return;
	}
	jw_buf w = { 0 };
	oai_error_body(&w, e);
	send_json(g, e->status, &w);
	jw_free(&w);
	sj_note(g->j, e->status, g->pt, g->ct);
}

static void run_generate(wclient *w, gen *g)
{
	wc_error we;
	int rc = wclient_generate(w, &g->c->req, on_event, g, &we);
	/* An incomplete character left at the end is U+FFFD. */
	for (int r = 0; r < 2 && !rc; r++) {
		utf8_hold *h = r ? &g->hr : &g->ht;
		jw_buf *acc = r ? &g->reasoning : &g->text;
		if (!h->n)
			continue;
		h->n = 0;
		size_t before = acc->len;
		jw_raw(acc, "\xef\xbf\xbd", 3);
		if (!sj_stop(g->j))
			emit_clean(g, r, before);
	}
	oai_err e;
	if (rc) {
		if (we.kind == WC_ERR_CONTEXT) {
			oai_err_set(&e, 400, "exceed_context_size_error", "context_length_exceeded", "messages",
				    "the request needs %zu prompt tokens but the context holds %d tokens", we.prompt_tokens,
				    we.ctx);
			e.has_ctx = 1;
			e.n_prompt = we.prompt_tokens;
			e.n_ctx = we.ctx;
			if (g->c->kind == OAI_COMPLETION)
				snprintf(e.param, sizeof(e.param), "prompt");
			else if (g->c->kind == OAI_RESPONSES)
				snprintf(e.param, sizeof(e.param), "input");
		} else if (we.kind == WC_ERR_INVALID) {
			oai_err_set(&e, 400, "invalid_request_error", "invalid_value", NULL, "%s", we.msg);
		} else {
			oai_err_set(&e, 500, "server_error", NULL, NULL, "the model worker failed: %s", we.msg);
		}
		fail(g, &e);
		return;
	}
	if (!g->ended || g->finish == WC_FINISH_CANCELLED) {
		/* Client gone (nothing to write) or deadline passed. */
		if (g->started) {
			oai_err_set(&e, 408, "timeout_error", "timeout", NULL,
				    "the request did not finish within the server's deadline");
			stream_error(g, &e);
		}
		sj_note(g->j, g->started ? 200 : 0, g->pt, g->ct);
		return;
	}
	finish_ok(g);
	sj_note(g->j, 200, g->pt, g->ct);
}

static void run_tokenize(wclient *w, gen *g)
{
	const oai_call *c = g->c;
	wc_error we;
	oai_err e;
	jw_buf b = { 0 };
	if (c->kind == OAI_TOKENIZE) {
		int *ids = NULL;
		size_t n = 0;
		if (wclient_tokenize(w, c->text, c->text_len, c->parse_special, &ids, &n, &we)) {
			oai_err_set(&e, 400, "invalid_request_error", "invalid_value", "content", "%s", we.msg);
			fail(g, &e);
			return;
		}
		jw_cstr(&b, "{\"tokens\":[");
		for (size_t i = 0; i < n; i++) {
			if (i)
				jw_cstr(&b, ",");
			if (!c->with_pieces) {
				jw_fmt(&b, "%d", ids[i]);
				continue;
			}
			char *piece = NULL;
			size_t plen = 0;
			jw_fmt(&b, "{\"id\":%d,\"piece\":", ids[i]);
			if (wclient_detokenize(w, &ids[i], 1, &piece, &plen, &we) == 0) {
				jw_buf t = { 0 };
				utf8_hold h = { { 0 }, 0 };
				u8clean(&h, piece, plen, &t);
				if (!h.n && t.len == plen) {
					jw_str(&b, piece, plen);
				} else { /* not valid UTF-8 alone: bytes, as llama-server does */
					jw_cstr(&b, "[");
					for (size_t k = 0; k < plen; k++)
						jw_fmt(&b, "%s%u", k ? "," : "", (unsigned char)piece[k]);
					jw_cstr(&b, "]");
				}
				jw_free(&t);
			} else {
				jw_cstr(&b, "\"\"");
			}
			free(piece);
			jw_cstr(&b, "}");
		}
		jw_cstr(&b, "]}");
		sj_note(g->j, 200, n, 0);
		free(ids);
	} else {
		char *out = NULL;
		size_t n = 0;
		if (wclient_detokenize(w, c->ids, c->n_ids, &out, &n, &we)) {
			oai_err_set(&e, 400, "invalid_request_error", "invalid_value", "tokens", "%s", we.msg);
			fail(g, &e);
			return;
		}
		jw_buf t = { 0 };
		utf8_hold h = { { 0 }, 0 };
		u8clean(&h, out, n, &t);
		if (h.n)
			jw_raw(&t, "\xef\xbf\xbd", 3);
		jw_cstr(&b, "{\"content\":");
		jw_str(&b, t.buf ? t.buf : "", t.len);
		jw_cstr(&b, "}");
		jw_free(&t);
		free(out);
		sj_note(g->j, 200, c->n_ids, 0);
	}
	if (b.oom) {
		oai_err_set(&e, 500, "server_error", NULL, NULL, "out of memory");
		fail(g, &e);
	} else {
		send_json(g, 200, &b);
	}
	jw_free(&b);
}

void oai_run(wclient *w, const char *model_id, struct sjob *j)
{
	gen g;
	memset(&g, 0, sizeof(g));
	g.j = j;
	g.c = &j->call;
	g.model = model_id;
	g.created = (long)time(NULL);
	static const char *const prefix[OAI_KIND_COUNT] = { "chatcmpl-", "cmpl-", "resp_", "", "" };
	size_t pl = strlen(prefix[g.c->kind]);
	memcpy(g.id, prefix[g.c->kind], pl);
	rand_hex(g.id + pl, 12);
	memcpy(g.item_id, "msg_", 4);
	rand_hex(g.item_id + 4, 12);
	if (g.c->kind == OAI_TOKENIZE || g.c->kind == OAI_DETOKENIZE)
		run_tokenize(w, &g);
	else
		run_generate(w, &g);
	jw_free(&g.text);
	jw_free(&g.reasoning);
}

int oai_models_body(jw_buf *w, const char *model_id, const wclient_info *info, const char *id)
{
	static long created;
	if (!created)
		created = (long)time(NULL);
	if (id && strcmp(id, model_id))
		return -1;
	if (!id)
		jw_cstr(w, "{\"object\":\"list\",\"data\":[");
	jw_cstr(w, "{\"id\":");
	jw_str(w, model_id, strlen(model_id));
	jw_fmt(w, ",\"object\":\"model\",\"created\":%ld,\"owned_by\":\"mlxr\",\"context_length\":%d,"
		  "\"meta\":{\"n_ctx\":%d,\"n_ctx_train\":%d,\"n_vocab\":%d,\"model_type\":",
	       created, info->ctx, info->ctx, info->max_pos, info->vocab);
	jw_str(w, info->model_type, strnlen(info->model_type, sizeof(info->model_type)));
	jw_cstr(w, ",\"chat_format\":");
	jw_str(w, info->chat_format, strnlen(info->chat_format, sizeof(info->chat_format)));
	jw_cstr(w, "}}");
	if (!id)
		jw_cstr(w, "]}");
	return 0;
}

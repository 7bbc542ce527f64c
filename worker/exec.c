/* worker/exec.c — see exec.h. */
#include "worker/exec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Splits the answer stream into reasoning and text for Qwen3: text between
 * a leading "<think>" and "</think>" is reasoning; the blank lines after
 * "</think>" are dropped. Tags split across deltas are held back until
 * they can be decided. */
typedef struct {
	wc_event_fn fn;
	void *arg;
	int (*check)(void *arg);
	int think;      /* 1: the format can think */
	int state;      /* 0 start, 1 in reasoning, 2 after reasoning (skip ws), 3 text */
	char hold[16];
	size_t nhold;
	int stop;
} splitter;

static int send_text(splitter *sp, wc_event_type t, const char *s, size_t n)
{
	if (!n || sp->stop)
		return sp->stop;
	wc_event ev = { 0 };
	ev.type = t;
	ev.text = s;
	ev.len = n;
	sp->stop = sp->fn(sp->arg, &ev) != 0;
	return sp->stop;
}

/* Is `s[0..n)` a proper prefix of tag? */
static int prefix_of(const char *s, size_t n, const char *tag)
{
	size_t tl = strlen(tag);
	return n < tl && memcmp(s, tag, n) == 0;
}

static int split_feed(void *arg, const char *t, size_t n)
{
	splitter *sp = arg;
	if (!sp->think || sp->state == 3)
		return send_text(sp, WC_EV_TEXT, t, n);
	/* Work on hold + t. */
	char *buf = malloc(sp->nhold + n + 1);
	if (!buf)
		return 1;
	memcpy(buf, sp->hold, sp->nhold);
	memcpy(buf + sp->nhold, t, n);
	size_t len = sp->nhold + n, i = 0;
	sp->nhold = 0;
	while (i < len && !sp->stop) {
		const char *b = buf + i;
		size_t rest = len - i;
		if (sp->state == 0) {
			size_t ws = 0;
			while (ws < rest && (b[ws] == '\n' || b[ws] == ' '))
				ws++;
			if (rest - ws >= 7 && !memcmp(b + ws, "<think>", 7)) {
				sp->state = 1;
				i += ws + 7;
			} else if (prefix_of(b + ws, rest - ws, "<think>") && rest <= sizeof(sp->hold)) {
				break; /* undecided: hold */
			} else {
				sp->state = 3;
			}
		} else if (sp->state == 1) {
			char *end = memmem(b, rest, "</think>", 8);
			if (end) {
				send_text(sp, WC_EV_REASONING, b, (size_t)(end - b));
				i += (size_t)(end - b) + 8;
				sp->state = 2;
				continue;
			}
			/* Emit all but a possible partial "</think>" at the end. */
			size_t keep = 0;
			for (size_t k = rest < 7 ? rest : 7; k > 0; k--)
				if (!memcmp(b + rest - k, "</think>", k)) {
					keep = k;
					break;
				}
			send_text(sp, WC_EV_REASONING, b, rest - keep);
			i += rest - keep;
			break;
		} else if (sp->state == 2) {
			while (i < len && (buf[i] == '\n' || buf[i] == ' '))
				i++;
			if (i < len)
				sp->state = 3;
		} else {
			send_text(sp, WC_EV_TEXT, b, rest);
			i = len;
		}
	}
	if (i < len && !sp->stop) {
		size_t r = len - i;
		if (r > sizeof(sp->hold))
			r = sizeof(sp->hold);
		memcpy(sp->hold, buf + len - r, r);
		sp->nhold = r;
	}
	free(buf);
	return sp->stop;
}

static int split_check(void *arg)
{
	splitter *sp = arg;
	if (!sp->stop && sp->check)
		sp->stop = sp->check(sp->arg) != 0;
	return sp->stop;
}

static int on_progress(void *arg, size_t done, size_t total)
{
	splitter *sp = arg;
	wc_event ev = { 0 };
	ev.type = WC_EV_PROGRESS;
	ev.prompt_tokens = total;
	ev.prefilled = done;
	sp->stop = sp->stop || sp->fn(sp->arg, &ev) != 0;
	return sp->stop;
}

static chat_role role_of(wc_role r)
{
	return r == WC_ROLE_SYSTEM ? CHAT_ROLE_SYSTEM : r == WC_ROLE_ASSISTANT ? CHAT_ROLE_ASSISTANT : CHAT_ROLE_USER;
}

/* Renders and tokenizes; with trim, drops the oldest turns after the
 * system prompt until the prompt leaves room for the answer. */
static int build_ids(session *s, const wc_request *r, int **ids, size_t *n, wc_error *e)
{
	int reserve = r->max_tokens > 0 ? r->max_tokens : 256;
	if (reserve > s->st.ctx / 4)
		reserve = s->st.ctx / 4;
	if (!r->msgs) {
		int er;
		if (r->parse_special) {
			er = session_encode_raw(s, r->prompt, r->prompt_len, 1, ids, n, e->msg, sizeof(e->msg));
		} else {
			er = session_encode_plain(s, r->prompt, r->prompt_len, ids, n, e->msg, sizeof(e->msg));
		}
		if (er) {
			e->kind = WC_ERR_INVALID;
			return -1;
		}
	} else {
		chat_msg *m = malloc(sizeof(chat_msg) * (r->n_msgs + 1));
		if (!m) {
			snprintf(e->msg, sizeof(e->msg), "out of memory");
			return -1;
		}
		size_t nm = r->n_msgs;
		for (size_t i = 0; i < nm; i++) {
			m[i].role = role_of(r->msgs[i].role);
			m[i].text = r->msgs[i].text;
			m[i].len = r->msgs[i].len;
		}
		chat_opts co;
		chat_opts_default(&co);
		co.enable_thinking = !r->no_think;
		if (r->continue_final) {
			co.continue_final = 1;
			co.add_generation_prompt = 0;
		}
		for (;;) {
			if (session_encode_chat(s, m, nm, &co, ids, n, e->msg, sizeof(e->msg))) {
				e->kind = WC_ERR_INVALID;
				free(m);
				return -1;
			}
			if (!r->trim || *n + (size_t)reserve <= (size_t)s->st.ctx)
				break;
			size_t first = nm && m[0].role == CHAT_ROLE_SYSTEM ? 1 : 0;
			if (nm - first <= 1)
				break;
			free(*ids);
			/* Drop one turn: a message and the answer after it. */
			size_t drop = nm - first > 2 && m[first + 1].role == CHAT_ROLE_ASSISTANT ? 2 : 1;
			memmove(&m[first], &m[first + drop], (nm - first - drop) * sizeof(*m));
			nm -= drop;
		}
		free(m);
	}
	if (*n >= (size_t)s->st.ctx) {
		e->kind = WC_ERR_CONTEXT;
		e->prompt_tokens = *n;
		e->ctx = s->st.ctx;
		snprintf(e->msg, sizeof(e->msg), "context full: the prompt is %zu tokens and the context holds %d", *n,
			 s->st.ctx);
		free(*ids);
		return -1;
	}
	return 0;
}

int exec_generate(session *s, const wc_request *r, wc_event_fn fn, int (*check)(void *arg), void *arg, wc_error *e)
{
	int *ids;
	size_t n;
	memset(e, 0, sizeof(*e));
	if (build_ids(s, r, &ids, &n, e))
		return -1;
	gen_params p;
	memset(&p, 0, sizeof(p));
	p.sp.temperature = r->temperature;
	p.sp.top_k = r->top_k;
	p.sp.top_p = r->top_p;
	p.sp.min_p = r->min_p;
	p.sp.repeat_penalty = r->repeat_penalty;
	p.sp.repeat_last_n = r->repeat_last_n;
	p.sp.presence_penalty = r->presence_penalty;
	p.sp.frequency_penalty = r->frequency_penalty;
	p.sp.seed = r->seed;
	p.max_tokens = r->max_tokens;
	p.n_stops = r->n_stops < SESSION_MAX_STOPS ? r->n_stops : SESSION_MAX_STOPS;
	for (int i = 0; i < p.n_stops; i++)
		p.stops[i] = r->stops[i];
	splitter sp = { fn, arg, check, r->msgs && s->chat.format == CHAT_FMT_QWEN3, 0, { 0 }, 0, 0 };
	p.progress = on_progress;
	p.check = split_check;
	gen_stats st;
	int rc = session_generate(s, ids, n, &p, split_feed, &sp, &st, e->msg, sizeof(e->msg));
	free(ids);
	if (rc) {
		e->kind = WC_ERR_INVALID;
		return -1;
	}
	if (sp.nhold && !sp.stop) /* an undecided tail: it was text after all */
		send_text(&sp, sp.state == 1 ? WC_EV_REASONING : WC_EV_TEXT, sp.hold, sp.nhold);
	wc_event ev = { 0 };
	ev.type = WC_EV_END;
	static const wc_finish fin[] = { WC_FINISH_STOP, WC_FINISH_STOP, WC_FINISH_LENGTH, WC_FINISH_CONTEXT,
					 WC_FINISH_CANCELLED };
	ev.finish = st.stop_reason >= 0 && st.stop_reason < 5 ? fin[st.stop_reason] : WC_FINISH_STOP;
	if (sp.stop)
		ev.finish = WC_FINISH_CANCELLED;
	ev.prompt_tokens = st.prompt_tokens;
	ev.prefilled = st.prefilled;
	ev.completion_tokens = st.generated;
	ev.prefill_s = st.prefill_s;
	ev.decode_s = st.decode_s;
	ev.ttft_s = st.ttft_s;
	fn(arg, &ev);
	return 0;
}

int exec_chat_ids(session *s, const wc_request *r, int **ids, size_t *n, wc_error *e)
{
	memset(e, 0, sizeof(*e));
	return build_ids(s, r, ids, n, e);
}

static int check_ids(session *s, const int *ids, size_t n, size_t extra, wc_error *e)
{
	memset(e, 0, sizeof(*e));
	if (n == 0 || n + extra >= (size_t)s->st.ctx) {
		e->kind = n ? WC_ERR_CONTEXT : WC_ERR_INVALID;
		e->prompt_tokens = n;
		e->ctx = s->st.ctx;
		snprintf(e->msg, sizeof(e->msg), "%zu ids (+%zu generated) do not fit the context of %d", n, extra, s->st.ctx);
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= s->m.cfg.vocab) {
			e->kind = WC_ERR_INVALID;
			snprintf(e->msg, sizeof(e->msg), "id %d is outside the vocabulary (%d)", ids[i], s->m.cfg.vocab);
			return -1;
		}
	return 0;
}

int exec_logits(session *s, const int *ids, size_t n, int decode, float *logits, wc_error *e)
{
	if (check_ids(s, ids, n, 0, e))
		return -1;
	size_t V = (size_t)s->m.cfg.vocab, batch = decode ? 1 : (size_t)s->st.max_batch;
	s->st.pos = 0;
	for (size_t done = 0; done < n;) {
		size_t step = n - done < batch ? n - done : batch;
		if (session_forward(s, ids + done, (int)step, 1)) {
			snprintf(e->msg, sizeof(e->msg), "forward pass failed");
			e->kind = WC_ERR_INVALID;
			s->st.pos = 0;
			return -1;
		}
		memcpy(logits + done * V, s->st.logits, sizeof(float) * V * step);
		done += step;
	}
	s->st.pos = 0; /* the cache no longer matches a conversation */
	return 0;
}

int exec_greedy(session *s, const int *ids, size_t n, int gen, int *out, wc_error *e)
{
	if (gen < 1 || check_ids(s, ids, n, (size_t)gen, e))
		return -1;
	s->st.pos = 0;
	for (size_t done = 0; done < n;) {
		size_t step = n - done < (size_t)s->prefill_batch ? n - done : (size_t)s->prefill_batch;
		if (session_forward(s, ids + done, (int)step, 0))
			goto fail;
		done += step;
	}
	for (int g = 0; g < gen; g++) {
		out[g] = sampler_argmax(s->st.logits, s->m.cfg.vocab);
		if (g + 1 < gen && session_forward(s, &out[g], 1, 0))
			goto fail;
	}
	s->st.pos = 0;
	return 0;
fail:
	s->st.pos = 0;
	e->kind = WC_ERR_INVALID;
	snprintf(e->msg, sizeof(e->msg), "forward pass failed");
	return -1;
}

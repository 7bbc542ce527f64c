/* broker/wclient.c — the broker's handle on a model-running worker (see
 * wclient.h). TRANSITIONAL: this version runs the session in-process; the
 * IPC transport to the sandboxed mlxr-worker replaces it behind the same
 * interface. */
#include "broker/wclient.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "worker/exec.h"
#include "worker/session.h"

struct wclient {
	session s;
	wclient_info info;
};

void wc_request_defaults(wc_request *r)
{
	memset(r, 0, sizeof(*r));
	/* Ollama's defaults, so `mlxr run` behaves as its users expect. */
	r->temperature = 0.8f;
	r->top_k = 40;
	r->top_p = 0.9f;
	r->repeat_penalty = 1.1f;
	r->repeat_last_n = 64;
	if (getrandom(&r->seed, sizeof(r->seed), 0) != sizeof(r->seed))
		r->seed = 0x5eed;
}

int wclient_start(wclient **out, const char *dir, const wclient_opts *o, wc_error *e)
{
	memset(e, 0, sizeof(*e));
	wclient *c = calloc(1, sizeof(*c));
	if (!c) {
		e->kind = WC_ERR_MODEL;
		snprintf(e->msg, sizeof(e->msg), "out of memory");
		return -1;
	}
	double t0 = session_now();
	if (session_open(&c->s, dir, o ? o->ctx : 0, e->msg, sizeof(e->msg))) {
		e->kind = WC_ERR_MODEL;
		free(c);
		return -1;
	}
	const model_config *mc = &c->s.m.cfg;
	wclient_info *i = &c->info;
	snprintf(i->model_type, sizeof(i->model_type), "%s", mc->model_type);
	snprintf(i->chat_format, sizeof(i->chat_format), "%s", chat_format_name(c->s.chat.format));
	i->chat_ok = c->s.chat_ok;
	snprintf(i->chat_note, sizeof(i->chat_note), "%s", c->s.chat_note);
	i->vocab = mc->vocab;
	i->ctx = c->s.st.ctx;
	i->max_pos = mc->max_pos;
	i->n_layers = mc->n_layers;
	i->hidden = mc->hidden;
	i->n_heads = mc->n_heads;
	i->n_kv_heads = mc->n_kv_heads;
	i->weight_bytes = c->s.m.weight_bytes;
	i->decode_bytes = c->s.m.decode_bytes;
	i->load_s = session_now() - t0;
	*out = c;
	return 0;
}

const wclient_info *wclient_info_get(const wclient *c)
{
	return &c->info;
}

int wclient_generate(wclient *c, const wc_request *r, wc_event_fn fn, void *arg, wc_error *e)
{
	return exec_generate(&c->s, r, fn, arg, e);
}

int wclient_tokenize(wclient *c, const char *text, size_t len, int special, int **ids, size_t *n, wc_error *e)
{
	memset(e, 0, sizeof(*e));
	unsigned char *mask = NULL;
	if (special) {
		mask = malloc(len ? len : 1);
		if (!mask) {
			snprintf(e->msg, sizeof(e->msg), "out of memory");
			e->kind = WC_ERR_INVALID;
			return -1;
		}
		memset(mask, 1, len);
	}
	int r = tok_encode(c->s.tok, text, len, mask, ids, n, e->msg, sizeof(e->msg));
	free(mask);
	if (r)
		e->kind = WC_ERR_INVALID;
	return r;
}

int wclient_detokenize(wclient *c, const int *ids, size_t n, char **out, size_t *len, wc_error *e)
{
	memset(e, 0, sizeof(*e));
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= tok_vocab_size(c->s.tok)) {
			e->kind = WC_ERR_INVALID;
			snprintf(e->msg, sizeof(e->msg), "token id %d is outside the vocabulary", ids[i]);
			return -1;
		}
	if (tok_decode(c->s.tok, ids, n, 0, out, len)) {
		e->kind = WC_ERR_INVALID;
		snprintf(e->msg, sizeof(e->msg), "out of memory");
		return -1;
	}
	return 0;
}

int wclient_bench(wclient *c, const wc_bench_req *r, wc_bench_res *out, wc_error *e)
{
	return exec_bench(&c->s, r, out, e);
}

int wclient_logits(wclient *c, const int *ids, size_t n, int decode, float **logits, wc_error *e)
{
	*logits = malloc(sizeof(float) * n * (size_t)c->info.vocab + 1);
	if (!*logits) {
		memset(e, 0, sizeof(*e));
		e->kind = WC_ERR_INVALID;
		snprintf(e->msg, sizeof(e->msg), "out of memory");
		return -1;
	}
	if (exec_logits(&c->s, ids, n, decode, *logits, e)) {
		free(*logits);
		*logits = NULL;
		return -1;
	}
	return 0;
}

int wclient_greedy(wclient *c, const int *ids, size_t n, int gen, int **out, wc_error *e)
{
	*out = malloc(sizeof(int) * (size_t)(gen > 0 ? gen : 1));
	if (!*out || exec_greedy(&c->s, ids, n, gen, *out, e)) {
		free(*out);
		*out = NULL;
		return -1;
	}
	return 0;
}

int wclient_chat_ids(wclient *c, const wc_request *r, int **ids, size_t *n, wc_error *e)
{
	return exec_chat_ids(&c->s, r, ids, n, e);
}

void wclient_stop(wclient *c)
{
	if (!c)
		return;
	session_close(&c->s);
	free(c);
}

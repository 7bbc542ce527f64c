/* worker/session_cuda.c — the session's GPU backend (session_gpu of
 * session.h) over worker/forward_cuda.c. Only mlxr-worker built with nvcc
 * references it (worker_main.c, MLXR_CUDA), so no other binary links the
 * CUDA runtime.
 *
 * Everything the device needs is made in open(): the weights, the KV cache
 * and scratch, the pinned token slots, and one warm-up pass through every
 * path (batched prefill, single-token forward, the captured greedy step,
 * the device sampler and the captured forward of its token),
 * so that no module load, graph instantiation or allocation is left for
 * after the worker's seccomp filter (applied once LOAD is answered) — the
 * bench's bandwidth buffer is the one allocation made later. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/forward_cuda.h"
#include "worker/session.h"
#include "worker/session_cuda.h"

typedef struct {
	gpu_model g;
	gpu_state st;
	ks_sampler ks;      /* token selection on the device (sampled steps) */
	kc_graph *tok_step; /* forward of the sampler's token (gpu_token_queue) */
} cu_handle;

/* The capture's pick: the device sampler on the step's logits. */
static int cu_pick(void *arg)
{
	cu_handle *h = arg;
	return ks_sample_queue(&h->ks, h->st.logits, h->st.d_pos, h->st.d_hist, h->st.d_next, 0);
}

static void cu_close(session *s)
{
	cu_handle *h = s->gh;
	if (!h)
		return;
	kc_graph_free(h->tok_step);
	ks_free(&h->ks);
	gpu_state_free(&h->st);
	gpu_model_free(&h->g);
	free(h);
	s->gh = NULL;
}

static int cu_open(session *s, int ctx, char *err, size_t errlen)
{
	const model_config *c = &s->m.cfg;
	char name[80] = "?";
	size_t mem = 0;
	if (kc_device_info(name, sizeof(name), &mem)) {
		snprintf(err, errlen, "cuda: %s", kc_error());
		return -1;
	}
	uint64_t kv = 2ull * (uint64_t)c->n_layers * (uint64_t)ctx * (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim * 4;
	if (mem && s->m.weight_bytes + kv > (uint64_t)mem) {
		snprintf(err, errlen, "model needs %.2f GiB of GPU memory (weights %.2f GiB + KV cache %.2f GiB at --ctx %d) "
			 "but %s has %.2f GiB; try a smaller --ctx or --device cpu",
			 (s->m.weight_bytes + kv) / 1073741824.0, s->m.weight_bytes / 1073741824.0, kv / 1073741824.0, ctx,
			 name, mem / 1073741824.0);
		return -1;
	}
	cu_handle *h = calloc(1, sizeof(*h));
	if (!h) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (gpu_model_upload(&h->g, &s->m, err, errlen)) {
		free(h);
		return -1;
	}
	if (gpu_state_init(&h->st, &h->g, ctx, s->prefill_batch, s->st.max_batch)) {
		snprintf(err, errlen, "cuda: the %d-token cache and scratch: %s", ctx, kc_error());
		gpu_model_free(&h->g);
		free(h);
		return -1;
	}
	s->gh = h;
	if (ks_init(&h->ks, c->vocab)) {
		snprintf(err, errlen, "cuda: the device sampler: %s", ks_error());
		cu_close(s);
		return -1;
	}
	/* Warm-up: batched prefill, single-token forward, greedy capture, a
	 * top-k draw with penalties and the capture of its token's forward. */
	int ids[4] = { 0, 1 % c->vocab, 2 % c->vocab, 3 % c->vocab }, t;
	ks_params kp = { .mode = c->vocab > 1 ? KS_TOPK : KS_GREEDY, .top_k = c->vocab > 40 ? 40 : c->vocab - 1,
			 .temperature = 1.0f, .top_p = 0.9f, .penalize = 1, .repeat_last_n = 4,
			 .repeat_penalty = 1.1f };
	if (ctx >= 8 && (gpu_forward(&h->g, &h->st, ids, 3, 0) || gpu_forward(&h->g, &h->st, ids + 3, 1, 0) ||
			 gpu_greedy_queue(&h->g, &h->st) || gpu_greedy_token(&h->st, h->st.pos - 1, &t) ||
			 gpu_logits(&h->g, &h->st, s->st.logits, 1))) {
		snprintf(err, errlen, "cuda: warm-up pass: %s", kc_error());
		cu_close(s);
		return -1;
	}
	if (ctx >= 8 && (ks_set(&h->ks, &kp) ||
			 ks_sample(&h->ks, h->st.logits, h->st.d_pos, h->st.d_hist, h->st.d_next, 0))) {
		snprintf(err, errlen, "cuda: warm-up of the device sampler: %s", ks_error());
		cu_close(s);
		return -1;
	}
	if (ctx >= 8 && (gpu_token_queue(&h->g, &h->st, &h->tok_step, cu_pick, h) || gpu_greedy_token(&h->st, h->st.pos - 1, &t))) {
		snprintf(err, errlen, "cuda: warm-up pass: %s", kc_error());
		cu_close(s);
		return -1;
	}
	if (gpu_set_pos(&h->st, 0) || kc_sync()) {
		snprintf(err, errlen, "cuda: %s", kc_error());
		cu_close(s);
		return -1;
	}
	snprintf(s->device, sizeof(s->device), "cuda: %s", name);
	return 0;
}

static int cu_forward(session *s, const int *ids, int n, int all_logits, int copy)
{
	cu_handle *h = s->gh;
	if (h->st.pos != s->st.pos && gpu_set_pos(&h->st, s->st.pos))
		return -1;
	if (gpu_forward(&h->g, &h->st, ids, n, all_logits))
		return -1;
	if (copy && gpu_logits(&h->g, &h->st, s->st.logits, all_logits ? n : 1))
		return -1;
	s->st.pos += n;
	s->st.prefilled += (uint64_t)n;
	return 0;
}

static int cu_greedy_queue(session *s)
{
	cu_handle *h = s->gh;
	return gpu_greedy_queue(&h->g, &h->st);
}

static int cu_greedy_token(session *s, int pos, int *tok)
{
	cu_handle *h = s->gh;
	return gpu_greedy_token(&h->st, pos, tok);
}

int session_cuda_ks_params(const sampler_params *p, int vocab, uint64_t rng, ks_params *k)
{
	memset(k, 0, sizeof(*k));
	/* The mode is sampler_path's, so top_p 0 is KS_GREEDY (no draw, as
	 * sampler_pick) and KS_TOPK / KS_ALL only see top_p > 0, where the
	 * kernel's "in (0, 1) truncates, else off" is sampler_pick's. */
	switch (sampler_path(p, vocab)) {
	case SAMPLER_GREEDY:
		k->mode = KS_GREEDY;
		break;
	case SAMPLER_TOPK:
		if (p->top_k > KS_MAX_K)
			return -1;
		k->mode = KS_TOPK;
		break;
	case SAMPLER_ALL:
		if (vocab > KS_MAX_ALL)
			return -1;
		k->mode = KS_ALL;
		break;
	default:
		return -1;
	}
	k->top_k = p->top_k;
	k->temperature = p->temperature;
	k->top_p = p->top_p;
	k->min_p = p->min_p;
	k->penalize = sampler_penalized(p);
	k->repeat_last_n = p->repeat_last_n;
	k->repeat_penalty = p->repeat_penalty;
	k->presence_penalty = p->presence_penalty;
	k->frequency_penalty = p->frequency_penalty;
	k->rng = rng;
	return 0;
}

/* 1 with the parameters and the prompt (the penalties' history) on the
 * device, 0 where the CPU sampler must run (session_cuda_ks_params), -1
 * on a device error. */
static int cu_sample_begin(session *s, const sampler_params *p, uint64_t rng, const int *ids, size_t n)
{
	cu_handle *h = s->gh;
	ks_params k;
	if (n > (size_t)h->st.ctx || session_cuda_ks_params(p, s->m.cfg.vocab, rng, &k))
		return 0;
	if (ks_set(&h->ks, &k) || (n && kc_upload(h->st.d_hist, ids, n * sizeof(int))))
		return -1;
	return 1;
}

/* Queues pick + forward of the picked token (one captured graph, as the
 * greedy step: the token is read back behind it, nothing waits). */
static int cu_sample_queue(session *s)
{
	cu_handle *h = s->gh;
	return gpu_token_queue(&h->g, &h->st, &h->tok_step, cu_pick, h);
}

static int cu_set_pos(session *s, int pos)
{
	cu_handle *h = s->gh;
	s->st.pos = pos;
	return gpu_set_pos(&h->st, pos);
}

/* Prefill of n ids from position 0, logits left on the device. */
static int cu_run(cu_handle *h, const int *ids, int n)
{
	if (gpu_set_pos(&h->st, 0))
		return -1;
	for (int done = 0; done < n;) {
		int step = n - done < h->st.max_batch ? n - done : h->st.max_batch;
		if (gpu_forward(&h->g, &h->st, ids + done, step, 0))
			return -1;
		done += step;
	}
	return kc_sync();
}

#define BW_BYTES ((size_t)2 << 30) /* 2 GiB: 30x the H200's L2 */

/* mlxr bench on the GPU: the same measurements as worker/bench.c, decode
 * as replays of the captured greedy step (the token chosen on the device,
 * read back once at the end), the bound from the device's measured read
 * bandwidth. */
static int cu_bench(session *s, const wc_bench_req *r, wc_bench_res *out, char *err, size_t errlen)
{
	cu_handle *h = s->gh;
	int longest = r->prefill > r->long_ctx ? r->prefill : r->long_ctx;
	int *ids = malloc(sizeof(int) * (size_t)(longest + r->decode));
	int rc = -1;
	if (!ids) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	uint64_t x = 12345;
	for (int i = 0; i < longest; i++) { /* the CPU bench's ids */
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int)((x >> 33) % (uint64_t)s->m.cfg.vocab);
	}
	if (cu_run(h, ids, 8))
		goto out;
	double t0 = session_now();
	if (cu_run(h, ids, r->prefill))
		goto out;
	out->prefill_s = session_now() - t0;
	if (cu_run(h, ids, 16))
		goto out;
	t0 = session_now();
	if (gpu_decode_greedy(&h->g, &h->st, r->decode, ids + longest))
		goto out;
	out->decode_short_s = session_now() - t0;
	if (cu_run(h, ids, r->long_ctx))
		goto out;
	t0 = session_now();
	if (gpu_decode_greedy(&h->g, &h->st, r->decode, ids + longest))
		goto out;
	out->decode_long_s = session_now() - t0;
	out->mem_bw = kc_read_bandwidth(BW_BYTES);
	if (out->mem_bw <= 0)
		goto out;
	out->decode_bytes = s->m.decode_bytes;
	out->threads = 1; /* the host thread that drives the device */
	snprintf(out->kernels, sizeof(out->kernels), "cuda");
	out->prefill_x = kc_gemm_impl(-1) == KC_GEMM_FAST ? WC_PREFILL_X_F16 : WC_PREFILL_X_F32;
	rc = 0;
out:
	if (rc)
		snprintf(err, errlen, "GPU benchmark failed: %s", kc_error());
	free(ids);
	cu_set_pos(s, 0); /* the benchmark owns the cache; the next request re-prefills */
	return rc;
}

const session_gpu session_cuda = {
	cu_open, cu_close, cu_forward, cu_greedy_queue, cu_greedy_token, cu_sample_begin, cu_sample_queue, cu_set_pos,
	cu_bench,
};

int session_cuda_init(char *err, size_t errlen)
{
	if (kc_init(0)) {
		snprintf(err, errlen, "cuda: %s", kc_error());
		return -1;
	}
	return 0;
}

void session_cuda_fast_prefill(void)
{
	kc_gemm_impl(KC_GEMM_FAST);
	kc_attention_impl(KC_ATT_FAST);
}

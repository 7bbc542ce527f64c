/* worker/forward.c — the KV cache / scratch state and the forward pass.
 * Kept apart from model.c (loading and validation, which the broker links)
 * so that the broker links no kernel. The forward pass reads top to bottom
 * (llama2.c style); each architecture difference is a flag in
 * model_config. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker/model.h"

/* ---- state ---- */

int model_state_init(model_state *s, const model *m, int ctx, int max_batch)
{
	const model_config *c = &m->cfg;
	memset(s, 0, sizeof(*s));
	if (ctx < 1 || max_batch < 1)
		return -1;
	s->ctx = ctx;
	s->max_batch = max_batch;
	size_t kv = (size_t)c->n_layers * (size_t)ctx * (size_t)c->n_kv_heads * (size_t)c->head_dim;
	size_t B = (size_t)max_batch, H = (size_t)c->hidden;
	size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
	size_t wide = H > qd ? H : qd;
	s->kv_dt = model_kv_dtype();
	s->k = malloc(kv * (s->kv_dt == KDT_F32 ? 4 : 2));
	s->v = malloc(kv * (s->kv_dt == KDT_F32 ? 4 : 2));
	kmem_advise_huge(s->k, kv * (s->kv_dt == KDT_F32 ? 4 : 2));
	kmem_advise_huge(s->v, kv * (s->kv_dt == KDT_F32 ? 4 : 2));
	s->x = malloc(B * H * sizeof(float));
	s->xb = malloc(B * H * sizeof(float));
	s->q = malloc(B * qd * sizeof(float));
	s->kk = malloc(B * kvd * sizeof(float));
	s->vv = malloc(B * kvd * sizeof(float));
	s->att = malloc(B * qd * sizeof(float));
	s->tmp = malloc(B * wide * sizeof(float));
	s->gate = malloc(B * (size_t)c->inter * sizeof(float));
	s->up = malloc(B * (size_t)c->inter * sizeof(float));
	s->fused = c->fused_qkv ? malloc(B * (qd + 2 * kvd > 2 * (size_t)c->inter ? qd + 2 * kvd : 2 * (size_t)c->inter) * sizeof(float)) : NULL;
	s->scores = malloc(B * (size_t)ctx * sizeof(float));
	s->logits = malloc(B * (size_t)c->vocab * sizeof(float));
	if (!s->k || !s->v || !s->x || !s->xb || !s->q || !s->kk || !s->vv || !s->att || !s->tmp || !s->gate ||
	    !s->up || (c->fused_qkv && !s->fused) || !s->scores || !s->logits) {
		model_state_free(s);
		return -1;
	}
	return 0;
}

void model_state_free(model_state *s)
{
	free(s->k); free(s->v); free(s->x); free(s->xb); free(s->q); free(s->kk); free(s->vv);
	free(s->att); free(s->tmp); free(s->gate); free(s->up); free(s->fused); free(s->scores); free(s->logits);
	memset(s, 0, sizeof(*s));
}

/* ---- forward ---- */

/* y[n][rows] = x[n][cols] W^T + bias: matvec for one token, GEMM for many. */
static void linear(const kernel_table *K, const kq_matrix *w, const float *x, int n, const float *bias, float *y)
{
	if (n == 1)
		K->matvec(w, x, bias, y);
	else
		K->matmul(w, x, n, bias, y);
}

/* Several matrices on the same x: one matvec_multi for one token (x
 * prepared once, one hand-off to the pool), a GEMM each for many. */
static void linear_multi(const kernel_table *K, const kq_matrix *const *w, int nw, const float *x, int n,
			 const float *const *bias, float *const *y)
{
	if (n == 1) {
		K->matvec_multi(w, nw, x, bias, y);
		return;
	}
	for (int k = 0; k < nw; k++)
		K->matmul(w[k], x, n, bias ? bias[k] : NULL, y[k]);
}

static void softcap(float *x, size_t n, float cap)
{
	for (size_t i = 0; i < n; i++)
		x[i] = cap * tanhf(x[i] / cap);
}

/* The new K or V row into the cache at element `at`: a copy, or f32 ->
 * f16 round to nearest even (what F16C's vcvtps2ph does). Scalar:
 * kv_heads x head_dim values per token and layer, microseconds a token. */
static void kv_put(const model_state *s, void *cache, size_t at, const float *x, int n)
{
	if (s->kv_dt == KDT_F32) {
		memcpy((float *)cache + at, x, sizeof(float) * (size_t)n);
		return;
	}
	uint16_t *d = (uint16_t *)cache + at;
	for (int i = 0; i < n; i++)
		d[i] = k_f32_to_f16(x[i]);
}

/* ---- profile (mlxr bench --verbose): off unless s->prof is set; when
 * off each hook is one NULL test. ---- */

static double prof_t(const model_state *s)
{
	if (!s->prof)
		return 0;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void prof_add(const model_state *s, wc_prof_cat c, double t0, uint64_t bytes)
{
	s->prof->s[c] += prof_t(s) - t0;
	s->prof->bytes[c] += bytes;
}

/* The time since t0 (from prof_t) and the bytes read go to category c;
 * `bytes` is evaluated only when the profile is on. */
#define PROF(c, t0, bytes)                            \
	do {                                          \
		if (s->prof)                          \
			prof_add(s, (c), (t0), (bytes)); \
	} while (0)

/* Cache bytes attention reads for the query at position p: its K and V
 * rows (the earlier queries of a batch read a prefix of them). */
static uint64_t attn_bytes(const model_state *s, int p, int window, int kvd)
{
	int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
	return 2ull * (uint64_t)(p + 1 - lo) * (uint64_t)kvd * (s->kv_dt == KDT_F32 ? 4 : 2);
}

int model_forward(const model *m, model_state *s, const int *tokens, int n, int all_logits)
{
	static const kernel_table *K;
	if (!K)
		K = kernels_best();
	const model_config *c = &m->cfg;
	const int H = c->hidden, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
	const int qd = nh * hd, kvd = nkv * hd, I = c->inter;
	const int pos0 = s->pos;
	if (n < 1 || n > s->max_batch || pos0 + n > s->ctx)
		return -1;
	for (int t = 0; t < n; t++)
		if (tokens[t] < 0 || tokens[t] >= c->vocab)
			return -1;
	double t0 = prof_t(s);
	for (int t = 0; t < n; t++) {
		K->embed(&m->embed, tokens[t], s->x + (size_t)t * H);
		if (c->embed_scale != 1.0f)
			for (int i = 0; i < H; i++)
				s->x[(size_t)t * H + i] *= c->embed_scale;
	}
	PROF(WC_PROF_LM_HEAD, t0, (uint64_t)n * model_matrix_bytes(&m->embed) / (uint64_t)c->vocab);
	for (int l = 0; l < c->n_layers; l++) {
		const layer_weights *L = &m->layers[l];
		const size_t es = s->kv_dt == KDT_F32 ? 4 : 2, lay = (size_t)l * (size_t)s->ctx * (size_t)kvd * es;
		void *kc = (char *)s->k + lay, *vc = (char *)s->v + lay;
		const float *inv_freq = c->sliding[l] ? c->inv_freq_local : c->inv_freq;
		/* attention block */
		t0 = prof_t(s);
		for (int t = 0; t < n; t++)
			K->rmsnorm(s->x + (size_t)t * H, L->attn_norm, H, c->eps, c->norm_add_one, s->xb + (size_t)t * H);
		PROF(WC_PROF_NORM, t0, 0);
		t0 = prof_t(s);
		if (c->fused_qkv) {
			linear(K, &L->q, s->xb, n, NULL, s->fused);
			for (int t = 0; t < n; t++) {
				const float *f = s->fused + (size_t)t * (qd + 2 * kvd);
				memcpy(s->q + (size_t)t * qd, f, sizeof(float) * qd);
				memcpy(s->kk + (size_t)t * kvd, f + qd, sizeof(float) * kvd);
				memcpy(s->vv + (size_t)t * kvd, f + qd + kvd, sizeof(float) * kvd);
			}
		} else {
			const kq_matrix *w[3] = {&L->q, &L->k, &L->v};
			const float *b[3] = {L->q_bias, L->k_bias, L->v_bias};
			float *y[3] = {s->q, s->kk, s->vv};
			linear_multi(K, w, 3, s->xb, n, b, y);
		}
		PROF(WC_PROF_QKV, t0,
		     model_matrix_bytes(&L->q) + (c->fused_qkv ? 0 : model_matrix_bytes(&L->k) + model_matrix_bytes(&L->v)));
		for (int t = 0; t < n; t++) {
			float *q = s->q + (size_t)t * qd, *k = s->kk + (size_t)t * kvd;
			if (c->qk_norm) {
				t0 = prof_t(s);
				for (int h = 0; h < nh; h++)
					K->rmsnorm(q + h * hd, L->q_norm, hd, c->eps, c->norm_add_one, q + h * hd);
				for (int h = 0; h < nkv; h++)
					K->rmsnorm(k + h * hd, L->k_norm, hd, c->eps, c->norm_add_one, k + h * hd);
				PROF(WC_PROF_NORM, t0, 0);
			}
			t0 = prof_t(s);
			K->rope(q, nh, hd, c->rot_dim, pos0 + t, inv_freq, c->rope_mscale);
			K->rope(k, nkv, hd, c->rot_dim, pos0 + t, inv_freq, c->rope_mscale);
			PROF(WC_PROF_ROPE, t0, 0);
			t0 = prof_t(s);
			kv_put(s, kc, (size_t)(pos0 + t) * kvd, k, kvd);
			kv_put(s, vc, (size_t)(pos0 + t) * kvd, s->vv + (size_t)t * kvd, kvd);
			PROF(WC_PROF_KV_STORE, t0, 0);
		}
		const int window = c->sliding[l] ? c->window : 0;
		t0 = prof_t(s);
		K->attention(s->q, kc, vc, s->kv_dt, s->att, n, pos0, nh, nkv, hd, c->attn_scale, window, c->attn_softcap,
			     s->scores);
		PROF(WC_PROF_ATTENTION, t0, attn_bytes(s, pos0 + n - 1, window, kvd));
		t0 = prof_t(s);
		linear(K, &L->o, s->att, n, L->o_bias, s->tmp);
		PROF(WC_PROF_ATTN_OUT, t0, model_matrix_bytes(&L->o));
		for (int t = 0; t < n; t++) {
			float *x = s->x + (size_t)t * H, *r = s->tmp + (size_t)t * H;
			if (c->sandwich)
				K->rmsnorm(r, L->post_attn_norm, H, c->eps, c->norm_add_one, r);
			for (int i = 0; i < H; i++)
				x[i] += r[i];
			t0 = prof_t(s);
			K->rmsnorm(x, L->ffn_norm, H, c->eps, c->norm_add_one, s->xb + (size_t)t * H);
			PROF(WC_PROF_NORM, t0, 0);
		}
		/* feed-forward block */
		t0 = prof_t(s);
		if (c->fused_qkv) {
			linear(K, &L->gate, s->xb, n, NULL, s->fused);
			for (int t = 0; t < n; t++) {
				memcpy(s->gate + (size_t)t * I, s->fused + (size_t)t * 2 * I, sizeof(float) * I);
				memcpy(s->up + (size_t)t * I, s->fused + (size_t)t * 2 * I + I, sizeof(float) * I);
			}
		} else {
			const kq_matrix *w[2] = {&L->gate, &L->up};
			float *y[2] = {s->gate, s->up};
			linear_multi(K, w, 2, s->xb, n, NULL, y);
		}
		PROF(WC_PROF_GATE_UP, t0,
		     model_matrix_bytes(&L->gate) + (c->fused_qkv ? 0 : model_matrix_bytes(&L->up)));
		t0 = prof_t(s);
		if (c->act == 2) { /* exact GELU (gemma): not a hot path for real models */
			for (size_t i = 0; i < (size_t)n * I; i++) {
				float g = s->gate[i];
				s->gate[i] = 0.5f * g * (1.0f + erff(g / sqrtf(2.0f))) * s->up[i];
			}
		} else {
			K->glu(s->gate, s->up, n * I, c->act);
		}
		PROF(WC_PROF_GLU, t0, 0);
		t0 = prof_t(s);
		linear(K, &L->down, s->gate, n, NULL, s->tmp);
		PROF(WC_PROF_DOWN, t0, model_matrix_bytes(&L->down));
		for (int t = 0; t < n; t++) {
			float *x = s->x + (size_t)t * H, *r = s->tmp + (size_t)t * H;
			if (c->sandwich)
				K->rmsnorm(r, L->post_ffn_norm, H, c->eps, c->norm_add_one, r);
			for (int i = 0; i < H; i++)
				x[i] += r[i];
		}
	}
	int first = all_logits ? 0 : n - 1, nout = n - first;
	t0 = prof_t(s);
	for (int t = first; t < n; t++)
		K->rmsnorm(s->x + (size_t)t * H, m->final_norm, H, c->eps, c->norm_add_one, s->xb + (size_t)(t - first) * H);
	PROF(WC_PROF_NORM, t0, 0);
	t0 = prof_t(s);
	linear(K, &m->lm_head, s->xb, nout, NULL, s->logits);
	if (c->final_softcap > 0)
		softcap(s->logits, (size_t)nout * c->vocab, c->final_softcap);
	PROF(WC_PROF_LM_HEAD, t0, model_matrix_bytes(&m->lm_head));
	s->pos += n;
	s->prefilled += (uint64_t)n;
	return 0;
}

/* worker/forward_cuda.c — the forward pass on a CUDA device (see
 * forward_cuda.h). Reads top to bottom like worker/forward.c; the
 * differences are fusions: q/k/v and gate/up in one launch when they share
 * an input, q/k norm + RoPE + KV append in one kernel, the residual add
 * fused with the next RMSNorm, and token selection on the device. In
 * decode (n == 1) on the tensor-core matvecs the residual steps take no
 * launch of their own: o and down add into x in their epilogue, and the
 * next matvec (q/k/v, gate/up, lm_head) norms x as it stages it (kcuda.h,
 * "the residual add and the RMSNorm inside the matvecs"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/forward_cuda.h"

/* ---- weights ---- */

static float *up_f32(const float *h, size_t n)
{
	if (!h)
		return NULL;
	float *d = kc_malloc(n * sizeof(float));
	if (d && kc_upload(d, h, n * sizeof(float))) {
		kc_free(d);
		return NULL;
	}
	return d;
}

#define UPM(dst, src) do { if (kc_matrix_upload(&(src), &(dst))) goto fail; g->device_bytes += kc_matrix_bytes(&(dst)); } while (0)
#define UPF(dst, src, n) do { if ((src) && !((dst) = up_f32((src), (n)))) goto fail; } while (0)

int gpu_model_upload(gpu_model *g, const model *m, char *err, size_t errlen)
{
	const model_config *c = &m->cfg;
	memset(g, 0, sizeof(*g));
	g->cfg = *c;
	g->layers = calloc((size_t)c->n_layers, sizeof(gpu_layer));
	if (!g->layers)
		goto fail;
	UPM(g->embed, m->embed);
	if (c->tied)
		g->lm_head = g->embed;
	else
		UPM(g->lm_head, m->lm_head);
	UPF(g->final_norm, m->final_norm, (size_t)c->hidden);
	UPF(g->inv_freq, c->inv_freq, (size_t)c->rot_dim / 2);
	if (c->inv_freq_local && c->inv_freq_local != c->inv_freq)
		UPF(g->inv_freq_local, c->inv_freq_local, (size_t)c->rot_dim / 2);
	else
		g->inv_freq_local = g->inv_freq;
	for (int l = 0; l < c->n_layers; l++) {
		const layer_weights *L = &m->layers[l];
		gpu_layer *G = &g->layers[l];
		size_t H = (size_t)c->hidden, hd = (size_t)c->head_dim;
		UPM(G->q, L->q);
		if (!c->fused_qkv) {
			UPM(G->k, L->k);
			UPM(G->v, L->v);
		}
		UPM(G->o, L->o);
		UPM(G->gate, L->gate);
		if (!c->fused_qkv)
			UPM(G->up, L->up);
		UPM(G->down, L->down);
		UPF(G->q_bias, L->q_bias, (size_t)L->q.rows);
		UPF(G->k_bias, L->k_bias, (size_t)L->k.rows);
		UPF(G->v_bias, L->v_bias, (size_t)L->v.rows);
		UPF(G->o_bias, L->o_bias, (size_t)L->o.rows);
		UPF(G->attn_norm, L->attn_norm, H);
		UPF(G->ffn_norm, L->ffn_norm, H);
		UPF(G->post_attn_norm, L->post_attn_norm, H);
		UPF(G->post_ffn_norm, L->post_ffn_norm, H);
		UPF(G->q_norm, L->q_norm, hd);
		UPF(G->k_norm, L->k_norm, hd);
	}
	g->decode_bytes = m->decode_bytes;
	return 0;
fail:
	snprintf(err, errlen, "cuda: uploading the weights: %s", kc_error());
	gpu_model_free(g);
	return -1;
}

static float *rand_f32(size_t n, float lo, float hi, uint64_t seed)
{
	float *d = kc_malloc(n * sizeof(float));
	if (d && kc_fill_uniform(d, n, lo, hi, seed)) {
		kc_free(d);
		return NULL;
	}
	return d;
}

int gpu_model_random(gpu_model *g, const model_config *c, int bits, int gs, uint64_t seed, char *err,
		     size_t errlen)
{
	memset(g, 0, sizeof(*g));
	g->cfg = *c;
	const int H = c->hidden, qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim, I = c->inter;
	g->layers = calloc((size_t)c->n_layers, sizeof(gpu_layer));
	if (!g->layers)
		goto fail;
	/* scales ~ 2/(2^bits-1)/sqrt(cols): weights of variance ~1/cols */
#define RM(dst, r, cc) do { float s_ = 3.4f / (float)((1 << bits) - 1) / sqrtf((float)(cc)); \
	if (kc_matrix_random(&(dst), (r), (cc), bits, gs, KDT_F16, 0.5f * s_, 1.5f * s_, seed++)) goto fail; \
	g->device_bytes += kc_matrix_bytes(&(dst)); } while (0)
	RM(g->embed, c->vocab, H);
	if (c->tied)
		g->lm_head = g->embed;
	else
		RM(g->lm_head, c->vocab, H);
	if (!(g->final_norm = rand_f32((size_t)H, 0.9f, 1.1f, seed++)))
		goto fail;
	g->inv_freq = up_f32(c->inv_freq, (size_t)c->rot_dim / 2);
	if (!g->inv_freq)
		goto fail;
	g->inv_freq_local = g->inv_freq;
	for (int l = 0; l < c->n_layers; l++) {
		gpu_layer *G = &g->layers[l];
		RM(G->q, qd, H);
		RM(G->k, kvd, H);
		RM(G->v, kvd, H);
		RM(G->o, H, qd);
		RM(G->gate, I, H);
		RM(G->up, I, H);
		RM(G->down, H, I);
		if (!(G->attn_norm = rand_f32((size_t)H, 0.9f, 1.1f, seed++)) ||
		    !(G->ffn_norm = rand_f32((size_t)H, 0.9f, 1.1f, seed++)))
			goto fail;
		if (c->qk_norm && (!(G->q_norm = rand_f32((size_t)c->head_dim, 0.9f, 1.1f, seed++)) ||
				   !(G->k_norm = rand_f32((size_t)c->head_dim, 0.9f, 1.1f, seed++))))
			goto fail;
		g->decode_bytes += kc_matrix_bytes(&G->q) + kc_matrix_bytes(&G->k) + kc_matrix_bytes(&G->v) +
				   kc_matrix_bytes(&G->o) + kc_matrix_bytes(&G->gate) + kc_matrix_bytes(&G->up) +
				   kc_matrix_bytes(&G->down);
	}
#undef RM
	g->decode_bytes += kc_matrix_bytes(&g->lm_head) + (uint64_t)H * 4;
	if (kc_sync())
		goto fail;
	return 0;
fail:
	snprintf(err, errlen, "cuda: random weights: %s", kc_error());
	gpu_model_free(g);
	return -1;
}

void gpu_model_free(gpu_model *g)
{
	if (g->layers) {
		for (int l = 0; l < g->cfg.n_layers; l++) {
			gpu_layer *G = &g->layers[l];
			kq_matrix *ms[] = {&G->q, &G->k, &G->v, &G->o, &G->gate, &G->up, &G->down};
			for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
				kc_matrix_free(ms[i]);
			float *fs[] = {G->q_bias, G->k_bias, G->v_bias, G->o_bias, G->attn_norm, G->ffn_norm,
				       G->post_attn_norm, G->post_ffn_norm, G->q_norm, G->k_norm};
			for (size_t i = 0; i < sizeof(fs) / sizeof(fs[0]); i++)
				kc_free(fs[i]);
		}
		free(g->layers);
	}
	if (g->lm_head.w != g->embed.w)
		kc_matrix_free(&g->lm_head);
	kc_matrix_free(&g->embed);
	kc_free(g->final_norm);
	if (g->inv_freq_local != g->inv_freq)
		kc_free(g->inv_freq_local);
	kc_free(g->inv_freq);
	memset(g, 0, sizeof(*g));
}

/* ---- state ---- */

int gpu_state_init(gpu_state *s, const gpu_model *g, int ctx, int max_batch, int logit_rows)
{
	const model_config *c = &g->cfg;
	memset(s, 0, sizeof(*s));
	if (ctx < 1 || max_batch < 1 || logit_rows < 1 || logit_rows > max_batch)
		return -1;
	s->ctx = ctx;
	s->max_batch = max_batch;
	s->logit_rows = logit_rows;
	size_t B = (size_t)max_batch, H = (size_t)c->hidden;
	size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
	size_t wide = H > qd ? H : qd;
	size_t kv = (size_t)c->n_layers * (size_t)ctx * kvd;
	size_t fused = qd + 2 * kvd > 2 * (size_t)c->inter ? qd + 2 * kvd : 2 * (size_t)c->inter;
	/* the attention chunking depends on n: size for the largest need */
	size_t sc1 = kc_attention_scratch(max_batch < 15 ? max_batch : 15, c->n_heads, c->n_kv_heads, c->head_dim, ctx);
	size_t scb = kc_attention_scratch(max_batch, c->n_heads, c->n_kv_heads, c->head_dim, ctx);
	s->k = kc_malloc(kv * 4);
	s->v = kc_malloc(kv * 4);
	s->x = kc_malloc(B * H * 4);
	s->xb = kc_malloc(B * H * 4);
	s->q = kc_malloc(B * qd * 4);
	s->kk = kc_malloc(B * kvd * 4);
	s->vv = kc_malloc(B * kvd * 4);
	s->att = kc_malloc(B * qd * 4);
	s->tmp = kc_malloc(B * wide * 4);
	s->gate = kc_malloc(B * (size_t)c->inter * 4);
	s->up = kc_malloc(B * (size_t)c->inter * 4);
	s->fused = c->fused_qkv ? kc_malloc(B * fused * 4) : NULL;
	s->logits = kc_malloc((size_t)logit_rows * (size_t)c->vocab * 4);
	s->att_scratch = kc_malloc(sc1 > scb ? sc1 : scb);
	s->d_pos = kc_malloc(sizeof(int));
	s->d_tokens = kc_malloc(B * sizeof(int));
	s->d_next = kc_malloc(sizeof(int));
	s->d_hist = kc_malloc((size_t)ctx * sizeof(int));
	if (!s->k || !s->v || !s->x || !s->xb || !s->q || !s->kk || !s->vv || !s->att || !s->tmp || !s->gate ||
	    !s->up || (c->fused_qkv && !s->fused) || !s->logits || !s->att_scratch || !s->d_pos || !s->d_tokens ||
	    !s->d_next || !s->d_hist) {
		gpu_state_free(s);
		return -1;
	}
	/* the prefill GEMM's split input, at its largest (down: inter columns) */
	size_t widest = wide > (size_t)c->inter ? wide : (size_t)c->inter;
	if (max_batch > 1 && kc_linear_reserve(max_batch, (int)widest)) {
		gpu_state_free(s);
		return -1;
	}
	gpu_state_reset(s);
	return kc_sync();
}

void gpu_state_free(gpu_state *s)
{
	void *ps[] = {s->k, s->v, s->x, s->xb, s->q, s->kk, s->vv, s->att, s->tmp, s->gate, s->up, s->fused,
		      s->logits, s->att_scratch, s->d_pos, s->d_tokens, s->d_next, s->d_hist};
	for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++)
		kc_free(ps[i]);
	kc_graph_free(s->step);
	memset(s, 0, sizeof(*s));
}

void gpu_state_reset(gpu_state *s)
{
	s->pos = 0;
	kc_memset(s->d_pos, 0, sizeof(int));
}

/* ---- forward ---- */

/* The decode fusions (kc_fuse_ok) apply to n == 1 without sandwich norms
 * (their post norm needs the whole update before the add). */
static int fuse_on(const model_config *c, int n)
{
	return n == 1 && !c->sandwich;
}

/* Whether layer l's q/k/v matvec norms x itself (else it reads xb). */
static int qkv_norms(const gpu_model *g, int l, int n)
{
	const gpu_layer *L = &g->layers[l];
	const kq_matrix *ms[3] = {&L->q, &L->k, &L->v};
	return fuse_on(&g->cfg, n) && kc_fuse_ok(g->cfg.fused_qkv ? 1 : 3, ms, KC_FUSE_NORM);
}

/* Whether layer l's gate/up matvec norms x itself. */
static int glu_norms(const gpu_model *g, int l, int n)
{
	const gpu_layer *L = &g->layers[l];
	const kq_matrix *ms[2] = {&L->gate, &L->up};
	if (g->cfg.fused_qkv)
		return fuse_on(&g->cfg, n) && kc_fuse_ok(1, ms, KC_FUSE_NORM);
	return fuse_on(&g->cfg, n) && kc_fuse_ok(2, ms, KC_FUSE_NORM) && L->gate.rows == L->up.rows;
}

/* The residual step after the block's last matvec P (input in): x += P in
 * (+ bias; first rmsnorm(., post_w) if post_w), then xb = rmsnorm(x, w)
 * unless w is NULL or the next matvec norms x itself (cons). Fused: P adds
 * into x in its epilogue. With glu_u (n > 1), P's input is act(in) *
 * glu_u (kc_linear_glu_in: in may hold that product afterwards). */
static int residual_step(const gpu_model *g, gpu_state *s, const kq_matrix *P, float *in, const float *glu_u,
			 const float *bias, const float *post_w, const float *w, int n, int cons)
{
	const model_config *c = &g->cfg;
	const int H = c->hidden, one = c->norm_add_one;
	const kq_matrix *ms[1] = {P};
	if (fuse_on(c, n) && !post_w && kc_fuse_ok(1, ms, KC_FUSE_ADD)) {
		if (kc_linear_residual(P, in, bias, s->x))
			return -1;
		return w && !cons ? kc_rmsnorm(s->x, w, 1, H, c->eps, one, s->xb) : 0;
	}
	if (glu_u ? kc_linear_glu_in(P, in, glu_u, c->act, n, bias, s->tmp) : kc_linear(P, in, n, bias, s->tmp))
		return -1;
	return kc_add_rmsnorm(s->x, s->tmp, post_w, cons ? NULL : w, n, H, c->eps, one, s->xb);
}

/* Benchmarks only (gpu_forward_skip, cuda-bench's MLXR_BENCH_SKIP): the
 * decode step's launches of the phases whose GPU_SKIP_* bit is set are
 * left out, so the step's time less a phase's is that phase's cost in
 * context (its own time and its transitions). Results are garbage then;
 * the worker never sets it. */
static int g_skip;

int gpu_forward_skip(int mask)
{
	int old = g_skip;
	g_skip = mask;
	return old;
}

/* Queues the pass for n tokens whose ids are in device memory at positions
 * *d_pos.. (all positions read on the device), and *d_pos += n. */
static int queue_forward(const gpu_model *g, gpu_state *s, const int *d_tok, int n, int all_logits)
{
	const model_config *c = &g->cfg;
	const int H = c->hidden, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
	const int qd = nh * hd, kvd = nkv * hd, I = c->inter;
	const int one = c->norm_add_one;
	/* the attention's max_keys: the keys this call sees where they are known
	 * here (n > 1 is never captured: fewer chunks and segments, X3 splits
	 * keys only where there are several segments of them); the cache size
	 * for a step (n == 1, a captured graph replays it at every position) */
	const int mk = n > 1 ? s->pos + n : s->ctx;
	if (kc_embed(&g->embed, d_tok, n, c->embed_scale, s->x))
		return -1;
	/* first attention norm (unless q/k/v norms x); afterwards residual_step */
	int qn = qkv_norms(g, 0, n);
	if (!qn && kc_rmsnorm(s->x, g->layers[0].attn_norm, n, H, c->eps, one, s->xb))
		return -1;
	for (int l = 0; l < c->n_layers; l++) {
		const gpu_layer *L = &g->layers[l];
		float *kc = s->k + (size_t)l * s->ctx * kvd, *vc = s->v + (size_t)l * s->ctx * kvd;
		const float *inv_freq = c->sliding[l] ? g->inv_freq_local : g->inv_freq;
		float *q = s->q, *k = s->kk, *v = s->vv;
		const kc_norm an = {L->attn_norm, c->eps, one}, fn = {L->ffn_norm, c->eps, one};
		const int gn = glu_norms(g, l, n);
		/* attention block: qn says whether q/k/v norms x (else xb holds it) */
		const int sk = n == 1 ? g_skip : 0;
		if (sk & GPU_SKIP_QKV) {
		} else if (c->fused_qkv) {
			const kq_matrix *ms[1] = {&L->q};
			float *ys[1] = {s->fused};
			if (qn ? kc_linear_multi_norm(1, ms, s->x, &an, NULL, ys)
			       : kc_linear(&L->q, s->xb, n, NULL, s->fused))
				return -1;
			size_t w = (size_t)(qd + 2 * kvd) * 4;
			if (n == 1) { /* one row: q, k, v are contiguous slices */
				q = s->fused;
				k = s->fused + qd;
				v = s->fused + qd + kvd;
			} else if (kc_copy2d(q, (size_t)qd * 4, s->fused, w, (size_t)qd * 4, (size_t)n) ||
				   kc_copy2d(k, (size_t)kvd * 4, s->fused + qd, w, (size_t)kvd * 4, (size_t)n) ||
				   kc_copy2d(v, (size_t)kvd * 4, s->fused + qd + kvd, w, (size_t)kvd * 4, (size_t)n)) {
				return -1;
			}
		} else {
			const kq_matrix *ms[3] = {&L->q, &L->k, &L->v};
			const float *bs[3] = {L->q_bias, L->k_bias, L->v_bias};
			float *ys[3] = {q, k, v};
			if (qn ? kc_linear_multi_norm(3, ms, s->x, &an, bs, ys)
			       : kc_linear_multi(3, ms, s->xb, n, bs, ys))
				return -1;
		}
		/* q/k norm, RoPE, KV append, attention: one launch when decoding */
		if (!(sk & GPU_SKIP_ATT) && kc_qk_rope_attention(q, k, v, n, nh, nkv, hd, c->rot_dim, s->d_pos, inv_freq, c->rope_mscale,
					 c->qk_norm ? L->q_norm : NULL, c->qk_norm ? L->k_norm : NULL, c->eps, one, kc,
					 vc, s->att, c->attn_scale, c->sliding[l] ? c->window : 0, c->attn_softcap,
					 mk, s->att_scratch))
			return -1;
		if (!(sk & GPU_SKIP_O) && residual_step(g, s, &L->o, s->att, NULL, L->o_bias, c->sandwich ? L->post_attn_norm : NULL, L->ffn_norm,
				  n, gn))
			return -1;
		/* feed-forward block: gn says whether gate/up norms x; for n > 1
		 * the GLU's product is formed in the down GEMM's x split (glu_u) */
		float *gt = s->gate, *up = s->up;
		const float *glu_u = NULL;
		if (sk & GPU_SKIP_GLU) {
		} else if (c->fused_qkv) {
			const kq_matrix *ms[1] = {&L->gate};
			float *ys[1] = {s->fused};
			if (gn ? kc_linear_multi_norm(1, ms, s->x, &fn, NULL, ys)
			       : kc_linear(&L->gate, s->xb, n, NULL, s->fused))
				return -1;
			if (n == 1) {
				gt = s->fused;
				up = s->fused + I;
			} else if (kc_copy2d(gt, (size_t)I * 4, s->fused, (size_t)I * 8, (size_t)I * 4, (size_t)n) ||
				   kc_copy2d(up, (size_t)I * 4, s->fused + I, (size_t)I * 8, (size_t)I * 4, (size_t)n)) {
				return -1;
			}
			if (n > 1)
				glu_u = up;
			else if (kc_glu(gt, up, (size_t)n * I, c->act))
				return -1;
		} else if (n > 1) { /* gn is 0: fuse_on is for n == 1 */
			const kq_matrix *ms[2] = {&L->gate, &L->up};
			float *ys[2] = {gt, up};
			if (kc_linear_multi(2, ms, s->xb, n, NULL, ys))
				return -1;
			glu_u = up;
		} else if (gn ? kc_linear_glu_norm(&L->gate, &L->up, s->x, &fn, c->act, gt)
			      : kc_linear_glu(&L->gate, &L->up, s->xb, n, c->act, gt, up)) { /* gate/up + GLU */
			return -1;
		}
		/* residual + the next layer's attention norm (or nothing after the last) */
		const float *next = l + 1 < c->n_layers ? g->layers[l + 1].attn_norm : NULL;
		qn = next && qkv_norms(g, l + 1, n);
		if (!(sk & GPU_SKIP_DOWN) && residual_step(g, s, &L->down, gt, glu_u, NULL, c->sandwich ? L->post_ffn_norm : NULL, next, n, qn))
			return -1;
	}
	int first = all_logits ? 0 : n - 1, nout = n - first;
	const kq_matrix *lm[1] = {&g->lm_head};
	if (n == 1 && (g_skip & GPU_SKIP_LM)) {
	} else if (nout == 1 && fuse_on(c, n) && kc_fuse_ok(1, lm, KC_FUSE_NORM)) {
		const kc_norm fin = {g->final_norm, c->eps, one};
		float *ys[1] = {s->logits};
		if (kc_linear_multi_norm(1, lm, s->x + (size_t)first * H, &fin, NULL, ys))
			return -1;
	} else if (kc_rmsnorm(s->x + (size_t)first * H, g->final_norm, nout, H, c->eps, one, s->xb) ||
		   kc_linear(&g->lm_head, s->xb, nout, NULL, s->logits)) {
		return -1;
	}
	if (c->final_softcap > 0 && kc_softcap(s->logits, (size_t)nout * c->vocab, c->final_softcap))
		return -1;
	return kc_pos_advance(s->d_pos, n);
}

int gpu_forward(const gpu_model *g, gpu_state *s, const int *tokens, int n, int all_logits)
{
	if (n < 1 || n > s->max_batch || (all_logits && n > s->logit_rows) || s->pos + n > s->ctx)
		return -1;
	for (int t = 0; t < n; t++)
		if (tokens[t] < 0 || tokens[t] >= g->cfg.vocab)
			return -1;
	if (kc_upload(s->d_tokens, tokens, (size_t)n * sizeof(int)))
		return -1;
	if (queue_forward(g, s, s->d_tokens, n, all_logits))
		return -1;
	s->pos += n;
	return 0;
}

int gpu_logits(const gpu_model *g, const gpu_state *s, float *out, int rows)
{
	if (rows < 1 || rows > s->logit_rows)
		return -1;
	return kc_download(out, s->logits, (size_t)rows * (size_t)g->cfg.vocab * sizeof(float));
}

/* Captures pick + the forward pass of d_next at *d_pos into *graph,
 * once: a decode step whose token pick(arg) writes to d_next and
 * d_hist[*d_pos] (every kernel of it must have run outside a capture
 * first: module loading cannot happen inside one). */
static int capture_step(const gpu_model *g, gpu_state *s, kc_graph **graph, int (*pick)(void *), void *arg)
{
	if (*graph)
		return 0;
	if (kc_capture_begin())
		return -1;
	int rc = pick(arg);
	if (!rc)
		rc = queue_forward(g, s, s->d_next, 1, 0);
	kc_graph *gr = NULL;
	if (kc_capture_end(&gr) || rc) {
		kc_graph_free(gr);
		return -1;
	}
	*graph = gr;
	return 0;
}

/* Replays a captured step at s->pos and stages its token for
 * gpu_greedy_token. */
static int launch_step(gpu_state *s, kc_graph *graph)
{
	int p = s->pos;
	if (kc_graph_launch(graph))
		return -1;
	s->pos++; /* the replay advances *d_pos: keep the host's pos with it */
	return kc_stage_int(s->d_hist + p, p % KC_STAGE_SLOTS);
}

typedef struct {
	const gpu_model *g;
	gpu_state *s;
} greedy_arg;

/* The greedy step's pick: argmax(logits row 0). */
static int greedy_pick(void *arg)
{
	const greedy_arg *a = arg;
	return kc_argmax(a->s->logits, a->g->cfg.vocab, a->s->d_next, a->s->d_hist, a->s->d_pos);
}

/* The greedy step, captured once (its argmax run outside the capture
 * first). */
static int ensure_step(const gpu_model *g, gpu_state *s)
{
	if (s->step)
		return 0;
	if (kc_argmax(s->logits, g->cfg.vocab, s->d_next, NULL, s->d_pos) || kc_sync())
		return -1;
	greedy_arg a = {g, s};
	return capture_step(g, s, &s->step, greedy_pick, &a);
}

int gpu_decode_greedy(const gpu_model *g, gpu_state *s, int steps, int *out)
{
	if (steps < 0 || s->pos + steps > s->ctx)
		return -1;
	if (!steps)
		return 0;
	int p0 = s->pos;
	if (ensure_step(g, s))
		return -1;
	for (int i = 0; i < steps; i++)
		if (kc_graph_launch(s->step)) {
			s->pos += i; /* the i queued replays advance *d_pos */
			return -1;
		}
	s->pos += steps;
	if (kc_download(out, s->d_hist + p0, (size_t)steps * sizeof(int)))
		return -1;
	return kc_sync();
}

int gpu_set_pos(gpu_state *s, int pos)
{
	if (pos < 0 || pos > s->ctx)
		return -1;
	if (kc_upload(s->d_pos, &pos, sizeof(int)))
		return -1; /* s->pos stays with *d_pos as it was */
	s->pos = pos;
	return 0;
}

int gpu_greedy_queue(const gpu_model *g, gpu_state *s)
{
	if (s->pos + 1 > s->ctx || ensure_step(g, s))
		return -1;
	return launch_step(s, s->step);
}

int gpu_greedy_token(gpu_state *s, int pos, int *tok)
{
	if (pos < 0 || pos >= s->pos)
		return -1;
	return kc_stage_wait(pos % KC_STAGE_SLOTS, tok);
}

/* The step of gpu_greedy_queue with another token choice (pick: the
 * sampler of kernels/cuda/ksample.h), captured into the caller's *graph. */
int gpu_token_queue(const gpu_model *g, gpu_state *s, kc_graph **graph, int (*pick)(void *), void *arg)
{
	if (s->pos + 1 > s->ctx || capture_step(g, s, graph, pick, arg))
		return -1;
	return launch_step(s, *graph);
}

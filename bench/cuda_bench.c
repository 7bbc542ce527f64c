/* bench/cuda_bench.c — GPU decode and prefill speed on random-weight models
 * with real shapes (not a test: it asserts nothing).
 *
 *   make cuda-bench && build/cuda-bench [1b|4b|8b ...]
 *
 * Weights: every linear layer and the embedding 4-bit, group 64, f16
 * scales, made on the device (no files). Reports, per model:
 *   prefill tok/s for 512 and 4096 prompt tokens (one forward call each);
 *   decode tok/s at a short context (after 16 tokens) and at 4K (after the
 *     4096-token prefill), greedy, the captured step replayed; and at the
 *     short context sampled on the device (mlxr run's defaults: T 0.8,
 *     top-k 40, top-p 0.9, repeat penalty 1.1; and the API's: T 1, no
 *     truncation), the pick captured with the step, as the worker runs it;
 *   the bandwidth bound: measured device read bandwidth / bytes one decode
 *     step must read (weights + the K/V rows in the cache, f32), and decode
 *     as a fraction of it.
 * First, per kernel: the decode matvec alone at the 8B and 1B shapes (GB/s and
 * fraction of the read bandwidth), SIMT and tensor-core kernels.
 *   build/cuda-bench mv        that table alone
 *   build/cuda-bench prof 8b   one decode step between profiler start/stop
 *                              (ncu --profile-from-start off), no timings;
 *                              prof4k: the step at 4K context
 *                              profpf: one prefill of 512 tokens
 *   MV_ONLY=i                  only row i of the matvec table
 *   build/cuda-bench gemm ...  instead of the matvec table: the prefill
 *                              GEMM alone at the 8B shapes (SIMT, tensor
 *                              cores with k steps of 32 and of 64 columns;
 *                              n = 512 and 4096) and the prefill attention
 *                              alone (chunk, tiled and tensor-core kernels,
 *                              n = 512, 4096)
 *   build/cuda-bench att ...   instead of the matvec table: decode attention
 *                              alone (chunk and split kernels, 8B/1B heads,
 *                              contexts 17 and 4096; the split kernel after
 *                              the RoPE + KV append launch, and with them
 *                              inside it: kc_qk_rope_attention)
 *   ATT_IMPL=3                 the models on run 22's split kernel (4:
 *                              without the pipelined loads)
 *   ATT_IMPL=i                 the models under kc_attention_impl(i)
 *   ROPE_IMPL=1                the models with the decode step's RoPE + KV
 *                              append as its own launch (kc_rope_impl)
 *   RESID_IMPL=i               the models under kc_residual_impl(i) (1: the
 *                              separate add + RMSNorm launches)
 *   MV_IMPL=i                  the models under kc_matvec_impl(i) (2: the
 *                              split tensor-core kernel, 4/5: the streaming
 *                              one with 4/8 warps per block, 6/7: the int8
 *                              tensor-core kernel for every 4-bit launch /
 *                              in place of the split kernel, 8/9: those
 *                              with x staged once per launch, k_mi_prep;
 *                              10: the default with that for o, down)
 *   MLXR_CUDA_MI_PDL=1         PDL on the adding k_matvec_i8 launches
 *                              behind k_mi_prep (impls 8, 9)
 *   MLXR_CUDA_CP=W,NS          the streaming matvec's warps per block and
 *                              ring stages (kcuda.cu, mq_launch_cp)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cuda/impl_env.h"
#include "kernels/cuda/ksample.h"
#include "worker/forward_cuda.h"

typedef struct {
	const char *key, *name;
	int hidden, layers, nh, nkv, hd, inter, vocab, tied, qk_norm;
	double theta;
} shape;

static const shape shapes[] = {
	{"1b", "Llama-3.2-1B", 2048, 16, 32, 8, 64, 8192, 128256, 1, 0, 500000},
	{"4b", "Qwen3-4B", 2560, 36, 32, 8, 128, 9728, 151936, 1, 1, 1000000},
	{"8b", "Llama-3.1-8B", 4096, 32, 32, 8, 128, 14336, 128256, 0, 0, 500000},
};

static void die(const char *what)
{
	fprintf(stderr, "FATAL %s: %s\n", what, kc_error());
	exit(1);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

typedef struct {
	double pf512, pf4k, dec_short, dec_4k, bound_short, bound_4k;
	double dec_k40, dec_all; /* sampled decode at the short context: Ollama's and OpenAI's defaults */
	double gb;
} result;

static double time_prefill(const gpu_model *g, gpu_state *s, const int *ids, int n)
{
	gpu_state_reset(s);
	kc_timer_mark(0);
	if (gpu_forward(g, s, ids, n, 0))
		die("prefill");
	kc_timer_mark(1);
	double t = kc_timer_elapsed(0, 1);
	if (kc_sync())
		die("prefill sync");
	return n / t;
}

static double time_decode(const gpu_model *g, gpu_state *s, int steps, int *out)
{
	double ts[3];
	for (int r = 0; r < 3; r++) {
		kc_timer_mark(2);
		if (gpu_decode_greedy(g, s, steps, out))
			die("decode");
		kc_timer_mark(3);
		ts[r] = kc_timer_elapsed(2, 3);
	}
	qsort(ts, 3, sizeof(double), cmp_d);
	return steps / ts[1];
}

typedef struct {
	ks_sampler *ks;
	gpu_state *s;
} pick_arg;

/* the step's pick: the device sampler, as worker/session_cuda.c's */
static int bench_pick(void *arg)
{
	const pick_arg *a = arg;
	return ks_sample_queue(a->ks, a->s->logits, a->s->d_pos, a->s->d_hist, a->s->d_next, 0);
}

/* Sampled decode as the worker runs it: the step with the device sampler's
 * pick captured once (gpu_token_queue), two steps in flight, each token
 * read back behind them. tok/s over `steps` steps. */
static double time_decode_sampled(const gpu_model *g, gpu_state *s, ks_sampler *ks, const ks_params *kp, int steps)
{
	pick_arg a = {ks, s};
	kc_graph *gr = NULL;
	int tok;
	if (ks_set(ks, kp) || ks_sample(ks, s->logits, s->d_pos, s->d_hist, s->d_next, 0) ||
	    gpu_token_queue(g, s, &gr, bench_pick, &a) || gpu_greedy_token(s, s->pos - 1, &tok))
		die("sampled decode set-up");
	kc_timer_mark(2);
	for (int i = 0; i < steps; i++)
		if (gpu_token_queue(g, s, &gr, bench_pick, &a) || (i >= 2 && gpu_greedy_token(s, s->pos - 3, &tok)))
			die("sampled decode");
	kc_timer_mark(3);
	double t = kc_timer_elapsed(2, 3);
	kc_graph_free(gr);
	return steps / t;
}

static int g_prof; /* "prof": profile one decode step of each model named (1); "prof4k": at 4K
		    * context (2); "profpf": one prefill of 512 tokens (3) */

/* g_prof's pass: one forward of n tokens between kc_profile(1) and (0)
 * (for ncu --profile-from-start off), then r zeroed and the run's
 * buffers freed (ids included). */
static void profile_forward(gpu_model *g, gpu_state *s, const int *tokens, int n, result *r, int *ids)
{
	if (kc_profile(1) || gpu_forward(g, s, tokens, n, 0) || kc_profile(0))
		die("profile forward");
	memset(r, 0, sizeof(*r));
	free(ids);
	gpu_state_free(s);
	gpu_model_free(g);
}

static void run(const shape *sh, double bw, result *r)
{
	model_config c;
	memset(&c, 0, sizeof(c));
	c.hidden = sh->hidden;
	c.n_layers = sh->layers;
	c.n_heads = sh->nh;
	c.n_kv_heads = sh->nkv;
	c.head_dim = sh->hd;
	c.inter = sh->inter;
	c.vocab = sh->vocab;
	c.eps = 1e-5f;
	c.qk_norm = sh->qk_norm;
	c.embed_scale = 1.0f;
	c.attn_scale = 1.0f / sqrtf((float)sh->hd);
	c.rot_dim = sh->hd;
	c.rope_mscale = 1.0f;
	c.tied = sh->tied;
	float inv[256];
	for (int i = 0; i < sh->hd / 2; i++)
		inv[i] = 1.0f / powf((float)sh->theta, (float)(2 * i) / (float)sh->hd);
	c.inv_freq = c.inv_freq_local = inv;
	gpu_model g;
	char err[256];
	if (gpu_model_random(&g, &c, 4, 64, 1234, err, sizeof(err)))
		die(err);
	const int PF = 4096, DEC = 64;
	int ctx = PF + 3 * DEC + 64;
	gpu_state s;
	if (gpu_state_init(&s, &g, ctx, PF, 1))
		die("state");
	int *ids = malloc(PF * sizeof(int)), out[3 * 64];
	for (int i = 0; i < PF; i++)
		ids[i] = (int)((i * 2654435761u) % (unsigned)sh->vocab);
	r->gb = (double)g.decode_bytes / 1e9;
	/* warm-up (module load, first launches), then prefill 512 */
	time_prefill(&g, &s, ids, 64);
	double a = time_prefill(&g, &s, ids, 512), b = time_prefill(&g, &s, ids, 512);
	r->pf512 = a > b ? a : b;
	if (g_prof == 3) { /* one prefill of 512, for ncu --profile-from-start off */
		gpu_state_reset(&s);
		profile_forward(&g, &s, ids, 512, r, ids);
		return;
	}
	/* decode at a short context: 16 prompt tokens, the step captured on first use */
	gpu_state_reset(&s);
	if (gpu_forward(&g, &s, ids, 16, 0) || gpu_decode_greedy(&g, &s, 4, out))
		die("decode warm-up");
	r->dec_short = time_decode(&g, &s, DEC, out);
	if (!g_prof) { /* sampled, as `mlxr run` (top-k 40 ...) and the API (no truncation) default */
		ks_sampler ks;
		if (ks_init(&ks, sh->vocab))
			die("sampler");
		const ks_params k40 = {.mode = KS_TOPK, .top_k = 40, .temperature = 0.8f, .top_p = 0.9f, .penalize = 1,
				       .repeat_last_n = 64, .repeat_penalty = 1.1f, .rng = 12345};
		const ks_params all = {.mode = KS_ALL, .temperature = 1.0f, .rng = 6789};
		r->dec_k40 = time_decode_sampled(&g, &s, &ks, &k40, DEC);
		r->dec_all = time_decode_sampled(&g, &s, &ks, &all, DEC);
		ks_free(&ks);
	}
	if (g_prof == 1) { /* one decode step, kernels launched one by one, for ncu --profile-from-start off */
		const int tok = 1;
		profile_forward(&g, &s, &tok, 1, r, ids);
		return;
	}
	double kv_row = 2.0 * sh->layers * sh->nkv * sh->hd * 4; /* f32 K and V per position */
	r->bound_short = bw / ((double)g.decode_bytes + kv_row * (16 + 1.5 * DEC));
	/* prefill 4096, then decode after it */
	r->pf4k = time_prefill(&g, &s, ids, PF);
	if (g_prof == 2) { /* the step at 4K context */
		const int tok = 1;
		profile_forward(&g, &s, &tok, 1, r, ids);
		return;
	}
	r->dec_4k = time_decode(&g, &s, DEC, out);
	r->bound_4k = bw / ((double)g.decode_bytes + kv_row * (PF + 1.5 * DEC));
	free(ids);
	gpu_state_free(&s);
	gpu_model_free(&g);
}

/* Ends the capture begun by the caller (n launches of one kernel call),
 * replays the graph once to warm up, then 5 timed replays; returns the
 * median seconds per captured launch. */
static double replay_median_s(int n, const char *what)
{
	kc_graph *gr = NULL;
	if (kc_capture_end(&gr))
		die("capture end");
	double ts[5];
	kc_graph_launch(gr);
	for (int r = 0; r < 5; r++) {
		kc_timer_mark(4);
		kc_graph_launch(gr);
		kc_timer_mark(5);
		ts[r] = kc_timer_elapsed(4, 5);
	}
	if (kc_sync())
		die(what);
	qsort(ts, 5, sizeof(double), cmp_d);
	kc_graph_free(gr);
	return ts[2] / n;
}

/* The decode matvec alone at the Llama-3.1-8B and -3.2-1B shapes (4-bit g64 f16
 * scales), SIMT kernel vs tensor-core kernel: launches captured as one
 * graph (as in the decode step), rotating over enough copies of the
 * weights that none is still in L2; GB/s = (codes + scales + biases + x + y)
 * bytes / time per launch. "fused": the default kernel with its residual
 * fusion (kcuda.h): o and down adding into y, q/k/v, gate/up+GLU and
 * lm_head norming x (the norm weight's 16 KB not counted in GB/s). */
static void bench_matvec(double bw)
{
	/* fz: the fused variant the decode step launches for this row: 1 norms
	 * x (q/k/v, gate/up+GLU, lm_head), 2 adds into y (o, down), 0 none.
	 * The 1B rows are Llama-3.2-1B's launches (its step is these at ~7 us
	 * each); "floor" is one 16-row tile of one 512-column step: what a
	 * launch costs in the graph with almost nothing to read */
	static const struct {
		const char *name;
		int count, cols, rows[3], glu, fz;
	} ms[] = {
		{"qkv 3x(4096|1024|1024)x4096", 3, 4096, {4096, 1024, 1024}, 0, 1},
		{"o 4096x4096", 1, 4096, {4096, 0, 0}, 0, 2},
		{"gate/up 2x14336x4096", 2, 4096, {14336, 14336, 0}, 0, 0},
		{"gate/up+GLU 2x14336x4096", 2, 4096, {14336, 14336, 0}, 1, 1},
		{"down 4096x14336", 1, 14336, {4096, 0, 0}, 0, 2},
		{"lm_head 128256x4096", 1, 4096, {128256, 0, 0}, 0, 1},
		{"1B qkv 3x(2048|512|512)x2048", 3, 2048, {2048, 512, 512}, 0, 1},
		{"1B o 2048x2048", 1, 2048, {2048, 0, 0}, 0, 2},
		{"1B gate/up+GLU 2x8192x2048", 2, 2048, {8192, 8192, 0}, 1, 1},
		{"1B down 2048x8192", 1, 8192, {2048, 0, 0}, 0, 2},
		{"floor 16x512", 1, 512, {16, 0, 0}, 0, 2},
	};
	/* columns (kc_matvec_impl): simt 1; wt 3 (tensor cores, warp-per-tile
	 * for large launches); tc 2 (tensor cores, a tile's columns split
	 * across a block's warps: the default before run 27); cp4 / cp8 4 / 5
	 * (the streaming kernel, 4 / 8 warps per block); then the fused
	 * variant of the row under tc, cp4 and the default (0); then i8 6 (the
	 * int8 kernel k_matvec_i8 for every launch), d7 7 (the default with
	 * k_matvec_i8 in place of tc), and their fused variants; p8, p9 (8, 9:
	 * 6, 7 with x staged once per launch by k_mi_prep) and theirs; last
	 * the fused variant under cp8 */
	enum { NV = 17 };
	static const struct {
		int impl, fused;
	} vs[NV] = {{1, 0}, {3, 0}, {2, 0}, {4, 0}, {5, 0}, {2, 1}, {4, 1}, {0, 1},
		    {6, 0}, {7, 0}, {6, 1}, {7, 1}, {8, 0}, {9, 0}, {8, 1}, {9, 1}, {5, 1}};
	printf("\n%-26s %6s %7s %7s %7s %4s %7s %4s %7s %4s %7s %7s %7s %7s %4s %7s %7s %7s %7s %4s %7s %7s %7s %7s\n",
	       "matvec q4g64", "MB", "simt us", "wt us", "tc us", "%bw", "cp4 us", "%bw", "cp8 us", "%bw", "f-tc us",
	       "f-cp4", "f-def", "i8 us", "%bw", "d7 us", "f-i8", "f-d7", "p8 us", "%bw", "p9 us", "f-p8", "f-p9",
	       "f-cp8");
	const char *only = getenv("MV_ONLY"); /* one row of the table (its index), e.g. under ncu */
	for (size_t k = 0; k < sizeof(ms) / sizeof(ms[0]); k++) {
		if (only && atoi(only) != (int)k)
			continue;
		uint64_t bytes = 0;
		int outs = 0;
		for (int i = 0; i < ms[k].count; i++)
			outs += ms[k].rows[i];
		for (int i = 0; i < ms[k].count; i++) {
			uint64_t cb = (uint64_t)ms[k].rows[i] * ms[k].cols / 2, gb = (uint64_t)ms[k].rows[i] * (ms[k].cols / 64) * 4;
			bytes += cb + gb;
		}
		bytes += (uint64_t)ms[k].cols * 4 + (uint64_t)outs * 4;
		int copies = (int)((768ull << 20) / bytes) + 1;
		if (copies > 32)
			copies = 32;
		if (copies < 2)
			copies = 2;
		kq_matrix *mats = calloc((size_t)copies * 3, sizeof(kq_matrix));
		for (int c = 0; c < copies; c++)
			for (int i = 0; i < ms[k].count; i++) {
				float s = 3.4f / 15.0f / sqrtf((float)ms[k].cols);
				if (kc_matrix_random(&mats[c * 3 + i], ms[k].rows[i], ms[k].cols, 4, 64, KDT_F16, 0.5f * s,
						     1.5f * s, 77 + c * 3 + i))
					die("matrix");
			}
		float *x = kc_malloc((size_t)ms[k].cols * 4), *y[3], *nw = kc_malloc((size_t)ms[k].cols * 4);
		if (!x || kc_fill_uniform(x, (size_t)ms[k].cols, -1, 1, 5) || !nw ||
		    kc_fill_uniform(nw, (size_t)ms[k].cols, 0.9f, 1.1f, 6))
			die("x");
		const kc_norm nrm = {nw, 1e-5f, 0};
		const int fz = ms[k].fz;
		for (int i = 0; i < ms[k].count; i++)
			if (!(y[i] = kc_malloc((size_t)ms[k].rows[i] * 4)))
				die("y");
		double us[NV] = {0};
		for (int vi = 0; vi < NV; vi++) {
			int f = vs[vi].fused ? fz : 0;
			if (vs[vi].fused && !f)
				continue;
			kc_matvec_impl(vs[vi].impl);
			int L = copies < 24 ? 24 : copies;
			for (int l = 0; l < L + copies; l++) { /* the first copies: warm-up, outside the capture */
				if (l == copies && (kc_sync() || kc_capture_begin()))
					die("capture");
				int c = l % copies;
				const kq_matrix *mp[3] = {&mats[c * 3], &mats[c * 3 + 1], &mats[c * 3 + 2]};
				int rc = f == 2   ? kc_linear_residual(mp[0], x, NULL, y[0])
					 : f == 1 ? (ms[k].glu ? kc_linear_glu_norm(mp[0], mp[1], x, &nrm, 0, y[0])
							       : kc_linear_multi_norm(ms[k].count, mp, x, &nrm, NULL, y))
					 : ms[k].glu ? kc_linear_glu(mp[0], mp[1], x, 1, 0, y[0], y[1])
						     : kc_linear_multi(ms[k].count, mp, x, 1, NULL, y);
				if (rc)
					die("matvec");
			}
			us[vi] = replay_median_s(L, "matvec run") * 1e6;
		}
		kc_matvec_impl(0);
		double mb = (double)bytes / 1e6;
		printf("%-26s %6.1f %7.2f %7.2f %7.2f %3.0f%% %7.2f %3.0f%% %7.2f %3.0f%% %7.2f %7.2f %7.2f %7.2f %3.0f%% "
		       "%7.2f %7.2f %7.2f %7.2f %3.0f%% %7.2f %7.2f %7.2f %7.2f\n",
		       ms[k].name, mb, us[0], us[1], us[2], 100 * (bytes / (us[2] * 1e-6)) / bw, us[3],
		       100 * (bytes / (us[3] * 1e-6)) / bw, us[4], 100 * (bytes / (us[4] * 1e-6)) / bw, us[5], us[6], us[7],
		       us[8], 100 * (bytes / (us[8] * 1e-6)) / bw, us[9], us[10], us[11], us[12],
		       100 * (bytes / (us[12] * 1e-6)) / bw, us[13], us[14], us[15], us[16]);
		for (int c = 0; c < copies; c++)
			for (int i = 0; i < ms[k].count; i++)
				kc_matrix_free(&mats[c * 3 + i]);
		free(mats);
		kc_free(x);
		kc_free(nw);
		for (int i = 0; i < ms[k].count; i++)
			kc_free(y[i]);
	}
}

/* Decode attention alone (n = 1), us per call: the 8B and 1B heads at a
 * 17- and a 4096-token context in a cache of 4416 rows (the model runs'
 * size), 32 launches captured as one graph over 4 cache copies (145 MB for
 * 8B: the 4K rows are not all in L2), per attention impl (1 the chunk
 * kernels k_attn_dec + merge, 3 run 22's split kernel, 4 the split kernel
 * without its pipelined loads, 0 the split kernel, 2 with twice its blocks;
 * then under 0 the q/k RoPE + KV append launch and the split kernel, and
 * the split kernel doing both: kc_qk_rope_attention, kc_rope_impl 1 and 0);
 * median of 5 replays. */
static void bench_att_dec(void)
{
	static const struct {
		const char *name;
		int nh, nkv, hd;
	} hs[] = {{"8B 32/8 x 128", 32, 8, 128}, {"1B 32/8 x 64", 32, 8, 64}};
	static const int ctxs[2] = {17, 4096}, impls[5] = {1, 3, 4, 0, 2};
	const int maxk = 4416, C = 4, L = 32;
	printf("\n%-22s %6s %10s %10s %10s %10s %10s %10s %10s  (decode attention alone, us per call)\n",
	       "attention n=1", "ctx", "chunk", "split r22", "no pipe", "split", "split x2", "rope;split", "rope+split");
	for (int hi = 0; hi < 2; hi++) {
		const int nh = hs[hi].nh, nkv = hs[hi].nkv, hd = hs[hi].hd;
		size_t cn = (size_t)maxk * nkv * hd, qn = (size_t)nh * hd, scb = kc_attention_scratch(1, nh, nkv, hd, maxk);
		float *k[C], *v[C], *q = kc_malloc(qn * 4), *o = kc_malloc(qn * 4);
		float *kn = kc_malloc((size_t)nkv * hd * 4), *vn = kc_malloc((size_t)nkv * hd * 4);
		float *inv = kc_malloc((size_t)hd / 2 * 4);
		void *sc = kc_malloc(scb);
		int *dpos = kc_malloc(sizeof(int));
		if (!q || !o || !kn || !vn || !inv || !sc || !dpos || kc_fill_uniform(q, qn, -1, 1, 3) ||
		    kc_fill_uniform(kn, (size_t)nkv * hd, -1, 1, 4) || kc_fill_uniform(vn, (size_t)nkv * hd, -1, 1, 5) ||
		    kc_fill_uniform(inv, (size_t)hd / 2, 0, 1, 6))
			die("attention buffers");
		for (int c = 0; c < C; c++)
			if (!(k[c] = kc_malloc(cn * 4)) || !(v[c] = kc_malloc(cn * 4)) ||
			    kc_fill_uniform(k[c], cn, -1, 1, 10 + c) || kc_fill_uniform(v[c], cn, -1, 1, 20 + c))
				die("attention cache");
		for (int ci = 0; ci < 2; ci++) {
			int pos = ctxs[ci] - 1;
			if (kc_upload(dpos, &pos, sizeof(int)))
				die("upload");
			double us[5];
			for (int ii = 0; ii < 5; ii++) {
				kc_attention_impl(impls[ii]);
				if (kc_attention(q, k[0], v[0], o, 1, dpos, nh, nkv, hd, 0.088f, 0, 0.0f, maxk, sc) ||
				    kc_sync() || kc_capture_begin())
					die("attention warm-up");
				for (int l = 0; l < L; l++)
					if (kc_attention(q, k[l % C], v[l % C], o, 1, dpos, nh, nkv, hd, 0.088f, 0, 0.0f, maxk,
							 sc))
						die("attention");
				us[ii] = replay_median_s(L, "attention run") * 1e6;
			}
			/* q/k RoPE + KV append, then attention (kc_qk_rope_attention):
			 * two launches (kc_rope_impl(1)), one (0) */
			double ur[2];
			kc_attention_impl(0);
			for (int ri = 0; ri < 2; ri++) {
				kc_rope_impl(1 - ri);
				for (int l = 0; l <= L; l++) {
					if (l == 1 && (kc_sync() || kc_capture_begin()))
						die("rope attention warm-up");
					if (kc_qk_rope_attention(q, kn, vn, 1, nh, nkv, hd, hd, dpos, inv, 1.0f, NULL, NULL,
								 1e-5f, 0, k[l % C], v[l % C], o, 0.088f, 0, 0.0f, maxk,
								 sc))
						die("rope attention");
				}
				ur[ri] = replay_median_s(L, "rope attention run") * 1e6;
			}
			kc_rope_impl(0);
			printf("%-22s %6d %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f\n", hs[hi].name, ctxs[ci],
			       us[0], us[1], us[2], us[3], us[4], ur[0], ur[1]);
		}
		for (int c = 0; c < C; c++) {
			kc_free(k[c]);
			kc_free(v[c]);
		}
		kc_free(q);
		kc_free(o);
		kc_free(kn);
		kc_free(vn);
		kc_free(inv);
		kc_free(sc);
		kc_free(dpos);
	}
	kc_attention_impl(0);
}

static double time_once(int a, int b)
{
	double t = kc_timer_elapsed(a, b);
	if (t <= 0 || kc_sync())
		die("timing");
	return t;
}

/* kc_attention of n queries at position pos over n + pos keys, 8B heads
 * (32 q, 8 kv, head_dim 128), under attention impl `impl`: median of 3
 * calls, seconds */
static double att_prefill_s(int impl, int n, int pos)
{
	kc_attention_impl(impl);
	const int nh = 32, nkv = 8, hd = 128, keys = n + pos;
	size_t qn = (size_t)n * nh * hd, cn = (size_t)keys * nkv * hd, scb = kc_attention_scratch(n, nh, nkv, hd, keys);
	float *q = kc_malloc(qn * 4), *k = kc_malloc(cn * 4), *v = kc_malloc(cn * 4), *o = kc_malloc(qn * 4);
	int *dpos = kc_malloc(sizeof(int));
	void *sc = kc_malloc(scb);
	if (!q || !k || !v || !o || !dpos || !sc || kc_fill_uniform(q, qn, -1, 1, 1) ||
	    kc_fill_uniform(k, cn, -1, 1, 2) || kc_fill_uniform(v, cn, -1, 1, 3) || kc_upload(dpos, &pos, sizeof(int)))
		die("attention buffers");
	double ts[3];
	for (int r = 0; r < 3; r++) {
		kc_timer_mark(4);
		if (kc_attention(q, k, v, o, n, dpos, nh, nkv, hd, 0.088f, 0, 0.0f, keys, sc))
			die("attention");
		kc_timer_mark(5);
		ts[r] = time_once(4, 5);
	}
	qsort(ts, 3, sizeof(double), cmp_d);
	kc_free(q); kc_free(k); kc_free(v); kc_free(o); kc_free(dpos); kc_free(sc);
	kc_attention_impl(0);
	return ts[1];
}

/* The prefill GEMM alone at the Llama-3.1-8B shapes (q4 g64 f16) for n
 * tokens under each tensor-core variant (kc_gemm_impl 3: run 13's kernel,
 * one launch per matrix; 4: the same kernel, one launch for all matrices;
 * 2: k steps of 64, one launch; 5: 128 tokens per block, one launch; 6: 5
 * with the bias term on the tensor cores; 7: 6 with the scales converted
 * at the fold; 8: 7 with split-K in two where it shortens the waves; 10:
 * 8 with x as one f16 term; 11: 10 with the weights as f16 s c + b in the
 * tile; 12: 11 at 2 blocks per SM; 13: 8's arithmetic on wgmma (sm_90);
 * the default is one of them, kcuda.cu
 * TG_DEFAULT_IMPL): median of 3 calls; TF/s counts 2 rows cols n (the
 * useful work: the tensor-core kernel issues twice that with hi + lo,
 * as much under 10-12). The SIMT GEMM
 * (kc_gemm_impl(1)) left the table in run 28: 5x slower, seconds at 4096. */
static void bench_gemm(const int *ns, int nn)
{
	static const struct {
		const char *name;
		int count, cols, rows[3], glu;
	} ms[] = {
		{"qkv 3x(4096|1024|1024)x4096", 3, 4096, {4096, 1024, 1024}, 0},
		{"o 4096x4096", 1, 4096, {4096, 0, 0}, 0},
		{"gate/up 2x14336x4096", 2, 4096, {14336, 14336, 0}, 0},
		{"GLU+down 4096x14336", 1, 14336, {4096, 0, 0}, 1}, /* the GLU in the x split */
	};
	for (int ni = 0; ni < nn; ni++) {
		int n = ns[ni];
		enum { NI = 11 }; /* the variants, in the header's column order */
		static const int impls[NI] = {3, 4, 2, 5, 6, 7, 8, 13, 10, 11, 12};
		static const char *const hdr[NI] = {"r13 us", "1launch", "tc64 us", "128tok", "+bmma",
						     "+raw", "+splitk", "wgmma", "+f16x", "+f16w", "+2blk"};
		printf("\n%-22s n=%-5d", "gemm 8B q4g64", n);
		for (int i = 0; i < NI; i++)
			printf(" %9s %6s", hdr[i], "TF/s");
		printf("\n");
		double tot[NI] = {0};
		for (size_t k = 0; k < sizeof(ms) / sizeof(ms[0]); k++) {
			kq_matrix mats[3];
			int outs = 0;
			for (int i = 0; i < ms[k].count; i++) {
				float sc = 3.4f / 15.0f / sqrtf((float)ms[k].cols);
				if (kc_matrix_random(&mats[i], ms[k].rows[i], ms[k].cols, 4, 64, KDT_F16, 0.5f * sc, 1.5f * sc,
						     99 + i))
					die("matrix");
				outs += ms[k].rows[i];
			}
			float *x = kc_malloc((size_t)n * ms[k].cols * 4), *u = NULL, *y[3];
			if (!x || kc_fill_uniform(x, (size_t)n * ms[k].cols, -1, 1, 7))
				die("x");
			if (ms[k].glu && (!(u = kc_malloc((size_t)n * ms[k].cols * 4)) ||
					  kc_fill_uniform(u, (size_t)n * ms[k].cols, -1, 1, 8)))
				die("u");
			for (int i = 0; i < ms[k].count; i++)
				if (!(y[i] = kc_malloc((size_t)n * ms[k].rows[i] * 4)))
					die("y");
			const kq_matrix *mp[3] = {&mats[0], &mats[1], &mats[2]};
			double us[NI];
			for (int oi = 0; oi < NI; oi++) {
				kc_gemm_impl(impls[oi]);
				const int reps = 3;
				double ts[3];
				for (int r = 0; r < reps; r++) {
					kc_timer_mark(4);
					if (ms[k].glu ? kc_linear_glu_in(mp[0], x, u, 0, n, NULL, y[0])
						      : kc_linear_multi(ms[k].count, mp, x, n, NULL, y))
						die("gemm");
					kc_timer_mark(5);
					ts[r] = time_once(4, 5);
				}
				qsort(ts, (size_t)reps, sizeof(double), cmp_d);
				us[oi] = ts[reps / 2] * 1e6;
			}
			kc_gemm_impl(0);
			double fl = 2.0 * outs * ms[k].cols * (double)n;
			printf("%-28s", ms[k].name);
			for (int i = 0; i < NI; i++)
				printf(" %9.0f %6.1f", us[i], fl / us[i] * 1e-6);
			printf("\n");
			for (int i = 0; i < NI; i++)
				tot[i] += us[i];
			for (int i = 0; i < ms[k].count; i++) {
				kc_matrix_free(&mats[i]);
				kc_free(y[i]);
			}
			kc_free(x);
			if (u)
				kc_free(u);
		}
		printf("%-28s", "sum (one layer)");
		for (int i = 0; i < NI; i++)
			printf(" %9.0f %6s", tot[i], "");
		printf("\n");
	}
	/* prefill attention of n queries from position 0, 8B heads, per
	 * kernel: the tiled f32 kernel (kc_attention_impl 8), the f32-class
	 * tensor-core kernel (0, the default: hi + lo splits, 3 mmas a
	 * product), the chunk kernels (1),
	 * the tensor-core kernel with f16 operands (5: 64 rows a block; 6,
	 * KC_ATT_FAST: 128); median of 3 calls; TF/s counts the causal half of
	 * 4 nh hd n^2 (one mma's worth: x3 runs three) */
	printf("\n%-28s %9s %9s %8s %8s\n", "attention 8B (32/8 x 128)", "n", "us", "TF/s", "x tiled");
	static const struct {
		int impl;
		const char *name;
	} ai_t[] = {{8, "  tiled (f32)"},  {0, "  x3 tensor cores (f32)"}, {1, "  chunk kernels"},
		    {5, "  fa16 64 rows"}, {6, "  fa16 128 rows"}};
	enum { NA = sizeof(ai_t) / sizeof(ai_t[0]) };
	double tiled[8] = {0};
	for (int ai = 0; ai < NA * nn && nn <= 8; ai++) {
		int ni = ai % nn, impl = ai_t[ai / nn].impl, n = ns[ni];
		const double t = att_prefill_s(impl, n, 0);
		double fl = 4.0 * 32 * 128 * (double)n * n / 2;
		if (impl == 8)
			tiled[ni] = t;
		printf("%-28s %9d %9.0f %8.2f %8.2f   (x32 layers = %.1f ms)\n", ai_t[ai / nn].name, n, t * 1e6,
		       fl / t * 1e-12, tiled[ni] > 0 ? tiled[ni] / t : 0.0, t * 32 * 1e3);
	}
	/* a later prompt call (a chat turn): n queries after 4000 cached keys */
	printf("\n%-28s %9s %9s %9s\n", "attention after 4000 keys", "n", "us", "x tiled");
	static const int nl[3] = {16, 64, 512};
	for (int i = 0; i < 3; i++) {
		const double t8 = att_prefill_s(8, nl[i], 4000), t0 = att_prefill_s(0, nl[i], 4000);
		printf("%-28s %9d %9.0f\n%-28s %9d %9.0f %9.2f\n", "  tiled (f32)", nl[i], t8 * 1e6,
		       "  x3 tensor cores (f32)", nl[i], t0 * 1e6, t8 / t0);
	}
	kc_attention_impl(0);
}

int main(int argc, char **argv)
{
	if (kc_device_count() < 1) {
		printf("UNAVAILABLE: no CUDA device\n");
		return 2;
	}
	if (kc_init(0))
		die("kc_init");
	char dev[128];
	size_t mem = 0;
	kc_device_info(dev, sizeof(dev), &mem);
	double bw = kc_read_bandwidth((size_t)4 << 30);
	if (bw <= 0)
		die("bandwidth");
	printf("device: %s; measured read bandwidth %.0f GB/s (4 GiB reduction, median of 7)\n", dev, bw / 1e9);
	/* "mv": the matvec table alone; otherwise it comes first, then the
	 * models named (all three when none is) */
	int nmodels = 0, mv_only = 0, gemm = 0, att = 0, models = 0; /* "models": no table first */
	for (int i = 1; i < argc; i++) {
		mv_only |= !strcmp(argv[i], "mv");
		gemm |= !strcmp(argv[i], "gemm");
		att |= !strcmp(argv[i], "att");
		models |= !strcmp(argv[i], "models");
		g_prof = !strcmp(argv[i], "prof") ? 1 : !strcmp(argv[i], "prof4k") ? 2 : !strcmp(argv[i], "profpf") ? 3 : g_prof;
		nmodels += strcmp(argv[i], "mv") && strcmp(argv[i], "prof") && strcmp(argv[i], "prof4k") &&
			   strcmp(argv[i], "profpf") &&
			   strcmp(argv[i], "gemm") && strcmp(argv[i], "att") && strcmp(argv[i], "models");
	}
	if (models) {
	} else if (gemm) {
		static const int ns[2] = {512, 4096};
		bench_gemm(ns, 2);
	} else if (att) {
		bench_att_dec();
	} else if (!g_prof) {
		bench_matvec(bw);
	}
	if ((mv_only || gemm || att) && !nmodels)
		return 0;
	impls_from_env(); /* the models under other kernel variants (tests/cuda/impl_env.h) */
	/* MLXR_BENCH_SKIP=mask: decode steps without these phases (GPU_SKIP_*:
	 * 1 q/k/v, 2 attention, 4 o, 8 gate/up + GLU, 16 down, 32 lm_head), so
	 * that the step time less a phase's is its cost in context; the
	 * decode figures are then not a model's */
	const char *skip = getenv("MLXR_BENCH_SKIP");
	if (skip && *skip) {
		char *end;
		long m = strtol(skip, &end, 0);
		if (*end || m < 0 || m > 63)
			die("MLXR_BENCH_SKIP: a mask of 0..63");
		gpu_forward_skip((int)m);
		printf("decode steps without phases %ld (MLXR_BENCH_SKIP)\n", m);
	}
	result res[3];
	int done[3] = {0, 0, 0};
	for (int k = 0; k < 3; k++) {
		int want = nmodels == 0;
		for (int i = 1; i < argc; i++)
			if (!strcmp(argv[i], shapes[k].key))
				want = 1;
		if (!want)
			continue;
		run(&shapes[k], bw, &res[k]);
		done[k] = 1;
		fprintf(stderr, "%s done\n", shapes[k].name);
	}
	printf("\n%-14s %7s %9s %9s %9s %7s %9s %7s %9s %9s\n", "model q4g64", "GB/tok", "pf512", "pf4096", "dec@16", "%bound",
	       "dec@4K", "%bound", "k40@16", "all@16");
	for (int k = 0; k < 3; k++)
		if (done[k])
			printf("%-14s %7.2f %9.0f %9.0f %9.1f %6.0f%% %9.1f %6.0f%% %9.1f %9.1f\n", shapes[k].name, res[k].gb,
			       res[k].pf512, res[k].pf4k, res[k].dec_short, 100 * res[k].dec_short / res[k].bound_short,
			       res[k].dec_4k, 100 * res[k].dec_4k / res[k].bound_4k, res[k].dec_k40, res[k].dec_all);
	printf("(tok/s; decode greedy with the step as a CUDA graph; bound = read bandwidth / (weights + f32 KV read per token);\n"
	       " k40: sampled on the device with T 0.8, top-k 40, top-p 0.9, repeat penalty 1.1 over 64 (mlxr run's defaults);\n"
	       " all: T 1, no truncation (the API's defaults), the pick and the step captured as one graph)\n");
	return 0;
}

/* kernels/cpu/attention_avx512.c — attention over the f16 KV cache with
 * AVX-512 F/BW/VL + F16C (built with the Makefile's AVX512_FLAGS; reached
 * only through k_table_avx512, which dispatch.c hands out after the CPU
 * check). Kept apart from kernels_avx512.c so the matvec and the
 * attention can change independently.
 *
 * K/V rows are f32, or IEEE binary16 (vcvtph2ps: 16 values per
 * instruction), or bf16; every product, sum and the softmax are f32. The
 * element type is a compile-time constant inside each task (dispatched
 * once per task). Tested against the scalar reference by
 * tests/unit/test_kernels.c (TOL_ATTN) for every element type. */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/kinternal.h"
#include "kernels/cpu/simd_avx512.h"

#define AI static inline __attribute__((always_inline))

AI __mmask16 tail_mask(int left)
{
	return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

/* r[j] = sum of the 16 lanes of v[j], j < 16: a transpose-and-add tree,
 * 45 shuffles/adds for 16 sums instead of 16 horizontal reductions (~8
 * each). Level 1 pairs keys within 128-bit lanes, level 2 gathers four
 * keys per 128-bit lane, levels 3-4 add the four 128-bit lanes. */
AI __m512 hsum16x16(const __m512 *v)
{
	__m512 t[8], u[4], w[2];
	for (int i = 0; i < 8; i++)
		t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
	for (int i = 0; i < 4; i++)
		u[i] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
				     _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
	for (int i = 0; i < 2; i++)
		w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
				     _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
	return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
			     _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* ---- prompt (n > 1): one task per (token, query head) ------------------ */

typedef struct {
	const float *q;
	const void *k, *v;
	kdtype kvdt;
	float *out;
	int n, pos0, n_heads, n_kv_heads, head_dim, window;
	float scale, softcap;
} at_job;

#define AT_BLOCK 32

/* Online softmax over blocks of AT_BLOCK keys: no score row, so tasks run
 * in parallel without scratch. */
AI void at_run(const at_job *a, int i, const kdtype dt)
{
	const int hd = a->head_dim, t = i / a->n_heads, h = i % a->n_heads;
	const int kh = h / (a->n_heads / a->n_kv_heads), p = a->pos0 + t;
	const int lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
	const size_t kstride = (size_t)a->n_kv_heads * (size_t)hd;
	const float *q = a->q + ((size_t)t * (size_t)a->n_heads + (size_t)h) * (size_t)hd;
	const size_t kvb = (size_t)kh * (size_t)hd; /* element index of the head in row 0 */
	float acc[K_MAX_HEAD_DIM] __attribute__((aligned(64)));
	float sc[AT_BLOCK] __attribute__((aligned(64)));
	const int nv = (hd + 15) / 16;
	const __mmask16 tail = tail_mask(hd - 16 * (nv - 1));
	memset(acc, 0, sizeof(float) * (size_t)nv * 16);
	float m = -INFINITY, l = 0.0f;
	for (int j0 = lo; j0 <= p; j0 += AT_BLOCK) {
		int nb = p + 1 - j0 < AT_BLOCK ? p + 1 - j0 : AT_BLOCK;
		float bm = -INFINITY;
		for (int jj = 0; jj < nb; jj++) {
			const size_t kr = kvb + (size_t)(j0 + jj) * kstride;
			__m512 d = _mm512_setzero_ps();
			for (int c = 0; c < nv; c++) {
				__mmask16 mk = c == nv - 1 ? tail : 0xffff;
				d = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, q + 16 * c), ld16(dt, a->k, kr + 16 * (size_t)c, mk), d);
			}
			float s = _mm512_reduce_add_ps(d) * a->scale;
			if (a->softcap > 0.0f)
				s = a->softcap * tanhf(s / a->softcap);
			sc[jj] = s;
			bm = s > bm ? s : bm;
		}
		float mn = bm > m ? bm : m;
		float alpha = expf(m - mn); /* m = -inf on the first block: 0 */
		l *= alpha;
		if (alpha != 1.0f)
			for (int c = 0; c < nv; c++)
				_mm512_store_ps(acc + 16 * c, _mm512_mul_ps(_mm512_load_ps(acc + 16 * c), _mm512_set1_ps(alpha)));
		for (int jj = 0; jj < nb; jj += 16) {
			__mmask16 mk = tail_mask(nb - jj);
			__m512 e = exp512(_mm512_sub_ps(_mm512_load_ps(sc + jj), _mm512_set1_ps(mn)));
			e = _mm512_maskz_mov_ps(mk, e);
			_mm512_store_ps(sc + jj, e);
			l += _mm512_reduce_add_ps(e);
		}
		for (int jj = 0; jj < nb; jj++) {
			const size_t vr = kvb + (size_t)(j0 + jj) * kstride;
			__m512 pj = _mm512_set1_ps(sc[jj]);
			for (int c = 0; c < nv; c++) {
				__mmask16 mk = c == nv - 1 ? tail : 0xffff;
				_mm512_store_ps(acc + 16 * c, _mm512_fmadd_ps(pj, ld16(dt, a->v, vr + 16 * (size_t)c, mk),
									      _mm512_load_ps(acc + 16 * c)));
			}
		}
		m = mn;
	}
	float *o = a->out + ((size_t)t * (size_t)a->n_heads + (size_t)h) * (size_t)hd;
	__m512 il = _mm512_set1_ps(1.0f / l);
	for (int c = 0; c < nv; c++) {
		__mmask16 mk = c == nv - 1 ? tail : 0xffff;
		_mm512_mask_storeu_ps(o + 16 * c, mk, _mm512_mul_ps(_mm512_load_ps(acc + 16 * c), il));
	}
}

static void at_task(void *arg, int i)
{
	const at_job *a = arg;
	if (a->kvdt == KDT_F16)
		at_run(a, i, KDT_F16);
	else if (a->kvdt == KDT_F32)
		at_run(a, i, KDT_F32);
	else
		at_run(a, i, KDT_BF16);
}

/* ---- decode (n <= DA_MAX_N, one query token at a time): one task per
 * (run of keys, range of kv heads). Every query head of a GQA group is
 * done together, so each K and V row is read from memory once per token.
 * Keys go 16 at a time:
 *  1. q.k: each K row is loaded (and converted) once and multiplied by
 *     the G query heads (zero-padded copies on the stack), one 16-lane
 *     partial vector per (head, key);
 *  2. the 16 partial vectors of a head are summed by one transpose tree
 *     (hsum16x16), the online-softmax update is done on 16 lanes and the
 *     G rescale factors by one vector exp;
 *  3. V: cb 16-float chunks of head_dim at a time (G x cb = DA_V_CHAINS
 *     accumulators: 16 for Llama-3.2-1B's 4 heads x 64), held in registers
 *     across the 16 keys, each V chunk converted once for the group.
 * Long contexts are split into runs of keys (flash-decoding); a task takes
 * every kv head of its run when the runs alone keep the pool busy
 * (DA_TASKS), and walks the run block by block (16 rows x its heads, in
 * address order), prefetching the K and V rows of the (block, kv head)
 * DA_PF_AHEAD steps ahead, a few lines per key so that the prefetches
 * are spread over the compute. Each run leaves its (acc, max, sum) per
 * head; the runs are merged after the pool returns.
 * Measured (Llama-3.2-1B shape at 4K context, attention alone over 16
 * layers, 2 threads, on a quiet 16-core Xeon where a plain 2-thread read
 * runs at 24 GB/s; ms a token, f32 / f16 cache):
 *   (#3, 856aafa) one task per (kv head, run), the K row loaded (and for
 *     f16 converted) once per head of the group, the V accumulators in
 *     memory (a load and a store per FMA): 37-41 / 28-29 (7 / 4.7 GB/s);
 *   this code without software prefetch: 13.8-14.6 / 10.1-11.4;
 *   prefetch 1 step ahead: 10.5-11.2 / 6.4-7.3; 2 steps: 9.6-10.9 /
 *     4.9-5.1 (24-28 GB/s: the read bandwidth); 4 steps: 10.1-11.3 /
 *     5.0-6.2; 2 steps into L2 only (T1): 10.8-11.4 / 5.8-7.8;
 *   an earlier draft (one V chunk per pass: 4 FMA chains, latency-bound;
 *     the next-but-one block's rows prefetched all at once at the start
 *     of a block, a burst that fills the line-fill buffers): 17.5-19 / 14.
 * One thread: 75 / 46-62 (856aafa) against 20.5-21 / 12.2-12.9.
 * Earlier: (#1) one task per (token, query head), each K/V row read G
 * times; (#2, 80ecbd3) the group and split, one horizontal sum per key
 * and head. */
#define DA_BLOCK 16
#define DA_MAX_G 32		 /* heads a group; more take at_task */
#define DA_MAX_N 8		 /* query tokens taken one decode each; more take at_task */
#define DA_MAX_NV (K_MAX_HEAD_DIM / 16)
#define DA_V_CHAINS 16		 /* V accumulators held in registers */
#define DA_MAX_SPLIT 16
#define DA_MIN_KEYS 256		 /* keys per run, at least: below that a hand-off costs more */
#define DA_TASKS 8		 /* tasks wanted per call: several per thread, so a preempted thread's share is taken over */
#define DA_MAX_TASK_HEADS 64	 /* query heads per task */
#define DA_MAX_TASK_FLOATS 4096 /* query heads x head_dim accumulated per task (16 KiB) */
#define DA_PF_AHEAD 2		 /* software prefetch distance, in (block, kv head) steps */
/* per-run partials, on the caller's stack (96 KiB; kernels.h asks for 256 KiB) */
#define DA_PART_FLOATS 24576

typedef struct {
	const float *q;
	const void *k, *v;
	kdtype kvdt;
	int lo, hi, n_heads, n_kv_heads, head_dim;
	int nsplit, run; /* nsplit runs of `run` keys (a multiple of DA_BLOCK) */
	int kvper;	 /* kv heads per task */
	float scale, softcap;
	float *part; /* [n_heads][nsplit][head_dim + 2]: acc..., max, sum */
} da_job;

/* Index g cb + i of the V accumulators: < G cb <= DA_V_CHAINS when G <
 * DA_V_CHAINS, else cb = 1 and < G <= DA_MAX_G; said so to the compiler,
 * which cannot see it through the generic (run-time G) instance. */
AI int da_ai(int g, int cb, int i)
{
	const int x = g * cb + i;
	if (x >= DA_MAX_G)
		__builtin_unreachable();
	return x;
}

/* Per-task state of the G heads of one kv head. */
typedef struct {
	float *qp;  /* [G][nv * 16] q, zero past head_dim */
	float *acc; /* [G][nv * 16] */
	float *m;   /* [G] running max */
	__m512 *l;  /* [G] running sums, 16 lanes each */
} da_group;

/* One block of 16 keys at rows row0 + ro[jj] (ro: the row offsets in
 * elements; rows past the block's end repeat row 0, finite, and are
 * masked out by kmask) for the G heads of one kv head: kb is the element
 * index of that head in row row0. */
AI void da_block(const da_job *a, const da_group *gr, size_t kb, const size_t *ro, __mmask16 kmask, __m512 *buf,
		 float *pr, size_t pfb, int pfn, const kdtype dt, const int G, const int nv)
{
	const size_t es = dt == KDT_F32 ? 4 : 2, ks = (size_t)a->n_kv_heads * (size_t)a->head_dim;
	const __mmask16 tail = tail_mask(a->head_dim - 16 * (nv - 1));
	if (G < 1 || G > DA_MAX_G || nv < 1 || nv > DA_MAX_NV) /* k_attention_avx512 checked */
		__builtin_unreachable();
	/* 1. partial q.k vectors: buf[g][jj] */
	for (int jj = 0; jj < DA_BLOCK; jj++) {
		if (jj < pfn) /* row jj of a later (block, kv head): element index pfb */
			for (size_t o = 0; o < (size_t)a->head_dim * es; o += 64) {
				_mm_prefetch((const char *)a->k + (pfb + (size_t)jj * ks) * es + o, _MM_HINT_T0);
				_mm_prefetch((const char *)a->v + (pfb + (size_t)jj * ks) * es + o, _MM_HINT_T0);
			}
		__m512 kc[DA_MAX_NV];
#pragma GCC unroll 32
		for (int c = 0; c < nv; c++)
			kc[c] = ld16(dt, a->k, kb + ro[jj] + 16 * (size_t)c, c == nv - 1 ? tail : 0xffff);
#pragma GCC unroll 32
		for (int g = 0; g < G; g++) {
			const float *qg = gr->qp + (size_t)g * (size_t)nv * 16;
			__m512 d = _mm512_mul_ps(_mm512_load_ps(qg), kc[0]);
#pragma GCC unroll 32
			for (int c = 1; c < nv; c++)
				d = _mm512_fmadd_ps(_mm512_load_ps(qg + 16 * c), kc[c], d);
			buf[g * DA_BLOCK + jj] = d;
		}
	}
	/* 2. scores, block max, rescale factors, softmax weights into pr[g][jj] */
	float mo[DA_MAX_G] __attribute__((aligned(64)));
#pragma GCC unroll 32
	for (int g = 0; g < G; g++) {
		__m512 sv = _mm512_mul_ps(hsum16x16(buf + g * DA_BLOCK), _mm512_set1_ps(a->scale));
		if (a->softcap > 0.0f) { /* c tanh(s/c) = c (t-1)/(t+1), t = e^(2s/c): abs error ~1e-7 c */
			__m512 t = exp512(_mm512_mul_ps(sv, _mm512_set1_ps(2.0f / a->softcap)));
			sv = _mm512_mul_ps(_mm512_set1_ps(a->softcap), _mm512_div_ps(_mm512_sub_ps(t, _mm512_set1_ps(1.0f)),
										      _mm512_add_ps(t, _mm512_set1_ps(1.0f))));
		}
		sv = _mm512_mask_blend_ps(kmask, _mm512_set1_ps(-INFINITY), sv);
		_mm512_store_ps(pr + g * DA_BLOCK, sv);
		const float bm = _mm512_reduce_max_ps(sv);
		mo[g] = gr->m[g];
		gr->m[g] = bm > gr->m[g] ? bm : gr->m[g];
	}
	float al[DA_MAX_G] __attribute__((aligned(64)));
	for (int g = 0; g < G; g += 16) { /* e^(old max - new max): 0 on the first block (old = -inf) */
		const __mmask16 gm = tail_mask(G - g);
		_mm512_mask_storeu_ps(al + g, gm,
				      exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(gm, mo + g), _mm512_maskz_loadu_ps(gm, gr->m + g))));
	}
#pragma GCC unroll 32
	for (int g = 0; g < G; g++) {
		const __m512 e = _mm512_maskz_mov_ps(
			kmask, exp512(_mm512_sub_ps(_mm512_load_ps(pr + g * DA_BLOCK), _mm512_set1_ps(gr->m[g]))));
		_mm512_store_ps(pr + g * DA_BLOCK, e);
		gr->l[g] = _mm512_fmadd_ps(gr->l[g], _mm512_set1_ps(al[g]), e);
	}
	/* 3. acc[g] = al[g] acc[g] + sum_jj pr[g][jj] V[jj], cb 16-float
	 * chunks of head_dim at a time: their G x cb accumulators stay in
	 * registers across the 16 keys, and G x cb >= 8 independent FMA chains
	 * (2 ports x 4 cycles) keep the FMA units busy when G >= 2 */
	const int cb = G >= DA_V_CHAINS ? 1 : DA_V_CHAINS / G;
	for (int c0 = 0; c0 < nv; c0 += cb) {
		const int cn = nv - c0 < cb ? nv - c0 : cb;
		__m512 ac[DA_MAX_G] = {0}; /* {0}: for the compiler, which cannot see that all are set */
#pragma GCC unroll 32
		for (int g = 0; g < G; g++)
#pragma GCC unroll 16
			for (int i = 0; i < cn; i++)
				ac[da_ai(g, cb, i)] = _mm512_mul_ps(
					_mm512_load_ps(gr->acc + ((size_t)g * (size_t)nv + (size_t)(c0 + i)) * 16),
					_mm512_set1_ps(al[g]));
		for (int jj = 0; jj < DA_BLOCK; jj++) {
			__m512 vv[DA_V_CHAINS] = {0}; /* {0}: as ac */
#pragma GCC unroll 16
			for (int i = 0; i < cn; i++)
				vv[i] = ld16(dt, a->v, kb + ro[jj] + 16 * (size_t)(c0 + i), c0 + i == nv - 1 ? tail : 0xffff);
#pragma GCC unroll 32
			for (int g = 0; g < G; g++) {
				const __m512 pg = _mm512_set1_ps(pr[g * DA_BLOCK + jj]);
#pragma GCC unroll 16
				for (int i = 0; i < cn; i++)
					ac[da_ai(g, cb, i)] = _mm512_fmadd_ps(pg, vv[i], ac[da_ai(g, cb, i)]);
			}
		}
#pragma GCC unroll 32
		for (int g = 0; g < G; g++)
#pragma GCC unroll 16
			for (int i = 0; i < cn; i++)
				_mm512_store_ps(gr->acc + ((size_t)g * (size_t)nv + (size_t)(c0 + i)) * 16, ac[da_ai(g, cb, i)]);
	}
}

/* The run s of keys for kv heads [kh0, kh1). G and nv are compile-time
 * constants in the common shapes (see da_shapes), so the loops over heads
 * and 16-float chunks unroll and the per-chunk accumulators stay in
 * registers. */
AI void da_run(const da_job *a, int kh0, int kh1, int s, const kdtype dt, const int G, const int nv)
{
	const int hd = a->head_dim, nh = (kh1 - kh0) * G, hp = nv * 16; /* hp: padded head_dim */
	const int j0s = a->lo + s * a->run, j1s = j0s + a->run < a->hi ? j0s + a->run : a->hi;
	const size_t ks = (size_t)a->n_kv_heads * (size_t)hd;
	const int nkv = kh1 - kh0;
	float qp[DA_MAX_TASK_FLOATS] __attribute__((aligned(64)));
	float acc[DA_MAX_TASK_FLOATS] __attribute__((aligned(64)));
	float m[DA_MAX_TASK_HEADS] __attribute__((aligned(64)));
	__m512 l[DA_MAX_TASK_HEADS];
	__m512 buf[DA_MAX_G * DA_BLOCK];
	float pr[DA_MAX_G * DA_BLOCK] __attribute__((aligned(64)));
	for (int h = 0; h < nh; h++) {
		const float *qh = a->q + (size_t)(kh0 * G + h) * (size_t)hd;
		for (int c = 0; c < hp; c += 16)
			_mm512_store_ps(qp + (size_t)h * (size_t)hp + c, _mm512_maskz_loadu_ps(tail_mask(hd - c), qh + c));
		m[h] = -INFINITY;
		l[h] = _mm512_setzero_ps();
	}
	memset(acc, 0, sizeof(float) * (size_t)nh * (size_t)hp);
	for (int j0 = j0s; j0 < j1s; j0 += DA_BLOCK) {
		const int nb = j1s - j0 < DA_BLOCK ? j1s - j0 : DA_BLOCK;
		size_t ro[DA_BLOCK];
		for (int jj = 0; jj < DA_BLOCK; jj++)
			ro[jj] = (size_t)(j0 + (jj < nb ? jj : 0)) * ks;
		for (int kh = kh0; kh < kh1; kh++) {
			const int g0 = (kh - kh0) * G;
			const da_group gr = {qp + (size_t)g0 * (size_t)hp, acc + (size_t)g0 * (size_t)hp, m + g0, l + g0};
			/* prefetch the (block, kv head) DA_PF_AHEAD steps on in the
			 * task's order, its rows inside the run */
			const int st = kh - kh0 + DA_PF_AHEAD, pj0 = j0 + st / nkv * DA_BLOCK;
			const int pfn = j1s - pj0 < DA_BLOCK ? j1s - pj0 : DA_BLOCK;
			const size_t pfb = (size_t)pj0 * ks + (size_t)(kh0 + st % nkv) * (size_t)hd;
			da_block(a, &gr, (size_t)kh * (size_t)hd, ro, tail_mask(nb), buf, pr, pfb, pfn, dt, G, nv);
		}
	}
	for (int h = 0; h < nh; h++) {
		float *p = a->part + ((size_t)(kh0 * G + h) * (size_t)a->nsplit + (size_t)s) * (size_t)(hd + 2);
		memcpy(p, acc + (size_t)h * (size_t)hp, sizeof(float) * (size_t)hd);
		p[hd] = m[h];
		p[hd + 1] = _mm512_reduce_add_ps(l[h]);
	}
}

/* constant shapes: Llama-3.2 / Qwen3-4B (4 heads a group, hd 64/128),
 * Qwen3-0.6B (2, 128), SmolLM2 (3, 64) */
AI void da_shapes(const da_job *a, int kh0, int kh1, int s, const kdtype dt, int G, int nv)
{
	if (G == 4 && nv == 4)
		da_run(a, kh0, kh1, s, dt, 4, 4);
	else if (G == 4 && nv == 8)
		da_run(a, kh0, kh1, s, dt, 4, 8);
	else if (G == 2 && nv == 8)
		da_run(a, kh0, kh1, s, dt, 2, 8);
	else if (G == 3 && nv == 4)
		da_run(a, kh0, kh1, s, dt, 3, 4);
	else
		da_run(a, kh0, kh1, s, dt, G, nv);
}

static void da_task(void *arg, int i)
{
	const da_job *a = arg;
	const int s = i % a->nsplit, kh0 = i / a->nsplit * a->kvper;
	const int kh1 = kh0 + a->kvper < a->n_kv_heads ? kh0 + a->kvper : a->n_kv_heads;
	const int G = a->n_heads / a->n_kv_heads, nv = (a->head_dim + 15) / 16;
	if (a->kvdt == KDT_F16)
		da_shapes(a, kh0, kh1, s, KDT_F16, G, nv);
	else if (a->kvdt == KDT_F32)
		da_shapes(a, kh0, kh1, s, KDT_F32, G, nv);
	else
		da_shapes(a, kh0, kh1, s, KDT_BF16, G, nv);
}

/* Decode of the query q at position p: split, run, merge. */
static void da_decode(const float *q, const void *k, const void *v, kdtype kvdt, float *out, int p, int n_heads,
		      int n_kv_heads, int head_dim, float scale, int window, float softcap)
{
	const int G = n_heads / n_kv_heads, hp = (head_dim + 15) / 16 * 16;
	const int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0, keys = p + 1 - lo;
	const size_t per_split = (size_t)n_heads * (size_t)(head_dim + 2);
	/* runs: at least DA_MIN_KEYS each and a whole number of blocks */
	int ns = keys / DA_MIN_KEYS, cap = (int)(DA_PART_FLOATS / per_split);
	ns = ns < 1 ? 1 : ns > DA_MAX_SPLIT ? DA_MAX_SPLIT : ns;
	ns = ns > cap ? cap : ns;
	int run = (keys + ns - 1) / ns;
	run = (run + DA_BLOCK - 1) / DA_BLOCK * DA_BLOCK;
	ns = (keys + run - 1) / run;
	/* kv heads a task: all of them when the runs alone make DA_TASKS
	 * tasks, fewer otherwise, within the task's stack buffers */
	int ngr = (DA_TASKS + ns - 1) / ns;
	ngr = ngr > n_kv_heads ? n_kv_heads : ngr;
	int kvper = (n_kv_heads + ngr - 1) / ngr;
	while (kvper > 1 && (kvper * G > DA_MAX_TASK_HEADS || kvper * G * hp > DA_MAX_TASK_FLOATS))
		kvper--;
	ngr = (n_kv_heads + kvper - 1) / kvper;
	float part[DA_PART_FLOATS];
	da_job d = {q, k, v, kvdt, lo, p + 1, n_heads, n_kv_heads, head_dim, ns, run, kvper, scale, softcap, part};
	kpool_for(ngr * ns, da_task, &d);
	/* merge the runs: out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s */
	for (int h = 0; h < n_heads; h++) {
		const float *ph = part + (size_t)h * (size_t)ns * (size_t)(head_dim + 2);
		float M = -INFINITY, L = 0.0f, w[DA_MAX_SPLIT];
		for (int s = 0; s < ns; s++)
			M = ph[s * (head_dim + 2) + head_dim] > M ? ph[s * (head_dim + 2) + head_dim] : M;
		for (int s = 0; s < ns; s++) {
			w[s] = expf(ph[s * (head_dim + 2) + head_dim] - M);
			L += w[s] * ph[s * (head_dim + 2) + head_dim + 1];
		}
		float *o = out + (size_t)h * (size_t)head_dim;
		for (int c = 0; c < head_dim; c += 16) {
			__mmask16 mk = tail_mask(head_dim - c);
			__m512 acc = _mm512_setzero_ps();
			for (int s = 0; s < ns; s++)
				acc = _mm512_fmadd_ps(_mm512_set1_ps(w[s]), _mm512_maskz_loadu_ps(mk, ph + s * (head_dim + 2) + c),
						      acc);
			_mm512_mask_storeu_ps(o + c, mk, _mm512_mul_ps(acc, _mm512_set1_ps(1.0f / L)));
		}
	}
}

void k_attention_avx512(const float *q, const void *k, const void *v, kdtype kvdt, float *out, int n, int pos0,
			int n_heads, int n_kv_heads, int head_dim, float scale, int window, float softcap,
			float *scratch)
{
	if (head_dim > K_MAX_HEAD_DIM) {
		k_table_ref.attention(q, k, v, kvdt, out, n, pos0, n_heads, n_kv_heads, head_dim, scale, window, softcap,
				      scratch);
		return;
	}
	const int G = n_heads / n_kv_heads, hp = (head_dim + 15) / 16 * 16;
	if (n <= DA_MAX_N && G <= DA_MAX_G && G * hp <= DA_MAX_TASK_FLOATS &&
	    (size_t)n_heads * (size_t)(head_dim + 2) <= DA_PART_FLOATS) {
		/* a few tokens (a decode step, a short continuation): one
		 * decode each, every K/V row read once per token */
		for (int t = 0; t < n; t++)
			da_decode(q + (size_t)t * (size_t)n_heads * (size_t)head_dim, k, v, kvdt,
				  out + (size_t)t * (size_t)n_heads * (size_t)head_dim, pos0 + t, n_heads, n_kv_heads,
				  head_dim, scale, window, softcap);
		return;
	}
	at_job a = {q, k, v, kvdt, out, n, pos0, n_heads, n_kv_heads, head_dim, window, scale, softcap};
	kpool_for(n * n_heads, at_task, &a);
}

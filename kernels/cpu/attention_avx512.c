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

/* ---- decode (n == 1): one task per (kv head, run of keys) ---------------
 * The task handles every query head of its GQA group, so each K and V row
 * is read from memory once per token (4x less traffic than per query head
 * on Llama-3.2-1B). Long contexts are split into runs of keys
 * (flash-decoding) so that both cores stream even with few kv heads; each
 * run leaves its (acc, max, sum) per head and the runs are merged after the
 * pool returns. Keys go 16 at a time: the 16 q.k partial vectors of a head
 * are summed by one transpose tree (hsum16x16), the softmax update is done
 * on 16 lanes, and each V row is converted once for all heads of the group.
 * Was (#1): one task per (token, query head) over f32 rows: each K/V row
 * read G times, 4 horizontal sums per key and head; (#2, 80ecbd3) the
 * group and split over f32 rows with one horizontal sum per key and head. */
#define DA_BLOCK 16
#define DA_MAX_G 64
#define DA_MAX_SPLIT 8
#define DA_MIN_KEYS 128 /* keys per run, at least: below that a hand-off costs more */
#define DA_MAX_GROUP_FLOATS 8192 /* group heads x head_dim held per task (32 KiB) */
/* per-run partials, on the caller's stack (96 KiB; kernels.h asks for 256 KiB) */
#define DA_PART_FLOATS 24576

typedef struct {
	const float *q;
	const void *k, *v;
	kdtype kvdt;
	int lo, hi, n_heads, n_kv_heads, head_dim, nsplit, run;
	float scale, softcap;
	float *part; /* [n_heads][nsplit][head_dim + 2]: acc..., max, sum */
} da_job;

/* The run of keys [j0s, j1s) for the G heads h0.. of kv head kh. G and nv
 * are compile-time constants in the common shapes (see da_task), so the
 * loops over heads and 16-float chunks unroll. */
AI void da_run(const da_job *a, int kh, int s, const kdtype dt, const int G, const int nv)
{
	const int hd = a->head_dim, h0 = kh * G;
	const int j0s = a->lo + s * a->run, j1s = j0s + a->run < a->hi ? j0s + a->run : a->hi;
	const size_t kstride = (size_t)a->n_kv_heads * (size_t)hd;
	const size_t kvb = (size_t)kh * (size_t)hd; /* element index of the head in row 0 */
	const __mmask16 tail = tail_mask(hd - 16 * (nv - 1));
	float acc[DA_MAX_GROUP_FLOATS] __attribute__((aligned(64)));
	float pr[DA_MAX_G * DA_BLOCK] __attribute__((aligned(64))); /* [G][16] softmax weights */
	__m512 d[DA_BLOCK];
	float m[DA_MAX_G], l[DA_MAX_G];
	const float *q = a->q + (size_t)h0 * (size_t)hd;
	memset(acc, 0, sizeof(float) * (size_t)G * (size_t)nv * 16);
	for (int g = 0; g < G; g++)
		m[g] = -INFINITY, l[g] = 0.0f;
	for (int j0 = j0s; j0 < j1s; j0 += DA_BLOCK) {
		const int nb = j1s - j0 < DA_BLOCK ? j1s - j0 : DA_BLOCK;
		const __mmask16 kmask = tail_mask(nb);
		for (int g = 0; g < G; g++) {
			const float *qg = q + (size_t)g * (size_t)hd;
			/* q.k for 16 keys: 16 independent partial vectors (keys past
			 * nb load as zeros), summed by one tree */
#pragma GCC unroll 16
			for (int jj = 0; jj < DA_BLOCK; jj++)
				d[jj] = _mm512_setzero_ps();
			for (int c = 0; c < nv; c++) {
				const __mmask16 mk = c == nv - 1 ? tail : 0xffff;
				const __m512 qc = _mm512_maskz_loadu_ps(mk, qg + 16 * c);
				const size_t kc = kvb + (size_t)j0 * kstride + 16 * (size_t)c;
#pragma GCC unroll 16
				for (int jj = 0; jj < DA_BLOCK; jj++)
					d[jj] = _mm512_fmadd_ps(qc, ld16(dt, a->k, kc + (size_t)jj * kstride, jj < nb ? mk : 0),
								d[jj]);
			}
			__m512 sv = _mm512_mul_ps(hsum16x16(d), _mm512_set1_ps(a->scale));
			if (a->softcap > 0.0f) {
				float tmp[16];
				_mm512_storeu_ps(tmp, sv);
				for (int jj = 0; jj < 16; jj++)
					tmp[jj] = a->softcap * tanhf(tmp[jj] / a->softcap);
				sv = _mm512_loadu_ps(tmp);
			}
			sv = _mm512_mask_blend_ps(kmask, _mm512_set1_ps(-INFINITY), sv);
			float bm = _mm512_reduce_max_ps(sv);
			float mn = bm > m[g] ? bm : m[g];
			float alpha = expf(m[g] - mn); /* m = -inf on the first block: 0 */
			__m512 e = _mm512_maskz_mov_ps(kmask, exp512(_mm512_sub_ps(sv, _mm512_set1_ps(mn))));
			l[g] = l[g] * alpha + _mm512_reduce_add_ps(e);
			m[g] = mn;
			_mm512_store_ps(pr + g * DA_BLOCK, e);
			if (alpha != 1.0f) {
				float *ag = acc + (size_t)g * (size_t)nv * 16;
				for (int c = 0; c < nv; c++)
					_mm512_store_ps(ag + 16 * c, _mm512_mul_ps(_mm512_load_ps(ag + 16 * c), _mm512_set1_ps(alpha)));
			}
		}
		/* acc[g] += p[g][j] V[j]: each V chunk converted once for the group */
		for (int jj = 0; jj < nb; jj++) {
			const size_t vr = kvb + (size_t)(j0 + jj) * kstride;
#pragma GCC unroll 8
			for (int c = 0; c < nv; c++) {
				__mmask16 mk = c == nv - 1 ? tail : 0xffff;
				__m512 vv = ld16(dt, a->v, vr + 16 * (size_t)c, mk);
				for (int g = 0; g < G; g++) {
					float *ag = acc + ((size_t)g * (size_t)nv + (size_t)c) * 16;
					_mm512_store_ps(ag, _mm512_fmadd_ps(_mm512_set1_ps(pr[g * DA_BLOCK + jj]), vv, _mm512_load_ps(ag)));
				}
			}
		}
	}
	for (int g = 0; g < G; g++) {
		float *p = a->part + ((size_t)(h0 + g) * (size_t)a->nsplit + (size_t)s) * (size_t)(hd + 2);
		memcpy(p, acc + (size_t)g * (size_t)nv * 16, sizeof(float) * (size_t)hd);
		p[hd] = m[g];
		p[hd + 1] = l[g];
	}
}

/* constant shapes: Llama-3.2 / Qwen3-4B (4 heads a group, hd 64/128),
 * Qwen3-0.6B (2, 128), SmolLM2 (3, 64) */
AI void da_shapes(const da_job *a, int kh, int s, const kdtype dt, int G, int nv)
{
	if (G == 4 && nv == 4)
		da_run(a, kh, s, dt, 4, 4);
	else if (G == 4 && nv == 8)
		da_run(a, kh, s, dt, 4, 8);
	else if (G == 2 && nv == 8)
		da_run(a, kh, s, dt, 2, 8);
	else if (G == 3 && nv == 4)
		da_run(a, kh, s, dt, 3, 4);
	else
		da_run(a, kh, s, dt, G, nv);
}

static void da_task(void *arg, int i)
{
	const da_job *a = arg;
	const int kh = i / a->nsplit, s = i % a->nsplit;
	const int G = a->n_heads / a->n_kv_heads, nv = (a->head_dim + 15) / 16;
	if (a->kvdt == KDT_F16)
		da_shapes(a, kh, s, KDT_F16, G, nv);
	else if (a->kvdt == KDT_F32)
		da_shapes(a, kh, s, KDT_F32, G, nv);
	else
		da_run(a, kh, s, KDT_BF16, G, nv);
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
	const int G = n_heads / n_kv_heads, nv = (head_dim + 15) / 16;
	const size_t per_split = (size_t)n_heads * (size_t)(head_dim + 2);
	if (n == 1 && G <= DA_MAX_G && (size_t)G * (size_t)nv * 16 <= DA_MAX_GROUP_FLOATS && per_split <= DA_PART_FLOATS) {
		const int p = pos0, lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0, keys = p + 1 - lo;
		/* runs: enough for every thread when there are few kv heads,
		 * each at least DA_MIN_KEYS and a whole number of blocks */
		int ns = keys / DA_MIN_KEYS, cap = (int)(DA_PART_FLOATS / per_split);
		ns = ns < 1 ? 1 : ns > DA_MAX_SPLIT ? DA_MAX_SPLIT : ns;
		ns = ns > cap ? cap : ns;
		int run = (keys + ns - 1) / ns;
		run = (run + DA_BLOCK - 1) / DA_BLOCK * DA_BLOCK;
		ns = (keys + run - 1) / run;
		float part[DA_PART_FLOATS];
		da_job d = {q, k, v, kvdt, lo, p + 1, n_heads, n_kv_heads, head_dim, ns, run, scale, softcap, part};
		kpool_for(n_kv_heads * ns, da_task, &d);
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
		return;
	}
	at_job a = {q, k, v, kvdt, out, n, pos0, n_heads, n_kv_heads, head_dim, window, scale, softcap};
	kpool_for(n * n_heads, at_task, &a);
}

/* kernels/cpu/attention_avx2.c — attention over the f16 KV cache with
 * AVX2 + FMA + F16C (built with the Makefile's AVX2_FLAGS; reached only
 * through k_table_avx2 after dispatch.c's CPU check). Kept apart from
 * kernels_avx2.c so the matvec and the attention can change independently.
 * Same structure as attention_avx512.c on 8 lanes; K/V rows are f32,
 * f16 (vcvtph2ps) or bf16, all arithmetic f32. */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/kinternal.h"
#include "kernels/cpu/simd_avx2.h"

#define AI static inline __attribute__((always_inline))

/* r[j] = sum of the 8 lanes of v[j], j < 8 (hadd tree, then the two
 * 128-bit halves). */
AI __m256 hsum8x8(const __m256 *v)
{
	__m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
	__m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
	__m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
	return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* q . k over hd values, k at element k0 of the cache (scalar tail past
 * the last multiple of 8) */
AI float dot_kv(const kdtype dt, const float *q, const void *k, size_t k0, int hd)
{
	__m256 d0 = _mm256_setzero_ps(), d1 = _mm256_setzero_ps();
	int c = 0;
	for (; c + 16 <= hd; c += 16) {
		d0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), ld8(dt, k, k0 + (size_t)c), d0);
		d1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + c + 8), ld8(dt, k, k0 + (size_t)c + 8), d1);
	}
	for (; c + 8 <= hd; c += 8)
		d0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), ld8(dt, k, k0 + (size_t)c), d0);
	float s = hsum(_mm256_add_ps(d0, d1));
	for (; c < hd; c++)
		s += q[c] * k_load(dt, k, k0 + (size_t)c);
	return s;
}

/* ---- prompt (n > 1), and head_dim not a multiple of 8 ------------------ */

typedef struct {
	const float *q;
	const void *k, *v;
	kdtype kvdt;
	float *out;
	int n, pos0, n_heads, n_kv_heads, head_dim, window;
	float scale, softcap;
} at_job;

#define AT_BLOCK 32

/* One (token, head), online softmax over blocks of AT_BLOCK keys. */
AI void at_run(const at_job *a, int i, const kdtype dt)
{
	const int hd = a->head_dim, t = i / a->n_heads, h = i % a->n_heads;
	const int kh = h / (a->n_heads / a->n_kv_heads), p = a->pos0 + t;
	const int lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
	const size_t kstride = (size_t)a->n_kv_heads * (size_t)hd;
	const float *q = a->q + ((size_t)t * (size_t)a->n_heads + (size_t)h) * (size_t)hd;
	const size_t kvb = (size_t)kh * (size_t)hd; /* element index of the head in row 0 */
	float acc[K_MAX_HEAD_DIM];
	float sc[AT_BLOCK];
	memset(acc, 0, sizeof(float) * (size_t)hd);
	float m = -INFINITY, l = 0.0f;
	for (int j0 = lo; j0 <= p; j0 += AT_BLOCK) {
		int nb = p + 1 - j0 < AT_BLOCK ? p + 1 - j0 : AT_BLOCK;
		float bm = -INFINITY;
		for (int jj = 0; jj < nb; jj++) {
			float s = dot_kv(dt, q, a->k, kvb + (size_t)(j0 + jj) * kstride, hd) * a->scale;
			if (a->softcap > 0.0f)
				s = a->softcap * tanhf(s / a->softcap);
			sc[jj] = s;
			bm = s > bm ? s : bm;
		}
		float mn = bm > m ? bm : m;
		float alpha = expf(m - mn);
		l *= alpha;
		if (alpha != 1.0f)
			for (int c = 0; c < hd; c++)
				acc[c] *= alpha;
		for (int jj = nb; jj < AT_BLOCK; jj++)
			sc[jj] = mn; /* unused lanes: finite input */
		for (int jj = 0; jj < AT_BLOCK; jj += 8)
			_mm256_storeu_ps(sc + jj, exp256(_mm256_sub_ps(_mm256_loadu_ps(sc + jj), _mm256_set1_ps(mn))));
		for (int jj = 0; jj < nb; jj++) {
			const size_t vr = kvb + (size_t)(j0 + jj) * kstride;
			float pj = sc[jj];
			__m256 pv = _mm256_set1_ps(pj);
			l += pj;
			int c = 0;
			for (; c + 8 <= hd; c += 8)
				_mm256_storeu_ps(acc + c, _mm256_fmadd_ps(pv, ld8(dt, a->v, vr + (size_t)c), _mm256_loadu_ps(acc + c)));
			for (; c < hd; c++)
				acc[c] += pj * k_load(dt, a->v, vr + (size_t)c);
		}
		m = mn;
	}
	float *o = a->out + ((size_t)t * (size_t)a->n_heads + (size_t)h) * (size_t)hd;
	float il = 1.0f / l;
	for (int c = 0; c < hd; c++)
		o[c] = acc[c] * il;
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

/* ---- decode (n <= DA_MAX_N): as attention_avx512.c on 8 lanes ---------
 * One task per (run of keys, range of kv heads); every query head of a
 * GQA group per K/V row; blocks of 8 keys: q.k partial vectors with each
 * K chunk loaded once for the group, one transpose tree (hsum8x8) per
 * head, online softmax on 8 lanes, V accumulators in registers for 8
 * keys (DA_V_CHAINS of the 16 ymm registers), software prefetch
 * DA_PF_AHEAD (block, kv head) steps ahead; runs merged after the pool.
 * head_dim must be a multiple of 8 here (all models in use); others take
 * at_task. Llama-3.2-1B shape at 4K, attention alone over 16 layers, 2
 * threads of a quiet 16-core Xeon, f32 / f16 cache: 14.2-16.2 / 9.4-11.9
 * ms a token, against 28.5-33.8 / 21-21.8 for the previous kernel (one
 * task per (kv head, run), V accumulators in memory, no prefetch). */
#define DA_BLOCK 8
#define DA_MAX_G 32
#define DA_MAX_N 8
#define DA_MAX_NV (K_MAX_HEAD_DIM / 8)
#define DA_V_CHAINS 8
#define DA_MAX_SPLIT 16
#define DA_MIN_KEYS 256
#define DA_TASKS 8
#define DA_MAX_TASK_HEADS 64
#define DA_MAX_TASK_FLOATS 4096
#define DA_PF_AHEAD 2
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

AI int da_ai(int g, int cb, int i)
{
	const int x = g * cb + i;
	if (x >= DA_MAX_G)
		__builtin_unreachable();
	return x;
}

typedef struct {
	const float *q; /* [G][head_dim] */
	float *acc;	/* [G][head_dim] */
	float *m;	/* [G] running max */
	__m256 *l;	/* [G] running sums, 8 lanes each */
} da_group;

AI float hmax8(__m256 v)
{
	__m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	a = _mm_max_ps(a, _mm_movehl_ps(a, a));
	a = _mm_max_ss(a, _mm_movehdup_ps(a));
	return _mm_cvtss_f32(a);
}

/* One block of 8 keys (rows past its end repeat row 0 and are masked by
 * kmask, all ones in the lanes of real keys) for the G heads of one kv
 * head at element kb of row 0; prefetches pfn rows from element pfb. */
AI void da_block(const da_job *a, const da_group *gr, size_t kb, const size_t *ro, __m256 kmask, __m256 *buf,
		 float *pr, size_t pfb, int pfn, const kdtype dt, const int G, const int nv)
{
	const int hd = a->head_dim;
	const size_t es = dt == KDT_F32 ? 4 : 2, ks = (size_t)a->n_kv_heads * (size_t)hd;
	if (G < 1 || G > DA_MAX_G || nv < 1 || nv > DA_MAX_NV) /* k_attention_avx2 checked */
		__builtin_unreachable();
	/* 1. partial q.k vectors buf[g][jj], each K chunk loaded once */
	for (int jj = 0; jj < DA_BLOCK; jj++) {
		if (jj < pfn)
			for (size_t o = 0; o < (size_t)hd * es; o += 64) {
				_mm_prefetch((const char *)a->k + (pfb + (size_t)jj * ks) * es + o, _MM_HINT_T0);
				_mm_prefetch((const char *)a->v + (pfb + (size_t)jj * ks) * es + o, _MM_HINT_T0);
			}
		__m256 d[DA_MAX_G] = {0}; /* {0}: for the compiler, which cannot see g < G */
		for (int c = 0; c < nv; c++) {
			const __m256 kc = ld8(dt, a->k, kb + ro[jj] + 8 * (size_t)c);
#pragma GCC unroll 32
			for (int g = 0; g < G; g++)
				d[g] = _mm256_fmadd_ps(_mm256_loadu_ps(gr->q + (size_t)g * (size_t)hd + 8 * c), kc, d[g]);
		}
#pragma GCC unroll 32
		for (int g = 0; g < G; g++)
			buf[g * DA_BLOCK + jj] = d[g];
	}
	/* 2. scores, block max, rescale factors, softmax weights pr[g][jj] */
	float mo[DA_MAX_G] __attribute__((aligned(32))), mn[DA_MAX_G] __attribute__((aligned(32)));
	const __m256 ninf = _mm256_set1_ps(-INFINITY);
#pragma GCC unroll 32
	for (int g = 0; g < G; g++) {
		__m256 sv = _mm256_mul_ps(hsum8x8(buf + g * DA_BLOCK), _mm256_set1_ps(a->scale));
		if (a->softcap > 0.0f) { /* c tanh(s/c) = c (t-1)/(t+1), t = e^(2s/c) */
			__m256 t = exp256(_mm256_mul_ps(sv, _mm256_set1_ps(2.0f / a->softcap)));
			sv = _mm256_mul_ps(_mm256_set1_ps(a->softcap), _mm256_div_ps(_mm256_sub_ps(t, _mm256_set1_ps(1.0f)),
										      _mm256_add_ps(t, _mm256_set1_ps(1.0f))));
		}
		sv = _mm256_blendv_ps(ninf, sv, kmask);
		_mm256_store_ps(pr + g * DA_BLOCK, sv);
		const float bm = hmax8(sv);
		mo[g] = gr->m[g];
		mn[g] = gr->m[g] = bm > gr->m[g] ? bm : gr->m[g];
	}
	for (int g = G; g % 8; g++)
		mo[g] = mn[g] = 0.0f;
	float al[DA_MAX_G] __attribute__((aligned(32)));
	for (int g = 0; g < G; g += 8) /* e^(old max - new max): ~0 on the first block (old = -inf) */
		_mm256_store_ps(al + g, exp256(_mm256_sub_ps(_mm256_load_ps(mo + g), _mm256_load_ps(mn + g))));
#pragma GCC unroll 32
	for (int g = 0; g < G; g++) {
		const __m256 e = _mm256_and_ps(
			kmask, exp256(_mm256_sub_ps(_mm256_load_ps(pr + g * DA_BLOCK), _mm256_set1_ps(gr->m[g]))));
		_mm256_store_ps(pr + g * DA_BLOCK, e);
		gr->l[g] = _mm256_fmadd_ps(gr->l[g], _mm256_set1_ps(al[g]), e);
	}
	/* 3. acc = al acc + sum_jj pr[g][jj] V[jj], cb 8-float chunks at a time */
	const int cb = G >= DA_V_CHAINS ? 1 : DA_V_CHAINS / G;
	for (int c0 = 0; c0 < nv; c0 += cb) {
		const int cn = nv - c0 < cb ? nv - c0 : cb;
		__m256 ac[DA_MAX_G] = {0}; /* {0}: as d */
#pragma GCC unroll 32
		for (int g = 0; g < G; g++)
#pragma GCC unroll 8
			for (int i = 0; i < cn; i++)
				ac[da_ai(g, cb, i)] = _mm256_mul_ps(_mm256_loadu_ps(gr->acc + (size_t)g * (size_t)hd + 8 * (c0 + i)),
								    _mm256_set1_ps(al[g]));
		for (int jj = 0; jj < DA_BLOCK; jj++) {
			__m256 vv[DA_V_CHAINS] = {0}; /* {0}: as d */
#pragma GCC unroll 8
			for (int i = 0; i < cn; i++)
				vv[i] = ld8(dt, a->v, kb + ro[jj] + 8 * (size_t)(c0 + i));
#pragma GCC unroll 32
			for (int g = 0; g < G; g++) {
				const __m256 pg = _mm256_broadcast_ss(pr + g * DA_BLOCK + jj);
#pragma GCC unroll 8
				for (int i = 0; i < cn; i++)
					ac[da_ai(g, cb, i)] = _mm256_fmadd_ps(pg, vv[i], ac[da_ai(g, cb, i)]);
			}
		}
#pragma GCC unroll 32
		for (int g = 0; g < G; g++)
#pragma GCC unroll 8
			for (int i = 0; i < cn; i++)
				_mm256_storeu_ps(gr->acc + (size_t)g * (size_t)hd + 8 * (c0 + i), ac[da_ai(g, cb, i)]);
	}
}

/* The run s of keys for kv heads [kh0, kh1), blocks in address order. */
AI void da_run(const da_job *a, int kh0, int kh1, int s, const kdtype dt, const int G, const int nv)
{
	const int hd = a->head_dim, nh = (kh1 - kh0) * G, nkv = kh1 - kh0;
	const int j0s = a->lo + s * a->run, j1s = j0s + a->run < a->hi ? j0s + a->run : a->hi;
	const size_t ks = (size_t)a->n_kv_heads * (size_t)hd;
	float acc[DA_MAX_TASK_FLOATS];
	float m[DA_MAX_TASK_HEADS];
	__m256 l[DA_MAX_TASK_HEADS];
	__m256 buf[DA_MAX_G * DA_BLOCK];
	float pr[DA_MAX_G * DA_BLOCK] __attribute__((aligned(32)));
	for (int h = 0; h < nh; h++) {
		m[h] = -INFINITY;
		l[h] = _mm256_setzero_ps();
	}
	memset(acc, 0, sizeof(float) * (size_t)nh * (size_t)hd);
	for (int j0 = j0s; j0 < j1s; j0 += DA_BLOCK) {
		const int nb = j1s - j0 < DA_BLOCK ? j1s - j0 : DA_BLOCK;
		size_t ro[DA_BLOCK];
		for (int jj = 0; jj < DA_BLOCK; jj++)
			ro[jj] = (size_t)(j0 + (jj < nb ? jj : 0)) * ks;
		const __m256 kmask = _mm256_castsi256_ps(
			_mm256_cmpgt_epi32(_mm256_set1_epi32(nb), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
		for (int kh = kh0; kh < kh1; kh++) {
			const int g0 = (kh - kh0) * G;
			const da_group gr = {a->q + (size_t)(kh * G) * (size_t)hd, acc + (size_t)g0 * (size_t)hd, m + g0,
					     l + g0};
			const int st = kh - kh0 + DA_PF_AHEAD, pj0 = j0 + st / nkv * DA_BLOCK;
			const int pfn = j1s - pj0 < DA_BLOCK ? j1s - pj0 : DA_BLOCK;
			const size_t pfb = (size_t)pj0 * ks + (size_t)(kh0 + st % nkv) * (size_t)hd;
			da_block(a, &gr, (size_t)kh * (size_t)hd, ro, kmask, buf, pr, pfb, pfn, dt, G, nv);
		}
	}
	for (int h = 0; h < nh; h++) {
		float *p = a->part + ((size_t)(kh0 * G + h) * (size_t)a->nsplit + (size_t)s) * (size_t)(hd + 2);
		memcpy(p, acc + (size_t)h * (size_t)hd, sizeof(float) * (size_t)hd);
		p[hd] = m[h];
		p[hd + 1] = hsum(l[h]);
	}
}

AI void da_shapes(const da_job *a, int kh0, int kh1, int s, const kdtype dt, int G, int nv)
{
	if (G == 4 && nv == 8)
		da_run(a, kh0, kh1, s, dt, 4, 8);
	else if (G == 4 && nv == 16)
		da_run(a, kh0, kh1, s, dt, 4, 16);
	else if (G == 2 && nv == 16)
		da_run(a, kh0, kh1, s, dt, 2, 16);
	else if (G == 3 && nv == 8)
		da_run(a, kh0, kh1, s, dt, 3, 8);
	else
		da_run(a, kh0, kh1, s, dt, G, nv);
}

static void da_task(void *arg, int i)
{
	const da_job *a = arg;
	const int s = i % a->nsplit, kh0 = i / a->nsplit * a->kvper;
	const int kh1 = kh0 + a->kvper < a->n_kv_heads ? kh0 + a->kvper : a->n_kv_heads;
	const int G = a->n_heads / a->n_kv_heads, nv = a->head_dim / 8;
	if (a->kvdt == KDT_F16)
		da_shapes(a, kh0, kh1, s, KDT_F16, G, nv);
	else if (a->kvdt == KDT_F32)
		da_shapes(a, kh0, kh1, s, KDT_F32, G, nv);
	else
		da_shapes(a, kh0, kh1, s, KDT_BF16, G, nv);
}

/* Decode of the query q at position p: split, run, merge (as
 * attention_avx512.c). */
static void da_decode(const float *q, const void *k, const void *v, kdtype kvdt, float *out, int p, int n_heads,
		      int n_kv_heads, int head_dim, float scale, int window, float softcap)
{
	const int G = n_heads / n_kv_heads;
	const int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0, keys = p + 1 - lo;
	const size_t per_split = (size_t)n_heads * (size_t)(head_dim + 2);
	int ns = keys / DA_MIN_KEYS, cap = (int)(DA_PART_FLOATS / per_split);
	ns = ns < 1 ? 1 : ns > DA_MAX_SPLIT ? DA_MAX_SPLIT : ns;
	ns = ns > cap ? cap : ns;
	int run = (keys + ns - 1) / ns;
	run = (run + DA_BLOCK - 1) / DA_BLOCK * DA_BLOCK;
	ns = (keys + run - 1) / run;
	int ngr = (DA_TASKS + ns - 1) / ns;
	ngr = ngr > n_kv_heads ? n_kv_heads : ngr;
	int kvper = (n_kv_heads + ngr - 1) / ngr;
	while (kvper > 1 && (kvper * G > DA_MAX_TASK_HEADS || kvper * G * head_dim > DA_MAX_TASK_FLOATS))
		kvper--;
	ngr = (n_kv_heads + kvper - 1) / kvper;
	float part[DA_PART_FLOATS];
	da_job d = {q, k, v, kvdt, lo, p + 1, n_heads, n_kv_heads, head_dim, ns, run, kvper, scale, softcap, part};
	kpool_for(ngr * ns, da_task, &d);
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
		for (int c = 0; c < head_dim; c++) {
			float acc = 0.0f;
			for (int s = 0; s < ns; s++)
				acc += w[s] * ph[s * (head_dim + 2) + c];
			o[c] = acc / L;
		}
	}
}

void k_attention_avx2(const float *q, const void *k, const void *v, kdtype kvdt, float *out, int n, int pos0,
		      int n_heads, int n_kv_heads, int head_dim, float scale, int window, float softcap, float *scratch)
{
	if (head_dim > K_MAX_HEAD_DIM) {
		k_table_ref.attention(q, k, v, kvdt, out, n, pos0, n_heads, n_kv_heads, head_dim, scale, window, softcap,
				      scratch);
		return;
	}
	const int G = n_heads / n_kv_heads;
	if (n <= DA_MAX_N && head_dim % 8 == 0 && G <= DA_MAX_G && G * head_dim <= DA_MAX_TASK_FLOATS &&
	    (size_t)n_heads * (size_t)(head_dim + 2) <= DA_PART_FLOATS) {
		for (int t = 0; t < n; t++)
			da_decode(q + (size_t)t * (size_t)n_heads * (size_t)head_dim, k, v, kvdt,
				  out + (size_t)t * (size_t)n_heads * (size_t)head_dim, pos0 + t, n_heads, n_kv_heads,
				  head_dim, scale, window, softcap);
		return;
	}
	at_job a = {q, k, v, kvdt, out, n, pos0, n_heads, n_kv_heads, head_dim, window, scale, softcap};
	kpool_for(n * n_heads, at_task, &a);
}

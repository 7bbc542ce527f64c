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

/* ---- decode (n == 1): one task per (kv head, run of keys) ---------------
 * As attention_avx512.c: every query head of the GQA group together (each
 * K/V row read once per token), runs of keys split across the pool and
 * merged, 8 keys at a time with one transpose tree for their q.k sums.
 * head_dim must be a multiple of 8 here (all models in use); others take
 * at_task. */
#define DA_BLOCK 8
#define DA_MAX_G 64
#define DA_MAX_SPLIT 8
#define DA_MIN_KEYS 128
#define DA_MAX_GROUP_FLOATS 8192
#define DA_PART_FLOATS 24576

typedef struct {
	const float *q;
	const void *k, *v;
	kdtype kvdt;
	int lo, hi, n_heads, n_kv_heads, head_dim, nsplit, run;
	float scale, softcap;
	float *part; /* [n_heads][nsplit][head_dim + 2]: acc..., max, sum */
} da_job;

AI void da_run(const da_job *a, int kh, int s, const kdtype dt, const int G, const int nv)
{
	const int hd = a->head_dim, h0 = kh * G;
	const int j0s = a->lo + s * a->run, j1s = j0s + a->run < a->hi ? j0s + a->run : a->hi;
	const size_t kstride = (size_t)a->n_kv_heads * (size_t)hd;
	const size_t kvb = (size_t)kh * (size_t)hd; /* element index of the head in row 0 */
	float acc[DA_MAX_GROUP_FLOATS] __attribute__((aligned(32)));
	float pr[DA_MAX_G * DA_BLOCK] __attribute__((aligned(32)));
	__m256 d[DA_BLOCK];
	float m[DA_MAX_G], l[DA_MAX_G];
	const float *q = a->q + (size_t)h0 * (size_t)hd;
	memset(acc, 0, sizeof(float) * (size_t)G * (size_t)nv * 8);
	for (int g = 0; g < G; g++)
		m[g] = -INFINITY, l[g] = 0.0f;
	for (int j0 = j0s; j0 < j1s; j0 += DA_BLOCK) {
		const int nb = j1s - j0 < DA_BLOCK ? j1s - j0 : DA_BLOCK;
		float sc[DA_BLOCK] __attribute__((aligned(32)));
		for (int g = 0; g < G; g++) {
			const float *qg = q + (size_t)g * (size_t)hd;
			/* 8 independent partial vectors (rows past nb repeat row 0:
			 * finite, and their scores are dropped below) */
#pragma GCC unroll 8
			for (int jj = 0; jj < DA_BLOCK; jj++)
				d[jj] = _mm256_setzero_ps();
			for (int c = 0; c < nv; c++) {
				const __m256 qc = _mm256_loadu_ps(qg + 8 * c);
				const size_t kc = kvb + (size_t)j0 * kstride + 8 * (size_t)c;
#pragma GCC unroll 8
				for (int jj = 0; jj < DA_BLOCK; jj++)
					d[jj] = _mm256_fmadd_ps(qc, ld8(dt, a->k, kc + (size_t)(jj < nb ? jj : 0) * kstride), d[jj]);
			}
			_mm256_store_ps(sc, _mm256_mul_ps(hsum8x8(d), _mm256_set1_ps(a->scale)));
			float bm = -INFINITY;
			for (int jj = 0; jj < nb; jj++) {
				if (a->softcap > 0.0f)
					sc[jj] = a->softcap * tanhf(sc[jj] / a->softcap);
				bm = sc[jj] > bm ? sc[jj] : bm;
			}
			for (int jj = nb; jj < DA_BLOCK; jj++)
				sc[jj] = bm; /* unused lanes: finite input, zeroed below */
			float mn = bm > m[g] ? bm : m[g];
			float alpha = expf(m[g] - mn); /* m = -inf on the first block: 0 */
			__m256 e = exp256(_mm256_sub_ps(_mm256_load_ps(sc), _mm256_set1_ps(mn)));
			_mm256_store_ps(pr + g * DA_BLOCK, e);
			float sum = 0.0f;
			for (int jj = 0; jj < DA_BLOCK; jj++) {
				if (jj >= nb)
					pr[g * DA_BLOCK + jj] = 0.0f;
				sum += pr[g * DA_BLOCK + jj];
			}
			l[g] = l[g] * alpha + sum;
			m[g] = mn;
			if (alpha != 1.0f) {
				float *ag = acc + (size_t)g * (size_t)nv * 8;
				for (int c = 0; c < nv; c++)
					_mm256_store_ps(ag + 8 * c, _mm256_mul_ps(_mm256_load_ps(ag + 8 * c), _mm256_set1_ps(alpha)));
			}
		}
		for (int jj = 0; jj < nb; jj++) {
			const size_t vr = kvb + (size_t)(j0 + jj) * kstride;
#pragma GCC unroll 8
			for (int c = 0; c < nv; c++) {
				__m256 vv = ld8(dt, a->v, vr + 8 * (size_t)c);
				for (int g = 0; g < G; g++) {
					float *ag = acc + ((size_t)g * (size_t)nv + (size_t)c) * 8;
					_mm256_store_ps(ag, _mm256_fmadd_ps(_mm256_set1_ps(pr[g * DA_BLOCK + jj]), vv, _mm256_load_ps(ag)));
				}
			}
		}
	}
	for (int g = 0; g < G; g++) {
		float *p = a->part + ((size_t)(h0 + g) * (size_t)a->nsplit + (size_t)s) * (size_t)(hd + 2);
		memcpy(p, acc + (size_t)g * (size_t)nv * 8, sizeof(float) * (size_t)hd);
		p[hd] = m[g];
		p[hd + 1] = l[g];
	}
}

AI void da_shapes(const da_job *a, int kh, int s, const kdtype dt, int G, int nv)
{
	if (G == 4 && nv == 8)
		da_run(a, kh, s, dt, 4, 8);
	else if (G == 4 && nv == 16)
		da_run(a, kh, s, dt, 4, 16);
	else if (G == 2 && nv == 16)
		da_run(a, kh, s, dt, 2, 16);
	else if (G == 3 && nv == 8)
		da_run(a, kh, s, dt, 3, 8);
	else
		da_run(a, kh, s, dt, G, nv);
}

static void da_task(void *arg, int i)
{
	const da_job *a = arg;
	const int kh = i / a->nsplit, s = i % a->nsplit;
	const int G = a->n_heads / a->n_kv_heads, nv = a->head_dim / 8;
	if (a->kvdt == KDT_F16)
		da_shapes(a, kh, s, KDT_F16, G, nv);
	else if (a->kvdt == KDT_F32)
		da_shapes(a, kh, s, KDT_F32, G, nv);
	else
		da_run(a, kh, s, KDT_BF16, G, nv);
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
	const size_t per_split = (size_t)n_heads * (size_t)(head_dim + 2);
	if (n == 1 && head_dim % 8 == 0 && G <= DA_MAX_G && (size_t)G * (size_t)head_dim <= DA_MAX_GROUP_FLOATS &&
	    per_split <= DA_PART_FLOATS) {
		const int p = pos0, lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0, keys = p + 1 - lo;
		int ns = keys / DA_MIN_KEYS, cap = (int)(DA_PART_FLOATS / per_split);
		ns = ns < 1 ? 1 : ns > DA_MAX_SPLIT ? DA_MAX_SPLIT : ns;
		ns = ns > cap ? cap : ns;
		int run = (keys + ns - 1) / ns;
		run = (run + DA_BLOCK - 1) / DA_BLOCK * DA_BLOCK;
		ns = (keys + run - 1) / run;
		float part[DA_PART_FLOATS];
		da_job d = {q, k, v, kvdt, lo, p + 1, n_heads, n_kv_heads, head_dim, ns, run, scale, softcap, part};
		kpool_for(n_kv_heads * ns, da_task, &d);
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
		return;
	}
	at_job a = {q, k, v, kvdt, out, n, pos0, n_heads, n_kv_heads, head_dim, window, scale, softcap};
	kpool_for(n * n_heads, at_task, &a);
}

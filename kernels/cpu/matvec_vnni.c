/* kernels/cpu/matvec_vnni.c — the 4-bit quantized matvec (decode) on
 * AVX512-VNNI integer dot products. Compiled with AVX512_FLAGS plus
 * -mavx512vnni (Makefile VNNI_FLAGS); reached only from kernels_avx512.c
 * when k_vnni_ready (dispatch.c: CPUID, and MLXR_VNNI=0 turns it off).
 *
 * Why: with the weights in huge pages (st_make_resident) the f32 matvec
 * (kernels_avx512.c, mv_rows_q) is the limit, not the memory: ~7 vector
 * uops per 32 codes (zero-extend, and, shift, two int->float converts, two
 * FMAs), 10.8 GB/s of codes per core hot on the 2-core Xeon against 15.3
 * GB/s of read bandwidth per core. vpdpbusd multiplies 64 unsigned bytes
 * by 64 signed bytes and adds each 4 products into 16 int32 lanes in one
 * uop.
 *
 * Exactness: x is not rounded to 8 bits. Each block of 32 values is
 * written as three int8 terms,
 *     x ~= D (q1 + q2/254 + q3/254^2),   D = max|x_block| / 127,
 * q1 = round(x/D), q2 and q3 the rounded residuals (each residual is at
 * most half a step, so every term fits in [-127, 127]). The representation
 * error is at most D/(2*254^2) = max|x_block| * 6.1e-8 per value, about
 * the rounding of an f32 product (2^-24 = 6.0e-8 of the value); the dot
 * products themselves are exact in int32 (a lane sums at most 8 codes x
 * 127 per 128-column step). tests/unit/test_kernels.c holds the result to
 * TOL_DOT of the reference like every other table. A single int8 (or
 * int16) x was tried before and rejected for accuracy (kernels_avx512.c,
 * #4); this is not that.
 *
 * Layout: a step is 128 columns. The 64 bytes of a step's codes hold the
 * even columns in their low nibbles and the odd ones in the high nibbles;
 * lane L of vpdpbusd sums bytes 4L..4L+3, i.e. columns 8L..8L+7 of the
 * step: one 32-block of x (L/4) and one quantization group (the group
 * sizes are multiples of 32). So x's terms are stored per step as even
 * and odd halves (k_vnni_quantize_x), with the 16-lane vector of block
 * scales D after them; per step and row: 64-byte load, and, shift+and, 6
 * vpdpbusd, 3 converts, 3 FMAs, one permute for the group scales and one
 * multiply by D: 16 uops per 128 codes instead of 28.
 * The bias term sum_g b_g sum(x_g) uses the exact f32 group sums as the
 * f32 kernel does.
 *
 * Tried and not kept (2026-11-30, quiet VM): two rows at a time (two code
 * streams in flight, x loads shared): bench/kbench.c from DRAM 19.8-20.5
 * -> 21.6-21.9 GB/s in 3 alternated rounds, but the whole Llama-3.2-1B
 * decode no faster (3 alternated pairs: 22.7/23.7/23.1 tok/s one row,
 * 22.0/22.3/22.6 two rows). Prefetch distance (4-64 KiB) and hint (T0,
 * T1, T2) made no difference beyond this VM's noise. */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/kinternal.h"
#include "kernels/cpu/simd_avx512.h"

int k_vnni_ready;

size_t k_vnni_xq_bytes(int cols)
{
	return (size_t)((cols + 127) / 128) * K_VNNI_STEP;
}

/* Quantizes one 32-block (lo = x[0..16), hi = x[16..32)) into the even
 * and odd halves of its three terms at q (+ 16 bytes each) and returns D. */
static float quant_block(__m512 lo, __m512 hi, int8_t *q)
{
	const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
	float mx = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
	if (!(mx > 0.0f)) { /* zero block (or NaN: the f32 path would propagate it; here it reads as 0) */
		for (int t = 0; t < 3; t++) {
			memset(q + t * 128, 0, 16);
			memset(q + t * 128 + 64, 0, 16);
		}
		return 0.0f;
	}
	const float d = mx / 127.0f, inv = 127.0f / mx;
	const __m512 dv = _mm512_set1_ps(d), iv = _mm512_set1_ps(inv);
	const __m512 s2 = _mm512_set1_ps(254.0f), s3 = _mm512_set1_ps(254.0f * 254.0f);
	for (int half = 0; half < 2; half++) {
		__m512 v = _mm512_permutex2var_ps(lo, half ? io : ie, hi);
		__m512 q1 = _mm512_roundscale_ps(_mm512_mul_ps(v, iv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
		__m512 r = _mm512_fnmadd_ps(q1, dv, v); /* |r| <= d/2 */
		__m512 q2 = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_mul_ps(r, iv), s2),
						 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
		r = _mm512_fnmadd_ps(q2, _mm512_div_ps(dv, s2), r); /* |r| <= d/508 */
		__m512 q3 = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_mul_ps(r, iv), s3),
						 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
		_mm_storeu_si128((__m128i *)(q + half * 64), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(q1)));
		_mm_storeu_si128((__m128i *)(q + 128 + half * 64), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(q2)));
		_mm_storeu_si128((__m128i *)(q + 256 + half * 64), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(q3)));
	}
	return d;
}

void k_vnni_quantize_x(const float *x, int cols, uint8_t *xq)
{
	for (int s = 0; s * 128 < cols; s++) {
		uint8_t *st = xq + (size_t)s * K_VNNI_STEP;
		float dvec[16];
		memset(st, 0, 384); /* a 64-column last step leaves blocks 2 and 3 zero */
		memset(dvec, 0, sizeof(dvec));
		for (int b = 0; b < 4 && s * 128 + b * 32 < cols; b++) {
			const float *xb = x + s * 128 + b * 32;
			float d = quant_block(_mm512_loadu_ps(xb), _mm512_loadu_ps(xb + 16), (int8_t *)st + b * 16);
			for (int l = 0; l < 4; l++)
				dvec[b * 4 + l] = d;
		}
		memcpy(st + 384, dvec, sizeof(dvec));
	}
}

void k_vnni_rows_q4(const kq_matrix *m, const uint8_t *xq, const float *xs, const float *bias, float *y,
		    size_t ahead, int r0, int r1)
{
	const int gs = m->group_size, ng = m->cols / gs, gbytes = gs / 2, spc = gs / 8; /* steps per 16 groups */
	const size_t rb = k_row_bytes(m);
	const kdtype sdt = m->sdt;
	const __m512i m0f = _mm512_set1_epi8(0x0f), zero = _mm512_setzero_si512();
	__m512i idx[16]; /* lane -> group within the 16-group chunk, per step of the chunk */
	for (int st = 0; st < spc; st++) {
		int v[16];
		for (int l = 0; l < 16; l++)
			v[l] = (st * 128 + 8 * l) / gs;
		idx[st] = _mm512_loadu_si512(v);
	}
	for (int r = r0; r < r1; r++) {
		const uint8_t *w = (const uint8_t *)m->w + (size_t)r * rb;
		const size_t g0 = (size_t)r * (size_t)ng;
		__m512 t0 = _mm512_setzero_ps(), t1 = t0, t2 = t0, u = t0;
		const uint8_t *q = xq;
		for (int gc = 0; gc < ng; gc += 16) {
			const int gn = ng - gc < 16 ? ng - gc : 16;
			const __mmask16 k = gn == 16 ? 0xffff : (__mmask16)((1u << gn) - 1);
			const uint8_t *p = w + (size_t)gc * (size_t)gbytes;
			for (int o = 0; o < gn * gbytes; o += 64)
				_mm_prefetch((const char *)(p + ahead + (size_t)o), _MM_HINT_T0);
			u = _mm512_fmadd_ps(ld16(sdt, m->biases, g0 + (size_t)gc, k), _mm512_maskz_loadu_ps(k, xs + gc), u);
			const __m512 sv = ld16(sdt, m->scales, g0 + (size_t)gc, k);
			const int ncodes = gn * gs;
			for (int st = 0; st * 128 < ncodes; st++, p += 64, q += K_VNNI_STEP) {
				__m512i v = ncodes - st * 128 >= 128 ? _mm512_loadu_si512(p)
								      : _mm512_maskz_loadu_epi8(0xffffffffull, p);
				__m512i lo = _mm512_and_si512(v, m0f), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m0f);
				__m512 sd = _mm512_mul_ps(_mm512_permutexvar_ps(idx[st], sv),
							  _mm512_loadu_ps((const float *)(q + 384)));
				__m512i a0 = _mm512_dpbusd_epi32(zero, lo, _mm512_loadu_si512(q));
				__m512i a1 = _mm512_dpbusd_epi32(zero, lo, _mm512_loadu_si512(q + 128));
				__m512i a2 = _mm512_dpbusd_epi32(zero, lo, _mm512_loadu_si512(q + 256));
				a0 = _mm512_dpbusd_epi32(a0, hi, _mm512_loadu_si512(q + 64));
				a1 = _mm512_dpbusd_epi32(a1, hi, _mm512_loadu_si512(q + 192));
				a2 = _mm512_dpbusd_epi32(a2, hi, _mm512_loadu_si512(q + 320));
				t0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0), sd, t0);
				t1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1), sd, t1);
				t2 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a2), sd, t2);
			}
		}
		__m512 t = _mm512_fmadd_ps(t2, _mm512_set1_ps(1.0f / (254.0f * 254.0f)), t0);
		t = _mm512_fmadd_ps(t1, _mm512_set1_ps(1.0f / 254.0f), t);
		y[r] = _mm512_reduce_add_ps(t) + _mm512_reduce_add_ps(u) + (bias ? bias[r] : 0.0f);
	}
}

/* kernels/cpu/simd_avx512.h — vector helpers shared by the AVX-512 files
 * (kernels_avx512.c, attention_avx512.c): exp and f32/f16/bf16 loads.
 * Include only from files built with AVX512_FLAGS. */
#ifndef MLXR_SIMD_AVX512_H
#define MLXR_SIMD_AVX512_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "kernels/cpu/simd_avx2.h" /* ld_sb */

/* exp for f32 lanes: Cephes-style range reduction (x = n ln2 + r, |r| <=
 * ln2/2) and a degree-6 polynomial, ~2 ulp; vscalefps applies 2^n with
 * correct overflow to inf and underflow through denormals to 0. */
static inline __attribute__((always_inline)) __m512 exp512(__m512 x)
{
	x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
	__m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
					_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	x = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
	x = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), x);
	__m512 y = _mm512_set1_ps(1.9875691500E-4f);
	y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507E-3f));
	y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073E-3f));
	y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894E-2f));
	y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459E-1f));
	y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201E-1f));
	y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
	return _mm512_scalef_ps(y, n);
}

/* 16 dense elements of type dt from p (element index i), masked to `mask`. */
static inline __attribute__((always_inline)) __m512 ld16(kdtype dt, const void *p, size_t i, __mmask16 mask)
{
	const uint8_t *b = p;
	if (dt == KDT_F32)
		return _mm512_maskz_loadu_ps(mask, b + 4 * i);
	__m256i h = _mm256_maskz_loadu_epi16(mask, b + 2 * i);
	if (dt == KDT_F16)
		return _mm512_cvtph_ps(h);
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

#endif

/* kernels/cpu/simd_avx2.h — vector helpers shared by the AVX2 files
 * (kernels_avx2.c, attention_avx2.c; through simd_avx512.h also the
 * AVX-512 and AMX files, whose flags include AVX2 and F16C): exp,
 * f32/f16/bf16 loads, the lane sum. Include only from files built with
 * AVX2_FLAGS or more. */
#ifndef MLXR_SIMD_AVX2_H
#define MLXR_SIMD_AVX2_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

/* Element i of a scale or bias array of type dt (possibly unaligned). */
static inline __attribute__((always_inline)) float ld_sb(kdtype dt, const void *p, size_t i)
{
	const uint8_t *b = p;
	if (dt == KDT_F32) {
		float f;
		memcpy(&f, b + 4 * i, 4);
		return f;
	}
	uint16_t h;
	memcpy(&h, b + 2 * i, 2);
	if (dt == KDT_F16)
		return _cvtsh_ss(h);
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* exp: Cephes range reduction and degree-6 polynomial, ~2 ulp; 2^n built
 * in the exponent field, so x is clamped to [-87.3, 88.37] (results
 * saturate at ~1e-38 and ~2.4e38 instead of 0 and inf). */
static inline __attribute__((always_inline)) __m256 exp256(__m256 x)
{
	x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3365447505531f)), _mm256_set1_ps(88.3762626647949f));
	__m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
				   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
	x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
	__m256 y = _mm256_set1_ps(1.9875691500E-4f);
	y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
	y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
	y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
	y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
	y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
	y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
	__m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/* 8 dense elements of type dt at element index i. */
static inline __attribute__((always_inline)) __m256 ld8(kdtype dt, const void *p, size_t i)
{
	const uint8_t *b = p;
	if (dt == KDT_F32)
		return _mm256_loadu_ps((const float *)(b + 4 * i));
	__m128i h = _mm_loadu_si128((const __m128i *)(b + 2 * i));
	if (dt == KDT_F16)
		return _mm256_cvtph_ps(h);
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline __attribute__((always_inline)) float hsum(__m256 v)
{
	__m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	a = _mm_add_ps(a, _mm_movehl_ps(a, a));
	a = _mm_add_ss(a, _mm_movehdup_ps(a));
	return _mm_cvtss_f32(a);
}

#endif

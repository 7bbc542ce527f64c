/* worker/sample_math.h — the arithmetic of a sampled draw, shared by the
 * CPU sampler (worker/sampler.c) and the GPU one (kernels/cuda/ksample.cu)
 * so that both compute the same bits from the same logits.
 *
 * Every operation here is one IEEE-754 binary32 operation rounded to
 * nearest: on the device through __fadd_rn / __fmul_rn / __fdiv_rn (nvcc
 * would otherwise contract a * b + c into an fma), on the host plain C
 * with contraction off (GCC in -std=c11 mode does not contract; clang is
 * told below). No libm call: expf differs between glibc and CUDA.
 *
 * The canonical definition that both sides implement (sampler.h has the
 * order of the steps):
 *   key(l)      total order of logits as uint32 (NaN lowest, -0 == +0);
 *               candidates sort by (key desc, index asc)
 *   e_i         sm_exp((l_i - max) / temperature), 1 for the max
 *   chunked sum of a sequence in walk order: consecutive chunks of
 *               SM_CHUNK entries, each summed left to right from 0, the
 *               chunk sums added left to right: S_0 = 0,
 *               S_{j+1} = S_j + chunk_j
 *   cum_i       S_{chunk(i)} + (sum of chunk(i)'s entries up to i, left
 *               to right); the chunked sum of the first n is cum_{n-1}
 *   draw        u = sm_uniform(splitmix), r = u * total (below total),
 *               the first i with r < cum_i
 */
#ifndef MLXR_SAMPLE_MATH_H
#define MLXR_SAMPLE_MATH_H

#include <stdint.h>
#include <string.h>

#if defined(__clang__) && !defined(__CUDACC__)
#pragma STDC FP_CONTRACT OFF
#endif

#ifdef __CUDACC__
#define SM_FN static __host__ __device__ __forceinline__
#else
#define SM_FN static inline
#endif

#ifdef __CUDA_ARCH__
#define SM_ADD(a, b) __fadd_rn((a), (b))
#define SM_MUL(a, b) __fmul_rn((a), (b))
#define SM_DIV(a, b) __fdiv_rn((a), (b))
#else
#define SM_ADD(a, b) ((a) + (b))
#define SM_MUL(a, b) ((a) * (b))
#define SM_DIV(a, b) ((a) / (b))
#endif

#define SM_CHUNK 256

SM_FN uint32_t sm_f2u(float x)
{
#ifdef __CUDA_ARCH__
	return (uint32_t)__float_as_uint(x);
#else
	uint32_t u;
	memcpy(&u, &x, 4);
	return u;
#endif
}

SM_FN float sm_u2f(uint32_t u)
{
#ifdef __CUDA_ARCH__
	return __uint_as_float(u);
#else
	float x;
	memcpy(&x, &u, 4);
	return x;
#endif
}

/* Sort key of a logit: larger logit, larger key; -0 and +0 the same key;
 * NaN below -inf (key 0), so NaN is never preferred. */
SM_FN uint32_t sm_key(float x)
{
	if (x != x)
		return 0;
	uint32_t u = x == 0.0f ? 0u : sm_f2u(x);
	return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

/* exp(x) for x <= 0 with + and * only (Cody-Waite reduction by ln 2 in two
 * parts, then cephes' expf polynomial on |r| <= ln2/2, then * 2^n):
 * within 2 ulp of exp over [-86, 0] (tests/unit/test_sampler.c measures
 * it). x < -86 (or NaN) gives 0: e^-86 is ~4e-38 of the top candidate's
 * weight, and below it 2^n would leave the normal range. sm_exp(0) == 1. */
SM_FN float sm_exp(float x)
{
	if (!(x >= -86.0f))
		return 0.0f;
	const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
	float n = SM_ADD(SM_ADD(SM_MUL(x, 1.44269504088896341f), magic), -magic);
	float r = SM_ADD(x, SM_MUL(n, -0.693359375f)); /* ln2 hi: 9 bits, n*hi exact */
	r = SM_ADD(r, SM_MUL(n, 2.12194440e-4f));      /* ln2 lo */
	float p = 1.9875691500e-4f;
	p = SM_ADD(SM_MUL(p, r), 1.3981999507e-3f);
	p = SM_ADD(SM_MUL(p, r), 8.3334519073e-3f);
	p = SM_ADD(SM_MUL(p, r), 4.1665795894e-2f);
	p = SM_ADD(SM_MUL(p, r), 1.6666665459e-1f);
	p = SM_ADD(SM_MUL(p, r), 5.0000001201e-1f);
	p = SM_ADD(SM_ADD(SM_MUL(p, SM_MUL(r, r)), r), 1.0f);
	int ni = (int)n; /* -125 <= n <= 0 */
	return SM_MUL(p, sm_u2f((uint32_t)(ni + 127) << 23));
}

/* The weight argument of candidate logit l: (l - max) / temperature. */
SM_FN float sm_arg(float l, float max, float temperature)
{
	return SM_DIV(SM_ADD(l, -max), temperature);
}

/* A logit after the repetition penalties, for a token seen `count` > 0
 * times in the window (llama.cpp's rule: divide a positive logit by the
 * penalty, multiply a negative one; then presence and frequency). */
SM_FN float sm_penalize(float l, int count, float repeat, float presence, float frequency)
{
	if (repeat > 0.0f && repeat != 1.0f)
		l = l > 0.0f ? SM_DIV(l, repeat) : SM_MUL(l, repeat);
	return SM_ADD(l, -SM_ADD(presence, SM_MUL(frequency, (float)count)));
}

SM_FN uint64_t sm_splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* The point of a draw in [0, total): the top 24 bits of one splitmix
 * output as u in [0, 1), times total, kept below total (u * total can
 * round up to it). total > 0. */
SM_FN float sm_draw_point(uint64_t bits, float total)
{
	float u = SM_MUL((float)(uint32_t)(bits >> 40), 5.9604644775390625e-8f); /* 2^-24 */
	float r = SM_MUL(u, total);
	return r < total ? r : sm_u2f(sm_f2u(total) - 1u);
}

#endif

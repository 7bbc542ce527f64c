/* kernels/cpu/dispatch.c — table selection at run time, element
 * conversions, and the small helpers the tables share.
 *
 * The getters live here, not in the ISA files, so the CPU check itself is
 * compiled for the baseline ISA: nothing built with -mavx2 or -mavx512*
 * runs before the check has passed. */
#include <cpuid.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kinternal.h"

/* F16C is CPUID.1:ECX bit 29; clang 14's __builtin_cpu_supports has no
 * "f16c" name, so read it directly. */
static int has_f16c(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return 0;
	return (c >> 29) & 1;
}

const kernel_table *kernels_ref(void)
{
	return &k_table_ref;
}

const kernel_table *kernels_avx2(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c() && k_table_avx2.matvec)
		return &k_table_avx2;
	return NULL;
}

/* The AVX-512 file is built with F/BW/VL/DQ + FMA + F16C (Makefile
 * AVX512_FLAGS); all of them are required here. __builtin_cpu_supports
 * also checks that the OS saves the ZMM state (XGETBV). */
const kernel_table *kernels_avx512(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("fma") && has_f16c() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && k_table_avx512.matvec)
		return &k_table_avx512;
	return NULL;
}

/* MLXR_KERNELS=ref|avx2|avx512 forces a table; a name this CPU cannot run
 * (or an unknown one) is ignored and the best available is used. */
const kernel_table *kernels_best(void)
{
	const char *e = getenv("MLXR_KERNELS");
	const kernel_table *t;
	if (e) {
		if (strcmp(e, "ref") == 0)
			return kernels_ref();
		if (strcmp(e, "avx2") == 0 && (t = kernels_avx2()))
			return t;
		if (strcmp(e, "avx512") == 0 && (t = kernels_avx512()))
			return t;
	}
	if ((t = kernels_avx512()))
		return t;
	if ((t = kernels_avx2()))
		return t;
	return kernels_ref();
}

/* IEEE binary16 -> binary32, exact for every input (subnormals, inf, NaN). */
float k_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t man = h & 0x3ff;
	uint32_t u;
	if (exp == 0x1f) {
		u = sign | 0x7f800000u | (man << 13);
	} else if (exp != 0) {
		u = sign | ((exp + 112) << 23) | (man << 13);
	} else if (man == 0) {
		u = sign;
	} else { /* subnormal: normalise */
		exp = 113;
		while (!(man & 0x400)) {
			man <<= 1;
			exp--;
		}
		u = sign | (exp << 23) | ((man & 0x3ff) << 13);
	}
	float f;
	memcpy(&f, &u, 4);
	return f;
}

float k_bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* binary32 -> binary16, round to nearest even; overflow gives inf, NaN
 * stays NaN (quiet). */
uint16_t k_f32_to_f16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint32_t sign = (u >> 16) & 0x8000;
	uint32_t a = u & 0x7fffffff;
	if (a >= 0x7f800000u) /* inf or NaN */
		return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000u ? 0x200 | ((a >> 13) & 0x3ff) : 0));
	if (a >= 0x477ff000u) /* rounds to >= 65536: inf */
		return (uint16_t)(sign | 0x7c00);
	if (a >= 0x38800000u) { /* normal half */
		uint32_t r = a - 0x38000000u; /* rebias exponent 127 -> 15 */
		r += 0xfff + ((r >> 13) & 1);
		return (uint16_t)(sign | (r >> 13));
	}
	if (a < 0x33000000u) /* below half the smallest subnormal: zero */
		return (uint16_t)sign;
	/* subnormal half: shift the full mantissa, round to nearest even */
	uint32_t e = a >> 23;
	uint32_t man = (a & 0x7fffff) | 0x800000;
	uint32_t shift = 126 - e; /* 14..24 */
	uint32_t h = man >> shift;
	uint32_t rem = man & ((1u << shift) - 1);
	uint32_t half = 1u << (shift - 1);
	if (rem > half || (rem == half && (h & 1)))
		h++;
	return (uint16_t)(sign | h);
}

uint16_t k_f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffff) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

float k_load(kdtype dt, const void *p, size_t i)
{
	const uint8_t *b = p;
	uint16_t h;
	float f;
	switch (dt) {
	case KDT_F32:
		memcpy(&f, b + 4 * i, 4);
		return f;
	case KDT_F16:
		memcpy(&h, b + 2 * i, 2);
		return k_f16_to_f32(h);
	case KDT_BF16:
		memcpy(&h, b + 2 * i, 2);
		return k_bf16_to_f32(h);
	default:
		return 0.0f;
	}
}

int k_rows_chunk(int rows, size_t work_per_row, int align)
{
	int nt = kpool_threads();
	/* below ~64k multiply-adds one thread is faster than a hand-off */
	if (nt <= 1 || (size_t)rows * work_per_row < 65536)
		return rows > 0 ? rows : 1;
	int chunk = rows / (nt * 4);
	if (chunk < 1)
		chunk = 1;
	chunk = (chunk + align - 1) / align * align;
	return chunk;
}

void k_group_sums(const float *x, int cols, int gs, float *xs)
{
	for (int g = 0; g < cols / gs; g++) {
		float s = 0.0f;
		for (int j = 0; j < gs; j++)
			s += x[g * gs + j];
		xs[g] = s;
	}
}

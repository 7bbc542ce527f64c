/* kernels/cpu/convert.c — element conversions (f16, bf16 <-> f32) and
 * unaligned loads. Kept apart from the dispatch tables so that code which
 * only reads tensors (the broker's validation) links no kernel. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

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


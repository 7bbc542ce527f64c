/* worker/gguf_quant.c — ggml block dequantizers and the MLX affine quantizer.
 *
 * Dequantizers follow ggml-quants.c dequantize_row_* operation by operation
 * in f32 (the build uses -std=c11, so no FMA contraction), which is also
 * what gguf-py's numpy code computes: Q4_1 and Q8_0 results are bit-equal.
 * Block layouts (ggml-common.h) are read byte by byte, little-endian, so no
 * struct packing or alignment is assumed.
 */
#include "kernels/kernels.h"
#include "worker/gguf.h"
#include "common/modelfiles.h"

#include <math.h>
#include <string.h>

/* The element conversions are the kernels' (kernels/cpu/convert.c, tested
 * on every f16 pattern): one implementation of each rounding rule. */
float gguf_f16_to_f32(uint16_t h) { return k_f16_to_f32(h); }
uint16_t gguf_f32_to_f16(float f) { return k_f32_to_f16(f); }
float gguf_bf16_to_f32(uint16_t h) { return k_bf16_to_f32(h); }
uint16_t gguf_f32_to_bf16(float f) { return k_f32_to_bf16(f); }

static float h2f(const uint8_t *p)
{
	return gguf_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* ggml-quants.c get_scale_min_k4: 6-bit scale and min j of a K block. */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
	if (j < 4) {
		*d = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
		*m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
	}
}

int gguf_dequant(uint32_t type, const uint8_t *src, float *y, uint64_t n)
{
	uint32_t blck = ggml_blck_size(type), tsz = ggml_type_size(type);
	if (!blck || n % blck)
		return -1;
	uint64_t nb = n / blck;
	switch (type) {
	case GGML_F32:
		for (uint64_t i = 0; i < n; i++) {
			uint32_t b = (uint32_t)src[4 * i] | (uint32_t)src[4 * i + 1] << 8 |
				     (uint32_t)src[4 * i + 2] << 16 | (uint32_t)src[4 * i + 3] << 24;
			memcpy(&y[i], &b, 4);
		}
		return 0;
	case GGML_F16:
		for (uint64_t i = 0; i < n; i++)
			y[i] = h2f(src + 2 * i);
		return 0;
	case GGML_BF16:
		for (uint64_t i = 0; i < n; i++)
			y[i] = gguf_bf16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
		return 0;
	default:
		break;
	}
	for (uint64_t i = 0; i < nb; i++, src += tsz, y += blck) {
		switch (type) {
		case GGML_Q4_0: { /* block_q4_0 { f16 d; u8 qs[16]; } */
			float d = h2f(src);
			const uint8_t *qs = src + 2;
			for (int j = 0; j < 16; j++) {
				y[j] = (float)((qs[j] & 0x0F) - 8) * d;
				y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
			}
			break;
		}
		case GGML_Q4_1: { /* block_q4_1 { f16 d, m; u8 qs[16]; } */
			float d = h2f(src), m = h2f(src + 2);
			const uint8_t *qs = src + 4;
			for (int j = 0; j < 16; j++) {
				y[j] = (float)(qs[j] & 0x0F) * d + m;
				y[j + 16] = (float)(qs[j] >> 4) * d + m;
			}
			break;
		}
		case GGML_Q5_0: { /* block_q5_0 { f16 d; u8 qh[4]; u8 qs[16]; } */
			float d = h2f(src);
			uint32_t qh = (uint32_t)src[2] | (uint32_t)src[3] << 8 | (uint32_t)src[4] << 16 |
				      (uint32_t)src[5] << 24;
			const uint8_t *qs = src + 6;
			for (int j = 0; j < 16; j++) {
				uint32_t xh0 = ((qh >> j) << 4) & 0x10, xh1 = (qh >> (j + 12)) & 0x10;
				y[j] = (float)((int32_t)((qs[j] & 0x0F) | xh0) - 16) * d;
				y[j + 16] = (float)((int32_t)((qs[j] >> 4) | xh1) - 16) * d;
			}
			break;
		}
		case GGML_Q5_1: { /* block_q5_1 { f16 d, m; u8 qh[4]; u8 qs[16]; } */
			float d = h2f(src), m = h2f(src + 2);
			uint32_t qh = (uint32_t)src[4] | (uint32_t)src[5] << 8 | (uint32_t)src[6] << 16 |
				      (uint32_t)src[7] << 24;
			const uint8_t *qs = src + 8;
			for (int j = 0; j < 16; j++) {
				uint32_t xh0 = ((qh >> j) << 4) & 0x10, xh1 = (qh >> (j + 12)) & 0x10;
				y[j] = (float)((qs[j] & 0x0F) | xh0) * d + m;
				y[j + 16] = (float)((qs[j] >> 4) | xh1) * d + m;
			}
			break;
		}
		case GGML_Q8_0: { /* block_q8_0 { f16 d; i8 qs[32]; } */
			float d = h2f(src);
			for (int j = 0; j < 32; j++)
				y[j] = (float)(int8_t)src[2 + j] * d;
			break;
		}
		case GGML_Q4_K: { /* block_q4_K { f16 d, dmin; u8 scales[12]; u8 qs[128]; } */
			float d = h2f(src), min = h2f(src + 2);
			const uint8_t *sc = src + 4, *q = src + 16;
			float *o = y;
			for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
				uint8_t s, m;
				scale_min_k4(is, sc, &s, &m);
				float d1 = d * s, m1 = min * m;
				scale_min_k4(is + 1, sc, &s, &m);
				float d2 = d * s, m2 = min * m;
				for (int l = 0; l < 32; l++)
					*o++ = d1 * (float)(q[l] & 0xF) - m1;
				for (int l = 0; l < 32; l++)
					*o++ = d2 * (float)(q[l] >> 4) - m2;
			}
			break;
		}
		case GGML_Q5_K: { /* block_q5_K { f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; } */
			float d = h2f(src), min = h2f(src + 2);
			const uint8_t *sc = src + 4, *qh = src + 16, *ql = src + 48;
			float *o = y;
			uint8_t u1 = 1, u2 = 2;
			for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32) {
				uint8_t s, m;
				scale_min_k4(is, sc, &s, &m);
				float d1 = d * s, m1 = min * m;
				scale_min_k4(is + 1, sc, &s, &m);
				float d2 = d * s, m2 = min * m;
				for (int l = 0; l < 32; l++)
					*o++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
				for (int l = 0; l < 32; l++)
					*o++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
				u1 = (uint8_t)(u1 << 2);
				u2 = (uint8_t)(u2 << 2);
			}
			break;
		}
		case GGML_Q6_K: { /* block_q6_K { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; } */
			float d = h2f(src + 208);
			const uint8_t *ql = src, *qh = src + 128;
			const int8_t *sc = (const int8_t *)(src + 192);
			float *o = y;
			for (int n0 = 0; n0 < 256; n0 += 128, o += 128, ql += 64, qh += 32, sc += 8) {
				for (int l = 0; l < 32; l++) {
					int is = l / 16;
					int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
					int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
					int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
					int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
					o[l] = d * (float)sc[is] * (float)q1;
					o[l + 32] = d * (float)sc[is + 2] * (float)q2;
					o[l + 64] = d * (float)sc[is + 4] * (float)q3;
					o[l + 96] = d * (float)sc[is + 6] * (float)q4;
				}
			}
			break;
		}
		default:
			return -1;
		}
	}
	return 0;
}

/* mlx/backend/cpu/quantized.cpp quantize<T>(), per group:
 *   scale = max((max - min) / n_bins, 1e-7), negated unless |min| > |max|;
 *   edge = |min| > |max| ? min : max; q0 = rint(edge / scale);
 *   if q0 != 0 { scale = edge / q0; bias = edge } else bias = 0;
 *   code = clamp(rint((w - bias) / scale), 0, n_bins).
 * The edge value is then represented exactly (code 0 or n_bins). */
int mlx_quantize(const float *w, uint64_t rows, uint64_t cols, int bits, int group_size,
		 uint32_t *wq, uint16_t *scales, uint16_t *biases)
{
	if (!mlx_quant_supported(bits, group_size) || cols % (uint64_t)group_size)
		return -1;
	const float n_bins = (float)((1 << bits) - 1), eps = 1e-7f;
	uint64_t gpr = cols / (uint64_t)group_size, wpr = cols * (uint64_t)bits / 32;
	for (uint64_t r = 0; r < rows; r++) {
		const float *row = w + r * cols;
		uint32_t *out = wq + r * wpr;
		uint64_t acc = 0;
		int nacc = 0;
		for (uint64_t g = 0; g < gpr; g++) {
			const float *x = row + g * (uint64_t)group_size;
			float mx = -INFINITY, mn = INFINITY;
			for (int j = 0; j < group_size; j++) {
				mx = fmaxf(mx, x[j]);
				mn = fminf(mn, x[j]);
			}
			int mask = fabsf(mn) > fabsf(mx);
			float scale = fmaxf((mx - mn) / n_bins, eps);
			scale = mask ? scale : -scale;
			float edge = mask ? mn : mx;
			float q0 = rintf(edge / scale);
			float bias = 0;
			if (q0 != 0) {
				scale = edge / q0;
				bias = edge;
			}
			for (int j = 0; j < group_size; j++) {
				float v = rintf((x[j] - bias) / scale);
				v = fminf(fmaxf(v, 0.0f), n_bins);
				acc |= (uint64_t)(uint32_t)v << nacc;
				nacc += bits;
				if (nacc >= 32) {
					*out++ = (uint32_t)acc;
					acc >>= 32;
					nacc -= 32;
				}
			}
			scales[r * gpr + g] = gguf_f32_to_f16(scale);
			biases[r * gpr + g] = gguf_f32_to_f16(bias);
		}
	}
	return 0;
}

void mlx_dequantize(const uint32_t *wq, const uint16_t *scales, const uint16_t *biases,
		    uint64_t rows, uint64_t cols, int bits, int group_size, float *w)
{
	uint64_t gpr = cols / (uint64_t)group_size, wpr = cols * (uint64_t)bits / 32;
	uint32_t mask = (1u << bits) - 1;
	for (uint64_t r = 0; r < rows; r++) {
		const uint32_t *in = wq + r * wpr;
		for (uint64_t j = 0; j < cols; j++) {
			uint64_t bit = j * (uint64_t)bits, word = bit / 32;
			uint64_t v = in[word];
			if (word + 1 < wpr)
				v |= (uint64_t)in[word + 1] << 32;
			uint32_t code = (uint32_t)(v >> (bit % 32)) & mask;
			uint64_t g = r * gpr + j / (uint64_t)group_size;
			w[r * cols + j] = gguf_f16_to_f32(scales[g]) * (float)code + gguf_f16_to_f32(biases[g]);
		}
	}
}

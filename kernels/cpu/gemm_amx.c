/* kernels/cpu/gemm_amx.c — the quantized GEMM (prefill) on AMX-BF16 tiles.
 * Compiled with AMX_FLAGS (AVX-512 + AVX512-BF16 + AMX-TILE/BF16); entered
 * only through k_amx_matmul, which does nothing unless kernels_cpu_prepare
 * found the CPU features and got the tile state from the OS (dispatch.c).
 *
 * Exact enough to stand in for the f32 GEMM. MLX affine quantization gives,
 * per group g of row r,
 *     y_r = sum_g s_rg * (sum_{j in g} q_rj x_j) + b_rg * (sum_{j in g} x_j).
 * The codes q (0..255) are exact in bf16. Each f32 activation is split
 * into three bf16 terms x = hi + mid + lo (hi = bf16(x), mid = bf16(x - hi),
 * lo = x - hi - mid: 8 + 8 + 8 significant bits, so the split is exact
 * for every normal x), and TDPBF16PS multiplies exact codes by exact terms
 * and accumulates in f32. The group dot is thus an f32 dot in another
 * summation order, the same quality as the f32 kernels; the per-group
 * scale and bias are applied in f32 with AVX-512, as the matvec does.
 * Rejected: two terms (16 bits per activation) and int8 VNNI with split
 * activations; the random-weight fixtures of tests/py amplify activation
 * rounding of ~2^-16 into logit differences past their tolerance (see
 * kernels_avx512.c, matvec #4), and two terms are at the same level.
 *
 * Tiles (C[token][row] += A[token][k] B[k][row]), 2 x 2 blocking:
 *   tmm0..1  A: two blocks of 16 tokens x 32 columns of one term (bf16);
 *   tmm2..3  B: 32 columns x two blocks of 16 rows of codes, in the pair
 *            layout (row kk of the tile holds the codes of columns 2kk and
 *            2kk+1 of each of the 16 weight rows);
 *   tmm4..7  C: 32 tokens x 32 rows, f32, one group's partial dots.
 * Per 32 columns: 2 B loads, then per term 2 A loads and 4 TDPBF16PS.
 * Four accumulators, not two (#1: 2 x 1 blocking, 7 tiles, A terms kept
 * in tiles): two chains of dependent TDPBF16PS cannot hide its latency,
 * measured 30-33 TSC cycles per TDPBF16PS with long chains against 16
 * with four accumulators reset per group (this machine, a KVM guest).
 *
 * Blocking: tokens in superblocks of up to AMX_TS, columns in chunks of
 * AMX_KC. For each (superblock, chunk) the activations are split once into
 * g_xs (tile-contiguous; 768 KiB: stays in L2) in parallel over token
 * blocks, then each task takes 32 weight rows: decodes their codes for the
 * chunk into the pair layout (16 KiB on its stack: L1), and runs every
 * token pair of the superblock against it, adding each group's scaled
 * partials into a 32 x 32 accumulator that meets y once per chunk (#2:
 * adding into y per group: the 32 tokens' y rows are rows*4 bytes apart,
 * one L1 set at 2048 rows, and those loads took a fifth of the time). The
 * codes are decoded once per superblock, never stored beyond the task.
 *
 * Not reentrant: g_xs is one static buffer, so one matmul at a time (the
 * pool already requires one kpool_for caller at a time). */
#include <immintrin.h>

#include "kernels/cpu/kinternal.h"
#include "kernels/cpu/simd_avx512.h"

#define AI static inline __attribute__((always_inline))

#define AMX_TS 512   /* tokens per superblock: a multiple of 32 */
#define AMX_KC 256   /* columns per chunk: a multiple of every group size */
#define AMX_RB 32    /* weight rows per task: two B tiles */
#ifndef AMX_TERMS
#define AMX_TERMS 3  /* bf16 terms per activation (2: for measuring only) */
#endif
/* Below this many tokens the f32 GEMM is faster: decoding the codes into
 * tiles is paid per call and tokens are padded to 32 (1B shapes, one
 * thread: 8 tokens 49 against 57 GFLOP/s, 16 tokens 97 against 61). */
#define AMX_MIN_N 12

int k_amx_ready; /* set by kernels_cpu_prepare (dispatch.c) */

/* [superblock token block][32-column step][term][16 tokens][32 columns] */
static uint16_t g_xs[AMX_TS / 16][AMX_KC / 32][AMX_TERMS][16][32] __attribute__((aligned(64)));
static float g_xsum[AMX_TS][AMX_KC / 32]; /* sum of x over each group */
/* The band's partial y, per 32-row block [AMX_TS tokens][32 rows]: each
 * task's accumulators are contiguous, and y sees each element once. */
#define AMX_ACC_FLOATS (AMX_TS * 4096)
static float g_acc[AMX_ACC_FLOATS] __attribute__((aligned(64)));

/* LDTILECFG's 64-byte operand, palette 1. */
typedef struct {
	uint8_t palette, start_row, reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
} amx_cfg;
_Static_assert(sizeof(amx_cfg) == 64, "LDTILECFG operand is 64 bytes");

typedef struct {
	const kq_matrix *m;
	const float *x;
	const float *bias;
	float *y;
	int n;      /* tokens in all */
	int s0, ts; /* this superblock: tokens [s0, s0 + ts) */
	int k0, kc; /* this chunk: columns [k0, k0 + kc) */
	int rb0;    /* this band: row blocks from rb0 on */
} amx_job;


/* ---- activations: split into bf16 terms --------------------------------- */

AI __m512 bf16_back(__m256i h)
{
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AI __m256i to_bf16(__m512 v)
{
	return (__m256i)_mm512_cvtneps_pbh(v);
}

/* Token block tb of the superblock, columns of the chunk, into g_xs and
 * g_xsum; tokens past n are zeros. */
static void split_task(void *arg, int tb)
{
	const amx_job *j = arg;
	const int cols = j->m->cols, gs = j->m->group_size, nks = j->kc / 32;
	for (int t = 0; t < 16; t++) {
		const int tok = j->s0 + tb * 16 + t, lt = tb * 16 + t;
		if (tok >= j->n || lt >= j->ts) {
			for (int ks = 0; ks < nks; ks++)
				for (int e = 0; e < AMX_TERMS; e++)
					memset(g_xs[tb][ks][e][t], 0, 64);
			continue;
		}
		const float *xr = j->x + (size_t)tok * (size_t)cols + j->k0;
		for (int ks = 0; ks < nks; ks++) {
			__m512 r0 = _mm512_loadu_ps(xr + ks * 32), r1 = _mm512_loadu_ps(xr + ks * 32 + 16);
			for (int e = 0; e < AMX_TERMS; e++) {
				__m256i h0 = to_bf16(r0), h1 = to_bf16(r1);
				_mm512_store_si512(g_xs[tb][ks][e][t], _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1));
				r0 = _mm512_sub_ps(r0, bf16_back(h0));
				r1 = _mm512_sub_ps(r1, bf16_back(h1));
			}
		}
		for (int g = 0; g < j->kc / gs; g++) { /* as the matvec's x_group_sums */
			__m512 a = _mm512_setzero_ps();
			for (int v = 0; v < gs; v += 16)
				a = _mm512_add_ps(a, _mm512_loadu_ps(xr + g * gs + v));
			g_xsum[lt][g] = _mm512_reduce_add_ps(a);
		}
	}
}

/* ---- weights: codes into the B-tile pair layout -------------------------- */

/* Codes [c, c+32) of a packed row as 32 bf16 values (exact: codes < 256).
 * 4-bit: tbl holds bf16(0..15), word i = bf16(i). */
AI __m512i codes_bf16(const uint8_t *row, int bits, int c)
{
	if (bits == 4) {
		const __m512i tbl = _mm512_setr_epi32(0x3f800000, 0x40404000, 0x40a04080, 0x40e040c0, 0x41104100,
						      0x41304120, 0x41504140, 0x41704160, 0, 0, 0, 0, 0, 0, 0, 0);
		__m128i v = _mm_loadu_si128((const __m128i *)(row + c / 2)), mk = _mm_set1_epi8(0x0f);
		__m128i a = _mm_and_si128(v, mk), b = _mm_and_si128(_mm_srli_epi16(v, 4), mk);
		__m256i w = _mm256_set_m128i(_mm_unpackhi_epi8(a, b), _mm_unpacklo_epi8(a, b));
		return _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(w), tbl);
	}
	__m512 f0, f1;
	if (bits == 8) {
		f0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + c))));
		f1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + c + 16))));
	} else { /* 2, 3, 5, 6 bits: a few percent of the tile work */
		float f[32];
		for (int i = 0; i < 32; i++)
			f[i] = (float)k_code(row, bits, (size_t)(c + i));
		f0 = _mm512_loadu_ps(f);
		f1 = _mm512_loadu_ps(f + 16);
	}
	return (__m512i)_mm512_cvtne2ps_pbh(f1, f0);
}

/* r[i] (16 x 16 dwords) transposed in place. */
AI void transpose16(__m512i r[16])
{
	__m512i t[16];
	for (int i = 0; i < 16; i += 2) {
		t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
		t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
	}
	for (int a = 0; a < 16; a += 4) {
		r[a] = _mm512_unpacklo_epi64(t[a], t[a + 2]);
		r[a + 1] = _mm512_unpackhi_epi64(t[a], t[a + 2]);
		r[a + 2] = _mm512_unpacklo_epi64(t[a + 1], t[a + 3]);
		r[a + 3] = _mm512_unpackhi_epi64(t[a + 1], t[a + 3]);
	}
	for (int b = 0; b < 4; b++) {
		t[b] = _mm512_shuffle_i32x4(r[b], r[4 + b], 0x88);
		t[4 + b] = _mm512_shuffle_i32x4(r[b], r[4 + b], 0xdd);
		t[8 + b] = _mm512_shuffle_i32x4(r[8 + b], r[12 + b], 0x88);
		t[12 + b] = _mm512_shuffle_i32x4(r[8 + b], r[12 + b], 0xdd);
	}
	for (int b = 0; b < 4; b++) {
		r[b] = _mm512_shuffle_i32x4(t[b], t[8 + b], 0x88);
		r[4 + b] = _mm512_shuffle_i32x4(t[4 + b], t[12 + b], 0x88);
		r[8 + b] = _mm512_shuffle_i32x4(t[b], t[8 + b], 0xdd);
		r[12 + b] = _mm512_shuffle_i32x4(t[4 + b], t[12 + b], 0xdd);
	}
}

/* ---- the tile loop ------------------------------------------------------ */

static void rows_task(void *arg, int rbi)
{
	const amx_job *j = arg;
	const int rb = j->rb0 + rbi;
	const kq_matrix *m = j->m;
	const int rows = m->rows, bits = m->bits, gs = m->group_size, ng = m->cols / gs;
	const int r0 = rb * AMX_RB, nr = rows - r0 < AMX_RB ? rows - r0 : AMX_RB;
	const int nks = j->kc / 32, ngc = j->kc / gs, kpg = gs / 32;
	const size_t rbytes = k_row_bytes(m);
	const __mmask16 mk0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
	const __mmask16 mk1 = nr >= 32 ? 0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
	uint32_t panel[2][AMX_KC / 32][16][16] __attribute__((aligned(64)));
	float sc[AMX_KC / 32][AMX_RB], bi[AMX_KC / 32][AMX_RB], cbuf[32][AMX_RB] __attribute__((aligned(64)));
	float(*acc)[AMX_RB] = (float(*)[AMX_RB])(g_acc + (size_t)rbi * AMX_TS * AMX_RB);

	/* the chunk's codes of all 32 rows at once: the decode below walks
	 * them 16 bytes a row at a time and would wait for each line */
	for (int i = 0; i < nr; i++) {
		const char *p = (const char *)m->w + (size_t)(r0 + i) * rbytes + (size_t)j->k0 * (size_t)bits / 8;
		for (int o = 0; o < j->kc * bits / 8; o += 64)
			_mm_prefetch(p + o, _MM_HINT_T0);
	}
	for (int h = 0; h < 2; h++)
		for (int ks = 0; ks < nks; ks++) {
			__m512i v[16];
			for (int i = 0; i < 16; i++) {
				int r = r0 + h * 16 + i;
				v[i] = r < rows ? codes_bf16((const uint8_t *)m->w + (size_t)r * rbytes, bits, j->k0 + ks * 32)
						: _mm512_setzero_si512();
			}
			transpose16(v);
			for (int i = 0; i < 16; i++)
				_mm512_store_si512(panel[h][ks][i], v[i]);
		}
	for (int g = 0; g < ngc; g++)
		for (int i = 0; i < AMX_RB; i++) {
			size_t gi = (size_t)(r0 + i) * (size_t)ng + (size_t)(j->k0 / gs + g);
			sc[g][i] = i < nr ? ld_sb(m->sdt, m->scales, gi) : 0.0f;
			bi[g][i] = i < nr ? ld_sb(m->sdt, m->biases, gi) : 0.0f;
		}

	amx_cfg cfg;
	memset(&cfg, 0, sizeof(cfg));
	cfg.palette = 1;
	for (int i = 0; i < 8; i++) {
		cfg.colsb[i] = 64;
		cfg.rows[i] = 16;
	}
	_tile_loadconfig(&cfg);
	const int first = j->k0 == 0, last = j->k0 + j->kc == m->cols;
	for (int tb = 0; tb * 16 < j->ts; tb += 2, acc += 32) {
		const int nt = j->ts - tb * 16 < 32 ? j->ts - tb * 16 : 32;
		for (int t = 0; t < nt && first; t++) {
			_mm512_store_ps(acc[t], j->bias ? _mm512_maskz_loadu_ps(mk0, j->bias + r0) : _mm512_setzero_ps());
			_mm512_store_ps(acc[t] + 16, j->bias ? _mm512_maskz_loadu_ps(mk1, j->bias + r0 + 16) : _mm512_setzero_ps());
		}
		for (int g = 0; g < ngc; g++) {
			_tile_zero(4);
			_tile_zero(5);
			_tile_zero(6);
			_tile_zero(7);
			for (int ks = g * kpg; ks < (g + 1) * kpg; ks++) {
				_tile_loadd(2, panel[0][ks], 64);
				_tile_loadd(3, panel[1][ks], 64);
				for (int e = 0; e < AMX_TERMS; e++) {
					_tile_loadd(0, g_xs[tb][ks][e], 64);
					_tile_loadd(1, g_xs[tb + 1][ks][e], 64);
					_tile_dpbf16ps(4, 0, 2);
					_tile_dpbf16ps(5, 0, 3);
					_tile_dpbf16ps(6, 1, 2);
					_tile_dpbf16ps(7, 1, 3);
				}
			}
			_tile_stored(4, cbuf[0], AMX_RB * 4);
			_tile_stored(5, cbuf[0] + 16, AMX_RB * 4);
			_tile_stored(6, cbuf[16], AMX_RB * 4);
			_tile_stored(7, cbuf[16] + 16, AMX_RB * 4);
			const __m512 s0 = _mm512_loadu_ps(sc[g]), s1 = _mm512_loadu_ps(sc[g] + 16);
			const __m512 b0 = _mm512_loadu_ps(bi[g]), b1 = _mm512_loadu_ps(bi[g] + 16);
			for (int t = 0; t < nt; t++) {
				const __m512 xs = _mm512_set1_ps(g_xsum[tb * 16 + t][g]);
				__m512 y0 = _mm512_fmadd_ps(b0, xs, _mm512_load_ps(acc[t]));
				__m512 y1 = _mm512_fmadd_ps(b1, xs, _mm512_load_ps(acc[t] + 16));
				_mm512_store_ps(acc[t], _mm512_fmadd_ps(s0, _mm512_load_ps(cbuf[t]), y0));
				_mm512_store_ps(acc[t] + 16, _mm512_fmadd_ps(s1, _mm512_load_ps(cbuf[t] + 16), y1));
			}
		}
		for (int t = 0; t < nt && last; t++) {
			float *yp = j->y + (size_t)(j->s0 + tb * 16 + t) * (size_t)rows + r0;
			_mm512_mask_storeu_ps(yp, mk0, _mm512_load_ps(acc[t]));
			_mm512_mask_storeu_ps(yp + 16, mk1, _mm512_load_ps(acc[t] + 16));
		}
	}
	_tile_release();
}

int k_amx_matmul(const kq_matrix *m, const float *x, int n, const float *bias, float *y)
{
	if (!k_amx_ready || m->bits == 0 || n < AMX_MIN_N || m->rows <= 0 || m->group_size % 32 ||
	    AMX_KC % m->group_size)
		return -1;
	amx_job j = {.m = m, .x = x, .bias = bias, .y = y, .n = n};
	const int nrb = (m->rows + AMX_RB - 1) / AMX_RB, band = AMX_ACC_FLOATS / (AMX_TS * AMX_RB);
	for (j.s0 = 0; j.s0 < n; j.s0 += AMX_TS) {
		j.ts = n - j.s0 < AMX_TS ? n - j.s0 : AMX_TS;
		for (j.rb0 = 0; j.rb0 < nrb; j.rb0 += band) {
			const int nb = nrb - j.rb0 < band ? nrb - j.rb0 : band;
			for (j.k0 = 0; j.k0 < m->cols; j.k0 += AMX_KC) {
				j.kc = m->cols - j.k0 < AMX_KC ? m->cols - j.k0 : AMX_KC;
				kpool_for((j.ts + 31) / 32 * 2, split_task, &j); /* pairs of token blocks */
				kpool_for(nb, rows_task, &j);
			}
		}
	}
	return 0;
}

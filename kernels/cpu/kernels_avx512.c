/* kernels/cpu/kernels_avx512.c — AVX-512 F/BW/VL/DQ + FMA + F16C kernels.
 * Compiled with AVX512_FLAGS; reached only through kernels_avx512(), which
 * checks every one of those features first (dispatch.c).
 *
 * Quantized matvec (decode). Per group g of row r:
 *     sum_j (s*q_j + b) x_j = s * (q . x_g) + b * sum(x_g)
 * sum(x_g) is computed once per call; the inner loop is then one
 * unsigned-byte -> int32 -> f32 conversion and one FMA per 16 codes.
 * Codes are unpacked in natural order straight from the packed bytes, so x
 * needs no permuted copy:
 *   4-bit: one 16-byte load -> low/high nibbles -> unpack{lo,hi}_epi8 gives
 *          codes 0..15 and 16..31 in order;
 *   8-bit: vpmovzxbd; 2-bit: four 2-bit fields, two rounds of unpack;
 *   3/5/6-bit: a masked load of exactly 2*bits bytes (no over-read),
 *          broadcast to the four 128-bit lanes, vpshufb picks the two
 *          bytes holding code i into lane i, vpsrlvd + and extract it.
 * Loads of weights, scales and biases are unaligned-safe (loadu, masked
 * loads, memcpy); nothing reads a byte outside the tensor.
 *
 * Quantized GEMM (prefill): a tile of MM_ROWS rows x MM_KC columns is
 * dequantized into a 16 KiB stack buffer (L1) and applied to every token
 * with a 4x4 (rows x tokens) register-blocked micro-kernel; the tile is
 * transient, per thread, never a stored copy of the matrix.
 *
 * 4-bit matvec with AVX512-VNNI: matvec_vnni.c (x as three exact-enough
 * int8 terms, not llama.cpp's single 8-bit rounding), chosen per call when
 * the CPU has it and the width is a multiple of 64. Once the weights were
 * in huge pages (st_make_resident) this file's f32 loop, not the memory,
 * was the limit: 10.8 GB/s of codes per core hot against 15.3 GB/s of
 * read bandwidth per core on the 2-core Xeon. */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/kinternal.h"
#include "kernels/cpu/simd_avx512.h"

#define AI static inline __attribute__((always_inline))

/* ---- loads ------------------------------------------------------------ */


/* ---- code unpacking ----------------------------------------------------- */

typedef struct {
	__m512i ctrl, shift, mask;
} dec_t;

static dec_t dec_init(int bits)
{
	dec_t d;
	uint32_t c[16], s[16];
	for (int i = 0; i < 16; i++) {
		uint32_t off = (uint32_t)(i * bits), bs = off >> 3;
		c[i] = bs | ((bs + 1) << 8) | 0x80800000u; /* 0x80: zero byte */
		s[i] = off & 7;
	}
	d.ctrl = _mm512_loadu_si512(c);
	d.shift = _mm512_loadu_si512(s);
	d.mask = _mm512_set1_epi32(bits > 0 && bits < 32 ? (1 << bits) - 1 : -1);
	return d;
}

/* Codes [0,16) of a run starting byte-aligned at p, for bits 3, 5, 6. */
AI __m512i codes16(const uint8_t *p, int bits, const dec_t *d)
{
	__m128i v = _mm_maskz_loadu_epi8((__mmask16)((1u << (2 * bits)) - 1), p);
	__m512i b = _mm512_broadcast_i32x4(v);
	b = _mm512_shuffle_epi8(b, d->ctrl);
	return _mm512_and_si512(_mm512_srlv_epi32(b, d->shift), d->mask);
}

/* Codes [0,32) of a run starting at p (32*bits/8 bytes) as two f32 vectors. */
AI void dec32(const uint8_t *p, int bits, const dec_t *d, __m512 *c0, __m512 *c1)
{
	__m128i lo, hi;
	if (bits == 8) {
		lo = _mm_loadu_si128((const __m128i *)p);
		hi = _mm_loadu_si128((const __m128i *)(p + 16));
	} else if (bits == 4) {
		__m128i v = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(0x0f);
		__m128i a = _mm_and_si128(v, m), b = _mm_and_si128(_mm_srli_epi16(v, 4), m);
		lo = _mm_unpacklo_epi8(a, b);
		hi = _mm_unpackhi_epi8(a, b);
	} else if (bits == 2) {
		__m128i v = _mm_loadl_epi64((const __m128i *)p), m = _mm_set1_epi8(3);
		__m128i f0 = _mm_and_si128(v, m), f1 = _mm_and_si128(_mm_srli_epi16(v, 2), m);
		__m128i f2 = _mm_and_si128(_mm_srli_epi16(v, 4), m), f3 = _mm_and_si128(_mm_srli_epi16(v, 6), m);
		__m128i a = _mm_unpacklo_epi8(f0, f1), b = _mm_unpacklo_epi8(f2, f3);
		lo = _mm_unpacklo_epi16(a, b);
		hi = _mm_unpackhi_epi16(a, b);
	} else {
		*c0 = _mm512_cvtepi32_ps(codes16(p, bits, d));
		*c1 = _mm512_cvtepi32_ps(codes16(p + 2 * bits, bits, d));
		return;
	}
	*c0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo));
	*c1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi));
}

/* ---- matvec ------------------------------------------------------------- */

/* Prefetch bytes [off, off+len) of the two rows `ahead` bytes after w0, w1
 * (k_pf_ahead: a whole number of row pairs). A prefetch past the end of
 * the tensor is harmless: it never faults. */
AI void pf_rows(const uint8_t *w0, const uint8_t *w1, size_t ahead, size_t off, int len)
{
	for (int o = 0; o < len; o += 64) {
		_mm_prefetch((const char *)(w0 + ahead + off + (size_t)o), _MM_HINT_T0);
		_mm_prefetch((const char *)(w1 + ahead + off + (size_t)o), _MM_HINT_T0);
	}
}

/* One matrix of a matvec_multi call (a plain matvec is a call of one). */
typedef struct {
	const kq_matrix *m;
	const float *x;
	const float *xs; /* per-group sums of x */
	const float *xp; /* 4-bit only: x with each block of 32 split even/odd */
	const uint8_t *xq; /* 4-bit with VNNI: x as int8 terms (matvec_vnni.c) */
	const float *bias;
	float *y;
	size_t ahead; /* prefetch distance in bytes (k_pf_ahead) */
	dec_t d;
} mv_job;

typedef struct {
	mv_job j[K_MAX_MULTI];
	k_split sp;
} mv_multi;

/* Two rows at a time share every x load and give the core two independent
 * FMA chains per group; an odd last row runs as a pair with itself.
 * Scales and biases are converted 16 groups at a time into vectors: the
 * bias term sum_g b_g * sum(x_g) is then a vector FMA per 16 groups, and
 * each group's scale is a broadcast from a stack array folded into the
 * FMA. Per-group scalar loads and conversions (#2) cost as much as the
 * 64 codes of a group in 4-bit.
 *
 * 4-bit (eo = 1): even/odd order. vpmovzxbd puts byte i (codes 2i, 2i+1)
 * in lane i; `& 15` gives the even codes, `>> 4` the odd ones, so x is
 * split once per call into even/odd halves of each 32-block (xp) and the
 * inner loop is load+zext, and, shift, 2 converts, 2 FMAs per 32 codes
 * with one shuffle-port uop. Tried (#1): unpack{lo,hi}_epi8 to natural
 * order (dec32): four shuffle uops per 32 codes, 5.9 GB/s hot on one core
 * of the 16-core test host, against 6.6 for even/odd alone.
 *
 * Prefetch: the codes of the rows `ahead` bytes on, one chunk of 16
 * groups at a time. The rows are contiguous, so the stream is sequential,
 * but a 4 KiB row (8192 columns at 4 bits) is one page and the hardware
 * prefetcher stops at page boundaries: bench/kbench.c, 2 threads, from
 * DRAM, 11.2 GB/s of a 20.2 GB/s memory without, 15.6 with 2 rows (8 KiB)
 * ahead (1 and 4 rows ahead: less). An earlier trial prefetching within
 * the same row (#3) gained nothing: the gain is in crossing into the next
 * rows' pages. The distance is in bytes (k_pf_ahead), not rows: 2 rows of
 * a 576-column matrix (SmolLM2) are only 576 bytes, too short to hide a
 * DRAM miss.
 *
 * Tried and rejected (#4): x quantized to int16 per 32-block, codes x
 * activations summed in int32 with vpmaddwd (about 2/3 of this loop's
 * vector work: 1.5-2x the hot rate). The rounding (1.5e-5 of a block's
 * largest value) is too coarse for models whose activations have
 * outliers: decode then differed from prefill by 0.07 (Llama fixture)
 * to 1.1 (Gemma-2 fixture) in the logits, against 0.05 allowed
 * (tests/py/test_engine_ref.py), and greedy left mlx-lm's at a 0.016
 * margin. */
AI void mv_rows_q(const mv_job *j, int r0, int r1, const int bits, const int eo)
{
	const kq_matrix *m = j->m;
	const int gs = m->group_size, ng = m->cols / gs, gbytes = gs * bits / 8;
	const size_t rb = k_row_bytes(m);
	const uint8_t *sc = m->scales, *bi = m->biases;
	const kdtype sdt = m->sdt;
	const float *x = eo ? j->xp : j->x, *xs = j->xs;
	const __m512i mask = _mm512_set1_epi32(15);
	for (int r = r0; r < r1; r += 2) {
		const int pair = r + 1 < r1;
		const uint8_t *w0 = (const uint8_t *)m->w + (size_t)r * rb, *w1 = pair ? w0 + rb : w0;
		size_t g0 = (size_t)r * (size_t)ng, g1 = pair ? g0 + (size_t)ng : g0;
		__m512 t0 = _mm512_setzero_ps(), t1 = t0, u0 = t0, u1 = t0;
		for (int gc = 0; gc < ng; gc += 16) {
			const int gn = ng - gc < 16 ? ng - gc : 16;
			const __mmask16 k = gn == 16 ? 0xffff : (__mmask16)((1u << gn) - 1);
			pf_rows(w0, w1, j->ahead, (size_t)gc * (size_t)gbytes, gn * gbytes);
			__m512 xsv = _mm512_maskz_loadu_ps(k, xs + gc);
			u0 = _mm512_fmadd_ps(ld16(sdt, bi, g0 + (size_t)gc, k), xsv, u0);
			u1 = _mm512_fmadd_ps(ld16(sdt, bi, g1 + (size_t)gc, k), xsv, u1);
			float s0[16], s1[16];
			_mm512_storeu_ps(s0, ld16(sdt, sc, g0 + (size_t)gc, k));
			_mm512_storeu_ps(s1, ld16(sdt, sc, g1 + (size_t)gc, k));
			for (int gi = 0; gi < gn; gi++) {
				const int g = gc + gi;
				const uint8_t *p0 = w0 + (size_t)g * (size_t)gbytes, *p1 = w1 + (size_t)g * (size_t)gbytes;
				const float *xg = x + (size_t)g * (size_t)gs;
				__m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
				for (int v = 0; v < gs; v += 32) {
					__m512 x0 = _mm512_loadu_ps(xg + v), x1 = _mm512_loadu_ps(xg + v + 16);
					__m512 c0, c1, e0, e1;
					if (eo) {
						__m512i b0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p0 + v / 2)));
						__m512i b1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p1 + v / 2)));
						c0 = _mm512_cvtepi32_ps(_mm512_and_si512(b0, mask));
						c1 = _mm512_cvtepi32_ps(_mm512_srli_epi32(b0, 4));
						e0 = _mm512_cvtepi32_ps(_mm512_and_si512(b1, mask));
						e1 = _mm512_cvtepi32_ps(_mm512_srli_epi32(b1, 4));
					} else {
						dec32(p0 + v * bits / 8, bits, &j->d, &c0, &c1);
						dec32(p1 + v * bits / 8, bits, &j->d, &e0, &e1);
					}
					a0 = _mm512_fmadd_ps(c0, x0, a0);
					a1 = _mm512_fmadd_ps(e0, x0, a1);
					a0 = _mm512_fmadd_ps(c1, x1, a0);
					a1 = _mm512_fmadd_ps(e1, x1, a1);
				}
				t0 = _mm512_fmadd_ps(_mm512_set1_ps(s0[gi]), a0, t0);
				t1 = _mm512_fmadd_ps(_mm512_set1_ps(s1[gi]), a1, t1);
			}
		}
		j->y[r] = _mm512_reduce_add_ps(t0) + _mm512_reduce_add_ps(u0) + (j->bias ? j->bias[r] : 0.0f);
		if (pair)
			j->y[r + 1] = _mm512_reduce_add_ps(t1) + _mm512_reduce_add_ps(u1) + (j->bias ? j->bias[r + 1] : 0.0f);
	}
}

AI void mv_rows_dense(const mv_job *j, int r0, int r1, const kdtype wdt)
{
	const int cols = j->m->cols;
	for (int r = r0; r < r1; r++) {
		size_t base = (size_t)r * (size_t)cols;
		__m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
		int c = 0;
		for (; c + 32 <= cols; c += 32) {
			a0 = _mm512_fmadd_ps(ld16(wdt, j->m->w, base + (size_t)c, 0xffff), _mm512_loadu_ps(j->x + c), a0);
			a1 = _mm512_fmadd_ps(ld16(wdt, j->m->w, base + (size_t)c + 16, 0xffff),
					     _mm512_loadu_ps(j->x + c + 16), a1);
		}
		for (; c < cols; c += 16) {
			__mmask16 k = cols - c >= 16 ? 0xffff : (__mmask16)((1u << (cols - c)) - 1);
			a0 = _mm512_fmadd_ps(ld16(wdt, j->m->w, base + (size_t)c, k), _mm512_maskz_loadu_ps(k, j->x + c), a0);
		}
		j->y[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) + (j->bias ? j->bias[r] : 0.0f);
	}
}

static void mv_range(const mv_job *j, int r0, int r1)
{
	switch (j->m->bits) {
	case 0:
		if (j->m->wdt == KDT_F32)
			mv_rows_dense(j, r0, r1, KDT_F32);
		else if (j->m->wdt == KDT_F16)
			mv_rows_dense(j, r0, r1, KDT_F16);
		else
			mv_rows_dense(j, r0, r1, KDT_BF16);
		break;
	case 2: mv_rows_q(j, r0, r1, 2, 0); break;
	case 3: mv_rows_q(j, r0, r1, 3, 0); break;
	case 4:
		if (j->xq)
			k_vnni_rows_q4(j->m, j->xq, j->xs, j->bias, j->y, j->ahead, r0, r1);
		else if (j->xp)
			mv_rows_q(j, r0, r1, 4, 1);
		else
			mv_rows_q(j, r0, r1, 4, 0);
		break;
	case 5: mv_rows_q(j, r0, r1, 5, 0); break;
	case 6: mv_rows_q(j, r0, r1, 6, 0); break;
	default: mv_rows_q(j, r0, r1, 8, 0); break;
	}
}

static void mv_task(void *arg, int i)
{
	const mv_multi *mm = arg;
	int r0, r1, k = k_split_task(&mm->sp, i, &r0, &r1);
	mv_range(&mm->j[k], r0, r1);
}

/* xp[b*32 + i] = x[b*32 + 2i], xp[b*32 + 16 + i] = x[b*32 + 2i + 1]. */
static void x_even_odd(const float *x, int cols, float *xp)
{
	const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
	for (int b = 0; b < cols; b += 32) {
		__m512 lo = _mm512_loadu_ps(x + b), hi = _mm512_loadu_ps(x + b + 16);
		_mm512_storeu_ps(xp + b, _mm512_permutex2var_ps(lo, ie, hi));
		_mm512_storeu_ps(xp + b + 16, _mm512_permutex2var_ps(lo, io, hi));
	}
}

static void x_group_sums(const float *x, int cols, int gs, float *xs)
{
	for (int g = 0; g < cols / gs; g++) {
		__m512 a = _mm512_setzero_ps();
		for (int v = 0; v < gs; v += 16)
			a = _mm512_add_ps(a, _mm512_loadu_ps(x + g * gs + v));
		xs[g] = _mm512_reduce_add_ps(a);
	}
}

/* Every matrix reads the same x: its group sums (one array per group size
 * in use) and the 4-bit even/odd copy are made once, on the calling
 * thread, and the rows of all matrices go to the pool as one job
 * (k_split). Each row is computed exactly as a matvec of its matrix alone
 * would: the results are the same bits. */
static void avx512_matvec_multi(const kq_matrix *const *ms, int nm, const float *x, const float *const *bias,
				float *const *y)
{
	if (nm > K_MAX_MULTI) {
		avx512_matvec_multi(ms + K_MAX_MULTI, nm - K_MAX_MULTI, x, bias ? bias + K_MAX_MULTI : NULL,
				    y + K_MAX_MULTI);
		nm = K_MAX_MULTI;
	}
	if (nm <= 0)
		return;
	const int cols = ms[0]->cols;
	mv_multi mm;
	const kq_matrix *use[K_MAX_MULTI];
	int gsv[K_MAX_MULTI], gso[K_MAX_MULTI], ngs = 0, nxs = 0, want_xp = 0, want_xq = 0, nu = 0;
	for (int k = 0; k < nm; k++) {
		const kq_matrix *m = ms[k];
		const float *b = bias ? bias[k] : NULL;
		if (m->rows <= 0)
			continue;
		if (m->bits != 0 && m->cols / m->group_size > K_MAX_GROUPS) {
			k_table_ref.matvec(m, x, b, y[k]);
			continue;
		}
		mm.j[nu] = (mv_job){.m = m, .x = x, .bias = b, .y = y[k], .ahead = k_pf_ahead(k_row_bytes(m))};
		use[nu++] = m;
		if (m->bits == 4 && cols <= K_MAX_PERM_COLS && k_vnni_ready && cols % 64 == 0)
			want_xq = 1;
		else if (m->bits == 4 && cols <= K_MAX_PERM_COLS)
			want_xp = 1;
		int g = 0;
		while (m->bits != 0 && g < ngs && gsv[g] != m->group_size)
			g++;
		if (m->bits != 0 && g == ngs) {
			gsv[ngs] = m->group_size;
			gso[ngs++] = nxs;
			nxs += cols / m->group_size;
		}
	}
	if (nu == 0)
		return;
	float xs[nxs > 0 ? nxs : 1], xp[want_xp ? cols : 1];
	for (int g = 0; g < ngs; g++)
		x_group_sums(x, cols, gsv[g], xs + gso[g]);
	uint8_t xq[want_xq ? k_vnni_xq_bytes(cols) : 1];
	if (want_xp)
		x_even_odd(x, cols, xp);
	if (want_xq)
		k_vnni_quantize_x(x, cols, xq);
	for (int k = 0; k < nu; k++) {
		mv_job *j = &mm.j[k];
		if (j->m->bits == 0)
			continue;
		int g = 0;
		while (gsv[g] != j->m->group_size)
			g++;
		j->xs = xs + gso[g];
		j->d = dec_init(j->m->bits);
		if (j->m->bits == 4 && want_xq)
			j->xq = xq;
		else if (j->m->bits == 4 && want_xp)
			j->xp = xp;
	}
	k_split_init(&mm.sp, use, nu);
	k_split_run(&mm.sp, mv_task, &mm);
}

static void avx512_matvec(const kq_matrix *m, const float *x, const float *bias, float *y)
{
	avx512_matvec_multi(&m, 1, x, &bias, &y);
}

/* ---- dequantize a segment (embed, GEMM tiles) --------------------------- */

/* out[0..kc) = row r, columns [k0, k0+kc), dequantized (fma(s, q, b)).
 * Quantized: k0 and kc are multiples of group_size. Writes exactly kc. */
AI void deq_seg_q(const kq_matrix *m, int r, int k0, int kc, float *out, const dec_t *d, const int bits)
{
	const int gs = m->group_size, ng = m->cols / gs;
	const uint8_t *row = (const uint8_t *)m->w + (size_t)r * k_row_bytes(m);
	for (int c = k0; c < k0 + kc; c += gs) {
		size_t gi = (size_t)r * (size_t)ng + (size_t)(c / gs);
		__m512 s = _mm512_set1_ps(ld_sb(m->sdt, m->scales, gi));
		__m512 b = _mm512_set1_ps(ld_sb(m->sdt, m->biases, gi));
		for (int v = c; v < c + gs; v += 32) {
			__m512 c0, c1;
			dec32(row + (size_t)v * (size_t)bits / 8, bits, d, &c0, &c1);
			_mm512_storeu_ps(out + (v - k0), _mm512_fmadd_ps(c0, s, b));
			_mm512_storeu_ps(out + (v - k0) + 16, _mm512_fmadd_ps(c1, s, b));
		}
	}
}

AI void deq_seg_dense(const kq_matrix *m, int r, int k0, int kc, float *out, const kdtype wdt)
{
	size_t base = (size_t)r * (size_t)m->cols + (size_t)k0;
	for (int c = 0; c < kc; c += 16) {
		__mmask16 k = kc - c >= 16 ? 0xffff : (__mmask16)((1u << (kc - c)) - 1);
		_mm512_mask_storeu_ps(out + c, k, ld16(wdt, m->w, base + (size_t)c, k));
	}
}

static void deq_seg(const kq_matrix *m, int r, int k0, int kc, float *out, const dec_t *d)
{
	switch (m->bits) {
	case 0:
		if (m->wdt == KDT_F32)
			deq_seg_dense(m, r, k0, kc, out, KDT_F32);
		else if (m->wdt == KDT_F16)
			deq_seg_dense(m, r, k0, kc, out, KDT_F16);
		else
			deq_seg_dense(m, r, k0, kc, out, KDT_BF16);
		break;
	case 2: deq_seg_q(m, r, k0, kc, out, d, 2); break;
	case 3: deq_seg_q(m, r, k0, kc, out, d, 3); break;
	case 4: deq_seg_q(m, r, k0, kc, out, d, 4); break;
	case 5: deq_seg_q(m, r, k0, kc, out, d, 5); break;
	case 6: deq_seg_q(m, r, k0, kc, out, d, 6); break;
	default: deq_seg_q(m, r, k0, kc, out, d, 8); break;
	}
}

static void avx512_embed(const kq_matrix *m, int row, float *out)
{
	dec_t d = dec_init(m->bits);
	deq_seg(m, row, 0, m->cols, out, &d);
}

/* ---- matmul ------------------------------------------------------------- */

#define MM_ROWS 8  /* rows per task tile */
#define MM_KC 512  /* columns per tile: 8 x 512 x 4 B = 16 KiB, stays in L1 */

typedef struct {
	const kq_matrix *m;
	const float *x;
	int n;
	const float *bias;
	float *y;
	dec_t d;
} mm_job;

/* acc[r][t] = w_r . x_t over kc columns for 4 rows x 4 tokens. */
static void micro44(const float *w0, const float *w1, const float *w2, const float *w3, const float *x0,
		    const float *x1, const float *x2, const float *x3, int kc, float out[4][4])
{
	__m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;
	__m512 a10 = a00, a11 = a00, a12 = a00, a13 = a00;
	__m512 a20 = a00, a21 = a00, a22 = a00, a23 = a00;
	__m512 a30 = a00, a31 = a00, a32 = a00, a33 = a00;
	for (int k = 0; k < kc; k += 16) {
		__mmask16 mk = kc - k >= 16 ? 0xffff : (__mmask16)((1u << (kc - k)) - 1);
		__m512 v0 = _mm512_maskz_loadu_ps(mk, x0 + k), v1 = _mm512_maskz_loadu_ps(mk, x1 + k);
		__m512 v2 = _mm512_maskz_loadu_ps(mk, x2 + k), v3 = _mm512_maskz_loadu_ps(mk, x3 + k);
		__m512 w = _mm512_maskz_loadu_ps(mk, w0 + k);
		a00 = _mm512_fmadd_ps(w, v0, a00);
		a01 = _mm512_fmadd_ps(w, v1, a01);
		a02 = _mm512_fmadd_ps(w, v2, a02);
		a03 = _mm512_fmadd_ps(w, v3, a03);
		w = _mm512_maskz_loadu_ps(mk, w1 + k);
		a10 = _mm512_fmadd_ps(w, v0, a10);
		a11 = _mm512_fmadd_ps(w, v1, a11);
		a12 = _mm512_fmadd_ps(w, v2, a12);
		a13 = _mm512_fmadd_ps(w, v3, a13);
		w = _mm512_maskz_loadu_ps(mk, w2 + k);
		a20 = _mm512_fmadd_ps(w, v0, a20);
		a21 = _mm512_fmadd_ps(w, v1, a21);
		a22 = _mm512_fmadd_ps(w, v2, a22);
		a23 = _mm512_fmadd_ps(w, v3, a23);
		w = _mm512_maskz_loadu_ps(mk, w3 + k);
		a30 = _mm512_fmadd_ps(w, v0, a30);
		a31 = _mm512_fmadd_ps(w, v1, a31);
		a32 = _mm512_fmadd_ps(w, v2, a32);
		a33 = _mm512_fmadd_ps(w, v3, a33);
	}
	out[0][0] = _mm512_reduce_add_ps(a00), out[0][1] = _mm512_reduce_add_ps(a01);
	out[0][2] = _mm512_reduce_add_ps(a02), out[0][3] = _mm512_reduce_add_ps(a03);
	out[1][0] = _mm512_reduce_add_ps(a10), out[1][1] = _mm512_reduce_add_ps(a11);
	out[1][2] = _mm512_reduce_add_ps(a12), out[1][3] = _mm512_reduce_add_ps(a13);
	out[2][0] = _mm512_reduce_add_ps(a20), out[2][1] = _mm512_reduce_add_ps(a21);
	out[2][2] = _mm512_reduce_add_ps(a22), out[2][3] = _mm512_reduce_add_ps(a23);
	out[3][0] = _mm512_reduce_add_ps(a30), out[3][1] = _mm512_reduce_add_ps(a31);
	out[3][2] = _mm512_reduce_add_ps(a32), out[3][3] = _mm512_reduce_add_ps(a33);
}

static void mm_task(void *arg, int i)
{
	const mm_job *j = arg;
	const kq_matrix *m = j->m;
	const int rows = m->rows, cols = m->cols, n = j->n;
	int r0 = i * MM_ROWS, nr = rows - r0 < MM_ROWS ? rows - r0 : MM_ROWS;
	float wbuf[MM_ROWS][MM_KC] __attribute__((aligned(64)));
	for (int k0 = 0; k0 < cols; k0 += MM_KC) {
		int kc = cols - k0 < MM_KC ? cols - k0 : MM_KC;
		for (int r = 0; r < nr; r++)
			deq_seg(m, r0 + r, k0, kc, wbuf[r], &j->d);
		for (int t0 = 0; t0 < n; t0 += 4) {
			int nt = n - t0 < 4 ? n - t0 : 4;
			const float *xt[4];
			for (int t = 0; t < 4; t++) /* past the last token: reuse one, discard */
				xt[t] = j->x + (size_t)(t0 + (t < nt ? t : 0)) * (size_t)cols + (size_t)k0;
			for (int rr = 0; rr < nr; rr += 4) {
				const float *wr[4];
				for (int r = 0; r < 4; r++)
					wr[r] = wbuf[rr + r < nr ? rr + r : rr];
				float out[4][4];
				micro44(wr[0], wr[1], wr[2], wr[3], xt[0], xt[1], xt[2], xt[3], kc, out);
				for (int r = 0; r < 4 && rr + r < nr; r++)
					for (int t = 0; t < nt; t++) {
						float *yp = j->y + (size_t)(t0 + t) * (size_t)rows + (size_t)(r0 + rr + r);
						float base = k0 ? *yp : (j->bias ? j->bias[r0 + rr + r] : 0.0f);
						*yp = base + out[r][t];
					}
			}
		}
	}
}

static void avx512_matmul(const kq_matrix *m, const float *x, int n, const float *bias, float *y)
{
	if (n <= 0 || m->rows <= 0)
		return;
	if (n == 1) {
		avx512_matvec(m, x, bias, y);
		return;
	}
	if (k_amx_matmul(m, x, n, bias, y) == 0) /* gemm_amx.c, where the CPU has AMX */
		return;
	mm_job j = {.m = m, .x = x, .n = n, .bias = bias, .y = y, .d = dec_init(m->bits)};
	kpool_for((m->rows + MM_ROWS - 1) / MM_ROWS, mm_task, &j);
}

/* ---- elementwise -------------------------------------------------------- */

AI __m512 act512(__m512 g, int act)
{
	const __m512 one = _mm512_set1_ps(1.0f);
	if (act == 0) /* g * sigmoid(g) */
		return _mm512_div_ps(g, _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), g))));
	/* GELU (tanh approximation) as g / (1 + exp(-2u)), as the reference */
	__m512 g3 = _mm512_mul_ps(_mm512_mul_ps(g, g), g);
	__m512 u2 = _mm512_mul_ps(_mm512_set1_ps(-2.0f * 0.7978845608028654f),
				  _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), g3, g));
	return _mm512_div_ps(g, _mm512_add_ps(one, exp512(u2)));
}

static void avx512_glu(float *gate, const float *up, int n, int act)
{
	for (int i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
		__m512 g = _mm512_maskz_loadu_ps(k, gate + i);
		__m512 a = act == 0 ? act512(g, 0) : act512(g, 1);
		_mm512_mask_storeu_ps(gate + i, k, _mm512_mul_ps(a, _mm512_maskz_loadu_ps(k, up + i)));
	}
}

static void avx512_rmsnorm(const float *x, const float *w, int n, float eps, int add_one, float *out)
{
	__m512 a = _mm512_setzero_ps();
	for (int i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
		__m512 v = _mm512_maskz_loadu_ps(k, x + i);
		a = _mm512_fmadd_ps(v, v, a);
	}
	__m512 inv = _mm512_set1_ps(1.0f / sqrtf(_mm512_reduce_add_ps(a) / (float)n + eps));
	__m512 one = _mm512_set1_ps(add_one ? 1.0f : 0.0f);
	for (int i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
		__m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), inv);
		_mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(v, _mm512_add_ps(_mm512_maskz_loadu_ps(k, w + i), one)));
	}
}

static void avx512_rope(float *x, int nheads, int head_dim, int rot_dim, int pos, const float *inv_freq,
			float mscale)
{
	int half = rot_dim / 2;
	if (half > K_MAX_ROPE_PAIRS) {
		k_table_ref.rope(x, nheads, head_dim, rot_dim, pos, inv_freq, mscale);
		return;
	}
	float cs[K_MAX_ROPE_PAIRS], sn[K_MAX_ROPE_PAIRS];
	for (int i = 0; i < half; i++) { /* same expression as the reference */
		float th = (float)pos * inv_freq[i];
		cs[i] = cosf(th) * mscale;
		sn[i] = sinf(th) * mscale;
	}
	for (int h = 0; h < nheads; h++) {
		float *xh = x + (size_t)h * (size_t)head_dim;
		for (int i = 0; i < half; i += 16) {
			__mmask16 k = half - i >= 16 ? 0xffff : (__mmask16)((1u << (half - i)) - 1);
			__m512 c = _mm512_maskz_loadu_ps(k, cs + i), s = _mm512_maskz_loadu_ps(k, sn + i);
			__m512 a = _mm512_maskz_loadu_ps(k, xh + i), b = _mm512_maskz_loadu_ps(k, xh + i + half);
			_mm512_mask_storeu_ps(xh + i, k, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)));
			_mm512_mask_storeu_ps(xh + i + half, k, _mm512_fmadd_ps(a, s, _mm512_mul_ps(b, c)));
		}
	}
}

/* attention: attention_avx512.c (k_attention_avx512) */

const kernel_table k_table_avx512 = {
	.name = "avx512",
	.matvec = avx512_matvec,
	.matvec_multi = avx512_matvec_multi,
	.matmul = avx512_matmul,
	.embed = avx512_embed,
	.rmsnorm = avx512_rmsnorm,
	.rope = avx512_rope,
	.glu = avx512_glu,
	.attention = k_attention_avx512,
};

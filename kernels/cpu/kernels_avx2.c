/* kernels/cpu/kernels_avx2.c — AVX2 + FMA + F16C kernels (8 f32 lanes).
 * Compiled with AVX2_FLAGS; reached only through kernels_avx2(), which
 * checks all three first (dispatch.c).
 *
 * Same algorithms as kernels_avx512.c (read its header comment for the
 * matvec identity s*(q.x_g) + b*sum(x_g) and the GEMM tiling); what
 * differs is the unpacking width:
 *   4-bit: an 8-byte load, low/high nibbles, unpacklo_epi8 -> 16 codes in
 *          order; 8-bit: vpmovzxbd; 2-bit: two rounds of unpack;
 *   3/5/6-bit: the 8 codes of `bits` bytes are copied into a u64 (memcpy
 *          of exactly `bits` bytes: no over-read), broadcast to both
 *          128-bit lanes, vpshufb + vpsrlvd + and.
 * Dense tails (cols not a multiple of 8) run scalar; elementwise tails go
 * through an 8-float stack buffer so every lane uses the same formula. */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/kinternal.h"
#include "kernels/cpu/simd_avx2.h"

#define AI static inline __attribute__((always_inline))


AI float ld1(kdtype dt, const void *p, size_t i)
{
	return ld_sb(dt, p, i);
}

/* ---- code unpacking ----------------------------------------------------- */

typedef struct {
	__m256i ctrl, shift, mask;
} dec_t;

static dec_t dec_init(int bits)
{
	dec_t d;
	uint32_t c[8], s[8];
	for (int i = 0; i < 8; i++) {
		uint32_t off = (uint32_t)(i * bits), bs = off >> 3;
		c[i] = bs | ((bs + 1) << 8) | 0x80800000u;
		s[i] = off & 7;
	}
	d.ctrl = _mm256_loadu_si256((const __m256i *)c);
	d.shift = _mm256_loadu_si256((const __m256i *)s);
	d.mask = _mm256_set1_epi32(bits > 0 && bits < 32 ? (1 << bits) - 1 : -1);
	return d;
}

/* Codes [0,8) of a byte-aligned run at p, bits 3, 5, 6. One 8-byte load
 * when 8 bytes remain before `end` (the end of the codes); only the tail
 * of the last row copies exactly `bits` bytes.
 * Tried (#1): always memcpy `bits` bytes into a zeroed u64: the 8-byte
 * reload of a 3-byte store misses store forwarding; 3-bit matvec ran at
 * 0.69 GB/s (2 threads, 16-core test host) against 5.2 for AVX-512. */
AI __m256i codes8(const uint8_t *p, int bits, const dec_t *d, const uint8_t *end)
{
	uint64_t u = 0;
	if (p + 8 <= end)
		memcpy(&u, p, 8);
	else
		memcpy(&u, p, (size_t)bits);
	__m256i b = _mm256_broadcastsi128_si256(_mm_cvtsi64_si128((long long)u));
	b = _mm256_shuffle_epi8(b, d->ctrl);
	return _mm256_and_si256(_mm256_srlv_epi32(b, d->shift), d->mask);
}

/* Codes [0,16) at p (2*bits bytes) as two f32 vectors. */
AI void dec16(const uint8_t *p, int bits, const dec_t *d, __m256 *c0, __m256 *c1, const uint8_t *end)
{
	__m128i u;
	if (bits == 8) {
		*c0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
		*c1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8))));
		return;
	} else if (bits == 4) {
		__m128i v = _mm_loadl_epi64((const __m128i *)p), m = _mm_set1_epi8(0x0f);
		u = _mm_unpacklo_epi8(_mm_and_si128(v, m), _mm_and_si128(_mm_srli_epi16(v, 4), m));
	} else if (bits == 2) {
		int32_t w;
		memcpy(&w, p, 4);
		__m128i v = _mm_cvtsi32_si128(w), m = _mm_set1_epi8(3);
		__m128i f0 = _mm_and_si128(v, m), f1 = _mm_and_si128(_mm_srli_epi16(v, 2), m);
		__m128i f2 = _mm_and_si128(_mm_srli_epi16(v, 4), m), f3 = _mm_and_si128(_mm_srli_epi16(v, 6), m);
		u = _mm_unpacklo_epi16(_mm_unpacklo_epi8(f0, f1), _mm_unpacklo_epi8(f2, f3));
	} else {
		*c0 = _mm256_cvtepi32_ps(codes8(p, bits, d, end));
		*c1 = _mm256_cvtepi32_ps(codes8(p + bits, bits, d, end));
		return;
	}
	*c0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(u));
	*c1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(u, 8)));
}

/* ---- matvec ------------------------------------------------------------- */

/* Software prefetch: the cache lines that start in bytes [off, off+len)
 * of the rows `ahead` bytes after w0 and w1 (k_pf_ahead; kernels_avx512.c,
 * mv_rows_q, says why). */
AI void pf_rows(const uint8_t *w0, const uint8_t *w1, size_t ahead, size_t off, size_t len)
{
	for (size_t o = (off + 63) & ~(size_t)63; o < off + len; o += 64) {
		_mm_prefetch((const char *)(w0 + ahead + o), _MM_HINT_T0);
		_mm_prefetch((const char *)(w1 + ahead + o), _MM_HINT_T0);
	}
}

/* One matrix of a matvec_multi call (a plain matvec is a call of one). */
typedef struct {
	const kq_matrix *m;
	const float *x;
	const float *xs;
	const float *xp; /* 4-bit only: x with each block of 16 split even/odd */
	const float *bias;
	float *y;
	size_t ahead; /* prefetch distance in bytes (k_pf_ahead) */
	dec_t d;
} mv_job;

typedef struct {
	mv_job j[K_MAX_MULTI];
	k_split sp;
} mv_multi;

AI void mv_rows_q(const mv_job *j, int r0, int r1, const int bits)
{
	const kq_matrix *m = j->m;
	const int gs = m->group_size, ng = m->cols / gs, gbytes = gs * bits / 8;
	const size_t rb = k_row_bytes(m);
	const uint8_t *sc = m->scales, *bi = m->biases;
	const kdtype sdt = m->sdt;
	const float *x = j->x, *xs = j->xs;
	const uint8_t *end = (const uint8_t *)m->w + (size_t)m->rows * rb;
	int r = r0;
	for (; r + 2 <= r1; r += 2) {
		const uint8_t *w0 = (const uint8_t *)m->w + (size_t)r * rb, *w1 = w0 + rb;
		size_t g0 = (size_t)r * (size_t)ng, g1 = g0 + (size_t)ng;
		__m256 t0 = _mm256_setzero_ps(), t1 = _mm256_setzero_ps();
		float bs0 = 0.0f, bs1 = 0.0f;
		for (int g = 0; g < ng; g++) {
			pf_rows(w0, w1, j->ahead, (size_t)g * (size_t)gbytes, (size_t)gbytes);
			const uint8_t *p0 = w0 + (size_t)g * (size_t)gbytes, *p1 = w1 + (size_t)g * (size_t)gbytes;
			const float *xg = x + (size_t)g * (size_t)gs;
			__m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
			for (int v = 0; v < gs; v += 16) {
				__m256 x0 = _mm256_loadu_ps(xg + v), x1 = _mm256_loadu_ps(xg + v + 8);
				__m256 c0, c1, e0, e1;
				dec16(p0 + v * bits / 8, bits, &j->d, &c0, &c1, end);
				dec16(p1 + v * bits / 8, bits, &j->d, &e0, &e1, end);
				a0 = _mm256_fmadd_ps(c0, x0, a0);
				a1 = _mm256_fmadd_ps(e0, x0, a1);
				a0 = _mm256_fmadd_ps(c1, x1, a0);
				a1 = _mm256_fmadd_ps(e1, x1, a1);
			}
			t0 = _mm256_fmadd_ps(_mm256_set1_ps(ld_sb(sdt, sc, g0 + (size_t)g)), a0, t0);
			t1 = _mm256_fmadd_ps(_mm256_set1_ps(ld_sb(sdt, sc, g1 + (size_t)g)), a1, t1);
			bs0 += ld_sb(sdt, bi, g0 + (size_t)g) * xs[g];
			bs1 += ld_sb(sdt, bi, g1 + (size_t)g) * xs[g];
		}
		j->y[r] = hsum(t0) + bs0 + (j->bias ? j->bias[r] : 0.0f);
		j->y[r + 1] = hsum(t1) + bs1 + (j->bias ? j->bias[r + 1] : 0.0f);
	}
	for (; r < r1; r++) {
		const uint8_t *w0 = (const uint8_t *)m->w + (size_t)r * rb;
		size_t g0 = (size_t)r * (size_t)ng;
		__m256 t0 = _mm256_setzero_ps();
		float bs0 = 0.0f;
		for (int g = 0; g < ng; g++) {
			const uint8_t *p0 = w0 + (size_t)g * (size_t)gbytes;
			const float *xg = x + (size_t)g * (size_t)gs;
			__m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
			for (int v = 0; v < gs; v += 16) {
				__m256 c0, c1;
				dec16(p0 + v * bits / 8, bits, &j->d, &c0, &c1, end);
				a0 = _mm256_fmadd_ps(c0, _mm256_loadu_ps(xg + v), a0);
				a1 = _mm256_fmadd_ps(c1, _mm256_loadu_ps(xg + v + 8), a1);
			}
			t0 = _mm256_fmadd_ps(_mm256_set1_ps(ld_sb(sdt, sc, g0 + (size_t)g)), _mm256_add_ps(a0, a1), t0);
			bs0 += ld_sb(sdt, bi, g0 + (size_t)g) * xs[g];
		}
		j->y[r] = hsum(t0) + bs0 + (j->bias ? j->bias[r] : 0.0f);
	}
}

/* 4-bit, even/odd order: vpmovzxbd of 8 bytes puts codes (2i, 2i+1) in
 * lane i; `& 15` and `>> 4` give the even and odd codes, so x is split
 * once per call into even/odd halves of each 16-block (xp). One
 * shuffle-port uop per 16 codes instead of three (unpack + 2 vpmovzxbd). */
AI void mv_rows_q4(const mv_job *j, int r0, int r1)
{
	const kq_matrix *m = j->m;
	const int gs = m->group_size, ng = m->cols / gs, gbytes = gs / 2;
	const size_t rb = k_row_bytes(m);
	const uint8_t *sc = m->scales, *bi = m->biases;
	const kdtype sdt = m->sdt;
	const float *x = j->xp, *xs = j->xs;
	const __m256i mask = _mm256_set1_epi32(15);
	int r = r0;
	for (; r + 2 <= r1; r += 2) {
		const uint8_t *w0 = (const uint8_t *)m->w + (size_t)r * rb, *w1 = w0 + rb;
		size_t g0 = (size_t)r * (size_t)ng, g1 = g0 + (size_t)ng;
		__m256 t0 = _mm256_setzero_ps(), t1 = _mm256_setzero_ps();
		float bs0 = 0.0f, bs1 = 0.0f;
		for (int g = 0; g < ng; g++) {
			pf_rows(w0, w1, j->ahead, (size_t)g * (size_t)gbytes, (size_t)gbytes);
			const uint8_t *p0 = w0 + (size_t)g * (size_t)gbytes, *p1 = w1 + (size_t)g * (size_t)gbytes;
			const float *xg = x + (size_t)g * (size_t)gs;
			__m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
			for (int v = 0; v < gs; v += 16) {
				__m256 xe = _mm256_loadu_ps(xg + v), xo = _mm256_loadu_ps(xg + v + 8);
				__m256i b0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p0 + v / 2)));
				__m256i b1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p1 + v / 2)));
				a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b0, mask)), xe, a0);
				a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b1, mask)), xe, a1);
				a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b0, 4)), xo, a0);
				a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b1, 4)), xo, a1);
			}
			t0 = _mm256_fmadd_ps(_mm256_set1_ps(ld_sb(sdt, sc, g0 + (size_t)g)), a0, t0);
			t1 = _mm256_fmadd_ps(_mm256_set1_ps(ld_sb(sdt, sc, g1 + (size_t)g)), a1, t1);
			bs0 += ld_sb(sdt, bi, g0 + (size_t)g) * xs[g];
			bs1 += ld_sb(sdt, bi, g1 + (size_t)g) * xs[g];
		}
		j->y[r] = hsum(t0) + bs0 + (j->bias ? j->bias[r] : 0.0f);
		j->y[r + 1] = hsum(t1) + bs1 + (j->bias ? j->bias[r + 1] : 0.0f);
	}
	if (r < r1)
		mv_rows_q(j, r, r1, 4);
}

AI void mv_rows_dense(const mv_job *j, int r0, int r1, const kdtype wdt)
{
	const int cols = j->m->cols;
	for (int r = r0; r < r1; r++) {
		size_t base = (size_t)r * (size_t)cols;
		__m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
		int c = 0;
		for (; c + 16 <= cols; c += 16) {
			a0 = _mm256_fmadd_ps(ld8(wdt, j->m->w, base + (size_t)c), _mm256_loadu_ps(j->x + c), a0);
			a1 = _mm256_fmadd_ps(ld8(wdt, j->m->w, base + (size_t)c + 8), _mm256_loadu_ps(j->x + c + 8), a1);
		}
		for (; c + 8 <= cols; c += 8)
			a0 = _mm256_fmadd_ps(ld8(wdt, j->m->w, base + (size_t)c), _mm256_loadu_ps(j->x + c), a0);
		float acc = hsum(_mm256_add_ps(a0, a1));
		for (; c < cols; c++)
			acc += ld1(wdt, j->m->w, base + (size_t)c) * j->x[c];
		j->y[r] = acc + (j->bias ? j->bias[r] : 0.0f);
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
	case 2: mv_rows_q(j, r0, r1, 2); break;
	case 3: mv_rows_q(j, r0, r1, 3); break;
	case 4:
		if (j->xp)
			mv_rows_q4(j, r0, r1);
		else
			mv_rows_q(j, r0, r1, 4);
		break;
	case 5: mv_rows_q(j, r0, r1, 5); break;
	case 6: mv_rows_q(j, r0, r1, 6); break;
	default: mv_rows_q(j, r0, r1, 8); break;
	}
}

static void mv_task(void *arg, int i)
{
	const mv_multi *mm = arg;
	int r0, r1, k = k_split_task(&mm->sp, i, &r0, &r1);
	mv_range(&mm->j[k], r0, r1);
}

/* xp[b*16 + i] = x[b*16 + 2i], xp[b*16 + 8 + i] = x[b*16 + 2i + 1]. */
static void x_even_odd(const float *x, int cols, float *xp)
{
	for (int b = 0; b < cols; b += 16)
		for (int i = 0; i < 8; i++) {
			xp[b + i] = x[b + 2 * i];
			xp[b + 8 + i] = x[b + 2 * i + 1];
		}
}

static void x_group_sums(const float *x, int cols, int gs, float *xs)
{
	for (int g = 0; g < cols / gs; g++) {
		__m256 a = _mm256_setzero_ps();
		for (int v = 0; v < gs; v += 8)
			a = _mm256_add_ps(a, _mm256_loadu_ps(x + g * gs + v));
		xs[g] = hsum(a);
	}
}

/* As avx512_matvec_multi: x prepared once, one hand-off for the rows of
 * all the matrices, each row computed as matvec computes it alone. */
static void avx2_matvec_multi(const kq_matrix *const *ms, int nm, const float *x, const float *const *bias,
			      float *const *y)
{
	if (nm > K_MAX_MULTI) {
		avx2_matvec_multi(ms + K_MAX_MULTI, nm - K_MAX_MULTI, x, bias ? bias + K_MAX_MULTI : NULL,
				  y + K_MAX_MULTI);
		nm = K_MAX_MULTI;
	}
	if (nm <= 0)
		return;
	const int cols = ms[0]->cols;
	mv_multi mm;
	const kq_matrix *use[K_MAX_MULTI];
	int gsv[K_MAX_MULTI], gso[K_MAX_MULTI], ngs = 0, nxs = 0, want_xp = 0, nu = 0;
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
		if (m->bits == 4 && cols <= K_MAX_PERM_COLS)
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
	if (want_xp)
		x_even_odd(x, cols, xp);
	for (int k = 0; k < nu; k++) {
		mv_job *j = &mm.j[k];
		if (j->m->bits == 0)
			continue;
		int g = 0;
		while (gsv[g] != j->m->group_size)
			g++;
		j->xs = xs + gso[g];
		j->d = dec_init(j->m->bits);
		if (j->m->bits == 4 && want_xp)
			j->xp = xp;
	}
	k_split_init(&mm.sp, use, nu);
	k_split_run(&mm.sp, mv_task, &mm);
}

static void avx2_matvec(const kq_matrix *m, const float *x, const float *bias, float *y)
{
	avx2_matvec_multi(&m, 1, x, &bias, &y);
}

/* ---- dequantize a segment (embed, GEMM tiles) --------------------------- */

AI void deq_seg_q(const kq_matrix *m, int r, int k0, int kc, float *out, const dec_t *d, const int bits)
{
	const int gs = m->group_size, ng = m->cols / gs;
	const uint8_t *row = (const uint8_t *)m->w + (size_t)r * k_row_bytes(m);
	const uint8_t *end = (const uint8_t *)m->w + (size_t)m->rows * k_row_bytes(m);
	for (int c = k0; c < k0 + kc; c += gs) {
		size_t gi = (size_t)r * (size_t)ng + (size_t)(c / gs);
		__m256 s = _mm256_set1_ps(ld_sb(m->sdt, m->scales, gi));
		__m256 b = _mm256_set1_ps(ld_sb(m->sdt, m->biases, gi));
		for (int v = c; v < c + gs; v += 16) {
			__m256 c0, c1;
			dec16(row + (size_t)v * (size_t)bits / 8, bits, d, &c0, &c1, end);
			_mm256_storeu_ps(out + (v - k0), _mm256_fmadd_ps(c0, s, b));
			_mm256_storeu_ps(out + (v - k0) + 8, _mm256_fmadd_ps(c1, s, b));
		}
	}
}

AI void deq_seg_dense(const kq_matrix *m, int r, int k0, int kc, float *out, const kdtype wdt)
{
	size_t base = (size_t)r * (size_t)m->cols + (size_t)k0;
	int c = 0;
	for (; c + 8 <= kc; c += 8)
		_mm256_storeu_ps(out + c, ld8(wdt, m->w, base + (size_t)c));
	for (; c < kc; c++)
		out[c] = ld1(wdt, m->w, base + (size_t)c);
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

static void avx2_embed(const kq_matrix *m, int row, float *out)
{
	dec_t d = dec_init(m->bits);
	deq_seg(m, row, 0, m->cols, out, &d);
}

/* ---- matmul ------------------------------------------------------------- */

#define MM_ROWS 8
#define MM_KC 512

typedef struct {
	const kq_matrix *m;
	const float *x;
	int n;
	const float *bias;
	float *y;
	dec_t d;
} mm_job;

/* 2 rows x 4 tokens: 8 accumulators + 4 x + 1 w fit the 16 ymm registers
 * (a 4x4 block as in the AVX-512 file would need 21). */
static void micro24(const float *w0, const float *w1, const float *x0, const float *x1, const float *x2,
		    const float *x3, int kc, float out[2][4])
{
	__m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;
	__m256 a10 = a00, a11 = a00, a12 = a00, a13 = a00;
	int k = 0;
	for (; k + 8 <= kc; k += 8) {
		__m256 v0 = _mm256_loadu_ps(x0 + k), v1 = _mm256_loadu_ps(x1 + k);
		__m256 v2 = _mm256_loadu_ps(x2 + k), v3 = _mm256_loadu_ps(x3 + k);
		__m256 w = _mm256_loadu_ps(w0 + k);
		a00 = _mm256_fmadd_ps(w, v0, a00);
		a01 = _mm256_fmadd_ps(w, v1, a01);
		a02 = _mm256_fmadd_ps(w, v2, a02);
		a03 = _mm256_fmadd_ps(w, v3, a03);
		w = _mm256_loadu_ps(w1 + k);
		a10 = _mm256_fmadd_ps(w, v0, a10);
		a11 = _mm256_fmadd_ps(w, v1, a11);
		a12 = _mm256_fmadd_ps(w, v2, a12);
		a13 = _mm256_fmadd_ps(w, v3, a13);
	}
	out[0][0] = hsum(a00), out[0][1] = hsum(a01), out[0][2] = hsum(a02), out[0][3] = hsum(a03);
	out[1][0] = hsum(a10), out[1][1] = hsum(a11), out[1][2] = hsum(a12), out[1][3] = hsum(a13);
	for (; k < kc; k++) {
		out[0][0] += w0[k] * x0[k], out[0][1] += w0[k] * x1[k];
		out[0][2] += w0[k] * x2[k], out[0][3] += w0[k] * x3[k];
		out[1][0] += w1[k] * x0[k], out[1][1] += w1[k] * x1[k];
		out[1][2] += w1[k] * x2[k], out[1][3] += w1[k] * x3[k];
	}
}

static void mm_task(void *arg, int i)
{
	const mm_job *j = arg;
	const kq_matrix *m = j->m;
	const int rows = m->rows, cols = m->cols, n = j->n;
	int r0 = i * MM_ROWS, nr = rows - r0 < MM_ROWS ? rows - r0 : MM_ROWS;
	float wbuf[MM_ROWS][MM_KC] __attribute__((aligned(32)));
	for (int k0 = 0; k0 < cols; k0 += MM_KC) {
		int kc = cols - k0 < MM_KC ? cols - k0 : MM_KC;
		for (int r = 0; r < nr; r++)
			deq_seg(m, r0 + r, k0, kc, wbuf[r], &j->d);
		for (int t0 = 0; t0 < n; t0 += 4) {
			int nt = n - t0 < 4 ? n - t0 : 4;
			const float *xt[4];
			for (int t = 0; t < 4; t++)
				xt[t] = j->x + (size_t)(t0 + (t < nt ? t : 0)) * (size_t)cols + (size_t)k0;
			for (int rr = 0; rr < nr; rr += 2) {
				const float *w1 = wbuf[rr + 1 < nr ? rr + 1 : rr];
				float out[2][4];
				micro24(wbuf[rr], w1, xt[0], xt[1], xt[2], xt[3], kc, out);
				for (int r = 0; r < 2 && rr + r < nr; r++)
					for (int t = 0; t < nt; t++) {
						float *yp = j->y + (size_t)(t0 + t) * (size_t)rows + (size_t)(r0 + rr + r);
						float base = k0 ? *yp : (j->bias ? j->bias[r0 + rr + r] : 0.0f);
						*yp = base + out[r][t];
					}
			}
		}
	}
}

static void avx2_matmul(const kq_matrix *m, const float *x, int n, const float *bias, float *y)
{
	if (n <= 0 || m->rows <= 0)
		return;
	if (n == 1) {
		avx2_matvec(m, x, bias, y);
		return;
	}
	mm_job j = {.m = m, .x = x, .n = n, .bias = bias, .y = y, .d = dec_init(m->bits)};
	kpool_for((m->rows + MM_ROWS - 1) / MM_ROWS, mm_task, &j);
}

/* ---- elementwise -------------------------------------------------------- */

AI __m256 act256(__m256 g, int act)
{
	const __m256 one = _mm256_set1_ps(1.0f);
	if (act == 0)
		return _mm256_div_ps(g, _mm256_add_ps(one, exp256(_mm256_sub_ps(_mm256_setzero_ps(), g))));
	/* GELU (tanh approximation) as g / (1 + exp(-2u)), as the reference */
	__m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
	__m256 u2 = _mm256_mul_ps(_mm256_set1_ps(-2.0f * 0.7978845608028654f),
				  _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), g3, g));
	return _mm256_div_ps(g, _mm256_add_ps(one, exp256(u2)));
}

static void avx2_glu(float *gate, const float *up, int n, int act)
{
	int i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 g = _mm256_loadu_ps(gate + i);
		__m256 a = act == 0 ? act256(g, 0) : act256(g, 1);
		_mm256_storeu_ps(gate + i, _mm256_mul_ps(a, _mm256_loadu_ps(up + i)));
	}
	if (i < n) {
		float gb[8] = {0}, ub[8] = {0};
		memcpy(gb, gate + i, sizeof(float) * (size_t)(n - i));
		memcpy(ub, up + i, sizeof(float) * (size_t)(n - i));
		__m256 g = _mm256_loadu_ps(gb);
		__m256 a = act == 0 ? act256(g, 0) : act256(g, 1);
		_mm256_storeu_ps(gb, _mm256_mul_ps(a, _mm256_loadu_ps(ub)));
		memcpy(gate + i, gb, sizeof(float) * (size_t)(n - i));
	}
}

static void avx2_rmsnorm(const float *x, const float *w, int n, float eps, int add_one, float *out)
{
	__m256 a = _mm256_setzero_ps();
	int i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(x + i);
		a = _mm256_fmadd_ps(v, v, a);
	}
	float ss = hsum(a);
	for (int k = i; k < n; k++)
		ss += x[k] * x[k];
	float invs = 1.0f / sqrtf(ss / (float)n + eps), ones = add_one ? 1.0f : 0.0f;
	__m256 inv = _mm256_set1_ps(invs), one = _mm256_set1_ps(ones);
	for (i = 0; i + 8 <= n; i += 8) {
		__m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), inv);
		_mm256_storeu_ps(out + i, _mm256_mul_ps(v, _mm256_add_ps(_mm256_loadu_ps(w + i), one)));
	}
	for (; i < n; i++)
		out[i] = x[i] * invs * (w[i] + ones);
}

static void avx2_rope(float *x, int nheads, int head_dim, int rot_dim, int pos, const float *inv_freq, float mscale)
{
	int half = rot_dim / 2;
	if (half > K_MAX_ROPE_PAIRS) {
		k_table_ref.rope(x, nheads, head_dim, rot_dim, pos, inv_freq, mscale);
		return;
	}
	float cs[K_MAX_ROPE_PAIRS], sn[K_MAX_ROPE_PAIRS];
	for (int i = 0; i < half; i++) {
		float th = (float)pos * inv_freq[i];
		cs[i] = cosf(th) * mscale;
		sn[i] = sinf(th) * mscale;
	}
	for (int h = 0; h < nheads; h++) {
		float *xh = x + (size_t)h * (size_t)head_dim;
		int i = 0;
		for (; i + 8 <= half; i += 8) {
			__m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
			__m256 a = _mm256_loadu_ps(xh + i), b = _mm256_loadu_ps(xh + i + half);
			_mm256_storeu_ps(xh + i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
			_mm256_storeu_ps(xh + i + half, _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
		}
		for (; i < half; i++) {
			float a = xh[i], b = xh[i + half];
			xh[i] = a * cs[i] - b * sn[i];
			xh[i + half] = a * sn[i] + b * cs[i];
		}
	}
}

/* attention: attention_avx2.c (k_attention_avx2) */

const kernel_table k_table_avx2 = {
	.name = "avx2",
	.matvec = avx2_matvec,
	.matvec_multi = avx2_matvec_multi,
	.matmul = avx2_matmul,
	.embed = avx2_embed,
	.rmsnorm = avx2_rmsnorm,
	.rope = avx2_rope,
	.glu = avx2_glu,
	.attention = k_attention_avx2,
};

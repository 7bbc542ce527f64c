/* tests/unit/test_kernels.c — every fast kernel table against the scalar
 * reference, for every bits x group size x scale dtype (and every dense
 * weight dtype), on deliberately unaligned weights and odd row counts;
 * the thread pool; the element conversions.
 *
 * With no arguments: the unit test (exit 0 only if every check passed).
 * With `--quant DIR`: the driver tests/py/test_quant_mlx.py runs against
 * MLX (reads DIR/meta.txt and raw tensors, writes y_<table>.bin and
 * e_ref.bin). */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/test_rng.h"

/* Named tolerances. A dot product of n terms in f32 with a different
 * summation order differs by up to ~n*eps*sum|w_j x_j| in the worst case
 * and ~sqrt(n)*eps typically; TOL_DOT is relative to sum |w_j x_j| and
 * leaves room for the 2048-column case. */
#define TOL_DOT 2e-5
#define TOL_ELEM 1e-6  /* embed: fma(s,q,b) vs s*q+b, relative to row max */
#define TOL_NORM 1e-5  /* rmsnorm, rope, glu: relative per element */
#define TOL_ATTN 3e-5  /* attention: online vs two-pass softmax, abs on |v|<=1 */

static int g_fail, g_checks;

#define FAIL(...)                                   \
	do {                                        \
		g_fail++;                           \
		fprintf(stderr, "FAIL: " __VA_ARGS__); \
		fputc('\n', stderr);                \
	} while (0)

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) { return (uint32_t)(test_xorshift(&g_rng) >> 32); }
static float frnd(float lo, float hi)
{
	return lo + (hi - lo) * (float)(rnd() >> 8) / 16777216.0f;
}

static size_t dt_size(kdtype dt)
{
	return dt == KDT_F32 ? 4 : 2;
}
static void store(kdtype dt, void *p, size_t i, float v)
{
	uint8_t *b = p;
	uint16_t h;
	if (dt == KDT_F32) {
		memcpy(b + 4 * i, &v, 4);
		return;
	}
	h = dt == KDT_F16 ? k_f32_to_f16(v) : k_f32_to_bf16(v);
	memcpy(b + 2 * i, &h, 2);
}
static const char *dt_name(kdtype dt)
{
	return dt == KDT_F32 ? "f32" : dt == KDT_F16 ? "f16" : "bf16";
}

/* A test matrix whose three buffers start `off` bytes past a malloc'd
 * (16-aligned) block and end exactly at its end: an over-read is an ASan
 * error, an aligned load a crash or a wrong answer. */
typedef struct {
	kq_matrix m;
	void *blk[3];
} tmat;

static void *unaligned(void **blk, size_t n, int off)
{
	*blk = malloc(n + (size_t)off);
	return (uint8_t *)*blk + off;
}

static void tmat_make(tmat *t, int rows, int cols, int bits, int gs, kdtype wdt, kdtype sdt, int off)
{
	memset(t, 0, sizeof *t);
	kq_matrix *m = &t->m;
	m->rows = rows;
	m->cols = cols;
	m->bits = bits;
	m->group_size = gs;
	m->wdt = wdt;
	m->sdt = sdt;
	if (bits == 0) {
		size_t n = (size_t)rows * (size_t)cols;
		void *w = unaligned(&t->blk[0], n * dt_size(wdt), off);
		for (size_t i = 0; i < n; i++)
			store(wdt, w, i, frnd(-1, 1));
		m->w = w;
		return;
	}
	size_t nb = (size_t)rows * (size_t)cols * (size_t)bits / 8;
	size_t ng = (size_t)rows * (size_t)(cols / gs);
	uint8_t *w = unaligned(&t->blk[0], nb, off);
	void *s = unaligned(&t->blk[1], ng * dt_size(sdt), off);
	void *b = unaligned(&t->blk[2], ng * dt_size(sdt), 4 - off);
	for (size_t i = 0; i < nb; i++)
		w[i] = (uint8_t)rnd();
	float range = (float)((1 << bits) - 1);
	for (size_t i = 0; i < ng; i++) {
		float sc = frnd(0.5f, 2.0f) / range;
		store(sdt, s, i, rnd() & 1 ? sc : -sc);
		store(sdt, b, i, frnd(-1, 1));
	}
	m->w = w;
	m->scales = s;
	m->biases = b;
}

static void tmat_free(tmat *t)
{
	for (int i = 0; i < 3; i++)
		free(t->blk[i]);
}

static float *fvec(int n, float lo, float hi)
{
	float *v = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
	for (int i = 0; i < n; i++)
		v[i] = frnd(lo, hi);
	return v;
}

/* sum_j |w_rj x_j| per row: the scale of the rounding error of row r. */
static void absdots(const kq_matrix *m, const float *x, float *out)
{
	float *row = malloc(sizeof(float) * (size_t)m->cols);
	for (int r = 0; r < m->rows; r++) {
		kernels_ref()->embed(m, r, row);
		double s = 0;
		for (int j = 0; j < m->cols; j++)
			s += fabs((double)row[j] * x[j]);
		out[r] = (float)s;
	}
	free(row);
}

static void check_dot(const char *what, const kernel_table *t, const kq_matrix *m, const float *got,
		      const float *want, const float *ad, int n)
{
	g_checks++;
	for (int i = 0; i < n * m->rows; i++) {
		int r = i % m->rows;
		double tol = TOL_DOT * (ad[r] + 1.0);
		if (!(fabs((double)got[i] - want[i]) <= tol)) {
			FAIL("%s %s bits=%d gs=%d wdt=%s sdt=%s rows=%d cols=%d: [%d] got %.7g want %.7g (tol %.3g)",
			     t->name, what, m->bits, m->group_size, dt_name(m->wdt), dt_name(m->sdt), m->rows, m->cols,
			     i, got[i], want[i], tol);
			return;
		}
	}
}

/* 1: test_matrix's x has outliers (every 97th value x1000) and a zero
 * 32-block, for the per-block scaling of the VNNI matvec (matvec_vnni.c). */
static int x_outliers;

static void test_matrix(const kernel_table *t, int rows, int cols, int bits, int gs, kdtype wdt, kdtype sdt, int off)
{
	const kernel_table *ref = kernels_ref();
	tmat tm;
	tmat_make(&tm, rows, cols, bits, gs, wdt, sdt, off);
	const kq_matrix *m = &tm.m;
	enum { NMAX = 9 };
	float *x = fvec(NMAX * cols + 1, -1, 1);
	float *xu = x + 1; /* activations 4-byte aligned only */
	for (int i = 0; x_outliers && i < NMAX * cols; i++)
		xu[i] = i % 97 == 5 ? xu[i] * 1000.0f : i >= 64 && i < 96 ? 0.0f : xu[i];
	float *bias = fvec(rows, -1, 1);
	float *want = malloc(sizeof(float) * (size_t)(NMAX * rows));
	float *got = malloc(sizeof(float) * (size_t)(NMAX * rows));
	float *ad = malloc(sizeof(float) * (size_t)rows);
	absdots(m, xu, ad);

	ref->matvec(m, xu, bias, want);
	t->matvec(m, xu, bias, got);
	check_dot("matvec", t, m, got, want, ad, 1);
	ref->matvec(m, xu, NULL, want);
	t->matvec(m, xu, NULL, got);
	check_dot("matvec-nobias", t, m, got, want, ad, 1);

	/* matmul: the bound uses token 0's |x|, so draw every token alike */
	static const int ns[] = {1, 2, 5, 9};
	for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
		int n = ns[k];
		ref->matmul(m, xu, n, bias, want);
		t->matmul(m, xu, n, bias, got);
		/* per-token bound: recompute for each token */
		for (int tok = 0; tok < n; tok++) {
			float *adt = malloc(sizeof(float) * (size_t)rows);
			absdots(m, xu + (size_t)tok * (size_t)cols, adt);
			char what[64];
			snprintf(what, sizeof what, "matmul n=%d tok=%d", n, tok);
			check_dot(what, t, m, got + (size_t)tok * (size_t)rows, want + (size_t)tok * (size_t)rows, adt,
				  1);
			free(adt);
		}
	}

	float *ew = malloc(sizeof(float) * (size_t)cols), *eg = malloc(sizeof(float) * (size_t)cols);
	for (int r = 0; r < rows; r++) {
		ref->embed(m, r, ew);
		t->embed(m, r, eg);
		float mx = 0;
		for (int j = 0; j < cols; j++)
			mx = fmaxf(mx, fabsf(ew[j]));
		for (int j = 0; j < cols; j++)
			if (!(fabsf(eg[j] - ew[j]) <= TOL_ELEM * (mx + 1.0f))) {
				FAIL("%s embed bits=%d gs=%d wdt=%s sdt=%s row %d col %d: got %g want %g", t->name, bits,
				     gs, dt_name(wdt), dt_name(sdt), r, j, eg[j], ew[j]);
				r = rows;
				break;
			}
	}
	g_checks++;
	free(ew);
	free(eg);
	free(x);
	free(bias);
	free(want);
	free(got);
	free(ad);
	tmat_free(&tm);
}

/* matvec_multi on nm matrices of the same cols (kernels.h): each y[k]
 * against the reference matvec of ms[k] within TOL_DOT, and bit for bit
 * against this table's own matvec of ms[k] (the contract); outputs
 * poisoned with NaN first and followed by a guard that must stay
 * untouched. bias_mode 0: bias == NULL; 1: every matrix has one; 2: the
 * odd-numbered matrices have none. */
static void multi_case(const kernel_table *t, const char *what, const kq_matrix *const *ms, int nm, int bias_mode)
{
	const kernel_table *ref = kernels_ref();
	const int cols = ms[0]->cols;
	float *x = fvec(cols + 1, -1, 1), *xu = x + 1;
	const float *bias[16];
	float *y[16], *want[16], *alone[16], *ad[16];
	uint32_t nanbits = 0x7fc00123u;
	float poison;
	memcpy(&poison, &nanbits, 4);
	for (int k = 0; k < nm; k++) {
		int rows = ms[k]->rows;
		bias[k] = bias_mode == 1 || (bias_mode == 2 && k % 2 == 0) ? fvec(rows, -1, 1) : NULL;
		y[k] = malloc(sizeof(float) * (size_t)(rows + 1));
		for (int r = 0; r <= rows; r++)
			y[k][r] = poison;
		want[k] = malloc(sizeof(float) * (size_t)rows);
		alone[k] = malloc(sizeof(float) * (size_t)rows);
		ad[k] = malloc(sizeof(float) * (size_t)rows);
		ref->matvec(ms[k], xu, bias[k], want[k]);
		t->matvec(ms[k], xu, bias[k], alone[k]);
		absdots(ms[k], xu, ad[k]);
	}
	t->matvec_multi(ms, nm, xu, bias_mode ? bias : NULL, y);
	for (int k = 0; k < nm; k++) {
		char w[160];
		snprintf(w, sizeof w, "matvec_multi %s bias=%d matrix %d/%d", what, bias_mode, k, nm);
		check_dot(w, t, ms[k], y[k], want[k], ad[k], 1);
		g_checks++;
		if (memcmp(y[k], alone[k], sizeof(float) * (size_t)ms[k]->rows) != 0)
			FAIL("%s %s: not the bits of %s matvec alone", t->name, w, t->name);
		g_checks++;
		if (memcmp(&y[k][ms[k]->rows], &poison, 4) != 0)
			FAIL("%s %s: wrote past row %d", t->name, w, ms[k]->rows);
		free((void *)bias[k]);
		free(y[k]);
		free(want[k]);
		free(alone[k]);
		free(ad[k]);
	}
	free(x);
}

static void test_matvec_multi(const kernel_table *t)
{
	static const int bitss[] = {2, 3, 4, 5, 6, 8};
	static const int gss[] = {32, 64, 128};
	/* rows: split across the pool (the sum is large enough), odd counts,
	 * one single row */
	static const int rowss[] = {37, 130, 1, 12};
	int off = 0;
	for (size_t bi = 0; bi < 6; bi++)
		for (size_t gi = 0; gi < 3; gi++)
			for (int sdt = 0; sdt < KDT_COUNT; sdt++) {
				tmat tm[4];
				const kq_matrix *ms[4];
				for (int k = 0; k < 4; k++) {
					off = off % 3 + 1;
					tmat_make(&tm[k], rowss[k], 384, bitss[bi], gss[gi], KDT_F32, (kdtype)sdt, off);
					ms[k] = &tm[k].m;
				}
				char what[64];
				snprintf(what, sizeof what, "bits=%d gs=%d sdt=%s", bitss[bi], gss[gi], dt_name((kdtype)sdt));
				multi_case(t, what, ms, 4, (int)((bi + gi + (size_t)sdt) % 3));
				multi_case(t, what, ms, 1, 1);
				for (int k = 0; k < 4; k++)
					tmat_free(&tm[k]);
			}
	for (int wdt = 0; wdt < KDT_COUNT; wdt++) {
		tmat tm[3];
		const kq_matrix *ms[3];
		for (int k = 0; k < 3; k++) {
			tmat_make(&tm[k], rowss[k], 389, 0, 0, (kdtype)wdt, KDT_F32, 1 + k);
			ms[k] = &tm[k].m;
		}
		char what[64];
		snprintf(what, sizeof what, "dense wdt=%s", dt_name((kdtype)wdt));
		for (int b = 0; b < 3; b++)
			multi_case(t, what, ms, 3, b);
		for (int k = 0; k < 3; k++)
			tmat_free(&tm[k]);
	}
	/* mixed bits, group sizes and dense in one call (per-layer
	 * quantization overrides), more matrices than one dispatch takes
	 * (K_MAX_MULTI is 8), and a q/k/v-like shape split across threads */
	{
		enum { NM = 11 };
		static const int mb[NM] = {4, 8, 0, 3, 4, 2, 6, 5, 4, 8, 4};
		static const int mg[NM] = {64, 32, 0, 128, 32, 64, 128, 32, 128, 64, 64};
		static const int mr[NM] = {96, 32, 7, 33, 64, 5, 18, 40, 2, 9, 61};
		tmat tm[NM];
		const kq_matrix *ms[NM];
		for (int k = 0; k < NM; k++) {
			tmat_make(&tm[k], mr[k], 512, mb[k], mg[k], KDT_BF16, (kdtype)(k % KDT_COUNT), 1 + k % 3);
			ms[k] = &tm[k].m;
		}
		for (int b = 0; b < 3; b++)
			multi_case(t, "mixed", ms, NM, b);
		multi_case(t, "mixed", ms, 3, 1);
		for (int k = 0; k < NM; k++)
			tmat_free(&tm[k]);
		tmat q[3];
		const kq_matrix *qs[3];
		tmat_make(&q[0], 576, 576, 4, 64, KDT_F32, KDT_BF16, 1);
		tmat_make(&q[1], 192, 576, 4, 64, KDT_F32, KDT_BF16, 2);
		tmat_make(&q[2], 192, 576, 4, 64, KDT_F32, KDT_BF16, 3);
		for (int k = 0; k < 3; k++)
			qs[k] = &q[k].m;
		multi_case(t, "qkv 576x576,192x576,192x576", qs, 3, 2);
		for (int k = 0; k < 3; k++)
			tmat_free(&q[k]);
	}
}

static void check_rel(const char *what, const kernel_table *t, const float *got, const float *want, int n,
		      double tol, double floor)
{
	g_checks++;
	for (int i = 0; i < n; i++)
		if (!(fabs((double)got[i] - want[i]) <= tol * (fabs(want[i]) + floor))) {
			FAIL("%s %s [%d]: got %.8g want %.8g", t->name, what, i, got[i], want[i]);
			return;
		}
}

static void test_elementwise(const kernel_table *t)
{
	const kernel_table *ref = kernels_ref();
	static const int ns[] = {1, 15, 16, 17, 389, 2048};
	for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
		int n = ns[k];
		float *x = fvec(n, -3, 3), *w = fvec(n, -1, 1);
		float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
		for (int add = 0; add < 2; add++) {
			char what[96];
			snprintf(what, sizeof what, "rmsnorm n=%d add_one=%d", n, add);
			ref->rmsnorm(x, w, n, 1e-6f, add, a);
			memcpy(b, x, sizeof(float) * (size_t)n);
			t->rmsnorm(b, w, n, 1e-6f, add, b); /* in place */
			check_rel(what, t, b, a, n, TOL_NORM, 1e-3);
		}
		float *up = fvec(n, -2, 2);
		for (int act = 0; act < 2; act++) {
			char what[96];
			snprintf(what, sizeof what, "glu n=%d act=%d", n, act);
			float *g = fvec(n, -12, 12);
			memcpy(a, g, sizeof(float) * (size_t)n);
			memcpy(b, g, sizeof(float) * (size_t)n);
			ref->glu(a, up, n, act);
			t->glu(b, up, n, act);
			check_rel(what, t, b, a, n, TOL_NORM, 1e-4);
			free(g);
		}
		free(up);
		free(x);
		free(w);
		free(a);
		free(b);
	}
	/* rope: full and partial rotation, head dims with SIMD tails */
	static const int hds[][2] = {{64, 64}, {128, 128}, {80, 80}, {128, 64}, {96, 32}, {256, 256}};
	static const int poss[] = {0, 7, 4097};
	for (size_t k = 0; k < sizeof hds / sizeof hds[0]; k++)
		for (size_t p = 0; p < sizeof poss / sizeof poss[0]; p++) {
			int hd = hds[k][0], rd = hds[k][1], nh = 3;
			float *inv = malloc(sizeof(float) * (size_t)(rd / 2));
			for (int i = 0; i < rd / 2; i++)
				inv[i] = powf(10000.0f, -2.0f * (float)i / (float)rd);
			float *x = fvec(nh * hd, -1, 1);
			float *a = malloc(sizeof(float) * (size_t)(nh * hd)), *b = malloc(sizeof(float) * (size_t)(nh * hd));
			memcpy(a, x, sizeof(float) * (size_t)(nh * hd));
			memcpy(b, x, sizeof(float) * (size_t)(nh * hd));
			ref->rope(a, nh, hd, rd, poss[p], inv, 1.25f);
			t->rope(b, nh, hd, rd, poss[p], inv, 1.25f);
			char what[64];
			snprintf(what, sizeof what, "rope hd=%d rot=%d pos=%d", hd, rd, poss[p]);
			check_rel(what, t, b, a, nh * hd, TOL_NORM, 1.0);
			free(inv);
			free(x);
			free(a);
			free(b);
		}
}

/* A cache of n random values in [lo, hi) of element type dt (kernels.h
 * attention) */
static void *cvec(kdtype dt, int n, float lo, float hi)
{
	void *v = malloc(dt_size(dt) * (size_t)(n > 0 ? n : 1));
	for (int i = 0; i < n; i++)
		store(dt, v, (size_t)i, frnd(lo, hi));
	return v;
}

/* One attention shape and cache element type, the table against the
 * reference on the same cache. */
static void attention_case(const kernel_table *t, kdtype dt, int n, int pos0, int nh, int nkv, int hd, int window,
			   float softcap)
{
	const kernel_table *ref = kernels_ref();
	int ctx = pos0 + n;
	float scale = 1.0f / sqrtf((float)hd);
	float *q = fvec(n * nh * hd, -2, 2);
	void *k = cvec(dt, ctx * nkv * hd, -2, 2), *v = cvec(dt, ctx * nkv * hd, -1, 1);
	float *a = fvec(n * nh * hd, 0, 0), *b = fvec(n * nh * hd, 0, 0);
	float *scr = fvec(n * ctx, 0, 0);
	ref->attention(q, k, v, dt, a, n, pos0, nh, nkv, hd, scale, window, softcap, scr);
	t->attention(q, k, v, dt, b, n, pos0, nh, nkv, hd, scale, window, softcap, scr);
	char what[128];
	snprintf(what, sizeof what, "attention kv=%s n=%d pos0=%d heads=%d/%d hd=%d window=%d softcap=%g",
		 dt_name(dt), n, pos0, nh, nkv, hd, window, softcap);
	g_checks++;
	for (int i = 0; i < n * nh * hd; i++)
		if (!(fabsf(a[i] - b[i]) <= TOL_ATTN)) {
			FAIL("%s %s [%d]: got %g want %g", t->name, what, i, b[i], a[i]);
			break;
		}
	free(q);
	free(k);
	free(v);
	free(a);
	free(b);
	free(scr);
}

static void test_attention(const kernel_table *t)
{
	/* Batches: n > 8 takes the fast tables' per-(token, head) path, n <= 8
	 * one decode per token (kernels/cpu/attention_avx*.c DA_MAX_N). */
	static const int cfg[][4] = {/* n, pos0, n_heads, n_kv_heads */
				     {1, 0, 4, 2},  {1, 13, 4, 1},   {7, 0, 4, 4},  {5, 21, 6, 2},
				     {1, 200, 2, 2}, {3, 130, 8, 2}, {9, 40, 4, 2}, {12, 3, 6, 3}};
	static const int hds[] = {64, 80, 128, 256};
	for (int dt = 0; dt < KDT_COUNT; dt++)
		for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++)
			for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++)
				for (int var = 0; var < 3; var++)
					attention_case(t, (kdtype)dt, cfg[c][0], cfg[c][1], cfg[c][2], cfg[c][3], hds[h],
						       var == 1 ? 5 : 0, var == 2 ? 5.0f : 0.0f);
	/* Decode (n = 1) at contexts on both sides of the fast tables' key
	 * blocks (8 keys AVX2, 16 AVX-512) and long enough to be split into
	 * runs across the pool, with runs covering all kv heads or a few;
	 * the group sizes and head dims the fast tables specialise (4x64:
	 * Llama-3.2-1B; 4x128; 2x128: Qwen3-0.6B; 3x64: SmolLM2) next to
	 * generic ones (6x80, 1x96, 8x256, 16x64: one kv head); plain, a
	 * window that cuts the context, and softcap. */
	static const int ctxs[] = {1, 15, 16, 17, 1000, 4100};
	static const int shp[][3] = {/* n_heads, n_kv_heads, head_dim */
				     {32, 8, 64}, {8, 2, 128}, {4, 2, 128}, {9, 3, 64},
				     {12, 2, 80}, {2, 2, 96},  {8, 1, 256}, {16, 1, 64}};
	for (int dt = 0; dt < KDT_COUNT; dt++)
		for (size_t c = 0; c < sizeof ctxs / sizeof ctxs[0]; c++)
			for (size_t h = 0; h < sizeof shp / sizeof shp[0]; h++)
				for (int var = 0; var < 3; var++)
					attention_case(t, (kdtype)dt, 1, ctxs[c] - 1, shp[h][0], shp[h][1], shp[h][2],
						       var == 1 ? ctxs[c] / 3 + 1 : 0, var == 2 ? 30.0f : 0.0f);
	/* a short batch at long context, windowed: one decode per token, the
	 * windows of consecutive tokens overlapping */
	for (int dt = 0; dt < KDT_COUNT; dt++)
		attention_case(t, (kdtype)dt, 4, 2050, 32, 8, 64, 700, 0.0f);
}

static void test_table(const kernel_table *t)
{
	static const int bitss[] = {2, 3, 4, 5, 6, 8};
	static const int gss[] = {32, 64, 128};
	int off = 0;
	for (size_t bi = 0; bi < 6; bi++)
		for (size_t gi = 0; gi < 3; gi++)
			for (int sdt = 0; sdt < KDT_COUNT; sdt++) {
				off = off % 3 + 1;
				test_matrix(t, 37, 384, bitss[bi], gss[gi], KDT_F32, (kdtype)sdt, off);
			}
	for (int wdt = 0; wdt < KDT_COUNT; wdt++) {
		test_matrix(t, 37, 389, 0, 0, (kdtype)wdt, KDT_F32, 1 + wdt);
		test_matrix(t, 5, 16, 0, 0, (kdtype)wdt, KDT_F32, 3);
	}
	/* big enough to be split across threads */
	test_matrix(t, 301, 2048, 4, 64, KDT_F32, KDT_F16, 1);
	/* 4/8-bit with an odd number of 32-groups: the f32 matvec path */
	test_matrix(t, 9, 352, 4, 32, KDT_F32, KDT_BF16, 1);
	test_matrix(t, 9, 352, 8, 32, KDT_F32, KDT_F16, 2);
	test_matrix(t, 67, 4096, 3, 128, KDT_F32, KDT_BF16, 2);
	test_matrix(t, 130, 2048, 0, 0, KDT_BF16, KDT_F32, 2);
	/* 4-bit, 576 columns (SmolLM2): the VNNI matvec's last step is 64
	 * columns and its last chunk 9 or 18 groups; then x with outliers */
	test_matrix(t, 13, 576, 4, 64, KDT_F32, KDT_F16, 1);
	test_matrix(t, 13, 576, 4, 32, KDT_F32, KDT_BF16, 2);
	x_outliers = 1;
	test_matrix(t, 37, 2048, 4, 64, KDT_F32, KDT_F16, 3);
	test_matrix(t, 13, 576, 4, 32, KDT_F32, KDT_F32, 1);
	test_matrix(t, 11, 1024, 4, 128, KDT_F32, KDT_BF16, 2);
	x_outliers = 0;
	test_matvec_multi(t);
	test_elementwise(t);
	test_attention(t);
}

/* The AMX GEMM (gemm_amx.c), reached through the avx512 table's matmul
 * once kernels_cpu_prepare has turned it on: n tokens of one matrix
 * against the reference, per token, within TOL_DOT. Token counts around
 * the 16-token tile (and under AMX_MIN_N = 12, the f32 path), past the
 * 512-token superblock; row counts that leave part of a 32-row task;
 * columns that leave a partial 256-column chunk. */
static void amx_case(const kernel_table *t, int rows, int cols, int bits, int gs, kdtype sdt, int n, int off)
{
	const kernel_table *ref = kernels_ref();
	tmat tm;
	tmat_make(&tm, rows, cols, bits, gs, KDT_F32, sdt, off);
	float *x = fvec(n * cols + 1, -1, 1), *xu = x + 1;
	for (int i = 0; i < n * cols; i += 97) /* outliers, as in real activations */
		xu[i] *= 300.0f;
	float *bias = fvec(rows, -1, 1);
	float *want = malloc(sizeof(float) * (size_t)n * (size_t)rows);
	float *got = malloc(sizeof(float) * (size_t)n * (size_t)rows);
	float *ad = malloc(sizeof(float) * (size_t)rows);
	ref->matmul(&tm.m, xu, n, n & 1 ? bias : NULL, want);
	t->matmul(&tm.m, xu, n, n & 1 ? bias : NULL, got);
	int fail0 = g_fail;
	for (int tok = 0; tok < n && g_fail == fail0; tok++) {
		absdots(&tm.m, xu + (size_t)tok * (size_t)cols, ad);
		char what[64];
		snprintf(what, sizeof what, "amx matmul n=%d tok=%d", n, tok);
		check_dot(what, t, &tm.m, got + (size_t)tok * (size_t)rows, want + (size_t)tok * (size_t)rows, ad, 1);
	}
	free(x);
	free(bias);
	free(want);
	free(got);
	free(ad);
	tmat_free(&tm);
}

static void test_amx(const kernel_table *t)
{
	static const int bitss[] = {2, 3, 4, 5, 6, 8};
	static const int gss[] = {32, 64, 128};
	static const int ns[] = {7, 12, 16, 17, 45};
	int off = 0;
	for (size_t bi = 0; bi < 6; bi++)
		for (size_t gi = 0; gi < 3; gi++)
			for (int sdt = 0; sdt < KDT_COUNT; sdt++) {
				off = off % 3 + 1;
				amx_case(t, 37, 384, bitss[bi], gss[gi], (kdtype)sdt, ns[(bi * 3 + gi + (size_t)sdt) % 5], off);
			}
	amx_case(t, 16, 640, 4, 64, KDT_BF16, 600, 1); /* two superblocks */
	amx_case(t, 67, 1024, 4, 64, KDT_F16, 513, 2);
	amx_case(t, 45, 512, 8, 32, KDT_F32, 129, 3);
	amx_case(t, 96, 2048, 4, 128, KDT_BF16, 77, 1);
	amx_case(t, 1, 256, 6, 64, KDT_F16, 31, 2);
}

/* The reference must give bit-identical results whatever the thread count:
 * rows are independent and each is summed in index order. */
static void test_pool_determinism(void)
{
	tmat tm;
	tmat_make(&tm, 257, 1024, 4, 64, KDT_F32, KDT_BF16, 3);
	float *x = fvec(1024 * 3, -1, 1);
	float *y1 = malloc(sizeof(float) * 257 * 3), *y2 = malloc(sizeof(float) * 257 * 3);
	kpool_init(1);
	kernels_ref()->matmul(&tm.m, x, 3, NULL, y1);
	kpool_init(2);
	if (kpool_threads() != 2)
		FAIL("kpool_init(2) gave %d threads", kpool_threads());
	kernels_ref()->matmul(&tm.m, x, 3, NULL, y2);
	g_checks++;
	if (memcmp(y1, y2, sizeof(float) * 257 * 3) != 0)
		FAIL("ref matmul differs between 1 and 2 threads");
	free(x);
	free(y1);
	free(y2);
	tmat_free(&tm);
}

static _Atomic int g_hits[1000];
static void count_task(void *arg, int i)
{
	(void)arg;
	atomic_fetch_add(&g_hits[i], 1);
}
static void nested_task(void *arg, int i)
{
	(void)i;
	kpool_for(10, count_task, arg); /* runs inline: must not deadlock */
}

static void test_pool_for(void)
{
	for (int round = 0; round < 2000; round++) {
		int n = 1 + round % 1000;
		kpool_for(n, count_task, NULL);
	}
	kpool_for(7, nested_task, NULL);
	g_checks++;
	for (int i = 0; i < 1000; i++) {
		int want = 0;
		for (int round = 0; round < 2000; round++)
			want += i < 1 + round % 1000;
		if (i < 10)
			want += 7;
		if (atomic_load(&g_hits[i]) != want) {
			FAIL("kpool_for index %d ran %d times, want %d", i, atomic_load(&g_hits[i]), want);
			break;
		}
	}
}

static void test_conversions(void)
{
	g_checks++;
	/* every f16 bit pattern round-trips through f32 */
	for (uint32_t h = 0; h < 65536; h++) {
		float f = k_f16_to_f32((uint16_t)h);
		uint16_t back = k_f32_to_f16(f);
		int nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
		if (nan ? !((back & 0x7c00) == 0x7c00 && (back & 0x3ff)) : back != h) {
			FAIL("f16 0x%04x -> %g -> 0x%04x", h, f, back);
			break;
		}
		float bf = k_bf16_to_f32((uint16_t)h);
		if (!isnan(bf) && k_f32_to_bf16(bf) != h) {
			FAIL("bf16 0x%04x round trip", h);
			break;
		}
	}
	/* rounding to nearest even */
	if (k_f32_to_f16(1.0f + 1.0f / 2048) != 0x3c00 || k_f32_to_f16(1.0f + 3.0f / 2048) != 0x3c02 ||
	    k_f32_to_f16(65520.0f) != 0x7c00 || k_f32_to_f16(65519.0f) != 0x7bff ||
	    k_f32_to_bf16(1.0f + 1.0f / 256) != 0x3f80 || k_f32_to_bf16(1.0f + 3.0f / 256) != 0x3f82)
		FAIL("f32 -> f16/bf16 rounding");
}

/* --quant DIR: read meta.txt "rows cols bits gs sdt(0 f32,1 f16,2 bf16) n",
 * w.bin, s.bin, b.bin, x.bin (n x cols f32); write y_<table>.bin (n x rows,
 * matvec for n == 1 else matmul) and e_ref.bin (all rows embedded). */
static void *slurp(const char *dir, const char *name, size_t want)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	uint8_t *p = malloc(want + 3);
	size_t got = fread(p + 3, 1, want + 1, f); /* +3: keep it unaligned */
	fclose(f);
	if (got != want) {
		free(p);
		return NULL;
	}
	return p;
}

static int spill(const char *dir, const char *name, const float *v, size_t n)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(v, sizeof(float), n, f) != n) {
		if (f)
			fclose(f);
		return -1;
	}
	return fclose(f);
}

static int quant_main(const char *dir)
{
	char path[4096];
	int rows, cols, bits, gs, sdt, n;
	snprintf(path, sizeof path, "%s/meta.txt", dir);
	FILE *f = fopen(path, "r");
	if (!f || fscanf(f, "%d %d %d %d %d %d", &rows, &cols, &bits, &gs, &sdt, &n) != 6 || rows <= 0 || cols <= 0 ||
	    n <= 0 || sdt < 0 || sdt >= KDT_COUNT) {
		fprintf(stderr, "bad %s\n", path);
		return 2;
	}
	fclose(f);
	size_t ng = (size_t)rows * (size_t)(cols / gs), es = sdt == KDT_F32 ? 4 : 2;
	uint8_t *w = slurp(dir, "w.bin", (size_t)rows * (size_t)cols * (size_t)bits / 8);
	uint8_t *s = slurp(dir, "s.bin", ng * es), *b = slurp(dir, "b.bin", ng * es);
	uint8_t *x = slurp(dir, "x.bin", (size_t)n * (size_t)cols * 4);
	if (!w || !s || !b || !x) {
		fprintf(stderr, "missing or short tensor file in %s\n", dir);
		return 2;
	}
	kq_matrix m = {rows, cols, bits, gs, KDT_F32, (kdtype)sdt, w + 3, s + 3, b + 3};
	float *xf = malloc(sizeof(float) * (size_t)n * (size_t)cols);
	memcpy(xf, x + 3, sizeof(float) * (size_t)n * (size_t)cols);
	float *y = malloc(sizeof(float) * (size_t)n * (size_t)rows);
	const kernel_table *tabs[3] = {kernels_ref(), kernels_avx2(), kernels_avx512()};
	kpool_init(0);
	for (int i = 0; i < 3; i++) {
		if (!tabs[i]) {
			printf("UNAVAILABLE: %s\n", i == 1 ? "avx2" : "avx512");
			continue;
		}
		if (n == 1)
			tabs[i]->matvec(&m, xf, NULL, y);
		else
			tabs[i]->matmul(&m, xf, n, NULL, y);
		char name[64];
		snprintf(name, sizeof name, "y_%s.bin", tabs[i]->name);
		if (spill(dir, name, y, (size_t)n * (size_t)rows))
			return 2;
		printf("wrote %s\n", name);
	}
	float *e = malloc(sizeof(float) * (size_t)rows * (size_t)cols);
	for (int r = 0; r < rows; r++)
		kernels_ref()->embed(&m, r, e + (size_t)r * (size_t)cols);
	if (spill(dir, "e_ref.bin", e, (size_t)rows * (size_t)cols))
		return 2;
	kpool_free();
	free(w);
	free(s);
	free(b);
	free(x);
	free(xf);
	free(y);
	free(e);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--quant") == 0)
		return quant_main(argv[2]);
	if (argc != 1) {
		fprintf(stderr, "usage: %s [--quant DIR]\n", argv[0]);
		return 2;
	}
	test_conversions();
	test_pool_determinism();
	test_pool_for();
	kpool_init(0);
	printf("threads: %d\n", kpool_threads());
	const kernel_table *tabs[3] = {kernels_ref(), kernels_avx2(), kernels_avx512()};
	const char *names[3] = {"ref", "avx2", "avx512"};
	int fail0 = g_fail;
	test_table(kernels_ref()); /* ref vs itself: exercises shapes and ASan */
	printf("%s: %s\n", names[0], g_fail == fail0 ? "ok" : "FAILED");
	for (int i = 1; i < 3; i++) {
		if (!tabs[i]) {
			printf("UNAVAILABLE: %s\n", names[i]);
			continue;
		}
		fail0 = g_fail;
		test_table(tabs[i]);
		printf("%s: %s\n", names[i], g_fail == fail0 ? "ok" : "FAILED");
	}
	/* the f32 GEMM was tested above; from here on the avx512 matmul
	 * runs on AMX tiles where the CPU has them */
	if (tabs[2] && kernels_cpu_prepare()) {
		fail0 = g_fail;
		test_amx(tabs[2]);
		printf("amx: %s\n", g_fail == fail0 ? "ok" : "FAILED");
	} else {
		printf("UNAVAILABLE: amx\n");
	}
	printf("best: %s\n", kernels_best()->name);
	kpool_free();
	printf("%d checks, %d failures\n", g_checks, g_fail);
	return g_fail ? 1 : 0;
}

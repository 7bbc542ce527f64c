/* kernels/cpu/kernels_ref.c — the scalar reference: the oracle every fast
 * table is tested against. Written for the reader: one formula per loop,
 * the dequantized weight computed exactly as mx.dequantize does
 * (w = scale * code + bias in f32), f32 accumulation in index order.
 * It still splits rows across the pool (rows are independent, so the
 * result does not depend on the thread count; test_kernels checks that). */
#include <math.h>

#include "kernels/cpu/kinternal.h"

static float ref_row_dot(const kq_matrix *m, int r, const float *x)
{
	float acc = 0.0f;
	if (m->bits == 0) {
		size_t base = (size_t)r * (size_t)m->cols;
		for (int j = 0; j < m->cols; j++)
			acc += k_load(m->wdt, m->w, base + (size_t)j) * x[j];
		return acc;
	}
	for (int j = 0; j < m->cols; j++)
		acc += k_deq(m, r, j) * x[j];
	return acc;
}

typedef struct {
	const kq_matrix *m;
	const float *x;
	int n;
	const float *bias;
	float *y;
	int chunk;
} ref_mm_job;

static void ref_mm_task(void *arg, int i)
{
	const ref_mm_job *j = arg;
	int r0 = i * j->chunk;
	int r1 = r0 + j->chunk < j->m->rows ? r0 + j->chunk : j->m->rows;
	for (int t = 0; t < j->n; t++) {
		const float *x = j->x + (size_t)t * (size_t)j->m->cols;
		float *y = j->y + (size_t)t * (size_t)j->m->rows;
		for (int r = r0; r < r1; r++)
			y[r] = ref_row_dot(j->m, r, x) + (j->bias ? j->bias[r] : 0.0f);
	}
}

static void ref_matmul(const kq_matrix *m, const float *x, int n, const float *bias, float *y)
{
	ref_mm_job j = {m, x, n, bias, y, 0};
	if (m->rows <= 0 || n <= 0)
		return;
	j.chunk = k_rows_chunk(m->rows, (size_t)m->cols * (size_t)n * 8, 1);
	kpool_for((m->rows + j.chunk - 1) / j.chunk, ref_mm_task, &j);
}

static void ref_matvec(const kq_matrix *m, const float *x, const float *bias, float *y)
{
	ref_matmul(m, x, 1, bias, y);
}

/* One matvec after the other: the oracle for the fast tables' one-dispatch
 * version. */
static void ref_matvec_multi(const kq_matrix *const *ms, int nm, const float *x, const float *const *bias,
			     float *const *y)
{
	for (int k = 0; k < nm; k++)
		ref_matvec(ms[k], x, bias ? bias[k] : NULL, y[k]);
}

static void ref_embed(const kq_matrix *m, int row, float *out)
{
	for (int j = 0; j < m->cols; j++)
		out[j] = m->bits == 0 ? k_load(m->wdt, m->w, (size_t)row * (size_t)m->cols + (size_t)j)
				      : k_deq(m, row, j);
}

static void ref_rmsnorm(const float *x, const float *w, int n, float eps, int add_one, float *out)
{
	float ss = 0.0f;
	for (int i = 0; i < n; i++)
		ss += x[i] * x[i];
	float inv = 1.0f / sqrtf(ss / (float)n + eps);
	float one = add_one ? 1.0f : 0.0f;
	for (int i = 0; i < n; i++)
		out[i] = x[i] * inv * (w[i] + one);
}

/* theta = pos * inv_freq in f32, as mx.fast.rope computes it; the fast
 * tables use the same expression so the angles agree bit for bit. */
static void ref_rope(float *x, int nheads, int head_dim, int rot_dim, int pos, const float *inv_freq,
		     float mscale)
{
	int half = rot_dim / 2;
	for (int h = 0; h < nheads; h++) {
		float *xh = x + (size_t)h * (size_t)head_dim;
		for (int i = 0; i < half; i++) {
			float th = (float)pos * inv_freq[i];
			float c = cosf(th) * mscale, s = sinf(th) * mscale;
			float a = xh[i], b = xh[i + half];
			xh[i] = a * c - b * s;
			xh[i + half] = a * s + b * c;
		}
	}
}

static void ref_glu(float *gate, const float *up, int n, int act)
{
	for (int i = 0; i < n; i++) {
		float g = gate[i], a;
		if (act == 0)
			a = g / (1.0f + expf(-g));
		else /* 0.5 g (1 + tanh u) written as g / (1 + exp(-2u)): the
		      * same function without the cancellation in 1 + tanh u
		      * for negative g (exact identity; differences from
		      * mlx's tanh form are ~1e-7 absolute) */
			a = g / (1.0f + expf(-2.0f * 0.7978845608028654f * (g + 0.044715f * g * g * g)));
		gate[i] = a * up[i];
	}
}

typedef struct {
	const float *q;
	const void *k, *v; /* caches of element type kvdt */
	kdtype kvdt;
	float *out;
	int n, pos0, n_heads, n_kv_heads, head_dim, window;
	float scale, softcap;
	float *scratch;
} ref_attn_job;

/* One query token, all heads: scores into this token's scratch row, then a
 * two-pass softmax and the weighted sum of values. */
static void ref_attn_task(void *arg, int t)
{
	const ref_attn_job *a = arg;
	int hd = a->head_dim, rep = a->n_heads / a->n_kv_heads;
	int p = a->pos0 + t;
	int lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
	float *sc = a->scratch + (size_t)t * (size_t)(a->pos0 + a->n);
	for (int h = 0; h < a->n_heads; h++) {
		const float *q = a->q + ((size_t)t * (size_t)a->n_heads + (size_t)h) * (size_t)hd;
		int kh = h / rep;
		float mx = -INFINITY;
		for (int j = lo; j <= p; j++) {
			size_t k0 = ((size_t)j * (size_t)a->n_kv_heads + (size_t)kh) * (size_t)hd;
			float s = 0.0f;
			for (int d = 0; d < hd; d++)
				s += q[d] * k_load(a->kvdt, a->k, k0 + (size_t)d);
			s *= a->scale;
			if (a->softcap > 0.0f)
				s = a->softcap * tanhf(s / a->softcap);
			sc[j] = s;
			if (s > mx)
				mx = s;
		}
		float sum = 0.0f;
		for (int j = lo; j <= p; j++) {
			sc[j] = expf(sc[j] - mx);
			sum += sc[j];
		}
		float *o = a->out + ((size_t)t * (size_t)a->n_heads + (size_t)h) * (size_t)hd;
		for (int d = 0; d < hd; d++) {
			float acc = 0.0f;
			for (int j = lo; j <= p; j++) {
				size_t vi = ((size_t)j * (size_t)a->n_kv_heads + (size_t)kh) * (size_t)hd + (size_t)d;
				acc += sc[j] * k_load(a->kvdt, a->v, vi);
			}
			o[d] = acc / sum;
		}
	}
}

static void ref_attention(const float *q, const void *k, const void *v, kdtype kvdt, float *out, int n, int pos0,
			  int n_heads, int n_kv_heads, int head_dim, float scale, int window, float softcap, float *scratch)
{
	ref_attn_job a = {q, k, v, kvdt, out, n, pos0, n_heads, n_kv_heads, head_dim, window, scale, softcap, scratch};
	kpool_for(n, ref_attn_task, &a);
}

const kernel_table k_table_ref = {
	.name = "ref",
	.matvec = ref_matvec,
	.matvec_multi = ref_matvec_multi,
	.matmul = ref_matmul,
	.embed = ref_embed,
	.rmsnorm = ref_rmsnorm,
	.rope = ref_rope,
	.glu = ref_glu,
	.attention = ref_attention,
};

/* kernels/cpu/kinternal.h — internal to kernels/cpu: the per-ISA tables,
 * the scalar helpers every implementation shares, and the work-splitting
 * helper over the thread pool. Not for use outside kernels/. */
#ifndef MLXR_KINTERNAL_H
#define MLXR_KINTERNAL_H

#include <string.h>

#include "kernels/kernels.h"

/* The tables; dispatch.c hands them out after the CPU check, so the ISA
 * files never run a single instruction on a CPU that lacks it. */
extern const kernel_table k_table_ref;
extern const kernel_table k_table_avx2;
extern const kernel_table k_table_avx512;

/* Limits the fast kernels assume (the reference has none). A matrix over
 * them goes through the reference code path: still correct, just slower.
 * head_dim ≤ 512: the largest in use is 256 (Gemma). rot_dim/2 ≤ 512.
 * cols/group_size ≤ 8192: 262144 in-features at group 32. */
#define K_MAX_HEAD_DIM 512
#define K_MAX_ROPE_PAIRS 512
#define K_MAX_GROUPS 8192
/* The 4-bit matvec keeps an even/odd-split copy of x on the caller's
 * stack: cols <= 32768 (128 KiB); the largest in-features in use is
 * 28672 (Llama 70B MLP). Wider rows take the unsplit path. */
#define K_MAX_PERM_COLS 32768

static inline size_t k_dtype_size(kdtype dt)
{
	return dt == KDT_F32 ? 4 : 2;
}

/* Bytes of one row of W as stored: packed codes or dense elements. */
static inline size_t k_row_bytes(const kq_matrix *m)
{
	if (m->bits == 0)
		return (size_t)m->cols * k_dtype_size(m->wdt);
	return (size_t)m->cols * (size_t)m->bits / 8;
}

/* Code j of a packed row: bits [j*bits, j*bits+bits) of the little-endian
 * bit stream. Reads only bytes that hold part of the code, so the last
 * code of the last row never reads past the tensor. */
static inline uint32_t k_code(const uint8_t *row, int bits, size_t j)
{
	size_t off = j * (size_t)bits;
	const uint8_t *p = row + (off >> 3);
	unsigned sh = (unsigned)(off & 7);
	uint32_t v = p[0];
	if (sh + (unsigned)bits > 8)
		v |= (uint32_t)p[1] << 8;
	return (v >> sh) & ((1u << bits) - 1);
}

/* Dequantized element (row, col) of a quantized matrix, as MLX computes it:
 * w = scale * code + bias in f32. */
static inline float k_deq(const kq_matrix *m, int row, int col)
{
	size_t ng = (size_t)(m->cols / m->group_size);
	size_t gi = (size_t)row * ng + (size_t)(col / m->group_size);
	const uint8_t *r = (const uint8_t *)m->w + (size_t)row * k_row_bytes(m);
	float s = k_load(m->sdt, m->scales, gi);
	float b = k_load(m->sdt, m->biases, gi);
	return s * (float)k_code(r, m->bits, (size_t)col) + b;
}

/* Run fn(arg, i) for chunks of about `chunk` rows each: task i covers rows
 * [i*chunk, min(rows, (i+1)*chunk)). Chunk chosen so each thread gets a few
 * tasks (dynamic balance) but small matrices stay on one thread, where a
 * wake-up would cost more than the work. `work` is the cost of one row in
 * multiply-adds. Returns the chunk used. */
int k_rows_chunk(int rows, size_t work_per_row, int align);

/* matvec_multi's work split. Matrices per dispatch: q/k/v is 3, gate/up
 * 2; a longer list is run K_MAX_MULTI at a time. */
#define K_MAX_MULTI 8
typedef struct {
	int n;                      /* matrices */
	int chunk;                  /* rows per task, even */
	int first[K_MAX_MULTI + 1]; /* first task of matrix k; first[n]: tasks in all */
	int rows[K_MAX_MULTI];
} k_split;
/* One chunk size for the n matrices' rows together (k_rows_chunk of the
 * sum; they share cols), so the pool balances rows of all of them; a task
 * never spans two matrices. n <= K_MAX_MULTI, every rows > 0. */
void k_split_init(k_split *s, const kq_matrix *const *ms, int n);
/* The matrix task i works on (its index), and the rows [*r0, *r1). */
int k_split_task(const k_split *s, int i, int *r0, int *r1);
/* fn(arg, i) for every task: through the pool, or inline on the calling
 * thread when k_rows_chunk kept all the rows in one chunk (too little
 * work for a hand-off, or no pool). */
void k_split_run(const k_split *s, void (*fn)(void *arg, int i), void *arg);

/* Software prefetch distance of the quantized matvec for rows of `rb`
 * bytes: a whole number of row pairs (the kernels walk rows two at a
 * time), at least 2 rows and at least K_PF_BYTES. 8 KiB: 2 rows of the
 * 8192-column matrix where it was first measured (kernels_avx512.c,
 * mv_rows_q); for 576-column rows (SmolLM2) 2 rows were 576 bytes, and
 * bench/stepbench.c's whole decode step of that shape ran ~10% faster
 * with 4 or 8 KiB (loaded machine, rounds alternated: 13.4 -> 11.9-12.0
 * ms/token); 16 KiB was no better on the Llama-3.2-1B shape. */
#define K_PF_BYTES 8192
static inline size_t k_pf_ahead(size_t rb)
{
	size_t pairs = (K_PF_BYTES + 2 * rb - 1) / (2 * rb);
	return (pairs < 1 ? 1 : pairs) * 2 * rb;
}

/* Attention (kernel_table.attention) of the fast tables, in their own
 * files (attention_avx2.c, attention_avx512.c) apart from the matvec. */
void k_attention_avx2(const float *q, const void *k, const void *v, kdtype kvdt, float *out, int n, int pos0,
		      int n_heads, int n_kv_heads, int head_dim, float scale, int window, float softcap, float *scratch);
void k_attention_avx512(const float *q, const void *k, const void *v, kdtype kvdt, float *out, int n, int pos0,
			int n_heads, int n_kv_heads, int head_dim, float scale, int window, float softcap,
			float *scratch);

/* The AMX-BF16 GEMM (gemm_amx.c). k_amx_ready is set by
 * kernels_cpu_prepare once the CPU and the OS allow tiles. k_amx_matmul
 * returns 0 when it computed y, -1 when the shape or the machine is not
 * its (dense weights, few tokens, no AMX): the caller computes y. */
extern int k_amx_ready;
int k_amx_matmul(const kq_matrix *m, const float *x, int n, const float *bias, float *y);

/* The 4-bit matvec on AVX512-VNNI (matvec_vnni.c). k_vnni_ready is set
 * by kernels_avx512() when the CPU has AVX512-VNNI and MLXR_VNNI is not
 * "0". k_vnni_quantize_x writes x (cols a multiple of 64) as three int8
 * terms per 32-block, K_VNNI_STEP bytes per 128 columns
 * (k_vnni_xq_bytes(cols) in all); k_vnni_rows_q4 computes rows [r0, r1)
 * of a 4-bit matrix with it (xs: f32 group sums of x; ahead: prefetch
 * distance in bytes). */
#define K_VNNI_STEP 448
extern int k_vnni_ready;
size_t k_vnni_xq_bytes(int cols);
void k_vnni_quantize_x(const float *x, int cols, uint8_t *xq);
void k_vnni_rows_q4(const kq_matrix *m, const uint8_t *xq, const float *xs, const float *bias, float *y,
		    size_t ahead, int r0, int r1);

/* Sum of x over each group of `gs` values: xs[g] = sum x[g*gs .. g*gs+gs). */
void k_group_sums(const float *x, int cols, int gs, float *xs);

#endif

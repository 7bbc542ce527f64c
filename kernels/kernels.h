/* kernels/kernels.h — the backend interface the worker calls.
 *
 * One function table per implementation (scalar reference, AVX2/FMA,
 * AVX-512), chosen at run time. A getter returns NULL when the CPU lacks
 * the feature; tests print UNAVAILABLE for it rather than pass silently.
 * The reference table is the oracle every faster table is tested against.
 *
 * Weights are used as shipped: a quantized matrix is read straight from its
 * packed MLX codes (nothing dequantized into a stored copy) and from
 * possibly unaligned memory (MLX does not align tensors; every load of
 * weight data goes through memcpy-style unaligned loads).
 *
 * MLX affine quantization (mlx/backend/cpu/quantized.cpp): a row of `cols`
 * values is cut into groups of `group_size`; value j of a row is the
 * unsigned code at bit offset j*bits of the row's little-endian bit stream
 * (uint32 words, LSB first), and w = scale[g] * code + bias[g].
 * The row stride of the codes is cols*bits/8 bytes. (Checked against
 * mx.quantize/mx.dequantize/mx.quantized_matmul for every bits x group
 * size x scale dtype by tests/py/test_quant_mlx.py.)
 *
 * Interface notes (no signature has changed):
 * - Matrices: quantized cols MUST be a multiple of group_size; dense cols
 *   may be anything. x, y, bias are f32 arrays, 4-byte aligned is enough.
 * - Fast tables fall back to the reference code for shapes beyond their
 *   internal limits (cols/group_size > 8192, head_dim > 512,
 *   rot_dim > 1024): still correct, just slower.
 * - The 4-bit matvec keeps an f32 copy of x (cols <= 32768) on the
 *   caller's stack: call it from a thread with >= 256 KiB of stack.
 * - glu's GELU is evaluated as g / (1 + exp(-2u)), the same function as
 *   0.5 g (1 + tanh u) without its cancellation for negative g.
 * - The fast tables agree with the reference within relative ~1e-5 of
 *   sum |w_j x_j| (tests/unit/test_kernels.c names each tolerance); they
 *   are not bit-identical to it.
 */
#ifndef MLXR_KERNELS_H
#define MLXR_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
	KDT_F32,
	KDT_F16,
	KDT_BF16,
	KDT_COUNT
} kdtype;

/* A weight matrix y = W x, W is [rows][cols] (out features x in features). */
typedef struct {
	int rows;           /* out features */
	int cols;           /* in features; multiple of group_size when quantized */
	int bits;           /* 0: dense (wdt); else 2,3,4,5,6,8 */
	int group_size;     /* 32, 64 or 128 when quantized */
	kdtype wdt;         /* dense element type when bits == 0 */
	kdtype sdt;         /* scales and biases element type */
	const void *w;      /* dense [rows][cols] or packed codes, rows*cols*bits/8 bytes */
	const void *scales; /* [rows][cols/group_size] */
	const void *biases; /* [rows][cols/group_size] */
} kq_matrix;

/* Worker-thread pool shared by every kernel. kpool_init(0) uses all
 * CPUs this process may run on (MLXR_THREADS=n overrides); calling it
 * again replaces the pool. Returns 0, or -1 if no thread could be made.
 * Without kpool_init every kernel runs on the calling thread.
 * Kernels split work across the pool internally. kpool_for MUST be
 * called from one thread at a time; a call made from inside a pool task
 * runs inline (serially) on that thread. */
int kpool_init(int nthreads);
int kpool_threads(void);
void kpool_free(void);
/* Run fn(arg, i) for i in [0, n) across the pool; returns when all are done. */
void kpool_for(int n, void (*fn)(void *arg, int i), void *arg);
/* Advises transparent huge pages for the 2 MiB-aligned inside of [p, p+n)
 * (memory not yet touched, e.g. a large malloc: the KV cache). Kernels
 * that stream memory read 4 KiB-page memory at about half the read
 * bandwidth on the machines measured (README, "Weights in memory").
 * Advice only: nothing changes where THP is off. */
void kmem_advise_huge(void *p, size_t n);

typedef struct {
	const char *name; /* "ref", "avx2", "avx512" */

	/* y[rows] = W x[cols] (+ bias[rows] if bias != NULL, f32). */
	void (*matvec)(const kq_matrix *m, const float *x, const float *bias, float *y);
	/* y[k] = ms[k] x (+ bias[k]) for k in [0, nm): several matrices of
	 * the same cols read one x (q/k/v, gate/up). The fast tables prepare
	 * x once and split the rows of all nm matrices across the pool in one
	 * hand-off; each y[k] has the same bits as matvec(ms[k], ...) of the
	 * same table. bias may be NULL (no bias for any), or bias[k] NULL for
	 * one. The y[k] must not overlap each other or x. */
	void (*matvec_multi)(const kq_matrix *const *ms, int nm, const float *x, const float *const *bias,
			     float *const *y);
	/* Y[n][rows] = X[n][cols] W^T (+ bias). Prefill: each weight tile is
	 * decoded once and applied to many tokens. */
	void (*matmul)(const kq_matrix *m, const float *x, int n, const float *bias, float *y);
	/* out[cols] = row `row` of W, dequantized (embedding lookup). */
	void (*embed)(const kq_matrix *m, int row, float *out);

	/* out = x / rms(x) * (w + add_one); n values; w is f32. out may equal x. */
	void (*rmsnorm)(const float *x, const float *w, int n, float eps, int add_one, float *out);
	/* Rotary embedding in place on x[nheads][head_dim], rotating the first
	 * rot_dim dims of each head; pairs (i, i + rot_dim/2) (the "non
	 * traditional" layout mlx-lm uses). inv_freq[rot_dim/2]. */
	void (*rope)(float *x, int nheads, int head_dim, int rot_dim, int pos, const float *inv_freq, float mscale);
	/* gate[i] = act(gate[i]) * up[i]; act 0 = SiLU, 1 = GELU (tanh approx). */
	void (*glu)(float *gate, const float *up, int n, int act);

	/* Causal attention for n query tokens at positions pos0..pos0+n-1.
	 * q: [n][n_heads][head_dim] f32; k, v caches: [ctx][n_kv_heads][head_dim]
	 * of element type kvdt (F32, F16 or BF16; f16 halves what decode reads
	 * per token; every product and sum is f32), rows 0..pos0+n-1 valid.
	 * out: [n][n_heads][head_dim].
	 * window > 0: a query at position p sees keys at positions > p - window.
	 * softcap > 0: scores = softcap * tanh(scores / softcap).
	 * scale multiplies q.k. scratch: at least n * (pos0 + n) floats.
	 * The fast tables split one query's keys across the pool (decode) and
	 * keep their per-split partials on the caller's stack (<= 96 KiB). */
	void (*attention)(const float *q, const void *k, const void *v, kdtype kvdt, float *out, int n, int pos0,
			  int n_heads, int n_kv_heads, int head_dim, float scale, int window, float softcap,
			  float *scratch);
} kernel_table;

const kernel_table *kernels_ref(void);
const kernel_table *kernels_avx2(void);   /* NULL if no AVX2+FMA+F16C */
const kernel_table *kernels_avx512(void); /* NULL if no AVX-512 F/BW/VL */
/* The fastest available; MLXR_KERNELS=ref|avx2|avx512 forces one (a name
 * this CPU cannot run, or an unknown one, is ignored). Never NULL. */
const kernel_table *kernels_best(void);
/* Asks the OS for what a faster kernel needs before a sandbox forbids the
 * asking: the AMX tile state (arch_prctl; the avx512 table's matmul then
 * runs on AMX-BF16 tiles where the CPU has them). Call once per process,
 * before seccomp and before the first matmul; later calls return the first
 * answer. MLXR_AMX=0 declines. Returns 1 if the AMX GEMM is on, else 0. */
int kernels_cpu_prepare(void);
/* 1 if kernels_cpu_prepare turned the AMX GEMM on, else 0; never asks the
 * OS for anything (safe under seccomp). */
int kernels_cpu_amx(void);

/* Element conversions used by kernels and loaders. */
float k_f16_to_f32(uint16_t h);
float k_bf16_to_f32(uint16_t h);
uint16_t k_f32_to_f16(float f);
uint16_t k_f32_to_bf16(float f);
/* Load element i of a dtype array (possibly unaligned). */
float k_load(kdtype dt, const void *p, size_t i);

#endif

/* kernels/cuda/kcuda.h — the CUDA backend: the same operations as
 * kernels/kernels.h (quantized matvec and GEMM straight from the packed MLX
 * codes, embedding, RMSNorm, RoPE, GLU, attention, token selection), on
 * device memory, in plain C so that C callers need no CUDA header.
 *
 * Contract:
 * - Every pointer handed to a kc_* kernel is device memory from kc_malloc
 *   (or a kq_matrix whose w/scales/biases were filled by kc_matrix_upload),
 *   except where a parameter says "host".
 * - Kernels are queued on one stream per process (made by kc_init) and
 *   return at once; nothing inside a kernel call waits on the device.
 *   kc_sync() waits and reports the first error of the queued work.
 * - Functions returning int return 0 or -1; kc_error() then holds one line.
 *   A launch error is sticky until kc_sync() reports it.
 * - Packing is MLX's (kernels/kernels.h): row r of a quantized matrix starts
 *   at byte r*cols*bits/8, which is a multiple of 4 because cols is a
 *   multiple of group_size >= 32; the device copy is 256-byte aligned, so
 *   the kernels load whole uint32 words. Weights stay packed on the device;
 *   nothing is dequantized into a stored copy.
 * - Positions that change from one decode step to the next (the token's
 *   position, the token id) are read from device memory (d_pos, d_tokens),
 *   so one captured decode step (kc_graph_*) replays for every position.
 * - Numerics: f32 accumulation everywhere; results agree with the CPU
 *   reference within the tolerances tests/cuda/test_cuda_kernels.c names,
 *   not bit for bit (the summation order differs).
 */
#ifndef MLXR_KCUDA_H
#define MLXR_KCUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* Number of CUDA devices (0 when there is no driver or no device; never
 * initialises more than the runtime needs to count). */
int kc_device_count(void);
/* Initialises device `dev` and makes the stream, the timing events and
 * the pinned token slots (kc_stage_*). Before the first CUDA call it sets
 * CUDA_CACHE_DISABLE=1 (no JIT cache is written: the sandboxed worker may
 * write nothing; the build ships sm_90 SASS) and CUDA_MODULE_LOADING=EAGER
 * (every kernel is loaded here, before the worker's seccomp filter, not at
 * its first launch), unless the environment sets them. */
int kc_init(int dev);
const char *kc_error(void);
/* Device name and memory, for reports. */
int kc_device_info(char *name, size_t namelen, size_t *mem_total);

void *kc_malloc(size_t bytes);   /* NULL on failure (kc_error says why) */
void kc_free(void *p);
int kc_upload(void *dst, const void *host_src, size_t bytes);   /* ordered on the stream, synchronous */
int kc_download(void *host_dst, const void *src, size_t bytes); /* waits for queued work first */
int kc_memset(void *dst, int byte, size_t bytes);               /* queued */
/* rows rows of width bytes from src (pitch spitch) to dst (pitch dpitch); queued. */
int kc_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows);
int kc_sync(void);
/* The stream every kc_* call queues on (a cudaStream_t), for kernels of
 * other files that join the same order and the captured decode step
 * (kernels/cuda/ksample.cu). */
void *kc_stream(void);

/* Copies a host matrix (possibly unaligned mapped data) to the device:
 * dev gets the same shape with device pointers, the codes (or dense
 * weights) in their stored form; a quantized matrix's scales and biases
 * are interleaved into (scale, bias) pairs in the order the kernels read
 * them (kcuda.cu, "scales and biases on the device"): dev->scales points
 * to the pairs and dev->biases is NULL. Only kc_* kernels read them. */
int kc_matrix_upload(const kq_matrix *host, kq_matrix *dev);
void kc_matrix_free(kq_matrix *dev);
/* Bytes of codes + scales + biases (the stored form: what a decode step
 * reads; the device's pair rows add up to a few padding pairs each). */
uint64_t kc_matrix_bytes(const kq_matrix *m);
/* Device-filled random matrix for benchmarks: codes uniform, scales in
 * [smin, smax) and biases = -scale * (2^bits - 1) / 2 (zero-mean weights).
 * sdt F16/BF16/F32. Dense (bits 0) is not supported here. */
int kc_matrix_random(kq_matrix *dev, int rows, int cols, int bits, int group_size, kdtype sdt, float smin,
		     float smax, uint64_t seed);
int kc_fill_uniform(float *dst, size_t n, float lo, float hi, uint64_t seed);

/* ---- kernels (all queued on the stream) ---- */

/* y[n][rows] = x[n][cols] W^T (+ bias[rows]). n == 1 takes the fused
 * matvec; n > 1 the tiled GEMM (each weight tile dequantized once into
 * shared memory and used for many tokens): on the tensor cores for every
 * quantized matrix, the SIMT kernel for dense weights. The tensor-core
 * GEMM first splits x into a process-wide scratch buffer (grown on demand,
 * which drains the stream; not inside a graph capture): kc_linear_reserve
 * sizes it for n tokens of up to cols columns up front. */
int kc_linear(const kq_matrix *m, const float *x, int n, const float *bias, float *y);
int kc_linear_reserve(int n, int cols);
/* Which GEMM n > 1 takes: 0 (default) the tensor-core kernel where it
 * applies, in its default variant; 1 the SIMT kernel always; tensor-core
 * variants: 2 k steps of 64 columns where it can, 3 run 13's kernel (64
 * tokens, k steps of 32) with one launch per matrix, 4 the same kernel
 * with one launch for all matrices of a kc_linear_multi, 5 128 tokens per
 * block where cols % 64 == 0, 6 the same with the bias term on the tensor
 * cores, 7 6 with the scales converted late, 8 7 with split-K in two
 * where it shortens the waves (the output is zeroed, then both halves add
 * into it: deterministic), 10 8 with x as one f16 term instead of hi + lo
 * (half the tensor work; x rounded to f16: bf16-class, not f32-class,
 * accuracy), 11 10 with the weights rounded to f16 too (s c + b in the
 * tile: no per-group fold), 12 11 at 2 blocks per SM (8 bits: 11's
 * kernel; tests and benchmarks compare them). 10-12 apply where cols %
 * 64 == 0 (else the f32-class kernel: KC_PATH_GEMM_F16X counts them).
 * 13: 8's arithmetic (f32-class) on Hopper's wgmma where the device is
 * sm_90 and the matrices are 4 bits in groups of 64 or 128 with f16 / bf16
 * scales and cols % 64 == 0 (KC_PATH_GEMM_WG counts them), else 8.
 * impl < 0 only reads; returns the previous setting; 9 or above 13: -1,
 * nothing set; not thread-safe. */
int kc_gemm_impl(int impl);
/* The variant a user's fast prefill selects (x and the weights rounded to
 * f16 in the prefill GEMM; the decode kernels are unaffected, decoding
 * reads the K/V the prefill wrote): kc_gemm_impl(KC_GEMM_FAST). H200, 8B
 * layer GEMM at 512 tokens 2036 us (8) -> 1089 (12); with KC_ATT_FAST the
 * 8B prefill of 512 tokens 7,049 -> 13,789 tok/s; prefill logits within
 * 3.9e-3 normwise of the CPU's (1e-4 under 8). */
#define KC_GEMM_FAST 12
/* Up to KC_MAX_FUSE matrices sharing one input (q/k/v, gate/up) in one
 * launch when n == 1 and all have the same cols/bits/group/dtypes;
 * otherwise one kc_linear each. bias[i] and y[i] per matrix. */
#define KC_MAX_FUSE 3
int kc_linear_multi(int count, const kq_matrix *const *ms, const float *x, int n, const float *const *bias,
		    float *const *y);
/* Which decode matvec n == 1 takes for 4- and 8-bit matrices (others:
 * the SIMT kernel): 0 the default (see kc_matvec_impl's use in kcuda.cu's
 * mq_launch), 1 the SIMT kernel for every bits value, 2 the tensor-core
 * kernel that splits a tile's columns across a block's warps (the default
 * before run 27), 3 that with its warp-per-tile variant for large 4-bit
 * launches, 4 the streaming tensor-core kernel (resident grid, weights
 * through a shared-memory ring; 4 warps per block), 5 the same with 8
 * warps per block, 6 the int8 tensor-core kernel (x as three int8 terms
 * per group, k_matvec_i8; the default takes it for 4-bit launches of many
 * row tiles, lm_head) for every 4-bit launch (8 bits: as 2), 7 the
 * default's choice with k_matvec_i8 in place of the split kernel for 4
 * bits, 8 and 9 as 6 and 7 with x staged for k_matvec_i8 once per launch
 * (k_mi_prep) instead of in every block, 10 the default with that for
 * the 4-bit adding launches (tests and benchmarks compare them). impl < 0
 * only reads. Returns
 * the previous setting; not thread-safe (set it before queueing work). */
int kc_matvec_impl(int impl);
/* The feed-forward input: g_out[n][rows] = act(x gate^T) * (x up^T) (act
 * as kc_glu). For n == 1 with 4- or 8-bit gate and up of one shape, one
 * launch computes both and the product (u_out untouched); otherwise
 * kc_linear_multi into g_out and u_out, then kc_glu. */
int kc_linear_glu(const kq_matrix *gate, const kq_matrix *up, const float *x, int n, int act, float *g_out,
		  float *u_out);
/* The feed-forward output: y[n][rows] = (act(g) * u) W^T (+ bias), g and u
 * [n][cols] (act as kc_glu). Where the tensor-core GEMM takes m (n > 1,
 * kc_linear's rule) the product is formed inside its x split (no pass of
 * its own) and g is left as it was; elsewhere kc_glu(g, u) then
 * kc_linear, so g holds the product: callers must not rely on g after
 * the call. */
int kc_linear_glu_in(const kq_matrix *m, float *g, const float *u, int act, int n, const float *bias, float *y);
/* ---- decode (n == 1): the residual add and the RMSNorm inside the matvecs ----
 * The layer's residual steps (x += o(att); then the ffn norm; x += down(h);
 * then the next norm) without a launch of their own:
 * - producer: kc_linear_residual: resid[rows] += W x + bias, in place, in
 *   the matvec's epilogue (one thread per row; resid must not overlap x);
 * - consumer: kc_linear_multi_norm / kc_linear_glu_norm: as kc_linear_multi
 *   / kc_linear_glu (n == 1) of rmsnorm(x, nrm) (kc_rmsnorm's semantics,
 *   x one row of cols values, the residual stream itself, not changed).
 *   Each block sums x^2 over the row while it stages x (it stages all of
 *   x anyway) and scales its dot products by 1/rms(x) at the end, summing
 *   in one fixed order: bit-for-bit the same result on every run.
 * Only where kc_fuse_ok(count, ms, what) is 1 (what: KC_FUSE_ADD for
 * kc_linear_residual, KC_FUSE_NORM for the others): the tensor-core matvec
 * (4- and 8-bit matrices, groups 32/64/128, see kc_matvec_impl), all count
 * matrices of one bits/cols/group/scale dtype, and kc_residual_impl allows;
 * kc_linear_glu_norm also needs gate and up of one shape. Elsewhere these
 * return -1 (callers use kc_linear + kc_add_rmsnorm / kc_rmsnorm). */
typedef struct {
	const float *w; /* [cols] device */
	float eps;
	int add_one; /* (1 + w) */
} kc_norm;
#define KC_FUSE_ADD 1  /* kc_linear_residual */
#define KC_FUSE_NORM 2 /* kc_linear_multi_norm, kc_linear_glu_norm */
int kc_fuse_ok(int count, const kq_matrix *const *ms, int what);
int kc_linear_residual(const kq_matrix *m, const float *x, const float *bias, float *resid);
int kc_linear_multi_norm(int count, const kq_matrix *const *ms, const float *x, const kc_norm *nrm,
			 const float *const *bias, float *const *y);
/* g_out[rows] = act(gate xn) * (up xn), xn = rmsnorm(x, nrm). */
int kc_linear_glu_norm(const kq_matrix *gate, const kq_matrix *up, const float *x, const kc_norm *nrm, int act,
		       float *g_out);
/* 0 (default): kc_fuse_ok as above; 1: kc_fuse_ok is 0 everywhere (the
 * forward pass takes the separate add + norm launches; benchmarks compare);
 * 2: KC_FUSE_ADD only; 3: KC_FUSE_NORM only.
 * impl < 0 only reads; returns the previous setting; not thread-safe. */
int kc_residual_impl(int impl);
/* out[t][cols] = scale * row tokens[t] of W, t < n (tokens: device). */
int kc_embed(const kq_matrix *m, const int *d_tokens, int n, float scale, float *out);
/* out[r] = x[r] / rms(x[r]) * (w + add_one) for `rows` rows of n. */
int kc_rmsnorm(const float *x, const float *w, int rows, int n, float eps, int add_one, float *out);
/* The residual step: if post_w, r = rmsnorm(r, post_w) (sandwich norms);
 * x += r; then if w, out = rmsnorm(x, w). rows rows of n. */
int kc_add_rmsnorm(float *x, float *r, const float *post_w, const float *w, int rows, int n, float eps,
		   int add_one, float *out);
/* For each of n tokens at positions *d_pos + t: optional per-head RMSNorm
 * of q and k (q_norm/k_norm non-NULL), RoPE on q and k (first rot_dim dims,
 * pairs (i, i+rot_dim/2), theta = pos * inv_freq[i] in f32), then k and v
 * appended to the caches at row pos ([ctx][nkv][hd]). q, k, v: [n][heads][hd]. */
int kc_qk_rope_append(float *q, float *k, const float *v, int n, int nh, int nkv, int hd, int rot_dim,
		      const int *d_pos, const float *inv_freq, float mscale, const float *q_norm,
		      const float *k_norm, float eps, int add_one, float *kcache, float *vcache);
/* gate[i] = act(gate[i]) * up[i]; act 0 SiLU, 1 GELU tanh, 2 GELU erf. */
int kc_glu(float *gate, const float *up, size_t n, int act);
int kc_softcap(float *x, size_t n, float cap);
/* Causal attention of n queries at positions *d_pos + t over the caches
 * (semantics of kernel_table.attention). Keys are cut into chunks of
 * KC_ATT_CHUNK (a multiple of it past 8 chunks); each (token, kv head,
 * chunk) block reads its K/V rows once for every q head of the GQA group,
 * with an online softmax; a second
 * kernel merges the chunks. max_keys bounds *d_pos + n (the cache size, or
 * the call's own keys where the caller knows them: fewer chunks; a call
 * captured into a graph replayed at other positions needs the cache size);
 * scratch: kc_attention_scratch(n, nh, nkv, hd, max_keys) bytes, enough for
 * a smaller max_keys, and at n >= 16 for a smaller n >= 16 (at n >=
 * 16, head_dim 64 or 128: the K/V rows of the keys the call sees split
 * into f16 hi + lo for the f32-class tensor-core kernel, max_keys x nkv x
 * (8 hd + 8) bytes, 1 / n_layers of the caches). */
#define KC_ATT_CHUNK 256
size_t kc_attention_scratch(int n, int nh, int nkv, int hd, int max_keys);
/* n >= 16 (prefill) takes the tensor-core kernels (below; the f32-class
 * one needs the scratch, without it the tiled kernel runs) or the tiled
 * kernel instead (64 (query, head) rows of one kv head per block share
 * each K/V tile; no scratch) where head_dim
 * is a multiple of 4 up to 256 and the pointers are 16-byte aligned.
 * n == 1 (decode) takes the split kernel (the visible keys spread over
 * many warps, partials merged in the same launch) where head_dim is 32,
 * 64, 128 or 256, nh / nkv <= 8, nkv <= 64 and the pointers (scratch too)
 * are 16-byte aligned. */
int kc_attention(const float *q, const float *kcache, const float *vcache, float *out, int n, const int *d_pos,
		 int nh, int nkv, int hd, float scale, int window, float softcap, int max_keys, void *scratch);
/* Which attention kernels run: 0 (default) for n >= 16 the f32-class
 * tensor-core kernel where head_dim is 64 or 128 and the device's opt-in
 * shared memory a block holds it (103 KB at 64, 202 KB at 128: sm_90 has
 * 227 KB; the f16 variants likewise) and the scratch is 16-byte aligned
 * (q, k, v each scaled by a power of two per row and split into f16 hi +
 * lo, K and V once per call into the scratch; S and P V as hi hi +
 * hi lo + lo hi on mma.sync, f32 softmax, each tile's P V folded into O
 * in registers; KC_PATH_ATT_X3), elsewhere the tiled f32 kernel, and the
 * split kernel for n == 1; 7 the same as 0 (its name while it was
 * opt-in); 8 as 0 with the tiled f32 kernel for every n >= 16 (the
 * default before session 13; tests and benchmarks compare them); 1 the
 * chunk kernels for every n (tests and benchmarks compare them); 2 as 0
 * with twice the split kernel's blocks (benchmarks); 3 as 0 with run 22's
 * split kernel (no pipelined loads, two-pass merge), 4 as 0 without the
 * pipelined loads (benchmarks); 5 as 0 with n >= 16 on the tensor cores
 * with f16 operands where head_dim is 64, 128 or 256 (elsewhere the tiled
 * kernel): q, the K/V rows (the cache itself stays f32) and the softmax
 * weights rounded to f16, f32 accumulation and softmax (f16-class
 * accuracy, not f32-class), 64 (query, head) rows per block
 * (benchmarks); 6 as 5 with 128 rows per block (the fast prefill's
 * choice, KC_ATT_FAST). Under 5 and 6 q, k and v must stay within f16's
 * range (|v| < 65504; not scaled as the GEMM's x is). impl < 0 only
 * reads; returns the previous setting; not thread-safe. */
int kc_attention_impl(int impl);
/* The variant a user's fast prefill selects with KC_GEMM_FAST (decode is
 * unaffected): kc_attention_impl(KC_ATT_FAST). */
#define KC_ATT_FAST 6
/* kc_qk_rope_append then kc_attention (the same arguments; q, k, v as
 * kc_qk_rope_append's, out, scale .. scratch as kc_attention's). For n == 1
 * where kc_attention takes the split kernel, one launch: that kernel norms
 * and rotates q and this token's k itself, writes cache row *d_pos (k and
 * v) and uses the new row without reading it back, with the two calls'
 * operations in their order (test_rope_attention compares the bits). q is
 * then left as given; callers MUST NOT rely on q after the call either
 * way. Else (n > 1, other shapes, the chunk kernels
 * under kc_attention_impl(1), or kc_rope_impl(1)) the two launches. */
int kc_qk_rope_attention(float *q, const float *k, const float *v, int n, int nh, int nkv, int hd, int rot_dim,
			 const int *d_pos, const float *inv_freq, float mscale, const float *q_norm,
			 const float *k_norm, float eps, int add_one, float *kcache, float *vcache, float *out,
			 float scale, int window, float softcap, int max_keys, void *scratch);
/* kc_qk_rope_attention's decode path: 0 (default) the one launch where it
 * applies, 1 always the two launches (tests and benchmarks compare them).
 * impl < 0 only reads; returns the previous setting; not thread-safe. */
int kc_rope_impl(int impl);

/* ---- which path ran (for tests) ----
 * A fast path and its fallback give the same results within the tests'
 * tolerances (or bit for bit), so a test cannot tell from the output
 * alone which one ran. These host-side counters can: each counts the
 * calls that queued its path, incremented on the host where the launch is
 * queued (a graph capture counts once; its replays count nothing).
 * Process-wide, starting at 0, changed only by the calls that count and
 * by kc_path_reset; not thread-safe. mlxr itself reads none. */
typedef enum {
	KC_PATH_SPLITK,     /* a tensor-core GEMM launch split in two along k
			     * (kc_gemm_impl 8, 10-12: output zeroed, both halves add) */
	KC_PATH_ROPE_FUSED, /* kc_qk_rope_attention in one launch (the split
			     * kernel norms, rotates and appends itself) */
	KC_PATH_GEMM_F16X,  /* a tensor-core GEMM launch on the one-term f16 x
			     * (kc_gemm_impl 10-12 where cols % 64 == 0) */
	KC_PATH_ATT_F16,    /* kc_attention on the tensor cores (k_attn_fa16,
			     * kc_attention_impl 5, 6) */
	KC_PATH_GEMM_WG,    /* a GEMM launch of k_gemm_wg (kc_gemm_impl 13 on
			     * sm_90: 4 bits, f16/bf16 scales, cols % 64 == 0) */
	KC_PATH_ATT_X3,     /* kc_attention on the tensor cores at f32-class
			     * accuracy (k_attn_fa16's X3 variant:
			     * kc_attention_impl 0 and 7, n >= 16, head_dim 64 / 128) */
	KC_PATH_ATT_X3_SPLIT, /* ... of them with the keys split into segments,
			       * merged after (at most 256 queries on blocks for
			       * less than half the SMs, more than one segment) */
	KC_PATH_COUNT
} kc_path;
/* Calls that took path p since the start or kc_path_reset; 0 for p out of range. */
uint64_t kc_path_count(kc_path p);
void kc_path_reset(void);
/* The SM count of kc_init's device (what kc_gemm_impl 8's (10-12's) choice of
 * split-K depends on, so a test can tell which shapes split). */
int kc_sm_count(void);
/* Greedy token selection on the device: d_out[0] = argmax(logits[vocab])
 * (lowest index on ties, as sampler_argmax), and if d_hist, d_hist[*d_pos]
 * = the token too. */
int kc_argmax(const float *logits, int vocab, int *d_out, int *d_hist, const int *d_pos);
/* *d_pos += n (queued: advances the position inside a captured step). */
int kc_pos_advance(int *d_pos, int n);

/* ---- reading a token back without draining the stream ---- */
/* Queues a copy of one int (device) into pinned host slot `slot`
 * (0..KC_STAGE_SLOTS-1) and an event after it; kc_stage_wait waits for
 * that event only, so work queued after the copy keeps the device busy
 * while the host reads the value. */
#define KC_STAGE_SLOTS 8
int kc_stage_int(const int *d_src, int slot);
int kc_stage_wait(int slot, int *out);

/* ---- graphs: capture the queued work once, replay it ---- */
typedef struct kc_graph kc_graph;
int kc_capture_begin(void);
int kc_capture_end(kc_graph **g);
int kc_graph_launch(kc_graph *g);
void kc_graph_free(kc_graph *g);

/* ---- timing and bandwidth ---- */
/* Seconds between two points on the stream: kc_timer_mark(i) records
 * event i (0..7); kc_timer_elapsed(a, b) waits and returns the seconds. */
int kc_timer_mark(int i);
double kc_timer_elapsed(int a, int b);
/* Starts (on = 1) or stops the profiler's collection (ncu
 * --profile-from-start off), after draining the stream. */
int kc_profile(int on);
/* Measured device-memory read bandwidth in bytes/s: a reduction over a
 * buffer much larger than L2, median of several runs. */
double kc_read_bandwidth(size_t bytes);

#endif

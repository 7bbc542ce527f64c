/* kernels/cuda/kcuda.cu — the CUDA kernels behind kernels/cuda/kcuda.h.
 *
 * Read kcuda.h first: the contract (device pointers, one stream, positions
 * read from device memory so a decode step can be captured once and
 * replayed) is there. This file is CUDA C++ only for templates (one kernel
 * instance per bits value and scale dtype, so every shift and mask is a
 * constant); the interface is extern "C".
 *
 * Kernels, in the order of a forward pass:
 *   k_embed          dequantize one embedding row per token
 *   k_rmsnorm        one block per row
 *   k_matvec_mma     decode, 4 and 8 bits: codes straight into mma.sync
 *   k_matvec_wt      (f16 1 + c/D, x as f16 hi + lo), 16-row tiles; up to 3
 *                    matrices sharing x, or gate/up + GLU, in one launch
 *   k_matvec_cp      the same arithmetic, streaming: a resident grid, x staged
 *                    once per block, weights through a cp.async ring
 *   k_matvec_i8      decode, 4 bits: the codes as u8 into mma.m16n8k32, x as
 *                    three int8 terms per group (launches of many tiles:
 *                    lm_head; every 4-bit launch under kc_matvec_impl 6, 7)
 *   k_mi_prep        those terms once per launch for k_matvec_i8 (impls 8-10)
 *   k_matvec_q       decode, other bits (and kc_matvec_impl(1)): SIMT, a
 *                    warp per KC_MV_ROWS rows, straight from the packed codes
 *   k_xsplit         prefill: x to per-token scaled f16 hi + lo, group sums
 *   k_gemm_tc        prefill GEMM on the tensor cores (every quantized
 *                    matrix): 128 rows x 128 (or 64) tokens per block,
 *                    codes dequantized once per block into shared memory;
 *                    up to 3 matrices sharing x (q/k/v, gate/up) in one launch
 *   k_gemm           prefill, dense weights (and kc_gemm_impl(1)): SIMT,
 *                    64x64 output tile
 *   k_qk_rope_append per-head q/k norm + RoPE + KV-cache append (decode:
 *                    inside k_attn_split, kc_qk_rope_attention)
 *   k_attn_flash     prefill attention (n >= 16): 64 (query, head) rows of
 *                    one kv head per block, K/V tiles in shared memory
 *                    (head_dim other than 64/128; kc_attention_impl 8)
 *   k_attn_fa16      the same on the tensor cores: X3, f32-class (q, k, v
 *                    as f16 hi + lo, 3 mmas a product; the default for
 *                    head_dim 64/128 where the device's opt-in shared
 *                    memory holds it: 202 KB at 128, sm_90), or f16
 *                    operands (fast prefill: kc_attention_impl 6; 5 with
 *                    64 rows a block)
 *   k_kv_split       X3's K/V rows split once per call into hi + lo
 *                    planes in the attention scratch
 *   k_attn_chunk     attention over one chunk of keys for one GQA group,
 *   k_attn_dec       online softmax (k_attn_dec: n < 16, three bulk phases);
 *   k_attn_merge     the merge combines the chunks
 *   k_attn_split     decode attention (n = 1): the keys split across many
 *                    warps, partials merged by the last block of a kv head
 *   k_glu, k_add_rmsnorm, k_argmax
 *
 * Measured / rejected variants are recorded in kernels/cuda/NOTES.md.
 */
#include <cuda_runtime.h>
#include <cuda_profiler_api.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <limits.h>
#include <math.h>
#include <type_traits>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "kernels/cuda/kcuda.h"
}

/* ---- errors, stream ---- */

static char g_err[256];
static cudaStream_t g_stream;
static cudaEvent_t g_ev[8];
static int g_ready;
static int g_sms = 132;
static int g_pdl = 1; /* launch_pdl: see "programmatic dependent launch" */
static int g_pdl_add = -1; /* the same for the residual-adding matvecs: see mq_pdl (MLXR_CUDA_PDL_ADD=0|1|2) */
static int g_mqw; /* MLXR_CUDA_MQW (4, 8; 0: by shape): see mq_launch_w */
static int g_mqh; /* MLXR_CUDA_MQH=1: no HN = 2 fallback in mq_launch_w (run 36, call 6) */
static int g_wg_ok; /* compute capability 9.0: k_gemm_wg (sm_90a code) can run */
static int g_gluw = -1; /* MLXR_CUDA_GLUW=0|1|2 (-1: by shape): see mq_launch_glu_w */
static int *g_stage;                      /* [KC_STAGE_SLOTS] pinned host */
static cudaEvent_t g_stage_ev[KC_STAGE_SLOTS];
static uint64_t g_path[KC_PATH_COUNT]; /* kc_path_count */

static int fail(const char *what, cudaError_t e)
{
	snprintf(g_err, sizeof(g_err), "%s: %s", what, cudaGetErrorString(e));
	return -1;
}
#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return fail(#call, e_); } while (0)
#define LAUNCHED(name) do { cudaError_t e_ = cudaGetLastError(); if (e_ != cudaSuccess) return fail(name, e_); } while (0)

extern "C" const char *kc_error(void) { return g_err; }

extern "C" uint64_t kc_path_count(kc_path p)
{
	return (unsigned)p < KC_PATH_COUNT ? g_path[p] : 0;
}

extern "C" void kc_path_reset(void)
{
	memset(g_path, 0, sizeof(g_path));
}

extern "C" int kc_sm_count(void) { return g_sms; }

extern "C" int kc_device_count(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return n;
}

static int mq_init(void);
static void mi_free(void);
static int fa_attr(void);

extern "C" int kc_init(int dev)
{
	if (g_ready)
		return 0;
	setenv("CUDA_CACHE_DISABLE", "1", 0);
	setenv("CUDA_MODULE_LOADING", "EAGER", 0);
	const char *pdl = getenv("MLXR_CUDA_PDL");
	g_pdl = !(pdl && pdl[0] == '0');
	const char *pa = getenv("MLXR_CUDA_PDL_ADD");
	g_pdl_add = !g_pdl ? 0 : pa && pa[0] >= '0' && pa[0] <= '2' ? pa[0] - '0' : -1;
	const char *mw = getenv("MLXR_CUDA_MQW");
	g_mqw = mw && (atoi(mw) == 4 || atoi(mw) == 8) ? atoi(mw) : 0;
	const char *gw = getenv("MLXR_CUDA_GLUW");
	g_gluw = gw && gw[0] >= '0' && gw[0] <= '2' ? gw[0] - '0' : -1;
	const char *mh = getenv("MLXR_CUDA_MQH");
	g_mqh = mh && mh[0] == '1';
	CK(cudaSetDevice(dev));
	CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
	for (int i = 0; i < 8; i++)
		CK(cudaEventCreate(&g_ev[i]));
	CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, dev));
	{
		int ma = 0, mi = 0;
		CK(cudaDeviceGetAttribute(&ma, cudaDevAttrComputeCapabilityMajor, dev));
		CK(cudaDeviceGetAttribute(&mi, cudaDevAttrComputeCapabilityMinor, dev));
		g_wg_ok = ma == 9 && mi == 0; /* k_gemm_wg is sm_90a code */
	}
	CK(cudaHostAlloc((void **)&g_stage, KC_STAGE_SLOTS * sizeof(int), cudaHostAllocDefault));
	for (int i = 0; i < KC_STAGE_SLOTS; i++)
		CK(cudaEventCreateWithFlags(&g_stage_ev[i], cudaEventDisableTiming));
	/* the runtime finishes its lazy set-up here (context, module load),
	 * before the caller locks the process down */
	CK(cudaFree(0));
	/* g_mi_x (mq_init) is freed again if this fails after allocating it */
	if (mq_init()) {
		mi_free();
		return -1;
	}
	const cudaError_t e = cudaStreamSynchronize(g_stream);
	if (e != cudaSuccess) {
		mi_free();
		return fail("cudaStreamSynchronize(g_stream)", e);
	}
	g_ready = 1;
	return 0;
}

extern "C" int kc_device_info(char *name, size_t namelen, size_t *mem_total)
{
	cudaDeviceProp p;
	int dev = 0;
	CK(cudaGetDevice(&dev));
	CK(cudaGetDeviceProperties(&p, dev));
	snprintf(name, namelen, "%s (sm_%d%d, %d SMs)", p.name, p.major, p.minor, p.multiProcessorCount);
	*mem_total = p.totalGlobalMem;
	return 0;
}

extern "C" void *kc_malloc(size_t bytes)
{
	void *p = NULL;
	cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
	if (e != cudaSuccess) {
		fail("cudaMalloc", e);
		return NULL;
	}
	return p;
}

extern "C" void kc_free(void *p)
{
	if (p)
		cudaFree(p);
}

extern "C" int kc_upload(void *dst, const void *src, size_t bytes)
{
	CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_stream));
	CK(cudaStreamSynchronize(g_stream));
	return 0;
}

extern "C" int kc_download(void *dst, const void *src, size_t bytes)
{
	CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_stream));
	CK(cudaStreamSynchronize(g_stream));
	return 0;
}

extern "C" int kc_memset(void *dst, int byte, size_t bytes)
{
	CK(cudaMemsetAsync(dst, byte, bytes, g_stream));
	return 0;
}

extern "C" int kc_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows)
{
	CK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice, g_stream));
	return 0;
}

extern "C" void *kc_stream(void)
{
	return g_stream;
}

extern "C" int kc_sync(void)
{
	CK(cudaStreamSynchronize(g_stream));
	CK(cudaGetLastError());
	return 0;
}

/* ---- programmatic dependent launch ----
 * The decode step is a chain of small kernels; between two of them the
 * device sits idle for the launch and the first loads of the next. Every
 * kernel lets its successor launch early (pdl_trigger, first thing); the
 * matvec kernels are launched with programmatic stream serialization
 * (launch_pdl) and fetch their first weights, which depend on no kernel,
 * before pdl_wait, which returns once the predecessor has completed and
 * its writes are visible (then, transitively, every earlier kernel's).
 * Without the attribute both are no-ops. MLXR_CUDA_PDL=0 turns it off.
 * Not on the matvecs that add into the residual stream (o, down in
 * decode: kc_linear_residual), whose successor norms x in its staging:
 * with the attribute on both, a chain of four matvecs could launch early
 * (gate/up, down, q/k/v: no plain launch between them any more) and 8B
 * decode ran 365 tok/s against 417 without it on the adding ones (run
 * 24; MLXR_CUDA_PDL_ADD=1 puts it back, for benchmarks). Except the
 * adding launch right after gate/up + GLU when its tiles take at most one
 * block per SM (the 1B down; run 37): see mq_pdl.
 * Rejected (run 15): the attribute on every decode kernel (norms, RoPE,
 * attention, merge, argmax, SIMT matvec): 8B decode 320.7 -> 279.9 tok/s,
 * 1B 1039 -> 994 (not analysed; the SIMT matvec's many early blocks,
 * waiting, also slowed it 6.9 -> 21.7 us on qkv). */
static __device__ __forceinline__ void pdl_trigger(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

static __device__ __forceinline__ void pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <typename... KArgs, typename... Args>
static cudaError_t launch_ex(int pdl, void (*kern)(KArgs...), dim3 grid, dim3 block, size_t smem, Args... args)
{
	cudaLaunchConfig_t cfg = {};
	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = g_stream;
	cudaLaunchAttribute at[1];
	at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	at[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.attrs = at;
	cfg.numAttrs = pdl ? 1 : 0;
	return cudaLaunchKernelEx(&cfg, kern, args...);
}

template <typename... KArgs, typename... Args>
static cudaError_t launch_pdl(void (*kern)(KArgs...), dim3 grid, dim3 block, size_t smem, Args... args)
{
	return launch_ex(g_pdl, kern, grid, block, smem, args...);
}

/* ---- element access ---- */

static size_t dt_size(kdtype dt) { return dt == KDT_F32 ? 4 : 2; }

/* ld: element i of a dense array. A (scale, bias) pair of the device
 * layout (see "scales and biases on the device") is SW 32-bit words:
 * ps/pb read it from those words, ldp loads pair e. */
struct F32 {
	static constexpr int SW = 2;
	static __device__ __forceinline__ float ld(const void *p, size_t i) { return __ldg((const float *)p + i); }
	static __device__ __forceinline__ float ps(const uint32_t *e) { return __uint_as_float(e[0]); }
	static __device__ __forceinline__ float pb(const uint32_t *e) { return __uint_as_float(e[1]); }
	static __device__ __forceinline__ void ldp(const void *p, size_t e, float &s, float &b) {
		float2 v = __ldg((const float2 *)p + e); s = v.x; b = v.y; }
};
struct F16 {
	static constexpr int SW = 1;
	static __device__ __forceinline__ float ld(const void *p, size_t i) {
		unsigned short h = __ldg((const unsigned short *)p + i); return __half2float(__ushort_as_half(h)); }
	static __device__ __forceinline__ float ps(const uint32_t *e) { return __half2float(__ushort_as_half((unsigned short)(e[0] & 0xffffu))); }
	static __device__ __forceinline__ float pb(const uint32_t *e) { return __half2float(__ushort_as_half((unsigned short)(e[0] >> 16))); }
	static __device__ __forceinline__ void ldp(const void *p, size_t e, float &s, float &b) {
		uint32_t v = __ldg((const uint32_t *)p + e); s = ps(&v); b = pb(&v); }
};
struct BF16 {
	static constexpr int SW = 1;
	static __device__ __forceinline__ float ld(const void *p, size_t i) {
		unsigned short h = __ldg((const unsigned short *)p + i); return __uint_as_float((unsigned)h << 16); }
	static __device__ __forceinline__ float ps(const uint32_t *e) { return __uint_as_float(e[0] << 16); }
	static __device__ __forceinline__ float pb(const uint32_t *e) { return __uint_as_float(e[0] & 0xffff0000u); }
	static __device__ __forceinline__ void ldp(const void *p, size_t e, float &s, float &b) {
		uint32_t v = __ldg((const uint32_t *)p + e); s = ps(&v); b = pb(&v); }
};

/* pair e's SW raw words (ps / pb read them later) */
template <class S>
static __device__ __forceinline__ void sb_words(const void *p, size_t e, uint32_t (&w)[S::SW])
{
	if constexpr (S::SW == 2) {
		const uint2 v = __ldg((const uint2 *)p + e);
		w[0] = v.x;
		w[S::SW - 1] = v.y;
	} else {
		w[0] = __ldg((const uint32_t *)p + e);
	}
}

/* ---- scales and biases on the device ----
 * kc_matrix_upload and kc_matrix_random store a quantized matrix's scales
 * and biases interleaved: pair (row, group) = (scale, bias), two elements
 * of sdt (one 32-bit word for f16/bf16, two for f32); m->scales points to
 * the pairs and m->biases is NULL. Each row holds sb_ngp() pairs: its
 * groups padded (with zeros) to whole blocks of 4T groups, where T = 4 /
 * (group / 32) for groups of 32, 64 and 128 (T = 4, 2, 1), else T = 1;
 * inside a block group j sits at pair (j % T) * 4 + j / T.
 * Why: a block is the 512 columns of one step of the decode matvec, in
 * which a lane (tig) takes chunks 4h + tig (h = 0..3) of its two rows,
 * i.e. groups h T + tig / (group / 32): with this order they are pairs
 * 4 (tig / (group/32)) .. +3 of the block, one 16-byte load per row (two
 * for f32) instead of 16 scalar loads (2 rows x 4 groups x scale, bias):
 * those loads were the largest single cost of the matvec (NOTES.md, runs
 * 4-9: without them gate/up 45% -> 63% of the bandwidth). Every other
 * reader (SIMT matvec, both GEMMs, the embedding) goes through sb_at().
 * The codes stay as uploaded (packed); nothing is dequantized. */
static __host__ __device__ __forceinline__ int sb_tsh(int group)
{
	return group == 32 ? 2 : group == 64 ? 1 : 0; /* log2 T */
}
static __host__ __device__ __forceinline__ int sb_ngp(int cols, int group)
{
	const int blk = 4 << sb_tsh(group), ng = cols / group;
	return (ng + blk - 1) / blk * blk;
}
/* Index of pair (row, gi) in a matrix of ngp pairs per row. */
static __host__ __device__ __forceinline__ size_t sb_at(int row, int gi, int ngp, int tsh)
{
	const int j = gi & ((4 << tsh) - 1);
	return (size_t)row * ngp + (gi - j) + ((j & ((1 << tsh) - 1)) << 2) + (j >> tsh);
}

/* Code j of a packed row (row = first word of the row): bits
 * [j*BITS, j*BITS+BITS) of the little-endian word stream. */
template <int BITS>
static __device__ __forceinline__ unsigned code_at(const uint32_t *row, size_t j)
{
	size_t off = j * BITS;
	unsigned sh = (unsigned)(off & 31);
	unsigned c = __ldg(row + (off >> 5)) >> sh;
	if (sh + BITS > 32)
		c |= __ldg(row + (off >> 5) + 1) << (32 - sh);
	return c & ((1u << BITS) - 1);
}

/* Code i (0..31) of a pack of 32 values held in BITS registers. */
template <int BITS>
static __device__ __forceinline__ unsigned code_in_pack(const uint32_t (&w)[BITS], int i)
{
	const int off = i * BITS, wi = off >> 5, sh = off & 31;
	unsigned c = w[wi] >> sh;
	if (sh + BITS > 32)
		c |= w[wi + 1] << (32 - sh);
	return c & ((1u << BITS) - 1);
}

/* The same code as an exact float without I2F (a quarter-rate
 * instruction): 2^23 + c has c in its mantissa, so subtracting 2^23 is exact. */
template <int BITS>
static __device__ __forceinline__ float fcode_in_pack(const uint32_t (&w)[BITS], int i)
{
	return __uint_as_float(0x4B000000u | code_in_pack<BITS>(w, i)) - 8388608.0f;
}

template <int BITS>
static __device__ __forceinline__ void load_pack(const uint32_t *p, uint32_t (&w)[BITS], bool vec)
{
	if (BITS % 4 == 0 && vec) {
#pragma unroll
		for (int i = 0; i < BITS; i += 4) {
			uint4 v = __ldg((const uint4 *)(p + i));
			w[i] = v.x; w[i + 1] = v.y; w[i + 2] = v.z; w[i + 3] = v.w;
		}
	} else if (BITS % 2 == 0 && vec) {
#pragma unroll
		for (int i = 0; i < BITS; i += 2) {
			uint2 v = __ldg((const uint2 *)(p + i));
			w[i] = v.x; w[i + 1] = v.y;
		}
	} else {
#pragma unroll
		for (int i = 0; i < BITS; i++)
			w[i] = __ldg(p + i);
	}
}

static __device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* A power of two sc = 2^(140 - E) for a max |x| mx of biased exponent E:
 * max |x sc| in [2^13, 2^14) (f16's range with room), sc and *inv = 1 /
 * sc both normal (E clamped), so x sc and (x sc) * inv are exact. */
static __device__ __forceinline__ float pow2_scale(float mx, float *inv)
{
	int se = 267 - (int)((__float_as_uint(mx) >> 23) & 0xff);
	se = se < 1 ? 1 : se > 253 ? 253 : se;
	*inv = __uint_as_float((uint32_t)(254 - se) << 23);
	return __uint_as_float((uint32_t)se << 23);
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread
 * gets the result. sh: 32 floats of shared memory. */
static __device__ float block_sum(float v, float *sh)
{
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
	v = warp_sum(v);
	__syncthreads();
	if (lane == 0)
		sh[wid] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : 0.0f;
	return warp_sum(v);
}

/* ---- matrices ---- */

extern "C" uint64_t kc_matrix_bytes(const kq_matrix *m)
{
	if (m->bits == 0)
		return (uint64_t)m->rows * (uint64_t)m->cols * dt_size(m->wdt);
	uint64_t codes = (uint64_t)m->rows * (uint64_t)m->cols * (uint64_t)m->bits / 8;
	uint64_t groups = (uint64_t)m->rows * (uint64_t)(m->cols / m->group_size);
	return codes + 2 * groups * dt_size(m->sdt);
}

/* Separate scales and biases ([rows][ng], esz bytes each) into the pair
 * layout (sb_at); the padding pairs were zeroed before. */
__global__ void k_sb_pack(const void *s, const void *b, void *sb, int rows, int ng, int ngp, int tsh, int esz)
{
	const size_t n = (size_t)rows * ng;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		const int row = (int)(i / ng), gi = (int)(i % ng);
		const size_t e = sb_at(row, gi, ngp, tsh);
		if (esz == 4)
			((float2 *)sb)[e] = make_float2(((const float *)s)[i], ((const float *)b)[i]);
		else
			((uint32_t *)sb)[e] = ((const uint16_t *)s)[i] | (uint32_t)((const uint16_t *)b)[i] << 16;
	}
}

/* Device scales s and biases b (rows x cols/group, sdt) -> a new pair
 * buffer; s and b are left to the caller. */
static void *sb_make(const void *s, const void *b, int rows, int cols, int group, kdtype sdt)
{
	const int ngp = sb_ngp(cols, group), esz = (int)dt_size(sdt);
	const size_t bytes = (size_t)rows * ngp * 2 * esz;
	void *sb = kc_malloc(bytes);
	if (!sb)
		return NULL;
	if (cudaMemsetAsync(sb, 0, bytes, g_stream) != cudaSuccess) {
		kc_free(sb);
		fail("sb_make memset", cudaGetLastError());
		return NULL;
	}
	k_sb_pack<<<1024, 256, 0, g_stream>>>(s, b, sb, rows, cols / group, ngp, sb_tsh(group), esz);
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess) {
		kc_free(sb);
		fail("k_sb_pack", e);
		return NULL;
	}
	return sb;
}

extern "C" int kc_matrix_upload(const kq_matrix *h, kq_matrix *d)
{
	*d = *h;
	d->w = d->scales = d->biases = NULL;
	size_t wb = h->bits == 0 ? (size_t)h->rows * h->cols * dt_size(h->wdt) : (size_t)h->rows * h->cols * h->bits / 8;
	void *w = kc_malloc(wb), *s = NULL, *b = NULL;
	if (!w || kc_upload(w, h->w, wb))
		goto fail;
	d->w = w;
	if (h->bits) {
		size_t sb = (size_t)h->rows * (h->cols / h->group_size) * dt_size(h->sdt);
		s = kc_malloc(sb);
		b = kc_malloc(sb);
		/* kc_upload waits for the stream: the pairs are built before s and b go */
		if (!s || !b || kc_upload(s, h->scales, sb) || kc_upload(b, h->biases, sb) ||
		    !(d->scales = sb_make(s, b, h->rows, h->cols, h->group_size, h->sdt)) || kc_sync())
			goto fail;
		kc_free(s);
		kc_free(b);
	}
	return 0;
fail:
	kc_sync();
	kc_free(s);
	kc_free(b);
	kc_matrix_free(d);
	return -1;
}

extern "C" void kc_matrix_free(kq_matrix *d)
{
	kc_free((void *)d->w);
	kc_free((void *)d->scales);
	kc_free((void *)d->biases);
	d->w = d->scales = d->biases = NULL;
}

static __device__ __forceinline__ uint32_t hash32(uint64_t x)
{
	x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
	return (uint32_t)x;
}

__global__ void k_fill_words(uint32_t *p, size_t n, uint64_t seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		p[i] = hash32(seed * 0x9E3779B97F4A7C15ULL + i);
}

static __device__ __forceinline__ void st_elem(void *p, size_t i, kdtype dt, float v)
{
	if (dt == KDT_F32)
		((float *)p)[i] = v;
	else if (dt == KDT_F16)
		((__half *)p)[i] = __float2half(v);
	else
		((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
}

__global__ void k_fill_scales(void *s, void *b, size_t n, kdtype dt, float lo, float hi, float half_range,
			      uint64_t seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		float u = (float)(hash32(seed * 0x9E3779B97F4A7C15ULL + i) >> 8) * (1.0f / 16777216.0f);
		float sc = lo + (hi - lo) * u;
		st_elem(s, i, dt, sc);
		if (b)
			st_elem(b, i, dt, -sc * half_range);
	}
}

extern "C" int kc_fill_uniform(float *dst, size_t n, float lo, float hi, uint64_t seed)
{
	k_fill_scales<<<1024, 256, 0, g_stream>>>(dst, NULL, n, KDT_F32, lo, hi, 0.0f, seed);
	LAUNCHED("k_fill_scales");
	return 0;
}

extern "C" int kc_matrix_random(kq_matrix *d, int rows, int cols, int bits, int gs, kdtype sdt, float smin,
				float smax, uint64_t seed)
{
	memset(d, 0, sizeof(*d));
	d->rows = rows; d->cols = cols; d->bits = bits; d->group_size = gs; d->sdt = sdt; d->wdt = KDT_F32;
	size_t words = (size_t)rows * cols * bits / 32, ng = (size_t)rows * (cols / gs);
	void *w = kc_malloc(words * 4), *s = kc_malloc(ng * dt_size(sdt)), *b = kc_malloc(ng * dt_size(sdt));
	d->w = w;
	if (!w || !s || !b) {
		kc_free(s);
		kc_free(b);
		kc_matrix_free(d);
		return -1;
	}
	k_fill_words<<<1024, 256, 0, g_stream>>>((uint32_t *)w, words, seed);
	LAUNCHED("k_fill_words");
	k_fill_scales<<<1024, 256, 0, g_stream>>>(s, b, ng, sdt, smin, smax, (float)((1 << bits) - 1) * 0.5f, seed + 1);
	LAUNCHED("k_fill_scales");
	d->scales = sb_make(s, b, rows, cols, gs, sdt);
	if (!d->scales || kc_sync()) {
		kc_free(s);
		kc_free(b);
		d->scales = NULL;
		kc_matrix_free(d);
		return -1;
	}
	kc_free(s);
	kc_free(b);
	return 0;
}

/* ---- decode: quantized matvec ----
 * A warp owns KC_MV_ROWS (4) consecutive rows of one matrix. Lane l takes the
 * packs (32 values = BITS words, all in one group since group_size is a
 * multiple of 32) l, l+32, ...: for 4 bits that is one 16-byte load per
 * lane per row, 512 contiguous bytes per warp. The 32 x values of a pack
 * are loaded once and used for every row of the warp; per pack the sum is
 * scale * sum(code * x) + bias * sum(x) (the bias term needs one sum of x
 * per pack, not one multiply per value). */
#define KC_MV_ROWS 4
#define KC_MV_WARPS 4

/* The GLU activation (kc_glu): 0 SiLU, 1 GELU tanh, 2 GELU erf. */
static __device__ __forceinline__ float glu_act(float g, int act)
{
	if (act == 0)
		return g / (1.0f + expf(-g));
	if (act == 1)
		return g / (1.0f + expf(-2.0f * 0.7978845608028654f * (g + 0.044715f * g * g * g)));
	return 0.5f * g * (1.0f + erff(g / sqrtf(2.0f)));
}

struct mv_args {
	const uint32_t *w[KC_MAX_FUSE];
	const void *s[KC_MAX_FUSE]; /* (scale, bias) pairs */
	const float *bias[KC_MAX_FUSE];
	float *y[KC_MAX_FUSE];
	int rows[KC_MAX_FUSE]; /* rows of each matrix */
	int start[KC_MAX_FUSE]; /* first warp-row-block of each matrix */
	int count, cols, group;
	int vec; /* row starts are 16-byte aligned: vector loads of the codes */
	int act; /* k_matvec_mma with NM = 2: y[0] = glu_act(W0 x, act) * (W1 x) */
	int tiles; /* k_matvec_mma: row tiles in the launch */
	int ns; /* k_matvec_cp: ring stages per warp (2..MQ_CP_MAXNS) */
	int add; /* NM = 1: y[row] += result (the residual stream, in place; kc_linear_residual) */
	int pre; /* k_matvec_i8: > 0: x is k_mi_prep's staged image (g_mi_x), not the vector, from pre blocks */
	const float *nw; /* the tensor-core kernels' NORM variant: x is normed, rmsnorm(x, nw) (kc_linear_multi_norm) */
	float one, eps; /* that norm's (nw + one) and eps */
};

template <int BITS, class S>
__global__ void __launch_bounds__(32 * KC_MV_WARPS) k_matvec_q(mv_args a, const float *__restrict__ x)
{
	pdl_trigger();
	pdl_wait();
	int blk = blockIdx.x * KC_MV_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	int mi = 0;
	while (mi + 1 < a.count && blk >= a.start[mi + 1])
		mi++;
	int r0 = (blk - a.start[mi]) * KC_MV_ROWS;
	if (r0 >= a.rows[mi])
		return;
	const int cols = a.cols, npack = cols >> 5, pack_per_group = a.group >> 5;
	const int ngp = sb_ngp(cols, a.group), tsh = sb_tsh(a.group);
	const size_t row_words = (size_t)cols * BITS / 32;
	const uint32_t *W = a.w[mi];
	const bool xvec = ((uintptr_t)x & 15) == 0;
	float acc[KC_MV_ROWS];
#pragma unroll
	for (int r = 0; r < KC_MV_ROWS; r++)
		acc[r] = 0.0f;
#pragma unroll 2
	for (int p = lane; p < npack; p += 32) {
		float xv[32];
		if (xvec) {
#pragma unroll
			for (int i = 0; i < 32; i += 4) {
				float4 v = __ldg((const float4 *)(x + (size_t)p * 32 + i));
				xv[i] = v.x; xv[i + 1] = v.y; xv[i + 2] = v.z; xv[i + 3] = v.w;
			}
		} else {
#pragma unroll
			for (int i = 0; i < 32; i++)
				xv[i] = __ldg(x + (size_t)p * 32 + i);
		}
		float xs = 0.0f;
#pragma unroll
		for (int i = 0; i < 32; i++)
			xs += xv[i];
		int g = p / pack_per_group;
#pragma unroll
		for (int r = 0; r < KC_MV_ROWS; r++) {
			int row = r0 + r;
			if (row >= a.rows[mi])
				break;
			uint32_t w[BITS];
			load_pack<BITS>(W + row * row_words + (size_t)p * BITS, w, a.vec);
			float d = 0.0f;
#pragma unroll
			for (int i = 0; i < 32; i++)
				d = fmaf(fcode_in_pack<BITS>(w, i), xv[i], d);
			float sv, bv;
			S::ldp(a.s[mi], sb_at(row, g, ngp, tsh), sv, bv);
			acc[r] += sv * d + bv * xs;
		}
	}
#pragma unroll
	for (int r = 0; r < KC_MV_ROWS; r++) {
		float v = warp_sum(acc[r]);
		int row = r0 + r;
		if (lane == 0 && row < a.rows[mi])
			a.y[mi][row] = v + (a.bias[mi] ? a.bias[mi][row] : 0.0f);
	}
}

/* ---- decode, 4 and 8 bits: the matvec on the tensor cores ----
 * Why: the SIMT kernel above spends ~4 instructions per 4-bit value per row
 * (extract, to float, subtract, FMA); at 4.5 TB/s the chip can issue ~3.7
 * per value, so it is issue-bound. Here the codes go straight into
 * mma.sync.m16n8k16 (f16 in, f32 accumulate) at ~1 instruction per value.
 *
 * Exactness (f32-class results, TOL_LINEAR 1e-5 holds):
 * - A (weights): code c becomes the f16 1 + c/D exactly (D = 16 for 4 bits,
 *   256 for 8: c sits in the top mantissa bits, one shift and one LOP3 per
 *   pair of codes). sum((1 + c/D) x) - sum(x) = sum(c x)/D loses ~1 bit to
 *   the cancellation (the offset is about the size of the signal).
 * - B (x): each chunk of 32 values is scaled by a power of two so its
 *   largest |x'| is in [2^13, 2^14) (no f16 overflow, whatever x holds),
 *   then split x' = hi + lo, both f16: 22 significant bits. The tensor core
 *   multiplies exactly and accumulates in f32.
 * - Groups: an mma's k = 16 columns come from the 4 lanes of a quad (tig),
 *   each lane's from its own chunk of 32 columns. B column n holds part
 *   (n & 1: hi, lo) of chunk n >> 1 and zeros elsewhere, so C[r][2 tig + p]
 *   is lane tig's own chunk: every chunk (inside one group, since groups
 *   are multiples of 32) gets its own scale and bias after 8 mmas.
 * Layout: a block of MQ_WARPS warps owns 16 rows; its warps split the
 * columns in steps of 16 chunks (each lane: 4 chunks x rows g and g+8, i.e.
 * 4 or 8 16-byte loads, 128 (256) contiguous bytes per row per step). x is
 * staged once per block in shared memory (all of it: MQ_SMEM_MAX bounds the
 * columns) in the order the B fragments are read. */
#define MQ_ROWS 16
#define MQ_WARPS 4
#ifndef MQ_MINB
#define MQ_MINB 3 /* blocks per SM the registers must allow: 3 (168 regs) measured 5-15% faster than 4 (128 regs, spills) */
#endif
/* tiles x matrices from which k_matvec_wt takes the launch under
 * kc_matvec_impl(3): lm_head (8016 tiles) was faster warp-owned before the
 * pair layout (110 vs 112 us), slower after it (104.5 vs 91.2 us, run 14),
 * so the default no longer takes it; gate/up+GLU (896 x 2) measured 31 us
 * split vs 43 us warp-owned */
#define MQ_WT_MIN 4096
#define MQ_SMEM_MAX (200 << 10) /* staged x: 144 B per 32 columns, up to 45,000 columns */
#define MQ_CW 36    /* words per staged chunk: hi[16] lo[16] sum mult pad: 144 B keeps the 8 reading lanes conflict-free */

static __device__ __forceinline__ uint32_t h2_bits(float a, float b)
{
	__half2 h = __floats2half2_rn(a, b); /* a in the low half */
	return *(uint32_t *)&h;
}

/* Pair j (0..3) of the 8 consecutive values v: the column pair that one
 * f16x2 register of A holds (see mq_a). */
template <int BITS>
static __device__ __forceinline__ int mq_pair_lo(int j)
{
	return BITS == 4 ? j : 4 * (j >> 1) + (j & 1);
}
template <int BITS>
static __device__ __forceinline__ int mq_pair_hi(int j)
{
	return BITS == 4 ? j + 4 : 4 * (j >> 1) + (j & 1) + 2;
}

/* (v & M) | O in one LOP3. Written in C, ptxas emits two (each LOP3 takes
 * one immediate, and it does not move the second constant into a
 * register): the code conversion below was 3 instructions per f16x2
 * register instead of 2 (run 37). */
template <uint32_t M, uint32_t O>
static __device__ __forceinline__ uint32_t and_or(uint32_t v)
{
	uint32_t r;
	asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(v), "n"(M), "n"(O));
	return r;
}

/* f16x2 pair t of word w, as 1 + c/D in each half. 4 bits: word q holds
 * columns 8q..8q+7 (code j at bits 4j); pair t (0..3) = codes (t, t+4).
 * 8 bits: word q holds columns 4q..4q+3; pair t (0..1) = codes (t, t+2). */
template <int BITS>
static __device__ __forceinline__ uint32_t mq_a(uint32_t w, int t)
{
	if (BITS == 4) {
		uint32_t v = t == 0 ? w << 6 : t == 1 ? w << 2 : t == 2 ? w >> 2 : w >> 6;
		return and_or<0x03C003C0u, 0x3C003C00u>(v);
	}
	uint32_t v = t == 0 ? w << 2 : w >> 6;
	return and_or<0x03FC03FCu, 0x3C003C00u>(v);
}

static __device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		     "{%0,%1,%2,%3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* One step of one lane: 4 chunks (st*16 + 4h + tig) of rows ra and rb:
 * the codes (V 16-byte loads per row and chunk) and the (scale, bias)
 * pairs of their groups, h = 0..3 (SW 16-byte loads per row: the pair
 * layout puts them side by side). */
template <int V, int SW, int HN = 4>
struct mq_regs {
	uint4 wa[HN][V], wb[HN][V]; /* h0 .. h0 + HN - 1 (the split kernel's h-parts; else all 4) */
	uint4 pa[SW], pb[SW];
};

/* ea0/eb0: first pair of rows ra/rb (row * ngp); chunks per group 1 << cpg_sh <= 4.
 * HN < 4: only h = h0 .. h0 + HN - 1 of the step (the pairs: all 4, one load) */
template <int BITS, class S, int HN = 4>
static __device__ __forceinline__ void mq_load(mq_regs<BITS / 4, S::SW, HN> &r, const uint4 *Wa, const uint4 *Wb,
					       const void *SB, size_t ea0, size_t eb0, int cpg_sh, int st, int tig,
					       int nch, int h0 = 0)
{
	constexpr int V = BITS / 4;
#pragma unroll
	for (int h = 0; h < HN; h++) {
		const int ch = st * 16 + 4 * (h0 + h) + tig;
		const bool ok = ch < nch;
#pragma unroll
		for (int u = 0; u < V; u++) {
			r.wa[h][u] = ok ? __ldg(Wa + (size_t)ch * V + u) : make_uint4(0, 0, 0, 0);
			r.wb[h][u] = ok ? __ldg(Wb + (size_t)ch * V + u) : make_uint4(0, 0, 0, 0);
		}
	}
	/* block st of the row: 16 >> cpg_sh pairs; this lane's 4 start at
	 * 4 (tig >> cpg_sh) (padded rows: always inside the row) */
	const size_t e = (size_t)st * (16 >> cpg_sh) + ((tig >> cpg_sh) << 2);
	const uint4 *pa = (const uint4 *)SB + (ea0 + e) * S::SW / 4, *pb = (const uint4 *)SB + (eb0 + e) * S::SW / 4;
#pragma unroll
	for (int k = 0; k < S::SW; k++) {
#ifdef MQ_DIAG_NOSCALE /* timing experiment only (wrong results): no scale/bias loads */
		r.pa[k] = r.pb[k] = make_uint4(0x3c00u + st, 0x3c00u, 0x3c00u, 0x3c00u);
		(void)pa; (void)pb;
#else
		r.pa[k] = __ldg(pa + k);
		r.pb[k] = __ldg(pb + k);
#endif
	}
}

/* Word k (< 4 SW) of a lane's SW 16-byte pair loads, by selects: a run-time
 * index into the register array would put it in local memory (h0 of the
 * split kernel's h-parts). */
template <int SW>
static __device__ __forceinline__ uint32_t mq_pw(const uint4 (&p)[SW], int k)
{
	const uint4 v = SW == 1 || k < 4 ? p[0] : p[SW - 1];
	const int j = k & 3;
	return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

template <int BITS, class S, int HN = 4>
static __device__ __forceinline__ void mq_compute(const mq_regs<BITS / 4, S::SW, HN> &r, const uint32_t *xs, int st,
						  int tig, int nch, bool bact, int part, float &acc_a, float &acc_b,
						  int h0 = 0)
{
	constexpr float D = BITS == 4 ? 16.0f : 256.0f;
#pragma unroll
	for (int h = 0; h < HN; h++) {
		const int ch = st * 16 + 4 * (h0 + h) + tig;
		const uint32_t *cp = xs + min(ch, nch - 1) * MQ_CW;
		/* lanes that feed no B column read the zero words after the
		 * staged chunks (one address: a broadcast, no branch) */
		const uint32_t *bp = bact ? cp + part : xs + nch * MQ_CW;
		uint32_t bx[16];
#pragma unroll
		for (int u = 0; u < 4; u++) {
			uint4 t = *(const uint4 *)(bp + 4 * u);
			bx[4 * u] = t.x; bx[4 * u + 1] = t.y; bx[4 * u + 2] = t.z; bx[4 * u + 3] = t.w;
		}
		const uint32_t *wah = (const uint32_t *)&r.wa[h][0], *wbh = (const uint32_t *)&r.wb[h][0];
		float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#ifdef MQ_DIAG_NOMMA /* timing experiment only (wrong results): loads, no conversion or mma */
		d[0] = __uint_as_float((wah[0] ^ wah[BITS - 1] ^ bx[0]) & 0x3fffffffu);
		d[2] = __uint_as_float((wbh[0] ^ wbh[BITS - 1]) & 0x3fffffffu);
#pragma unroll
		for (int i = 0; i < 0; i++) {
#else
#pragma unroll
		for (int i = 0; i < 8; i++) {
#endif
			/* pairs 2i (k = 2tig, 2tig+1) and 2i+1 (k = 2tig+8, +9) */
			const int w4 = BITS == 4 ? i >> 1 : i, t0 = BITS == 4 ? 2 * (i & 1) : 0;
			uint32_t af[4] = {mq_a<BITS>(wah[w4], t0), mq_a<BITS>(wbh[w4], t0), mq_a<BITS>(wah[w4], t0 + 1),
					  mq_a<BITS>(wbh[w4], t0 + 1)};
			mma16816(d, af, bx[2 * i], bx[2 * i + 1]);
		}
		if (ch < nch) {
			const float xsum = __uint_as_float(cp[32]), mul = __uint_as_float(cp[33]);
			uint32_t ea[S::SW], eb[S::SW];
#pragma unroll
			for (int k = 0; k < S::SW; k++) {
				ea[k] = mq_pw<S::SW>(r.pa, (h0 + h) * S::SW + k);
				eb[k] = mq_pw<S::SW>(r.pb, (h0 + h) * S::SW + k);
			}
			acc_a = fmaf(mul, fmaf(S::ps(ea) * D, d[0] + d[1] - xsum, S::pb(ea) * xsum), acc_a);
			acc_b = fmaf(mul, fmaf(S::ps(eb) * D, d[2] + d[3] - xsum, S::pb(eb) * xsum), acc_b);
		}
	}
}

/* 8 consecutive floats from p (16-byte aligned if vec), zeros if !ok. */
static __device__ __forceinline__ void ld8(const float *p, bool ok, bool vec, float (&v)[8])
{
	if (ok && vec) {
		float4 a = __ldg((const float4 *)p), b = __ldg((const float4 *)p + 1);
		v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
		v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
	} else {
#pragma unroll
		for (int j = 0; j < 8; j++)
			v[j] = ok ? __ldg(p + j) : 0.0f;
	}
}

/* Stages all of x (nch chunks) in shared memory: 4 lanes per chunk, 8
 * consecutive values each; the loads of MQ_XU items are issued before any
 * is used (v1 waited for one round trip per item).
 * NORM (the consumer side of the residual fusion, kc_linear_multi_norm):
 * x is the residual stream and the matrix multiplies rmsnorm(x, nw) =
 * x (nw + one) / rms(x). Staged is x (nw + one); the sum of x^2 over the
 * whole row (every block stages all of x anyway) is summed on the way,
 * per thread in item order, per warp by a fixed shuffle tree, into
 * nss[warp]; the caller reads nss after its barrier (mq_inv) and scales
 * the dot products by 1/rms(x) in its epilogue. So the reduction waits
 * for nothing and nothing waits for it before the first mma, and every
 * block (same items per thread) gets the same bits on every run.
 * (Run 16 reduced x^2 in each block before staging x/rms: lost 10%.) */
#define MQ_XU 4
/* The staging's loads (mq_stage, mi_stage, k_mi_prep): items i0 + u nt +
 * tid (u < U) of 8 consecutive values of x into v, those at or past nreal
 * as zeros, all issued before any is used. NORM: v = x (nw + one), and the
 * sum of x^2 added to ss in item order. */
template <int NORM, int U = MQ_XU>
static __device__ __forceinline__ void mq_stage_items(const float *__restrict__ x, const float *__restrict__ nw,
						      float one, bool xvec, int i0, int nt, int nreal,
						      float (&v)[U][8], float &ss)
{
	const int tid = threadIdx.x;
#pragma unroll
	for (int u = 0; u < U; u++) {
		const int i = i0 + u * nt + tid;
		ld8(x + (size_t)i * 8, i < nreal, xvec, v[u]);
	}
	if (NORM) {
		float w[U][8];
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int i = i0 + u * nt + tid;
			ld8(nw + (size_t)i * 8, i < nreal, xvec, w[u]);
		}
#pragma unroll
		for (int u = 0; u < U; u++)
#pragma unroll
			for (int j = 0; j < 8; j++) {
				ss = fmaf(v[u][j], v[u][j], ss);
				v[u][j] *= w[u][j] + one;
			}
	}
}

template <int BITS, int NORM>
static __device__ __forceinline__ void mq_stage(const float *__restrict__ x, const float *__restrict__ nw, float one,
						bool xvec, int nch, uint32_t *xs, float *nss, int nt)
{
	const int tid = threadIdx.x; /* nt: the block's threads (a multiple of 32) */
	if (tid < 16)
		xs[nch * MQ_CW + tid] = 0; /* the zero B fragment (mq_compute) */
	float ss = 0.0f;
	for (int i0 = 0; i0 < nch * 4; i0 += nt * MQ_XU) {
		float v[MQ_XU][8];
		mq_stage_items<NORM>(x, nw, one, xvec, i0, nt, nch * 4, v, ss);
#pragma unroll
		for (int u = 0; u < MQ_XU; u++) {
			const int i = i0 + u * nt + tid, ch = i >> 2, q = i & 3;
			float mx = 0.0f, sum = 0.0f;
#pragma unroll
			for (int j = 0; j < 8; j++) {
				mx = fmaxf(mx, fabsf(v[u][j]));
				sum += v[u][j];
			}
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
			sum += __shfl_xor_sync(0xffffffffu, sum, 1);
			sum += __shfl_xor_sync(0xffffffffu, sum, 2);
			/* scale 2^(140 - E): max |x'| in [2^13, 2^14); clamped so that
			 * scale and 1/scale are both normal floats */
			int se = 267 - (int)((__float_as_uint(mx) >> 23) & 0xff);
			se = se < 1 ? 1 : se > 253 ? 253 : se;
			const float sc = __uint_as_float((uint32_t)se << 23);
			uint32_t hi[4], lo[4];
#pragma unroll
			for (int j = 0; j < 4; j++) {
				float p0 = v[u][mq_pair_lo<BITS>(j)] * sc, p1 = v[u][mq_pair_hi<BITS>(j)] * sc;
				__half2 h = __floats2half2_rn(p0, p1);
				float2 hf = __half22float2(h);
				hi[j] = *(uint32_t *)&h;
				lo[j] = h2_bits(p0 - hf.x, p1 - hf.y);
			}
			if (i < nch * 4) {
				uint32_t *cp = xs + ch * MQ_CW;
				*(uint4 *)(cp + 4 * q) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
				*(uint4 *)(cp + 16 + 4 * q) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
				if (q == 0) {
					cp[32] = __float_as_uint(sum * sc);
					cp[33] = (uint32_t)(254 - se) << 23; /* 1/scale */
				}
			}
		}
	}
	if (NORM) {
		ss = warp_sum(ss);
		if ((tid & 31) == 0)
			nss[tid >> 5] = ss;
	}
}

/* 1/rms(x) from mq_stage's per-warp sums (after the block's barrier), in
 * one fixed order: the same value in every thread of every block. */
static __device__ __forceinline__ float mq_inv(const float *nss, int nw, int cols, float eps)
{
	float t = nss[0];
#pragma unroll
	for (int w = 1; w < nw; w++)
		t += nss[w];
	return 1.0f / sqrtf(t / (float)cols + eps);
}

/* Row tile `tile` (MQ_ROWS rows) of the launch: matrix mi, first row r0. */
static __device__ __forceinline__ void mq_tile(const mv_args &a, int NM, int tile, int &mi, int &r0)
{
	mi = 0;
	while (NM == 1 && mi + 1 < a.count && tile >= a.start[mi + 1])
		mi++;
	r0 = (tile - a.start[mi]) * MQ_ROWS;
}

/* Warp-owned tiles, for launches with many tiles (lm_head, gate/up): warp
 * w of block b takes tiles b*MQ_WARPS + w, + gridDim.x*MQ_WARPS, ... and
 * walks every column of each, so no block barrier follows the staging:
 * the lane's items (tile, matrix m < NM, step) form one sequence, and the
 * two register sets alternate along it across tile boundaries (the next
 * tile's first loads are in flight while this tile finishes). */
struct mq_pos {
	int tile, m, st;
};

static __device__ __forceinline__ void mq_next(mq_pos &p, int NM, int nsteps, int stride)
{
	if (++p.st == nsteps) {
		p.st = 0;
		if (++p.m == NM) {
			p.m = 0;
			p.tile += stride;
		}
	}
}

template <int BITS, class S>
static __device__ __forceinline__ void mq_load_at(mq_regs<BITS / 4, S::SW> &r, const mv_args &a, int NM,
						  const mq_pos &p, int g, int tig, int nch, int ngp, int cpg_sh,
						  size_t row_words)
{
	int mi, r0;
	mq_tile(a, NM, p.tile, mi, r0);
	const int mm = mi + p.m, ra = min(r0 + g, a.rows[mi] - 1), rb = min(r0 + g + 8, a.rows[mi] - 1);
	mq_load<BITS, S>(r, (const uint4 *)(a.w[mm] + (size_t)ra * row_words),
			 (const uint4 *)(a.w[mm] + (size_t)rb * row_words), a.s[mm], (size_t)ra * ngp,
			 (size_t)rb * ngp, cpg_sh, p.st, tig, nch);
}

template <int BITS, class S, int NM, int NORM>
__global__ void __launch_bounds__(32 * MQ_WARPS, MQ_MINB) k_matvec_wt(mv_args a, const float *__restrict__ x)
{
	pdl_trigger();
	extern __shared__ uint32_t xs[]; /* [nch][MQ_CW] + zeros */
	__shared__ float nss[MQ_WARPS];
	constexpr int V = BITS / 4;
	const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
	const int g = lane >> 2, tig = lane & 3;
	const int cols = a.cols, nch = cols >> 5, ngp = sb_ngp(cols, a.group), cpg_sh = __ffs(a.group >> 5) - 1;
	const int nsteps = (nch + 15) >> 4;
	const size_t row_words = (size_t)cols * BITS / 32;
	const bool bact = (g >> 1) == tig;
	const int part = (g & 1) * 16;
	const int stride = gridDim.x * MQ_WARPS, tile0 = blockIdx.x * MQ_WARPS + wid;
	const int ntw = tile0 < a.tiles ? (a.tiles - tile0 + stride - 1) / stride : 0;
	const int items = ntw * NM * nsteps;
	mq_regs<V, S::SW> r0, r1;
	mq_pos lp = {tile0, 0, 0}, cp = {tile0, 0, 0}; /* next to load, next to compute */
	if (items > 0) {
		mq_load_at<BITS, S>(r0, a, NM, lp, g, tig, nch, ngp, cpg_sh, row_words);
		mq_next(lp, NM, nsteps, stride);
	}
	pdl_wait(); /* x is the predecessor's output */
	mq_stage<BITS, NORM>(x, a.nw, a.one, a.vec & 2, nch, xs, nss, 32 * MQ_WARPS);
	__syncthreads();
	const float inv = NORM ? mq_inv(nss, MQ_WARPS, cols, a.eps) : 1.0f;
	float acc_a = 0.0f, acc_b = 0.0f, gate_a = 0.0f, gate_b = 0.0f;
	for (int k = 0; k < items; k++) {
		const bool odd = k & 1;
		if (k + 1 < items) { /* the other register set */
			if (odd)
				mq_load_at<BITS, S>(r0, a, NM, lp, g, tig, nch, ngp, cpg_sh, row_words);
			else
				mq_load_at<BITS, S>(r1, a, NM, lp, g, tig, nch, ngp, cpg_sh, row_words);
			mq_next(lp, NM, nsteps, stride);
		}
		if (odd)
			mq_compute<BITS, S>(r1, xs, cp.st, tig, nch, bact, part, acc_a, acc_b);
		else
			mq_compute<BITS, S>(r0, xs, cp.st, tig, nch, bact, part, acc_a, acc_b);
		if (cp.st == nsteps - 1) { /* this (tile, m) is done */
			acc_a += __shfl_xor_sync(0xffffffffu, acc_a, 1);
			acc_a += __shfl_xor_sync(0xffffffffu, acc_a, 2);
			acc_b += __shfl_xor_sync(0xffffffffu, acc_b, 1);
			acc_b += __shfl_xor_sync(0xffffffffu, acc_b, 2);
			int mi, rr;
			mq_tile(a, NM, cp.tile, mi, rr);
			if (NM == 2 && cp.m == 0) {
				gate_a = acc_a;
				gate_b = acc_b;
			} else if (tig == 0) {
				const int R = a.rows[mi];
#pragma unroll
				for (int e = 0; e < 2; e++) {
					const int row = rr + g + 8 * e;
					if (row >= R)
						continue;
					float v = e ? acc_b : acc_a;
					if (NORM)
						v *= inv;
					v += a.bias[mi + NM - 1] ? a.bias[mi + NM - 1][row] : 0.0f;
					if (NM == 1) {
						a.y[mi][row] = a.add ? a.y[mi][row] + v : v;
					} else {
						float gv = (e ? gate_b : gate_a) * inv + (a.bias[0] ? a.bias[0][row] : 0.0f);
						a.y[0][row] = glu_act(gv, a.act) * v;
					}
				}
			}
			acc_a = acc_b = 0.0f;
		}
		mq_next(cp, NM, nsteps, stride);
	}
}

/* ---- decode, 4 bits: the matvec on the int8 tensor cores (k_matvec_i8, run 29) ----
 * Why: k_matvec_mma and k_matvec_cp are issue-bound, not memory-bound
 * (ncu, run 29: gate/up+GLU 3.7 lane-instructions per weight, the SM's
 * whole issue budget at the bandwidth bound; DRAM 39-46%). Per 256
 * weights they spend 8 ALU ops building f16 A registers from the codes
 * and one m16n8k16. Here the codes go into mma.m16n8k32 as unsigned bytes
 * (0..15, exact): per 512 weights 6 ALU ops (a code word w of 8 columns is
 * w & 0x0f0f0f0f, columns 0,2,4,6, and (w >> 4) & 0x0f0f0f0f, columns
 * 1,3,5,7) and one mma.
 * Exactness: x is not rounded to 8 bits. As the CPU's VNNI matvec
 * (kernels/cpu/matvec_vnni.c), each quantization group of x is three int8
 * terms, x ~= D (q1 + q2/254 + q3/254^2), D = max|x_group| / 127, q1 =
 * round(x/D), q2, q3 the rounded residuals (each in [-127, 127]):
 * representation error <= max|x_group| * 6.1e-8, about an f32 rounding of
 * the group's largest value; the integer dot products are exact (a group
 * of 128: |sum| <= 15 * 127 * 128 < 2^18). The epilogue, once per group
 * and row: s D (c1 + c2/254 + c3/254^2) + b sum(x_group) (sum exact f32).
 * Layout: the same loads as k_matvec_mma (mq_load: lane tig holds chunk
 * 4h + tig of each unit h of 128 columns, rows g and g + 8, and that
 * chunk's (scale, bias) pair). mma j (j = 0..3) of a unit takes word j of
 * every lane's chunk: A = (lo, hi) of rows g, g + 8. B's 8 columns: half
 * gi (columns 4gi..4gi+3) holds terms 0..2 of one group of the unit (and
 * a zero column), zero at the k of lanes outside that group:
 *   group 128: half 0 = the unit's group, half 1 zero;
 *   group 64:  half gi = the group of lanes 2gi, 2gi+1;
 *   group 32:  two mmas per j (p = 0, 1), half gi = the chunk of lane
 *              2p + gi (12 columns would not fit in one).
 * C lane tig then holds columns 2tig, 2tig+1: terms (0, 1) (tig even) or
 * (2, zero) (tig odd) of half tig >> 1; its epilogue factor is D/254
 * (c = 254 c1 + c2) or D/254^3 (c = 254 c3), one IMAD + one I2F each, and
 * the lanes' sums add up in the shuffle over tig as before.
 * x is staged once per block (mi_stage) as records of 128 bytes, one per
 * (unit, word j): 8 bytes (the term at the 4 "lo" columns then the 4 "hi"
 * columns) per (chunk, term), 12 used, then zeros (the lanes of zero B
 * columns read those): each B lane reads b0, b1 with one LDS.64, the 12
 * addresses of a warp distinct and in one 128-byte line. After the
 * records, each chunk's epilogue factors: per C lane (slot tig) {F,
 * sum(x_group) or 0} for the chunk's group. */
#define MI_REC 128 /* bytes of one (unit, word) record of staged x */
#define MI_META 32 /* bytes of one chunk's epilogue factors: 4 lanes x {F, sum} */
#define MI_STEP (16 * MI_REC + 16 * MI_META) /* staged bytes per 512 columns */

static __host__ __device__ __forceinline__ size_t mi_smem_bytes(int cols)
{
	return (size_t)((cols / 32 + 15) / 16) * MI_STEP;
}

static __device__ __forceinline__ void mma_i8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
					      uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		     "{%0,%1,%2,%3};\n"
		     : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
		     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Bytes 0 of a, b, c, d (in that order) in one word. */
static __device__ __forceinline__ uint32_t mi_pack(uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
	return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

/* One item of x for k_matvec_i8 (mi_stage, k_mi_prep): v, 8 consecutive
 * values (one code word's columns, item i of nit; those past the row
 * zero), to its int8 terms in the record of (unit i >> 4, word i & 3) and,
 * from the group's first item, the chunk's epilogue factors in meta. D and
 * sum(x) per group by a shuffle over the group's 1 << (CPG + 2) items
 * (consecutive lanes, all of the warp calling). */
template <int CPG>
static __device__ __forceinline__ void mi_item(const float (&v)[8], int i, int nit, uint8_t *xs, uint8_t *meta)
{
	float mx = 0.0f, sum = 0.0f;
#pragma unroll
	for (int j = 0; j < 8; j++) {
		mx = fmaxf(mx, fabsf(v[j]));
		sum += v[j];
	}
#pragma unroll
	for (int o = 1; o < (4 << CPG); o <<= 1) {
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
		sum += __shfl_xor_sync(0xffffffffu, sum, o);
	}
	/* a zero group (or one of NaNs, which fmaxf drops): all terms 0 */
	const float d = mx / 127.0f, inv = mx > 0.0f ? 127.0f / mx : 0.0f;
	const float d2 = d / 254.0f, inv2 = inv * 254.0f, inv3 = inv * 64516.0f;
	/* y + 1.5 * 2^23 (|y| < 2^22) rounds y to an integer in one
	 * FFMA and holds it in the low mantissa bits, so byte 0 of
	 * its bits is the int8 term (|term| <= 127: each residual is
	 * at most half a step, so |y| <= 127 + a rounding) */
	const float M = 12582912.0f;
	uint32_t b[3][8];
#pragma unroll
	for (int e = 0; e < 8; e++) {
		const float t1 = fmaf(v[e], inv, M);
		float r = fmaf(-(t1 - M), d, v[e]); /* |r| <= d/2 */
		const float t2 = fmaf(r, inv2, M);
		r = fmaf(-(t2 - M), d2, r); /* |r| <= d/508 */
		b[0][e] = __float_as_uint(t1);
		b[1][e] = __float_as_uint(t2);
		b[2][e] = __float_as_uint(fmaf(r, inv3, M));
	}
	uint32_t t[3][2];
#pragma unroll
	for (int k = 0; k < 3; k++) {
		t[k][0] = mi_pack(b[k][0], b[k][2], b[k][4], b[k][6]);
		t[k][1] = mi_pack(b[k][1], b[k][3], b[k][5], b[k][7]);
	}
	if (i < nit) {
		const int c = i >> 2, j = i & 3, cq = c & 3;
		uint8_t *rec = xs + ((size_t)(c >> 2) * 4 + j) * MI_REC;
#pragma unroll
		for (int k = 0; k < 3; k++)
			*(uint2 *)(rec + (cq * 3 + k) * 8) = make_uint2(t[k][0], t[k][1]);
		if (cq == 0) {
			*(uint4 *)(rec + 96) = make_uint4(0, 0, 0, 0);
			*(uint4 *)(rec + 112) = make_uint4(0, 0, 0, 0);
		}
		if (j == 0) { /* slots: lanes tig even {D/254, sum}, odd {D/254^3, 0} */
			float4 *mp = (float4 *)(meta + (size_t)c * MI_META);
			const float4 f = make_float4(d2, sum, d / 16387064.0f, 0.0f);
			mp[0] = f;
			mp[1] = CPG == 2 ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : f; /* 128: lanes 2, 3 idle */
		}
	}
}

/* Stages x for k_matvec_i8 in the block (impls 6, 7): all nsteps * 64
 * items (those past the row are zero, so the last step reads zeros: no
 * bounds checks in the loop), MQ_XU per thread per round. NORM: as
 * mq_stage (x (nw + one) staged, the sum of x^2 per thread in item order,
 * then per warp into nss: the same bits on every run). */
template <int CPG, int NORM>
static __device__ __forceinline__ void mi_stage(const float *__restrict__ x, const float *__restrict__ nw, float one,
						bool xvec, int nch, int nsteps, uint8_t *xs, float *nss, int nt)
{
	const int tid = threadIdx.x, nit = nsteps * 64, nreal = nch * 4;
	uint8_t *meta = xs + (size_t)nsteps * 16 * MI_REC;
	float ss = 0.0f;
	for (int i0 = 0; i0 < nit; i0 += nt * MQ_XU) {
		float v[MQ_XU][8];
		mq_stage_items<NORM>(x, nw, one, xvec, i0, nt, nreal, v, ss);
#pragma unroll
		for (int u = 0; u < MQ_XU; u++)
			mi_item<CPG>(v[u], i0 + u * nt + tid, nit, xs, meta);
	}
	if (NORM) {
		ss = warp_sum(ss);
		if ((tid & 31) == 0)
			nss[tid >> 5] = ss;
	}
}

/* x staged once per launch (impls 8, 9, 10; run 30): k_mi_prep, a grid
 * of nb = nsteps * 64 / MI_PB one-warp blocks, one item per thread, writes
 * the image mi_stage would build (records, factors) to the scratch buffer
 * g_mi_x, and for NORM after it (at nsteps * MI_STEP) one sum of x^2 per
 * block (per thread in value order, then warp_sum: the same bits on every
 * run). Every block of k_matvec_i8 then copies the image into its shared
 * memory with 16-byte cp.async (mi_copy) instead of staging x itself:
 * mi_stage costs ~3x mq_stage's instructions per value (four IEEE
 * divisions per item, 3 shuffle levels, 8-way bank-conflicted stores),
 * which one-tile-per-block launches (down 4096 x 14336: 256 blocks, each
 * staging all 14336 columns) paid per block (run 29: down 18.7 us on
 * k_matvec_mma, 25.4 on k_matvec_i8; run 30, unnormed: 17.3). The terms
 * are mi_item's: the same bits as mi_stage's; only 1/rms(x) (NORM) sums
 * in another order.
 * No shared memory here, on purpose. Run 30 measured the prep with 128-
 * and 32-thread blocks that summed their warps through 16 bytes of static
 * shared memory when normed: the normed launches then ran as if they had
 * no PDL (qkv 10.5 us against 6.3 unnormed, GLU 28.6 against 21.7; ncu
 * of the kernels alone: qkv 11.0, o 7.0, what the table shows for them
 * only where PDL is off, the adding launches), the unnormed prep (no
 * shared memory) overlapped fine. Suspected, not shown: a kernel that
 * needs shared memory cannot share an SM whose shared-memory carveout was
 * set for k_matvec_i8 until it drains, so the early launch gains
 * nothing. One warp needs no block reduction. Measured after run 30
 * (NOTES, "runs 30-32 merged"): this version does not change that, the
 * models under impl 8 ran 8B @16 417 tok/s against the default's 438, so
 * shared memory was not the cause. */
#define MI_PB 32    /* k_mi_prep: threads (items) per block, one warp */
#define MI_PART 640 /* bytes after the image: k_mi_prep's per-block sums (nsteps <= 79: <= 158) */

template <int CPG, int NORM>
__global__ void __launch_bounds__(MI_PB) k_mi_prep(const float *__restrict__ x, const float *__restrict__ nw,
						   float one, int xvec, int nch, int nsteps, uint8_t *out)
{
	pdl_trigger();
	const int i0 = blockIdx.x * MI_PB;
	float v[1][8], ss = 0.0f;
	pdl_wait(); /* x is the predecessor's output; the previous k_matvec_i8 has read out */
	mq_stage_items<NORM, 1>(x, nw, one, xvec, i0, MI_PB, nch * 4, v, ss);
	mi_item<CPG>(v[0], i0 + threadIdx.x, nsteps * 64, out, out + (size_t)nsteps * 16 * MI_REC);
	if (NORM) {
		ss = warp_sum(ss);
		if (threadIdx.x == 0)
			((float *)(out + (size_t)nsteps * MI_STEP))[blockIdx.x] = ss;
	}
}

/* k_matvec_i8's staging under impls 8, 9: k_mi_prep's image (and, NORM,
 * its nb per-block sums) from global memory into xs, 16 bytes per
 * cp.async (L2 only: every block reads the same bytes once); issued and
 * committed, the caller waits (cp.async.wait_group 0). */
template <int NORM>
static __device__ __forceinline__ void mi_copy(const void *src, uint8_t *xs, int nsteps, int nb, int nt)
{
	const int n16 = (nsteps * MI_STEP + (NORM ? 16 * ((nb + 3) >> 2) : 0)) / 16;
	const uint32_t dst = (uint32_t)__cvta_generic_to_shared(xs);
	for (int k = threadIdx.x; k < n16; k += nt)
		asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst + 16 * k),
			     "l"((const uint4 *)src + k)
			     : "memory");
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* 1/rms(x) from k_matvec_i8's copy of k_mi_prep's per-block sums (after
 * the block's barrier), in one fixed order. */
static __device__ __forceinline__ float mi_inv(const uint8_t *xs, int nsteps, int nb, int cols, float eps)
{
	const float *p = (const float *)(xs + (size_t)nsteps * MI_STEP);
	float t = p[0];
	for (int b = 1; b < nb; b++)
		t += p[b];
	return 1.0f / sqrtf(t / (float)cols + eps);
}

/* Per lane, fixed for the launch: where its B words sit in a record
 * (boff), where its epilogue factors sit in a unit's meta (moff), and
 * (group 32) which lane of its quad holds that chunk's (scale, bias). */
template <int CPG>
struct mi_lane {
	static constexpr int NP = CPG == 0 ? 2 : 1;
	int boff[NP], moff[NP], src[NP];
	__device__ __forceinline__ mi_lane(int lane)
	{
		const int g = lane >> 2, tig = lane & 3, t = g & 3, gi = g >> 2;
#pragma unroll
		for (int p = 0; p < NP; p++) {
			const bool act = t < 3 && (CPG == 2 ? gi == 0 : CPG == 1 ? (tig >> 1) == gi : tig == 2 * p + gi);
			boff[p] = act ? (tig * 3 + t) * 8 : 96;
			const int cq = CPG == 2 ? 0 : CPG == 1 ? 2 * (tig >> 1) : 2 * p + (tig >> 1);
			moff[p] = cq * MI_META + tig * 8;
			src[p] = (lane & ~3) | cq;
		}
	}
};

template <class S, int CPG>
static __device__ __forceinline__ void mi_compute(const mq_regs<1, S::SW> &r, const uint8_t *xs, const uint8_t *meta,
						  int st, const mi_lane<CPG> &L, float &acc_a, float &acc_b)
{
	constexpr int NP = mi_lane<CPG>::NP;
	constexpr uint32_t M = 0x0f0f0f0fu;
#pragma unroll
	for (int h = 0; h < 4; h++) {
		const uint8_t *rec = xs + (size_t)(st * 4 + h) * 4 * MI_REC;
		const uint32_t *wa = (const uint32_t *)&r.wa[h][0], *wb = (const uint32_t *)&r.wb[h][0];
		int c[NP][4];
#pragma unroll
		for (int p = 0; p < NP; p++)
			c[p][0] = c[p][1] = c[p][2] = c[p][3] = 0;
#pragma unroll
		for (int j = 0; j < 4; j++) {
			const uint32_t a0 = wa[j] & M, a2 = (wa[j] >> 4) & M, a1 = wb[j] & M, a3 = (wb[j] >> 4) & M;
#pragma unroll
			for (int p = 0; p < NP; p++) {
				const uint2 b = *(const uint2 *)(rec + j * MI_REC + L.boff[p]);
				mma_i8(c[p], a0, a1, a2, a3, b.x, b.y);
			}
		}
		const uint8_t *mu = meta + (size_t)(st * 16 + 4 * h) * MI_META;
#pragma unroll
		for (int p = 0; p < NP; p++) {
			const float2 f = *(const float2 *)(mu + L.moff[p]);
			uint32_t ea[S::SW], eb[S::SW];
#pragma unroll
			for (int k = 0; k < S::SW; k++) {
				ea[k] = ((const uint32_t *)r.pa)[h * S::SW + k];
				eb[k] = ((const uint32_t *)r.pb)[h * S::SW + k];
				if (CPG == 0) { /* the chunk of lane 2p + (tig >> 1) */
					ea[k] = __shfl_sync(0xffffffffu, ea[k], L.src[p]);
					eb[k] = __shfl_sync(0xffffffffu, eb[k], L.src[p]);
				}
			}
			const int ta = c[p][0] * 254 + c[p][1], tb = c[p][2] * 254 + c[p][3];
			acc_a = fmaf(S::ps(ea), (float)ta * f.x, fmaf(S::pb(ea), f.y, acc_a));
			acc_b = fmaf(S::ps(eb), (float)tb * f.x, fmaf(S::pb(eb), f.y, acc_b));
		}
	}
}

/* A row tile's epilogue (the split kernel, the streaming one): thread tid <
 * MQ_ROWS sums its row's partial sums from the W warps (red[m][w][row]),
 * scales by inv (NORM), adds the bias and writes y: += for the residual
 * add, the GLU of the two sums for NM == 2. WC: W at compile time (the
 * split kernel: the loop unrolled), 0 when W is known at run time only. */
template <int NM, int NORM, int WC>
static __device__ __forceinline__ void mq_tile_out(const mv_args &a, const float *red, int W, int mi, int r0, int tid,
						   float inv)
{
	if (tid < MQ_ROWS && r0 + tid < a.rows[mi]) {
		float v[NM];
#pragma unroll
		for (int m = 0; m < NM; m++) {
			v[m] = 0.0f;
			if constexpr (WC > 0) {
#pragma unroll
				for (int w = 0; w < WC; w++)
					v[m] += red[(m * WC + w) * MQ_ROWS + tid];
			} else {
				for (int w = 0; w < W; w++)
					v[m] += red[(m * W + w) * MQ_ROWS + tid];
			}
			if (NORM)
				v[m] *= inv;
			v[m] += a.bias[mi + m] ? a.bias[mi + m][r0 + tid] : 0.0f;
		}
		if (NM == 1)
			a.y[mi][r0 + tid] = a.add ? a.y[mi][r0 + tid] + v[0] : v[0];
		else
			a.y[0][r0 + tid] = glu_act(v[0], a.act) * v[NM - 1];
	}
}

/* The split kernel (k_matvec_mma; k_matvec_i8 with the int8 inner loop):
 * MQ_WARPS warps on one row tile at a time, splitting its columns (step
 * st = wid, wid + 4, ...); x staged once, then tiles blockIdx.x,
 * blockIdx.x + gridDim.x, ... (the grid is smaller than the tile count
 * only for large matrices: lm_head). Each lane double-buffers its steps
 * (4 bits): the next step's loads are in flight while this one computes.
 * The first step's loads are issued before x is staged.
 * CPG < 0: the f16 inner loop (mq_stage, mq_compute; 4 or 8 bits, any
 * group); CPG >= 0: the int8 one (mi_stage, mi_compute; 4 bits, group
 * 32 << CPG). xs: the dynamic shared memory of the kernel. */
template <int BITS, class S, int CPG, int HN>
static __device__ __forceinline__ void mq_step(const mq_regs<BITS / 4, S::SW, HN> &r, const uint32_t *xs,
					       const uint8_t *meta, int st, int h0, int tig, int nch, bool bact,
					       int part, const mi_lane<(CPG >= 0 ? CPG : 0)> &L, float &acc_a,
					       float &acc_b)
{
	if constexpr (CPG >= 0)
		mi_compute<S, CPG>(r, (const uint8_t *)xs, meta, st, L, acc_a, acc_b);
	else
		mq_compute<BITS, S, HN>(r, xs, st, tig, nch, bact, part, acc_a, acc_b, h0);
}

/* W warps per block (MQ_WARPS, or 8: mq_launch_w, mq_launch_glu_w);
 * HN < 4 (the f16 loop only): a warp's unit is HN of a step's 4 h (its
 * chunks 4 h + tig),
 * so that W warps find work where a tile has fewer than W steps. Units
 * u = wid, wid + W, ...: step u / (4 / HN), h0 = (u % (4 / HN)) HN. */
template <int BITS, class S, int NM, int NORM, int CPG, int W = MQ_WARPS, int HN = 4>
static __device__ __forceinline__ void mq_split(const mv_args &a, const float *__restrict__ x, uint32_t *xs)
{
	pdl_trigger();
	constexpr bool I8 = CPG >= 0;
	static_assert(CPG < 0 || HN == 4, "h-parts: the f16 loop only");
	constexpr int HS = 4 / HN; /* units per step */
	__shared__ float red[2][NM][W][MQ_ROWS];
	__shared__ float nss[W];
	constexpr int V = BITS / 4;
	const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
	const int g = lane >> 2, tig = lane & 3;
	const int cols = a.cols, nch = cols >> 5, ngp = sb_ngp(cols, a.group);
	const int cpg_sh = I8 ? CPG : __ffs(a.group >> 5) - 1;
	const int nsteps = (nch + 15) >> 4, nunits = nsteps * HS;
	const size_t row_words = I8 ? (size_t)cols / 8 : (size_t)cols * BITS / 32;
	const bool bact = (g >> 1) == tig; /* this lane feeds B: chunk tig, part g & 1 */
	const int part = (g & 1) * 16;
	const uint8_t *meta = (const uint8_t *)xs + (size_t)nsteps * 16 * MI_REC; /* int8: after the records */
	const mi_lane<I8 ? CPG : 0> L(lane);
	mq_regs<V, S::SW, HN> cur, nxt;
	int mi, r0, ra, rb;
	mq_tile(a, NM, blockIdx.x, mi, r0);
	ra = min(r0 + g, a.rows[mi] - 1);
	rb = min(r0 + g + 8, a.rows[mi] - 1);
	if (wid < nunits)
		mq_load<BITS, S, HN>(cur, (const uint4 *)(a.w[mi] + (size_t)ra * row_words),
				     (const uint4 *)(a.w[mi] + (size_t)rb * row_words), a.s[mi], (size_t)ra * ngp,
				     (size_t)rb * ngp, cpg_sh, wid / HS, tig, nch, wid % HS * HN);
	pdl_wait(); /* x is the predecessor's output */
	if constexpr (I8) {
		if (a.pre) { /* x is k_mi_prep's image */
			mi_copy<NORM>(x, (uint8_t *)xs, nsteps, a.pre, 32 * W);
			asm volatile("cp.async.wait_group 0;\n" ::: "memory");
		} else {
			mi_stage<CPG, NORM>(x, a.nw, a.one, a.vec & 2, nch, nsteps, (uint8_t *)xs, nss, 32 * W);
		}
	} else {
		mq_stage<BITS, NORM>(x, a.nw, a.one, a.vec & 2, nch, xs, nss, 32 * W);
	}
	__syncthreads();
	const float inv = !NORM ? 1.0f
			  : I8 && a.pre ? mi_inv((const uint8_t *)xs, nsteps, a.pre, cols, a.eps)
					: mq_inv(nss, W, cols, a.eps);
	int it = 0;
	for (int tile = blockIdx.x; tile < a.tiles; tile += gridDim.x, it ^= 1) {
		if (tile != (int)blockIdx.x) {
			mq_tile(a, NM, tile, mi, r0);
			ra = min(r0 + g, a.rows[mi] - 1);
			rb = min(r0 + g + 8, a.rows[mi] - 1);
		}
#pragma unroll
		for (int m = 0; m < NM; m++) {
			const int mm = mi + m;
			const uint4 *Wa = (const uint4 *)(a.w[mm] + (size_t)ra * row_words);
			const uint4 *Wb = (const uint4 *)(a.w[mm] + (size_t)rb * row_words);
			const void *SB = a.s[mm];
			const size_t ea0 = (size_t)ra * ngp, eb0 = (size_t)rb * ngp;
			float acc_a = 0.0f, acc_b = 0.0f;
			if ((tile != (int)blockIdx.x || m) && wid < nunits)
				mq_load<BITS, S, HN>(cur, Wa, Wb, SB, ea0, eb0, cpg_sh, wid / HS, tig, nch, wid % HS * HN);
			if (V == 1) { /* two register sets in turn: no copies */
				for (int u = wid; u < nunits; u += 2 * W) {
					const int u1 = u + W, u2 = u + 2 * W;
					if (u1 < nunits)
						mq_load<BITS, S, HN>(nxt, Wa, Wb, SB, ea0, eb0, cpg_sh, u1 / HS, tig, nch,
								     u1 % HS * HN);
					mq_step<BITS, S, CPG, HN>(cur, xs, meta, u / HS, u % HS * HN, tig, nch, bact, part, L,
								  acc_a, acc_b);
					if (u1 >= nunits)
						break;
					if (u2 < nunits)
						mq_load<BITS, S, HN>(cur, Wa, Wb, SB, ea0, eb0, cpg_sh, u2 / HS, tig, nch,
								     u2 % HS * HN);
					mq_step<BITS, S, CPG, HN>(nxt, xs, meta, u1 / HS, u1 % HS * HN, tig, nch, bact, part,
								  L, acc_a, acc_b);
				}
			} else {
				for (int u = wid; u < nunits; u += W) {
					if (u != wid)
						mq_load<BITS, S, HN>(cur, Wa, Wb, SB, ea0, eb0, cpg_sh, u / HS, tig, nch,
								     u % HS * HN);
					mq_step<BITS, S, CPG, HN>(cur, xs, meta, u / HS, u % HS * HN, tig, nch, bact, part, L,
								  acc_a, acc_b);
				}
			}
			acc_a += __shfl_xor_sync(0xffffffffu, acc_a, 1);
			acc_a += __shfl_xor_sync(0xffffffffu, acc_a, 2);
			acc_b += __shfl_xor_sync(0xffffffffu, acc_b, 1);
			acc_b += __shfl_xor_sync(0xffffffffu, acc_b, 2);
			if (tig == 0) {
				red[it][m][wid][g] = acc_a;
				red[it][m][wid][g + 8] = acc_b;
			}
		}
		/* red[it] is written before this barrier and read after it; the
		 * next tile writes red[it ^ 1], and the one after that waits
		 * for this barrier's successor, so one barrier per tile suffices */
		__syncthreads();
		mq_tile_out<NM, NORM, W>(a, &red[it][0][0][0], W, mi, r0, tid, inv);
	}
}

template <int BITS, class S, int NM, int NORM, int W = MQ_WARPS, int HN = 4>
__global__ void __launch_bounds__(32 * W, W == MQ_WARPS ? MQ_MINB : 1) k_matvec_mma(mv_args a, const float *__restrict__ x)
{
	extern __shared__ uint32_t xs[]; /* [nch][MQ_CW] */
	mq_split<BITS, S, NM, NORM, -1, W, HN>(a, x, xs);
}

/* 4 bits, CPG = log2(group / 32) */
template <class S, int CPG, int NM, int NORM>
__global__ void __launch_bounds__(32 * MQ_WARPS, MQ_MINB) k_matvec_i8(mv_args a, const float *__restrict__ x)
{
	extern __shared__ __align__(16) uint8_t mi_xs[]; /* mi_smem_bytes(cols) */
	mq_split<4, S, NM, NORM, CPG>(a, x, (uint32_t *)mi_xs);
}

/* ---- decode, 4 and 8 bits: the streaming matvec (k_matvec_cp, run 27) ----
 * Why: the kernels above keep a step's weights in registers (two sets of
 * ~8 KB per warp, 168 registers, 3 blocks of 4 warps per SM) and launch
 * one block per row tile: gate/up reached 54-55% of the read bandwidth
 * even with no arithmetic at all (NOTES.md, runs 4-9 and 14-21). At
 * ~4.5 TB/s and ~1-2 us of DRAM latency under load an SM needs 35-70 KB
 * in flight (Little's law); registers cannot hold that.
 * Here the grid is resident (occupancy x SMs, at most one block per
 * tile), every block stages x once (mq_stage, NORM sums included) and
 * walks the tiles blockIdx.x, + gridDim.x, ...; its W warps split each
 * tile's steps as k_matvec_mma does (partial sums reduced through red[],
 * one barrier per tile). A step's weights (an "item": 16 rows x 512
 * columns of codes, 4 KB at 4 bits, and the rows' (scale, bias) pairs of
 * those columns) reach shared memory by 16-byte cp.async.cg into a ring
 * of NS stages per warp; the copies of item k + NS - 1 are issued before
 * item k is computed, continuing across (tile, matrix) boundaries, so
 * (NS - 1) items per warp are in flight without holding a register.
 * Then each lane reads its fragments (the same mq_regs as mq_load fills)
 * from the stage and mq_compute does the same arithmetic as above.
 * Steps are dealt round-robin over the block's warps along the block's
 * whole (tile, matrix, step) sequence, so the warps stay balanced when W
 * does not divide the steps per tile (14336 columns: 28 steps); when it
 * does (every W = 4 launch of the models) warp w takes steps w, w + W, ...
 * of every tile, as k_matvec_mma, and the results are the same bits (by
 * construction: the same sums in the same order).
 * Stage layout: codes [16 rows][16 V units of 16 B], unit q of row r at
 * q ^ mq_swz(r) (the A reads, lanes (g, tig) on rows g and g + 8 and
 * chunk 4h + tig, hit 8 distinct 16-byte bank groups per quarter warp:
 * conflict-free, no padding), then pairs [16 rows][1 << pu_sh units].
 * PDL: the trigger is the first thing, as in the kernels above; the
 * dependent grid is launched only once every block of this one has
 * triggered, i.e. when the whole resident grid runs, so the dependent's
 * early (waiting) blocks take only what this grid left free of an SM and
 * never delay a block of it. */
#define MQ_CP_MAXW 8  /* warps per block (blockDim.x / 32), 4 or 8 */
#define MQ_CP_MAXNS 8 /* ring stages per warp */
/* tiles x matrices from which the default (kc_matvec_impl(0)) takes
 * k_matvec_cp, up to MQ_CP_MAX: gate/up + GLU (8B: 896 x 2, 1B: 512 x 2).
 * Run 27 (NOTES.md), the shapes as the decode step launches them (fused):
 * gate/up+GLU 28.5 us against 29.9 on k_matvec_mma; every other one
 * slower on it (qkv 9.8 / 7.7, o 7.7 / 7.4, down 18.3 / 16.7, lm_head
 * 102.8 / 95.1). Models: 8B 427.8 against 422.7 tok/s, 1B 1558 / 1502;
 * k_matvec_cp for every launch (impl 4): 406.6 / 1535. */
#define MQ_CP_MIN 1024
#define MQ_CP_MAX 4096

template <int V>
static __device__ __forceinline__ int mq_swz(int r)
{
	return (r & 1) * (V == 1 ? 4 : 1);
}

/* log2 of a stage's 16-byte units of pairs per row: (16 >> cpg_sh) pairs
 * of 4 SW bytes */
static __host__ __device__ __forceinline__ int mq_pu_sh(int cpg_sh, int sw)
{
	return 2 - cpg_sh + (sw == 2 ? 1 : 0);
}

static __host__ __device__ __forceinline__ int mq_stage_bytes(int bits, int cpg_sh, int sw)
{
	return 16 * 256 * (bits / 4) + (256 << mq_pu_sh(cpg_sh, sw));
}

static __device__ __forceinline__ uint32_t mq_saddr(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void mq_cp16(uint32_t dst, const void *src)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

static __device__ __forceinline__ void mq_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Waits until at most NS - 2 of this thread's groups are pending: with
 * one group committed per item, item k has landed (NS uniform). */
static __device__ __forceinline__ void mq_wait_ring(int ns)
{
	if (ns == 2) { /* the default's ring: no jump table per item */
		asm volatile("cp.async.wait_group 0;\n" ::: "memory");
		return;
	}
	switch (ns) {
	case 3: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
	case 4: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
	case 5: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
	case 6: asm volatile("cp.async.wait_group 4;\n" ::: "memory"); break;
	case 7: asm volatile("cp.async.wait_group 5;\n" ::: "memory"); break;
	default: asm volatile("cp.async.wait_group 6;\n" ::: "memory"); break;
	}
}

/* A warp's place in its block's item sequence: pair pi = tl * NM + m
 * (tl: the block's tl-th tile, i.e. tile = blockIdx.x + tl * gridDim.x),
 * step st. Warp w takes the items whose index pi * nsteps + st is w
 * modulo W (W a power of two). */
struct mq_cur {
	int tile, pi, m, st;
};

static __device__ __forceinline__ int mq_first(int w, int pi, int nsteps, int W)
{
	return (w - (int)(((unsigned)pi * (unsigned)nsteps) & (unsigned)(W - 1))) & (W - 1);
}

/* To the warp's next item (or tile >= tiles: none left), from st + W. */
static __device__ __forceinline__ void mq_cur_next(mq_cur &c, int NM, int nsteps, int W, int w, int tiles)
{
	c.st += W;
	while (c.st >= nsteps && c.tile < tiles) {
		if (++c.m == NM) {
			c.m = 0;
			c.tile += gridDim.x;
		}
		c.st = mq_first(w, ++c.pi, nsteps, W);
	}
}

/* Where a lane's copies of one item come from, for the issue cursor's
 * (tile, matrix), at step 0 (mq_src_set, once per tile and matrix; an
 * item adds its step's offset). Lane L copies code rows ra + 4k (ra =
 * L >> 3, k < 4), of each the 16-byte units (L & 7) + 8j (j < 2V): every
 * copy of an item is an immediate offset from one of 4 row pointers, and
 * of its pair units (u = 32j + L) from one of up to 4 pointers. Run 37:
 * the first layout (unit i*32 + L: 8 rows per lane) recomputed a clamped
 * 64-bit row address per copy, ~100 of the ~875 instructions of an item.
 * Rows past the matrix (the last tile of a matrix whose rows are not a
 * multiple of 16) are not copied: their stage rows hold stale bytes and
 * mq_tile_out writes no output for them (each output row of an mma is its
 * own A row, so nothing else reads them). */
struct mq_src {
	const uint8_t *w[4], *p[4];
	uint32_t ok; /* bits 0..3: code row k inside the matrix; 4..7: pair unit j to copy */
};

template <class S>
static __device__ __forceinline__ void mq_src_set(mq_src &s, const mv_args &a, int NM, const mq_cur &c, int lane,
						  int ngp, int cpg_sh, size_t row_bytes)
{
	int mi, r0;
	mq_tile(a, NM, c.tile, mi, r0);
	const int mm = mi + c.m, rows = a.rows[mi];
	s.ok = 0;
#pragma unroll
	for (int k = 0; k < 4; k++) {
		const int row = r0 + (lane >> 3) + 4 * k;
		s.ok |= (uint32_t)(row < rows) << k;
		s.w[k] = (const uint8_t *)a.w[mm] + (size_t)min(row, rows - 1) * row_bytes + (lane & 7) * 16;
	}
	const int pu_sh = mq_pu_sh(cpg_sh, S::SW);
#pragma unroll
	for (int j = 0; j < 4; j++) {
		const int u = j * 32 + lane, row = r0 + (u >> pu_sh);
		s.ok |= (uint32_t)(u < (16 << pu_sh) && row < rows) << (4 + j);
		s.p[j] = (const uint8_t *)a.s[mm] + (size_t)min(row, rows - 1) * ngp * 4 * S::SW +
			 (u & ((1 << pu_sh) - 1)) * 16;
	}
}

/* To the cursor's next item (mq_cur_next), the sources following it to a
 * new (tile, matrix). */
template <class S>
static __device__ __forceinline__ void mq_adv(mq_cur &c, mq_src &s, const mv_args &a, int NM, int nsteps, int W,
					      int w, int lane, int ngp, int cpg_sh, size_t row_bytes)
{
	const int pi = c.pi;
	mq_cur_next(c, NM, nsteps, W, w, a.tiles);
	if (c.pi != pi && c.tile < a.tiles)
		mq_src_set<S>(s, a, NM, c, lane, ngp, cpg_sh, row_bytes);
}

/* The copies of one item into the stage at shared address dst: codes of
 * the 16 rows (chunks past the row not copied: mq_compute discards them),
 * then their pairs. Stage layout: code row r at r 256 V, its unit q at
 * (q ^ mq_swz(r)) 16; mq_swz(ra + 4k) = mq_swz(ra) < 8, so a lane's
 * destinations are immediate offsets too. */
template <int BITS, class S>
static __device__ __forceinline__ void mq_issue(uint32_t dst, const mq_src &s, int st, int lane, int nch, int cpg_sh)
{
	constexpr int V = BITS / 4;
	const int ra = lane >> 3, q0 = lane & 7, lim = nch - st * 16; /* chunks of this step inside the row */
	const uint32_t d0 = dst + ra * 256 * V + ((q0 ^ mq_swz<V>(ra)) << 4);
	const uint32_t wo = (uint32_t)st * 256 * V, po = (uint32_t)st * (16 >> cpg_sh) * 4 * S::SW;
#pragma unroll
	for (int k = 0; k < 4; k++)
#pragma unroll
		for (int j = 0; j < 2 * V; j++)
			if ((s.ok >> k & 1) && (q0 + 8 * j) / V < lim)
				mq_cp16(d0 + k * 4 * 256 * V + j * 128, s.w[k] + wo + j * 128);
	const uint32_t pdst = dst + 16 * 256 * V + lane * 16;
#pragma unroll
	for (int j = 0; j < 4; j++)
		if (s.ok >> (4 + j) & 1)
			mq_cp16(pdst + j * 512, s.p[j] + po);
}

/* The lane's fragments of one stage (what mq_load puts in registers). */
template <int BITS, class S>
static __device__ __forceinline__ void mq_ld_stage(mq_regs<BITS / 4, S::SW> &r, const uint8_t *stg, int g, int tig,
						   int cpg_sh)
{
	constexpr int V = BITS / 4;
	const int sw = mq_swz<V>(g);
	const uint8_t *ra = stg + g * 256 * V, *rb = stg + (g + 8) * 256 * V;
#pragma unroll
	for (int h = 0; h < 4; h++)
#pragma unroll
		for (int u = 0; u < V; u++) {
			const int q = ((4 * h + tig) * V + u) ^ sw;
			r.wa[h][u] = *(const uint4 *)(ra + q * 16);
			r.wb[h][u] = *(const uint4 *)(rb + q * 16);
		}
	const int pu_sh = mq_pu_sh(cpg_sh, S::SW), k0 = (tig >> cpg_sh) * S::SW;
	const uint8_t *pp = stg + 16 * 256 * V;
#pragma unroll
	for (int k = 0; k < S::SW; k++) {
		r.pa[k] = *(const uint4 *)(pp + (((g << pu_sh) + k0 + k) << 4));
		r.pb[k] = *(const uint4 *)(pp + ((((g + 8) << pu_sh) + k0 + k) << 4));
	}
}

template <int BITS, class S, int NM, int NORM>
__global__ void __launch_bounds__(32 * MQ_CP_MAXW) k_matvec_cp(mv_args a, const float *__restrict__ x)
{
	pdl_trigger();
	/* [W][ns] stages, red [2][NM][W][MQ_ROWS], x [nch][MQ_CW] + zeros: red
	 * sized by W, not MQ_CP_MAXW: with a static red of 2 KB, 4 blocks of
	 * 4 warps and 2 stages were just over an SM's 228 KB at 4096 columns */
	extern __shared__ __align__(16) uint8_t mq_smem[];
	__shared__ float nss[MQ_CP_MAXW];
	constexpr int V = BITS / 4;
	const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, W = blockDim.x >> 5;
	const int g = lane >> 2, tig = lane & 3;
	const int cols = a.cols, nch = cols >> 5, ngp = sb_ngp(cols, a.group), cpg_sh = __ffs(a.group >> 5) - 1;
	const int nsteps = (nch + 15) >> 4, ns = a.ns, stage = mq_stage_bytes(BITS, cpg_sh, S::SW);
	const size_t row_words = (size_t)cols * BITS / 32;
	const bool bact = (g >> 1) == tig;
	const int part = (g & 1) * 16;
	const uint8_t *ring = mq_smem + (size_t)wid * ns * stage;
	const uint32_t ring_s = mq_saddr(ring);
	float *red = (float *)(mq_smem + (size_t)W * ns * stage); /* red[((it * NM + m) * W + w) * MQ_ROWS + row] */
	uint32_t *xs = (uint32_t *)(red + 2 * NM * W * MQ_ROWS);
	/* the first ns - 1 items, before x is ready (they depend on no kernel) */
	const size_t row_bytes = row_words * 4;
	mq_cur ic = {(int)blockIdx.x, 0, 0, mq_first(wid, 0, nsteps, W)};
	if (ic.st >= nsteps) {
		ic.st -= W;
		mq_cur_next(ic, NM, nsteps, W, wid, a.tiles);
	}
	mq_src sc;
	if (ic.tile < a.tiles)
		mq_src_set<S>(sc, a, NM, ic, lane, ngp, cpg_sh, row_bytes);
	for (int k = 0; k < ns - 1; k++) {
		if (ic.tile < a.tiles) {
			mq_issue<BITS, S>(ring_s + k * stage, sc, ic.st, lane, nch, cpg_sh);
			mq_adv<S>(ic, sc, a, NM, nsteps, W, wid, lane, ngp, cpg_sh, row_bytes);
		}
		mq_commit();
	}
	pdl_wait(); /* x is the predecessor's output */
	mq_stage<BITS, NORM>(x, a.nw, a.one, a.vec & 2, nch, xs, nss, blockDim.x);
	__syncthreads();
	const float inv = NORM ? mq_inv(nss, W, cols, a.eps) : 1.0f;
	int cs = 0, is = ns - 1; /* ring slots: next to compute, next to fill */
	int it = 0, pi = 0;
	for (int tile = blockIdx.x; tile < a.tiles; tile += gridDim.x, it ^= 1) {
		int mi, r0;
		mq_tile(a, NM, tile, mi, r0);
#pragma unroll
		for (int m = 0; m < NM; m++, pi++) {
			float acc_a = 0.0f, acc_b = 0.0f;
			for (int st = mq_first(wid, pi, nsteps, W); st < nsteps; st += W) {
				mq_wait_ring(ns);
				__syncwarp(); /* item cs landed for every lane; every lane is done with slot is */
				if (ic.tile < a.tiles) {
					mq_issue<BITS, S>(ring_s + is * stage, sc, ic.st, lane, nch, cpg_sh);
					mq_adv<S>(ic, sc, a, NM, nsteps, W, wid, lane, ngp, cpg_sh, row_bytes);
				}
				mq_commit();
				is = is + 1 == ns ? 0 : is + 1;
				mq_regs<V, S::SW> rg;
				mq_ld_stage<BITS, S>(rg, ring + cs * stage, g, tig, cpg_sh);
				cs = cs + 1 == ns ? 0 : cs + 1;
				mq_compute<BITS, S>(rg, xs, st, tig, nch, bact, part, acc_a, acc_b);
			}
			acc_a += __shfl_xor_sync(0xffffffffu, acc_a, 1);
			acc_a += __shfl_xor_sync(0xffffffffu, acc_a, 2);
			acc_b += __shfl_xor_sync(0xffffffffu, acc_b, 1);
			acc_b += __shfl_xor_sync(0xffffffffu, acc_b, 2);
			if (tig == 0) {
				red[((it * NM + m) * W + wid) * MQ_ROWS + g] = acc_a;
				red[((it * NM + m) * W + wid) * MQ_ROWS + g + 8] = acc_b;
			}
		}
		/* one barrier per tile: as k_matvec_mma */
		__syncthreads();
		mq_tile_out<NM, NORM, 0>(a, red + it * NM * W * MQ_ROWS, W, mi, r0, tid, inv);
	}
	asm volatile("cp.async.wait_all;\n" ::: "memory"); /* nothing left in flight at exit (only empty groups) */
}

/* Dense (unquantized) weights: a warp per row, any cols. */
template <class S>
__global__ void k_matvec_dense(const void *W, int rows, int cols, const float *__restrict__ x,
			       const float *bias, float *y)
{
	pdl_trigger();
	pdl_wait();
	int row = blockIdx.x * 4 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	if (row >= rows)
		return;
	float acc = 0.0f;
	for (int j = lane; j < cols; j += 32)
		acc = fmaf(S::ld(W, (size_t)row * cols + j), x[j], acc);
	acc = warp_sum(acc);
	if (lane == 0)
		y[row] = acc + (bias ? bias[row] : 0.0f);
}

/* ---- prefill: tiled GEMM ----
 * Y[n][rows] = X[n][cols] W^T. Block: 256 threads, 64 output rows x 64
 * tokens, k steps of 32 (one pack: a step never straddles a group). The
 * weight tile is dequantized once into shared memory (w = s*code + b, as
 * the reference) and used by all 64 tokens; each thread accumulates 4x4
 * outputs in f32. Not yet on tensor cores (kernels/cuda/NOTES.md). */
#define GM 64
#define GN 64
#define GK 32

/* sb: the (scale, bias) pairs, ngp per row (sb_ngp), tsh = sb_tsh(group) */
template <int BITS, class S>
__device__ __forceinline__ float gemm_w(const void *W, const void *sb, int cols, int group, int ngp, int tsh,
					 int row, int col)
{
	if (BITS == 0)
		return S::ld(W, (size_t)row * cols + col);
	const uint32_t *rw = (const uint32_t *)W + (size_t)row * ((size_t)cols * BITS / 32);
	float s, b;
	S::ldp(sb, sb_at(row, col / group, ngp, tsh), s, b);
	return s * (float)code_at<BITS>(rw, col) + b;
}

template <int BITS, class S>
__global__ void __launch_bounds__(256) k_gemm(const void *W, const void *sb, int rows, int cols, int group,
					       const float *__restrict__ X, int n, const float *bias, float *Y)
{
	pdl_trigger();
	pdl_wait();
	const int ngp = BITS ? sb_ngp(cols, group) : 0, tsh = sb_tsh(group);
	__shared__ float Ws[GK][GM + 4];
	__shared__ float Xs[GK][GN + 4];
	int tid = threadIdx.x, row0 = blockIdx.x * GM, tok0 = blockIdx.y * GN;
	int tr = (tid & 15) * 4, tt = (tid >> 4) * 4;
	float acc[4][4] = {};
	int lr = tid >> 2, lk = (tid & 3) * 8; /* loader: row/token lr, k lk..lk+7 */
	for (int k0 = 0; k0 < cols; k0 += GK) {
		int row = row0 + lr;
#pragma unroll
		for (int i = 0; i < 8; i++) {
			int col = k0 + lk + i;
			Ws[lk + i][lr] = (row < rows && col < cols) ? gemm_w<BITS, S>(W, sb, cols, group, ngp, tsh, row, col) : 0.0f;
		}
		int tok = tok0 + lr;
#pragma unroll
		for (int i = 0; i < 8; i++) {
			int col = k0 + lk + i;
			Xs[lk + i][lr] = (tok < n && col < cols) ? X[(size_t)tok * cols + col] : 0.0f;
		}
		__syncthreads();
#pragma unroll 8
		for (int k = 0; k < GK; k++) {
			float4 w4 = *(const float4 *)&Ws[k][tr];
			float4 x4 = *(const float4 *)&Xs[k][tt];
			float wv[4] = {w4.x, w4.y, w4.z, w4.w}, xv[4] = {x4.x, x4.y, x4.z, x4.w};
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
					acc[i][j] = fmaf(wv[i], xv[j], acc[i][j]);
		}
		__syncthreads();
	}
#pragma unroll
	for (int j = 0; j < 4; j++) {
		int tok = tok0 + tt + j;
		if (tok >= n)
			continue;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			int row = row0 + tr + i;
			if (row < rows)
				Y[(size_t)tok * rows + row] = acc[i][j] + (bias ? bias[row] : 0.0f);
		}
	}
}

/* ---- prefill: the quantized GEMM on the tensor cores ----
 * Y[n][rows] = X[n][cols] W^T on mma.sync.m16n8k16 (f16 in, f32
 * accumulate), as exact as the decode matvec (kernel tests at TOL_LINEAR
 * 1e-5, f32-class):
 * - k_xsplit writes X once per call (shared by q/k/v and gate/up) as f16
 *   hi + lo of x' = x * 2^e, e per token so that max |x'| is in [2^13,
 *   2^14) (no f16 overflow whatever x holds; 22 significant bits), plus
 *   the f32 sum of x' per (group, token) and 2^-e per token.
 * - A (weights): code c as the f16 integer c, exact for any bits <= 10:
 *   one shift and one LOP3 put a pair of codes into the mantissas of
 *   1024.0 (1024 + c), one HSUB2 takes 1024 away. Each weight tile is
 *   dequantized once per block into shared memory (each thread its own
 *   row) and read by every warp of the block with ldmatrix.
 * - Per group, P = sum c x' on the tensor cores (exact products, f32
 *   sums); at the group's last k step acc += s P + b sum(x') in f32, so
 *   scales and biases never pass through f16. At the end y = 2^-e acc +
 *   bias.
 * - Columns are permuted within blocks of 16 (tg_perm) so that a pair of
 *   codes for one f16x2 register comes out of a packed word with a single
 *   shift and mask (4 bits: codes t and t+4 of a word; 8 bits: t, t+2;
 *   2 bits: t, t+8); k_xsplit writes X in the same order, and a dot
 *   product does not depend on the order of its terms. 3, 5, 6 bits keep
 *   the natural order (codes extracted one by one).
 * Tiles: a block of NT threads owns TG_BM weight rows x NT / 2 tokens; its
 * warps are 2 (rows) x NT / 64 (tokens), warp tile 64 x 32 (4 x 4 mma
 * tiles; P and acc take 128 registers, ~250 in all): NT = 128 (64 tokens,
 * 2 blocks per SM) or NT = 256 (128 tokens, k steps of 64 only, 1 block
 * per SM: half the dequantization per mma; run 28). k steps of BK = 32 or
 * 64 columns (a group starts and ends on a 32-column boundary). Codes and
 * X hi/lo go through a 4- (BK 32) or 3-deep (BK 64; 4 at NT = 256)
 * cp.async ring; step
 * k+1's codes are dequantized into the other A buffer before step k's
 * mmas, so one barrier per step suffices: each thread dequantizes only
 * codes it copied itself (at NT = 256 two threads per row, each one of
 * the step's two 32-column chunks). The grid runs
 * token tiles fastest: the blocks that share a weight tile run together
 * and the weights are read from memory about once. One launch covers up
 * to KC_MAX_FUSE matrices on one split x (tg_mats: q/k/v, gate/up). */
#define TG_BM 128
/* BK (columns per k step) 32: 4 stages; 64: 3 stages (half the barriers
 * and per-step overhead; 8 bits would not fit 2 blocks per SM), or 4 at
 * NT = 256 (one block per SM: at most 217 KB of shared memory) */
static __host__ __device__ constexpr int tg_stages(int bk, int nt, int bt = 0)
{
	return bt & 32 ? 3 : bk == 32 || nt == 256 ? 4 : 3; /* BT & 32: 2 blocks per SM, 3 stages */
}
/* halves per staged row: BK + 8, so ldmatrix's 8 rows (80 or 144 B
 * apart) hit distinct banks */
static __host__ __device__ constexpr int tg_ld(int bk) { return bk + 8; }
/* x terms staged by k_gemm_tc<..., BT>: BT & 8 is the one-term variant */
static __host__ __device__ constexpr int tg_xt(int bt) { return bt & 8 ? 1 : 2; }
/* one stage: TG_BM rows of codes + X hi and lo (xt = 2 terms; xt = 1: hi
 * only, kc_gemm_impl(10-12)) of nt / 2 tokens */
static __host__ __device__ constexpr int tg_stage_bytes(int bits, int bk, int nt, int xt = 2)
{
	return TG_BM * bk / 8 * bits + xt * (nt / 2) * tg_ld(bk) * 2;
}
static __host__ __device__ constexpr int tg_smem(int bits, int bk, int nt, int bt = 0)
{
	return tg_stages(bk, nt, bt) * tg_stage_bytes(bits, bk, nt, tg_xt(bt)) + 2 * TG_BM * tg_ld(bk) * 2;
}

/* The matrices of one launch: matrix i owns the grid's row tiles
 * [tile0[i], tile0[i + 1]); unused entries have tile0 = INT_MAX. */
struct tg_mats {
	const uint8_t *w[KC_MAX_FUSE];
	const void *sb[KC_MAX_FUSE];
	const float *bias[KC_MAX_FUSE];
	float *y[KC_MAX_FUSE];
	int rows[KC_MAX_FUSE];
	int tile0[KC_MAX_FUSE];
};

/* Position q (0..15) of a block of 16 staged columns holds column
 * tg_perm(bits, q) of that block (see above). */
static __host__ __device__ __forceinline__ int tg_perm(int bits, int q)
{
	if (bits == 4)
		return (q & 8) | ((q & 7) >> 1) | ((q & 1) << 2);
	if (bits == 8)
		return (q & 12) | ((q & 3) >> 1) | ((q & 1) << 1);
	if (bits == 2)
		return (q >> 1) | ((q & 1) << 3);
	return q;
}

static __device__ __forceinline__ uint32_t smem_u32(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

template <int B>
static __device__ __forceinline__ void cp_async(uint32_t dst, const void *src)
{
	if (B == 16)
		asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
	else
		asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(src), "n"(B));
}
static __device__ __forceinline__ void cp_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
static __device__ __forceinline__ void cp_wait(void) { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

static __device__ __forceinline__ void ldsm4(uint32_t (&r)[4], uint32_t addr)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(addr));
}

/* d += a b (not volatile: the scheduler may move it); tg_mma_z: d = a b */
static __device__ __forceinline__ void tg_mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	    "{%0,%1,%2,%3};\n"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
static __device__ __forceinline__ void tg_mma_z(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	    "{%10,%10,%10,%10};\n"
	    : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(0.0f));
}

/* d += a b with bf16 operands (the bias term of kc_gemm_impl(6), bf16 scales) */
static __device__ __forceinline__ void tg_mma_bf(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	    "{%0,%1,%2,%3};\n"
	    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
static __device__ __forceinline__ uint32_t tg_h2(float lo, float hi)
{
	__half2 h = __floats2half2_rn(lo, hi);
	return *(uint32_t *)&h;
}
static __device__ __forceinline__ uint32_t tg_b2(float lo, float hi)
{
	__nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
	return *(uint32_t *)&h;
}

/* (1024 + c) pair -> c pair, exact. Own asm: __hsub2(h, __float2half2_rn(1024))
 * rebuilt the constant (cvt + movs) at every call, 3x the instructions. */
static __device__ __forceinline__ uint32_t tg_int_pair(uint32_t v)
{
	uint32_t r;
	asm("sub.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(v), "r"(0x64006400u));
	return r;
}

/* One row's 32 codes of a k step (4*BITS bytes of shared memory) to 32
 * f16 integers in staged order (tg_perm). */
template <int BITS, bool WS = false>
static __device__ __forceinline__ void tg_dequant(const uint8_t *src, __half *dst, uint32_t s2 = 0, uint32_t b2 = 0)
{
	constexpr uint32_t M = 0x64006400u;
	uint32_t w[BITS], o[16];
	if (BITS % 4 == 0) {
#pragma unroll
		for (int i = 0; i < BITS; i += 4) {
			uint4 v = *(const uint4 *)(src + 4 * i);
			w[i] = v.x; w[i + 1] = v.y; w[i + 2] = v.z; w[i + 3] = v.w;
		}
	} else if (BITS % 2 == 0) {
#pragma unroll
		for (int i = 0; i < BITS; i += 2) {
			uint2 v = *(const uint2 *)(src + 4 * i);
			w[i] = v.x; w[i + 1] = v.y;
		}
	} else {
#pragma unroll
		for (int i = 0; i < BITS; i++)
			w[i] = *(const uint32_t *)(src + 4 * i);
	}
	if (BITS == 4) {
#pragma unroll
		for (int j = 0; j < 4; j++)
#pragma unroll
			for (int t = 0; t < 4; t++)
				o[4 * j + t] = and_or<0x000F000Fu, M>(w[j] >> (4 * t));
	} else if (BITS == 8) {
#pragma unroll
		for (int j = 0; j < 8; j++)
#pragma unroll
			for (int t = 0; t < 2; t++)
				o[2 * j + t] = and_or<0x00FF00FFu, M>(w[j] >> (8 * t));
	} else if (BITS == 2) {
#pragma unroll
		for (int j = 0; j < 2; j++)
#pragma unroll
			for (int t = 0; t < 8; t++)
				o[8 * j + t] = and_or<0x00030003u, M>(w[j] >> (2 * t));
	} else {
#pragma unroll
		for (int t = 0; t < 16; t++)
			o[t] = code_in_pack<BITS>(w, 2 * t) | (code_in_pack<BITS>(w, 2 * t + 1) << 16) | M;
	}
#pragma unroll
	for (int t = 0; t < 16; t++) {
		o[t] = tg_int_pair(o[t]);
		if (WS) /* kc_gemm_impl(11, 12): w = s c + b, one f16 rounding */
			asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(o[t]) : "r"(o[t]), "r"(s2), "r"(b2));
	}
#pragma unroll
	for (int t = 0; t < 16; t += 4)
		*(uint4 *)(dst + 2 * t) = make_uint4(o[t], o[t + 1], o[t + 2], o[t + 3]);
}

/* The bias term's B operand: group sums k, k + 1 of token tok (XS
 * [ng][n], times SC; 0 past ng) as bf16 hi + mid + lo (BF) or f16 hi +
 * lo (x2 unset) pairs. */
template <bool BF>
static __device__ __forceinline__ void tg_xsum_terms(const float *__restrict__ XS, int n, int tok, int k, int ng,
						     float SC, uint32_t &x0, uint32_t &x1, uint32_t &x2)
{
	float v[2];
#pragma unroll
	for (int j = 0; j < 2; j++)
		v[j] = k + j < ng ? __ldg(XS + (size_t)(k + j) * n + tok) * SC : 0.0f;
	if (BF) {
		float r[2], t[2];
#pragma unroll
		for (int j = 0; j < 2; j++) {
			r[j] = __bfloat162float(__float2bfloat16_rn(v[j]));
			t[j] = __bfloat162float(__float2bfloat16_rn(v[j] - r[j]));
		}
		x0 = tg_b2(r[0], r[1]);
		x1 = tg_b2(t[0], t[1]);
		x2 = tg_b2(v[0] - r[0] - t[0], v[1] - r[1] - t[1]);
	} else {
		float r[2];
#pragma unroll
		for (int j = 0; j < 2; j++)
			r[j] = __half2float(__float2half_rn(v[j]));
		x0 = tg_h2(r[0], r[1]);
		x1 = tg_h2(v[0] - r[0], v[1] - r[1]);
	}
}

static __host__ __device__ __forceinline__ int wg_perm(int p);

/* This block's matrix of a launch over up to KC_MAX_FUSE matrices (its
 * weights, (scale, bias) words, rows and first row tile), by constant
 * indices only: no local copy of M. */
static __device__ __forceinline__ void tg_block_mat(const tg_mats &M, const uint8_t *&W, const void *&SB, int &rows,
						    int &t0)
{
	W = M.w[0];
	SB = M.sb[0];
	rows = M.rows[0];
	t0 = 0;
#pragma unroll
	for (int i = 1; i < KC_MAX_FUSE; i++)
		if ((int)blockIdx.y >= M.tile0[i]) {
			W = M.w[i]; SB = M.sb[i]; rows = M.rows[i]; t0 = M.tile0[i];
		}
}

/* The same block's bias and output (picked after the main loop: not kept
 * in registers through it). */
static __device__ __forceinline__ void tg_block_out(const tg_mats &M, const float *&bias, float *&Y)
{
	bias = M.bias[0];
	Y = M.y[0];
#pragma unroll
	for (int i = 1; i < KC_MAX_FUSE; i++)
		if ((int)blockIdx.y >= M.tile0[i]) {
			bias = M.bias[i]; Y = M.y[i];
		}
}

/* a and b rounded to f16 (the pair's hi word), *lo their remainders */
static __device__ __forceinline__ uint32_t ft_hilo(float a, float b, uint32_t *lo)
{
	const __half2 h = __floats2half2_rn(a, b);
	*lo = tg_h2(a - __low2float(h), b - __high2float(h));
	return *(const uint32_t *)&h;
}

/* Staged position of column c within its block of 32 (k_gemm_wg's order:
 * wgp) or 16 (k_gemm_tc's, by bits): the inverse of wg_perm / tg_perm. */
static __device__ __forceinline__ int xs_pos(int wgp, int bits, int c)
{
	if (wgp)
		return (c & ~31) | ((c & 3) << 3) | ((c & 31) >> 2);
	const int b = c & ~15, q = c & 15;
	if (bits == 4)
		return b | (q & 8) | ((q & 3) << 1) | ((q >> 2) & 1);
	if (bits == 8)
		return b | (q & 12) | ((q & 1) << 1) | ((q >> 1) & 1);
	if (bits == 2)
		return b | ((q << 1) & 15) | (q >> 3);
	return c;
}

/* Where k_xsplit keeps staged position p in shared memory: the 8-value
 * chunks of each 32 XORed with the 32-block's index mod 4, so that in
 * k_gemm_wg's order (wg_perm) a warp's 4 scalar stores of its float4
 * loads hit 32 distinct banks (k_gemm_tc's orders keep a 4-way conflict
 * there: their low two bits are fixed per store). */
static __device__ __forceinline__ int xs_swz(int p)
{
	return p ^ (((p >> 5) & 3) << 3);
}

/* One block per token (XS_THREADS): x' = x 2^e as f16 hi + lo in staged
 * order, the f32 sum of x' per group (32, 64 or 128: modelfiles.c's rule)
 * and 2^-e. With U, x is glu_act(X, act) * U as it is loaded (k_glu's
 * product: kc_linear_glu_in). SM (cols * 4 bytes within the opt-in shared memory): the row's
 * loads are all issued at once, the max taken on the way, each value
 * stored to shared memory at its staged position; then each thread turns
 * 8 consecutive staged values into one 16-byte store of hi and one of lo,
 * and the group/8 threads of a group add their sums by shuffles. !SM: the
 * same items read their columns from global memory again (L2). */
#define XS_THREADS 256
template <bool SM>
__global__ void __launch_bounds__(XS_THREADS) k_xsplit(const float *__restrict__ X, const float *__restrict__ U,
							int act, int n, int cols, int group, int bits, int wgp,
							__half *xh, __half *xl, float *xsum, float *inv)
{
	extern __shared__ float4 xs_row4[];
	float *row = (float *)xs_row4;
	__shared__ float sh[XS_THREADS / 32];
	const int t = blockIdx.x, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	const float *x = X + (size_t)t * cols, *u = U ? U + (size_t)t * cols : NULL;
	float mx = 0.0f;
	if (!(((uintptr_t)x | (uintptr_t)u | (uintptr_t)cols * 4) & 15)) { /* 16-byte rows: 4 floats a load */
		const float4 *x4 = (const float4 *)x, *u4 = (const float4 *)u;
#pragma unroll 8
		for (int j = threadIdx.x; j < cols / 4; j += XS_THREADS) {
			float4 v = x4[j];
			if (u) {
				const float4 w = u4[j];
				v = make_float4(glu_act(v.x, act) * w.x, glu_act(v.y, act) * w.y, glu_act(v.z, act) * w.z,
						glu_act(v.w, act) * w.w);
			}
			mx = fmaxf(mx, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
			if constexpr (SM) {
				row[xs_swz(xs_pos(wgp, bits, 4 * j))] = v.x;
				row[xs_swz(xs_pos(wgp, bits, 4 * j + 1))] = v.y;
				row[xs_swz(xs_pos(wgp, bits, 4 * j + 2))] = v.z;
				row[xs_swz(xs_pos(wgp, bits, 4 * j + 3))] = v.w;
			}
		}
	} else {
		for (int j = threadIdx.x; j < cols; j += XS_THREADS) {
			const float v = u ? glu_act(x[j], act) * u[j] : x[j];
			mx = fmaxf(mx, fabsf(v));
			if constexpr (SM)
				row[xs_swz(xs_pos(wgp, bits, j))] = v;
		}
	}
	mx = warp_max(mx);
	if (lane == 0)
		sh[wid] = mx;
	__syncthreads();
	mx = 0.0f;
#pragma unroll
	for (int w = 0; w < XS_THREADS / 32; w++)
		mx = fmaxf(mx, sh[w]);
	float iv;
	const float sc = pow2_scale(mx, &iv);
	if (threadIdx.x == 0)
		inv[t] = iv;
	/* items of 8 staged values; a group's group/8 items sit on adjacent
	 * lanes of one warp (cols % group == 0), and every lane runs every
	 * round (the shuffles) */
	const int items = cols / 8, gl = group / 8;
	uint4 *hp = (uint4 *)(xh + (size_t)t * cols), *lp = xl ? (uint4 *)(xl + (size_t)t * cols) : NULL;
	for (int i0 = 0; i0 < items; i0 += XS_THREADS) {
		const int i = i0 + threadIdx.x;
		float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
		if (i < items) {
			if constexpr (SM) {
				const int si = i ^ ((i >> 2) & 3); /* xs_swz(8 i) / 8 */
				const float4 a = xs_row4[2 * si], b = xs_row4[2 * si + 1];
				v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
				v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
			} else {
#pragma unroll
				for (int k = 0; k < 8; k++) {
					const int q = 8 * i + k; /* staged position: its column */
					const int c = wgp ? (q & ~31) | wg_perm(q & 31) : (q & ~15) | tg_perm(bits, q & 15);
					v[k] = u ? glu_act(x[c], act) * u[c] : x[c];
				}
			}
		}
		float s = 0.0f;
		uint32_t hw[4], lw[4];
#pragma unroll
		for (int k = 0; k < 4; k++) {
			const float a = v[2 * k] * sc, b = v[2 * k + 1] * sc;
			hw[k] = ft_hilo(a, b, &lw[k]);
			s += a + b;
		}
		if (i < items) {
			hp[i] = make_uint4(hw[0], hw[1], hw[2], hw[3]);
			if (lp) /* NULL: one-term x (kc_gemm_impl(10-12)) */
				lp[i] = make_uint4(lw[0], lw[1], lw[2], lw[3]);
		}
		for (int o = gl >> 1; o > 0; o >>= 1)
			s += __shfl_xor_sync(0xffffffffu, s, o);
		if (i < items && !(lane & (gl - 1)))
			xsum[(size_t)(8 * i / group) * n + t] = s;
	}
}

template <int BITS, class S, int BK, int NT, int BT>
__global__ void __launch_bounds__(NT, NT == 128 || (BT & 32) ? 2 : 1)
	k_gemm_tc(const tg_mats M, int cols, int group, const __half *__restrict__ XH, const __half *__restrict__ XL,
		  const float *__restrict__ XS, const float *__restrict__ INV, int n)
{
	extern __shared__ __align__(16) uint8_t tsm[];
	constexpr int NS = tg_stages(BK, NT, BT), LD = tg_ld(BK), XT = tg_xt(BT);
	constexpr bool WS = (BT & 16) != 0; /* see BT & 16 below */
	constexpr int CB = BK / 8 * BITS; /* code bytes of one row in one k step */
	constexpr int STAGE = tg_stage_bytes(BITS, BK, NT, XT);
	constexpr int U = BITS % 4 == 0 ? 16 : BITS % 2 == 0 ? 8 : 4; /* cp.async size for the codes */
	constexpr int BN = NT / 2;                        /* tokens per block */
	constexpr int XPH = BN * (BK / 8) / NT;           /* X pieces (16 B) per thread per step and term */
	constexpr int MI = 4, WROWS = 64;                 /* mma tiles, rows per warp */
	constexpr int PP = NT / TG_BM, CBT = CB / PP;     /* threads per row; code bytes per thread */
	static_assert(NT == 128 || (NT == 256 && BK == 64), "NT");
	/* BT (kc_gemm_impl(6), f16 and bf16 scales, whose biases the tensor
	 * cores take exactly): the group fold is acc += s P only, and the bias
	 * term sum_g b sum(x') runs after the loop as mmas over 16 groups at a
	 * time (b as A; the x sums, times 2^-8 to stay in f16 range, split in
	 * f16 hi + lo or bf16 hi + mid + lo as B); acc is in units of 2^-8
	 * (s 2^-8 in the fold, exact), undone at the store. */
	constexpr bool MMB = (BT & 1) && !WS && !std::is_same<S, F32>::value, BF = std::is_same<S, BF16>::value;
	/* BT & 2 (kc_gemm_impl(7)): a group's (scale, bias) words stay raw in
	 * registers until its fold; converted at the load (run 13's form), the
	 * conversion waited for the load right away, one L2 round trip per
	 * group (HADD2 right after the LDGs in the SASS, run 28) */
	constexpr bool RAW = (BT & 2) != 0;
	/* BT & 4 (kc_gemm_impl(8)): split-K, blockIdx.z of gridDim.z (1 or 2)
	 * takes the columns [z cols / Z, (z + 1) cols / Z) (whole k steps and
	 * groups, tg_ksplit); at Z = 2 both halves add into a Y zeroed before
	 * the launch, split 0's half carrying the bias: 0 + a + b is a + b in
	 * either order, so the result does not depend on which lands first */
	constexpr bool SPLIT = (BT & 4) != 0;
	/* BT & 8 (kc_gemm_impl(10)): x as its f16 hi term only (11 bits, no
	 * lo): one mma per tile and k slice instead of two, half the X staged
	 * and loaded; the error is that of rounding x' to f16 (relative 2^-11
	 * per value), the group sums and everything else as above */
	static_assert(XT == 1 || XT == 2, "XT");
	/* BT & 16 (kc_gemm_impl(11, 12), with BT & 8): the weights as f16 s c
	 * + b in the A tile (each thread's row and 32 columns, one group: its
	 * (scale, bias) words loaded a step ahead), the mmas straight into acc:
	 * no per-group P, no fold, no bias term; w is rounded to f16 once
	 * (relative 2^-11, like x). BT & 32 (12): 2 blocks per SM (128
	 * registers, 3 stages). WS is defined with NS above. */
	constexpr float SC = MMB ? 0.00390625f : 1.0f;
	const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, trow = tid & (TG_BM - 1);
	const int wm = wid & 1, wn = wid >> 1, g = lane >> 2, tig = lane & 3;
	const uint8_t *W;
	const void *SB;
	int rows, t0;
	tg_block_mat(M, W, SB, rows, t0);
	const int tok0 = blockIdx.x * BN, row0 = ((int)blockIdx.y - t0) * TG_BM;
	const int ngp = sb_ngp(cols, group), tsh = sb_tsh(group);
	const int kspan = SPLIT ? cols / (int)gridDim.z : cols, kbase = SPLIT ? (int)blockIdx.z * kspan : 0;
	const int kend = kbase + kspan, nk = kspan / BK;
	if constexpr (SPLIT) {
		XH += kbase;
		XL += kbase;
	}
	__half *As = (__half *)(tsm + NS * STAGE); /* [2][TG_BM][LD] */
	/* rows past the end read the last row, tokens past n the last token;
	 * neither is stored */
	const uint8_t *wsrc = W + (size_t)min(row0 + trow, rows - 1) * ((size_t)cols * BITS / 8) + (tid >> 7) * CBT +
			      (size_t)kbase / 8 * BITS;

	/* Addresses that only move by a constant per step are computed once
	 * (recomputing them was ~1/4 of the loop's instructions). Thread tid
	 * copies X pieces i = tid + NT u: (hi|lo, token, 16-byte piece); NT
	 * covers whole tokens, so the token of piece u is
	 * that of piece 0 plus a constant. */
	const uint32_t smem0 = smem_u32(tsm);
	constexpr int TPU = NT / (BK / 8); /* staged rows (hi tokens, then lo) per u */
	const int xtk = tid / (BK / 8), xpc = tid & (BK / 8 - 1);
	/* piece u: staged row xtk + u TPU (rows BN.. are lo), so its shared
	 * address is xdst + a constant; the lo half reads hi's token + n cols */
	const uint32_t xdst = smem0 + TG_BM * CB + (xtk * LD + xpc * 8) * 2;
	size_t xoff[XPH];
#pragma unroll
	for (int u = 0; u < XPH; u++)
		xoff[u] = (size_t)min(tok0 + xtk + u * TPU, n - 1) * cols + xpc * 8;
	auto issue = [&](int kt, int stg) {
		const uint8_t *src = wsrc + (size_t)kt * CB;
		const uint32_t dst = smem0 + stg * STAGE + tid * CBT;
#pragma unroll
		for (int u = 0; u < CBT / U; u++)
			cp_async<U>(dst + u * U, src + u * U);
		const __half *xh = XH + (size_t)kt * BK, *xl = XL + (size_t)kt * BK;
#pragma unroll
		for (int u = 0; u < XT * XPH; u++)
			cp_async<16>(xdst + stg * STAGE + u * TPU * LD * 2, (u < XPH ? xh : xl) + xoff[u % XPH]);
	};
	/* WS: the raw (scale, bias) words of the next step this thread
	 * dequantizes (its 32 columns lie in one group) */
	uint32_t wraw[S::SW];
	auto ws_load = [&](int kt) {
		const int gi = (kbase + kt * BK + (tid >> 7) * (BK / PP)) / group;
		sb_words<S>(SB, sb_at(min(row0 + trow, rows - 1), gi, ngp, tsh), wraw);
	};
	auto dequant = [&](int kt, int stg) {
		/* this thread's chunks of 32 columns: its own copies */
		const uint8_t *src = tsm + stg * STAGE + tid * CBT;
		__half *dst = As + ((kt & 1) * TG_BM + trow) * LD + (tid >> 7) * (BK / PP);
		uint32_t s2 = 0, b2 = 0;
		if constexpr (WS) {
			static_assert(XT == 1 && BK / 32 / PP == 1, "WS: one term, one 32-column chunk per thread");
			s2 = tg_h2(S::ps(wraw), S::ps(wraw));
			b2 = tg_h2(S::pb(wraw), S::pb(wraw));
			if (kt + 1 < nk) /* a step ahead: consumed by the next call */
				ws_load(kt + 1);
		}
#pragma unroll
		for (int h = 0; h < BK / 32 / PP; h++)
			tg_dequant<BITS, WS>(src + 4 * BITS * h, dst + 32 * h, s2, b2);
	};
	/* ldmatrix addresses: A rows wm*WROWS + (lane & 15) (+16 mi), columns
	 * (lane >> 4) * 8 (+kk); B tokens wn*32 + (lane & 7) + 8 (lane >> 4)
	 * (+16 nj), columns ((lane >> 3) & 1) * 8 (+kk); lo after hi */
	const uint32_t a_lane = smem_u32(As) + ((wm * WROWS + (lane & 15)) * LD + (lane >> 4) * 8) * 2;
	const uint32_t b_lane = smem0 + TG_BM * CB +
				((wn * 32 + (lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8) * 2;

	float acc[MI][4][4], P[MI][4][4];
	float sv[MI][2], bv[MI][2], xv[4][2];
	uint32_t sw[MI][2][S::SW]; /* RAW */
#pragma unroll
	for (int mi = 0; mi < MI; mi++)
#pragma unroll
		for (int ni = 0; ni < 4; ni++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[mi][ni][e] = P[mi][ni][e] = 0.0f;
	auto load_group = [&](int gi) {
#pragma unroll
		for (int mi = 0; mi < MI; mi++)
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const size_t e = sb_at(min(row0 + wm * WROWS + mi * 16 + g + 8 * h, rows - 1), gi, ngp, tsh);
				if constexpr (!RAW) {
					S::ldp(SB, e, sv[mi][h], bv[mi][h]);
					sv[mi][h] *= SC;
				} else {
					sb_words<S>(SB, e, sw[mi][h]);
				}
			}
#pragma unroll
		for (int ni = 0; ni < 4; ni++)
#pragma unroll
			for (int e = 0; e < 2; e++)
				xv[ni][e] = MMB ? 0.0f
						: __ldg(XS + (size_t)gi * n + min(tok0 + wn * 32 + ni * 8 + 2 * tig + e, n - 1));
	};

#pragma unroll
	for (int s = 0; s < NS - 1; s++) {
		if (s < nk)
			issue(s, s);
		cp_commit();
	}
	if constexpr (WS)
		ws_load(0);
	else
		load_group(kbase / group);
	cp_wait<NS - 2>();
	dequant(0, 0);
	__syncthreads();
	int stg = 0; /* kt % NS, kept without a division */
	for (int kt = 0; kt < nk; kt++) {
		const int stg1 = stg + 1 == NS ? 0 : stg + 1, stgi = stg == 0 ? NS - 1 : stg - 1; /* kt+1, kt+NS-1 */
		/* the stage refilled here was last read before the previous barrier */
		if (kt + NS - 1 < nk)
			issue(kt + NS - 1, stgi);
		cp_commit();
		cp_wait<NS - 2>(); /* this thread's copies of steps <= kt + 1 have landed */
		if (kt + 1 < nk)   /* own row only: needs no barrier */
			dequant(kt + 1, stg1);
		const int k0 = kbase + kt * BK;
		const uint32_t a_base = a_lane + (kt & 1) * (TG_BM * LD * 2), b_base = b_lane + stg * STAGE;
#pragma unroll
		for (int kk = 0; kk < BK; kk += 16) {
			uint32_t a[MI][4], bh[4][2];
			[[maybe_unused]] uint32_t bl[4][2];
#pragma unroll
			for (int mi = 0; mi < MI; mi++)
				ldsm4(a[mi], a_base + (mi * 16 * LD + kk) * 2);
#pragma unroll
			for (int nj = 0; nj < 2; nj++) {
				uint32_t r[4];
				ldsm4(r, b_base + (nj * 16 * LD + kk) * 2);
				bh[2 * nj][0] = r[0]; bh[2 * nj][1] = r[1]; bh[2 * nj + 1][0] = r[2]; bh[2 * nj + 1][1] = r[3];
				if constexpr (XT == 2) {
					ldsm4(r, b_base + ((BN + nj * 16) * LD + kk) * 2);
					bl[2 * nj][0] = r[0]; bl[2 * nj][1] = r[1];
					bl[2 * nj + 1][0] = r[2]; bl[2 * nj + 1][1] = r[3];
				}
			}
			if constexpr (WS) { /* s and b are in A: straight into acc */
#pragma unroll
				for (int mi = 0; mi < MI; mi++)
#pragma unroll
					for (int ni = 0; ni < 4; ni++)
						tg_mma(acc[mi][ni], a[mi], bh[ni]);
			} else {
				/* groups are multiples of 32 columns: a group starts at a
				 * 32-column boundary (P from zero) and ends after one */
				if ((kk & 16) == 0 && (k0 + kk) % group == 0) {
#pragma unroll
					for (int mi = 0; mi < MI; mi++)
#pragma unroll
						for (int ni = 0; ni < 4; ni++) {
							tg_mma_z(P[mi][ni], a[mi], bh[ni]);
							if constexpr (XT == 2)
								tg_mma(P[mi][ni], a[mi], bl[ni]);
						}
				} else {
#pragma unroll
					for (int mi = 0; mi < MI; mi++)
#pragma unroll
						for (int ni = 0; ni < 4; ni++) {
							tg_mma(P[mi][ni], a[mi], bh[ni]);
							if constexpr (XT == 2)
								tg_mma(P[mi][ni], a[mi], bl[ni]);
						}
				}
				if ((kk & 16) && (k0 + kk + 16) % group == 0) {
					if constexpr (RAW) {
#pragma unroll
						for (int mi = 0; mi < MI; mi++)
#pragma unroll
							for (int h = 0; h < 2; h++) {
								sv[mi][h] = S::ps(sw[mi][h]) * SC;
								bv[mi][h] = S::pb(sw[mi][h]);
							}
					}
#pragma unroll
					for (int mi = 0; mi < MI; mi++)
#pragma unroll
						for (int ni = 0; ni < 4; ni++)
#pragma unroll
							for (int e = 0; e < 4; e++)
								acc[mi][ni][e] = MMB ? fmaf(sv[mi][e >> 1], P[mi][ni][e], acc[mi][ni][e])
										     : fmaf(sv[mi][e >> 1], P[mi][ni][e],
											    fmaf(bv[mi][e >> 1], xv[ni][e & 1], acc[mi][ni][e]));
					if (k0 + kk + 16 < kend)
						load_group((k0 + kk + 16) / group);
				}
			}
		}
		__syncthreads();
		stg = stg1;
	}
	if (MMB) { /* the bias term, 16 groups per mma (groups past the last: b = 0) */
		const int ng = kend / group;
		for (int g0 = kbase / group; g0 < ng; g0 += 16) {
			uint32_t ab[MI][4], xb[3][4][2];
#pragma unroll
			for (int mi = 0; mi < MI; mi++)
#pragma unroll
				for (int h = 0; h < 2; h++)
#pragma unroll
					for (int q = 0; q < 2; q++) {
						const int row = min(row0 + wm * WROWS + mi * 16 + g + 8 * h, rows - 1);
						const int k = g0 + 2 * tig + 8 * q;
						float s_, b0 = 0.0f, b1 = 0.0f;
						if (k < ng)
							S::ldp(SB, sb_at(row, k, ngp, tsh), s_, b0);
						if (k + 1 < ng)
							S::ldp(SB, sb_at(row, k + 1, ngp, tsh), s_, b1);
						ab[mi][h + 2 * q] = BF ? tg_b2(b0, b1) : tg_h2(b0, b1);
					}
#pragma unroll
			for (int ni = 0; ni < 4; ni++) {
				const int tok = min(tok0 + wn * 32 + ni * 8 + g, n - 1);
#pragma unroll
				for (int q = 0; q < 2; q++)
					tg_xsum_terms<BF>(XS, n, tok, g0 + 2 * tig + 8 * q, ng, SC, xb[0][ni][q], xb[1][ni][q],
							  xb[2][ni][q]);
			}
#pragma unroll
			for (int mi = 0; mi < MI; mi++)
#pragma unroll
				for (int ni = 0; ni < 4; ni++)
#pragma unroll
					for (int p = 0; p < (BF ? 3 : 2); p++) {
						if (BF)
							tg_mma_bf(acc[mi][ni], ab[mi], xb[p][ni]);
						else
							tg_mma(acc[mi][ni], ab[mi], xb[p][ni]);
					}
		}
	}
	const float *bias; /* picked here, not kept through the loop */
	float *Y;
	tg_block_out(M, bias, Y);
	/* every bias and 2^-e first: Y and bias may alias as far as the
	 * compiler knows, so a load after a store would wait for it */
	float bz[MI][2], iz[4][2];
#pragma unroll
	for (int mi = 0; mi < MI; mi++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const int row = row0 + wm * WROWS + mi * 16 + g + 8 * h;
			bz[mi][h] = bias && row < rows && (!SPLIT || blockIdx.z == 0) ? __ldg(bias + row) : 0.0f;
		}
#pragma unroll
	for (int ni = 0; ni < 4; ni++)
#pragma unroll
		for (int e = 0; e < 2; e++)
			iz[ni][e] = __ldg(INV + min(tok0 + wn * 32 + ni * 8 + 2 * tig + e, n - 1)) * (1.0f / SC);
#pragma unroll
	for (int ni = 0; ni < 4; ni++)
#pragma unroll
		for (int e = 0; e < 2; e++) {
			const int tok = tok0 + wn * 32 + ni * 8 + 2 * tig + e;
			if (tok >= n)
				continue;
			float *yr = Y + (size_t)tok * rows;
#pragma unroll
			for (int mi = 0; mi < MI; mi++)
#pragma unroll
				for (int h = 0; h < 2; h++) {
					const int row = row0 + wm * WROWS + mi * 16 + g + 8 * h;
					if (row >= rows)
						continue;
					const float v = fmaf(acc[mi][ni][2 * h + e], iz[ni][e], bz[mi][h]);
					if (SPLIT && gridDim.z > 1)
						atomicAdd(yr + row, v);
					else
						yr[row] = v;
				}
		}
}

/* ---- prefill: the quantized GEMM on Hopper's wgmma (kc_gemm_impl(13)) ----
 * The arithmetic of k_gemm_tc's default (x' = x 2^e as f16 hi + lo, the
 * codes as exact f16 integers, per group P = sum c x' in f32, acc += s P
 * at the group's end, the bias term after the loop on mma.sync, y = 2^-e
 * acc + bias), on wgmma.mma_async (sm_90a) instead of mma.sync:
 * - A (the codes) from registers: each thread dequantizes exactly the
 *   A-fragment values it feeds (rows 16w + g and + 8 of its warpgroup's
 *   64, two packed words per row per 32 columns), so codes never pass
 *   through an f16 tile in shared memory or ldmatrix. For one register
 *   per pair the columns are permuted within blocks of 32 (wg_perm;
 *   k_xsplit stages x in the same order).
 * - B (x hi, x lo) from shared memory through a descriptor: a token's 64
 *   columns of a k step are one 128-byte row, its 16-byte pieces swizzled
 *   (piece c at c ^ (token & 7)), 8 rows per 1024-byte atom: the layout
 *   wgmma reads without bank conflicts (128B swizzle; without it the
 *   kernel was 1.44x slower, session 11 call 2).
 * - A block is 2 warpgroups: 128 rows x 128 tokens, each warpgroup 64
 *   rows; k steps of 64 columns through a cp.async ring. Each warpgroup's
 *   tokens are two halves of 64 (m64n64k16, P and acc 32 f32 each per
 *   half), committed as separate wgmma groups, so a half's fold runs
 *   while the other half's wgmmas are on the tensor cores: wait for lo(k),
 *   fold it, issue lo(k + 1); wait for hi(k), fold it, issue hi(k + 1).
 *   A fragments are double-buffered (a step's registers stay read by its
 *   wgmmas until they are waited for).
 * 4 bits, f16 / bf16 scales, groups of 64 or 128, cols % 64 == 0
 * (wg_use); others take impl 8. */
#define WG_BK 64
#define WG_NS 5
#define WG_CLD 48 /* code bytes per row per stage (32 used): conflict-free reads */
#define WG_XB (128 * WG_BK * 2) /* one x term of a stage */
#define WG_STAGE (TG_BM * WG_CLD + 2 * WG_XB)
#define WG_SMEM (WG_NS * WG_STAGE + 1024) /* + alignment of the swizzle atoms */

/* Staged position p (0..31) of a block of 32 columns holds column
 * wg_perm(p): thread tig's A registers of k step h (0, 1) are pairs
 * (nibble t, t + 4), t = 2h, 2h + 1, of packed word tig of the block */
static __host__ __device__ __forceinline__ int wg_perm(int p)
{
	return 8 * ((p >> 1) & 3) + 2 * (p >> 4) + ((p >> 3) & 1) + 4 * (p & 1);
}

static __device__ __forceinline__ void wg_fence(void)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
	asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
static __device__ __forceinline__ void wg_commit(void)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
	asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
static __device__ __forceinline__ void wg_wait(void)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
	asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
/* keep the compiler from moving register reads / writes across a wgmma
 * fence or wait (the registers are the wgmma's, not the compiler's) */
template <int N>
static __device__ __forceinline__ void wg_pin(float (&r)[N])
{
#pragma unroll
	for (int i = 0; i < N; i++)
		asm volatile("" : "+f"(r[i])::"memory");
}
static __device__ __forceinline__ void wg_pin(uint32_t (&r)[4][4])
{
#pragma unroll
	for (int i = 0; i < 16; i++)
		asm volatile("" : "+r"(r[i / 4][i % 4])::"memory");
}

/* d (+)= A B, m64n64k16, A = a (this thread's fragment), B through desc;
 * zero: d = A B */
static __device__ __forceinline__ void wg_mma(float (&d)[32], const uint32_t (&a)[4], uint64_t desc, int zero)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
	asm volatile("{\n.reg .pred p;\nsetp.eq.s32 p, %37, 0;\n"
		     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
		     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
		       "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
		       "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
		       "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(zero));
#else
	(void)d; (void)a; (void)desc; (void)zero;
#endif
}

/* descriptor of a K-major 128B-swizzled tile at shared address addr
 * (8-token atoms 1024 bytes apart: SBO; LBO unused) */
static __device__ __forceinline__ uint64_t wg_desc(uint32_t addr)
{
	return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

template <class S, int G>
__global__ void __launch_bounds__(256, 1)
	k_gemm_wg(const tg_mats M, int cols, const __half *__restrict__ XH, const __half *__restrict__ XL,
		  const float *__restrict__ XS, const float *__restrict__ INV, int n)
{
	static_assert(G == 64 || G == 128, "groups of 64 or 128");
	extern __shared__ __align__(16) uint8_t tsm_raw[];
	/* the swizzle atoms (1024 bytes) must be 1024-aligned */
	uint8_t *tsm = tsm_raw + ((1024 - (smem_u32(tsm_raw) & 1023)) & 1023);
	constexpr bool BF = std::is_same<S, BF16>::value;
	constexpr float SC = 0.00390625f; /* acc in units of 2^-8 (bias term on the tensor cores) */
	const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7, w = (tid >> 5) & 3, g = lane >> 2, tig = lane & 3;
	const uint8_t *W;
	const void *SB;
	int rows, t0;
	tg_block_mat(M, W, SB, rows, t0);
	const int tok0 = blockIdx.x * 128, row0 = ((int)blockIdx.y - t0) * TG_BM;
	const int ngp = sb_ngp(cols, G), tsh = sb_tsh(G);
	/* split-K as k_gemm_tc's BT & 4 (gridDim.z 1 or 2; halves of whole groups) */
	const int kspan = cols / (int)gridDim.z, kbase = (int)blockIdx.z * kspan, nk = kspan / WG_BK;
	const uint32_t smem0 = smem_u32(tsm);
	/* copies: codes, one 16-byte piece per thread (row tid / 2); x, 4
	 * pieces per term: piece p = tid + 256 u is token row 8 ((tid >> 6) +
	 * 4 u) + (tid & 7), 16-byte piece xcb = (tid >> 3) & 7, stored at
	 * piece xcb ^ (tid & 7) of its row */
	const uint8_t *wsrc = W + (size_t)min(row0 + (tid >> 1), rows - 1) * ((size_t)cols / 2) + kbase / 2 + (tid & 1) * 16;
	const uint32_t cdst = smem0 + (tid >> 1) * WG_CLD + (tid & 1) * 16;
	const int xcb = (tid >> 3) & 7;
	const uint32_t xdst = smem0 + TG_BM * WG_CLD + ((tid >> 6) * 8 + (tid & 7)) * 128 + ((xcb ^ (tid & 7)) * 16);
	const __half *xh[4], *xl[4];
#pragma unroll
	for (int u = 0; u < 4; u++) {
		const size_t o = (size_t)min(tok0 + ((tid >> 6) + 4 * u) * 8 + (tid & 7), n - 1) * cols + kbase + xcb * 8;
		xh[u] = XH + o;
		xl[u] = XL + o;
	}
	auto issue = [&](int kt, int stg) {
		const uint32_t sb = stg * WG_STAGE;
		cp_async<16>(cdst + sb, wsrc + (size_t)kt * 32);
#pragma unroll
		for (int u = 0; u < 4; u++) {
			cp_async<16>(xdst + sb + u * 4096, xh[u] + kt * WG_BK);
			cp_async<16>(xdst + sb + WG_XB + u * 4096, xl[u] + kt * WG_BK);
		}
	};
	/* this thread's rows (block-local): r = 64 wg + 16 w + g, r + 8 */
	const int rl = 64 * wg + 16 * w + g;
	const uint32_t crd = rl * WG_CLD + 4 * tig;
	const uint64_t d0 = wg_desc(smem0 + TG_BM * WG_CLD);
	float acc[64], P[2][32];
#pragma unroll
	for (int j = 0; j < 64; j++)
		acc[j] = 0.0f;
	uint32_t sw[2][S::SW];
	auto load_group = [&](int gi) {
#pragma unroll
		for (int h = 0; h < 2; h++)
			sb_words<S>(SB, sb_at(min(row0 + rl + 8 * h, rows - 1), gi, ngp, tsh), sw[h]);
	};
	/* the A fragments of step kt (its stage's codes) */
	auto dequant = [&](int stg, uint32_t(&a)[4][4]) {
		const uint8_t *cs = tsm + stg * WG_STAGE + crd;
		uint32_t wd[2][2]; /* [row half][32-column block] */
		wd[0][0] = *(const uint32_t *)cs;
		wd[0][1] = *(const uint32_t *)(cs + 16);
		wd[1][0] = *(const uint32_t *)(cs + 8 * WG_CLD);
		wd[1][1] = *(const uint32_t *)(cs + 8 * WG_CLD + 16);
#pragma unroll
		for (int s = 0; s < 4; s++) {
			const int b = s >> 1, t = 2 * (s & 1);
			a[s][0] = tg_int_pair(and_or<0x000F000Fu, 0x64006400u>(wd[0][b] >> (4 * t)));
			a[s][1] = tg_int_pair(and_or<0x000F000Fu, 0x64006400u>(wd[1][b] >> (4 * t)));
			a[s][2] = tg_int_pair(and_or<0x000F000Fu, 0x64006400u>(wd[0][b] >> (4 * t + 4)));
			a[s][3] = tg_int_pair(and_or<0x000F000Fu, 0x64006400u>(wd[1][b] >> (4 * t + 4)));
		}
		wg_pin(a);
	};
	/* Straight-line wgmma code only: where paths with different wgmma
	 * groups in flight join before an accumulator read, ptxas serialized
	 * every wgmma (C7514; session 11). So the step's parity (odd: the
	 * second step of a group of 128) is a compile-time value (ODD), and
	 * the last step is its own code (no "more" branch). */
	/* token half h of step kt: 4 k steps x (hi, lo), one wgmma group; P
	 * starts from zero at a group's first step */
	auto mma_half = [&](auto odd, int stg, int h, const uint32_t(&a)[4][4]) {
		constexpr bool ZERO = G == 64 || !decltype(odd)::value; /* kbase is a multiple of G */
		const uint64_t ds = d0 + (uint64_t)((stg * WG_STAGE + h * 8192) >> 4);
#pragma unroll
		for (int s = 0; s < 4; s++) {
			wg_mma(P[h], a[s], ds + (uint64_t)((s * 32) >> 4), ZERO && s == 0);
			wg_mma(P[h], a[s], ds + (uint64_t)((WG_XB + s * 32) >> 4), 0);
		}
		wg_commit();
	};
	/* acc half h += s P[h] where the step ends a group */
	auto fold = [&](auto odd, int h) {
		if constexpr (G == 64 || decltype(odd)::value) {
			wg_pin(P[h]);
			float sv[2];
#pragma unroll
			for (int r = 0; r < 2; r++)
				sv[r] = S::ps(sw[r]) * SC;
#pragma unroll
			for (int j = 0; j < 32; j++)
				acc[32 * h + j] = fmaf(sv[(j >> 1) & 1], P[h][j], acc[32 * h + j]);
			wg_pin(P[h]);
		}
	};
	/* one step with a next: lo(kt) and hi(kt) are in flight on a; the
	 * next step's fragments go to an */
	auto step = [&](auto odd, int kt, int stg, uint32_t(&a)[4][4], uint32_t(&an)[4][4]) {
		using NX = std::integral_constant<bool, !decltype(odd)::value>;
		const int stn = stg + 1 == WG_NS ? 0 : stg + 1;
		/* first, while lo(kt) and hi(kt) of both warpgroups are queued on
		 * the tensor cores: step kt + 1's copies, the barrier, the refill
		 * and an (hi(kt - 1), the last reader of an and of step kt - 1's
		 * stage, was waited for in the previous step, by every thread
		 * before this barrier) */
		cp_wait<WG_NS - 3>(); /* this thread's copies of step kt + 1 */
		asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
		__syncthreads(); /* everyone's */
		if (kt + WG_NS - 1 < nk)
			issue(kt + WG_NS - 1, stg == 0 ? WG_NS - 1 : stg - 1);
		cp_commit();
		dequant(stn, an);
		wg_wait<1>(); /* lo(kt) (and everything before it) */
		fold(odd, 0);
		wg_fence();
		mma_half(NX(), stn, 0, an);
		wg_wait<1>(); /* hi(kt) */
		fold(odd, 1);
		if (G == 64 || decltype(odd)::value)
			load_group((kbase + (kt + 1) * WG_BK) / G);
		wg_fence();
		mma_half(NX(), stn, 1, an);
		return stn;
	};
	auto last = [&](auto odd) { /* the last step: lo and hi in flight */
		wg_wait<1>();
		fold(odd, 0);
		wg_wait<0>();
		fold(odd, 1);
	};
	using EVEN = std::integral_constant<bool, false>;
	using ODD = std::integral_constant<bool, true>;

#pragma unroll
	for (int s = 0; s < WG_NS - 1; s++) {
		if (s < nk)
			issue(s, s);
		cp_commit();
	}
	load_group(kbase / G);
	uint32_t a0[4][4], a1[4][4];
	cp_wait<WG_NS - 2>();
	asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
	__syncthreads();
	dequant(0, a0);
	wg_fence();
	mma_half(EVEN(), 0, 0, a0);
	mma_half(EVEN(), 0, 1, a0);
	int stg = 0, kt = 0;
	for (; kt + 2 < nk; kt += 2) {
		stg = step(EVEN(), kt, stg, a0, a1);
		stg = step(ODD(), kt + 1, stg, a1, a0);
	}
	if (kt + 1 < nk) { /* two steps left (always for groups of 128: nk is even) */
		step(EVEN(), kt, stg, a0, a1);
		last(ODD());
	} else {
		last(EVEN());
	}
	/* the bias term: 16 groups per mma.sync (b as A, the x sums as B),
	 * this warp's 16 rows x 16 token tiles of 8 */
	{
		const int ng = (kbase + kspan) / G;
		for (int g0 = kbase / G; g0 < ng; g0 += 16) {
			uint32_t ab[4];
#pragma unroll
			for (int h = 0; h < 2; h++)
#pragma unroll
				for (int q = 0; q < 2; q++) {
					const int row = min(row0 + rl + 8 * h, rows - 1), k = g0 + 2 * tig + 8 * q;
					float s_, b0 = 0.0f, b1 = 0.0f;
					if (k < ng)
						S::ldp(SB, sb_at(row, k, ngp, tsh), s_, b0);
					if (k + 1 < ng)
						S::ldp(SB, sb_at(row, k + 1, ngp, tsh), s_, b1);
					ab[h + 2 * q] = BF ? tg_b2(b0, b1) : tg_h2(b0, b1);
				}
#pragma unroll
			for (int ni = 0; ni < 16; ni++) {
				const int tok = min(tok0 + ni * 8 + g, n - 1);
				uint32_t xb[3][2];
#pragma unroll
				for (int q = 0; q < 2; q++)
					tg_xsum_terms<BF>(XS, n, tok, g0 + 2 * tig + 8 * q, ng, SC, xb[0][q], xb[1][q], xb[2][q]);
				float(&c)[4] = *(float(*)[4])(acc + 4 * ni);
#pragma unroll
				for (int p = 0; p < (BF ? 3 : 2); p++) {
					if (BF)
						tg_mma_bf(c, ab, xb[p]);
					else
						tg_mma(c, ab, xb[p]);
				}
			}
		}
	}
	const float *bias;
	float *Y;
	tg_block_out(M, bias, Y);
	float bz[2];
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const int row = row0 + rl + 8 * h;
		bz[h] = bias && row < rows && blockIdx.z == 0 ? __ldg(bias + row) : 0.0f;
	}
#pragma unroll
	for (int ni = 0; ni < 16; ni++)
#pragma unroll
		for (int e = 0; e < 2; e++) {
			const int tok = tok0 + ni * 8 + 2 * tig + e;
			if (tok >= n)
				continue;
			const float iz = __ldg(INV + tok) * (1.0f / SC);
			float *yr = Y + (size_t)tok * rows;
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const int row = row0 + rl + 8 * h;
				if (row >= rows)
					continue;
				const float v = fmaf(acc[4 * ni + 2 * h + e], iz, bz[h]);
				if (gridDim.z > 1)
					atomicAdd(yr + row, v);
				else
					yr[row] = v;
			}
		}
}

template <int BITS, class S>
static void mv_launch(const mv_args &a, int blocks, const float *x)
{
	k_matvec_q<BITS, S><<<blocks, 32 * KC_MV_WARPS, 0, g_stream>>>(a, x);
}

template <class S>
static int mv_dispatch(int bits, const mv_args &a, int blocks, const float *x)
{
	switch (bits) {
	case 2: mv_launch<2, S>(a, blocks, x); break;
	case 3: mv_launch<3, S>(a, blocks, x); break;
	case 4: mv_launch<4, S>(a, blocks, x); break;
	case 5: mv_launch<5, S>(a, blocks, x); break;
	case 6: mv_launch<6, S>(a, blocks, x); break;
	case 8: mv_launch<8, S>(a, blocks, x); break;
	default: snprintf(g_err, sizeof(g_err), "matvec: bits %d unsupported", bits); return -1;
	}
	LAUNCHED("k_matvec_q");
	return 0;
}

template <int BITS, class S>
static void gemm_launch(const kq_matrix *m, const float *x, int n, const float *bias, float *y)
{
	dim3 grid((m->rows + GM - 1) / GM, (n + GN - 1) / GN);
	k_gemm<BITS, S><<<grid, 256, 0, g_stream>>>(m->w, m->scales, m->rows, m->cols, m->group_size, x, n, bias, y);
}

template <class S>
static int gemm_dispatch(const kq_matrix *m, const float *x, int n, const float *bias, float *y)
{
	switch (m->bits) {
	case 0: gemm_launch<0, S>(m, x, n, bias, y); break;
	case 2: gemm_launch<2, S>(m, x, n, bias, y); break;
	case 3: gemm_launch<3, S>(m, x, n, bias, y); break;
	case 4: gemm_launch<4, S>(m, x, n, bias, y); break;
	case 5: gemm_launch<5, S>(m, x, n, bias, y); break;
	case 6: gemm_launch<6, S>(m, x, n, bias, y); break;
	case 8: gemm_launch<8, S>(m, x, n, bias, y); break;
	default: snprintf(g_err, sizeof(g_err), "gemm: bits %d unsupported", m->bits); return -1;
	}
	LAUNCHED("k_gemm");
	return 0;
}

/* The kc_*_impl switches (kernel variants for tests and benchmarks): set
 * *var to impl when impl >= 0, return the previous value. */
static int impl_swap(int *var, int impl)
{
	int old = *var;
	if (impl >= 0)
		*var = impl;
	return old;
}

static int g_mv_impl; /* kc_matvec_impl */
static int g_cp_w, g_cp_ns; /* MLXR_CUDA_CP=W,NS: k_matvec_cp's warps per block and stages (benchmarks) */
static int g_smem_block = 227 << 10; /* the device's opt-in shared memory a block (mq_cp_setup) */
static int g_smem_optin = 223 << 10; /* k_matvec_cp's dynamic shared memory per block: the opt-in limit less its static */

extern "C" int kc_matvec_impl(int impl)
{
	return impl_swap(&g_mv_impl, impl);
}

/* PDL on an adding k_matvec_i8 behind its k_mi_prep (MLXR_CUDA_MI_PDL=1;
 * the other adding matvecs: see mq_pdl). Run
 * 30 (us): o 6.85 -> 5.59 with it, down 16.0 -> 17.6; models under impl 8
 * 409 -> 411 tok/s (8B @16), within noise. */
static int g_mi_pdl_add;

/* PDL for this launch (launch_ex). The adding launches (o, down) lost
 * with it (runs 24, 36: 8B 446 -> 410 tok/s), except the one right after
 * gate/up + GLU when its tiles take at most one block per SM (run 37,
 * call 5, tok/s @16: the 1B down, 128 tiles: 1B 1770 -> 1839; the 8B
 * down, 256 tiles, 8B 499 -> 487). MLXR_CUDA_PDL_ADD: 0 none, 1 every
 * adding launch, 2 the one after gate/up + GLU whatever its tiles; other
 * values: the default rule. A staged int8 launch (a.pre: k_mi_prep runs
 * between it and the GLU) keeps its own switch. The flags only choose the
 * attribute: every matvec kernel waits (pdl_wait) before it reads x or
 * the residual, so a stale flag (a GLU launch that failed, other kernels
 * in between) costs speed, never results. */
static int g_prev_glu; /* the previous tensor-core matvec launch was gate/up + GLU (mq_dispatch) */
static int g_after_glu; /* this one directly follows it */

static int mq_pdl(const mv_args &a)
{
	if (!a.add)
		return g_pdl;
	if (a.pre)
		return g_pdl_add == 1 || g_mi_pdl_add;
	switch (g_pdl_add) {
	case 0: return 0;
	case 1: return 1;
	case 2: return g_after_glu;
	default: return g_after_glu && a.tiles <= g_sms;
	}
}

/* k_matvec_cp for this launch: 1 when it does not fit (x, red and a ring
 * of 2 stages over the shared memory of a block), else 0 (launched) or
 * -1. W = 4 warps per block (8 under kc_matvec_impl(5)); MLXR_CUDA_CP
 * sets W and the stages (or fewer where they do not fit). */
template <int BITS, class S, int NM, int NORM>
static int mq_launch_cp(mv_args a, const float *x, size_t xsmem)
{
	const int W = g_cp_w ? g_cp_w : g_mv_impl == 5 ? 8 : 4;
	const size_t stage = mq_stage_bytes(BITS, __builtin_ffs(a.group >> 5) - 1, S::SW);
	const size_t fixed = xsmem + (size_t)2 * NM * W * MQ_ROWS * 4; /* x, red */
	/* stages: the most of 4..2 at the highest occupancy they allow (run
	 * 27: time fell with more warps per SM, not with more stages; 4096
	 * columns: 2 stages, 4 blocks per SM; 14336: 2 stages, 2 blocks) */
	int ns = 0, best = 0;
	for (int n = g_cp_ns ? g_cp_ns : 4; n >= 2 && !(g_cp_ns && ns); n--) {
		const size_t sm = fixed + W * n * stage;
		int occ = 0;
		if (sm > (size_t)g_smem_optin ||
		    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_matvec_cp<BITS, S, NM, NORM>, 32 * W, sm) !=
			    cudaSuccess)
			continue;
		if (occ > best) {
			best = occ;
			ns = n;
		}
	}
	if (!ns)
		return 1;
	const size_t smem = fixed + W * ns * stage;
	a.ns = ns;
	const int grid = a.tiles < best * g_sms ? a.tiles : best * g_sms;
	CK(launch_ex(mq_pdl(a), k_matvec_cp<BITS, S, NM, NORM>, dim3(grid), dim3(32 * W), smem, a,
		     x));
	return 0;
}

/* tiles x matrices from which the default (kc_matvec_impl(0)) takes
 * k_matvec_i8 for 4 bits: launches of many tiles per block (the grid is
 * resident, so each block stages x once for many tiles). Run 29 (same
 * call, us): lm_head 128256 x 4096 90.9 -> 75.8 (fused norm 93.3 ->
 * 77.4), but one tile per block it loses: down 4096 x 14336 18.7 -> 25.4,
 * qkv 7.0 -> 7.2 (its staging of x, about 3x k_matvec_mma's instructions
 * per value, is paid per tile there); the models under impl 6 / 7 (every
 * 4-bit launch / all but gate/up+GLU on k_matvec_i8): 8B @16 398 / 393
 * tok/s against the default's 427.
 * Run 30, x staged once per launch (k_mi_prep, impls 8-10), us as the
 * decode step launches them (default in brackets): o 6.85 (7.36), down
 * 16.0 (16.7) win, but the normed ones lose (qkv 10.5 (7.7), GLU 28.6
 * (28.5), lm_head 79.1 (77.4)) and the models with it on every 4-bit
 * launch ran 8B @16 409 tok/s (430): not the default (see k_mi_prep). */
#define MI_MIN 4096

/* k_mi_prep's output, k_matvec_i8's input under impls 8-10: one image of
 * staged x (mi_smem_bytes(cols) + MI_PART <= MQ_SMEM_MAX bytes), allocated
 * once at kc_init (a captured decode step replays its address). The
 * stream orders its uses: k_mi_prep waits (pdl_wait) for the previous
 * k_matvec_i8 to complete before it writes (every PDL-launched kernel
 * between them waits for its own predecessor before it ends). */
static void *g_mi_x;
/* Allocated whether or not impls 8-10 will run (kc_matvec_impl may select
 * them at any time after kc_init, and the sandboxed worker may not
 * allocate later); freed only when kc_init fails (there is no teardown:
 * process exit releases it). */
static void mi_free(void)
{
	cudaFree(g_mi_x);
	g_mi_x = NULL;
}

/* Launches a split kernel (k_matvec_mma, k_matvec_i8): one block per row
 * tile, or a resident grid when the tiles are many (8 waves or more). */
static int mq_launch_split(void (*kern)(mv_args, const float *), const mv_args &a, const float *x, size_t smem,
			   int W = MQ_WARPS, bool resident = false)
{
	int occ = 0;
	if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, 32 * W, smem) != cudaSuccess || occ < 1)
		occ = 1;
	int cap = occ * g_sms, grid = a.tiles >= (resident ? 1 : 8) * cap ? cap : a.tiles;
	CK(launch_ex(mq_pdl(a), kern, dim3(grid), dim3(32 * W), smem, a, x));
	return 0;
}

/* The split kernel's 4-bit single-matrix launches with 8 warps per block,
 * each warp's unit HN of a step's 4 h: HN = 4 from 8 steps per tile, else
 * 2. Run 36: with MQ_WARPS (4) a launch
 * of one tile per SM runs ~1 warp per scheduler, each waiting on its own
 * dependent instructions (ncu, run 35); 8 warps (1 block per SM: ~155
 * registers) cut the 1B down (128 tiles) 8.3 -> 7.3 us as the step
 * launches it, but launches of more tiles than SMs lose a wave (8B q/k/v,
 * 384 tiles: 7.8 -> 13.1 us; forced everywhere: 8B 439 -> 381 tok/s, and
 * 16 warps 346), and capping W = 8 at 128 registers (2
 * blocks per SM) lost more than it gained (1B 1655 -> 1645, 8B 439 ->
 * 427 tok/s). So the default (g_mqw 0) takes W = 8 where the launch's
 * tiles all get a block slot at that kernel's own occupancy (HN = 4: ~155
 * registers, 1 block per SM; HN = 2: ~121, 2); MLXR_CUDA_MQW=4 / 8
 * forces W. Returns 1 where it declines. */
template <class S, int NORM>
static int mq_launch_w(const mv_args &a, const float *x, size_t smem)
{
	const bool whole = (a.cols / 32 + 15) / 16 >= 8; /* HN = 4 gives each of the 8 warps a unit */
	void (*kern)(mv_args, const float *) = whole ? k_matvec_mma<4, S, 1, NORM, 8, 4> : k_matvec_mma<4, S, 1, NORM, 8, 2>;
	/* by shape: only where every tile has a block slot (one wave), at HN = 2
	 * (fewer registers) where HN = 4's occupancy is short */
	for (int k = 0; !g_mqw; k++) {
		int occ = 0;
		if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, 256, smem) == cudaSuccess &&
		    a.tiles <= occ * g_sms)
			break;
		if (k || !whole || g_mqh)
			return 1;
		kern = k_matvec_mma<4, S, 1, NORM, 8, 2>;
	}
	return mq_launch_split(kern, a, x, smem, 8);
}

/* gate/up + GLU on the split kernel at W = 8, HN = 2 (GLUW 1: HN = 4 from
 * 8 steps), a resident grid (x staged once per block), instead of
 * k_matvec_cp. Run 36 (call 8, tok/s @16): 1B (2048 columns: 8 units per
 * tile and matrix, one per warp) 1686-1688 -> 1723-1729; 8B (4096) 447.5
 * -> 442 at HN = 2, 413 at HN = 4. So the default takes it up to 2048
 * columns only (g_gluw -1); MLXR_CUDA_GLUW=0 never, =1 / =2 always. */
template <class S, int NORM>
static int mq_launch_glu_w(const mv_args &a, const float *x, size_t smem)
{
	const int nsteps = (a.cols / 32 + 15) / 16;
	return mq_launch_split(nsteps >= 8 && g_gluw == 1 ? k_matvec_mma<4, S, 2, NORM, 8, 4>
						     : k_matvec_mma<4, S, 2, NORM, 8, 2>,
			       a, x, smem, 8, true);
}

/* k_mi_prep for a k_matvec_i8 launch: x (normed: a.nw) into g_mi_x.
 * Returns its block count (the per-block sums, NORM), or -1. */
template <int CPG, int NORM>
static int mi_prep(const mv_args &a, const float *x)
{
	const int nsteps = (a.cols / 32 + 15) / 16, nb = nsteps * 64 / MI_PB;
	CK(launch_ex(g_pdl, k_mi_prep<CPG, NORM>, dim3(nb), dim3(MI_PB), 0, x, a.nw, a.one, (a.vec & 2) ? 1 : 0,
		     a.cols / 32, nsteps, (uint8_t *)g_mi_x));
	return nb;
}

/* k_matvec_i8 (4 bits) for this launch: 1 when its staged x does not fit
 * (then k_matvec_mma takes it: it takes every launch mq_ok allows), else 0
 * (launched) or -1. One block per row tile, as k_matvec_mma. pre: x
 * staged once by k_mi_prep (impls 8-10), else by every block. */
template <class S, int NM, int NORM>
static int mi_launch(mv_args a, const float *x, bool pre)
{
	/* MI_PART only for k_mi_prep's per-block sums: the in-block staging (the
	 * default's lm_head launch) keeps run 29's shared memory */
	const size_t smem = mi_smem_bytes(a.cols) + (pre ? MI_PART : 0);
	if (smem > MQ_SMEM_MAX)
		return 1;
	if (pre) {
		const int nb = a.group == 32 ? mi_prep<0, NORM>(a, x) : a.group == 64 ? mi_prep<1, NORM>(a, x)
										      : mi_prep<2, NORM>(a, x);
		if (nb < 0)
			return nb;
		a.pre = nb;
		x = (const float *)g_mi_x;
	}
	switch (a.group) {
	case 32: return mq_launch_split(k_matvec_i8<S, 0, NM, NORM>, a, x, smem);
	case 64: return mq_launch_split(k_matvec_i8<S, 1, NM, NORM>, a, x, smem);
	default: return mq_launch_split(k_matvec_i8<S, 2, NM, NORM>, a, x, smem);
	}
}

template <int BITS, class S, int NM, int NORM>
static int mq_launch(const mv_args &a, const float *x, size_t smem)
{
	const bool cp_shape = a.tiles * NM >= MQ_CP_MIN && a.tiles * NM < MQ_CP_MAX; /* the default's k_matvec_cp */
	const int im = g_mv_impl;
	if constexpr (BITS == 4 && NM == 2)
		if (cp_shape && (g_gluw > 0 || (g_gluw < 0 && im == 0 && a.cols <= 2048)))
			return mq_launch_glu_w<S, NORM>(a, x, smem);
	if (im == 4 || im == 5 || ((im == 0 || im == 7 || im == 9 || im == 10) && cp_shape)) {
		const int rc = mq_launch_cp<BITS, S, NM, NORM>(a, x, smem);
		if (rc <= 0)
			return rc;
	}
	if constexpr (BITS == 4) {
		/* impl 10: the default with k_mi_prep + k_matvec_i8 for the
		 * adding launches (o, down) */
		const bool pre = im == 8 || im == 9 || (im == 10 && a.add);
		if ((im >= 6 && im <= 9) || ((im == 0 || im == 10) && a.tiles * NM >= MI_MIN) || pre) {
			const int rc = mi_launch<S, NM, NORM>(a, x, pre);
			if (rc <= 0)
				return rc;
		}
	}
	/* Many tiles (lm_head, gate/up: tiles x NM >= MQ_WT_MIN): warp-owned
	 * tiles, a resident grid. Otherwise one block per row tile, its warps
	 * splitting the columns (4096 rows make 256 tiles: ~2 blocks per SM). */
	if constexpr (BITS == 4) { /* 8 bits: two register sets would spill */
		if (a.tiles * NM >= MQ_WT_MIN && g_mv_impl == 3) {
			int occ = 0;
			if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_matvec_wt<BITS, S, NM, NORM>,
									   32 * MQ_WARPS, smem) != cudaSuccess || occ < 1)
				occ = 1;
			int need = (a.tiles + MQ_WARPS - 1) / MQ_WARPS, grid = need < occ * g_sms ? need : occ * g_sms;
			CK(launch_ex(mq_pdl(a), k_matvec_wt<BITS, S, NM, NORM>, dim3(grid),
				     dim3(32 * MQ_WARPS), smem, a, x));
			return 0;
		}
	}
	if constexpr (BITS == 4 && NM == 1)
		if (g_mqw != MQ_WARPS) {
			const int rc = mq_launch_w<S, NORM>(a, x, smem);
			if (rc <= 0)
				return rc;
		}
	return mq_launch_split(k_matvec_mma<BITS, S, NM, NORM>, a, x, smem);
}

template <class S>
static int mq_dispatch(int bits, const mv_args &a, const float *x, int glu)
{
	size_t smem = (size_t)(a.cols / 32) * MQ_CW * 4 + 64; /* + the zero B fragment */
	g_after_glu = g_prev_glu;
	g_prev_glu = glu;
	if (a.nw) {
		if (bits == 4)
			return glu ? mq_launch<4, S, 2, 1>(a, x, smem) : mq_launch<4, S, 1, 1>(a, x, smem);
		return glu ? mq_launch<8, S, 2, 1>(a, x, smem) : mq_launch<8, S, 1, 1>(a, x, smem);
	}
	if (bits == 4)
		return glu ? mq_launch<4, S, 2, 0>(a, x, smem) : mq_launch<4, S, 1, 0>(a, x, smem);
	return glu ? mq_launch<8, S, 2, 0>(a, x, smem) : mq_launch<8, S, 1, 0>(a, x, smem);
}

/* The staged x may take more than the default 48 KB of shared memory. */
template <class S, int N>
static int mq_attr_norm(void)
{
	CK(cudaFuncSetAttribute(k_matvec_mma<4, S, 1, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, MQ_SMEM_MAX));
	CK(cudaFuncSetAttribute(k_matvec_mma<4, S, 2, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, MQ_SMEM_MAX));
	CK(cudaFuncSetAttribute(k_matvec_mma<8, S, 1, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, MQ_SMEM_MAX));
	CK(cudaFuncSetAttribute(k_matvec_mma<8, S, 2, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, MQ_SMEM_MAX));
	CK(cudaFuncSetAttribute(k_matvec_i8<S, 0, 1, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, MQ_SMEM_MAX));
	CK(cudaFuncSetAttribute(k_matvec_i8<S, 0, 2, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, MQ_SMEM_MAX));
	CK(cudaFuncSetAttribute(k_matvec_i8<S, 1, 1, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, MQ_SMEM_MAX));
	CK(cudaFuncSetAttribute(k_matvec_i8<S, 1, 2, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, MQ_SMEM_MAX));
	CK(cudaFuncSetAttribute(k_matvec_i8<S, 2, 1, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, MQ_SMEM_MAX));
	CK(cudaFuncSetAttribute(k_matvec_i8<S, 2, 2, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, MQ_SMEM_MAX));
	CK(cudaFuncSetAttribute(k_matvec_wt<4, S, 1, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, MQ_SMEM_MAX));
	CK(cudaFuncSetAttribute(k_matvec_wt<4, S, 2, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, MQ_SMEM_MAX));
	CK(cudaFuncSetAttribute(k_matvec_cp<4, S, 1, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, g_smem_optin));
	CK(cudaFuncSetAttribute(k_matvec_cp<4, S, 2, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, g_smem_optin));
	CK(cudaFuncSetAttribute(k_matvec_cp<8, S, 1, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, g_smem_optin));
	CK(cudaFuncSetAttribute(k_matvec_cp<8, S, 2, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, g_smem_optin));
	CK(cudaFuncSetAttribute(k_matvec_mma<4, S, 1, N, 8, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, MQ_SMEM_MAX));
	CK(cudaFuncSetAttribute(k_matvec_mma<4, S, 1, N, 8, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, MQ_SMEM_MAX));
	CK(cudaFuncSetAttribute(k_matvec_mma<4, S, 2, N, 8, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, MQ_SMEM_MAX));
	CK(cudaFuncSetAttribute(k_matvec_mma<4, S, 2, N, 8, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, MQ_SMEM_MAX));
	return 0;
}

/* The device's shared-memory limit and MLXR_CUDA_CP ("W,NS": k_matvec_cp's
 * warps per block, 4 or 8, and ring stages, 2..MQ_CP_MAXNS; for
 * benchmarks), once. */
static int mq_cp_setup(void)
{
	static int done;
	if (done)
		return 0;
	int dev = 0, v = 0;
	CK(cudaGetDevice(&dev));
	CK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
	g_smem_block = v;
	g_smem_optin = v - (4 << 10); /* dynamic + static (red, nss: <= 2.1 KB) must fit the opt-in limit */
	const char *e = getenv("MLXR_CUDA_CP");
	int w = 0, n = 0;
	if (e && sscanf(e, "%d,%d", &w, &n) == 2 && (w == 4 || w == 8) && n >= 2 && n <= MQ_CP_MAXNS) {
		g_cp_w = w;
		g_cp_ns = n;
	}
	done = 1;
	return 0;
}

template <class S>
static int mq_attr(void)
{
	return mq_cp_setup() || mq_attr_norm<S, 0>() || mq_attr_norm<S, 1>() ? -1 : 0;
}

/* ---- prefill GEMM: host side ----
 * The split X (k_xsplit) lives in one process-wide scratch buffer, grown
 * on demand (kc_linear_reserve sizes it up front, before a sandbox closes
 * the door on allocations); the stream orders its uses. */
static void *g_tg_ws;
static size_t g_tg_ws_bytes;
static int g_gemm_impl; /* kc_gemm_impl */

struct tg_x {
	const __half *xh, *xl;
	const float *xs, *inv;
	int n, cols, group, bits;
	int wg; /* staged for k_gemm_wg (wg_perm order) */
};

static size_t tg_ws_bytes(int n, int cols, int group)
{
	return (size_t)n * cols * 4 + (size_t)n * (cols / group) * 4 + (size_t)n * 4;
}

static int tg_reserve(size_t bytes)
{
	if (bytes <= g_tg_ws_bytes)
		return 0;
	CK(cudaStreamSynchronize(g_stream)); /* queued GEMMs may still read the old one */
	if (g_tg_ws)
		cudaFree(g_tg_ws);
	g_tg_ws = NULL;
	g_tg_ws_bytes = 0;
	bytes = (bytes + (1 << 20) - 1) & ~(size_t)((1 << 20) - 1);
	CK(cudaMalloc(&g_tg_ws, bytes));
	g_tg_ws_bytes = bytes;
	return 0;
}

extern "C" int kc_linear_reserve(int n, int cols)
{
	if (n < 1 || cols < 32)
		return 0;
	return tg_reserve(tg_ws_bytes(n, cols, 32));
}

extern "C" int kc_gemm_impl(int impl)
{
	if (impl == 9 || impl > 13) /* no such variant (9: rejected in run 31) */
		return -1;
	return impl_swap(&g_gemm_impl, impl);
}

/* The tensor-core GEMM takes every quantized matrix (bits 2..8, any group,
 * any scale dtype) whose codes start 16-byte aligned; dense weights take k_gemm. */
static int tg_ok(const kq_matrix *m)
{
	return g_gemm_impl != 1 && m->bits >= 2 && !((uintptr_t)m->w & 15);
}

static int tg_impl(void);
/* kc_gemm_impl 10-12: x as one f16 term (k steps of 64 only: tg_launch) */
static int tg_one_term(int impl) { return impl >= 10 && impl <= 12; }

/* kc_gemm_impl(13): k_gemm_wg takes count matrices on one split x where the
 * device runs sm_90a code, the codes are 4 bits in groups of 64 or 128,
 * cols % 64 == 0 and every scale dtype is f16 or bf16 (the bias term on
 * the tensor cores); else impl 8's kernel */
static int wg_use(int count, const kq_matrix *const *ms)
{
	if (tg_impl() != 13 || !g_wg_ok || ms[0]->bits != 4 || ms[0]->cols % 64 ||
	    (ms[0]->group_size != 64 && ms[0]->group_size != 128))
		return 0;
	for (int i = 0; i < count; i++)
		if (ms[i]->sdt != KDT_F16 && ms[i]->sdt != KDT_BF16)
			return 0;
	return 1;
}

/* k_xsplit<true> may take up to the opt-in shared memory (mq_init, after mq_cp_setup) */
static int xs_attr(void)
{
	CK(cudaFuncSetAttribute(k_xsplit<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, g_smem_optin));
	return 0;
}

/* x split for n tokens (with u: of glu_act(x, act) * u) */
static int tg_split(const float *x, int n, int cols, int group, int bits, int wg, tg_x *o, const float *u = NULL,
		    int act = 0)
{
	if (group != 32 && group != 64 && group != 128) /* k_xsplit: group / 8 lanes of a warp add a group's sums */
		return fail("k_xsplit: group size not 32, 64 or 128", cudaErrorInvalidValue);
	if (tg_reserve(tg_ws_bytes(n, cols, group)))
		return -1;
	__half *xh = (__half *)g_tg_ws, *xl = xh + (size_t)n * cols;
	float *xs = (float *)(xl + (size_t)n * cols), *inv = xs + (size_t)n * (cols / group);
	const int one = tg_one_term(tg_impl()) && cols % 64 == 0; /* hi only */
	if ((size_t)cols * 4 <= (size_t)g_smem_optin)
		k_xsplit<true><<<n, XS_THREADS, (size_t)cols * 4, g_stream>>>(x, u, act, n, cols, group, bits, wg, xh,
									      one ? NULL : xl, xs, inv);
	else
		k_xsplit<false><<<n, XS_THREADS, 0, g_stream>>>(x, u, act, n, cols, group, bits, wg, xh, one ? NULL : xl,
								xs, inv);
	LAUNCHED("k_xsplit");
	*o = {xh, xl, xs, inv, n, cols, group, bits, wg};
	return 0;
}

template <int BITS, class S, int BK, int NT, int BT = 0>
static int tg_launch_bk(const tg_mats &M, int tiles, const tg_x &x, int ks = 1)
{
	dim3 grid((x.n + NT / 2 - 1) / (NT / 2), tiles, ks);
	g_path[KC_PATH_GEMM_F16X] += tg_xt(BT) == 1;
	k_gemm_tc<BITS, S, BK, NT, BT><<<grid, NT, tg_smem(BITS, BK, NT, BT), g_stream>>>(M, x.cols, x.group, x.xh, x.xl,
										    x.xs, x.inv, x.n);
	LAUNCHED("k_gemm_tc");
	return 0;
}

/* Which kernel (kc_gemm_impl; 0 takes TG_DEFAULT_IMPL). Per 8B layer at
 * n = 512 / 4096 (q4 g64 f16, us, run 28 call 3; kernels/cuda/NOTES.md):
 * 3: run 13's kernel: 128 threads, 64 tokens, k steps of 32, one launch
 *    per matrix (2580 / 17668);
 * 4: the same kernel, one launch for all matrices (2382 / 17477);
 * 2: 4 with k steps of 64 for bits <= 6 (8 bits would leave 1 block per
 *    SM): 2415 / 17699 (call 1: 2226 / 16582: within the calls' spread);
 * 5: 256 threads, 128 tokens per block, k steps of 64 (cols % 64 == 0),
 *    1 block per SM (2333 / 17364);
 * 6: 5 with the bias term on the tensor cores (f16 and bf16 scales; f32
 *    scales keep the FFMA fold): 2287 / 16669 (run 31: 2256 / 16501);
 * 7: 6 with the (scale, bias) words converted at the fold, not the load
 *    (run 31: 2108 / 15484);
 * 8: 7 with split-K in two where that shortens the launch's waves
 *    (tg_ksplit: 8B q/k/v at n = 512 is 192 blocks on 132 SMs; 340 ->
 *    258 us): 2031 / 15462 (run 31); the default before session 11;
 * 10: 8 with x as one f16 term (hi only, no lo): half the mmas and half
 *    the staged X, at f16's precision for x: 1533 / 11413 (session 5,
 *    call 1);
 * 11: 10 with the weights as f16 s c + b in the A tile (no per-group P,
 *    fold or bias term: 152 registers instead of 224): 1330 / 9949;
 * 12: 11 at 2 blocks per SM (128 registers, no spills, 3 stages): 1149 /
 *    7679 (session 5, call 2); 1089 / 7640 with tg_ksplit counting waves
 *    of two blocks per SM too (call 5), KC_GEMM_FAST. 10-12 are opt-in (the
 *    user's --fast-prefill): the default keeps x hi + lo and exact codes.
 * 13: 8's arithmetic on Hopper's wgmma (k_gemm_wg) where wg_use holds
 *    (sm_90a, 4 bits, groups of 64 / 128, f16 / bf16 scales), else 8:
 *    1285 / 9753 (session 11 call 4), the default.
 * Rejected in run 28: 256 threads as 8 warps of 32 x 32 tiles under 128
 * registers (2 blocks, 16 warps per SM): 2751 vs 2303 us per layer, ~40%
 * more instructions per mma. Rejected in run 31 (470b74a): 9, the GLU in
 * the gate/up store (a block of 64 gate + the same 64 up rows, up to the
 * gate warps through shared memory): correct, but gate/up + GLU took 1174
 * vs 1052 us at n = 512 and 9751 vs 8161 at 4096. */
#define TG_DEFAULT_IMPL 13
static int tg_impl(void)
{
	return g_gemm_impl == 0 ? TG_DEFAULT_IMPL : g_gemm_impl;
}

/* kc_gemm_impl(8, 10-12): 2 (split-K) where a launch of b blocks (one per SM)
 * would end in a tail wave and 2b half-length blocks take at most 0.8 of
 * its time, counted in waves (8B q/k/v at n = 512: 192 blocks, 2 waves
 * against 3 half waves; 1B o and down: 64 blocks, 1 against 1 half);
 * else 1; under 12 also where that holds for waves of two blocks per SM
 * (8B o and down at n = 512: 128 blocks, split to fill the 264 slots: 106
 * -> 96 and 355 -> 310 us; q/k/v, 192 blocks, split by the first count:
 * 147 us split, 167 not; session 5). Each half must be whole k steps of
 * 64 and whole groups. */
static int tg_ksplit(const tg_x &x, int tiles)
{
	const int half = x.cols / 2;
	if ((tg_impl() != 8 && tg_impl() != 13 && !tg_one_term(tg_impl())) || x.cols % 128 || half % x.group)
		return 1;
	const long b = (long)((x.n + 127) / 128) * tiles;
	auto shorter = [b](long slots) { /* 2b half blocks in <= 0.8 of b's waves */
		return 5 * ((2 * b + slots - 1) / slots) <= 8 * ((b + slots - 1) / slots);
	};
	/* under impl 12 two blocks fit per SM (up to 6 bits: 3 stages of 110.6
	 * KB at most; 8 bits take 117 KB): waves of 2 per SM count too */
	return shorter(g_sms) || (tg_impl() == 12 && x.bits <= 6 && shorter(2L * g_sms)) ? 2 : 1;
}

template <int BITS, class S>
static int tg_launch(const tg_mats &M, int tiles, const tg_x &x, int ks)
{
	const int impl = tg_impl();
	if (impl == 12 && x.cols % 64 == 0) /* 8 bits: two blocks do not fit (117 KB): 11's kernel */
		return tg_launch_bk<BITS, S, 64, 256, BITS <= 6 ? 60 : 28>(M, tiles, x, ks);
	if (impl == 11 && x.cols % 64 == 0)
		return tg_launch_bk<BITS, S, 64, 256, 28>(M, tiles, x, ks);
	if (impl == 10 && x.cols % 64 == 0)
		return tg_launch_bk<BITS, S, 64, 256, 15>(M, tiles, x, ks);
	if ((impl == 8 || impl == 13) && x.cols % 64 == 0) /* 13: where k_gemm_wg does not apply */
		return tg_launch_bk<BITS, S, 64, 256, 7>(M, tiles, x, ks);
	if (impl == 7 && x.cols % 64 == 0)
		return tg_launch_bk<BITS, S, 64, 256, 3>(M, tiles, x);
	if (impl == 6 && x.cols % 64 == 0)
		return tg_launch_bk<BITS, S, 64, 256, 1>(M, tiles, x);
	if (impl == 5 && x.cols % 64 == 0)
		return tg_launch_bk<BITS, S, 64, 256>(M, tiles, x);
	if (BITS < 8 && impl == 2 && x.cols % 64 == 0)
		return tg_launch_bk<BITS, S, (BITS < 8 ? 64 : 32), 128>(M, tiles, x);
	return tg_launch_bk<BITS, S, 32, 128>(M, tiles, x);
}

template <class S>
static int tg_dispatch(int bits, const tg_mats &M, int tiles, const tg_x &x, int ks)
{
	switch (bits) {
	case 2: return tg_launch<2, S>(M, tiles, x, ks);
	case 3: return tg_launch<3, S>(M, tiles, x, ks);
	case 4: return tg_launch<4, S>(M, tiles, x, ks);
	case 5: return tg_launch<5, S>(M, tiles, x, ks);
	case 6: return tg_launch<6, S>(M, tiles, x, ks);
	case 8: return tg_launch<8, S>(M, tiles, x, ks);
	default: snprintf(g_err, sizeof(g_err), "gemm: bits %d unsupported", bits); return -1;
	}
}

/* count matrices on the split x (same cols, group and bits as the split,
 * one scale dtype) in one launch; kc_gemm_impl(3): one launch each (run
 * 13's way, for A/B). */
static int tg_run(int count, const kq_matrix *const *ms, const tg_x &x, const float *const *bias, float *const *y)
{
	if (tg_impl() == 3 && count > 1) {
		for (int i = 0; i < count; i++)
			if (tg_run(1, ms + i, x, bias ? bias + i : NULL, y + i))
				return -1;
		return 0;
	}
	tg_mats M;
	memset(&M, 0, sizeof(M));
	int tiles = 0;
	for (int i = 0; i < KC_MAX_FUSE; i++) {
		M.tile0[i] = i < count ? tiles : INT_MAX;
		if (i >= count)
			continue;
		M.w[i] = (const uint8_t *)ms[i]->w;
		M.sb[i] = ms[i]->scales;
		M.bias[i] = bias ? bias[i] : NULL;
		M.y[i] = y[i];
		M.rows[i] = ms[i]->rows;
		tiles += (ms[i]->rows + TG_BM - 1) / TG_BM;
	}
	const int ks = tg_ksplit(x, tiles);
	g_path[KC_PATH_SPLITK] += ks > 1;
	if (ks > 1) /* the halves add into zeros (k_gemm_tc, BT & 4) */
		for (int i = 0; i < count; i++)
			CK(cudaMemsetAsync(y[i], 0, (size_t)x.n * ms[i]->rows * 4, g_stream));
	if (x.wg) {
		dim3 grid((x.n + 127) / 128, tiles, ks);
		g_path[KC_PATH_GEMM_WG]++;
		const int f16 = ms[0]->sdt == KDT_F16;
		if (x.group == 64)
			(f16 ? k_gemm_wg<F16, 64> : k_gemm_wg<BF16, 64>)<<<grid, 256, WG_SMEM, g_stream>>>(
				M, x.cols, x.xh, x.xl, x.xs, x.inv, x.n);
		else
			(f16 ? k_gemm_wg<F16, 128> : k_gemm_wg<BF16, 128>)<<<grid, 256, WG_SMEM, g_stream>>>(
				M, x.cols, x.xh, x.xl, x.xs, x.inv, x.n);
		LAUNCHED("k_gemm_wg");
		return 0;
	}
	switch (ms[0]->sdt) {
	case KDT_F32: return tg_dispatch<F32>(ms[0]->bits, M, tiles, x, ks);
	case KDT_F16: return tg_dispatch<F16>(ms[0]->bits, M, tiles, x, ks);
	default: return tg_dispatch<BF16>(ms[0]->bits, M, tiles, x, ks);
	}
}

/* More than the default 48 KB of shared memory. */
#define TG_ATTR(B, K, T) \
	CK(cudaFuncSetAttribute(k_gemm_tc<B, S, K, T, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, tg_smem(B, K, T)))
#define TG_ATTRB(B) \
	CK(cudaFuncSetAttribute(k_gemm_tc<B, S, 64, 256, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, tg_smem(B, 64, 256))); \
	CK(cudaFuncSetAttribute(k_gemm_tc<B, S, 64, 256, 3>, cudaFuncAttributeMaxDynamicSharedMemorySize, tg_smem(B, 64, 256))); \
	CK(cudaFuncSetAttribute(k_gemm_tc<B, S, 64, 256, 7>, cudaFuncAttributeMaxDynamicSharedMemorySize, tg_smem(B, 64, 256))); \
	CK(cudaFuncSetAttribute(k_gemm_tc<B, S, 64, 256, 15>, cudaFuncAttributeMaxDynamicSharedMemorySize, \
				tg_smem(B, 64, 256, 15))); \
	CK(cudaFuncSetAttribute(k_gemm_tc<B, S, 64, 256, 28>, cudaFuncAttributeMaxDynamicSharedMemorySize, \
				tg_smem(B, 64, 256, 28))); \
	CK(cudaFuncSetAttribute(k_gemm_tc<B, S, 64, 256, 60>, cudaFuncAttributeMaxDynamicSharedMemorySize, \
				tg_smem(B, 64, 256, 60)))
template <class S>
static int tg_attr(void)
{
	TG_ATTR(2, 32, 128); TG_ATTR(3, 32, 128); TG_ATTR(4, 32, 128); TG_ATTR(5, 32, 128); TG_ATTR(6, 32, 128);
	TG_ATTR(8, 32, 128);
	TG_ATTR(2, 64, 128); TG_ATTR(3, 64, 128); TG_ATTR(4, 64, 128); TG_ATTR(5, 64, 128); TG_ATTR(6, 64, 128);
	TG_ATTR(2, 64, 256); TG_ATTR(3, 64, 256); TG_ATTR(4, 64, 256); TG_ATTR(5, 64, 256); TG_ATTR(6, 64, 256);
	TG_ATTR(8, 64, 256);
	TG_ATTRB(2); TG_ATTRB(3); TG_ATTRB(4); TG_ATTRB(5); TG_ATTRB(6); TG_ATTRB(8);
	if constexpr (!std::is_same<S, F32>::value) /* k_gemm_wg: f16 / bf16 scales */
		if (g_wg_ok)
			for (auto k : {k_gemm_wg<S, 64>, k_gemm_wg<S, 128>})
				CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, WG_SMEM));
	return 0;
}
#undef TG_ATTR
#undef TG_ATTRB

static int mq_init(void)
{
	const char *e = getenv("MLXR_CUDA_MI_PDL");
	g_mi_pdl_add = g_pdl && e && e[0] == '1';
	CK(cudaMalloc(&g_mi_x, MQ_SMEM_MAX));
	return mq_attr<F32>() || mq_attr<F16>() || mq_attr<BF16>() || tg_attr<F32>() || tg_attr<F16>() ||
		       tg_attr<BF16>() || fa_attr() || xs_attr()
		   ? -1
		   : 0;
}

static int mq_ok(const kq_matrix *m)
{
	/* groups of 32, 64, 128: a lane's 4 pairs per row are contiguous (sb_at) */
	return (m->bits == 4 || m->bits == 8) && !((uintptr_t)m->w & 15) && g_mv_impl != 1 &&
	       (m->group_size == 32 || m->group_size == 64 || m->group_size == 128) &&
	       (size_t)(m->cols / 32) * MQ_CW * 4 + 64 <= MQ_SMEM_MAX;
}

static int check_matrix(const kq_matrix *m)
{
	if (m->bits != 0 && (m->group_size < 32 || m->group_size % 32 || m->cols % m->group_size ||
			     (m->bits != 2 && m->bits != 3 && m->bits != 4 && m->bits != 5 && m->bits != 6 &&
			      m->bits != 8))) {
		snprintf(g_err, sizeof(g_err), "matrix: bits %d group %d cols %d unsupported", m->bits,
			 m->group_size, m->cols);
		return -1;
	}
	if ((unsigned)m->sdt >= KDT_COUNT || (unsigned)m->wdt >= KDT_COUNT) {
		snprintf(g_err, sizeof(g_err), "matrix: dtype unknown");
		return -1;
	}
	return 0;
}

/* The tensor-core matvec takes count matrices sharing x (n == 1) when the
 * first is one it takes (mq_ok), all have its bits, cols, group and scale
 * dtype, and every row starts 16-byte aligned. */
static int mq_group_ok(int count, const kq_matrix *const *ms)
{
	if (!mq_ok(ms[0]) || ((size_t)ms[0]->cols * ms[0]->bits / 8) % 16)
		return 0;
	for (int i = 0; i < count; i++)
		if (((uintptr_t)ms[i]->w & 15) || ms[i]->bits != ms[0]->bits || ms[i]->cols != ms[0]->cols ||
		    ms[i]->group_size != ms[0]->group_size || ms[i]->sdt != ms[0]->sdt)
			return 0;
	return 1;
}

static int g_resid_impl; /* kc_residual_impl */

extern "C" int kc_residual_impl(int impl)
{
	return impl_swap(&g_resid_impl, impl);
}

extern "C" int kc_fuse_ok(int count, const kq_matrix *const *ms, int what)
{
	if (count < 1 || count > KC_MAX_FUSE || g_resid_impl == 1 || (what == KC_FUSE_ADD && g_resid_impl == 3) ||
	    (what == KC_FUSE_NORM && g_resid_impl == 2))
		return 0;
	for (int i = 0; i < count; i++)
		if (!ms[i] || !ms[i]->bits || check_matrix(ms[i]))
			return 0;
	return mq_group_ok(count, ms);
}

/* The (x normed, y added) launch fields of mv_args; x's vector loads also
 * need the norm weight 16-byte aligned. */
static void mq_fuse_args(mv_args &a, const float *x, const kc_norm *nrm, int add)
{
	a.add = add;
	if (nrm) {
		a.nw = nrm->w;
		a.one = nrm->add_one ? 1.0f : 0.0f;
		a.eps = nrm->eps;
	}
	a.vec |= ((uintptr_t)x & 15) || (nrm && ((uintptr_t)nrm->w & 15)) ? 0 : 2;
}

/* n == 1, count matrices sharing x; nrm / add: the residual fusions
 * (kcuda.h), only on the tensor-core kernels. */
static int matvec_fused(int count, const kq_matrix *const *ms, const float *x, const float *const *bias,
			float *const *y, const kc_norm *nrm, int add)
{
	mv_args a;
	memset(&a, 0, sizeof(a));
	a.count = count;
	a.cols = ms[0]->cols;
	a.group = ms[0]->group_size;
	a.vec = 1;
	int nb = 0;
	for (int i = 0; i < count; i++) {
		a.w[i] = (const uint32_t *)ms[i]->w;
		a.s[i] = ms[i]->scales;
		a.bias[i] = bias ? bias[i] : NULL;
		a.y[i] = y[i];
		a.rows[i] = ms[i]->rows;
		a.start[i] = nb;
		nb += (ms[i]->rows + KC_MV_ROWS - 1) / KC_MV_ROWS;
		if (((uintptr_t)ms[i]->w & 15) || ((size_t)a.cols * ms[0]->bits / 8) % 16)
			a.vec = 0;
	}
	if (mq_group_ok(count, ms)) {
		/* tensor-core path: row tiles of MQ_ROWS */
		nb = 0;
		for (int i = 0; i < count; i++) {
			a.start[i] = nb;
			nb += (ms[i]->rows + MQ_ROWS - 1) / MQ_ROWS;
		}
		a.tiles = nb;
		mq_fuse_args(a, x, nrm, add);
		switch (ms[0]->sdt) {
		case KDT_F32: return mq_dispatch<F32>(ms[0]->bits, a, x, 0);
		case KDT_F16: return mq_dispatch<F16>(ms[0]->bits, a, x, 0);
		default: return mq_dispatch<BF16>(ms[0]->bits, a, x, 0);
		}
	}
	if (nrm || add) {
		snprintf(g_err, sizeof(g_err), "matvec: the residual fusion needs the tensor-core matvec (kc_fuse_ok)");
		return -1;
	}
	int blocks = (nb + KC_MV_WARPS - 1) / KC_MV_WARPS;
	switch (ms[0]->sdt) {
	case KDT_F32: return mv_dispatch<F32>(ms[0]->bits, a, blocks, x);
	case KDT_F16: return mv_dispatch<F16>(ms[0]->bits, a, blocks, x);
	default: return mv_dispatch<BF16>(ms[0]->bits, a, blocks, x);
	}
}

/* One matrix on the tensor-core GEMM (n > 1, tg_ok): x split (with u: of
 * glu_act(x, act) * u), then the launch. */
static int tg_linear1(const kq_matrix *m, const float *x, const float *u, int act, int n, const float *bias, float *y)
{
	tg_x sx;
	const kq_matrix *ms[1] = {m};
	const float *bs[1] = {bias};
	float *ys[1] = {y};
	return tg_split(x, n, m->cols, m->group_size, m->bits, wg_use(1, ms), &sx, u, act) || tg_run(1, ms, sx, bs, ys)
		       ? -1
		       : 0;
}

extern "C" int kc_linear(const kq_matrix *m, const float *x, int n, const float *bias, float *y)
{
	if (check_matrix(m))
		return -1;
	if (n < 1)
		return 0;
	if (n == 1 && m->bits) {
		const kq_matrix *ms[1] = {m};
		const float *bs[1] = {bias};
		float *ys[1] = {y};
		return matvec_fused(1, ms, x, bs, ys, NULL, 0);
	}
	if (n == 1) {
		int blocks = (m->rows + 3) / 4;
		switch (m->wdt) {
		case KDT_F32: k_matvec_dense<F32><<<blocks, 128, 0, g_stream>>>(m->w, m->rows, m->cols, x, bias, y); break;
		case KDT_F16: k_matvec_dense<F16><<<blocks, 128, 0, g_stream>>>(m->w, m->rows, m->cols, x, bias, y); break;
		default: k_matvec_dense<BF16><<<blocks, 128, 0, g_stream>>>(m->w, m->rows, m->cols, x, bias, y); break;
		}
		LAUNCHED("k_matvec_dense");
		return 0;
	}
	if (tg_ok(m))
		return tg_linear1(m, x, NULL, 0, n, bias, y);
	kdtype dt = m->bits ? m->sdt : m->wdt;
	switch (dt) {
	case KDT_F32: return gemm_dispatch<F32>(m, x, n, bias, y);
	case KDT_F16: return gemm_dispatch<F16>(m, x, n, bias, y);
	default: return gemm_dispatch<BF16>(m, x, n, bias, y);
	}
}

extern "C" int kc_linear_glu_in(const kq_matrix *m, float *g, const float *u, int act, int n, const float *bias,
				float *y)
{
	if (check_matrix(m))
		return -1;
	if (n < 1)
		return 0;
	if (n > 1 && tg_ok(m))
		return tg_linear1(m, g, u, act, n, bias, y);
	return kc_glu(g, u, (size_t)n * m->cols, act) || kc_linear(m, g, n, bias, y) ? -1 : 0;
}

extern "C" int kc_linear_multi(int count, const kq_matrix *const *ms, const float *x, int n,
			       const float *const *bias, float *const *y)
{
	if (count < 1 || count > KC_MAX_FUSE)
		return -1;
	int same = n == 1;
	for (int i = 0; i < count; i++) {
		if (check_matrix(ms[i]))
			return -1;
		if (!ms[i]->bits || ms[i]->bits != ms[0]->bits || ms[i]->cols != ms[0]->cols ||
		    ms[i]->group_size != ms[0]->group_size || ms[i]->sdt != ms[0]->sdt)
			same = 0;
	}
	if (same)
		return matvec_fused(count, ms, x, bias, y, NULL, 0);
	int split = n > 1, one = 1;
	for (int i = 0; i < count; i++) {
		if (!tg_ok(ms[i]) || ms[i]->bits != ms[0]->bits || ms[i]->cols != ms[0]->cols ||
		    ms[i]->group_size != ms[0]->group_size)
			split = 0;
		if (ms[i]->sdt != ms[0]->sdt)
			one = 0;
	}
	if (split) { /* one split of x for all of them; one launch where the scale dtypes agree */
		tg_x sx;
		if (tg_split(x, n, ms[0]->cols, ms[0]->group_size, ms[0]->bits, wg_use(count, ms), &sx))
			return -1;
		if (one)
			return tg_run(count, ms, sx, bias, y);
		for (int i = 0; i < count; i++)
			if (tg_run(1, ms + i, sx, bias ? bias + i : NULL, y + i))
				return -1;
		return 0;
	}
	for (int i = 0; i < count; i++)
		if (kc_linear(ms[i], x, n, bias ? bias[i] : NULL, y[i]))
			return -1;
	return 0;
}

/* gate/up + GLU in one tensor-core launch (gate and up: mq_ok, one shape). */
static int glu_launch(const kq_matrix *gate, const kq_matrix *up, const float *x, int act, float *g_out,
		      const kc_norm *nrm)
{
	mv_args a;
	memset(&a, 0, sizeof(a));
	const kq_matrix *ms[2] = {gate, up};
	for (int i = 0; i < 2; i++) {
		a.w[i] = (const uint32_t *)ms[i]->w;
		a.s[i] = ms[i]->scales;
		a.rows[i] = ms[i]->rows;
	}
	a.y[0] = g_out;
	a.count = 2;
	a.cols = gate->cols;
	a.group = gate->group_size;
	a.vec = 1;
	a.act = act;
	a.tiles = (gate->rows + MQ_ROWS - 1) / MQ_ROWS;
	mq_fuse_args(a, x, nrm, 0);
	switch (gate->sdt) {
	case KDT_F32: return mq_dispatch<F32>(gate->bits, a, x, 1);
	case KDT_F16: return mq_dispatch<F16>(gate->bits, a, x, 1);
	default: return mq_dispatch<BF16>(gate->bits, a, x, 1);
	}
}

static int glu_same(const kq_matrix *gate, const kq_matrix *up)
{
	return gate->bits == up->bits && gate->rows == up->rows && gate->cols == up->cols &&
	       gate->group_size == up->group_size && gate->sdt == up->sdt;
}

extern "C" int kc_linear_glu(const kq_matrix *gate, const kq_matrix *up, const float *x, int n, int act,
			     float *g_out, float *u_out)
{
	if (check_matrix(gate) || check_matrix(up))
		return -1;
	if (n == 1 && mq_ok(gate) && mq_ok(up) && glu_same(gate, up))
		return glu_launch(gate, up, x, act, g_out, NULL);
	const kq_matrix *ms[2] = {gate, up};
	float *ys[2] = {g_out, u_out};
	if (kc_linear_multi(2, ms, x, n, NULL, ys))
		return -1;
	return kc_glu(g_out, u_out, (size_t)n * gate->rows, act);
}

extern "C" int kc_linear_residual(const kq_matrix *m, const float *x, const float *bias, float *resid)
{
	const kq_matrix *ms[1] = {m};
	const float *bs[1] = {bias};
	float *ys[1] = {resid};
	if (!kc_fuse_ok(1, ms, KC_FUSE_ADD)) {
		snprintf(g_err, sizeof(g_err), "kc_linear_residual: not a fused matrix (kc_fuse_ok)");
		return -1;
	}
	return matvec_fused(1, ms, x, bs, ys, NULL, 1);
}

extern "C" int kc_linear_multi_norm(int count, const kq_matrix *const *ms, const float *x, const kc_norm *nrm,
				    const float *const *bias, float *const *y)
{
	if (!nrm || !nrm->w || !kc_fuse_ok(count, ms, KC_FUSE_NORM)) {
		snprintf(g_err, sizeof(g_err), "kc_linear_multi_norm: no norm or not fused matrices (kc_fuse_ok)");
		return -1;
	}
	return matvec_fused(count, ms, x, bias, y, nrm, 0);
}

extern "C" int kc_linear_glu_norm(const kq_matrix *gate, const kq_matrix *up, const float *x, const kc_norm *nrm,
				  int act, float *g_out)
{
	const kq_matrix *ms[2] = {gate, up};
	if (!nrm || !nrm->w || !kc_fuse_ok(2, ms, KC_FUSE_NORM) || !glu_same(gate, up)) {
		snprintf(g_err, sizeof(g_err), "kc_linear_glu_norm: no norm or not fused matrices (kc_fuse_ok)");
		return -1;
	}
	return glu_launch(gate, up, x, act, g_out, nrm);
}

/* ---- embedding ---- */

template <int BITS, class S>
__global__ void k_embed(const void *W, const void *sb, int rows, int cols, int group, const int *tokens,
			float scale, float *out)
{
	pdl_trigger();
	pdl_wait();
	const int ngp = BITS ? sb_ngp(cols, group) : 0, tsh = sb_tsh(group);
	int t = blockIdx.x;
	int tok = tokens[t];
	if (tok < 0 || tok >= rows) /* the caller checked; a bad id reads row 0, never out of bounds */
		tok = 0;
	for (int j = threadIdx.x; j < cols; j += blockDim.x)
		out[(size_t)t * cols + j] = gemm_w<BITS, S>(W, sb, cols, group, ngp, tsh, tok, j) * scale;
}

template <class S>
static int embed_dispatch(const kq_matrix *m, const int *tok, int n, float scale, float *out)
{
#define EL(B) k_embed<B, S><<<n, 256, 0, g_stream>>>(m->w, m->scales, m->rows, m->cols, m->group_size, tok, scale, out)
	switch (m->bits) {
	case 0: EL(0); break;
	case 2: EL(2); break;
	case 3: EL(3); break;
	case 4: EL(4); break;
	case 5: EL(5); break;
	case 6: EL(6); break;
	case 8: EL(8); break;
	default: return -1;
	}
#undef EL
	LAUNCHED("k_embed");
	return 0;
}

extern "C" int kc_embed(const kq_matrix *m, const int *d_tokens, int n, float scale, float *out)
{
	if (check_matrix(m))
		return -1;
	kdtype dt = m->bits ? m->sdt : m->wdt;
	switch (dt) {
	case KDT_F32: return embed_dispatch<F32>(m, d_tokens, n, scale, out);
	case KDT_F16: return embed_dispatch<F16>(m, d_tokens, n, scale, out);
	default: return embed_dispatch<BF16>(m, d_tokens, n, scale, out);
	}
}

/* ---- norms ---- */

/* One block per row. Decode has one row: a 256-thread block then walks
 * 4096 values in 16 dependent rounds of loads; 1024 threads take 4. */
static int norm_threads(int rows, int n)
{
	return rows <= 32 && n >= 2048 ? 1024 : 256;
}

__global__ void k_rmsnorm(const float *x, const float *w, int n, float eps, float one, float *out)
{
	pdl_trigger();
	pdl_wait();
	__shared__ float sh[32];
	const float *xr = x + (size_t)blockIdx.x * n;
	float *o = out + (size_t)blockIdx.x * n;
	float ss = 0.0f;
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		ss += xr[i] * xr[i];
	ss = block_sum(ss, sh);
	float inv = 1.0f / sqrtf(ss / (float)n + eps);
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		o[i] = xr[i] * inv * (w[i] + one);
}

extern "C" int kc_rmsnorm(const float *x, const float *w, int rows, int n, float eps, int add_one, float *out)
{
	if (rows < 1)
		return 0;
	k_rmsnorm<<<rows, norm_threads(rows, n), 0, g_stream>>>(x, w, n, eps, add_one ? 1.0f : 0.0f, out);
	LAUNCHED("k_rmsnorm");
	return 0;
}

__global__ void k_add_rmsnorm(float *x, float *r, const float *post_w, const float *w, int n, float eps, float one,
			      float *out)
{
	pdl_trigger();
	pdl_wait();
	__shared__ float sh[32];
	float *xr = x + (size_t)blockIdx.x * n, *rr = r + (size_t)blockIdx.x * n;
	float pinv = 1.0f;
	if (post_w) {
		float ss = 0.0f;
		for (int i = threadIdx.x; i < n; i += blockDim.x)
			ss += rr[i] * rr[i];
		ss = block_sum(ss, sh);
		pinv = 1.0f / sqrtf(ss / (float)n + eps);
	}
	float ss = 0.0f;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		float rv = post_w ? rr[i] * pinv * (post_w[i] + one) : rr[i];
		float v = xr[i] + rv;
		xr[i] = v;
		ss += v * v;
	}
	if (!w)
		return;
	ss = block_sum(ss, sh);
	float inv = 1.0f / sqrtf(ss / (float)n + eps);
	float *o = out + (size_t)blockIdx.x * n;
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		o[i] = xr[i] * inv * (w[i] + one);
}

extern "C" int kc_add_rmsnorm(float *x, float *r, const float *post_w, const float *w, int rows, int n, float eps,
			      int add_one, float *out)
{
	if (rows < 1)
		return 0;
	k_add_rmsnorm<<<rows, norm_threads(rows, n), 0, g_stream>>>(x, r, post_w, w, n, eps, add_one ? 1.0f : 0.0f,
								    out);
	LAUNCHED("k_add_rmsnorm");
	return 0;
}

/* ---- q/k norm + RoPE + KV append ----
 * The per-element math, shared with the decode attention kernel
 * (k_attn_split with as_rope: kc_qk_rope_attention) so both give the same
 * bits: the normed value x * (1 / sqrt(mean x^2 + eps)) * (w + one); the
 * pair (d, d + half) of a rotation with c = cos(pos * f) * mscale, s =
 * sin(pos * f) * mscale: x[d] c - x[d + half] s and x[d] s + x[d + half] c,
 * each one product rounded and one FMA, spelled out: left to the compiler,
 * the contraction was chosen per call site and the two kernels differed in
 * the last bit of ~10% of the rotated values (run 32's check on the device). */
static __device__ __forceinline__ float qk_normed(float x, float inv, float w, float one)
{
	return x * inv * (w + one);
}

static __device__ __forceinline__ float2 rope_cs(int pos, float f, float mscale)
{
	const float th = (float)pos * f;
	return make_float2(cosf(th) * mscale, sinf(th) * mscale);
}

static __device__ __forceinline__ float rope_lo(float lo, float hi, float2 cs)
{
	return __fmaf_rn(lo, cs.x, __fmul_rn(-hi, cs.y));
}

static __device__ __forceinline__ float rope_hi(float lo, float hi, float2 cs)
{
	return __fmaf_rn(lo, cs.y, __fmul_rn(hi, cs.x));
}

/* grid (ceil(n / QR_TOK), nh + nkv), block = head_dim rounded up to 32.
 * Block y < nh is a q head (rotated in place); else a kv head: k rotated
 * into the cache row, v copied into the cache row. A block takes QR_TOK
 * tokens of its head: their loads are issued together, then each token is
 * normed and rotated as one (run 8B prefill 512: 20,480 one-token blocks
 * took 27 us, ten waves of a load's latency). */
#define QR_TOK 8
__global__ void k_qk_rope_append(float *q, float *k, const float *v, int n, int nh, int nkv, int hd, int rot_dim,
				 const int *d_pos, const float *inv_freq, float mscale, const float *q_norm,
				 const float *k_norm, float eps, float one, float *kc, float *vc)
{
	pdl_trigger();
	pdl_wait();
	__shared__ float sh[32];
	__shared__ float xs[2][1024]; /* by token parity: one barrier a token */
	const int t0 = blockIdx.x * QR_TOK, h = blockIdx.y, d = threadIdx.x, nt = min(QR_TOK, n - t0);
	const bool isq = h < nh;
	const int kh = h - nh;
	float val[QR_TOK], vv[QR_TOK];
#pragma unroll
	for (int j = 0; j < QR_TOK; j++) {
		const size_t t = (size_t)(t0 + j);
		val[j] = vv[j] = 0.0f;
		if (j < nt && d < hd) {
			val[j] = isq ? q[(t * nh + h) * hd + d] : k[(t * nkv + kh) * hd + d];
			if (!isq)
				vv[j] = v[(t * nkv + kh) * hd + d];
		}
	}
	const int pos0 = *d_pos + t0, half = rot_dim / 2;
	const float *nw = isq ? q_norm : k_norm;
#pragma unroll
	for (int j = 0; j < QR_TOK; j++) {
		if (j >= nt) /* the same for the whole block */
			break;
		float x = val[j];
		if (nw) {
			const float ss = block_sum(x * x, sh);
			const float inv = 1.0f / sqrtf(ss / (float)hd + eps);
			if (d < hd)
				x = qk_normed(x, inv, nw[d], one);
		}
		float *xb = xs[j & 1];
		if (d < hd)
			xb[d] = x;
		__syncthreads();
		float o = x;
		if (d < half)
			o = rope_lo(xb[d], xb[d + half], rope_cs(pos0 + j, inv_freq[d], mscale));
		else if (d < rot_dim)
			o = rope_hi(xb[d - half], xb[d], rope_cs(pos0 + j, inv_freq[d - half], mscale));
		if (d >= hd)
			continue;
		const size_t t = (size_t)(t0 + j);
		if (isq) {
			q[(t * nh + h) * hd + d] = o;
		} else {
			const size_t row = ((size_t)(pos0 + j) * nkv + kh) * hd + d;
			kc[row] = o;
			vc[row] = vv[j];
		}
	}
}

extern "C" int kc_qk_rope_append(float *q, float *k, const float *v, int n, int nh, int nkv, int hd, int rot_dim,
				 const int *d_pos, const float *inv_freq, float mscale, const float *q_norm,
				 const float *k_norm, float eps, int add_one, float *kcache, float *vcache)
{
	if (hd > 1024 || rot_dim > hd || rot_dim % 2) {
		snprintf(g_err, sizeof(g_err), "rope: head_dim %d rot_dim %d unsupported", hd, rot_dim);
		return -1;
	}
	if (n < 1)
		return 0;
	dim3 grid((n + QR_TOK - 1) / QR_TOK, nh + nkv);
	k_qk_rope_append<<<grid, (hd + 31) / 32 * 32, 0, g_stream>>>(q, k, v, n, nh, nkv, hd, rot_dim, d_pos, inv_freq,
								     mscale, q_norm, k_norm, eps,
								     add_one ? 1.0f : 0.0f, kcache, vcache);
	LAUNCHED("k_qk_rope_append");
	return 0;
}

/* ---- activations ---- */

__global__ void k_glu(float *gate, const float *up, size_t n, int act)
{
	pdl_trigger();
	pdl_wait();
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		gate[i] = glu_act(gate[i], act) * up[i];
	}
}

extern "C" int kc_glu(float *gate, const float *up, size_t n, int act)
{
	if (!n)
		return 0;
	size_t blocks = (n + 255) / 256;
	k_glu<<<blocks > 4096 ? 4096 : (unsigned)blocks, 256, 0, g_stream>>>(gate, up, n, act);
	LAUNCHED("k_glu");
	return 0;
}

__global__ void k_softcap(float *x, size_t n, float cap)
{
	pdl_trigger();
	pdl_wait();
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		x[i] = cap * tanhf(x[i] / cap);
}

extern "C" int kc_softcap(float *x, size_t n, float cap)
{
	if (!n)
		return 0;
	size_t blocks = (n + 255) / 256;
	k_softcap<<<blocks > 4096 ? 4096 : (unsigned)blocks, 256, 0, g_stream>>>(x, n, cap);
	LAUNCHED("k_softcap");
	return 0;
}

/* ---- attention ----
 * Chunked ("flash-decoding") attention. Block (t, kv-head group, chunk):
 * up to ATT_G q heads that share one kv head, keys [c*chunk, (c+1)*chunk)
 * clipped to what query t may see. Each of the 4 warps walks every 4th key:
 * the K row is read once for all ATT_G heads (a GQA group), scores reduced
 * across the warp, online softmax (running max m, sum l, acc) per head;
 * then the warps merge in shared memory and the block writes (m, l, acc)
 * for its chunk. k_attn_merge combines the chunks of each (t, head). */
#define ATT_G 8
#define ATT_E 8 /* head_dim <= 32 * ATT_E = 256 */
#define ATT_WARPS 4
#define AD_CH 64 /* keys per chunk for n < 16 (k_attn_dec) */
#define AS_SMAX 64 /* k_attn_split: blocks per kv head at most (scratch: nh x AS_SMAX partials) */

/* keys per chunk: AD_CH for n < 16; for n >= 16 (a fallback: the
 * tensor-core and tiled kernels serve the usual heads) KC_ATT_CHUNK, or a
 * multiple of it that keeps at most 8 chunks, so the partials of a
 * 1024-token call stay 1024 x nh x 8 rows (136 MB at 32 heads of 128)
 * whatever the context (at 128K keys they were 8.7 GB) */
static int att_chunk(int n, int max_keys)
{
	if (n < 16)
		return AD_CH;
	const int m = (max_keys + 8 * KC_ATT_CHUNK - 1) / (8 * KC_ATT_CHUNK);
	return KC_ATT_CHUNK * (m > 1 ? m : 1);
}

/* chunks of att_chunk(n, max_keys) keys covering max_keys */
static int att_nchunks(int n, int max_keys)
{
	const int chunk = att_chunk(n, max_keys);
	return (max_keys + chunk - 1) / chunk;
}

/* X3's calls of at most FT_SPLIT_N queries may split the keys (ft_try_nw) */
#define FT_SPLIT_N 256

/* k_kv_split's planes (X3): K, V hi + lo and two scales a row */
static size_t kv_planes_bytes(int nkv, int max_keys, int hd)
{
	return (size_t)max_keys * nkv * (4 * (size_t)hd * 2 + 2 * 4);
}

/* The largest of: the chunk kernels' partials; k_attn_split's (n = 1);
 * X3's planes (n >= 16, head_dim 64/128) followed by its split partials
 * (as the chunk kernels', for at most FT_SPLIT_N queries). Never smaller
 * for a larger max_keys, nor for a larger n within n < 16 or n >= 16: the
 * forward's one scratch (the larger of n = 15 and its largest call, at
 * the cache size) serves every call. */
extern "C" size_t kc_attention_scratch(int n, int nh, int nkv, int hd, int max_keys)
{
	/* chunks: at most this for any max_keys' <= max_keys (att_chunk's count
	 * itself is not monotone: 2048 keys make 8 chunks, 2049 make 5), so a
	 * scratch sized for the cache serves a call passing fewer keys */
	size_t nc = (size_t)(max_keys + AD_CH - 1) / AD_CH;
	if (n >= 16) {
		nc = (size_t)(max_keys + KC_ATT_CHUNK - 1) / KC_ATT_CHUNK;
		nc = nc < 8 ? nc : 8;
	}
	const size_t prow = (size_t)nh * nc * (hd + 2) * sizeof(float); /* one query's partials */
	size_t c = (size_t)n * prow;
	size_t a = (size_t)nh * AS_SMAX * (hd + 4) * sizeof(float); /* k_attn_split (n = 1): defined below */
	size_t x = 0;
	if (n >= 16 && (hd == 64 || hd == 128))
		x = kv_planes_bytes(nkv, max_keys, hd) + (size_t)(n < FT_SPLIT_N ? n : FT_SPLIT_N) * prow;
	c = c > a ? c : a;
	return c > x ? c : x;
}

__global__ void __launch_bounds__(32 * ATT_WARPS) k_attn_chunk(const float *q, const float *kc, const float *vc,
								float *part, int nh, int nkv, int hd, float scale,
								int window, float softcap, const int *d_pos, int chunk,
								int nchunks, int ngroups)
{
	pdl_trigger();
	pdl_wait();
	__shared__ float qs[ATT_G][32 * ATT_E];
	__shared__ float wm[ATT_WARPS][ATT_G], wl[ATT_WARPS][ATT_G];
	__shared__ float wacc[ATT_WARPS][ATT_G][32 * ATT_E];
	int t = blockIdx.x, kh = blockIdx.y / ngroups, grp = blockIdx.y % ngroups, c = blockIdx.z;
	int rep = nh / nkv;
	int h0 = kh * rep + grp * ATT_G;
	int G = rep - grp * ATT_G < ATT_G ? rep - grp * ATT_G : ATT_G;
	int p = *d_pos + t;
	int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
	int j0 = c * chunk > lo ? c * chunk : lo, j1 = (c + 1) * chunk - 1 < p ? (c + 1) * chunk - 1 : p;
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	size_t pstride = (size_t)hd + 2;
	if (j0 > j1) /* nothing visible in this chunk: k_attn_merge skips it */
		return;
	for (int i = threadIdx.x; i < G * hd; i += blockDim.x)
		qs[i / hd][i % hd] = q[((size_t)t * nh + h0 + i / hd) * hd + i % hd];
	__syncthreads();
	float m[ATT_G], l[ATT_G], acc[ATT_G][ATT_E];
#pragma unroll
	for (int g = 0; g < ATT_G; g++) {
		m[g] = -INFINITY;
		l[g] = 0.0f;
#pragma unroll
		for (int e = 0; e < ATT_E; e++)
			acc[g][e] = 0.0f;
	}
	for (int j = j0 + wid; j <= j1; j += ATT_WARPS) {
		const float *kr = kc + ((size_t)j * nkv + kh) * hd, *vr = vc + ((size_t)j * nkv + kh) * hd;
		float kv[ATT_E], vv[ATT_E];
#pragma unroll
		for (int e = 0; e < ATT_E; e++) {
			int d = lane + 32 * e;
			kv[e] = d < hd ? kr[d] : 0.0f;
			vv[e] = d < hd ? vr[d] : 0.0f;
		}
#pragma unroll
		for (int g = 0; g < ATT_G; g++) {
			if (g >= G)
				break;
			float s = 0.0f;
#pragma unroll
			for (int e = 0; e < ATT_E; e++)
				if (lane + 32 * e < hd)
					s = fmaf(qs[g][lane + 32 * e], kv[e], s);
			s = warp_sum(s) * scale;
			if (softcap > 0.0f)
				s = softcap * tanhf(s / softcap);
			float mn = fmaxf(m[g], s);
			float al = expf(m[g] - mn), pr = expf(s - mn);
			l[g] = l[g] * al + pr;
#pragma unroll
			for (int e = 0; e < ATT_E; e++)
				acc[g][e] = acc[g][e] * al + pr * vv[e];
			m[g] = mn;
		}
	}
	/* merge the warps */
#pragma unroll
	for (int g = 0; g < ATT_G; g++) {
		if (g >= G)
			break;
		if (lane == 0) {
			wm[wid][g] = m[g];
			wl[wid][g] = l[g];
		}
#pragma unroll
		for (int e = 0; e < ATT_E; e++)
			if (lane + 32 * e < hd)
				wacc[wid][g][lane + 32 * e] = acc[g][e];
	}
	__syncthreads();
	for (int i = threadIdx.x; i < G * (hd + 2); i += blockDim.x) {
		int g = i / (hd + 2), d = i % (hd + 2);
		float M = -INFINITY;
		for (int w = 0; w < ATT_WARPS; w++)
			M = fmaxf(M, wm[w][g]);
		float v = 0.0f;
		for (int w = 0; w < ATT_WARPS; w++) {
			if (wl[w][g] == 0.0f)
				continue; /* a warp that saw no key */
			float f = expf(wm[w][g] - M);
			v += f * (d == 0 ? 0.0f : d == 1 ? wl[w][g] : wacc[w][g][d - 2]);
		}
		float *pp = part + (((size_t)t * nh + h0 + g) * nchunks + c) * pstride;
		pp[d] = d == 0 ? M : v;
	}
}

/* Decode attention (n < 16, chunks of 64 keys): the same partials as
 * k_attn_chunk, without its per-key serial loop (v1 walked each warp's
 * keys one by one, a warp-wide reduction per key and head: ~25 us per
 * layer at a 17-token context). Three phases, every load issued in bulk:
 *  1. scores: thread (key, half of head_dim) dots its half K row with the
 *     G q heads (q in shared memory, one address per warp: broadcast);
 *  2. per head: max, exp, sum over the chunk (a warp per head);
 *  3. acc[g][d] = sum_j p[g][j] V[j][d]: a thread per d, keys unrolled x8. */
__global__ void __launch_bounds__(128) k_attn_dec(const float *q, const float *kc, const float *vc, float *part,
						  int nh, int nkv, int hd, float scale, int window, float softcap,
						  const int *d_pos, int nchunks, int ngroups)
{
	pdl_trigger();
	pdl_wait();
	__shared__ float qs[ATT_G][32 * ATT_E];
	__shared__ float sc[2][ATT_G][AD_CH];
	__shared__ float ml[ATT_G][2];
	const int t = blockIdx.x, kh = blockIdx.y / ngroups, grp = blockIdx.y % ngroups, c = blockIdx.z;
	const int rep = nh / nkv, h0 = kh * rep + grp * ATT_G;
	const int G = rep - grp * ATT_G < ATT_G ? rep - grp * ATT_G : ATT_G;
	const int p = *d_pos + t;
	const int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
	const int j0 = c * AD_CH > lo ? c * AD_CH : lo, j1 = (c + 1) * AD_CH - 1 < p ? (c + 1) * AD_CH - 1 : p;
	if (j0 > j1) /* nothing visible: k_attn_merge skips this chunk */
		return;
	const int nk = j1 - j0 + 1, tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
	for (int i = tid; i < G * hd; i += blockDim.x)
		qs[i / hd][i % hd] = q[((size_t)t * nh + h0 + i / hd) * hd + i % hd];
	__syncthreads();
	/* 1. scores */
	{
		const int kk = tid & 63, half = tid >> 6, hh = hd >> 1, dlo = half * hh;
		float s[ATT_G];
#pragma unroll
		for (int g = 0; g < ATT_G; g++)
			s[g] = 0.0f;
		if (kk < nk) {
			const float *kr = kc + ((size_t)(j0 + kk) * nkv + kh) * hd + dlo;
#pragma unroll 4
			for (int d0 = 0; d0 < hh; d0 += 16) { /* up to 64 loads in flight */
				float kv[16];
#pragma unroll
				for (int i = 0; i < 16; i++)
					kv[i] = d0 + i < hh ? kr[d0 + i] : 0.0f;
#pragma unroll
				for (int g = 0; g < ATT_G; g++) {
					if (g >= G)
						break;
#pragma unroll
					for (int i = 0; i < 16; i++)
						if (d0 + i < hh)
							s[g] = fmaf(qs[g][dlo + d0 + i], kv[i], s[g]);
				}
			}
		}
#pragma unroll
		for (int g = 0; g < ATT_G; g++)
			if (g < G)
				sc[half][g][kk] = s[g];
	}
	__syncthreads();
	/* 2. softmax statistics per head: warp w takes heads w, w + 4 */
	for (int g = wid; g < G; g += 4) {
		float v0 = -INFINITY, v1 = -INFINITY;
		if (lane < nk) {
			v0 = (sc[0][g][lane] + sc[1][g][lane]) * scale;
			if (softcap > 0.0f)
				v0 = softcap * tanhf(v0 / softcap);
		}
		if (lane + 32 < nk) {
			v1 = (sc[0][g][lane + 32] + sc[1][g][lane + 32]) * scale;
			if (softcap > 0.0f)
				v1 = softcap * tanhf(v1 / softcap);
		}
		float m = fmaxf(v0, v1);
#pragma unroll
		for (int o = 16; o > 0; o >>= 1)
			m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
		float p0 = lane < nk ? expf(v0 - m) : 0.0f, p1 = lane + 32 < nk ? expf(v1 - m) : 0.0f;
		float l = warp_sum(p0 + p1);
		__syncwarp();
		sc[0][g][lane] = p0; /* probabilities overwrite this head's half-0 scores */
		sc[0][g][lane + 32] = p1;
		if (lane == 0) {
			ml[g][0] = m;
			ml[g][1] = l;
		}
	}
	__syncthreads();
	/* 3. weighted V rows */
	const size_t pstride = (size_t)hd + 2;
	for (int d = tid; d < hd; d += blockDim.x) {
		float acc[ATT_G];
#pragma unroll
		for (int g = 0; g < ATT_G; g++)
			acc[g] = 0.0f;
		const float *vr = vc + ((size_t)j0 * nkv + kh) * hd + d;
		const size_t vstride = (size_t)nkv * hd;
#pragma unroll 2
		for (int k0 = 0; k0 < nk; k0 += 8) {
			float vv[8];
#pragma unroll
			for (int i = 0; i < 8; i++)
				vv[i] = k0 + i < nk ? vr[(size_t)(k0 + i) * vstride] : 0.0f;
#pragma unroll
			for (int g = 0; g < ATT_G; g++) {
				if (g >= G)
					break;
#pragma unroll
				for (int i = 0; i < 8; i++)
					if (k0 + i < nk)
						acc[g] = fmaf(sc[0][g][k0 + i], vv[i], acc[g]);
			}
		}
#pragma unroll
		for (int g = 0; g < ATT_G; g++)
			if (g < G)
				part[(((size_t)t * nh + h0 + g) * nchunks + c) * pstride + 2 + d] = acc[g];
	}
	if (tid < G) {
		float *pp = part + (((size_t)t * nh + h0 + tid) * nchunks + c) * pstride;
		pp[0] = ml[tid][0];
		pp[1] = ml[tid][1];
	}
}

/* Only the chunks that hold visible keys for this query were written:
 * c_lo..c_hi from its position and window (v1 walked all max_keys/chunk of
 * them: 69 dependent reads per output at a short context). */
__global__ void k_attn_merge(const float *part, float *out, int nh, int hd, int nchunks, int chunk, int window,
			     const int *d_pos)
{
	pdl_trigger();
	pdl_wait();
	int t = blockIdx.x, h = blockIdx.y;
	int p = *d_pos + t;
	int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
	int c_lo = lo / chunk, c_hi = p / chunk;
	size_t pstride = (size_t)hd + 2;
	const float *pp = part + ((size_t)t * nh + h) * nchunks * pstride;
	__shared__ float shm[32];
	float M = -INFINITY;
	for (int c = c_lo + (int)threadIdx.x; c <= c_hi; c += blockDim.x)
		if (pp[c * pstride + 1] > 0.0f)
			M = fmaxf(M, pp[c * pstride]);
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
	if ((threadIdx.x & 31) == 0)
		shm[threadIdx.x >> 5] = M;
	__syncthreads();
	M = -INFINITY;
	for (int w = 0; w < (int)(blockDim.x >> 5); w++)
		M = fmaxf(M, shm[w]);
	for (int d = threadIdx.x; d < hd; d += blockDim.x) {
		/* every chunk in c_lo..c_hi holds a visible key (l >= 1), so
		 * the loads need no condition and 8 go out at once */
		float L = 0.0f, a = 0.0f;
#pragma unroll 8
		for (int c = c_lo; c <= c_hi; c++) {
			const float *q = pp + c * pstride;
			float f = expf(q[0] - M);
			L += f * q[1];
			a += f * q[2 + d];
		}
		out[((size_t)t * nh + h) * hd + d] = a / L;
	}
}

/* ---- prefill attention: tiled (flash), n >= 16 ----
 * Why: k_attn_chunk (one block per query x kv-head group x chunk, a
 * serial per-warp key loop) reads each K/V row once per query and ran at
 * ~3 TF/s: 45 ms per 8B layer at 4096 tokens, 70% of that prefill
 * (cuda-bench gemm, run 10). Here a block owns FA_R = 64 rows (query, q
 * head) of one kv head: 64 / rep queries x the rep q heads that share the
 * kv head, so each K/V tile staged in shared memory serves 64 rows. Per
 * tile of FA_KT = 32 keys: S = Q K^T (thread: rows ty + 16i, keys tx + 8j,
 * i, j < 4; float4 over head_dim, conflict-free with rows hd + 4 floats
 * apart), scale, soft-cap, causal/window mask, online softmax (a row's 32
 * scores sit in 8 consecutive lanes), P^T to shared memory, O += P V
 * (thread: its 4 rows x dims 4(tx + 8k), k < NI). K/V tiles are
 * double-buffered with cp.async. All f32, as the reference: the same
 * tolerance as the chunk kernels (TOL_ATT). The longest query tiles (the
 * last) are launched first. */
#define FA_R 64
#define FA_KT 32
#define FA_THREADS 128

static size_t fa_smem(int hd)
{
	return ((size_t)(FA_R + 4 * FA_KT) * (hd + 4) + (size_t)FA_KT * (FA_R + 4)) * sizeof(float);
}

template <int NI>
__global__ void __launch_bounds__(FA_THREADS)
	k_attn_flash(const float *__restrict__ q, const float *__restrict__ kc, const float *__restrict__ vc,
		     float *__restrict__ out, int n, int nh, int nkv, int hd, float scale, int window, float softcap,
		     const int *d_pos)
{
	pdl_trigger();
	pdl_wait();
	extern __shared__ __align__(16) float fsm[];
	const int LDH = hd + 4, hd4 = hd >> 2;
	float *Qs = fsm, *Ks = Qs + FA_R * LDH, *Vs = Ks + 2 * FA_KT * LDH, *Ps = Vs + 2 * FA_KT * LDH;
	const int rep = nh / nkv, bq = FA_R / rep, R = bq * rep;
	const int qt = (int)gridDim.x - 1 - (int)blockIdx.x, kh = blockIdx.y, q0 = qt * bq;
	const int tid = threadIdx.x, tx = tid & 7, ty = tid >> 3;
	const int pos0 = *d_pos;
	/* row r: query q0 + r / rep, head kh * rep + r % rep */
	for (int i = tid; i < FA_R * hd4; i += FA_THREADS) {
		const int r = i / hd4, d4 = i - r * hd4, t = q0 + r / rep;
		float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		if (r < R && t < n)
			v = *(const float4 *)(q + ((size_t)t * nh + kh * rep + r % rep) * hd + d4 * 4);
		*(float4 *)(Qs + r * LDH + d4 * 4) = v;
	}
	int rp[4], rlo[4]; /* each row's position and first visible key */
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const int r = min(ty + 16 * i, R - 1), t = min(q0 + r / rep, n - 1);
		rp[i] = pos0 + t;
		rlo[i] = window > 0 && rp[i] - window + 1 > 0 ? rp[i] - window + 1 : 0;
	}
	const int kend = pos0 + min(q0 + bq - 1, n - 1); /* last key any row sees */
	const int kbeg = window > 0 && pos0 + q0 - window + 1 > 0 ? pos0 + q0 - window + 1 : 0;
	const int nt = (kend - kbeg) / FA_KT + 1;
	/* keys past kend read row kend (written, finite: p = 0 must not meet a NaN) */
	auto issue = [&](int it) {
		const int j0 = kbeg + it * FA_KT;
		float *kd = Ks + (it & 1) * FA_KT * LDH, *vd = Vs + (it & 1) * FA_KT * LDH;
		for (int i = tid; i < FA_KT * hd4; i += FA_THREADS) {
			const int jj = i / hd4, d4 = i - jj * hd4, j = min(j0 + jj, kend);
			const size_t off = ((size_t)j * nkv + kh) * hd + d4 * 4;
			cp_async<16>(smem_u32(kd + jj * LDH + d4 * 4), kc + off);
			cp_async<16>(smem_u32(vd + jj * LDH + d4 * 4), vc + off);
		}
	};
	float m[4], l[4], acc[4][NI][4];
#pragma unroll
	for (int i = 0; i < 4; i++) {
		m[i] = -INFINITY;
		l[i] = 0.0f;
#pragma unroll
		for (int k = 0; k < NI; k++)
#pragma unroll
			for (int c = 0; c < 4; c++)
				acc[i][k][c] = 0.0f;
	}
	issue(0);
	cp_commit();
	for (int it = 0; it < nt; it++) {
		if (it + 1 < nt)
			issue(it + 1);
		cp_commit();
		cp_wait<1>();
		__syncthreads(); /* tile it (and, first time, Q) visible to all */
		const float *Kt = Ks + (it & 1) * FA_KT * LDH, *Vt = Vs + (it & 1) * FA_KT * LDH;
		float s[4][4];
#pragma unroll
		for (int i = 0; i < 4; i++)
#pragma unroll
			for (int j = 0; j < 4; j++)
				s[i][j] = 0.0f;
#pragma unroll 2
		for (int d4 = 0; d4 < hd4; d4++) {
			float4 qv[4], kv[4];
#pragma unroll
			for (int i = 0; i < 4; i++)
				qv[i] = *(const float4 *)(Qs + (ty + 16 * i) * LDH + d4 * 4);
#pragma unroll
			for (int j = 0; j < 4; j++)
				kv[j] = *(const float4 *)(Kt + (tx + 8 * j) * LDH + d4 * 4);
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
					s[i][j] = fmaf(qv[i].x, kv[j].x, fmaf(qv[i].y, kv[j].y,
						  fmaf(qv[i].z, kv[j].z, fmaf(qv[i].w, kv[j].w, s[i][j]))));
		}
		const int j0 = kbeg + it * FA_KT;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			float mx = -INFINITY;
#pragma unroll
			for (int j = 0; j < 4; j++) {
				const int key = j0 + tx + 8 * j;
				float v = s[i][j] * scale;
				if (softcap > 0.0f)
					v = softcap * tanhf(v / softcap);
				if (key > rp[i] || key < rlo[i])
					v = -INFINITY;
				s[i][j] = v;
				mx = fmaxf(mx, v);
			}
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
			const float mn = fmaxf(m[i], mx);
			const float al = m[i] == -INFINITY ? 0.0f : expf(m[i] - mn);
			float sum = 0.0f;
#pragma unroll
			for (int j = 0; j < 4; j++) {
				s[i][j] = s[i][j] == -INFINITY ? 0.0f : expf(s[i][j] - mn);
				sum += s[i][j];
			}
			sum += __shfl_xor_sync(0xffffffffu, sum, 1);
			sum += __shfl_xor_sync(0xffffffffu, sum, 2);
			sum += __shfl_xor_sync(0xffffffffu, sum, 4);
			l[i] = l[i] * al + sum;
			m[i] = mn;
#pragma unroll
			for (int k = 0; k < NI; k++)
#pragma unroll
				for (int c = 0; c < 4; c++)
					acc[i][k][c] *= al;
		}
#pragma unroll
		for (int j = 0; j < 4; j++)
			*(float4 *)(Ps + (tx + 8 * j) * (FA_R + 4) + ty * 4) = make_float4(s[0][j], s[1][j], s[2][j], s[3][j]);
		__syncthreads();
#pragma unroll 4
		for (int jj = 0; jj < FA_KT; jj++) {
			const float4 pv = *(const float4 *)(Ps + jj * (FA_R + 4) + ty * 4);
			const float p[4] = {pv.x, pv.y, pv.z, pv.w};
#pragma unroll
			for (int k = 0; k < NI; k++) {
				if ((tx + 8 * k) * 4 >= hd)
					break;
				const float4 vv = *(const float4 *)(Vt + jj * LDH + (tx + 8 * k) * 4);
#pragma unroll
				for (int i = 0; i < 4; i++) {
					acc[i][k][0] = fmaf(p[i], vv.x, acc[i][k][0]);
					acc[i][k][1] = fmaf(p[i], vv.y, acc[i][k][1]);
					acc[i][k][2] = fmaf(p[i], vv.z, acc[i][k][2]);
					acc[i][k][3] = fmaf(p[i], vv.w, acc[i][k][3]);
				}
			}
		}
		__syncthreads(); /* the next issue refills this K/V buffer; Ps is rewritten */
	}
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const int r = ty + 16 * i, t = q0 + r / rep;
		if (r >= R || t >= n)
			continue;
		const float inv = 1.0f / l[i];
		float *o = out + ((size_t)t * nh + kh * rep + r % rep) * hd;
#pragma unroll
		for (int k = 0; k < NI; k++) {
			const int d = (tx + 8 * k) * 4;
			if (d < hd)
				*(float4 *)(o + d) = make_float4(acc[i][k][0] * inv, acc[i][k][1] * inv, acc[i][k][2] * inv,
								 acc[i][k][3] * inv);
		}
	}
}

/* ---- prefill attention on the tensor cores (f16 operands), n >= 16 ----
 * kc_attention_impl 5 (NW = 4 warps) and 6 (NW = 8, KC_ATT_FAST: the
 * fast prefill's choice), head_dim 64, 128 or 256. Why: k_attn_flash is
 * f32 SIMT at 11-23 TF/s (198 us per 8B layer at 512 tokens, 5.9 ms at
 * 4096: a third of that prefill); a user who opted into f16 GEMM inputs
 * accepts f16 operands here too. Measured (H200, 8B heads, cuda-bench
 * gemm, NOTES "fa16"): NW 4 42 us at 512, 1000 us at 4096 (137 TF/s); NW 8
 * 38 / 896 us (153 TF/s): 5.2x / 6.6x k_attn_flash; 128 rows halve the
 * f32 K/V bytes each row needs from L2. FlashAttention-2's structure on mma.sync m16n8k16 (f16 in,
 * f32 accumulate): a block of NW warps owns 16 NW (query, q head) rows of
 * one kv head, mapped as in k_attn_flash (row r: query q0 + r / rep, head
 * kh rep + r % rep), each warp 16 of them. Per tile of KT keys (64; 32 at
 * head_dim 256, where O alone is 128 registers a lane):
 * - the f32 K/V rows land in shared memory by cp.async (issued one tile
 *   ahead, while the warps compute on the previous tile), then the block
 *   converts them once to f16 tiles (rows padded by 8 halves: the 8 rows
 *   an ldmatrix reads sit in distinct banks). The cache stays f32.
 * - S = Q K^T: Q's A fragments converted to f16 once (registers; shared
 *   memory at head_dim 256), K's B fragments by ldmatrix.
 * - scale, soft-cap, causal and window mask, online softmax in f32
 *   registers, k_attn_flash's semantics (the exponent in base 2: the max
 *   and scores are kept multiplied by log2 e; a row's sum stays per lane
 *   until the end).
 * - O += P V: P rounded to f16 straight from S's accumulators (the C
 *   layout of two key n-tiles is the A layout of one k step), V's B
 *   fragments by ldmatrix.trans.
 * A warp skips a tile none of its rows may see (the block's first rows
 * on the causal edge, rows left of a window). Keys past the last visible
 * one read that row (written, finite; p = 0). Longest query tiles first.
 * Numerics: q, k, v, p rounded to f16 (unit roundoff 2^-11); every
 * product and sum in f32 (TOL_ATT_F16 in the tests).
 * X3 (the f32-class default, 8 warps, head_dim 64/128): q, k, v, p each
 * scaled by a power of two per row and split into f16 hi + lo, three
 * mmas a product. K and V are split once per call by k_kv_split into the
 * attention scratch; their tiles land from there by cp.async in a
 * two-stage ring (one barrier a tile, no landing tiles, no conversion in
 * the block). Splitting in every query-tile block instead cost ~2,650
 * instructions a warp a tile at 8 warps a SM, latency-bound (ncu, H100,
 * 8B heads at 4096: IPC 1.38, 5.8 cycles a warp between issues, the
 * tensor pipe 30% busy). */
#define FT_L2E 1.4426950408889634f

static __host__ __device__ constexpr int ft_kt(int hd) { return hd == 256 ? 32 : 64; }

/* X3, bytes of one stage of the two-stage ring: a tile's K and V rows as
 * hi and lo (unpadded, swizzled as k_kv_split wrote them), and the keys'
 * inverse scales */
static __host__ __device__ constexpr size_t ft_x3_stage(int hd)
{
	return 4 * (size_t)ft_kt(hd) * hd * sizeof(__half) + 2 * (size_t)ft_kt(hd) * sizeof(float);
}

/* X3 (f32-class): two stages of hi + lo K/V tiles, Q as hi and lo */
static size_t ft_smem(int hd, int nw, bool x3)
{
	const size_t kt = (size_t)ft_kt(hd), ldh = (size_t)hd + 8;
	if (x3)
		return 2 * ft_x3_stage(hd) + 2 * (size_t)16 * nw * ldh * sizeof(__half);
	return 2 * kt * hd * sizeof(float) + 2 * kt * ldh * sizeof(__half) +
	       (hd > 128 ? (size_t)16 * nw * ldh * sizeof(__half) : 0);
}

static __device__ __forceinline__ void ft_ldsm4t(uint32_t (&r)[4], uint32_t addr)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(addr));
}

/* X3: one row of HD floats (V = HD / 32 a lane, from p + lane V) scaled
 * by a power of two to max |x| in [2^13, 2^14) and stored as f16 hi + lo
 * at hp, lp (+ lane V, its 16-byte piece XORed with sw); returns the
 * inverse scale (warp-uniform). */
template <int HD>
static __device__ __forceinline__ float ft_split_row(const float *p, bool ok, __half *hp, __half *lp, int lane,
						     int sw = 0)
{
	constexpr int V = HD / 32;
	float v[V], mx = 0.0f, inv;
#pragma unroll
	for (int i = 0; i < V; i += 2) {
		const float2 t = ok ? *(const float2 *)(p + lane * V + i) : make_float2(0.0f, 0.0f);
		v[i] = t.x;
		v[i + 1] = t.y;
		mx = fmaxf(mx, fmaxf(fabsf(t.x), fabsf(t.y)));
	}
	const float sc = pow2_scale(warp_max(mx), &inv);
#pragma unroll
	for (int i = 0; i < V; i += 2) {
		uint32_t lo;
		const uint32_t hi = ft_hilo(v[i] * sc, v[i + 1] * sc, &lo);
		const int d = (lane * V + i) ^ (sw << 3);
		*(uint32_t *)(hp + d) = hi;
		*(uint32_t *)(lp + d) = lo;
	}
	return inv;
}

/* X3's K/V rows, split once per call (not in every query-tile block):
 * keys kb..*d_pos + n - 1 (kb: the first any row's window sees, rounded
 * down to a multiple of 8) of every kv head, a warp per (key, head, K or
 * V) row, grid-stride (the keys are known on the device only). Scratch
 * layout, planes of nkv x maxk rows of HD halves: K hi, K lo, V hi, V lo;
 * then nkv x maxk inverse scales of K, then of V. Row j of head h at (h
 * maxk + j) HD, its 16-byte pieces XORed with j & 7 (the 8 rows an
 * ldmatrix reads then sit in distinct banks without padding). */
static __host__ __device__ constexpr size_t ft_plane(int nkv, int maxk, int hd)
{
	return (size_t)nkv * maxk * hd;
}

template <int HD>
__global__ void __launch_bounds__(256)
	k_kv_split(const float *__restrict__ kc, const float *__restrict__ vc, __half *__restrict__ kvs, int nkv,
		   int maxk, int n, int window, const int *d_pos)
{
	/* rows below maxk only, whatever *d_pos holds (the caller's contract is
	 * *d_pos + n <= maxk; a broken one gives wrong attention, never a
	 * write past the planes) */
	const int pos0 = *d_pos, kend = min(pos0 + n - 1, maxk - 1);
	const int kb = (window > 0 && pos0 - window + 1 > 0 ? pos0 - window + 1 : 0) & ~7;
	const int lane = threadIdx.x & 31;
	const size_t plane = ft_plane(nkv, maxk, HD), nr = (size_t)nkv * maxk;
	float *isc = (float *)(kvs + 4 * plane);
	if (kend < kb)
		return;
	const size_t rows = (size_t)(kend - kb + 1) * nkv * 2;
	for (size_t r = (size_t)blockIdx.x * 8 + (threadIdx.x >> 5); r < rows; r += (size_t)gridDim.x * 8) {
		const int w = (int)(r & 1), h = (int)((r >> 1) % nkv), j = kb + (int)((r >> 1) / nkv);
		const size_t o = (size_t)h * maxk + j;
		__half *hp = kvs + (w ? 2 * plane : 0) + o * HD;
		const float inv = ft_split_row<HD>((w ? vc : kc) + ((size_t)j * nkv + h) * HD, true, hp, hp + plane, lane,
						   j & 7);
		if (lane == 0)
			isc[(w ? nr : 0) + o] = inv;
	}
}

template <int HD, int NW, bool X3>
__global__ void __launch_bounds__(32 * NW)
	k_attn_fa16(const float *__restrict__ q, const float *__restrict__ kc, const float *__restrict__ vc,
		    const __half *__restrict__ kvs, int maxk, float *__restrict__ out, int n, int nh, int nkv, float scale,
		    int window, float softcap, const int *d_pos, float *__restrict__ part, int span)
{
	constexpr int KT = ft_kt(HD);
	constexpr int LDH = HD + 8, NT = 32 * NW, ROWS = 16 * NW, HD4 = HD / 4;
	constexpr int NKS = HD / 16; /* k steps of S = Q K^T */
	constexpr int NKN = KT / 8;  /* key n-tiles of S */
	constexpr int NDN = HD / 8;  /* dim n-tiles of O */
	constexpr bool QS = X3 || HD > 128; /* Q fragments from shared memory */
	static_assert(!X3 || HD <= 128, "X3: head_dim 64 or 128");
	pdl_trigger();
	pdl_wait();
	extern __shared__ __align__(16) unsigned char ftsm[];
	/* f16 operands: f32 K/V landing tiles, then padded f16 tiles (Q at
	 * head_dim 256). X3: two stages of ft_x3_stage bytes, then Q hi, lo. */
	constexpr int TH = KT * HD; /* X3: halves of one K or V tile */
	float *Lk = (float *)ftsm, *Lv = Lk + KT * HD;
	__half *Kh = (__half *)(Lv + KT * HD), *Vh = Kh + KT * LDH;
	__half *Qh = X3 ? (__half *)(ftsm + 2 * ft_x3_stage(HD)) : Vh + KT * LDH, *Ql = Qh + ROWS * LDH;
	const int rep = nh / nkv, bq = ROWS / rep, R = bq * rep;
	const int qt = (int)gridDim.x - 1 - (int)blockIdx.x, kh = blockIdx.y, q0 = qt * bq;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
	const int pos0 = *d_pos;
	int kend = pos0 + min(q0 + bq - 1, n - 1); /* last key any row sees */
	int kbeg = window > 0 && pos0 + q0 - window + 1 > 0 ? pos0 + q0 - window + 1 : 0;
	if constexpr (X3) {
		kbeg &= ~7; /* every tile's first key a multiple of 8: row jj's swizzle is jj & 7 */
		if (part) { /* keys split: this block's segment (blockIdx.z) only */
			kbeg = max(kbeg, (int)blockIdx.z * span);
			kend = min(kend, (int)blockIdx.z * span + span - 1);
			if (kend < kbeg)
				return; /* no row of the block sees a key here: k_attn_merge reads no partial of it */
		}
	}
	const int nt = (kend - kbeg) / KT + 1;
	auto issue = [&](int it) {
		const int j0 = kbeg + it * KT;
		if constexpr (X3) {
			/* stage it & 1: the tile's rows of the four planes, clamped to
			 * kend (a clamped row is masked; its pieces, swizzled by kend & 7,
			 * are read in another order: finite values all the same), and
			 * the keys' scales */
			const uint32_t sb = smem_u32(ftsm + (it & 1) * ft_x3_stage(HD));
			const size_t plane = ft_plane(nkv, maxk, HD), hb = (size_t)kh * maxk;
			constexpr int C8 = HD / 8; /* 16-byte pieces of a row */
#pragma unroll 4
			for (int i = tid; i < KT * C8; i += NT) {
				const int jj = i / C8, j = min(j0 + jj, kend);
				const __half *src = kvs + (hb + j) * HD + (i - jj * C8) * 8;
				const uint32_t dst = sb + (uint32_t)i * 16;
#pragma unroll
				for (int pl = 0; pl < 4; pl++)
					cp_async<16>(dst + pl * TH * 2, src + pl * plane);
			}
			if (tid < 2 * KT) {
				const int jj = tid % KT, j = min(j0 + jj, kend);
				const float *isc = (const float *)(kvs + 4 * plane) + (tid >= KT ? (size_t)nkv * maxk : 0) + hb + j;
				cp_async<4>(sb + 4 * TH * 2 + tid * 4, isc);
			}
		} else {
#pragma unroll 4
			for (int i = tid; i < KT * HD4; i += NT) {
				const int jj = i / HD4, d4 = i - jj * HD4, j = min(j0 + jj, kend);
				const size_t off = ((size_t)j * nkv + kh) * HD + d4 * 4;
				cp_async<16>(smem_u32(Lk + i * 4), kc + off);
				cp_async<16>(smem_u32(Lv + i * 4), vc + off);
			}
		}
	};
	issue(0);
	cp_commit();
	/* this lane's rows: g (h = 0) and g + 8 (h = 1) of the warp's 16;
	 * padding rows (r >= R, t >= n) take the last real row's position */
	int rp[2], rlo[2];
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const int r = min(warp * 16 + g + 8 * h, R - 1), t = min(q0 + r / rep, n - 1);
		rp[h] = pos0 + t;
		rlo[h] = window > 0 && rp[h] - window + 1 > 0 ? rp[h] - window + 1 : 0;
		rp[h] = min(rp[h], kend); /* a segment's last key (else kend >= rp: no change) */
	}
	/* the keys any of the warp's rows sees: [wlo, whi] */
	const int whi = pos0 + min(q0 + min(warp * 16 + 15, R - 1) / rep, n - 1);
	const int wq = pos0 + min(q0 + min(warp * 16, R - 1) / rep, n - 1);
	const int wlo = window > 0 && wq - window + 1 > 0 ? wq - window + 1 : 0;
	/* Q to f16 A fragments: a0 (row g, dims 2tq..+1), a1 (row g + 8), a2
	 * and a3 the same 8 dims on; zero for padding rows */
	uint32_t qf[QS ? 1 : NKS][4];
	float qs[2] = {scale, scale}; /* X3: scale / the rows' Q scales */
	if constexpr (X3) {
		/* the warp's 16 rows, each scaled, as hi and lo into Qh, Ql */
		for (int rr = 0; rr < 16; rr++) {
			const int r = warp * 16 + rr, t = q0 + r / rep;
			const bool ok = r < R && t < n;
			const float inv = ft_split_row<HD>(q + ((size_t)(ok ? t : 0) * nh + kh * rep + (ok ? r % rep : 0)) * HD,
							   ok, Qh + r * LDH, Ql + r * LDH, lane);
			if (rr == g)
				qs[0] = scale * inv;
			if (rr == g + 8)
				qs[1] = scale * inv;
		}
		__syncwarp();
		qf[0][0] = qf[0][1] = qf[0][2] = qf[0][3] = 0;
	} else if constexpr (!QS) {
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const int r = warp * 16 + g + 8 * h, t = q0 + r / rep;
			const bool ok = r < R && t < n;
			const float *qp = q + ((size_t)(ok ? t : 0) * nh + kh * rep + (ok ? r % rep : 0)) * HD + 2 * tq;
#pragma unroll
			for (int ks = 0; ks < NKS; ks++)
#pragma unroll
				for (int c = 0; c < 2; c++) {
					float2 v = make_float2(0.0f, 0.0f);
					if (ok)
						v = *(const float2 *)(qp + ks * 16 + c * 8);
					qf[ks][h + 2 * c] = tg_h2(v.x, v.y);
				}
		}
	} else {
		/* the warp's 16 rows into Qh (read back by this warp only) */
		for (int i = lane; i < 16 * HD4; i += 32) {
			const int rr = i / HD4, d4 = i - rr * HD4, r = warp * 16 + rr, t = q0 + r / rep;
			float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			if (r < R && t < n)
				v = *(const float4 *)(q + ((size_t)t * nh + kh * rep + r % rep) * HD + d4 * 4);
			*(uint2 *)(Qh + r * LDH + d4 * 4) = make_uint2(tg_h2(v.x, v.y), tg_h2(v.z, v.w));
		}
		__syncwarp();
		qf[0][0] = qf[0][1] = qf[0][2] = qf[0][3] = 0;
	}
	float o[NDN][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
	float E = 0.0f; /* X3: O is kept in units of E (the largest V scale of the tiles seen) */
#pragma unroll
	for (int d = 0; d < NDN; d++)
#pragma unroll
		for (int c = 0; c < 4; c++)
			o[d][c] = 0.0f;
	for (int it = 0; it < nt; it++) {
		cp_wait<0>();
		__syncthreads(); /* tile it landed; every warp is done with the tiles of it - 1 */
		if constexpr (!X3) {
#pragma unroll 4
			for (int i = tid; i < KT * HD4; i += NT) {
				const int jj = i / HD4, d4 = i - jj * HD4;
				const float4 a = *(const float4 *)(Lk + i * 4), b = *(const float4 *)(Lv + i * 4);
				*(uint2 *)(Kh + jj * LDH + d4 * 4) = make_uint2(tg_h2(a.x, a.y), tg_h2(a.z, a.w));
				*(uint2 *)(Vh + jj * LDH + d4 * 4) = make_uint2(tg_h2(b.x, b.y), tg_h2(b.z, b.w));
			}
			__syncthreads(); /* f16 tiles visible; the landing buffers are free */
		}
		if (it + 1 < nt)
			issue(it + 1); /* X3: into the other stage, which tile it - 1 used */
		cp_commit();
		/* X3: this tile's stage */
		const __half *xk = (const __half *)(ftsm + (it & 1) * ft_x3_stage(HD));
		const float *Ksc = (const float *)(xk + 4 * TH), *Vsc = Ksc + KT;
		const int j0 = kbeg + it * KT;
		if (j0 > whi || j0 + KT - 1 < wlo)
			continue; /* no row of this warp sees a key of this tile */
		float s[NKN][4];
#pragma unroll
		for (int j = 0; j < NKN; j++)
#pragma unroll
			for (int c = 0; c < 4; c++)
				s[j][c] = 0.0f;
#pragma unroll
		for (int ks = 0; ks < NKS; ks++) {
			const int qo = (warp * 16 + (lane & 15)) * LDH + ks * 16 + (lane >> 4) * 8;
			uint32_t a[4], al4[4];
			if constexpr (QS)
				ldsm4(a, smem_u32(Qh + qo));
			else
#pragma unroll
				for (int c = 0; c < 4; c++)
					a[c] = qf[ks][c];
			if constexpr (X3)
				ldsm4(al4, smem_u32(Ql + qo));
#pragma unroll
			for (int jp = 0; jp < NKN / 2; jp++) {
				/* matrices: keys 16jp + 0..7 / 8..15 (lane >> 4) x dims +0 / +8 ((lane >> 3) & 1) */
				const int kr = jp * 16 + (lane & 7) + ((lane >> 4) << 3), kp = ks * 2 + ((lane >> 3) & 1);
				const int ko = X3 ? kr * HD + ((kp ^ (lane & 7)) << 3) : kr * LDH + kp * 8;
				uint32_t b[4];
				ldsm4(b, smem_u32((X3 ? xk : Kh) + ko));
				const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
				if constexpr (X3) { /* hi lo + lo hi, then hi hi */
					uint32_t bl[4];
					ldsm4(bl, smem_u32(xk + TH + ko));
					const uint32_t l0[2] = {bl[0], bl[1]}, l1[2] = {bl[2], bl[3]};
					tg_mma(s[2 * jp], a, l0);
					tg_mma(s[2 * jp + 1], a, l1);
					tg_mma(s[2 * jp], al4, b0);
					tg_mma(s[2 * jp + 1], al4, b1);
				}
				tg_mma(s[2 * jp], a, b0);
				tg_mma(s[2 * jp + 1], a, b1);
			}
		}
		/* s[j][c]: row g + 8 (c >> 1), key j0 + 8 j + 2 tq + (c & 1) */
		/* scores in base 2 (log2 e folded into the row scale where there is
		 * no soft-cap); the causal and window masks only where the tile
		 * crosses an edge of one of the warp's rows (warp-uniform) */
		float mx[2] = {-INFINITY, -INFINITY};
		auto score_tile = [&](auto masked) {
			const float l2 = softcap > 0.0f ? 1.0f : FT_L2E, ql[2] = {qs[0] * l2, qs[1] * l2};
#pragma unroll
			for (int j = 0; j < NKN; j++) {
				float2 ks2 = make_float2(1.0f, 1.0f);
				if constexpr (X3)
					ks2 = *(const float2 *)(Ksc + 8 * j + 2 * tq);
#pragma unroll
				for (int c = 0; c < 4; c++) {
					const int h = c >> 1, key = j0 + 8 * j + 2 * tq + (c & 1);
					float v = s[j][c] * ql[h];
					if constexpr (X3)
						v *= c & 1 ? ks2.y : ks2.x;
					if (softcap > 0.0f)
						v = softcap * tanhf(v / softcap) * FT_L2E;
					if constexpr (decltype(masked)::value)
						if (key > rp[h] || key < rlo[h])
							v = -INFINITY;
					s[j][c] = v;
					mx[h] = fmaxf(mx[h], v);
				}
			}
		};
		const bool edge = j0 + KT - 1 > min(rp[0], rp[1]) || j0 < max(rlo[0], rlo[1]);
		if (__any_sync(0xffffffffu, edge))
			score_tile(std::true_type{});
		else
			score_tile(std::false_type{});
		float al[2], mn[2], mb[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
		for (int h = 0; h < 2; h++) {
			mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
			mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
			mn[h] = fmaxf(m[h], mx[h]);
			al[h] = m[h] == -INFINITY ? 0.0f : exp2f(m[h] - mn[h]);
			m[h] = mn[h];
			mb[h] = mn[h] == -INFINITY ? 0.0f : mn[h]; /* a row with no key yet: its -inf scores give 0 */
		}
#pragma unroll
		for (int j = 0; j < NKN; j++)
#pragma unroll
			for (int c = 0; c < 4; c++) {
				const int h = c >> 1;
				s[j][c] = exp2f(s[j][c] - mb[h]); /* exp2(-inf) = +0 */
				sum[h] += s[j][c];
			}
#pragma unroll
		for (int h = 0; h < 2; h++)
			l[h] = l[h] * al[h] + sum[h];
		float pe = 1.0f; /* X3: 1 / E */
		if constexpr (X3) {
			/* O in units of E = the largest V scale so far: a larger one
			 * rescales O (powers of two: exact), P takes V's scale / E (<= 1) */
			float vt = 0.0f;
			for (int i = lane; i < KT; i += 32)
				vt = fmaxf(vt, Vsc[i]);
			vt = warp_max(vt);
			if (vt > E) {
				al[0] *= E / vt;
				al[1] *= E / vt;
				E = vt;
			}
			pe = 1.0f / E;
		}
#pragma unroll
		for (int d = 0; d < NDN; d++) {
			o[d][0] *= al[0];
			o[d][1] *= al[0];
			o[d][2] *= al[1];
			o[d][3] *= al[1];
		}
		/* V's ldmatrix (transposed) for k step kk, dims 16dp..: keys 16kk +
		 * 0..7 / 8..15 ((lane >> 3) & 1) x dims 16dp + 0 / 8 (lane >> 4) */
		auto v_frag = [&](int kk, int dp) {
			const int vr = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, vp = dp * 2 + (lane >> 4);
			return X3 ? vr * HD + ((vp ^ (lane & 7)) << 3) : vr * LDH + vp * 8;
		};
		if constexpr (X3) {
			/* P' = P s_v / E as hi + lo fragments of every k step first;
			 * then, per pair of dim n-tiles, this tile's P' V in fresh
			 * accumulators, added to O in registers (rounded to
			 * nearest). The tensor cores' own accumulation truncates:
			 * with O accumulated there across every tile, 16 queries
			 * after 4000 keys came out 1.46e-5 from the reference (H100,
			 * session 12 call 2); an emulation with truncation gave 1.85e-5,
			 * and 4.2e-7 with this per-tile fold. */
			uint32_t ph[KT / 16][4], pl[KT / 16][4];
#pragma unroll
			for (int kk = 0; kk < KT / 16; kk++)
#pragma unroll
				for (int u = 0; u < 2; u++) {
					const float2 v2 = *(const float2 *)(Vsc + 8 * (2 * kk + u) + 2 * tq);
					const float f0 = v2.x * pe, f1 = v2.y * pe;
					const float *sj = s[2 * kk + u];
					ph[kk][2 * u] = ft_hilo(sj[0] * f0, sj[1] * f1, &pl[kk][2 * u]);
					ph[kk][2 * u + 1] = ft_hilo(sj[2] * f0, sj[3] * f1, &pl[kk][2 * u + 1]);
				}
#pragma unroll
			for (int dp = 0; dp < NDN / 2; dp++) {
				float t0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, t1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
				for (int kk = 0; kk < KT / 16; kk++) {
					const int vo = v_frag(kk, dp);
					uint32_t b[4], bl[4];
					ft_ldsm4t(b, smem_u32(xk + 2 * TH + vo));
					ft_ldsm4t(bl, smem_u32(xk + 3 * TH + vo));
					const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
					const uint32_t l0[2] = {bl[0], bl[1]}, l1[2] = {bl[2], bl[3]};
					tg_mma(t0, ph[kk], l0); /* hi lo + lo hi, then hi hi */
					tg_mma(t1, ph[kk], l1);
					tg_mma(t0, pl[kk], b0);
					tg_mma(t1, pl[kk], b1);
					tg_mma(t0, ph[kk], b0);
					tg_mma(t1, ph[kk], b1);
				}
#pragma unroll
				for (int c = 0; c < 4; c++) {
					o[2 * dp][c] += t0[c];
					o[2 * dp + 1][c] += t1[c];
				}
			}
		} else {
#pragma unroll
			for (int kk = 0; kk < KT / 16; kk++) {
				const uint32_t a[4] = {tg_h2(s[2 * kk][0], s[2 * kk][1]), tg_h2(s[2 * kk][2], s[2 * kk][3]),
						       tg_h2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
						       tg_h2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
				for (int dp = 0; dp < NDN / 2; dp++) {
					uint32_t b[4];
					ft_ldsm4t(b, smem_u32(Vh + v_frag(kk, dp)));
					const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
					tg_mma(o[2 * dp], a, b0);
					tg_mma(o[2 * dp + 1], a, b1);
				}
			}
		}
	}
	cp_wait<0>(); /* the last (empty) group */
#pragma unroll
	for (int h = 0; h < 2; h++) {
		l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
		l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
		const int r = warp * 16 + g + 8 * h, t = q0 + r / rep;
		if (r >= R || t >= n)
			continue;
		if (X3 && part) {
			/* k_attn_merge's partial of segment blockIdx.z: the max in
			 * natural-log units, the sum, the unnormalized output (O E); a
			 * row that sees no key here (m -inf, l 0) is not read */
			float *pp = part + (((size_t)t * nh + kh * rep + r % rep) * gridDim.z + blockIdx.z) * (HD + 2);
			if (tq == 0)
				*(float2 *)pp = make_float2(m[h] * 0.69314718055994531f, l[h]);
#pragma unroll
			for (int d = 0; d < NDN; d++)
				*(float2 *)(pp + 2 + 8 * d + 2 * tq) = make_float2(o[d][2 * h] * E, o[d][2 * h + 1] * E);
			continue;
		}
		const float inv = (X3 ? E : 1.0f) / l[h];
		float *op = out + ((size_t)t * nh + kh * rep + r % rep) * HD + 2 * tq;
#pragma unroll
		for (int d = 0; d < NDN; d++)
			*(float2 *)(op + 8 * d) = make_float2(o[d][2 * h] * inv, o[d][2 * h + 1] * inv);
	}
}

/* k_attn_fa16's launch; X3: k_kv_split first (grid-stride; at most 8
 * blocks of 256 a SM); with part (grid.z segments of span keys),
 * k_attn_merge after */
template <int HD, int NW, bool X3>
static int ft_launch(dim3 grid, const float *q, const float *kcache, const float *vcache, __half *kvs, int maxk,
		      float *out, int n, const int *d_pos, int nh, int nkv, float scale, int window, float softcap,
		      float *part, int span)
{
	if constexpr (X3) {
		const size_t rows = (size_t)maxk * nkv * 2, cap = (size_t)g_sms * 8;
		k_kv_split<HD><<<(unsigned)((rows + 7) / 8 < cap ? (rows + 7) / 8 : cap), 256, 0, g_stream>>>(
			kcache, vcache, kvs, nkv, maxk, n, window, d_pos);
		LAUNCHED("k_kv_split");
	}
	k_attn_fa16<HD, NW, X3><<<grid, 32 * NW, ft_smem(HD, NW, X3), g_stream>>>(
		q, kcache, vcache, kvs, maxk, out, n, nh, nkv, scale, window, softcap, d_pos, part, span);
	LAUNCHED("k_attn_fa16");
	if (part) {
		k_attn_merge<<<dim3(n, nh), HD < 128 ? 128 : 256, 0, g_stream>>>(part, out, nh, HD, (int)grid.z, span,
									       window, d_pos);
		LAUNCHED("k_attn_merge");
	}
	return 0;
}

/* k_attn_fa16 (kc_attention_impl 5: 4 warps, 64 rows a block; 6: 8 warps,
 * 128 rows; X3: the f32-class variant, 8 warps) where head_dim is 64, 128
 * or 256 (X3: 64 or 128), rep fits a block's rows and (X3) the scratch for
 * k_kv_split's planes is given, 16-byte aligned; 1 (not launched)
 * elsewhere: the caller takes k_attn_flash. The caller checked n >= 16 and
 * the 16-byte alignment of the others. */
template <int NW, bool X3>
static int ft_try_nw(const float *q, const float *kcache, const float *vcache, float *out, int n, const int *d_pos,
		     int nh, int nkv, int hd, float scale, int window, float softcap, int maxk, void *scratch)
{
	const int rep = nh / nkv, bq = 16 * NW / rep;
	if ((hd != 64 && hd != 128 && (hd != 256 || X3)) || bq < 1 || ft_smem(hd, NW, X3) > (size_t)g_smem_block ||
	    (X3 && (!scratch || ((uintptr_t)scratch & 15))))
		return 1;
	dim3 grid((n + bq - 1) / bq, nkv);
	__half *kvs = (__half *)scratch;
	/* X3 with blocks for less than half the SMs (a short prompt call after
	 * cached keys: 16 queries after 4000 keys took 346 us on 8 blocks,
	 * H100): the keys split into the chunk kernels' segments (att_chunk:
	 * at most 8), a block per (query tile, kv head, segment) */
	float *part = NULL;
	int span = 0;
	if (X3 && n <= FT_SPLIT_N) {
		span = att_chunk(n, maxk);
		const int nc = att_nchunks(n, maxk);
		if (nc > 1 && (int)grid.x * nkv * 2 <= g_sms) {
			grid.z = (unsigned)nc;
			part = (float *)((char *)scratch + kv_planes_bytes(nkv, maxk, hd));
		}
	}
	int r = 0;
	if (hd == 64)
		r = ft_launch<64, NW, X3>(grid, q, kcache, vcache, kvs, maxk, out, n, d_pos, nh, nkv, scale, window, softcap,
					  part, span);
	else if (hd == 128)
		r = ft_launch<128, NW, X3>(grid, q, kcache, vcache, kvs, maxk, out, n, d_pos, nh, nkv, scale, window,
					   softcap, part, span);
	else if constexpr (!X3)
		r = ft_launch<256, NW, false>(grid, q, kcache, vcache, kvs, maxk, out, n, d_pos, nh, nkv, scale, window,
					      softcap, part, span);
	if (r)
		return r;
	g_path[X3 ? KC_PATH_ATT_X3 : KC_PATH_ATT_F16]++;
	g_path[KC_PATH_ATT_X3_SPLIT] += part != NULL;
	return 0;
}

/* Where a variant's shared memory is over the device's opt-in limit
 * (X3 at head_dim 128: 202 KB; sm_80: 163 KB), it is not set up and
 * ft_try_nw leaves those heads to k_attn_flash. */
template <int HD, int NW, bool X3>
static int ft_attr1(void)
{
	if (ft_smem(HD, NW, X3) <= (size_t)g_smem_block) /* mq_cp_setup ran first: mq_init */
		CK(cudaFuncSetAttribute(k_attn_fa16<HD, NW, X3>, cudaFuncAttributeMaxDynamicSharedMemorySize,
					(int)ft_smem(HD, NW, X3)));
	return 0;
}

static int g_att_impl; /* kc_attention_impl */

extern "C" int kc_attention_impl(int impl)
{
	return impl_swap(&g_att_impl, impl);
}

static int fa_attr(void)
{
	CK(cudaFuncSetAttribute(k_attn_flash<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fa_smem(64)));
	CK(cudaFuncSetAttribute(k_attn_flash<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fa_smem(128)));
	CK(cudaFuncSetAttribute(k_attn_flash<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fa_smem(256)));
	return ft_attr1<64, 4, false>() || ft_attr1<128, 4, false>() || ft_attr1<256, 4, false>() ||
			       ft_attr1<64, 8, false>() || ft_attr1<128, 8, false>() || ft_attr1<256, 8, false>() ||
			       ft_attr1<64, 8, true>() || ft_attr1<128, 8, true>()
		       ? -1
		       : 0;
}

/* n >= 16 queries, head_dim a multiple of 4 up to 256, rep <= 64, every
 * pointer 16-byte aligned; else the chunk kernels. k_attn_fa16 where it
 * applies (ft_try_nw): its X3 variant under kc_attention_impl 0 (the
 * default) and 7, f16 operands under 5 / 6; else, and always under 8,
 * k_attn_flash. */
static int fa_try(const float *q, const float *kcache, const float *vcache, float *out, int n, const int *d_pos,
		  int nh, int nkv, int hd, float scale, int window, float softcap, int maxk, void *scratch)
{
	const int rep = nh / nkv;
	if (g_att_impl == 1 || n < 16 || hd % 4 || hd > 256 || rep > FA_R ||
	    (((uintptr_t)q | (uintptr_t)kcache | (uintptr_t)vcache | (uintptr_t)out) & 15))
		return 1;
	if (g_att_impl == 0 || (g_att_impl >= 5 && g_att_impl <= 7)) { /* 5, 6: f16 operands; 0, 7: X3 (f32-class) */
		const int ft = g_att_impl == 5 ? ft_try_nw<4, false>(q, kcache, vcache, out, n, d_pos, nh, nkv, hd, scale,
								     window, softcap, maxk, scratch)
			       : g_att_impl == 6 ? ft_try_nw<8, false>(q, kcache, vcache, out, n, d_pos, nh, nkv, hd, scale,
								       window, softcap, maxk, scratch)
						 : ft_try_nw<8, true>(q, kcache, vcache, out, n, d_pos, nh, nkv, hd, scale,
								      window, softcap, maxk, scratch);
		if (ft <= 0)
			return ft;
	}
	const int bq = FA_R / rep;
	dim3 grid((n + bq - 1) / bq, nkv);
	const size_t smem = fa_smem(hd);
	if (hd <= 64)
		k_attn_flash<2><<<grid, FA_THREADS, smem, g_stream>>>(q, kcache, vcache, out, n, nh, nkv, hd, scale, window,
								     softcap, d_pos);
	else if (hd <= 128)
		k_attn_flash<4><<<grid, FA_THREADS, smem, g_stream>>>(q, kcache, vcache, out, n, nh, nkv, hd, scale, window,
								     softcap, d_pos);
	else
		k_attn_flash<8><<<grid, FA_THREADS, smem, g_stream>>>(q, kcache, vcache, out, n, nh, nkv, hd, scale, window,
								     softcap, d_pos);
	LAUNCHED("k_attn_flash");
	return 0;
}

/* ---- decode attention (n = 1): keys split across many warps ----
 * Why: k_attn_dec gives one block to each (kv head, 64-key chunk) and works
 * the chunk in three serial phases; at a short context the 8 blocks that
 * have keys ran 35.9K cycles each while the rest of the GPU idled (ncu,
 * NOTES run 20): 24 us per 8B layer at 17 keys, 45 us at 4K (graph, run
 * 18). Here the visible keys lo..p are cut into tiles of KT = 32 / GP keys
 * and the tiles spread evenly over up to S x AS_WARPS warps (grid S x nkv,
 * S fixed at launch from the SM count; how many warps get work is decided
 * on the device from *d_pos, so one captured step serves every position).
 * A warp owns whole tiles of one kv head and all GP (>= rep, padded) q
 * heads of its GQA group: per tile each lane loads its HD / 32 dims of the
 * KT K and V rows (coalesced rows, 2 x KT vector loads in flight per lane
 * before any arithmetic; VER 2 below: the next tile's too), forms the
 * KT x GP = 32 partial dots, and one reduce-scatter (31 shuffles) leaves
 * lane L the score of (key L / GP, head L % GP); online softmax per head
 * across the lanes of that head; acc[g][dims] += p V with p broadcast (by
 * shuffle; VER >= 1 through shared memory). The block merges its
 * warps in shared memory; a block alone (short contexts) writes the output,
 * else each writes a partial (m, l, acc) and the last block of the kv head
 * to finish (a counter it resets) merges them (float4 loads, L2). */
#define AS_WARPS 4
#define AS_MAXKV 64 /* kv heads with a counter */
__device__ unsigned g_as_done[AS_MAXKV];

/* lane's NPL dims of a row: NPL >= 4: float4 at 128 v + 4 lane; else NPL
 * consecutive */
template <int NPL> static __device__ __forceinline__ int as_dim(int lane, int e)
{
	return NPL >= 4 ? (e >> 2) * 128 + lane * 4 + (e & 3) : lane * NPL + e;
}

/* lane's NPL dims of a row (as_dim): through the read-only path (__ldg), or
 * SH: plain loads (shared memory) */
template <int NPL, bool SH = false>
static __device__ __forceinline__ void as_row(float (&r)[NPL], const float *row, int lane)
{
	if constexpr (SH && NPL >= 4) {
#pragma unroll
		for (int v = 0; v < NPL / 4; v++) {
			float4 t = *reinterpret_cast<const float4 *>(row + v * 128 + lane * 4);
			r[4 * v] = t.x;
			r[4 * v + 1] = t.y;
			r[4 * v + 2] = t.z;
			r[4 * v + 3] = t.w;
		}
	} else if constexpr (SH && NPL == 2) {
		float2 t = *reinterpret_cast<const float2 *>(row + lane * 2);
		r[0] = t.x;
		r[1] = t.y;
	} else if constexpr (SH) {
		r[0] = row[lane];
	} else if constexpr (NPL >= 4) {
#pragma unroll
		for (int v = 0; v < NPL / 4; v++) {
			float4 t = __ldg(reinterpret_cast<const float4 *>(row + v * 128 + lane * 4));
			r[4 * v] = t.x;
			r[4 * v + 1] = t.y;
			r[4 * v + 2] = t.z;
			r[4 * v + 3] = t.w;
		}
	} else if constexpr (NPL == 2) {
		float2 t = __ldg(reinterpret_cast<const float2 *>(row + lane * 2));
		r[0] = t.x;
		r[1] = t.y;
	} else {
		r[0] = __ldg(row + lane);
	}
}

/* one step of the warp's reduce-scatter of v[32] */
template <int O> static __device__ __forceinline__ void as_rs_step(float (&v)[32], int lane)
{
	const bool up = lane & O;
#pragma unroll
	for (int i = 0; i < O; i++) {
		const float send = up ? v[i] : v[i + O], keep = up ? v[i + O] : v[i];
		v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
	}
}

/* the KT K and V rows of the tile at key jb (keys past p zero): 2 x KT
 * vector loads per lane, none waited on here. Key pf (p when the kernel
 * appends this step's row itself, else -1) from shared memory: knew, vnew
 * (its cache row is written by this launch; nothing here reads it) */
template <int NPL, int KT>
static __device__ __forceinline__ void as_load(float (&kr)[KT][NPL], float (&vr)[KT][NPL], const float *kb,
					       const float *vb, size_t rs, int jb, int p, int pf, const float *knew,
					       const float *vnew, int lane)
{
#pragma unroll
	for (int k = 0; k < KT; k++) {
		if (jb + k == pf) {
			as_row<NPL, true>(kr[k], knew, lane);
			as_row<NPL, true>(vr[k], vnew, lane);
		} else if (jb + k <= p) {
			as_row<NPL>(kr[k], kb + (size_t)(jb + k) * rs, lane);
			as_row<NPL>(vr[k], vb + (size_t)(jb + k) * rs, lane);
		} else {
#pragma unroll
			for (int e = 0; e < NPL; e++)
				kr[k][e] = vr[k][e] = 0.0f;
		}
	}
}

/* One tile's arithmetic: scores, online softmax, acc += p V. SMB: the
 * softmax weights p and the rescales reach every lane through the warp's
 * 32 + GP floats at sp (16-byte aligned; the caller alternates two buffers
 * by tile, so one __syncwarp per tile orders them) as KT x GP / 4 + GP / 4
 * broadcast LDS.128 instead of KT x GP + GP shuffles (runs 22-23). */
template <int NPL, int GP, bool SMB>
static __device__ __forceinline__ void as_tile(const float (&kr)[32 / GP][NPL], const float (&vr)[32 / GP][NPL],
					       const float (&qr)[GP][NPL], float (&acc)[GP][NPL], float &m, float &l,
					       int jb, int p, int rep, float scale, float softcap, int lane, float *sp)
{
	constexpr int KT = 32 / GP;
	const int myg = lane & (GP - 1);
	float v[32];
#pragma unroll
	for (int k = 0; k < KT; k++)
#pragma unroll
		for (int g = 0; g < GP; g++) {
			float s = 0.0f;
#pragma unroll
			for (int e = 0; e < NPL; e++)
				s = fmaf(qr[g][e], kr[k][e], s);
			v[k * GP + g] = s;
		}
	/* reduce-scatter: after the step of offset o, v[i] holds index
	 * i + (lane's bits >= o); lane L ends with the sum of index L */
	as_rs_step<16>(v, lane);
	as_rs_step<8>(v, lane);
	as_rs_step<4>(v, lane);
	as_rs_step<2>(v, lane);
	as_rs_step<1>(v, lane);
	float s = v[0] * scale;
	if (softcap > 0.0f)
		s = softcap * tanhf(s / softcap);
	if (jb + lane / GP > p || myg >= rep)
		s = -INFINITY;
	float tm = s;
#pragma unroll
	for (int o = GP; o < 32; o <<= 1)
		tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, o));
	const float mn = fmaxf(m, tm);
	const float al = mn == -INFINITY ? 1.0f : expf(m - mn);
	const float pr = s == -INFINITY ? 0.0f : expf(s - mn);
	float ps = pr;
#pragma unroll
	for (int o = GP; o < 32; o <<= 1)
		ps += __shfl_xor_sync(0xffffffffu, ps, o);
	l = l * al + ps;
	m = mn;
	if constexpr (SMB) {
		sp[lane] = pr;
		if (lane < GP)
			sp[32 + lane] = al;
		__syncwarp();
		const float4 *sp4 = reinterpret_cast<const float4 *>(sp);
#pragma unroll
		for (int g4 = 0; g4 < GP / 4; g4++) {
			const float4 a4 = sp4[8 + g4];
			const float a[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
			for (int c = 0; c < 4; c++)
#pragma unroll
				for (int e = 0; e < NPL; e++)
					acc[4 * g4 + c][e] *= a[c];
		}
#pragma unroll
		for (int k = 0; k < KT; k++)
#pragma unroll
			for (int g4 = 0; g4 < GP / 4; g4++) {
				const float4 p4 = sp4[(k * GP) / 4 + g4];
				const float pk[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
				for (int c = 0; c < 4; c++)
#pragma unroll
					for (int e = 0; e < NPL; e++)
						acc[4 * g4 + c][e] = fmaf(pk[c], vr[k][e], acc[4 * g4 + c][e]);
			}
	} else {
#pragma unroll
		for (int g = 0; g < GP; g++) {
			const float a = __shfl_sync(0xffffffffu, al, g);
#pragma unroll
			for (int e = 0; e < NPL; e++)
				acc[g][e] *= a;
		}
#pragma unroll
		for (int k = 0; k < KT; k++)
#pragma unroll
			for (int g = 0; g < GP; g++) {
				const float pk = __shfl_sync(0xffffffffu, pr, k * GP + g);
#pragma unroll
				for (int e = 0; e < NPL; e++)
					acc[g][e] = fmaf(pk, vr[k][e], acc[g][e]);
			}
	}
}

/* The decode step's q/k norm + RoPE + KV append inside k_attn_split
 * (kc_qk_rope_attention, run 32): k_qk_rope_append's work without its
 * launch. k == nullptr: not this (q already rotated, row p of the caches
 * written by k_qk_rope_append). */
struct as_rope {
	const float *k, *v;                      /* [nkv][hd]: this token's k and v, before norm and RoPE */
	float *kc, *vc;                          /* the caches [ctx][nkv][hd]: row p written here */
	const float *inv_freq, *q_norm, *k_norm; /* [rot_dim / 2], [hd], [hd]; norms NULL: none */
	float mscale, eps, one;
	int rot_dim;
};

/* lane's dims d of row x (normed, not rotated) rotated: the pair of d is
 * d +- half, its (cos, sin) cs[d % half]; dims >= rot_dim unchanged */
static __device__ __forceinline__ float as_rot(const float *x, int d, int half, const float2 *cs)
{
	if (d < half)
		return rope_lo(x[d], x[d + half], cs[d]);
	if (d < 2 * half)
		return rope_hi(x[d - half], x[d], cs[d - half]);
	return x[d];
}

/* The prologue of a k_attn_split block under as_rope: sq = the rep q rows
 * of kv head kh normed and rotated; the last block with keys (last: it
 * holds key p) also norms and rotates this token's k and leaves k and v in
 * knew / vnew (for as_load) and in cache row p. A warp per row (item: the
 * q heads, then k), lane's dims 32 j + lane (conflict-free shared
 * accesses); every global load (the rows, v, inv_freq) is issued first.
 * The sum of squares as block_sum forms it in k_qk_rope_append (a warp sum
 * per 32 dims, then the sum of those over a warp, in the same order), the
 * rest by the same helpers: the same bits. cs: (cos, sin) [rot_dim / 2]
 * (a work area: free after the second barrier, which ends this). */
template <int NPL, int GP>
static __device__ __forceinline__ void as_prep(const as_rope &rp, const float *q, float *sq, float2 *cs,
					       float *knew, float *vnew, int h0, int rep, int kh, int nkv, int p,
					       bool last, int lane, int wid)
{
	constexpr int HD = 32 * NPL, MI = (GP + AS_WARPS) / AS_WARPS; /* rows per warp at most (rep + 1) */
	const int half = rp.rot_dim / 2, items = rep + (last ? 1 : 0);
	const bool vw = last && wid == rep % AS_WARPS; /* the warp of the k row also copies v */
	const size_t row = ((size_t)p * nkv + kh) * HD;
	/* half <= HD / 2 <= 128 = blockDim.x: one frequency per thread */
	const float f = (int)threadIdx.x < half ? rp.inv_freq[threadIdx.x] : 0.0f;
	float x[MI][NPL], vv[NPL];
#pragma unroll
	for (int i = 0; i < MI; i++) {
		const int it = wid + i * AS_WARPS;
		if (it < items) {
			const float *src = it == rep ? rp.k + (size_t)kh * HD : q + (size_t)(h0 + it) * HD;
#pragma unroll
			for (int j = 0; j < NPL; j++)
				x[i][j] = src[32 * j + lane];
		}
	}
	if (vw)
#pragma unroll
		for (int j = 0; j < NPL; j++)
			vv[j] = rp.v[(size_t)kh * HD + 32 * j + lane];
#pragma unroll
	for (int i = 0; i < MI; i++) {
		const int it = wid + i * AS_WARPS;
		if (it < items) {
			const float *nw = it == rep ? rp.k_norm : rp.q_norm;
			float *dst = it == rep ? knew : sq + it * HD;
			if (nw) {
				float v = 0.0f;
#pragma unroll
				for (int j = 0; j < NPL; j++) {
					const float sj = warp_sum(x[i][j] * x[i][j]);
					if (lane == j)
						v = sj;
				}
				const float inv = 1.0f / sqrtf(warp_sum(v) / (float)HD + rp.eps);
#pragma unroll
				for (int j = 0; j < NPL; j++)
					x[i][j] = qk_normed(x[i][j], inv, nw[32 * j + lane], rp.one);
			}
#pragma unroll
			for (int j = 0; j < NPL; j++)
				dst[32 * j + lane] = x[i][j];
		}
	}
	if ((int)threadIdx.x < half)
		cs[threadIdx.x] = rope_cs(p, f, rp.mscale);
	if (vw)
#pragma unroll
		for (int j = 0; j < NPL; j++) {
			vnew[32 * j + lane] = vv[j];
			rp.vc[row + 32 * j + lane] = vv[j];
		}
	__syncthreads();
	/* rotate each row in place: every lane reads its pairs, then writes */
#pragma unroll
	for (int i = 0; i < MI; i++) {
		const int it = wid + i * AS_WARPS;
		if (it < items) {
			float *r = it == rep ? knew : sq + it * HD;
#pragma unroll
			for (int j = 0; j < NPL; j++)
				x[i][j] = as_rot(r, 32 * j + lane, half, cs);
			__syncwarp();
#pragma unroll
			for (int j = 0; j < NPL; j++)
				r[32 * j + lane] = x[i][j];
			if (it == rep)
#pragma unroll
				for (int j = 0; j < NPL; j++)
					rp.kc[row + 32 * j + lane] = x[i][j];
		}
	}
	__syncthreads();
}

/* VER 2 (run 25; the default): (1) the next tile's K/V loads are issued
 * before the current tile's arithmetic (two register buffers, for head_dim
 * <= 128: at 256 the second buffer would not fit in 255 registers), so a
 * warp has a tile in flight while it computes; run 22's loop loaded,
 * waited, then computed (ncu at 4K: 2 warps per scheduler, 73% of cycles
 * with none eligible, 38% of DRAM bandwidth). (2) p and the rescales reach
 * the lanes through shared memory (as_tile SMB). (3) the last block merges
 * the partials online in rounds of AS_MC with every load of a round in
 * flight (run 22: m and l first, then the rows 8 loads deep: 1 + 5
 * dependent L2 round trips for 33 partials, now 2). VER 0 is run 22's
 * kernel (kc_attention_impl 3), VER 1 has (2) and (3) but not (1) (impl 4);
 * both for benchmarks. Run 25, alone at 4096 keys (us, run 22 / VER 1 /
 * VER 2): 8B heads 17.35 / 16.90 / 14.51, 1B 12.97 / 12.59 / 10.54. The
 * 8B shape takes 245 registers (2 blocks per SM, as the grid has): twice
 * the blocks (impl 2) now run in two waves, 18.9 us. */
#define AS_MC 17 /* partials per merge round: the 33 of 8 kv heads on 132 SMs in two */

template <int NPL, int GP, int VER>
__global__ void __launch_bounds__(32 * AS_WARPS)
	k_attn_split(const float *__restrict__ q, const float *__restrict__ kc, const float *__restrict__ vc,
		     float *__restrict__ out, float *__restrict__ part, int nh, int nkv, float scale, int window,
		     float softcap, const int *d_pos, as_rope rp)
{
	pdl_trigger();
	pdl_wait();
	constexpr int HD = 32 * NPL, KT = 32 / GP, PS = HD + 4; /* partial: m, l, 2 pad, acc (16-byte aligned) */
	constexpr bool V2 = VER >= 1, PIPE = VER == 2 && NPL <= 4;
	__shared__ float s_m[AS_WARPS][GP], s_l[AS_WARPS][GP], s_L[GP];
	__shared__ __align__(16) float s_acc[AS_WARPS][GP][HD]; /* as_rope: as_prep's work area first */
	__shared__ float s_w[GP][AS_SMAX];
	__shared__ __align__(16) float s_p[AS_WARPS][2][V2 ? 32 + GP : 4];
	__shared__ __align__(16) float s_new[2][HD]; /* as_rope: key p's k and v rows */
	__shared__ __align__(16) float s_q[GP][HD];  /* as_rope: the q rows, normed and rotated */
	__shared__ bool s_last;
	const int kh = blockIdx.y, S = gridDim.x, rep = nh / nkv, h0 = kh * rep;
	const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	const int p = *d_pos;
	const int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
	const int nt = (p - lo + KT) / KT; /* tiles holding the p - lo + 1 visible keys */
	const int nw = nt < S * AS_WARPS ? nt : S * AS_WARPS, nb = (nw + AS_WARPS - 1) / AS_WARPS;
	if ((int)blockIdx.x >= nb) /* no keys for this block at this position */
		return;
	const int w = blockIdx.x * AS_WARPS + wid;
	const int t0 = w < nw ? (int)((long long)w * nt / nw) : 0, t1 = w < nw ? (int)((long long)(w + 1) * nt / nw) : 0;
	const size_t rs = (size_t)nkv * HD;
	const float *kb = kc + (size_t)kh * HD, *vb = vc + (size_t)kh * HD;
	float qr[GP][NPL], acc[GP][NPL];
	/* PIPE: the first tile's loads go out before anything else (under
	 * as_rope without key p, which the prologue makes: patched in after) */
	[[maybe_unused]] float ka[KT][NPL], va[KT][NPL];
	if constexpr (PIPE)
		if (w < nw)
			as_load<NPL, KT>(ka, va, kb, vb, rs, lo + t0 * KT, rp.k ? p - 1 : p, -1, s_new[0], s_new[1], lane);
	int pf = -1; /* as_load: the key taken from s_new */
	if (rp.k) {
		as_prep<NPL, GP>(rp, q, &s_q[0][0], reinterpret_cast<float2 *>(&s_acc[0][0][0]), s_new[0], s_new[1],
				 h0, rep, kh, nkv, p, (int)blockIdx.x == nb - 1, lane, wid);
		pf = p;
#pragma unroll
		for (int g = 0; g < GP; g++) {
			if (g < rep)
				as_row<NPL, true>(qr[g], s_q[g], lane);
			else
#pragma unroll
				for (int e = 0; e < NPL; e++)
					qr[g][e] = 0.0f;
		}
		if constexpr (PIPE)
			if (w < nw && t0 == nt - 1) /* the first tile is the one holding key p */
#pragma unroll
				for (int k = 0; k < KT; k++)
					if (lo + t0 * KT + k == p) {
						as_row<NPL, true>(ka[k], s_new[0], lane);
						as_row<NPL, true>(va[k], s_new[1], lane);
					}
	} else {
#pragma unroll
		for (int g = 0; g < GP; g++) {
			if (g < rep)
				as_row<NPL>(qr[g], q + (size_t)(h0 + g) * HD, lane);
			else
#pragma unroll
				for (int e = 0; e < NPL; e++)
					qr[g][e] = 0.0f;
		}
	}
#pragma unroll
	for (int g = 0; g < GP; g++)
#pragma unroll
		for (int e = 0; e < NPL; e++)
			acc[g][e] = 0.0f;
	float m = -INFINITY, l = 0.0f; /* of head lane % GP; equal on every lane of that head */
	if (w < nw) {
		if constexpr (PIPE) {
			/* tiles alternate between buffers a and b: b's loads go out
			 * before a's arithmetic and the reverse (t0 < t1: w < nw <= nt) */
			float kq[KT][NPL], vq[KT][NPL];
			int t = t0;
			for (; t + 1 < t1; t += 2) {
				as_load<NPL, KT>(kq, vq, kb, vb, rs, lo + (t + 1) * KT, p, pf, s_new[0], s_new[1],
						 lane);
				as_tile<NPL, GP, true>(ka, va, qr, acc, m, l, lo + t * KT, p, rep, scale, softcap, lane,
						       s_p[wid][t & 1]);
				if (t + 2 < t1)
					as_load<NPL, KT>(ka, va, kb, vb, rs, lo + (t + 2) * KT, p, pf, s_new[0],
							 s_new[1], lane);
				as_tile<NPL, GP, true>(kq, vq, qr, acc, m, l, lo + (t + 1) * KT, p, rep, scale, softcap,
						       lane, s_p[wid][(t + 1) & 1]);
			}
			if (t < t1)
				as_tile<NPL, GP, true>(ka, va, qr, acc, m, l, lo + t * KT, p, rep, scale, softcap, lane,
						       s_p[wid][t & 1]);
		} else {
			for (int t = t0; t < t1; t++) {
				float kr[KT][NPL], vr[KT][NPL];
				as_load<NPL, KT>(kr, vr, kb, vb, rs, lo + t * KT, p, pf, s_new[0], s_new[1], lane);
				as_tile<NPL, GP, V2>(kr, vr, qr, acc, m, l, lo + t * KT, p, rep, scale, softcap, lane,
						     s_p[wid][t & 1]);
			}
		}
	}
	/* merge the block's warps (a warp without tiles has l = 0) */
	if (lane < GP) {
		s_m[wid][lane] = m;
		s_l[wid][lane] = l;
	}
#pragma unroll
	for (int g = 0; g < GP; g++)
		if (g < rep)
#pragma unroll
			for (int e = 0; e < NPL; e++)
				s_acc[wid][g][as_dim<NPL>(lane, e)] = acc[g][e];
	__syncthreads();
	const bool alone = nb == 1;
	for (int i = threadIdx.x; i < rep * HD; i += blockDim.x) {
		const int g = i / HD, d = i % HD;
		float M = -INFINITY, L = 0.0f, A = 0.0f;
#pragma unroll
		for (int ww = 0; ww < AS_WARPS; ww++)
			M = fmaxf(M, s_m[ww][g]);
#pragma unroll
		for (int ww = 0; ww < AS_WARPS; ww++)
			if (s_l[ww][g] > 0.0f) {
				const float f = expf(s_m[ww][g] - M);
				L += f * s_l[ww][g];
				A += f * s_acc[ww][g][d];
			}
		if (alone) {
			out[(size_t)(h0 + g) * HD + d] = A / L;
		} else {
			float *pp = part + ((size_t)(h0 + g) * AS_SMAX + blockIdx.x) * PS;
			if (d == 0) {
				pp[0] = M;
				pp[1] = L;
			}
			pp[4 + d] = A;
		}
	}
	if (alone)
		return;
	__threadfence(); /* this thread's partials, before the count */
	__syncthreads();
	if (threadIdx.x == 0)
		s_last = atomicAdd(&g_as_done[kh], 1u) == (unsigned)nb - 1;
	__syncthreads();
	if (!s_last)
		return;
	__threadfence();
	if constexpr (V2) {
		/* the last block: thread (head g, 4 dims) merges the nb partials
		 * online, AS_MC at a time, each round's (m, l) and rows loaded
		 * before any is used (__ldcg: from L2, not a stale L1). Every
		 * partial has keys (block b < nb owns warp 4 b < nw): m finite,
		 * l > 0. */
		for (int i = threadIdx.x; i < rep * (HD / 4); i += blockDim.x) {
			const int g = i / (HD / 4), d4 = i % (HD / 4);
			const float *pg = part + (size_t)(h0 + g) * AS_SMAX * PS;
			float M = -INFINITY, L = 0.0f;
			float4 A = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			for (int b0 = 0; b0 < nb; b0 += AS_MC) {
				float2 ml[AS_MC];
				float4 r[AS_MC];
#pragma unroll
				for (int j = 0; j < AS_MC; j++) {
					if (b0 + j < nb) {
						const float *pb = pg + (size_t)(b0 + j) * PS;
						ml[j] = __ldcg(reinterpret_cast<const float2 *>(pb));
						r[j] = __ldcg(reinterpret_cast<const float4 *>(pb + 4) + d4);
					} else {
						ml[j] = make_float2(-INFINITY, 0.0f);
						r[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
					}
				}
				float Mn = M;
#pragma unroll
				for (int j = 0; j < AS_MC; j++)
					Mn = fmaxf(Mn, ml[j].x);
				const float f = expf(M - Mn); /* 0 in the first round (M = -inf, Mn finite) */
				L *= f;
				A.x *= f;
				A.y *= f;
				A.z *= f;
				A.w *= f;
#pragma unroll
				for (int j = 0; j < AS_MC; j++) {
					const float wb = expf(ml[j].x - Mn); /* 0 past nb */
					L = fmaf(wb, ml[j].y, L);
					A.x = fmaf(wb, r[j].x, A.x);
					A.y = fmaf(wb, r[j].y, A.y);
					A.z = fmaf(wb, r[j].z, A.z);
					A.w = fmaf(wb, r[j].w, A.w);
				}
				M = Mn;
			}
			A.x /= L;
			A.y /= L;
			A.z /= L;
			A.w /= L;
			reinterpret_cast<float4 *>(out + (size_t)(h0 + g) * HD)[d4] = A;
		}
	} else {
		/* run 22: weights exp(m_b - M) per (head, block), then the sums
		 * (__ldcg: the other blocks' partials, from L2, not a stale L1) */
		for (int g = wid; g < rep; g += AS_WARPS) {
			const float *pg = part + (size_t)(h0 + g) * AS_SMAX * PS;
			float m0 = lane < nb ? __ldcg(pg + (size_t)lane * PS) : -INFINITY;
			float m1 = lane + 32 < nb ? __ldcg(pg + (size_t)(lane + 32) * PS) : -INFINITY;
			float l0 = lane < nb ? __ldcg(pg + (size_t)lane * PS + 1) : 0.0f;
			float l1 = lane + 32 < nb ? __ldcg(pg + (size_t)(lane + 32) * PS + 1) : 0.0f;
			float M = fmaxf(m0, m1);
#pragma unroll
			for (int o = 16; o > 0; o >>= 1)
				M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
			const float w0 = lane < nb ? expf(m0 - M) : 0.0f, w1 = lane + 32 < nb ? expf(m1 - M) : 0.0f;
			s_w[g][lane] = w0;
			s_w[g][lane + 32] = w1;
			const float L = warp_sum(w0 * l0 + w1 * l1);
			if (lane == 0)
				s_L[g] = L;
		}
		__syncthreads();
		for (int i = threadIdx.x; i < rep * (HD / 4); i += blockDim.x) {
			const int g = i / (HD / 4), d4 = i % (HD / 4);
			const float4 *pg = reinterpret_cast<const float4 *>(part + (size_t)(h0 + g) * AS_SMAX * PS + 4) + d4;
			float4 A = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
			for (int b = 0; b < nb; b++) {
				const float wb = s_w[g][b];
				const float4 t = __ldcg(pg + (size_t)b * (PS / 4));
				A.x = fmaf(wb, t.x, A.x);
				A.y = fmaf(wb, t.y, A.y);
				A.z = fmaf(wb, t.z, A.z);
				A.w = fmaf(wb, t.w, A.w);
			}
			const float L = s_L[g];
			A.x /= L;
			A.y /= L;
			A.z /= L;
			A.w /= L;
			reinterpret_cast<float4 *>(out + (size_t)(h0 + g) * HD)[d4] = A;
		}
	}
	if (threadIdx.x == 0)
		g_as_done[kh] = 0; /* for the next launch */
}

/* n == 1, head_dim 32/64/128/256, rep <= 8, nkv <= AS_MAXKV, 16-byte
 * aligned pointers; else (returns 1) k_attn_dec. Blocks per kv head: about
 * g_as_per_sm blocks per SM over all kv heads, at most AS_SMAX and no more
 * than the cache's tiles need. */
static int g_as_per_sm = 2;

template <int NPL, int GP>
static void as_launch_v(int ver, dim3 grid, const float *q, const float *kcache, const float *vcache, float *out,
			float *part, int nh, int nkv, float scale, int window, float softcap, const int *d_pos,
			const as_rope &rp)
{
	if (ver == 2)
		k_attn_split<NPL, GP, 2><<<grid, 32 * AS_WARPS, 0, g_stream>>>(q, kcache, vcache, out, part, nh, nkv,
									      scale, window, softcap, d_pos, rp);
	else if (ver == 1)
		k_attn_split<NPL, GP, 1><<<grid, 32 * AS_WARPS, 0, g_stream>>>(q, kcache, vcache, out, part, nh, nkv,
									      scale, window, softcap, d_pos, rp);
	else
		k_attn_split<NPL, GP, 0><<<grid, 32 * AS_WARPS, 0, g_stream>>>(q, kcache, vcache, out, part, nh, nkv,
									      scale, window, softcap, d_pos, rp);
}

template <int NPL>
static void as_launch(int gp, dim3 grid, const float *q, const float *kcache, const float *vcache, float *out,
		      float *part, int nh, int nkv, float scale, int window, float softcap, const int *d_pos,
		      const as_rope &rp)
{
	const int ver = g_att_impl == 3 ? 0 : g_att_impl == 4 ? 1 : 2; /* kc_attention_impl */
	if (gp == 4)
		as_launch_v<NPL, 4>(ver, grid, q, kcache, vcache, out, part, nh, nkv, scale, window, softcap, d_pos, rp);
	else
		as_launch_v<NPL, 8>(ver, grid, q, kcache, vcache, out, part, nh, nkv, scale, window, softcap, d_pos, rp);
}

/* rp: as_rope (rp.k NULL: kc_qk_rope_append ran) */
static int as_try(const float *q, const float *kcache, const float *vcache, float *out, int n, const int *d_pos,
		  int nh, int nkv, int hd, float scale, int window, float softcap, int max_keys, void *scratch,
		  const as_rope &rp)
{
	const int rep = nh / nkv;
	if (g_att_impl == 1 || n != 1 || rep > 8 || nkv > AS_MAXKV ||
	    (hd != 32 && hd != 64 && hd != 128 && hd != 256) ||
	    (((uintptr_t)q | (uintptr_t)kcache | (uintptr_t)vcache | (uintptr_t)out | (uintptr_t)scratch) & 15))
		return 1;
	const int gp = rep <= 4 ? 4 : 8, kt = 32 / gp;
	const int per_sm = g_att_impl == 2 ? 2 * g_as_per_sm : g_as_per_sm;
	int S = (per_sm * g_sms + nkv - 1) / nkv;
	const int need = (max_keys + kt * AS_WARPS - 1) / (kt * AS_WARPS);
	S = S > need ? need : S;
	S = S > AS_SMAX ? AS_SMAX : S < 1 ? 1 : S;
	dim3 grid(S, nkv);
	float *part = (float *)scratch;
	switch (hd) {
	case 32: as_launch<1>(gp, grid, q, kcache, vcache, out, part, nh, nkv, scale, window, softcap, d_pos, rp); break;
	case 64: as_launch<2>(gp, grid, q, kcache, vcache, out, part, nh, nkv, scale, window, softcap, d_pos, rp); break;
	case 128: as_launch<4>(gp, grid, q, kcache, vcache, out, part, nh, nkv, scale, window, softcap, d_pos, rp); break;
	default: as_launch<8>(gp, grid, q, kcache, vcache, out, part, nh, nkv, scale, window, softcap, d_pos, rp); break;
	}
	LAUNCHED("k_attn_split");
	return 0;
}

extern "C" int kc_attention(const float *q, const float *kcache, const float *vcache, float *out, int n,
			    const int *d_pos, int nh, int nkv, int hd, float scale, int window, float softcap,
			    int max_keys, void *scratch)
{
	if (hd > 32 * ATT_E || nkv < 1 || nh % nkv) {
		snprintf(g_err, sizeof(g_err), "attention: head_dim %d heads %d/%d unsupported", hd, nh, nkv);
		return -1;
	}
	if (n < 1)
		return 0;
	int fa = fa_try(q, kcache, vcache, out, n, d_pos, nh, nkv, hd, scale, window, softcap, max_keys, scratch);
	if (fa <= 0)
		return fa;
	const as_rope none = {};
	int as = as_try(q, kcache, vcache, out, n, d_pos, nh, nkv, hd, scale, window, softcap, max_keys, scratch,
			none);
	if (as <= 0)
		return as;
	int chunk = att_chunk(n, max_keys), nchunks = att_nchunks(n, max_keys);
	int rep = nh / nkv, ngroups = (rep + ATT_G - 1) / ATT_G;
	dim3 grid(n, nkv * ngroups, nchunks);
	if (chunk == AD_CH) {
		k_attn_dec<<<grid, 128, 0, g_stream>>>(q, kcache, vcache, (float *)scratch, nh, nkv, hd, scale, window,
						       softcap, d_pos, nchunks, ngroups);
		LAUNCHED("k_attn_dec");
	} else {
		k_attn_chunk<<<grid, 32 * ATT_WARPS, 0, g_stream>>>(q, kcache, vcache, (float *)scratch, nh, nkv, hd,
								     scale, window, softcap, d_pos, chunk, nchunks,
								     ngroups);
		LAUNCHED("k_attn_chunk");
	}
	dim3 g2(n, nh);
	k_attn_merge<<<g2, hd < 128 ? 128 : 256, 0, g_stream>>>((const float *)scratch, out, nh, hd, nchunks, chunk,
								 window, d_pos);
	LAUNCHED("k_attn_merge");
	return 0;
}

static int g_rope_impl; /* kc_rope_impl */

extern "C" int kc_rope_impl(int impl)
{
	return impl_swap(&g_rope_impl, impl);
}

/* n == 1 where the split kernel serves the shape (as_try): one launch,
 * k_attn_split with as_rope (run 32: the decode step's k_qk_rope_append
 * launch gone); else, and under kc_rope_impl(1), the two launches. */
extern "C" int kc_qk_rope_attention(float *q, const float *k, const float *v, int n, int nh, int nkv, int hd,
				    int rot_dim, const int *d_pos, const float *inv_freq, float mscale,
				    const float *q_norm, const float *k_norm, float eps, int add_one, float *kcache,
				    float *vcache, float *out, float scale, int window, float softcap, int max_keys,
				    void *scratch)
{
	if (hd > 32 * ATT_E || rot_dim > hd || rot_dim % 2 || nkv < 1 || nh % nkv) {
		snprintf(g_err, sizeof(g_err), "rope attention: head_dim %d rot_dim %d heads %d/%d unsupported", hd,
			 rot_dim, nh, nkv);
		return -1;
	}
	if (n < 1)
		return 0;
	if (n == 1 && g_rope_impl == 0) {
		const as_rope rp = {k, v, kcache, vcache, inv_freq, q_norm, k_norm, mscale, eps, add_one ? 1.0f : 0.0f,
				    rot_dim};
		int as = as_try(q, kcache, vcache, out, n, d_pos, nh, nkv, hd, scale, window, softcap, max_keys,
				scratch, rp);
		g_path[KC_PATH_ROPE_FUSED] += as == 0;
		if (as <= 0)
			return as;
	}
	if (kc_qk_rope_append(q, (float *)k, v, n, nh, nkv, hd, rot_dim, d_pos, inv_freq, mscale, q_norm, k_norm,
			      eps, add_one, kcache, vcache))
		return -1;
	return kc_attention(q, kcache, vcache, out, n, d_pos, nh, nkv, hd, scale, window, softcap, max_keys,
			    scratch);
}

/* ---- token selection ---- */

/* Argmax over the vocabulary in one launch: AM_BLOCKS blocks each reduce a
 * strided share (v1 was one block: 125 dependent rounds of loads for a
 * 128K vocabulary); the last block to finish (a counter it resets for the
 * next launch) reduces the partials. Ties go to the lowest index, as in
 * sampler_argmax; NaN never wins; all NaN gives token 0. */
#define AM_BLOCKS 128
#define AM_THREADS 512
__device__ float g_am_v[AM_BLOCKS];
__device__ int g_am_i[AM_BLOCKS];
__device__ unsigned g_am_done;

static __device__ __forceinline__ void am_take(float &best, int &bi, float v, int i)
{
	if (v > best || (v == best && i < bi)) {
		best = v;
		bi = i;
	}
}

/* block-wide (best, index); thread 0 gets the result */
static __device__ void am_block(float &best, int &bi)
{
	__shared__ float sv[32];
	__shared__ int si[32];
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		float ov = __shfl_xor_sync(0xffffffffu, best, o);
		int oi = __shfl_xor_sync(0xffffffffu, bi, o);
		am_take(best, bi, ov, oi);
	}
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	if (lane == 0) {
		sv[wid] = best;
		si[wid] = bi;
	}
	__syncthreads();
	if (threadIdx.x == 0)
		for (int w = 1; w < (int)(blockDim.x >> 5); w++)
			am_take(best, bi, sv[w], si[w]);
}

__global__ void __launch_bounds__(AM_THREADS) k_argmax(const float *logits, int vocab, int *out, int *hist,
						       const int *d_pos)
{
	pdl_trigger();
	pdl_wait();
	__shared__ bool last;
	float best = -INFINITY;
	int bi = 0x7fffffff;
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < vocab; i += gridDim.x * blockDim.x)
		am_take(best, bi, logits[i], i);
	am_block(best, bi);
	if (threadIdx.x == 0) {
		g_am_v[blockIdx.x] = best;
		g_am_i[blockIdx.x] = bi;
		__threadfence();
		last = atomicAdd(&g_am_done, 1u) == gridDim.x - 1;
	}
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	best = -INFINITY;
	bi = 0x7fffffff;
	for (int b = threadIdx.x; b < (int)gridDim.x; b += blockDim.x)
		am_take(best, bi, ((volatile float *)g_am_v)[b], ((volatile int *)g_am_i)[b]);
	am_block(best, bi);
	if (threadIdx.x == 0) {
		if (bi == 0x7fffffff) /* all NaN: token 0, as a scan from index 0 would give */
			bi = 0;
		out[0] = bi;
		if (hist)
			hist[*d_pos] = bi;
		g_am_done = 0;
	}
}

extern "C" int kc_argmax(const float *logits, int vocab, int *d_out, int *d_hist, const int *d_pos)
{
	int blocks = (vocab + AM_THREADS * 4 - 1) / (AM_THREADS * 4);
	blocks = blocks < 1 ? 1 : blocks > AM_BLOCKS ? AM_BLOCKS : blocks;
	k_argmax<<<blocks, AM_THREADS, 0, g_stream>>>(logits, vocab, d_out, d_hist, d_pos);
	LAUNCHED("k_argmax");
	return 0;
}

__global__ void k_pos_advance(int *p, int n)
{
	pdl_trigger();
	pdl_wait();
	*p += n;
}

extern "C" int kc_pos_advance(int *d_pos, int n)
{
	k_pos_advance<<<1, 1, 0, g_stream>>>(d_pos, n);
	LAUNCHED("k_pos_advance");
	return 0;
}

/* ---- token read-back ---- */

extern "C" int kc_stage_int(const int *d_src, int slot)
{
	if (slot < 0 || slot >= KC_STAGE_SLOTS)
		return fail("kc_stage_int", cudaErrorInvalidValue);
	CK(cudaMemcpyAsync(&g_stage[slot], d_src, sizeof(int), cudaMemcpyDeviceToHost, g_stream));
	CK(cudaEventRecord(g_stage_ev[slot], g_stream));
	return 0;
}

extern "C" int kc_stage_wait(int slot, int *out)
{
	if (slot < 0 || slot >= KC_STAGE_SLOTS)
		return fail("kc_stage_wait", cudaErrorInvalidValue);
	CK(cudaEventSynchronize(g_stage_ev[slot]));
	*out = ((volatile int *)g_stage)[slot];
	return 0;
}

/* ---- graphs ---- */

struct kc_graph {
	cudaGraph_t g;
	cudaGraphExec_t x;
};

extern "C" int kc_capture_begin(void)
{
	CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
	return 0;
}

extern "C" int kc_capture_end(kc_graph **out)
{
	kc_graph *g = (kc_graph *)calloc(1, sizeof(*g));
	*out = NULL;
	if (!g)
		return -1;
	cudaError_t e = cudaStreamEndCapture(g_stream, &g->g);
	if (e != cudaSuccess) {
		free(g);
		return fail("cudaStreamEndCapture", e);
	}
	e = cudaGraphInstantiate(&g->x, g->g, 0);
	if (e != cudaSuccess) {
		cudaGraphDestroy(g->g);
		free(g);
		return fail("cudaGraphInstantiate", e);
	}
	*out = g;
	return 0;
}

extern "C" int kc_graph_launch(kc_graph *g)
{
	CK(cudaGraphLaunch(g->x, g_stream));
	return 0;
}

extern "C" void kc_graph_free(kc_graph *g)
{
	if (!g)
		return;
	cudaGraphExecDestroy(g->x);
	cudaGraphDestroy(g->g);
	free(g);
}

/* ---- timing, bandwidth ---- */

extern "C" int kc_profile(int on)
{
	CK(cudaStreamSynchronize(g_stream));
	CK(on ? cudaProfilerStart() : cudaProfilerStop());
	return 0;
}

extern "C" int kc_timer_mark(int i)
{
	CK(cudaEventRecord(g_ev[i & 7], g_stream));
	return 0;
}

extern "C" double kc_timer_elapsed(int a, int b)
{
	float ms = 0.0f;
	if (cudaEventSynchronize(g_ev[b & 7]) != cudaSuccess ||
	    cudaEventElapsedTime(&ms, g_ev[a & 7], g_ev[b & 7]) != cudaSuccess)
		return -1.0;
	return ms * 1e-3;
}

__global__ void k_read_sum(const uint4 *p, size_t n, unsigned *out)
{
	unsigned a = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		uint4 v = __ldg(p + i);
		a += v.x ^ v.y ^ v.z ^ v.w;
	}
	if (a == 0x12345678u) /* keeps the loads; practically never true */
		out[blockIdx.x] = a;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

extern "C" double kc_read_bandwidth(size_t bytes)
{
	void *buf = kc_malloc(bytes);
	unsigned *out = (unsigned *)kc_malloc(4096 * sizeof(unsigned));
	double t[7], bw = -1.0;
	if (!buf || !out)
		goto done;
	if (kc_fill_uniform((float *)buf, bytes / 4, 1.0f, 2.0f, 7))
		goto done;
	for (int i = 0; i < 8; i++) {
		kc_timer_mark(0);
		k_read_sum<<<g_sms * 8, 512, 0, g_stream>>>((const uint4 *)buf, bytes / 16, out);
		kc_timer_mark(1);
		double s = kc_timer_elapsed(0, 1);
		if (s <= 0)
			goto done;
		if (i)
			t[i - 1] = s;
	}
	qsort(t, 7, sizeof(double), cmp_double);
	bw = (double)bytes / t[3];
done:
	kc_free(buf);
	kc_free(out);
	return bw;
}

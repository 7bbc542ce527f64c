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
 *   k_matvec_q       decode: a warp per KC_MV_ROWS rows, straight from the
 *                    packed codes; up to 3 matrices sharing x in one launch
 *   k_gemm           prefill: 64x64 output tile, each 64x32 weight tile
 *                    dequantized once into shared memory for 64 tokens
 *   k_qk_rope_append per-head q/k norm + RoPE + KV-cache append
 *   k_attn_chunk     attention over one chunk of keys for one GQA group,
 *   k_attn_merge     online softmax; the merge combines the chunks
 *   k_glu, k_add_rmsnorm, k_argmax
 *
 * Measured / rejected variants are recorded in kernels/cuda/NOTES.md.
 */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math.h>
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
static int *g_stage;                      /* [KC_STAGE_SLOTS] pinned host */
static cudaEvent_t g_stage_ev[KC_STAGE_SLOTS];

static int fail(const char *what, cudaError_t e)
{
	snprintf(g_err, sizeof(g_err), "%s: %s", what, cudaGetErrorString(e));
	return -1;
}
#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return fail(#call, e_); } while (0)
#define LAUNCHED(name) do { cudaError_t e_ = cudaGetLastError(); if (e_ != cudaSuccess) return fail(name, e_); } while (0)

extern "C" const char *kc_error(void) { return g_err; }

extern "C" int kc_device_count(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return n;
}

extern "C" int kc_init(int dev)
{
	if (g_ready)
		return 0;
	setenv("CUDA_CACHE_DISABLE", "1", 0);
	setenv("CUDA_MODULE_LOADING", "EAGER", 0);
	CK(cudaSetDevice(dev));
	CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
	for (int i = 0; i < 8; i++)
		CK(cudaEventCreate(&g_ev[i]));
	CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, dev));
	CK(cudaHostAlloc((void **)&g_stage, KC_STAGE_SLOTS * sizeof(int), cudaHostAllocDefault));
	for (int i = 0; i < KC_STAGE_SLOTS; i++)
		CK(cudaEventCreateWithFlags(&g_stage_ev[i], cudaEventDisableTiming));
	/* the runtime finishes its lazy set-up here (context, module load),
	 * before the caller locks the process down */
	CK(cudaFree(0));
	CK(cudaStreamSynchronize(g_stream));
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

extern "C" int kc_sync(void)
{
	CK(cudaStreamSynchronize(g_stream));
	CK(cudaGetLastError());
	return 0;
}

/* ---- element access ---- */

static size_t dt_size(kdtype dt) { return dt == KDT_F32 ? 4 : 2; }

struct F32 { typedef float T; static __device__ __forceinline__ float ld(const void *p, size_t i) { return __ldg((const float *)p + i); } };
struct F16 { static __device__ __forceinline__ float ld(const void *p, size_t i) {
	unsigned short h = __ldg((const unsigned short *)p + i); return __half2float(__ushort_as_half(h)); } };
struct BF16 { static __device__ __forceinline__ float ld(const void *p, size_t i) {
	unsigned short h = __ldg((const unsigned short *)p + i); return __uint_as_float((unsigned)h << 16); } };

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

extern "C" int kc_matrix_upload(const kq_matrix *h, kq_matrix *d)
{
	*d = *h;
	d->w = d->scales = d->biases = NULL;
	size_t wb = h->bits == 0 ? (size_t)h->rows * h->cols * dt_size(h->wdt) : (size_t)h->rows * h->cols * h->bits / 8;
	void *w = kc_malloc(wb);
	if (!w || kc_upload(w, h->w, wb))
		goto fail;
	d->w = w;
	if (h->bits) {
		size_t sb = (size_t)h->rows * (h->cols / h->group_size) * dt_size(h->sdt);
		void *s = kc_malloc(sb), *b = kc_malloc(sb);
		d->scales = s;
		d->biases = b;
		if (!s || !b || kc_upload(s, h->scales, sb) || kc_upload(b, h->biases, sb))
			goto fail;
	}
	return 0;
fail:
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
	d->w = w; d->scales = s; d->biases = b;
	if (!w || !s || !b) {
		kc_matrix_free(d);
		return -1;
	}
	k_fill_words<<<1024, 256, 0, g_stream>>>((uint32_t *)w, words, seed);
	LAUNCHED("k_fill_words");
	k_fill_scales<<<1024, 256, 0, g_stream>>>(s, b, ng, sdt, smin, smax, (float)((1 << bits) - 1) * 0.5f, seed + 1);
	LAUNCHED("k_fill_scales");
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

struct mv_args {
	const uint32_t *w[KC_MAX_FUSE];
	const void *s[KC_MAX_FUSE], *b[KC_MAX_FUSE];
	const float *bias[KC_MAX_FUSE];
	float *y[KC_MAX_FUSE];
	int rows[KC_MAX_FUSE]; /* rows of each matrix */
	int start[KC_MAX_FUSE]; /* first warp-row-block of each matrix */
	int count, cols, group;
	int vec; /* row starts are 16-byte aligned: vector loads of the codes */
};

template <int BITS, class S>
__global__ void __launch_bounds__(32 * KC_MV_WARPS) k_matvec_q(mv_args a, const float *__restrict__ x)
{
	int blk = blockIdx.x * KC_MV_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
	int mi = 0;
	while (mi + 1 < a.count && blk >= a.start[mi + 1])
		mi++;
	int r0 = (blk - a.start[mi]) * KC_MV_ROWS;
	if (r0 >= a.rows[mi])
		return;
	const int cols = a.cols, npack = cols >> 5, ng = cols / a.group, pack_per_group = a.group >> 5;
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
			size_t gi = (size_t)row * ng + g;
			acc[r] += S::ld(a.s[mi], gi) * d + S::ld(a.b[mi], gi) * xs;
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

/* Dense (unquantized) weights: a warp per row, any cols. */
template <class S>
__global__ void k_matvec_dense(const void *W, int rows, int cols, const float *__restrict__ x,
			       const float *bias, float *y)
{
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

template <int BITS, class S>
__device__ __forceinline__ float gemm_w(const void *W, const void *sc, const void *bi, int cols, int group,
					 int row, int col)
{
	if (BITS == 0)
		return S::ld(W, (size_t)row * cols + col);
	const uint32_t *rw = (const uint32_t *)W + (size_t)row * ((size_t)cols * BITS / 32);
	size_t gi = (size_t)row * (cols / group) + col / group;
	return S::ld(sc, gi) * (float)code_at<BITS>(rw, col) + S::ld(bi, gi);
}

template <int BITS, class S>
__global__ void __launch_bounds__(256) k_gemm(const void *W, const void *sc, const void *bi, int rows, int cols,
					       int group, const float *__restrict__ X, int n, const float *bias,
					       float *Y)
{
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
			Ws[lk + i][lr] = (row < rows && col < cols) ? gemm_w<BITS, S>(W, sc, bi, cols, group, row, col) : 0.0f;
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
	k_gemm<BITS, S><<<grid, 256, 0, g_stream>>>(m->w, m->scales, m->biases, m->rows, m->cols, m->group_size, x, n,
						    bias, y);
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

static int matvec_fused(int count, const kq_matrix *const *ms, const float *x, const float *const *bias,
			float *const *y)
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
		a.b[i] = ms[i]->biases;
		a.bias[i] = bias ? bias[i] : NULL;
		a.y[i] = y[i];
		a.rows[i] = ms[i]->rows;
		a.start[i] = nb;
		nb += (ms[i]->rows + KC_MV_ROWS - 1) / KC_MV_ROWS;
		if (((uintptr_t)ms[i]->w & 15) || ((size_t)a.cols * ms[0]->bits / 8) % 16)
			a.vec = 0;
	}
	int blocks = (nb + KC_MV_WARPS - 1) / KC_MV_WARPS;
	switch (ms[0]->sdt) {
	case KDT_F32: return mv_dispatch<F32>(ms[0]->bits, a, blocks, x);
	case KDT_F16: return mv_dispatch<F16>(ms[0]->bits, a, blocks, x);
	default: return mv_dispatch<BF16>(ms[0]->bits, a, blocks, x);
	}
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
		return matvec_fused(1, ms, x, bs, ys);
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
	kdtype dt = m->bits ? m->sdt : m->wdt;
	switch (dt) {
	case KDT_F32: return gemm_dispatch<F32>(m, x, n, bias, y);
	case KDT_F16: return gemm_dispatch<F16>(m, x, n, bias, y);
	default: return gemm_dispatch<BF16>(m, x, n, bias, y);
	}
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
		return matvec_fused(count, ms, x, bias, y);
	for (int i = 0; i < count; i++)
		if (kc_linear(ms[i], x, n, bias ? bias[i] : NULL, y[i]))
			return -1;
	return 0;
}

/* ---- embedding ---- */

template <int BITS, class S>
__global__ void k_embed(const void *W, const void *sc, const void *bi, int rows, int cols, int group,
			const int *tokens, float scale, float *out)
{
	int t = blockIdx.x;
	int tok = tokens[t];
	if (tok < 0 || tok >= rows) /* the caller checked; a bad id reads row 0, never out of bounds */
		tok = 0;
	for (int j = threadIdx.x; j < cols; j += blockDim.x)
		out[(size_t)t * cols + j] = gemm_w<BITS, S>(W, sc, bi, cols, group, tok, j) * scale;
}

template <class S>
static int embed_dispatch(const kq_matrix *m, const int *tok, int n, float scale, float *out)
{
#define EL(B) k_embed<B, S><<<n, 256, 0, g_stream>>>(m->w, m->scales, m->biases, m->rows, m->cols, m->group_size, tok, scale, out)
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

__global__ void k_rmsnorm(const float *x, const float *w, int n, float eps, float one, float *out)
{
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
	k_rmsnorm<<<rows, 256, 0, g_stream>>>(x, w, n, eps, add_one ? 1.0f : 0.0f, out);
	LAUNCHED("k_rmsnorm");
	return 0;
}

__global__ void k_add_rmsnorm(float *x, float *r, const float *post_w, const float *w, int n, float eps, float one,
			      float *out)
{
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
	k_add_rmsnorm<<<rows, 256, 0, g_stream>>>(x, r, post_w, w, n, eps, add_one ? 1.0f : 0.0f, out);
	LAUNCHED("k_add_rmsnorm");
	return 0;
}

/* ---- q/k norm + RoPE + KV append ----
 * grid (n, nh + nkv), block = head_dim rounded up to 32. Block y < nh is a
 * q head (rotated in place); else a kv head: k rotated into the cache row,
 * v copied into the cache row. */
__global__ void k_qk_rope_append(float *q, float *k, const float *v, int nh, int nkv, int hd, int rot_dim,
				 const int *d_pos, const float *inv_freq, float mscale, const float *q_norm,
				 const float *k_norm, float eps, float one, float *kc, float *vc)
{
	__shared__ float sh[32];
	__shared__ float xs[1024];
	int t = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
	int pos = *d_pos + t;
	bool isq = h < nh;
	int kh = h - nh;
	float *src = isq ? q + ((size_t)t * nh + h) * hd : k + ((size_t)t * nkv + kh) * hd;
	const float *nw = isq ? q_norm : k_norm;
	float val = d < hd ? src[d] : 0.0f;
	if (nw) {
		float ss = block_sum(val * val, sh);
		float inv = 1.0f / sqrtf(ss / (float)hd + eps);
		if (d < hd)
			val = val * inv * (nw[d] + one);
	}
	if (d < hd)
		xs[d] = val;
	__syncthreads();
	int half = rot_dim / 2;
	float o = val;
	if (d < half) {
		float th = (float)pos * inv_freq[d];
		float c = cosf(th) * mscale, s = sinf(th) * mscale;
		o = xs[d] * c - xs[d + half] * s;
	} else if (d < rot_dim) {
		float th = (float)pos * inv_freq[d - half];
		float c = cosf(th) * mscale, s = sinf(th) * mscale;
		o = xs[d - half] * s + xs[d] * c;
	}
	if (d >= hd)
		return;
	if (isq) {
		src[d] = o;
	} else {
		size_t row = ((size_t)pos * nkv + kh) * hd + d;
		kc[row] = o;
		vc[row] = v[((size_t)t * nkv + kh) * hd + d];
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
	dim3 grid(n, nh + nkv);
	k_qk_rope_append<<<grid, (hd + 31) / 32 * 32, 0, g_stream>>>(q, k, v, nh, nkv, hd, rot_dim, d_pos, inv_freq,
								     mscale, q_norm, k_norm, eps,
								     add_one ? 1.0f : 0.0f, kcache, vcache);
	LAUNCHED("k_qk_rope_append");
	return 0;
}

/* ---- activations ---- */

__global__ void k_glu(float *gate, const float *up, size_t n, int act)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		float g = gate[i], a;
		if (act == 0)
			a = g / (1.0f + expf(-g));
		else if (act == 1)
			a = g / (1.0f + expf(-2.0f * 0.7978845608028654f * (g + 0.044715f * g * g * g)));
		else
			a = 0.5f * g * (1.0f + erff(g / sqrtf(2.0f)));
		gate[i] = a * up[i];
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

static int att_chunk(int n, int max_keys)
{
	(void)max_keys;
	return n >= 16 ? KC_ATT_CHUNK : 64;
}

extern "C" size_t kc_attention_scratch(int n, int nh, int hd, int max_keys)
{
	int chunk = att_chunk(n, max_keys);
	size_t nc = (size_t)(max_keys + chunk - 1) / chunk;
	return (size_t)n * nh * nc * (hd + 2) * sizeof(float);
}

__global__ void __launch_bounds__(32 * ATT_WARPS) k_attn_chunk(const float *q, const float *kc, const float *vc,
								float *part, int nh, int nkv, int hd, float scale,
								int window, float softcap, const int *d_pos, int chunk,
								int nchunks, int ngroups)
{
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
	if (j0 > j1) { /* nothing visible in this chunk */
		for (int g = threadIdx.x; g < G; g += blockDim.x) {
			float *pp = part + (((size_t)t * nh + h0 + g) * nchunks + c) * pstride;
			pp[0] = -INFINITY;
			pp[1] = 0.0f;
		}
		return;
	}
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

__global__ void k_attn_merge(const float *part, float *out, int nh, int hd, int nchunks)
{
	int t = blockIdx.x, h = blockIdx.y;
	size_t pstride = (size_t)hd + 2;
	const float *pp = part + ((size_t)t * nh + h) * nchunks * pstride;
	float M = -INFINITY;
	for (int c = 0; c < nchunks; c++)
		if (pp[c * pstride + 1] > 0.0f)
			M = fmaxf(M, pp[c * pstride]);
	for (int d = threadIdx.x; d < hd; d += blockDim.x) {
		float L = 0.0f, a = 0.0f;
		for (int c = 0; c < nchunks; c++) {
			const float *q = pp + c * pstride;
			if (q[1] > 0.0f) {
				float f = expf(q[0] - M);
				L += f * q[1];
				a += f * q[2 + d];
			}
		}
		out[((size_t)t * nh + h) * hd + d] = a / L;
	}
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
	int chunk = att_chunk(n, max_keys), nchunks = (max_keys + chunk - 1) / chunk;
	int rep = nh / nkv, ngroups = (rep + ATT_G - 1) / ATT_G;
	dim3 grid(n, nkv * ngroups, nchunks);
	k_attn_chunk<<<grid, 32 * ATT_WARPS, 0, g_stream>>>(q, kcache, vcache, (float *)scratch, nh, nkv, hd, scale,
							     window, softcap, d_pos, chunk, nchunks, ngroups);
	LAUNCHED("k_attn_chunk");
	dim3 g2(n, nh);
	k_attn_merge<<<g2, hd < 128 ? 128 : 256, 0, g_stream>>>((const float *)scratch, out, nh, hd, nchunks);
	LAUNCHED("k_attn_merge");
	return 0;
}

/* ---- token selection ---- */

__global__ void k_argmax(const float *logits, int vocab, int *out, int *hist, const int *d_pos)
{
	__shared__ float sv[32];
	__shared__ int si[32];
	float best = -INFINITY;
	int bi = 0x7fffffff;
	for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
		float v = logits[i];
		if (v > best || (v == best && i < bi)) { /* NaN never wins */
			best = v;
			bi = i;
		}
	}
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		float ov = __shfl_xor_sync(0xffffffffu, best, o);
		int oi = __shfl_xor_sync(0xffffffffu, bi, o);
		if (ov > best || (ov == best && oi < bi)) {
			best = ov;
			bi = oi;
		}
	}
	int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	if (lane == 0) {
		sv[wid] = best;
		si[wid] = bi;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		for (int w = 1; w < (int)(blockDim.x >> 5); w++)
			if (sv[w] > best || (sv[w] == best && si[w] < bi)) {
				best = sv[w];
				bi = si[w];
			}
		if (bi == 0x7fffffff) /* all NaN: token 0, as a scan from index 0 would give */
			bi = 0;
		out[0] = bi;
		if (hist)
			hist[*d_pos] = bi;
	}
}

extern "C" int kc_argmax(const float *logits, int vocab, int *d_out, int *d_hist, const int *d_pos)
{
	k_argmax<<<1, 1024, 0, g_stream>>>(logits, vocab, d_out, d_hist, d_pos);
	LAUNCHED("k_argmax");
	return 0;
}

__global__ void k_pos_advance(int *p, int n)
{
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

/* kernels/cuda/ksample.cu — see ksample.h. Every weight, sum and draw is
 * computed as worker/sampler.c computes it (worker/sample_math.h, the
 * same summation order), so the token is the CPU's, not merely close. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/ksample.h"
}
#include "worker/sample_math.h"

#define KS_THREADS 1024
#define KS_SORT 4096 /* >= KS_MAX_K + KS_TIES, a power of two */
#define KS_U 8       /* loads in flight per thread in the passes over the vocabulary */
/* k_sample_part: one block per KS_SLICE entries of the vocabulary */
#define KS_SLICE 2048

static __host__ __device__ __forceinline__ int ks_parts(int V)
{
	return (V + KS_SLICE - 1) / KS_SLICE;
}

/* The multi-block top-k (run 38): every slice's own k best, then the best
 * k of those, where k <= KS_SPLIT_K and they fit k_sample's candidate
 * array behind its first KS_SPLIT_K words (parts x k <= KS_SORT -
 * KS_SPLIT_K: k <= 62 on the Llama 3 vocabulary, 52 on Qwen's); the same
 * condition on both kernels' sides, from the parameters in device memory. */
#define KS_SPLIT_K 128
static __device__ __forceinline__ bool ks_split_topk(const ks_params &p, int V)
{
	return p.mode == KS_TOPK && p.top_k <= KS_SPLIT_K && ks_parts(V) * p.top_k <= KS_SORT - KS_SPLIT_K;
}

static char g_err[256];

static int fail(const char *what, cudaError_t e)
{
	snprintf(g_err, sizeof(g_err), "%s: %s", what, cudaGetErrorString(e));
	return -1;
}
#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return fail(#call, e_); } while (0)

extern "C" const char *ks_error(void) { return g_err; }

static __device__ __forceinline__ uint64_t cand_of(uint32_t key, int i)
{
	return (uint64_t)key << 32 | (uint32_t)~(uint32_t)i;
}

static __device__ __forceinline__ int cand_idx(uint64_t c)
{
	return (int)~(uint32_t)c;
}

/* block-wide max of v; every thread gets it. red: [32] shared. */
static __device__ uint64_t block_max_u64(uint64_t v, uint64_t *red)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		uint64_t w = __shfl_xor_sync(0xffffffffu, v, o);
		v = w > v ? w : v;
	}
	__syncthreads(); /* red may still be read from a previous call */
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	v = red[0];
	for (int w = 1; w < (int)(blockDim.x >> 5); w++)
		v = red[w] > v ? red[w] : v;
	return v;
}

/* argmax by (key desc, index asc) over logits[lo..hi) as a candidate word */
static __device__ uint64_t block_argmax(const float *l, int lo, int hi, uint64_t *red)
{
	uint64_t best = 0;
	const int bd = blockDim.x;
	for (int i0 = lo + threadIdx.x; i0 < hi; i0 += KS_U * bd) {
		float v[KS_U];
#pragma unroll
		for (int u = 0; u < KS_U; u++) /* KS_U loads in flight */
			v[u] = i0 + u * bd < hi ? l[i0 + u * bd] : 0.0f;
#pragma unroll
		for (int u = 0; u < KS_U; u++) {
			uint64_t c = i0 + u * bd < hi ? cand_of(sm_key(v[u]), i0 + u * bd) : 0;
			best = c > best ? c : best;
		}
	}
	return block_max_u64(best, red);
}

/* the largest of the words w[0..n) (the slices' argmax words) */
static __device__ uint64_t block_max_words(const uint64_t *w, int n, uint64_t *red)
{
	uint64_t best = 0;
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		best = w[i] > best ? w[i] : best;
	return block_max_u64(best, red);
}

/* chunked prefix sums (sample_math.h) of w[0..n) in place into cum[0..n),
 * n <= 4 * SM_CHUNK here; returns nothing, cum complete after the call. */
static __device__ void small_cum(const float *w, float *cum, int n, float *S)
{
	const int nch = (n + SM_CHUNK - 1) / SM_CHUNK;
	if ((int)threadIdx.x < nch) {
		int c0 = threadIdx.x * SM_CHUNK, c1 = min(n, c0 + SM_CHUNK);
		float acc = 0.0f;
		for (int i = c0; i < c1; i++) {
			acc = SM_ADD(acc, w[i]);
			cum[i] = acc;
		}
		S[threadIdx.x + 1] = acc; /* the chunk's sum for now */
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		S[0] = 0.0f;
		for (int c = 0; c < nch; c++)
			S[c + 1] = SM_ADD(S[c], S[c + 1]);
	}
	__syncthreads();
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		cum[i] = SM_ADD(S[i / SM_CHUNK], cum[i]);
	__syncthreads();
}

/* Warp 0 of a radix select: the digit d holding the need-th largest of
 * the counted entries (hcount[256] of this pass) into *dig, the count of
 * entries above it into *above. Lane L owns digits 255-8L .. 248-8L. */
static __device__ void radix_digit(const unsigned *hcount, int need, int lane, int *dig, int *above)
{
	unsigned c[8], sum = 0;
#pragma unroll
	for (int j = 0; j < 8; j++) {
		c[j] = hcount[255 - 8 * lane - j];
		sum += c[j];
	}
	unsigned incl = sum;
#pragma unroll
	for (int o = 1; o < 32; o <<= 1) {
		unsigned v = __shfl_up_sync(0xffffffffu, incl, o);
		if (lane >= o)
			incl += v;
	}
	unsigned acc = incl - sum;
	if (acc < (unsigned)need && (unsigned)need <= incl) {
		for (int j = 0; j < 8; j++) {
			if (acc + c[j] >= (unsigned)need) {
				*dig = 255 - 8 * lane - j;
				*above = (int)acc;
				break;
			}
			acc += c[j];
		}
	}
}

/* The k largest of the n distinct candidate words a[0..n) (shared
 * memory; 0 < k <= n, zeros only as padding below the k-th) into
 * out[0..k), unordered: a radix select of the k-th largest word, 8 passes
 * of 8 bits over shared memory (warp-aggregated histograms), then every
 * word >= it. The words are distinct (the index is in them), so exactly k. */
static __device__ void select_top_words(const uint64_t *a, int n, int k, uint64_t *out, unsigned *hcount, int *sh)
{
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, bd = blockDim.x;
	uint64_t prefix = 0, mask = 0;
	int need = k;
	for (int shift = 56; shift >= 0; shift -= 8) {
		for (int i = tid; i < 256; i += bd)
			hcount[i] = 0;
		__syncthreads();
		for (int i0 = 0; i0 < n; i0 += bd) { /* warp-uniform trip count */
			const int i = i0 + tid;
			unsigned d = 256;
			if (i < n) {
				const uint64_t w = a[i];
				if ((w & mask) == prefix)
					d = (unsigned)(w >> shift) & 255u;
			}
			unsigned m = __match_any_sync(0xffffffffu, d);
			if (d < 256 && lane == __ffs(m) - 1)
				atomicAdd(&hcount[d], (unsigned)__popc(m));
		}
		__syncthreads();
		if (warp == 0)
			radix_digit(hcount, need, lane, &sh[0], &sh[1]);
		__syncthreads();
		prefix |= (uint64_t)sh[0] << shift;
		mask |= 255ull << shift;
		need -= sh[1];
		__syncthreads(); /* sh is rewritten by the next pass */
	}
	if (tid == 0)
		sh[2] = 0;
	__syncthreads();
	for (int i = tid; i < n; i += bd)
		if (a[i] >= prefix)
			out[atomicAdd(&sh[2], 1)] = a[i];
	__syncthreads();
}

/* a[0..sz) sorted descending in place (sz a power of two; the whole block) */
static __device__ void bitonic_desc(uint64_t *a, int sz)
{
	const int tid = threadIdx.x, bd = blockDim.x;
	for (int k2 = 2; k2 <= sz; k2 <<= 1)
		for (int j = k2 >> 1; j > 0; j >>= 1) {
			for (int i = tid; i < sz; i += bd) {
				int ixj = i ^ j;
				if (ixj > i) {
					uint64_t a0 = a[i], b0 = a[ixj];
					if ((i & k2) == 0 ? a0 < b0 : a0 > b0) {
						a[i] = b0;
						a[ixj] = a0;
					}
				}
			}
			__syncthreads();
		}
}

/* One block per KS_SLICE entries of the vocabulary, before k_sample:
 * (1) the penalties of the ids in its slice: counts of the window
 * hist[*d_pos - repeat_last_n .. *d_pos) in shared memory, each distinct
 * id penalised once with its count (as sampler.c; the slices partition
 * the ids, so every id is penalised once in all); (2) where ks_split_topk,
 * the slice's k best candidate words (key desc, index asc: the order the
 * top-k is defined by, so the best k of the union are the vocabulary's),
 * unordered (select_top_words), to cands[blockIdx.x * k ..], padded with
 * 0 (below every real word) where the slice is shorter than k; (3) under
 * KS_ALL the slice's argmax word (key desc, index asc) to pmax[blockIdx.x]. */
__global__ void __launch_bounds__(KS_THREADS) k_sample_part(const ks_params *P, float *l, int V, const int *d_pos,
							    const int *hist, uint64_t *cands, uint64_t *pmax, int dry)
{
	__shared__ ks_params p;
	__shared__ unsigned scnt[KS_SLICE], hcount[256];
	__shared__ uint64_t cw[KS_SLICE], red[32];
	__shared__ int sh[3];
	const int tid = threadIdx.x, bd = blockDim.x;
	const int lo = blockIdx.x * KS_SLICE, hi = min(V, lo + KS_SLICE);
	if (dry)
		return;
	if (tid == 0)
		p = *P;
	__syncthreads();
	if (p.penalize) {
		const int pos = *d_pos, start = pos > p.repeat_last_n ? pos - p.repeat_last_n : 0;
		for (int i = tid; i < KS_SLICE; i += bd)
			scnt[i] = 0;
		__syncthreads();
		for (int i = start + tid; i < pos; i += bd) {
			int t = hist[i];
			if (t >= lo && t < hi)
				atomicAdd(&scnt[t - lo], 1u);
		}
		__syncthreads();
		for (int i = start + tid; i < pos; i += bd) {
			int t = hist[i];
			if (t < lo || t >= hi)
				continue;
			unsigned c = atomicExch(&scnt[t - lo], 0u);
			if (c > 0)
				l[t] = sm_penalize(l[t], (int)c, p.repeat_penalty, p.presence_penalty, p.frequency_penalty);
		}
		__syncthreads(); /* the penalised logits, before the candidates read them */
	}
	if (p.mode == KS_ALL) { /* the slice's argmax, for k_sample_w's max */
		const uint64_t best = block_argmax(l, lo, hi, red);
		if (tid == 0)
			pmax[blockIdx.x] = best;
		return;
	}
	if (!ks_split_topk(p, V))
		return;
	const int n = hi - lo, k = p.top_k, kk = min(k, n);
	for (int i = tid; i < n; i += bd)
		cw[i] = cand_of(sm_key(l[lo + i]), lo + i);
	__syncthreads();
	select_top_words(cw, n, kk, cands + (size_t)blockIdx.x * k, hcount, sh);
	for (int i = kk + tid; i < k; i += bd) /* a slice shorter than k */
		cands[(size_t)blockIdx.x * k + i] = 0;
}

/* KS_ALL, between k_sample_part and k_sample, one block per slice: the
 * argmax of the slices' (every block reduces pmax itself), then the
 * slice's weights sm_exp(sm_arg(l, max, T)) into wbuf and the sums of its
 * SM_CHUNK-entry chunks, each summed in index order (sample_math.h: the
 * CPU's order) into csum[chunk]. Nothing in other modes. */
#define KS_WT 256
__global__ void __launch_bounds__(KS_WT) k_sample_w(const ks_params *P, const float *l, int V, const uint64_t *pmax,
						    float *wbuf, float *csum, int dry)
{
	__shared__ float w[KS_SLICE];
	__shared__ uint64_t red[32];
	const int tid = threadIdx.x, bd = blockDim.x;
	const int lo = blockIdx.x * KS_SLICE, hi = min(V, lo + KS_SLICE);
	if (dry || P->mode != KS_ALL)
		return;
	const float T = P->temperature;
	const float mx = l[cand_idx(block_max_words(pmax, ks_parts(V), red))];
	for (int i = tid; i < hi - lo; i += bd) {
		const float v = sm_exp(sm_arg(l[lo + i], mx, T));
		w[i] = v;
		wbuf[lo + i] = v;
	}
	__syncthreads();
	const int c0 = lo / SM_CHUNK, nc = (hi - lo + SM_CHUNK - 1) / SM_CHUNK; /* KS_SLICE: whole chunks */
	if (tid < nc) {
		const int e = min(hi - lo, (tid + 1) * SM_CHUNK);
		float acc = 0.0f;
		for (int i = tid * SM_CHUNK; i < e; i++)
			acc = SM_ADD(acc, w[i]);
		csum[c0 + tid] = acc;
	}
}

__global__ void __launch_bounds__(KS_THREADS) k_sample(ks_params *P, float *l, int V, const int *d_pos, int *hist,
						       int *next, const uint64_t *cands, const uint64_t *pmax, const float *csum,
						       const float *wbuf, int dry)
{
	__shared__ ks_params p;
	__shared__ uint64_t cand[KS_SORT];
	__shared__ float w[KS_MAX_K], cum[KS_MAX_K];
	__shared__ float S[KS_MAX_ALL / SM_CHUNK + 1];
	__shared__ unsigned hcount[256];
	__shared__ uint64_t red[32];
	__shared__ int s_a, s_b, s_c, sh3[3];
	__shared__ uint64_t s_bits;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, bd = blockDim.x;
	if (dry)
		return;
	if (tid == 0) {
		p = *P;
		if (p.mode != KS_GREEDY) { /* one draw per pick, as sampler_pick */
			s_bits = sm_splitmix(&p.rng);
			P->rng = p.rng;
		}
	}
	__syncthreads();
	const int pos = *d_pos;
	/* the penalties: k_sample_part, before this kernel */
	int tok;
	if (p.mode == KS_GREEDY) {
		tok = cand_idx(block_argmax(l, 0, V, red));
	} else if (p.mode == KS_TOPK) {
		const int k = p.top_k;
		if (ks_split_topk(p, V)) {
			/* ---- the best k of the slices' best k (k_sample_part) ---- */
			const int n = ks_parts(V) * k;
			for (int i = tid; i < n; i += bd) /* behind the <= KS_SPLIT_K words the select writes */
				cand[KS_SPLIT_K + i] = cands[i];
			__syncthreads();
			select_top_words(cand + KS_SPLIT_K, n, k, cand, hcount, sh3);
			int sz = 2;
			while (sz < k)
				sz <<= 1;
			for (int i = k + tid; i < sz; i += bd)
				cand[i] = 0;
			__syncthreads();
			bitonic_desc(cand, sz);
		} else {
			/* ---- radix select of the k-th largest key ---- */
			uint32_t prefix = 0, mask = 0;
			int need = k; /* how many of the keys matching prefix are still to take */
			for (int shift = 24; shift >= 0; shift -= 8) {
				for (int i = tid; i < 256; i += bd)
					hcount[i] = 0;
				__syncthreads();
				for (int i0 = 0; i0 < V; i0 += KS_U * bd) { /* warp-uniform trip count */
					uint32_t key[KS_U];
#pragma unroll
					for (int u = 0; u < KS_U; u++) { /* KS_U loads in flight */
						int i = i0 + u * bd + tid;
						key[u] = i < V ? sm_key(l[i]) : 0u;
					}
#pragma unroll
					for (int u = 0; u < KS_U; u++) {
						unsigned d = 256;
						if (i0 + u * bd + tid < V && (key[u] & mask) == prefix)
							d = (key[u] >> shift) & 255u;
						unsigned m = __match_any_sync(0xffffffffu, d);
						if (d < 256 && lane == __ffs(m) - 1)
							atomicAdd(&hcount[d], (unsigned)__popc(m));
					}
				}
				__syncthreads();
				if (warp == 0)
					radix_digit(hcount, need, lane, &s_a, &s_b);
				__syncthreads();
				prefix |= (uint32_t)s_a << shift;
				mask |= 255u << shift;
				need -= s_b;
				__syncthreads();
			}
			const uint32_t K = prefix; /* the k-th largest key; `need` of the keys == K are taken */
			/* ---- gather: keys > K (k - need of them), ties at K ---- */
			if (tid == 0) {
				s_a = 0;
				s_b = 0;
			}
			__syncthreads();
			for (int i0 = 0; i0 < V; i0 += KS_U * bd) {
				uint32_t key[KS_U];
#pragma unroll
				for (int u = 0; u < KS_U; u++) {
					int i = i0 + u * bd + tid;
					key[u] = i < V ? sm_key(l[i]) : 0u;
				}
#pragma unroll
				for (int u = 0; u < KS_U; u++) {
					int i = i0 + u * bd + tid;
					if (i >= V)
						continue;
					if (key[u] > K) {
						cand[atomicAdd(&s_a, 1)] = cand_of(key[u], i);
					} else if (key[u] == K) {
						int at = atomicAdd(&s_b, 1);
						if (at < KS_TIES)
							cand[KS_MAX_K + at] = cand_of(key[u], i);
					}
				}
			}
			__syncthreads();
			const int ngt = s_a;
			int neq = s_b;
			if (neq > KS_TIES) { /* many ties: the `need` lowest indices, in index order */
				if (warp == 0) {
					int base = 0;
					for (int i0 = 0; i0 < V && base < need; i0 += 32) {
						int i = i0 + lane;
						bool eq = i < V && sm_key(l[i]) == K;
						unsigned m = __ballot_sync(0xffffffffu, eq);
						int rank = __popc(m & ((1u << lane) - 1u));
						if (eq && base + rank < need)
							cand[KS_MAX_K + base + rank] = cand_of(K, i);
						base += __popc(m);
					}
				}
				neq = need;
				__syncthreads();
			}
			/* compact the ties behind the others, pad to a power of two */
			const int n = ngt + neq;
			int sz = 2;
			while (sz < n)
				sz <<= 1;
			uint64_t t0 = 0, t1 = 0;
			if (tid < neq)
				t0 = cand[KS_MAX_K + tid];
			if (tid + bd < neq)
				t1 = cand[KS_MAX_K + tid + bd];
			__syncthreads();
			if (tid < neq)
				cand[ngt + tid] = t0;
			if (tid + bd < neq)
				cand[ngt + tid + bd] = t1;
			for (int i = n + tid; i < sz; i += bd)
				cand[i] = 0;
			__syncthreads();
			bitonic_desc(cand, sz);
		}
		/* ---- weights, sums, top-p, min-p, draw over the k ---- */
		const float mx = l[cand_idx(cand[0])];
		for (int i = tid; i < k; i += bd)
			w[i] = sm_exp(sm_arg(l[cand_idx(cand[i])], mx, p.temperature));
		__syncthreads();
		small_cum(w, cum, k, S);
		const float Z = cum[k - 1];
		if (tid == 0) {
			s_a = k; /* top-p cut */
			s_b = k; /* min-p cut */
			s_c = k; /* the draw */
		}
		__syncthreads();
		if (p.top_p > 0.0f && p.top_p < 1.0f) {
			float tp = SM_MUL(p.top_p, Z);
			for (int i = tid; i < k; i += bd)
				if (cum[i] >= tp)
					atomicMin(&s_a, i + 1);
		}
		if (p.min_p > 0.0f) {
			float lim = SM_MUL(p.min_p, w[0]);
			for (int i = 1 + tid; i < k; i += bd)
				if (w[i] < lim)
					atomicMin(&s_b, i);
		}
		__syncthreads();
		const int m = min(s_a, s_b);
		const float total = cum[m - 1];
		if (total > 0.0f) {
			float r = sm_draw_point(s_bits, total);
			for (int i = tid; i < m; i += bd)
				if (r < cum[i])
					atomicMin(&s_c, i);
		}
		__syncthreads();
		/* as sampler.c's finish: total not > 0 (NaN logits) gives the
		 * argmax; no position reaching the point (impossible: it lies
		 * below cum[m-1]) the last kept one */
		tok = cand_idx(cand[!(total > 0.0f) ? 0 : s_c < m ? s_c : m - 1]);
	} else { /* KS_ALL: the whole vocabulary in index order (weights, chunk sums: k_sample_w) */
		const uint64_t am = block_max_words(pmax, ks_parts(V), red);
		const int nch = (V + SM_CHUNK - 1) / SM_CHUNK;
		for (int c = tid; c < nch; c += bd)
			S[c + 1] = csum[c];
		__syncthreads();
		if (tid == 0) {
			S[0] = 0.0f;
			for (int c = 0; c < nch; c++)
				S[c + 1] = SM_ADD(S[c], S[c + 1]);
			s_c = nch;
		}
		__syncthreads();
		const float total = S[nch];
		tok = cand_idx(am);
		if (total > 0.0f) {
			float r = sm_draw_point(s_bits, total);
			for (int c = tid; c < nch; c += bd)
				if (r < S[c + 1])
					atomicMin(&s_c, c);
			__syncthreads();
			if (tid == 0) {
				int c = s_c < nch ? s_c : nch - 1, c1 = min(V, (c + 1) * SM_CHUNK), t = c1 - 1;
				float acc = 0.0f;
				for (int i = c * SM_CHUNK; i < c1; i++) {
					acc = SM_ADD(acc, wbuf[i]);
					if (r < SM_ADD(S[c], acc)) {
						t = i;
						break;
					}
				}
				s_a = t;
			}
			__syncthreads();
			tok = s_a;
		}
	}
	if (tid == 0) {
		next[0] = tok;
		if (hist)
			hist[pos] = tok;
	}
}

extern "C" int ks_init(ks_sampler *k, int vocab)
{
	memset(k, 0, sizeof(*k));
	k->vocab = vocab;
	cudaStream_t st = (cudaStream_t)kc_stream();
	if (cudaMalloc(&k->d_params, sizeof(ks_params)) != cudaSuccess ||
	    cudaMalloc(&k->d_cand, sizeof(uint64_t) * KS_SORT) != cudaSuccess ||
	    cudaMalloc(&k->d_pmax, sizeof(uint64_t) * (size_t)ks_parts(vocab)) != cudaSuccess ||
	    cudaMalloc(&k->d_csum, sizeof(float) * (size_t)((vocab + SM_CHUNK - 1) / SM_CHUNK)) != cudaSuccess ||
	    cudaMalloc(&k->d_w, sizeof(float) * (size_t)vocab) != cudaSuccess) {
		fail("cudaMalloc", cudaGetLastError());
		ks_free(k);
		return -1;
	}
	CK(cudaStreamSynchronize(st));
	return 0;
}

extern "C" void ks_free(ks_sampler *k)
{
	cudaFree(k->d_params);
	cudaFree(k->d_cand);
	cudaFree(k->d_pmax);
	cudaFree(k->d_csum);
	cudaFree(k->d_w);
	memset(k, 0, sizeof(*k));
}

extern "C" int ks_set(ks_sampler *k, const ks_params *p)
{
	int ok = p->mode == KS_GREEDY ||
		 (p->temperature > 0.0f && ((p->mode == KS_TOPK && p->top_k >= 1 && p->top_k <= KS_MAX_K &&
					     p->top_k < k->vocab) ||
					    (p->mode == KS_ALL && k->vocab <= KS_MAX_ALL)));
	if (!ok || (p->penalize && p->repeat_last_n <= 0)) {
		snprintf(g_err, sizeof(g_err), "ks_set: parameters the device sampler does not cover");
		return -1;
	}
	cudaStream_t st = (cudaStream_t)kc_stream();
	CK(cudaMemcpyAsync(k->d_params, p, sizeof(*p), cudaMemcpyHostToDevice, st));
	CK(cudaStreamSynchronize(st));
	return 0;
}

extern "C" int ks_get_rng(ks_sampler *k, uint64_t *rng)
{
	ks_params p;
	cudaStream_t st = (cudaStream_t)kc_stream();
	CK(cudaMemcpyAsync(&p, k->d_params, sizeof(p), cudaMemcpyDeviceToHost, st));
	CK(cudaStreamSynchronize(st));
	*rng = p.rng;
	return 0;
}

extern "C" int ks_sample_queue(ks_sampler *k, float *logits, const int *d_pos, int *d_hist, int *d_next, int dry)
{
	cudaStream_t st = (cudaStream_t)kc_stream();
	const int parts = ks_parts(k->vocab);
	k_sample_part<<<parts, KS_THREADS, 0, st>>>(k->d_params, logits, k->vocab, d_pos, d_hist, k->d_cand, k->d_pmax,
						     dry);
	CK(cudaGetLastError());
	k_sample_w<<<parts, KS_WT, 0, st>>>(k->d_params, logits, k->vocab, k->d_pmax, k->d_w, k->d_csum, dry);
	CK(cudaGetLastError());
	k_sample<<<1, KS_THREADS, 0, st>>>(k->d_params, logits, k->vocab, d_pos, d_hist, d_next, k->d_cand, k->d_pmax,
					    k->d_csum, k->d_w, dry);
	CK(cudaGetLastError());
	return 0;
}

extern "C" int ks_sample(ks_sampler *k, float *logits, const int *d_pos, int *d_hist, int *d_next, int dry)
{
	if (ks_sample_queue(k, logits, d_pos, d_hist, d_next, dry))
		return -1;
	CK(cudaStreamSynchronize((cudaStream_t)kc_stream()));
	return 0;
}

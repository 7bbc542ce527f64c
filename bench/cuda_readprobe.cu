/* bench/cuda_readprobe.cu — how fast the decode matvec's weight reads can
 * be, by access pattern alone (no arithmetic). A measurement tool for
 * kernels/cuda (NOTES.md, run 37), not part of mlxr.
 *
 * A "matrix" is rows x rb bytes of 4-bit codes. Its 16-row tiles are read
 * in items of 16 rows x 256 bytes (512 columns: one step of
 * k_matvec_mma / k_matvec_cp), by a resident grid whose warps walk
 * (tile, step) items; every lane loads 8 x 16 bytes of an item, U items in
 * flight per warp. Layouts:
 *   row   the codes as uploaded today: row-major, an item is 16 pieces of
 *         256 bytes, one per row, rb apart
 *   tile  the same items stored contiguously (4 KB each, tile-major)
 *   seq   a plain grid-stride read of the same bytes (the reference)
 * Each launch reads one of NC copies in turn so that nothing is served
 * from L2; the time is per launch (events around REPS launches).
 * Usage: cuda-readprobe [reps] */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

enum { L_ROW, L_TILE, L_SEQ };

template <int U, int LAYOUT>
__global__ void __launch_bounds__(256) k_probe(const uint4 *__restrict__ p, int rows, int rb, uint32_t *out)
{
	const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, W = blockDim.x >> 5;
	const int nsteps = rb >> 8, tiles = rows >> 4;
	uint32_t acc = 0;
	if (LAYOUT == L_SEQ) {
		const long n = (long)rows * rb / 16, stride = (long)gridDim.x * blockDim.x;
		long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
		for (; i + (U * 8 - 1) * stride < n; i += U * 8 * stride) {
			uint4 v[U * 8];
#pragma unroll
			for (int k = 0; k < U * 8; k++)
				v[k] = __ldcs(p + i + k * stride);
#pragma unroll
			for (int k = 0; k < U * 8; k++)
				acc ^= v[k].x ^ v[k].w;
		}
		for (; i < n; i += stride)
			acc ^= __ldcs(p + i).y;
	} else {
		/* the block's items: tile b, b + grid, ...; its warps take steps w, w + W, ... */
		long it = 0;
		for (;;) {
			uint4 v[U][8];
			int got = 0;
#pragma unroll
			for (int u = 0; u < U; u++) {
				/* item index k of this warp: tile blockIdx.x + (k / spw) grid, step w + (k % spw) W */
				const long k = it + u;
				const int spw = (nsteps - wid + W - 1) / W;
				if (spw <= 0)
					break;
				const long tile = blockIdx.x + (k / spw) * gridDim.x;
				const int st = wid + (int)(k % spw) * W;
				if (tile >= tiles)
					break;
				got++;
#pragma unroll
				for (int j = 0; j < 8; j++) {
					const int e = j * 32 + lane, r = e >> 4, q = e & 15;
					size_t off;
					if (LAYOUT == L_ROW)
						off = ((size_t)(tile * 16 + r) * rb + (size_t)st * 256) / 16 + q;
					else
						off = ((size_t)(tile * nsteps + st) * 4096 + r * 256) / 16 + q;
					v[u][j] = __ldcs(p + off);
				}
			}
#pragma unroll
			for (int u = 0; u < U; u++)
				if (u < got)
#pragma unroll
					for (int j = 0; j < 8; j++)
						acc ^= v[u][j].x ^ v[u][j].z;
			if (got < U)
				break;
			it += U;
		}
	}
	if (acc == 0x9e3779b9u)
		out[0] = acc;
}

template <int U, int LAYOUT>
static float run(const uint8_t *base, size_t bytes, int nc, int rows, int rb, int threads, int reps, uint32_t *out,
		 int *grid_out)
{
	int sms, occ;
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_probe<U, LAYOUT>, threads, 0));
	int grid = occ * sms;
	if (LAYOUT != L_SEQ && grid > rows / 16)
		grid = rows / 16;
	*grid_out = grid;
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	for (int i = 0; i < nc; i++) /* warm */
		k_probe<U, LAYOUT><<<grid, threads>>>((const uint4 *)(base + (size_t)i * bytes), rows, rb, out);
	CK(cudaEventRecord(e0));
	for (int i = 0; i < reps; i++)
		k_probe<U, LAYOUT><<<grid, threads>>>((const uint4 *)(base + (size_t)(i % nc) * bytes), rows, rb, out);
	CK(cudaEventRecord(e1));
	CK(cudaEventSynchronize(e1));
	CK(cudaGetLastError());
	float ms;
	CK(cudaEventElapsedTime(&ms, e0, e1));
	return ms * 1000.0f / reps;
}

struct shape {
	const char *name;
	int rows, rb;
};

int main(int argc, char **argv)
{
	int reps = argc > 1 ? atoi(argv[1]) : 200;
	const shape sh[] = {
		{"8B gate/up (2x14336 x 4096)", 28672, 2048},
		{"8B down (4096 x 14336)", 4096, 7168},
		{"8B qkv (6144 x 4096)", 6144, 2048},
		{"8B o (4096 x 4096)", 4096, 2048},
		{"1B gate/up (2x8192 x 2048)", 16384, 1024},
		{"1B down (2048 x 8192)", 2048, 4096},
		{"8B lm_head (128256 x 4096)", 128256, 2048},
	};
	const size_t total = (size_t)1 << 30; /* 1 GiB of copies: L2 (50 MB) never holds a launch's bytes */
	uint8_t *base;
	uint32_t *out;
	CK(cudaMalloc(&base, total));
	CK(cudaMalloc(&out, 64));
	CK(cudaMemset(base, 0x5a, total));
	/* the asymptote: one launch over the whole GiB */
	{
		int g;
		float us = run<4, L_SEQ>(base, total, 1, (int)(total / 4096), 4096, 256, 20, out, &g);
		printf("seq 1 GiB: %.1f us, %.0f GB/s (grid %d)\n", us, total / us / 1e3, g);
	}
	printf("%-30s %8s | %-22s | %-22s | %-22s | %-22s | %-22s\n", "shape", "MB", "seq U4 t256", "row U2 t128",
	       "tile U2 t128", "row U4 t256", "tile U4 t256");
	for (const shape &s : sh) {
		const size_t bytes = (size_t)s.rows * s.rb;
		const int nc = (int)(total / bytes) < 64 ? (int)(total / bytes) : 64;
		float t[5];
		int g[5];
		t[0] = run<4, L_SEQ>(base, bytes, nc, s.rows, s.rb, 256, reps, out, &g[0]);
		t[1] = run<2, L_ROW>(base, bytes, nc, s.rows, s.rb, 128, reps, out, &g[1]);
		t[2] = run<2, L_TILE>(base, bytes, nc, s.rows, s.rb, 128, reps, out, &g[2]);
		t[3] = run<4, L_ROW>(base, bytes, nc, s.rows, s.rb, 256, reps, out, &g[3]);
		t[4] = run<4, L_TILE>(base, bytes, nc, s.rows, s.rb, 256, reps, out, &g[4]);
		printf("%-30s %8.1f", s.name, bytes / 1e6);
		for (int i = 0; i < 5; i++)
			printf(" | %7.2f us %5.0f GB/s", t[i], bytes / t[i] / 1e3);
		printf("\n");
	}
	return 0;
}

/* bench/kbench.c — kernel micro-benchmark (not a test: it asserts nothing).
 *
 *   make kbench && build/kbench [-t threads] [-r rows] [-c cols] [-b bits] [-g group] [-n tokens] [-G 1: GEMM only]
 *
 * Times the quantized matvec (decode) of every available table on a
 * 4-bit, group-64, f16-scale 2048 x 8192 matrix by default, and reports the
 * weight bytes read per second (codes + scales + biases) against the read
 * bandwidth measured in the same run: a parallel sum over a 1 GiB buffer.
 * "hot" reuses one matrix (it fits in a large L3); "cold" walks copies
 * totalling >= 1 GiB so every call streams from DRAM. Also: the GEMM
 * (prefill) rate for 64 tokens, the GEMM on the Llama-3.2-1B projections
 * for -n tokens (default 512; f32 AVX-512, then AMX where the CPU has it)
 * and the kpool_for round trip. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
	const uint64_t *p;
	size_t n_per;
	uint64_t out[1024];
} sum_job;

static void sum_task(void *arg, int i)
{
	sum_job *j = arg;
	const uint64_t *p = j->p + (size_t)i * j->n_per;
	uint64_t a = 0, b = 0, c = 0, d = 0;
	for (size_t k = 0; k < j->n_per; k += 4) {
		a += p[k];
		b += p[k + 1];
		c += p[k + 2];
		d += p[k + 3];
	}
	j->out[i] = a + b + c + d;
}

static void noop_task(void *arg, int i)
{
	(void)arg;
	(void)i;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The prefill GEMM on the Llama-3.2-1B projections (4-bit, group 64, f16
 * scales) for n tokens: the avx512 table's f32 GEMM, then the same table
 * after kernels_cpu_prepare (AMX tiles where the CPU has them), median of
 * 5 calls each. Weights stay hot in L3; prefill reads them once per call. */
static void gemm_shapes(int n)
{
	static const int shp[][2] = {{2048, 2048}, {512, 2048}, {8192, 2048}, {2048, 8192}};
	static const char *nm[] = {"q/o 2048x2048", "k/v 512x2048", "gate/up 8192x2048", "down 2048x8192"};
	const kernel_table *t = kernels_avx512();
	if (!t) {
		printf("UNAVAILABLE: avx512 (GEMM shapes)\n");
		return;
	}
	printf("GEMM n=%d tokens, 4-bit g64, GFLOP/s (median of 5):\n", n);
	double res[2][4];
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1 && !kernels_cpu_prepare()) {
			printf("UNAVAILABLE: amx\n");
			break;
		}
		for (int s = 0; s < 4; s++) {
			int rows = shp[s][0], cols = shp[s][1];
			size_t wb = (size_t)rows * (size_t)cols / 2, sb = (size_t)rows * (size_t)(cols / 64) * 2;
			uint8_t *mem = malloc(wb + 2 * sb + 1);
			for (size_t i = 0; i < wb; i++)
				mem[i + 1] = (uint8_t)rand();
			uint16_t s16 = k_f32_to_f16(0.01f);
			for (size_t i = 0; i < 2 * sb; i += 2)
				memcpy(mem + 1 + wb + i, &s16, 2);
			kq_matrix m = {rows, cols, 4, 64, KDT_F32, KDT_F16, mem + 1, mem + 1 + wb, mem + 1 + wb + sb};
			float *x = malloc(sizeof(float) * (size_t)n * (size_t)cols);
			float *y = malloc(sizeof(float) * (size_t)n * (size_t)rows);
			for (size_t i = 0; i < (size_t)n * (size_t)cols; i++)
				x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
			double d[5];
			t->matmul(&m, x, n, NULL, y);
			for (int r = 0; r < 5; r++) {
				double t0 = now();
				t->matmul(&m, x, n, NULL, y);
				d[r] = now() - t0;
			}
			qsort(d, 5, sizeof(double), cmp_d);
			res[pass][s] = 2.0 * rows * (double)cols * n / d[2] / 1e9;
			printf("  %-6s %-18s %8.1f ms %7.1f GFLOP/s\n", pass ? "amx" : "avx512", nm[s], d[2] * 1e3,
			       res[pass][s]);
			free(mem);
			free(x);
			free(y);
		}
	}
}

int main(int argc, char **argv)
{
	int threads = 0, rows = 2048, cols = 8192, bits = 4, gs = 64, ntok = 512, gemm_only = 0;
	for (int i = 1; i + 1 < argc; i += 2) {
		int v = atoi(argv[i + 1]);
		if (!strcmp(argv[i], "-t"))
			threads = v;
		else if (!strcmp(argv[i], "-r"))
			rows = v;
		else if (!strcmp(argv[i], "-c"))
			cols = v;
		else if (!strcmp(argv[i], "-b"))
			bits = v;
		else if (!strcmp(argv[i], "-g"))
			gs = v;
		else if (!strcmp(argv[i], "-n"))
			ntok = v;
		else if (!strcmp(argv[i], "-G"))
			gemm_only = v;
	}
	if (kpool_init(threads) != 0)
		return 1;
	if (gemm_only) {
		printf("threads %d\n", kpool_threads());
		gemm_shapes(ntok);
		kpool_free();
		return 0;
	}
	printf("threads %d, matrix %d x %d, %d-bit, group %d, f16 scales\n", kpool_threads(), rows, cols, bits, gs);

	/* read bandwidth: parallel sum over 1 GiB */
	size_t bw_bytes = (size_t)1 << 30;
	uint64_t *big = malloc(bw_bytes);
	kmem_advise_huge(big, bw_bytes); /* as the worker holds the weights */
	memset(big, 1, bw_bytes);
	sum_job sj = {.p = big, .n_per = bw_bytes / 8 / 256};
	double best = 1e9;
	for (int rep = 0; rep < 4; rep++) {
		double t0 = now();
		kpool_for(256, sum_task, &sj);
		double t = now() - t0;
		best = t < best ? t : best;
		printf("  sum pass %d: %.2f GB/s\n", rep, (double)bw_bytes / t / 1e9);
	}
	uint64_t chk = 0;
	for (int i = 0; i < 256; i++)
		chk += sj.out[i];
	double bw = (double)bw_bytes / best / 1e9;
	printf("read bandwidth (1 GiB sum, %d threads): %.2f GB/s (checksum %llx)\n", kpool_threads(), bw,
	       (unsigned long long)chk);
	free(big);

	/* the matrix, and enough copies of it to exceed any cache */
	size_t wb = (size_t)rows * (size_t)cols * (size_t)bits / 8;
	size_t sb = (size_t)rows * (size_t)(cols / gs) * 2;
	size_t one = wb + 2 * sb + 64;
	int copies = (int)(((size_t)1 << 30) / one) + 1;
	uint8_t *mem = malloc(one * (size_t)copies + 1);
	kmem_advise_huge(mem, one * (size_t)copies + 1);
	srand(1);
	for (size_t i = 0; i < one * (size_t)copies + 1; i++)
		mem[i] = (uint8_t)rand();
	uint16_t s16 = k_f32_to_f16(0.01f);
	kq_matrix *ms = malloc(sizeof(kq_matrix) * (size_t)copies);
	for (int c = 0; c < copies; c++) {
		uint8_t *base = mem + (size_t)c * one + 1; /* unaligned, like mapped MLX tensors */
		for (size_t i = 0; i < 2 * sb; i += 2)
			memcpy(base + wb + i, &s16, 2);
		ms[c] = (kq_matrix){rows, cols, bits, gs, KDT_F32, KDT_F16, base, base + wb, base + wb + sb};
	}
	double mbytes = (double)(wb + 2 * sb);
	float *x = malloc(sizeof(float) * (size_t)cols * 64), *y = malloc(sizeof(float) * (size_t)rows * 64);
	for (int i = 0; i < cols * 64; i++)
		x[i] = (float)(i % 7) * 0.1f;

	const kernel_table *tabs[3] = {kernels_ref(), kernels_avx2(), kernels_avx512()};
	const char *names[3] = {"ref", "avx2", "avx512"};
	for (int ti = 0; ti < 3; ti++) {
		const kernel_table *t = tabs[ti];
		if (!t) {
			printf("UNAVAILABLE: %s\n", names[ti]);
			continue;
		}
		int reps = ti == 0 ? 3 : 200;
		double hot = 1e9;
		t->matvec(&ms[0], x, NULL, y);
		for (int r = 0; r < reps; r++) {
			double t0 = now();
			t->matvec(&ms[0], x, NULL, y);
			double dt = now() - t0;
			hot = dt < hot ? dt : hot;
		}
		double cold = 1e9, t0;
		int cold_n = ti == 0 ? 3 : copies;
		for (int pass = 0; pass < (ti == 0 ? 1 : 3); pass++) {
			t0 = now();
			for (int c = 0; c < cold_n; c++)
				t->matvec(&ms[c], x, NULL, y);
			double dt = (now() - t0) / cold_n;
			cold = dt < cold ? dt : cold;
		}
		printf("%-6s matvec: hot %8.1f us %6.2f GB/s | cold %8.1f us %6.2f GB/s = %5.1f%% of read bandwidth\n",
		       t->name, hot * 1e6, mbytes / hot / 1e9, cold * 1e6, mbytes / cold / 1e9,
		       100.0 * mbytes / cold / 1e9 / bw);
		if (ti > 0) {
			int n = 64;
			double mm = 1e9;
			for (int r = 0; r < 3; r++) {
				t0 = now();
				t->matmul(&ms[0], x, n, NULL, y);
				double dt = now() - t0;
				mm = dt < mm ? dt : mm;
			}
			printf("%-6s matmul n=%d: %8.1f us, %.1f GFLOP/s\n", t->name, n, mm * 1e6,
			       2.0 * rows * (double)cols * n / mm / 1e9);
		}
	}
	gemm_shapes(ntok);
	double t0 = now();
	int calls = 100000;
	for (int i = 0; i < calls; i++)
		kpool_for(kpool_threads(), noop_task, NULL);
	printf("kpool_for round trip (%d tasks): %.2f us\n", kpool_threads(), (now() - t0) / calls * 1e6);
	free(ms);
	free(mem);
	free(x);
	free(y);
	kpool_free();
	return 0;
}

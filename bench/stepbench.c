/* bench/stepbench.c — the matvecs of a whole decode step (not a test: it
 * asserts nothing).
 *
 *   make stepbench && build/stepbench [-t threads] [-s smollm2-135m|llama3.2-1b] [-r reps]
 *
 * Every layer's q, k, v, o, gate, up, down and the lm_head of a model
 * shape, 4-bit group 64 with bf16 scales, random codes, each matrix in its
 * own allocation as in a real model (so the step streams them from memory
 * unless they fit in the last-level cache), timed per token two ways,
 * alternating round by round: one matvec per matrix, and matvec_multi for
 * q/k/v and gate/up (kernels.h). Attention, norms and the rest of the
 * forward pass are left out: the figure is the weight stream alone,
 * against the read bandwidth measured in the same run (a parallel sum
 * over 1 GiB, as bench/kbench.c). Medians over the rounds. */
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
	uint64_t out[256];
} sum_job;

static void sum_task(void *arg, int i)
{
	sum_job *j = arg;
	const uint64_t *p = j->p + (size_t)i * j->n_per;
	uint64_t a = 0, b = 0;
	for (size_t k = 0; k < j->n_per; k += 2) {
		a += p[k];
		b += p[k + 1];
	}
	j->out[i] = a + b;
}

static double read_bandwidth(void)
{
	size_t bytes = (size_t)1 << 30;
	uint64_t *big = malloc(bytes);
	memset(big, 1, bytes);
	sum_job sj = {.p = big, .n_per = bytes / 8 / 256};
	double best = 1e9;
	for (int rep = 0; rep < 4; rep++) {
		double t0 = now();
		kpool_for(256, sum_task, &sj);
		double t = now() - t0;
		best = t < best ? t : best;
	}
	free(big);
	return (double)bytes / best / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

typedef struct {
	const char *name;
	int hidden, inter, layers, qd, kvd, vocab;
} shape;

static const shape SHAPES[] = {
	{"smollm2-135m", 576, 1536, 30, 576, 192, 49152},
	{"llama3.2-1b", 2048, 8192, 16, 2048, 512, 128256},
};

static kq_matrix mk_matrix(int rows, int cols, uint8_t **mem, size_t *bytes)
{
	size_t wb = (size_t)rows * (size_t)cols / 2, sb = (size_t)rows * (size_t)(cols / 64) * 2;
	uint8_t *p = malloc(wb + 2 * sb + 1);
	for (size_t i = 0; i < wb + 1; i++)
		p[i] = (uint8_t)rand();
	uint16_t s16 = k_f32_to_bf16(0.01f);
	for (size_t i = 0; i < 2 * sb; i += 2)
		memcpy(p + 1 + wb + i, &s16, 2);
	*mem = p;
	*bytes += wb + 2 * sb;
	return (kq_matrix){rows, cols, 4, 64, KDT_F32, KDT_BF16, p + 1, p + 1 + wb, p + 1 + wb + sb};
}

int main(int argc, char **argv)
{
	int threads = 0, reps = 15;
	const char *name = "smollm2-135m";
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "-t"))
			threads = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-s"))
			name = argv[i + 1];
		else if (!strcmp(argv[i], "-r"))
			reps = atoi(argv[i + 1]);
	}
	const shape *sh = NULL;
	for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++)
		if (!strcmp(SHAPES[i].name, name))
			sh = &SHAPES[i];
	if (!sh || reps < 1 || reps > 1000 || kpool_init(threads) != 0) {
		fprintf(stderr, "usage: %s [-t threads] [-s smollm2-135m|llama3.2-1b] [-r reps]\n", argv[0]);
		return 2;
	}
	double bw = read_bandwidth();
	const int H = sh->hidden, I = sh->inter, NL = sh->layers;
	enum { Q, K, V, O, G, U, D, NMAT };
	kq_matrix *m = malloc(sizeof(kq_matrix) * (size_t)(NL * NMAT + 1));
	uint8_t **mem = malloc(sizeof(uint8_t *) * (size_t)(NL * NMAT + 1));
	size_t bytes = 0, head_bytes = 0;
	srand(2);
	for (int l = 0; l < NL; l++) {
		kq_matrix *L = m + l * NMAT;
		uint8_t **ml = mem + l * NMAT;
		L[Q] = mk_matrix(sh->qd, H, &ml[Q], &bytes);
		L[K] = mk_matrix(sh->kvd, H, &ml[K], &bytes);
		L[V] = mk_matrix(sh->kvd, H, &ml[V], &bytes);
		L[O] = mk_matrix(H, sh->qd, &ml[O], &bytes);
		L[G] = mk_matrix(I, H, &ml[G], &bytes);
		L[U] = mk_matrix(I, H, &ml[U], &bytes);
		L[D] = mk_matrix(H, I, &ml[D], &bytes);
	}
	kq_matrix *head = &m[NL * NMAT];
	*head = mk_matrix(sh->vocab, H, &mem[NL * NMAT], &head_bytes);
	bytes += head_bytes;
	int wide = I > sh->vocab ? I : sh->vocab;
	float *x = malloc(sizeof(float) * (size_t)I), *y[3];
	for (int i = 0; i < I; i++)
		x[i] = (float)(i % 7) * 0.1f - 0.3f;
	for (int i = 0; i < 3; i++)
		y[i] = malloc(sizeof(float) * (size_t)wide);
	printf("%s: %d threads, %.1f MB of weights per token, read bandwidth %.2f GB/s, %d rounds, medians\n",
	       sh->name, kpool_threads(), (double)bytes / 1e6, bw, reps);
	const kernel_table *tabs[2] = {kernels_avx2(), kernels_avx512()};
	for (int ti = 0; ti < 2; ti++) {
		const kernel_table *t = tabs[ti];
		if (!t) {
			printf("UNAVAILABLE: %s\n", ti ? "avx512" : "avx2");
			continue;
		}
		double *d[3];
		for (int k = 0; k < 3; k++)
			d[k] = malloc(sizeof(double) * (size_t)reps);
		for (int rep = 0; rep < reps; rep++)
			for (int multi = 0; multi < 2; multi++) {
				double t0 = now();
				for (int l = 0; l < NL; l++) {
					kq_matrix *L = m + l * NMAT;
					if (multi) {
						const kq_matrix *qkv[3] = {&L[Q], &L[K], &L[V]}, *gu[2] = {&L[G], &L[U]};
						t->matvec_multi(qkv, 3, x, NULL, y);
						t->matvec(&L[O], x, NULL, y[0]);
						t->matvec_multi(gu, 2, x, NULL, y);
					} else {
						t->matvec(&L[Q], x, NULL, y[0]);
						t->matvec(&L[K], x, NULL, y[1]);
						t->matvec(&L[V], x, NULL, y[2]);
						t->matvec(&L[O], x, NULL, y[0]);
						t->matvec(&L[G], x, NULL, y[0]);
						t->matvec(&L[U], x, NULL, y[1]);
					}
					t->matvec(&L[D], x, NULL, y[0]);
				}
				double t1 = now();
				t->matvec(head, x, NULL, y[0]);
				double t2 = now();
				d[multi][rep] = t2 - t0;
				if (multi)
					d[2][rep] = t2 - t1;
			}
		for (int k = 0; k < 3; k++)
			qsort(d[k], (size_t)reps, sizeof(double), cmp_d);
		for (int multi = 0; multi < 2; multi++) {
			double s = d[multi][reps / 2];
			printf("%-6s %-20s %8.3f ms/token %6.2f GB/s = %5.1f%% of read bandwidth\n", t->name,
			       multi ? "matvec_multi:" : "one matvec each:", s * 1e3, (double)bytes / s / 1e9,
			       100.0 * (double)bytes / s / 1e9 / bw);
		}
		double h = d[2][reps / 2];
		printf("%-6s lm_head %d x %d:  %8.3f ms        %6.2f GB/s\n", t->name, sh->vocab, H, h * 1e3,
		       (double)head_bytes / h / 1e9);
		for (int k = 0; k < 3; k++)
			free(d[k]);
	}
	for (int i = 0; i <= NL * NMAT; i++)
		free(mem[i]);
	free(mem);
	free(m);
	free(x);
	for (int i = 0; i < 3; i++)
		free(y[i]);
	kpool_free();
	return 0;
}

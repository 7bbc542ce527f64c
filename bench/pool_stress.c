/* bench/pool_stress.c — long stress run of the kernel thread pool
 * (kernels/cpu/pool.c), kept out of `make unit-test` (tests/unit/test_pool.c
 * is the fast, always-run subset).
 *
 *   make pool-stress [POOL_STRESS_ARGS="-s 60 -t 2,3,4,8"]
 *   $(BUILD)/pool-stress [-s seconds per config] [-t threads,...]
 *                        [-y yield per mille] [-z sleep per mille] [-w hang s]
 *   make pool-stress-tsan   (the same under clang -fsanitize=thread)
 *
 * pool.c is compiled into this binary with -DKPOOL_STRESS, so every
 * K_HOOK(site) in it calls kpool_stress_hook below: with the given
 * probabilities a thread yields or sleeps 1-50 us exactly where a
 * preemption would open a race window (between announcing sleep and
 * re-checking, between finishing a task and deciding to wake, ...). Run
 * it under `taskset -c 0` and next to a CPU hog to make preemption
 * everywhere else likely too.
 *
 * Each kpool_for call gets tiny, uneven tasks (some yield or sleep), two
 * task functions alternate with their own argument type (a worker that
 * paired one job's fn with another's arg is caught), and the caller pauses
 * now and then for longer than the workers' spin so that they go to sleep
 * and must be woken. After every call: each index ran exactly once, and
 * every task had finished before kpool_for returned. Every few thousand
 * calls the pool is freed and re-made. A watchdog thread aborts with the
 * pool's state when no call completes for -w seconds (a hang).
 * Exit status 0 only when every check held. */
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "tests/test_rng.h"

void kpool_stress_hook(int site);
void kpool_stress_state(char *buf, size_t len);

#define MAX_TASKS 4096
#define NSITES 16

static int g_yield_pm = 10, g_sleep_pm = 2; /* per mille, per hook */
static _Atomic unsigned long g_site_hits[NSITES];
static _Atomic unsigned long g_progress; /* completed kpool_for calls */
static _Atomic int g_failed;
static _Atomic int g_quit;

static _Thread_local uint64_t t_rng;

static uint64_t rnd(void)
{
	if (!t_rng)
		t_rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)&t_rng ^ (uint64_t)time(NULL);
	return test_xorshift(&t_rng);
}

void kpool_stress_hook(int site)
{
	if (site >= 0 && site < NSITES)
		atomic_fetch_add_explicit(&g_site_hits[site], 1, memory_order_relaxed);
	unsigned r = (unsigned)(rnd() % 1000);
	if (r < (unsigned)g_yield_pm)
		sched_yield();
	else if (r < (unsigned)(g_yield_pm + g_sleep_pm))
		usleep(1 + (unsigned)(rnd() % 50));
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Two argument types, each with its own task function and magic: the
 * pool must hand a task the fn and arg of one and the same call. */
typedef struct {
	uint32_t magic; /* MAGIC_A */
	int n;
	uint64_t round;
	_Atomic int *hits;
	_Atomic int finished;
	int work; /* spin scale */
} job_a;

typedef struct {
	int n;
	uint32_t magic; /* MAGIC_B, at another offset than job_a's */
	_Atomic int *hits;
	uint64_t round;
	_Atomic int finished;
	int work;
} job_b;

#define MAGIC_A 0xA11CE5u
#define MAGIC_B 0xB0B0B0u

static void fail(const char *what, uint64_t round, int i)
{
	if (atomic_exchange(&g_failed, 1) == 0)
		fprintf(stderr, "pool-stress: FAIL round %llu index %d: %s\n", (unsigned long long)round, i, what);
}

static void task_body(_Atomic int *hits, int n, uint64_t round, int work, int i)
{
	if (i < 0 || i >= n) {
		fail("index out of range", round, i);
		return;
	}
	if (atomic_fetch_add(&hits[i], 1) != 0)
		fail("index ran twice", round, i);
	/* uneven: most tasks tiny, some long, a few yield or sleep */
	uint64_t h = (round * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)i * 0xc2b2ae3d27d4eb4full);
	h ^= h >> 29;
	unsigned kind = (unsigned)(h % 100);
	volatile unsigned sink = 0;
	int spin = kind < 70 ? (int)(h >> 40) % 8 : kind < 95 ? (int)(h >> 40) % (work + 1) : 0;
	for (int k = 0; k < spin; k++)
		sink = sink + (unsigned)k;
	(void)sink;
	if (kind >= 95 && kind < 98)
		sched_yield();
	else if (kind >= 98 && (h >> 32) % 8 == 0)
		usleep(1 + (unsigned)(h >> 50) % 30);
}

static void task_a(void *arg, int i)
{
	job_a *j = arg;
	if (j->magic != MAGIC_A) {
		fail("task_a got another job's arg", 0, i);
		return;
	}
	task_body(j->hits, j->n, j->round, j->work, i);
	atomic_fetch_add(&j->finished, 1);
}

static void task_b(void *arg, int i)
{
	job_b *j = arg;
	if (j->magic != MAGIC_B) {
		fail("task_b got another job's arg", 0, i);
		return;
	}
	task_body(j->hits, j->n, j->round, j->work, i);
	atomic_fetch_add(&j->finished, 1);
}

static int g_hang_s = 30;

static void *watchdog(void *unused)
{
	(void)unused;
	unsigned long last = atomic_load(&g_progress);
	double since = now_s();
	while (!atomic_load(&g_quit)) {
		usleep(100000);
		unsigned long p = atomic_load(&g_progress);
		if (p != last) {
			last = p;
			since = now_s();
		} else if (now_s() - since > g_hang_s) {
			char st[256];
			kpool_stress_state(st, sizeof st);
			fprintf(stderr, "pool-stress: HANG: no kpool_for returned for %d s after %lu calls\n  %s\n",
				g_hang_s, p, st);
			for (int s = 0; s < NSITES; s++)
				if (atomic_load(&g_site_hits[s]))
					fprintf(stderr, "  hook site %d: %lu\n", s, atomic_load(&g_site_hits[s]));
			abort();
		}
	}
	return NULL;
}

static _Atomic int hits[MAX_TASKS];

/* One configuration: `threads` pool threads for `secs` seconds. */
static int run_config(int threads, double secs, uint64_t *rounds_out, double *worst_out)
{
	if (kpool_init(threads) != 0 || kpool_threads() != threads) {
		fprintf(stderr, "pool-stress: kpool_init(%d) failed\n", threads);
		return -1;
	}
	double t0 = now_s(), worst = 0;
	uint64_t round = 0;
	while (now_s() - t0 < secs && !atomic_load(&g_failed)) {
		round++;
		uint64_t r = rnd();
		unsigned pick = (unsigned)(r % 100);
		/* mostly a few tasks per thread; sometimes 1, sometimes many */
		int n = pick < 10 ? 1 : pick < 80 ? 1 + (int)((r >> 8) % (unsigned)(4 * threads))
			: pick < 99 ? 1 + (int)((r >> 8) % 64) : 1 + (int)((r >> 8) % MAX_TASKS);
		int work = (int)((r >> 24) % 2000);
		double c0 = now_s();
		int fin;
		if (round & 1) {
			job_a j = { MAGIC_A, n, round, hits, 0, work };
			kpool_for(n, task_a, &j);
			fin = atomic_load(&j.finished);
		} else {
			job_b j = { n, MAGIC_B, hits, round, 0, work };
			kpool_for(n, task_b, &j);
			fin = atomic_load(&j.finished);
		}
		double dt = now_s() - c0;
		worst = dt > worst ? dt : worst;
		if (fin != n)
			fail("kpool_for returned before every task finished", round, fin);
		for (int i = 0; i < n; i++)
			if (atomic_exchange(&hits[i], 0) != 1) {
				fail("an index did not run exactly once", round, i);
				break;
			}
		atomic_fetch_add(&g_progress, 1);
		/* let the workers outrun their spin and sleep */
		unsigned gap = (unsigned)((r >> 40) % 100);
		if (gap < 3)
			usleep(200 + (unsigned)((r >> 48) % 800));
		else if (gap < 6)
			sched_yield();
		if (round % 5000 == 0) {
			kpool_free();
			if (kpool_init(threads) != 0) {
				fprintf(stderr, "pool-stress: kpool_init(%d) failed\n", threads);
				return -1;
			}
		}
	}
	kpool_free();
	*rounds_out = round;
	*worst_out = worst;
	return atomic_load(&g_failed) ? -1 : 0;
}

int main(int argc, char **argv)
{
	double secs = 10;
	char tlist[128] = "2,3,4,8";
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "-s"))
			secs = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "-t"))
			snprintf(tlist, sizeof tlist, "%s", argv[i + 1]);
		else if (!strcmp(argv[i], "-y"))
			g_yield_pm = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-z"))
			g_sleep_pm = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-w"))
			g_hang_s = atoi(argv[i + 1]);
		else {
			fprintf(stderr, "usage: pool-stress [-s secs] [-t 2,3,4,8] [-y permille] [-z permille] [-w hang_s]\n");
			return 2;
		}
	}
	pthread_t wd;
	if (pthread_create(&wd, NULL, watchdog, NULL) != 0)
		return 1;
	int rc = 0;
	uint64_t total = 0;
	for (char *tok = strtok(tlist, ","); tok && rc == 0; tok = strtok(NULL, ",")) {
		int t = atoi(tok);
		uint64_t rounds = 0;
		double worst = 0;
		if (t < 2)
			continue;
		rc = run_config(t, secs, &rounds, &worst);
		total += rounds;
		printf("threads %d: %llu kpool_for calls in %.0f s, worst call %.1f ms, yield %d/1000 sleep %d/1000 per hook: %s\n",
		       t, (unsigned long long)rounds, secs, worst * 1e3, g_yield_pm, g_sleep_pm, rc ? "FAIL" : "ok");
		fflush(stdout);
	}
	atomic_store(&g_quit, 1);
	pthread_join(wd, NULL);
	printf("pool-stress: %llu calls, %s; hook sites hit:", (unsigned long long)total, rc ? "FAIL" : "ok");
	for (int s = 0; s < NSITES; s++)
		if (atomic_load(&g_site_hits[s]))
			printf(" %d:%lu", s, atomic_load(&g_site_hits[s]));
	printf("\n");
	return rc ? 1 : 0;
}

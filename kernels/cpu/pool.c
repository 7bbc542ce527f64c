/* kernels/cpu/pool.c — the worker-thread pool every kernel shares.
 *
 * Persistent threads; a job is (fn, arg, n) and indices are handed out
 * through one atomic counter, so uneven tasks balance themselves. The
 * caller thread works too. Decode on a small model runs a few hundred
 * jobs per token, each tens of microseconds, so the hand-off must be
 * cheap: workers spin on the job generation for a while (K_SPIN pauses)
 * and only then sleep on a futex; the caller spins on the count of
 * finished tasks the same way. A futex wake is issued only when someone is asleep.
 *
 * `make kbench` reports the kpool_for round trip (empty tasks): 0.5 us
 * with 2 threads, 4.7 us with 16 (16-core test host); 0.15-0.7 us on the
 * loaded 2-core dev machine.
 *
 * Contract: kpool_for is called from one thread at a time (the worker's
 * forward pass). A call from inside a pool task, or while another call is
 * running, runs its loop inline on the calling thread: correct, serial.
 *
 * Invariants (every atomic below is seq_cst unless marked; the reasoning
 * is in C11 terms, not x86's):
 *
 *  I1 `work` = gen << 32 | remaining: the generation of the current job
 *     and how many of its indices are not handed out yet. It alone says
 *     what may be claimed. The caller stores it once per job, (g, n),
 *     after fn, arg, njobs and done = 0 and after job g-1 has finished;
 *     every other change is a claim, CAS (g, r) -> (g, r - 1) with r > 0.
 *     So the CAS succeeds exactly n times per job, and never for a job
 *     that is over (r = 0) or replaced (other g).
 *  I2 A claim of (g, r) owns index njobs - r of job g. fn, arg and njobs
 *     are read after the claim succeeded: its acquire pairs with the
 *     caller's store of (g, n) (the claims in between are RMWs and extend
 *     that release sequence), so they are job g's or newer; and job g+1's
 *     are stored only after done reached n, which needs this claim's own
 *     increment, sequenced after these reads: so they are job g's.
 *  I3 `done` counts finished claims of the current job: reset before the
 *     job is published, incremented once per claim after its fn returned.
 *     It reaches n only when every task has finished and never passes n;
 *     the caller returns when it reads n (acquire: every task's writes are
 *     visible to it).
 *  I4 No lost wake-up. Worker: sleepers++, then re-read gen, then
 *     futex_wait(gen, seen); caller: store gen, then read sleepers. Both
 *     seq_cst, so either the worker sees the new gen or the caller sees
 *     the sleeper and wakes it; a wake between the re-read and the wait is
 *     caught by the futex's own value check. The caller's sleep on done
 *     is the same pattern with caller_asleep and the last increment.
 *  I5 gen is 32 bits: an ABA on `work` needs one thread to stall across
 *     2^32 jobs between reading `work` and its CAS.
 *
 * Was (#1, the hang of `mlxr eval --generate` under load, reproduced by
 * bench/pool_stress.c): `work` held the next index, and a claim compared
 * it with njobs read *before* the CAS. A worker that entered run_job late
 * could read job g's njobs (and fn, arg) while `work` still held
 * (g-1, n_prev): when job g was larger, its CAS (g-1, n_prev) -> n_prev+1
 * succeeded in the few instructions before the caller stored (g, 0). It
 * then ran index n_prev of job g, which was handed out again, and added
 * one too many to done: the caller waited for done == n and slept forever
 * at n + 1 (or returned while a task still ran). Counting down the
 * remaining indices in `work` makes the claim self-contained (I1, I2).
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/kernels.h"

#define KPOOL_MAX 256
/* Spin iterations before sleeping: a few tens of microseconds with pause,
 * longer than the gap between two kernels of one decode step. */
#define K_SPIN 2000

/* tests/unit/test_pool.c and bench/pool_stress.c build this file with
 * -DKPOOL_STRESS: K_HOOK(site) then calls their hook (a random yield or
 * sleep) at each point where a preemption could open a race window.
 * Nothing in a normal build. */
#ifdef KPOOL_STRESS
void kpool_stress_hook(int site);
#define K_HOOK(site) kpool_stress_hook(site)
#else
#define K_HOOK(site) ((void)0)
#endif

/* Job state. `work` packs the job generation (high 32 bits) with the
 * number of indices still to hand out (low 32): a claim is a
 * compare-and-swap that succeeds only for the current job, so a worker
 * that wakes late can never run an index of a job it did not see start,
 * and the caller never waits for a worker that claimed nothing. (A first
 * version counted workers in and out of each job; on a loaded machine the
 * caller then waited for descheduled workers that had no work left:
 * ~30-45 us per kpool_for.) */
static struct {
	int n; /* threads including the caller; 0/1: no pool */
	pthread_t th[KPOOL_MAX];
	_Atomic uint64_t work;     /* gen << 32 | indices not yet handed out (I1) */
	_Atomic uint32_t gen;      /* futex word the workers sleep on */
	_Atomic int sleepers;      /* workers asleep (or about to be) on gen */
	_Atomic uint32_t done;     /* futex word: tasks finished in this job */
	_Atomic int caller_asleep;
	_Atomic int stop;
	void (*_Atomic fn)(void *arg, int i);
	void *_Atomic arg;
	_Atomic int njobs;
	atomic_flag busy; /* one kpool_for at a time */
} P = {.busy = ATOMIC_FLAG_INIT};

static _Thread_local int k_in_pool;

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val)
{
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr)
{
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Claim and run indices of job `g` until none is left or the job changed. */
static void run_job(uint32_t g)
{
	uint64_t w = atomic_load_explicit(&P.work, memory_order_acquire);
	for (;;) {
		if ((uint32_t)(w >> 32) != g || (uint32_t)w == 0)
			return;
		K_HOOK(0);
		if (!atomic_compare_exchange_weak_explicit(&P.work, &w, w - 1, memory_order_acquire,
							   memory_order_acquire))
			continue;
		/* I2: read only now that the claim holds */
		void (*fn)(void *, int) = atomic_load_explicit(&P.fn, memory_order_relaxed);
		void *arg = atomic_load_explicit(&P.arg, memory_order_relaxed);
		uint32_t n = (uint32_t)atomic_load_explicit(&P.njobs, memory_order_relaxed);
		K_HOOK(1);
		fn(arg, (int)(n - (uint32_t)w));
		uint32_t d = atomic_fetch_add(&P.done, 1) + 1; /* seq_cst: I4 */
		K_HOOK(2);
		if (d == n && atomic_load(&P.caller_asleep))
			futex_wake(&P.done);
		w = atomic_load_explicit(&P.work, memory_order_acquire);
	}
}

static void *worker_main(void *unused)
{
	(void)unused;
	k_in_pool = 1;
	uint32_t seen = 0;
	for (;;) {
		uint32_t g;
		int spins = 0;
		while ((g = atomic_load_explicit(&P.gen, memory_order_acquire)) == seen) {
			if (++spins < K_SPIN) {
				cpu_relax();
				continue;
			}
			atomic_fetch_add(&P.sleepers, 1);
			K_HOOK(3);
			if (atomic_load(&P.gen) == seen) {
				K_HOOK(4);
				futex_wait(&P.gen, seen);
			}
			atomic_fetch_sub(&P.sleepers, 1);
			spins = 0;
		}
		seen = g;
		K_HOOK(5);
		if (atomic_load_explicit(&P.stop, memory_order_acquire))
			break;
		run_job(g);
	}
	return NULL;
}

#ifdef KPOOL_STRESS
#include <stdio.h>
/* The shared state in one line, for a stress harness's hang report. */
void kpool_stress_state(char *buf, size_t len);
void kpool_stress_state(char *buf, size_t len)
{
	uint64_t w = atomic_load(&P.work);
	snprintf(buf, len, "n=%d gen=%u work=(gen %u, remaining %u) njobs=%d done=%u sleepers=%d caller_asleep=%d stop=%d",
		 P.n, atomic_load(&P.gen), (unsigned)(w >> 32), (unsigned)w, atomic_load(&P.njobs),
		 atomic_load(&P.done), atomic_load(&P.sleepers), atomic_load(&P.caller_asleep), atomic_load(&P.stop));
}
#endif

static int online_cpus(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set) == 0) {
		int c = CPU_COUNT(&set);
		if (c > 0)
			return c;
	}
	long c = sysconf(_SC_NPROCESSORS_ONLN);
	return c > 0 ? (int)c : 1;
}

int kpool_init(int nthreads)
{
	if (P.n > 0)
		kpool_free();
	if (nthreads < 0)
		return -1;
	if (nthreads == 0) {
		const char *e = getenv("MLXR_THREADS");
		nthreads = e && atoi(e) > 0 ? atoi(e) : online_cpus();
	}
	if (nthreads > KPOOL_MAX)
		nthreads = KPOOL_MAX;
	atomic_store(&P.stop, 0);
	P.n = 1;
	for (int i = 1; i < nthreads; i++) {
		if (pthread_create(&P.th[i], NULL, worker_main, NULL) != 0) {
			kpool_free();
			return -1;
		}
		P.n = i + 1;
	}
	return 0;
}

int kpool_threads(void)
{
	return P.n > 0 ? P.n : 1;
}

void kpool_free(void)
{
	if (P.n > 1) {
		atomic_store(&P.stop, 1);
		atomic_fetch_add(&P.gen, 1);
		futex_wake(&P.gen);
		for (int i = 1; i < P.n; i++)
			pthread_join(P.th[i], NULL);
	}
	P.n = 0;
}

void kpool_for(int n, void (*fn)(void *arg, int i), void *arg)
{
	if (n <= 0)
		return;
	if (P.n <= 1 || n == 1 || k_in_pool || atomic_flag_test_and_set(&P.busy)) {
		for (int i = 0; i < n; i++)
			fn(arg, i);
		return;
	}
	uint32_t g = atomic_load_explicit(&P.gen, memory_order_relaxed) + 1;
	atomic_store_explicit(&P.fn, fn, memory_order_relaxed);
	atomic_store_explicit(&P.arg, arg, memory_order_relaxed);
	atomic_store_explicit(&P.njobs, n, memory_order_relaxed);
	atomic_store_explicit(&P.done, 0, memory_order_relaxed);
	K_HOOK(9);
	atomic_store(&P.work, (uint64_t)g << 32 | (uint32_t)n); /* I1 */
	atomic_store(&P.gen, g); /* publishes the job (seq_cst) */
	K_HOOK(6);
	if (atomic_load(&P.sleepers) > 0)
		futex_wake(&P.gen);

	k_in_pool = 1;
	run_job(g);
	k_in_pool = 0;

	int spins = 0;
	uint32_t d;
	while ((d = atomic_load_explicit(&P.done, memory_order_acquire)) != (uint32_t)n) {
		if (++spins < K_SPIN) {
			cpu_relax();
			continue;
		}
		atomic_store(&P.caller_asleep, 1);
		K_HOOK(7);
		if ((d = atomic_load(&P.done)) != (uint32_t)n) {
			K_HOOK(8);
			futex_wait(&P.done, d);
		}
		atomic_store(&P.caller_asleep, 0);
		spins = 0;
	}
	atomic_flag_clear(&P.busy);
}

void kmem_advise_huge(void *p, size_t n)
{
	const uintptr_t huge = (uintptr_t)2 << 20;
	uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1), e = ((uintptr_t)p + n) & ~(huge - 1);
	if (p && e > a)
		(void)madvise((void *)a, e - a, MADV_HUGEPAGE);
}

/* kernels/cpu/dispatch.c — table selection at run time, element
 * conversions, and the small helpers the tables share.
 *
 * The getters live here, not in the ISA files, so the CPU check itself is
 * compiled for the baseline ISA: nothing built with -mavx2 or -mavx512*
 * runs before the check has passed. */
#include <cpuid.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/cpu/kinternal.h"

/* F16C is CPUID.1:ECX bit 29; clang 14's __builtin_cpu_supports has no
 * "f16c" name, so read it directly. */
static int has_f16c(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return 0;
	return (c >> 29) & 1;
}

const kernel_table *kernels_ref(void)
{
	return &k_table_ref;
}

const kernel_table *kernels_avx2(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c() && k_table_avx2.matvec)
		return &k_table_avx2;
	return NULL;
}

/* The AVX-512 file is built with F/BW/VL/DQ + FMA + F16C (Makefile
 * AVX512_FLAGS); all of them are required here. __builtin_cpu_supports
 * also checks that the OS saves the ZMM state (XGETBV). */
const kernel_table *kernels_avx512(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("fma") && has_f16c() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && k_table_avx512.matvec) {
		const char *e = getenv("MLXR_VNNI"); /* the 4-bit matvec on VNNI (matvec_vnni.c) */
		k_vnni_ready = __builtin_cpu_supports("avx512vnni") && !(e && strcmp(e, "0") == 0);
		return &k_table_avx512;
	}
	return NULL;
}

/* AMX: CPUID.(7,0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE; CPUID.(7,1):EAX
 * bit 5 AVX512-BF16 (gemm_amx.c converts with it); XCR0 bits 17 and 18
 * (XTILECFG, XTILEDATA): the OS manages the tile state. Linux also wants
 * each process to ask for the 8 KiB tile data state before its first tile
 * instruction (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 18);
 * the permission covers every thread of the process, later ones included.
 * The worker's seccomp filter does not allow arch_prctl, so this runs
 * before the sandbox (worker_main.c). */
#define K_ARCH_REQ_XCOMP_PERM 0x1023
#define K_XFEATURE_XTILEDATA 18

static int has_amx_bf16(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 22) & 1) || !((d >> 24) & 1))
		return 0;
	if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !((a >> 5) & 1))
		return 0;
	if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) /* OSXSAVE: xgetbv is usable */
		return 0;
	uint32_t lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return (lo & (3u << 17)) == (3u << 17);
}

int kernels_cpu_prepare(void)
{
	static int done, ready;
	if (done)
		return ready;
	done = 1;
	const char *e = getenv("MLXR_AMX");
	if ((e && strcmp(e, "0") == 0) || !kernels_avx512() || !has_amx_bf16())
		return 0;
	if (syscall(SYS_arch_prctl, K_ARCH_REQ_XCOMP_PERM, K_XFEATURE_XTILEDATA) != 0)
		return 0;
	k_amx_ready = ready = 1;
	return 1;
}

int kernels_cpu_amx(void)
{
	return k_amx_ready;
}

/* MLXR_KERNELS=ref|avx2|avx512 forces a table; a name this CPU cannot run
 * (or an unknown one) is ignored and the best available is used. */
const kernel_table *kernels_best(void)
{
	const char *e = getenv("MLXR_KERNELS");
	const kernel_table *t;
	if (e) {
		if (strcmp(e, "ref") == 0)
			return kernels_ref();
		if (strcmp(e, "avx2") == 0 && (t = kernels_avx2()))
			return t;
		if (strcmp(e, "avx512") == 0 && (t = kernels_avx512()))
			return t;
	}
	if ((t = kernels_avx512()))
		return t;
	if ((t = kernels_avx2()))
		return t;
	return kernels_ref();
}

/* IEEE binary16 -> binary32, exact for every input (subnormals, inf, NaN). */
int k_rows_chunk(int rows, size_t work_per_row, int align)
{
	int nt = kpool_threads();
	/* below ~64k multiply-adds one thread is faster than a hand-off */
	if (nt <= 1 || (size_t)rows * work_per_row < 65536)
		return rows > 0 ? rows : 1;
	int chunk = rows / (nt * 4);
	if (chunk < 1)
		chunk = 1;
	chunk = (chunk + align - 1) / align * align;
	return chunk;
}

void k_group_sums(const float *x, int cols, int gs, float *xs)
{
	for (int g = 0; g < cols / gs; g++) {
		float s = 0.0f;
		for (int j = 0; j < gs; j++)
			s += x[g * gs + j];
		xs[g] = s;
	}
}

void k_split_init(k_split *s, const kq_matrix *const *ms, int n)
{
	int total = 0;
	for (int k = 0; k < n; k++)
		total += ms[k]->rows;
	s->n = n;
	s->chunk = k_rows_chunk(total, (size_t)ms[0]->cols, 2);
	s->first[0] = 0;
	for (int k = 0; k < n; k++) {
		s->rows[k] = ms[k]->rows;
		s->first[k + 1] = s->first[k] + (ms[k]->rows + s->chunk - 1) / s->chunk;
	}
}

int k_split_task(const k_split *s, int i, int *r0, int *r1)
{
	int k = 0;
	while (k + 1 < s->n && i >= s->first[k + 1])
		k++;
	*r0 = (i - s->first[k]) * s->chunk;
	*r1 = *r0 + s->chunk < s->rows[k] ? *r0 + s->chunk : s->rows[k];
	return k;
}

void k_split_run(const k_split *s, void (*fn)(void *arg, int i), void *arg)
{
	int total = 0;
	for (int k = 0; k < s->n; k++)
		total += s->rows[k];
	if (s->chunk < total) {
		kpool_for(s->first[s->n], fn, arg);
		return;
	}
	for (int i = 0; i < s->first[s->n]; i++)
		fn(arg, i);
}

/* policy/seccomp.c — the seccomp-BPF allowlist of each role, written as raw
 * classic BPF (no libseccomp: the filter is ~200 instructions a reviewer can
 * read in the builder below, and the binaries link one library fewer).
 *
 * Shape: check the architecture (kill otherwise; x32 numbers too), then one
 * rule per syscall. A rule is "allow", "fail with errno E", or "allow when
 * every argument condition holds, else fail/kill". Anything without a rule
 * kills the process (SECCOMP_RET_KILL_PROCESS → SIGSYS).
 *
 * Errno rather than kill where glibc probes benignly and copes with failure:
 * open/openat (malloc reads /proc/sys/vm/overcommit_memory, sysconf reads
 * /sys/.../cpu/online; EACCES is also Landlock's answer), clone3 (ENOSYS:
 * glibc 2.36's pthread_create falls back to clone, whose flags a filter can
 * see — clone3's are behind a pointer), ioctl (ENOTTY: isatty; no ioctl on
 * any fd, so no TIOCSTI on an inherited terminal), prctl/fcntl options
 * outside the allowed few (EPERM), socket families other than IPv4/IPv6 in
 * the fetcher (EAFNOSUPPORT: glibc tries nscd's unix socket and netlink).
 * Argument checks read the low 32 bits only where the kernel itself truncates
 * the argument to 32 bits (int flags, clone's lower_32_bits) or where the bit
 * tested lives there (PROT_EXEC); pointers are checked in both halves. */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "policy/pinternal.h"

#if defined(__x86_64__)
#define POL_AUDIT_ARCH AUDIT_ARCH_X86_64
#define POL_X32_BIT 0x40000000u
#elif defined(__aarch64__)
#define POL_AUDIT_ARCH AUDIT_ARCH_AARCH64
#else
#error "policy/seccomp.c: add this architecture's AUDIT_ARCH"
#endif

#ifndef F_GET_SEALS
#define F_GET_SEALS 1034
#endif
#ifndef __O_TMPFILE
#define __O_TMPFILE 020000000
#endif

/* Byte offset of argument i's low/high 32-bit word in seccomp_data. */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ARG_LO(i) ((uint32_t)(offsetof(struct seccomp_data, args) + 8 * (i)))
#define ARG_HI(i) (ARG_LO(i) + 4)
#else
#define ARG_HI(i) ((uint32_t)(offsetof(struct seccomp_data, args) + 8 * (i)))
#define ARG_LO(i) (ARG_HI(i) + 4)
#endif

#define RET_ALLOW SECCOMP_RET_ALLOW
#define RET_KILL SECCOMP_RET_KILL_PROCESS
#define RET_ERRNO(e) (SECCOMP_RET_ERRNO | ((uint32_t)(e) & SECCOMP_RET_DATA))

typedef struct {
	struct sock_filter *f;
	size_t n, cap;
	int overflow;
	int rules;
} bpf_buf;

/* Learn mode (policy_seccomp_learn): every refusal traps instead, and the
 * one syscall instruction of learn_gadget is let through. */
static int g_learn;
static uint64_t g_learn_ip;

static void emit(bpf_buf *b, uint16_t code, uint8_t jt, uint8_t jf, uint32_t k)
{
	if (g_learn && code == (BPF_RET | BPF_K) && k != SECCOMP_RET_ALLOW)
		k = SECCOMP_RET_TRAP;
	if (b->n >= b->cap) {
		b->overflow = 1;
		return;
	}
	b->f[b->n++] = (struct sock_filter){ code, jt, jf, k };
}

/* nr → ret, unconditionally. */
static void rule(bpf_buf *b, long nr, uint32_t ret)
{
	emit(b, BPF_JMP | BPF_JEQ | BPF_K, 0, 1, (uint32_t)nr);
	emit(b, BPF_RET | BPF_K, 0, 0, ret);
	b->rules++;
}

/* One argument condition: (word & mask) is one of vals[0..nvals). */
typedef struct {
	uint32_t off;  /* ARG_LO(i) or ARG_HI(i) */
	uint32_t mask; /* 0xffffffff: whole word */
	uint32_t vals[6];
	int nvals;
} cond;

static int cond_len(const cond *c)
{
	return 1 + (c->mask != 0xffffffffu) + c->nvals;
}

/* nr → allow when every condition holds, else ret_fail. Layout:
 * JEQ nr (else skip block) | per condition: LD, [AND], JEQ v... | RET ALLOW |
 * RET fail. A matching JEQ jumps to the next condition (or RET ALLOW), the
 * last non-matching one to RET fail. A rule block always returns, so after a
 * skipped block the accumulator still holds the syscall number. */
static void rule_if(bpf_buf *b, long nr, const cond *cs, int ncs, uint32_t ret_fail)
{
	int body = 2;
	for (int i = 0; i < ncs; i++)
		body += cond_len(&cs[i]);
	emit(b, BPF_JMP | BPF_JEQ | BPF_K, 0, (uint8_t)body, (uint32_t)nr);
	int start = (int)b->n, fail = start + body - 1;
	int pos = start;
	for (int i = 0; i < ncs; i++) {
		const cond *c = &cs[i];
		int next = pos + cond_len(c); /* next condition, or RET ALLOW */
		emit(b, BPF_LD | BPF_W | BPF_ABS, 0, 0, c->off);
		pos++;
		if (c->mask != 0xffffffffu) {
			emit(b, BPF_ALU | BPF_AND | BPF_K, 0, 0, c->mask);
			pos++;
		}
		for (int v = 0; v < c->nvals; v++, pos++) {
			uint8_t jt = (uint8_t)(next - pos - 1);
			uint8_t jf = v + 1 < c->nvals ? 0 : (uint8_t)(fail - pos - 1);
			emit(b, BPF_JMP | BPF_JEQ | BPF_K, jt, jf, c->vals[v]);
		}
	}
	emit(b, BPF_RET | BPF_K, 0, 0, RET_ALLOW);
	emit(b, BPF_RET | BPF_K, 0, 0, ret_fail);
	b->rules++;
}

#define C1(o, m, v) { (o), (m), { (v) }, 1 }
#define FULL 0xffffffffu

/* What pthread_create passes (glibc 2.36 sysdeps/unix/sysv/linux/
 * createthread.c): VM|FS|FILES|SYSVSEM|SIGHAND|THREAD|SETTLS|PARENT_SETTID|
 * CHILD_CLEARTID, exit signal 0. Required: the flags that make the child a
 * thread of this process, never a new process. */
#define THREAD_REQUIRED (CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | \
	CLONE_THREAD | CLONE_SYSVSEM)
#define THREAD_ALLOWED (THREAD_REQUIRED | CLONE_SETTLS | CLONE_PARENT_SETTID | \
	CLONE_CHILD_CLEARTID | CLONE_DETACHED)

int pol_seccomp_build(const pol_role_def *d, int self_pid,
                      struct sock_filter *f, size_t cap, int *nrules)
{
	bpf_buf b = { f, 0, cap, 0, 0 };

	emit(&b, BPF_LD | BPF_W | BPF_ABS, 0, 0, offsetof(struct seccomp_data, arch));
	emit(&b, BPF_JMP | BPF_JEQ | BPF_K, 1, 0, POL_AUDIT_ARCH);
	emit(&b, BPF_RET | BPF_K, 0, 0, RET_KILL);
	if (g_learn) {
		emit(&b, BPF_LD | BPF_W | BPF_ABS, 0, 0, offsetof(struct seccomp_data, instruction_pointer));
		emit(&b, BPF_JMP | BPF_JEQ | BPF_K, 0, 3, (uint32_t)g_learn_ip);
		emit(&b, BPF_LD | BPF_W | BPF_ABS, 0, 0, offsetof(struct seccomp_data, instruction_pointer) + 4);
		emit(&b, BPF_JMP | BPF_JEQ | BPF_K, 0, 1, (uint32_t)(g_learn_ip >> 32));
		emit(&b, BPF_RET | BPF_K, 0, 0, RET_ALLOW);
	}
	emit(&b, BPF_LD | BPF_W | BPF_ABS, 0, 0, offsetof(struct seccomp_data, nr));
#ifdef POL_X32_BIT
	emit(&b, BPF_JMP | BPF_JGE | BPF_K, 0, 1, POL_X32_BIT);
	emit(&b, BPF_RET | BPF_K, 0, 0, RET_KILL);
#endif

	/* I/O on fds the process already holds. */
	static const long io[] = {
		SYS_read, SYS_write, SYS_readv, SYS_writev, SYS_pread64, SYS_lseek,
		SYS_close, SYS_recvmsg, SYS_sendmsg, SYS_recvfrom, SYS_sendto,
		SYS_shutdown, SYS_fstat,
#ifdef SYS_poll
		SYS_poll,
#endif
		SYS_ppoll,
	};
	/* Memory, signals to itself, time, randomness, identity reads, exit. */
	static const long core[] = {
		SYS_munmap, SYS_mremap, SYS_madvise, SYS_brk,
		SYS_rt_sigaction, SYS_rt_sigprocmask, SYS_rt_sigreturn, SYS_sigaltstack,
		SYS_sched_yield, SYS_sched_getaffinity, SYS_getpid, SYS_gettid,
		SYS_getuid, SYS_geteuid, SYS_getgid, SYS_getegid,
		SYS_clock_gettime, SYS_clock_getres, SYS_gettimeofday,
		SYS_nanosleep, SYS_clock_nanosleep, SYS_futex, SYS_set_robust_list,
		SYS_rseq, SYS_set_tid_address, SYS_getrandom, SYS_sysinfo,
		SYS_getrlimit, SYS_restart_syscall, SYS_exit, SYS_exit_group,
	};
	for (size_t i = 0; i < sizeof io / sizeof io[0]; i++)
		rule(&b, io[i], RET_ALLOW);
	for (size_t i = 0; i < sizeof core / sizeof core[0]; i++)
		rule(&b, core[i], RET_ALLOW);

	/* Never executable memory after start-up. */
	uint32_t exec_fail = d->exec_map_kills ? RET_KILL : RET_ERRNO(EPERM);
	cond noexec = C1(ARG_LO(2), PROT_EXEC, 0);
	rule_if(&b, SYS_mmap, &noexec, 1, exec_fail);
	rule_if(&b, SYS_mprotect, &noexec, 1, exec_fail);
	rule(&b, SYS_pkey_mprotect, RET_KILL);

	/* fstat through newfstatat (glibc ≥ 2.33 fstat is fstatat(fd, "",
	 * AT_EMPTY_PATH)). The path is a pointer a filter cannot read, so the
	 * worker's stat of a path is only refused by its empty root (policy.c);
	 * the fetcher's resolver stats /etc files by path (glibc's change
	 * detection for resolv.conf and nsswitch.conf), so it may. */
	if (d->opens_files) {
		rule(&b, SYS_newfstatat, RET_ALLOW);
	} else {
		cond empty = C1(ARG_LO(3), AT_EMPTY_PATH, AT_EMPTY_PATH);
		rule_if(&b, SYS_newfstatat, &empty, 1, RET_ERRNO(EACCES));
	}

	/* Signals only to its own threads: tgkill(self, tid, sig) (raise,
	 * abort, pthread_kill). kill() has no rule: it kills. */
	cond self = C1(ARG_LO(0), FULL, (uint32_t)self_pid);
	rule_if(&b, SYS_tgkill, &self, 1, RET_KILL);

	/* prctl: thread names only. */
	cond pr = { ARG_LO(0), FULL, { PR_SET_NAME, PR_GET_NAME }, 2 };
	rule_if(&b, SYS_prctl, &pr, 1, RET_ERRNO(EPERM));
	/* fcntl: read status and seals; set CLOEXEC/NONBLOCK. No dup, no locks. */
	cond fc = { ARG_LO(1), FULL, { F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_GET_SEALS }, 5 };
	rule_if(&b, SYS_fcntl, &fc, 1, RET_ERRNO(EPERM));
	/* prlimit64: read own limits only (pid 0, new_limit NULL). */
	cond pl[] = { C1(ARG_LO(0), FULL, 0), C1(ARG_LO(2), FULL, 0), C1(ARG_HI(2), FULL, 0) };
	rule_if(&b, SYS_prlimit64, pl, 3, RET_ERRNO(EPERM));

	if (d->gpu) {
		/* The NVIDIA driver talks to its device nodes by ioctl: the
		 * resource manager's escapes on /dev/nvidiactl and /dev/nvidiaN
		 * (type 'F', NV_IOCTL_MAGIC), and the UVM driver's on
		 * /dev/nvidia-uvm (plain numbers below 0x100, and
		 * UVM_INITIALIZE/DEINITIALIZE 0x30000001/2). Everything else
		 * (terminal ioctls, TIOCSTI) still fails with ENOTTY. The fd is
		 * not checked: the worker holds no terminal it could reach
		 * with these numbers. */
		emit(&b, BPF_JMP | BPF_JEQ | BPF_K, 0, 8, SYS_ioctl);
		emit(&b, BPF_LD | BPF_W | BPF_ABS, 0, 0, ARG_LO(1));
		emit(&b, BPF_JMP | BPF_JGE | BPF_K, 0, 5, 0x100);       /* < 0x100: allow */
		emit(&b, BPF_JMP | BPF_JEQ | BPF_K, 4, 0, 0x30000001u);
		emit(&b, BPF_JMP | BPF_JEQ | BPF_K, 3, 0, 0x30000002u);
		emit(&b, BPF_ALU | BPF_AND | BPF_K, 0, 0, 0xff00);
		emit(&b, BPF_JMP | BPF_JEQ | BPF_K, 1, 0, 0x4600);      /* 'F' << 8 */
		emit(&b, BPF_RET | BPF_K, 0, 0, RET_ERRNO(ENOTTY));
		emit(&b, BPF_RET | BPF_K, 0, 0, RET_ALLOW);
		emit(&b, BPF_LD | BPF_W | BPF_ABS, 0, 0, offsetof(struct seccomp_data, nr));
		b.rules++;
	} else {
		rule(&b, SYS_ioctl, RET_ERRNO(ENOTTY));
	}
	rule(&b, SYS_clone3, RET_ERRNO(ENOSYS));
	if (d->threads) {
		cond cl[] = { C1(ARG_LO(0), ~(uint32_t)THREAD_ALLOWED, 0),
		              C1(ARG_LO(0), THREAD_REQUIRED, THREAD_REQUIRED) };
		rule_if(&b, SYS_clone, cl, 2, RET_KILL);
	}

	if (d->opens_files) {
		/* Read-only opens; Landlock decides which paths. O_PATH too is
		 * refused: Landlock does not check O_PATH opens. */
		cond ro = C1(ARG_LO(2), O_WRONLY | O_RDWR | O_CREAT | O_TRUNC |
		             O_APPEND | __O_TMPFILE | O_PATH, 0);
		rule_if(&b, SYS_openat, &ro, 1, RET_ERRNO(EACCES));
	} else {
		rule(&b, SYS_openat, RET_ERRNO(EACCES));
	}
#ifdef SYS_open
	rule(&b, SYS_open, RET_ERRNO(EACCES));
#endif

	if (d->writes_fds) {
		static const long wr[] = { SYS_pwrite64, SYS_pwritev, SYS_ftruncate,
		                           SYS_fsync, SYS_fdatasync, SYS_fallocate };
		for (size_t i = 0; i < sizeof wr / sizeof wr[0]; i++)
			rule(&b, wr[i], RET_ALLOW);
	}

	if (d->net_client) {
		/* IPv4/IPv6 stream (TCP) and datagram (UDP: DNS) sockets only. */
		cond so[] = { { ARG_LO(0), FULL, { AF_INET, AF_INET6 }, 2 },
		              { ARG_LO(1), 0xf /* SOCK_TYPE_MASK */,
		                { SOCK_STREAM, SOCK_DGRAM }, 2 } };
		rule_if(&b, SYS_socket, so, 2, RET_ERRNO(EAFNOSUPPORT));
		static const long net[] = { SYS_connect, SYS_getsockopt, SYS_setsockopt,
			SYS_getsockname, SYS_getpeername, SYS_sendmmsg, SYS_recvmmsg,
			SYS_uname /* res_init: gethostname for the default domain */ };
		for (size_t i = 0; i < sizeof net / sizeof net[0]; i++)
			rule(&b, net[i], RET_ALLOW);
	}

	emit(&b, BPF_RET | BPF_K, 0, 0, RET_KILL);
	if (b.overflow)
		return -1;
	if (nrules)
		*nrules = b.rules;
	return (int)b.n;
}

/* Installs the role's filter on every thread (TSYNC). NO_NEW_PRIVS MUST be
 * set already. */
int pol_seccomp_apply(const pol_role_def *d, policy_report *rep,
                      char *err, size_t errlen)
{
	struct sock_filter f[512];
	int nrules = 0;
	int n = pol_seccomp_build(d, (int)getpid(), f, sizeof f / sizeof f[0], &nrules);
	if (n < 0) {
		snprintf(err, errlen, "seccomp: filter larger than %zu instructions",
		         sizeof f / sizeof f[0]);
		return -1;
	}
	uint32_t act = SECCOMP_RET_KILL_PROCESS;
	if (syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &act) != 0) {
		snprintf(err, errlen, "seccomp: kernel lacks SECCOMP_RET_KILL_PROCESS (%s)",
		         strerror(errno));
		pol_note(rep, POLICY_L_SECCOMP, "%s", strerror(errno));
		return errno == EINVAL || errno == ENOSYS ? 0 : -1;
	}
	struct sock_fprog prog = { (unsigned short)n, f };
	long r = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
	                 SECCOMP_FILTER_FLAG_TSYNC, &prog);
	if (r != 0) {
		if (r > 0)
			snprintf(err, errlen, "seccomp: thread %ld could not be synchronised", r);
		else
			snprintf(err, errlen, "seccomp: %s", strerror(errno));
		return -1;
	}
	rep->seccomp = 1;
	rep->seccomp_rules = nrules;
	pol_note(rep, POLICY_L_SECCOMP, "kill-process allowlist, %d syscall rules, "
	         "%d BPF instructions, all threads (TSYNC)", nrules, n);
	return 0;
}

/* ---- learn mode (measurement only; policy.h) ---- */

#if defined(__x86_64__)
#include <signal.h>
#include <stdatomic.h>
#include <ucontext.h>

/* syscall(nr, a0..a5) through the one instruction the learn filter allows
 * (its address + 2, the instruction pointer seccomp sees, is
 * pol_learn_ret). */
long pol_learn_gadget(long nr, long a0, long a1, long a2, long a3, long a4, long a5);
extern char pol_learn_ret[];
__asm__(".text\n.globl pol_learn_gadget\n.type pol_learn_gadget,@function\npol_learn_gadget:\n"
	"\tmov %rdi,%rax\n\tmov %rsi,%rdi\n\tmov %rdx,%rsi\n\tmov %rcx,%rdx\n\tmov %r8,%r10\n"
	"\tmov %r9,%r8\n\tmov 8(%rsp),%r9\n\tsyscall\n.globl pol_learn_ret\npol_learn_ret:\n\tret\n");

typedef struct {
	long nr, a, b;
	atomic_long count;
	char path[56];
} learn_rec;
static learn_rec g_rec[256];
static atomic_int g_nrec;

/* What identifies a call: the syscall and the argument that decides. */
static void learn_key(long nr, const long *a, long *k1, long *k2)
{
	*k1 = *k2 = 0;
	switch (nr) {
	case SYS_ioctl: *k1 = a[1]; break;
	case SYS_mmap: case SYS_mprotect: *k1 = a[2]; *k2 = nr == SYS_mmap ? a[3] : 0; break;
	case SYS_fcntl: case SYS_prctl: *k1 = nr == SYS_prctl ? a[0] : a[1]; break;
	case SYS_openat: *k1 = a[2]; break;
	case SYS_clone: case SYS_socket: *k1 = a[0]; break;
	default: break;
	}
}

static void learn_sigsys(int sig, siginfo_t *si, void *ucv)
{
	(void)sig;
	ucontext_t *uc = ucv;
	greg_t *g = uc->uc_mcontext.gregs;
	long nr = si->si_syscall;
	long a[6] = { g[REG_RDI], g[REG_RSI], g[REG_RDX], g[REG_R10], g[REG_R8], g[REG_R9] };
	long k1, k2;
	learn_key(nr, a, &k1, &k2);
	int n = atomic_load(&g_nrec), i;
	for (i = 0; i < n && i < 256; i++)
		if (g_rec[i].nr == nr && g_rec[i].a == k1 && g_rec[i].b == k2)
			break;
	if (i >= n) {
		i = atomic_fetch_add(&g_nrec, 1);
		if (i < 256) {
			g_rec[i].nr = nr;
			g_rec[i].a = k1;
			g_rec[i].b = k2;
			if ((nr == SYS_openat || nr == SYS_newfstatat) && a[1]) {
				const char *p = (const char *)a[1];
				size_t j = 0;
				for (; j + 1 < sizeof g_rec[i].path && p[j]; j++)
					g_rec[i].path[j] = p[j];
				g_rec[i].path[j] = 0;
			}
		}
	}
	if (i < 256)
		atomic_fetch_add(&g_rec[i].count, 1);
	g[REG_RAX] = pol_learn_gadget(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}

int pol_seccomp_learn_apply(const pol_role_def *d, char *err, size_t errlen)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = learn_sigsys;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGSYS, &sa, NULL) != 0) {
		snprintf(err, errlen, "learn: sigaction: %s", strerror(errno));
		return -1;
	}
	struct sock_filter f[512];
	g_learn = 1;
	g_learn_ip = (uint64_t)(uintptr_t)pol_learn_ret;
	int n = pol_seccomp_build(d, (int)getpid(), f, sizeof f / sizeof f[0], NULL);
	g_learn = 0;
	if (n < 0) {
		snprintf(err, errlen, "learn: filter too large");
		return -1;
	}
	struct sock_fprog prog = { (unsigned short)n, f };
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0) {
		snprintf(err, errlen, "learn: seccomp: %s", strerror(errno));
		return -1;
	}
	return 0;
}

int pol_seccomp_learn_dump(char *buf, size_t len)
{
	size_t o = 0;
	int n = atomic_load(&g_nrec);
	if (!len)
		return -1;
	buf[0] = 0;
	for (int i = 0; i < n && i < 256 && o < len; i++) {
		int k = snprintf(buf + o, len - o, "learn: nr %ld arg 0x%lx 0x%lx x%ld %s\n", g_rec[i].nr,
				 (unsigned long)g_rec[i].a, (unsigned long)g_rec[i].b, (long)atomic_load(&g_rec[i].count),
				 g_rec[i].path);
		if (k < 0)
			break;
		o += (size_t)k;
	}
	return (int)(o < len ? o : len - 1);
}
#else
int pol_seccomp_learn_apply(const pol_role_def *d, char *err, size_t errlen)
{
	(void)d;
	snprintf(err, errlen, "learn mode: x86-64 only");
	return -1;
}

int pol_seccomp_learn_dump(char *buf, size_t len)
{
	if (len)
		buf[0] = 0;
	return 0;
}
#endif

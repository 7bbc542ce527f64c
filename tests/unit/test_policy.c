/* tests/unit/test_policy.c — the seccomp filters decide what the policy
 * says (each role's program run through a classic-BPF interpreter on
 * hand-made syscalls), Landlock rights are stripped by ABI, the report
 * formats one line per layer, and the options parse. The real kernel
 * enforcement is proven in tests/py/test_sandbox.py. */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "policy/pinternal.h"

static int fails;

#define CHECK(cond, ...) do { if (!(cond)) { printf("FAIL %s:%d: ", __FILE__, __LINE__); \
	printf(__VA_ARGS__); printf("\n"); fails++; } } while (0)

/* Classic BPF over struct seccomp_data, the subset the builder emits. Any
 * other opcode, or a jump out of the program, fails the test. */
static uint32_t run_bpf(const struct sock_filter *f, int n, const struct seccomp_data *d)
{
	uint32_t a = 0;
	for (int pc = 0; pc < n; pc++) {
		const struct sock_filter *i = &f[pc];
		switch (i->code) {
		case BPF_LD | BPF_W | BPF_ABS:
			if (i->k + 4 > sizeof *d || i->k % 4) {
				printf("FAIL bpf: load at %u\n", i->k);
				fails++;
				return 0;
			}
			memcpy(&a, (const char *)d + i->k, 4);
			break;
		case BPF_ALU | BPF_AND | BPF_K: a &= i->k; break;
		case BPF_JMP | BPF_JEQ | BPF_K: pc += a == i->k ? i->jt : i->jf; break;
		case BPF_JMP | BPF_JGE | BPF_K: pc += a >= i->k ? i->jt : i->jf; break;
		case BPF_RET | BPF_K: return i->k;
		default:
			printf("FAIL bpf: opcode %#x at %d\n", i->code, pc);
			fails++;
			return 0;
		}
	}
	printf("FAIL bpf: fell off the end\n");
	fails++;
	return 0;
}

static struct sock_filter prog[POLICY_ROLE_COUNT][512];
static int plen[POLICY_ROLE_COUNT];

static uint32_t decide(policy_role r, long nr, uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3)
{
	struct seccomp_data d;
	memset(&d, 0, sizeof d);
	d.nr = (int)nr;
	d.arch = AUDIT_ARCH_X86_64;
	d.args[0] = a0;
	d.args[1] = a1;
	d.args[2] = a2;
	d.args[3] = a3;
	return run_bpf(prog[r], plen[r], &d);
}

#define ALLOW SECCOMP_RET_ALLOW
#define KILL SECCOMP_RET_KILL_PROCESS
#define ERR(e) (SECCOMP_RET_ERRNO | (e))
#define PTHREAD_FLAGS (CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SYSVSEM | CLONE_SIGHAND | \
	CLONE_THREAD | CLONE_SETTLS | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID)

static void test_filters(void)
{
	const int self = 1234;
	for (int r = 0; r < POLICY_ROLE_COUNT; r++) {
		int rules = 0;
		plen[r] = pol_seccomp_build(pol_role((policy_role)r), self, prog[r], 512, &rules);
		CHECK(plen[r] > 0 && plen[r] < 512, "role %d: length %d", r, plen[r]);
		CHECK(rules > 40, "role %d: %d rules", r, rules);
		/* every jump lands inside the program */
		for (int pc = 0; pc < plen[r]; pc++) {
			const struct sock_filter *i = &prog[r][pc];
			if (BPF_CLASS(i->code) == BPF_JMP)
				CHECK(pc + 1 + i->jt < plen[r] && pc + 1 + i->jf < plen[r],
				      "role %d: jump out at %d", r, pc);
		}
		CHECK(prog[r][plen[r] - 1].code == (BPF_RET | BPF_K) &&
		      prog[r][plen[r] - 1].k == KILL, "role %d: default is not kill", r);
		int small = pol_seccomp_build(pol_role((policy_role)r), self, prog[r], 8, NULL);
		CHECK(small == -1, "role %d: overflow not reported (%d)", r, small);
		plen[r] = pol_seccomp_build(pol_role((policy_role)r), self, prog[r], 512, NULL);
	}
	const policy_role W = POLICY_WORKER, I = POLICY_IMPORTER, F = POLICY_FETCHER;
	for (int r = 0; r < POLICY_ROLE_COUNT; r++) {
		policy_role p = (policy_role)r;
		/* common */
		CHECK(decide(p, SYS_read, 3, 0, 0, 0) == ALLOW, "%d read", r);
		CHECK(decide(p, SYS_recvmsg, 3, 0, 0, 0) == ALLOW, "%d recvmsg", r);
		CHECK(decide(p, SYS_futex, 0, 0, 0, 0) == ALLOW, "%d futex", r);
		CHECK(decide(p, SYS_execve, 0, 0, 0, 0) == KILL, "%d execve", r);
		CHECK(decide(p, SYS_execveat, 0, 0, 0, 0) == KILL, "%d execveat", r);
		CHECK(decide(p, SYS_ptrace, 0, 0, 0, 0) == KILL, "%d ptrace", r);
		CHECK(decide(p, SYS_kill, 1, 0, 0, 0) == KILL, "%d kill", r);
		CHECK(decide(p, SYS_fork, 0, 0, 0, 0) == KILL, "%d fork", r);
		CHECK(decide(p, SYS_clone, SIGCHLD, 0, 0, 0) == KILL, "%d clone as fork", r);
		CHECK(decide(p, SYS_clone3, 0, 0, 0, 0) == ERR(ENOSYS), "%d clone3", r);
		CHECK(decide(p, SYS_bind, 0, 0, 0, 0) == KILL, "%d bind", r);
		CHECK(decide(p, SYS_setuid, 0, 0, 0, 0) == KILL, "%d setuid", r);
		CHECK(decide(p, SYS_unshare, 0, 0, 0, 0) == KILL, "%d unshare", r);
		CHECK(decide(p, SYS_mount, 0, 0, 0, 0) == KILL, "%d mount", r);
		CHECK(decide(p, SYS_seccomp, 0, 0, 0, 0) == KILL, "%d seccomp", r);
		CHECK(decide(p, SYS_ioctl, 2, 0x5412 /* TIOCSTI */, 0, 0) == ERR(ENOTTY), "%d ioctl", r);
		CHECK(decide(p, SYS_tgkill, self, 1, SIGABRT, 0) == ALLOW, "%d tgkill self", r);
		CHECK(decide(p, SYS_tgkill, 1, 1, SIGKILL, 0) == KILL, "%d tgkill other", r);
		CHECK(decide(p, SYS_prctl, PR_SET_NAME, 0, 0, 0) == ALLOW, "%d PR_SET_NAME", r);
		CHECK(decide(p, SYS_prctl, PR_SET_DUMPABLE, 1, 0, 0) == ERR(EPERM), "%d prctl", r);
		CHECK(decide(p, SYS_fcntl, 3, F_GETFL, 0, 0) == ALLOW, "%d F_GETFL", r);
		CHECK(decide(p, SYS_fcntl, 3, 1034 /* F_GET_SEALS */, 0, 0) == ALLOW, "%d seals", r);
		CHECK(decide(p, SYS_fcntl, 3, F_DUPFD, 0, 0) == ERR(EPERM), "%d F_DUPFD", r);
		CHECK(decide(p, SYS_prlimit64, 0, RLIMIT_NOFILE, 0, 0x7000) == ALLOW, "%d getrlimit", r);
		CHECK(decide(p, SYS_prlimit64, 0, RLIMIT_NOFILE, 0x7000, 0) == ERR(EPERM), "%d setrlimit", r);
		CHECK(decide(p, SYS_prlimit64, 0, 0, 1ull << 32, 0) == ERR(EPERM), "%d high pointer", r);
		CHECK(decide(p, SYS_mmap, 0, 4096, PROT_READ | PROT_WRITE, 0) == ALLOW, "%d mmap rw", r);
		CHECK(decide(p, SYS_open, 0, 0, 0, 0) == ERR(EACCES), "%d open", r);
		/* a different architecture or the x32 ABI: killed */
		struct seccomp_data d;
		memset(&d, 0, sizeof d);
		d.nr = SYS_read;
		d.arch = AUDIT_ARCH_I386;
		CHECK(run_bpf(prog[r], plen[r], &d) == KILL, "%d i386", r);
		d.arch = AUDIT_ARCH_X86_64;
		d.nr = 0x40000000 | SYS_read;
		CHECK(run_bpf(prog[r], plen[r], &d) == KILL, "%d x32", r);
	}
	/* worker and importer */
	for (policy_role p = W; p <= I; p++) {
		CHECK(decide(p, SYS_clone, PTHREAD_FLAGS, 0, 0, 0) == ALLOW, "%d pthread clone", p);
		CHECK(decide(p, SYS_clone, PTHREAD_FLAGS | CLONE_NEWUSER, 0, 0, 0) == KILL, "%d clone ns", p);
		CHECK(decide(p, SYS_clone, PTHREAD_FLAGS & ~CLONE_THREAD, 0, 0, 0) == KILL, "%d clone proc", p);
		CHECK(decide(p, SYS_clone, CLONE_VM | CLONE_VFORK | SIGCHLD, 0, 0, 0) == KILL, "%d vfork", p);
		CHECK(decide(p, SYS_mmap, 0, 4096, PROT_READ | PROT_EXEC, 0) == KILL, "%d mmap exec", p);
		CHECK(decide(p, SYS_mprotect, 0, 4096, PROT_EXEC, 0) == KILL, "%d mprotect exec", p);
		CHECK(decide(p, SYS_pkey_mprotect, 0, 4096, PROT_READ, 0) == KILL, "%d pkey_mprotect", p);
		CHECK(decide(p, SYS_openat, AT_FDCWD, 0, O_RDONLY, 0) == ERR(EACCES), "%d openat", p);
		CHECK(decide(p, SYS_newfstatat, 3, 0, 0, AT_EMPTY_PATH) == ALLOW, "%d fstat", p);
		CHECK(decide(p, SYS_newfstatat, AT_FDCWD, 0, 0, 0) == ERR(EACCES), "%d stat path", p);
		CHECK(decide(p, SYS_socket, AF_INET, SOCK_STREAM, 0, 0) == KILL, "%d socket", p);
		CHECK(decide(p, SYS_connect, 3, 0, 0, 0) == KILL, "%d connect", p);
	}
	/* the GPU worker: the worker's rules, plus the NVIDIA driver's ioctls */
	{
		const policy_role G = POLICY_GPU_WORKER;
		CHECK(decide(G, SYS_clone, PTHREAD_FLAGS, 0, 0, 0) == ALLOW, "gpu pthread clone");
		CHECK(decide(G, SYS_clone, PTHREAD_FLAGS & ~CLONE_THREAD, 0, 0, 0) == KILL, "gpu clone proc");
		CHECK(decide(G, SYS_mmap, 0, 4096, PROT_READ | PROT_EXEC, 0) == KILL, "gpu mmap exec");
		CHECK(decide(G, SYS_openat, AT_FDCWD, 0, O_RDONLY, 0) == ERR(EACCES), "gpu openat");
		CHECK(decide(G, SYS_socket, AF_INET, SOCK_STREAM, 0, 0) == KILL, "gpu socket");
		CHECK(decide(G, SYS_ioctl, 5, 0xc020462a /* NV_ESC_RM_CONTROL */, 0, 0) == ALLOW, "gpu nv ioctl");
		CHECK(decide(G, SYS_ioctl, 5, 0x30000001 /* UVM_INITIALIZE */, 0, 0) == ALLOW, "gpu uvm init");
		CHECK(decide(G, SYS_ioctl, 5, 0x21, 0, 0) == ALLOW, "gpu uvm ioctl");
		CHECK(decide(G, SYS_ioctl, 2, 0x5401 /* TCGETS */, 0, 0) == ERR(ENOTTY), "gpu TCGETS");
		CHECK(decide(W, SYS_ioctl, 5, 0xc020462a, 0, 0) == ERR(ENOTTY), "worker nv ioctl");
	}
	CHECK(decide(W, SYS_pwrite64, 5, 0, 1, 0) == KILL, "worker pwrite64");
	CHECK(decide(W, SYS_ftruncate, 5, 0, 0, 0) == KILL, "worker ftruncate");
	CHECK(decide(I, SYS_pwrite64, 5, 0, 1, 0) == ALLOW, "importer pwrite64");
	CHECK(decide(I, SYS_ftruncate, 5, 0, 0, 0) == ALLOW, "importer ftruncate");
	/* fetcher */
	CHECK(decide(F, SYS_clone, PTHREAD_FLAGS, 0, 0, 0) == KILL, "fetcher: no threads");
	CHECK(decide(F, SYS_socket, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0, 0) == ALLOW, "tcp4");
	CHECK(decide(F, SYS_socket, AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK, 0, 0) == ALLOW, "udp6");
	CHECK(decide(F, SYS_socket, AF_INET, SOCK_RAW, 0, 0) == ERR(EAFNOSUPPORT), "raw");
	CHECK(decide(F, SYS_socket, AF_UNIX, SOCK_STREAM, 0, 0) == ERR(EAFNOSUPPORT), "unix");
	CHECK(decide(F, SYS_socket, AF_NETLINK, SOCK_RAW, 0, 0) == ERR(EAFNOSUPPORT), "netlink");
	CHECK(decide(F, SYS_socket, AF_PACKET, SOCK_DGRAM, 0, 0) == ERR(EAFNOSUPPORT), "packet");
	CHECK(decide(F, SYS_connect, 3, 0, 0, 0) == ALLOW, "connect");
	CHECK(decide(F, SYS_openat, AT_FDCWD, 0, O_RDONLY | O_CLOEXEC, 0) == ALLOW, "openat ro");
	CHECK(decide(F, SYS_openat, AT_FDCWD, 0, O_WRONLY, 0) == ERR(EACCES), "openat wr");
	CHECK(decide(F, SYS_openat, AT_FDCWD, 0, O_RDONLY | O_CREAT, 0) == ERR(EACCES), "openat creat");
	CHECK(decide(F, SYS_openat, AT_FDCWD, 0, O_TMPFILE | O_RDWR, 0) == ERR(EACCES), "tmpfile");
	CHECK(decide(F, SYS_openat, AT_FDCWD, 0, O_PATH, 0) == ERR(EACCES), "O_PATH");
	CHECK(decide(F, SYS_mmap, 0, 4096, PROT_EXEC, 0) == ERR(EPERM), "fetcher mmap exec");
	CHECK(decide(F, SYS_pwrite64, 5, 0, 1, 0) == ALLOW, "fetcher pwrite64");
}

static void test_landlock_rights(void)
{
	CHECK(pol_landlock_fs_rights(0) == 0, "ABI 0");
	CHECK(pol_landlock_fs_rights(1) == 0x1fff, "ABI 1: %#llx",
	      (unsigned long long)pol_landlock_fs_rights(1));
	CHECK(pol_landlock_fs_rights(2) == 0x3fff, "ABI 2");
	CHECK(pol_landlock_fs_rights(3) == 0x7fff, "ABI 3");
	CHECK(pol_landlock_fs_rights(4) == 0x7fff, "ABI 4 adds no fs right");
	CHECK(pol_landlock_fs_rights(5) == 0xffff, "ABI 5");
	CHECK(pol_landlock_fs_rights(9) == 0xffff, "ABI 9: only rights we know");
}

static void test_roles(void)
{
	const pol_role_def *w = pol_role(POLICY_WORKER), *f = pol_role(POLICY_FETCHER);
	CHECK(w && f && !pol_role(POLICY_ROLE_COUNT), "role table");
	CHECK(w->netns && !w->pidns && w->threads && !w->read_paths && !w->ntcp_connect, "worker");
	CHECK(!f->netns && f->pidns && !f->threads, "fetcher: network, single-threaded");
	CHECK(f->ntcp_connect == 2 && f->tcp_connect[0] == 443 && f->tcp_connect[1] == 80,
	      "fetcher ports");
	CHECK(w->nofile >= 256 + 8, "worker: room for 256 shards");
	CHECK(!strcmp(policy_role_name(POLICY_IMPORTER), "importer"), "name");
}

static void test_report_and_opts(void)
{
	policy_report r;
	memset(&r, 0, sizeof r);
	r.seccomp = 1;
	pol_note(&r, POLICY_L_SECCOMP, "rules %d", 7);
	char buf[4096];
	int n = policy_report_format(&r, buf, sizeof buf);
	CHECK(n > 0 && (size_t)n == strlen(buf), "format length");
	int lines = 0;
	for (char *p = buf; *p; p++)
		lines += *p == '\n';
	CHECK(lines == POLICY_LAYER_COUNT, "%d lines", lines);
	CHECK(strstr(buf, "seccomp        on  rules 7\n") != NULL, "seccomp line: %s", buf);
	CHECK(strstr(buf, "userns         off") != NULL, "userns line");
	CHECK(policy_report_format(&r, buf, 40) == -1, "small buffer");

	char *argv[] = { "mlxr-fetcher", "--x", "--no-sandbox", "--ca-bundle", "/ca.pem",
	                 "--allow-port", "8443", NULL };
	policy_opts o;
	policy_opts_from_args(&o, 7, argv);
	CHECK(o.no_sandbox == 1 && o.ca_bundle && !strcmp(o.ca_bundle, "/ca.pem") &&
	      o.extra_port == 8443 && !o.skip_seccomp, "opts");
	char *argv2[] = { "w", "--allow-port", "70000", NULL };
	policy_opts_from_args(&o, 3, argv2);
	CHECK(o.extra_port == 0 && !o.no_sandbox, "bad port ignored");
}

int main(void)
{
	test_filters();
	test_landlock_rights();
	test_roles();
	test_report_and_opts();
	if (fails) {
		printf("test_policy: %d FAILED\n", fails);
		return 1;
	}
	printf("test_policy: ok\n");
	return 0;
}

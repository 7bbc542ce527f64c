/* policy/policy.h — the sandbox: one declarative policy per role, applied by
 * the child itself at start-up, before it reads a byte of untrusted input.
 *
 * Order (fixed; each step is what makes the next one possible or safe):
 *  1. namespaces: user (unprivileged start), network (worker/importer: an
 *     empty one), mount (made private; worker/importer: an empty read-only
 *     tmpfs root), IPC, PID (fetcher only, see below);
 *  2. identity: started as root → setgroups(0), gid/uid 65534 (nobody), then
 *     a user namespace owned by nobody; started unprivileged → the user
 *     namespace of step 1 maps the caller's own uid; every capability dropped;
 *  3. PR_SET_PDEATHSIG(SIGKILL) (after the credential change, which clears
 *     it), PR_SET_DUMPABLE 0, PR_SET_NO_NEW_PRIVS, rlimits (no core, file size
 *     and open files fit to the role; never RLIMIT_NPROC: seccomp stops new
 *     processes);
 *  4. Landlock, best effort by ABI (rights the kernel does not know are
 *     stripped); before ABI 8 it binds only the calling thread and its future
 *     threads, so it MUST run before any thread exists (checked);
 *  5. seccomp-BPF allowlist, kill-process default, installed last with
 *     SECCOMP_FILTER_FLAG_TSYNC so it covers every thread.
 * A kernel without a layer gets every layer it has; the report says which.
 *
 * PID namespace: the kernel refuses CLONE_THREAD after unshare(CLONE_NEWPID)
 * (kernel/fork.c), so the worker and importer, which start a thread pool
 * after policy_apply, get none; the single-threaded fetcher gets one for any
 * child it could create (seccomp lets it create none).
 */
#ifndef MLXR_POLICY_H
#define MLXR_POLICY_H

#include <stddef.h>

typedef enum {
	POLICY_WORKER,   /* runs models: fds in, tokens out; no fs, no net */
	POLICY_IMPORTER, /* worker + writes through fds the broker opened */
	POLICY_FETCHER,  /* network (TCP to policy ports, DNS) + CA bundle */
	POLICY_GPU_WORKER, /* worker on a CUDA device: see policy_seccomp_late */
	POLICY_ROLE_COUNT
} policy_role;

/* Layers, in the order of policy_report_format's lines. */
typedef enum {
	POLICY_L_USERNS, POLICY_L_NETNS, POLICY_L_MOUNTNS, POLICY_L_IPCNS,
	POLICY_L_PIDNS, POLICY_L_UID, POLICY_L_PDEATHSIG, POLICY_L_NNP,
	POLICY_L_RLIMITS, POLICY_L_LANDLOCK_FS, POLICY_L_LANDLOCK_NET,
	POLICY_L_LANDLOCK_SCOPE, POLICY_L_SECCOMP,
	POLICY_LAYER_COUNT
} policy_layer;

/* Command-line switch the broker passes to a child (debugging only). */
#define POLICY_ARG_NO_SANDBOX "--no-sandbox"

typedef struct {
	int no_sandbox;        /* 1: apply nothing, warn on stderr (debugging) */
	const char *ca_bundle; /* fetcher: CA file readable after lockdown; NULL:
	                          $SSL_CERT_FILE, else the Debian bundle */
	int threads_ok;        /* 1: threads already exist (CUDA init); Landlock
	                          before ABI 8 then covers this thread only and
	                          the report says so. 0: threads → error */
	unsigned short extra_port; /* fetcher: one more TCP connect port (an
	                          HF_ENDPOINT on another port); 0: none */
	int landlock_abi_max;  /* self-test/probe only (--landlock-abi N): act as
	                          if the kernel stopped at ABI N, to prove the
	                          fallbacks on a new kernel. 0: no clamp. */
	int skip_seccomp;      /* self-test only (--layers): prove the layers
	                          under seccomp on their own. The broker MUST NOT
	                          set it. */
} policy_opts;

typedef struct {
	policy_role role;
	int no_sandbox;
	int landlock_abi;   /* kernel's Landlock ABI, 0: none */
	/* 1 when the layer is active in this process, 0 when not. */
	int userns, netns, mountns, ipcns, pidns, uid_dropped, pdeathsig, nnp,
	    rlimits, landlock_fs, landlock_net, landlock_scope, seccomp;
	int seccomp_rules;  /* syscall rules in the filter */
	char note[POLICY_LAYER_COUNT][160]; /* detail, or why the layer is off */
} policy_report;

/* Fills *o from argv: --no-sandbox, --ca-bundle PATH, --allow-port N. Unknown arguments are
 * ignored (they belong to the caller). */
void policy_opts_from_args(policy_opts *o, int argc, char **argv);

/* Applies role's policy to the calling process. o may be NULL (defaults);
 * rep (may be NULL) receives what ended up active. Returns 0 when every
 * layer the kernel supports is active; -1 with err filled when a step the
 * kernel supports failed — the caller MUST then exit, never continue
 * unconfined. MUST be called before any thread is created (see threads_ok).
 * The fds the process holds stay usable; new opens are refused (fetcher: only
 * its CA bundle and resolver files, read-only). With o->no_sandbox it applies
 * nothing and writes one warning line to stderr — a debugging switch must
 * never be silent, whoever calls it. */
int policy_apply(policy_role role, const policy_opts *o, policy_report *rep,
                 char *err, size_t errlen);

/* One line per layer ("seccomp: on (...)") into buf (NUL-terminated).
 * Returns the length, or -1 when buf is too small. */
int policy_report_format(const policy_report *r, char *buf, size_t len);

const char *policy_role_name(policy_role role);

/* The GPU worker (POLICY_GPU_WORKER) locks down in two steps, because the
 * NVIDIA driver opens device files, reads libraries and /proc, /sys, and
 * starts threads in cuInit:
 *  1. policy_apply before cuInit, single-threaded: every layer but seccomp.
 *     No empty root (the driver opens files by path): Landlock alone
 *     decides the filesystem — read-only the library folders, /proc and
 *     /sys; read/write/ioctl the /dev/nvidia* nodes; write+truncate under
 *     /proc/self/task (the driver names its threads there; without it
 *     cuInit fails with error 304); nothing else. The driver's threads,
 *     created after this, inherit Landlock.
 *  2. policy_seccomp_late after device init and the weight upload: the
 *     worker's allowlist plus what the driver needs (policy/seccomp.c names
 *     each addition), installed with TSYNC on every thread.
 * policy_seccomp_late(POLICY_WORKER) is the CPU filter, for a GPU worker
 * that found no usable device and runs on the CPU. */
int policy_seccomp_late(policy_role role, policy_report *rep, char *err, size_t errlen);
/* Measurement only (tests/cuda/test_gpu_sandbox.c --learn; the worker
 * never calls it): role's filter with every refusal turned
 * into a trap whose handler records the call and performs it, so that one
 * run lists what the filter would refuse. report writes the list. */
int policy_seccomp_learn(policy_role role, char *err, size_t errlen);
int policy_seccomp_learn_report(char *buf, size_t len);

/* Hidden entry points, dispatched first in the worker's and fetcher's main
 * (argv[1] == "--self-test" / "--probe"). "--role importer" selects the
 * importer role in mlxr-worker. Both return the process exit status. */
int policy_selftest(policy_role role, int argc, char **argv);
/* Applies the policy, prints the report, exits 0 (1 when a layer failed). */
int policy_probe(policy_role role, int argc, char **argv);

#endif

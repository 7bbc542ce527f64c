/* policy/pinternal.h — what the policy's files share: the per-role policy
 * table (the declarative part) and the Landlock and seccomp layers. */
#ifndef MLXR_PINTERNAL_H
#define MLXR_PINTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <linux/filter.h>

#include "policy/policy.h"

#define POL_MAX_PORTS 4
#define POL_NOBODY 65534 /* uid/gid a root-started child drops to */

/* One role's policy. Everything policy_apply does differently per role is a
 * field here; the code that applies it is shared. */
typedef struct {
	const char *name;
	int netns;        /* own, empty network namespace */
	int pidns;        /* new PID namespace for children (single-threaded
	                     roles only: the kernel refuses CLONE_THREAD after it) */
	int empty_root;   /* pivot into an empty read-only tmpfs */
	int threads;      /* seccomp: clone with thread flags (a thread pool) */
	int writes_fds;   /* seccomp: pwrite64/ftruncate/fsync on received fds */
	int net_client;   /* seccomp: TCP/UDP client sockets (fetcher) */
	int opens_files;  /* seccomp: read-only openat; Landlock picks the paths */
	int exec_map_kills; /* PROT_EXEC: 1 kill the process, 0 EPERM */
	rlim_t nofile;    /* RLIMIT_NOFILE */
	rlim_t fsize;     /* RLIMIT_FSIZE (bytes one write may reach) */
	uint16_t tcp_connect[POL_MAX_PORTS]; /* Landlock: TCP connect ports */
	int ntcp_connect;
	const char *const *read_paths; /* Landlock: read-only files, NULL-ended */
	int gpu;          /* Landlock: the NVIDIA driver's paths; seccomp: its
	                     ioctls; seccomp deferred to policy_seccomp_late */
} pol_role_def;

const pol_role_def *pol_role(policy_role role);

/* Landlock (policy/landlock.c). Returns the kernel's ABI (0: none, <0 on
 * error querying). */
int pol_landlock_abi(void);
/* The fs rights an ABI handles (ABI 1..N; newer rights stripped). */
uint64_t pol_landlock_fs_rights(int abi);
int pol_landlock_apply(const pol_role_def *d, const char *ca_bundle,
                       int threads_exist, int abi_max, policy_report *rep,
                       char *err, size_t errlen);

/* seccomp (policy/seccomp.c). pol_seccomp_build writes the role's filter
 * into f (cap entries); returns the instruction count, or -1 when cap is too
 * small. *nrules gets the number of syscall rules. self_pid: the only tgid
 * tgkill may target. */
int pol_seccomp_build(const pol_role_def *d, int self_pid,
                      struct sock_filter *f, size_t cap, int *nrules);
int pol_seccomp_apply(const pol_role_def *d, policy_report *rep,
                      char *err, size_t errlen);
int pol_seccomp_learn_apply(const pol_role_def *d, char *err, size_t errlen);
int pol_seccomp_learn_dump(char *buf, size_t len);

void pol_note(policy_report *rep, policy_layer l, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif

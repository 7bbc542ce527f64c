/* policy/landlock.c — the Landlock layer, best effort by ABI version.
 *
 * Debian 12's kernel headers stop at ABI 2; the constants and structs up to
 * ABI 8 are defined here (include/uapi/linux/landlock.h, Linux 6.12+), with
 * our own names so they never collide with a newer system header. A right
 * the running kernel does not know is stripped from the ruleset (the kernel
 * rejects unknown bits with EINVAL); a layer the kernel lacks entirely is
 * reported off, never faked.
 *
 *   ABI 1  fs: EXECUTE..MAKE_SYM (bits 0-12)     ABI 5  fs: IOCTL_DEV
 *   ABI 2  fs: REFER                             ABI 6  scoped: abstract unix
 *   ABI 3  fs: TRUNCATE                                 sockets, signals
 *   ABI 4  net: TCP bind/connect by port         ABI 7  audit flags (unused)
 *   ABI 8  restrict_self TSYNC (all threads)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "policy/pinternal.h"

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

#define LL_CREATE_RULESET_VERSION (1u << 0)
#define LL_RULE_PATH_BENEATH 1
#define LL_RULE_NET_PORT 2
#define LL_RESTRICT_SELF_TSYNC (1u << 3) /* ABI 8 */

#define LL_FS_EXECUTE (1ull << 0)
#define LL_FS_WRITE_FILE (1ull << 1)
#define LL_FS_READ_FILE (1ull << 2)
#define LL_FS_READ_DIR (1ull << 3)
#define LL_FS_ABI1 ((1ull << 13) - 1) /* EXECUTE .. MAKE_SYM */
#define LL_FS_REFER (1ull << 13)      /* ABI 2 */
#define LL_FS_TRUNCATE (1ull << 14)   /* ABI 3 */
#define LL_FS_IOCTL_DEV (1ull << 15)  /* ABI 5 */

#define LL_NET_BIND_TCP (1ull << 0)    /* ABI 4 */
#define LL_NET_CONNECT_TCP (1ull << 1) /* ABI 4 */

#define LL_SCOPE_ABSTRACT_UNIX_SOCKET (1ull << 0) /* ABI 6 */
#define LL_SCOPE_SIGNAL (1ull << 1)               /* ABI 6 */

struct ll_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net; /* ABI 4 */
	uint64_t scoped;             /* ABI 6 */
};
struct ll_path_beneath_attr {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));
struct ll_net_port_attr {
	uint64_t allowed_access;
	uint64_t port;
};
_Static_assert(sizeof(struct ll_ruleset_attr) == 24, "landlock_ruleset_attr ABI 6");
_Static_assert(sizeof(struct ll_path_beneath_attr) == 12, "packed as the uapi struct");
_Static_assert(sizeof(struct ll_net_port_attr) == 16, "landlock_net_port_attr");

int pol_landlock_abi(void)
{
	long v = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
	if (v < 0)
		return (errno == ENOSYS || errno == EOPNOTSUPP) ? 0 : -errno;
	return (int)v;
}

uint64_t pol_landlock_fs_rights(int abi)
{
	if (abi < 1)
		return 0;
	uint64_t r = LL_FS_ABI1;
	if (abi >= 2)
		r |= LL_FS_REFER;
	if (abi >= 3)
		r |= LL_FS_TRUNCATE;
	if (abi >= 5)
		r |= LL_FS_IOCTL_DEV;
	return r;
}

/* Read-only access to one existing file; a missing file is skipped (it
 * cannot be opened anyway). Returns 1 added, 0 skipped, -1 error. */
static int add_read_file(int rfd, const char *path, char *err, size_t errlen)
{
	int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return 0;
	struct ll_path_beneath_attr pb = { LL_FS_READ_FILE, fd };
	long r = syscall(SYS_landlock_add_rule, rfd, LL_RULE_PATH_BENEATH, &pb, 0);
	int e = errno;
	close(fd);
	if (r != 0) {
		snprintf(err, errlen, "landlock: rule for %s: %s", path, strerror(e));
		return -1;
	}
	return 1;
}

/* One path-beneath rule: rights (restricted to what the ruleset handles,
 * and to file rights when path is not a folder). A missing path is
 * skipped. Returns 1 added, 0 skipped, -1 error. */
#define LL_FS_FILE_RIGHTS (LL_FS_EXECUTE | LL_FS_WRITE_FILE | LL_FS_READ_FILE | LL_FS_TRUNCATE | LL_FS_IOCTL_DEV)
static int add_path(int rfd, const char *path, uint64_t rights, uint64_t handled, char *err, size_t errlen)
{
	int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return 0;
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode))
		rights &= LL_FS_FILE_RIGHTS;
	struct ll_path_beneath_attr pb = { rights & handled, fd };
	long r = syscall(SYS_landlock_add_rule, rfd, LL_RULE_PATH_BENEATH, &pb, 0);
	int e = errno;
	close(fd);
	if (r != 0) {
		snprintf(err, errlen, "landlock: rule for %s: %s", path, strerror(e));
		return -1;
	}
	return 1;
}

/* The NVIDIA driver's paths (policy.h, POLICY_GPU_WORKER). Read: the
 * loader's cache and library folders (cudart dlopens libcuda.so.1, which
 * may load more of the driver's libraries), every folder of
 * LD_LIBRARY_PATH, and /proc, /sys (device, NUMA and process facts).
 * Read/write/ioctl: the device nodes. Write+truncate: /proc/self/task. */
static const char *const gpu_read[] = {
	"/etc/ld.so.cache", "/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/nvidia",
	"/usr/local/cuda", "/proc", "/sys", NULL,
};
static const char *const gpu_dev[] = {
	"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-caps",
	"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3", "/dev/nvidia4",
	"/dev/nvidia5", "/dev/nvidia6", "/dev/nvidia7", NULL,
};

static int add_gpu_paths(int rfd, uint64_t handled, int *n, char *err, size_t errlen)
{
	const uint64_t rd = LL_FS_READ_FILE | LL_FS_READ_DIR;
	int r;
	for (const char *const *p = gpu_read; *p; p++) {
		if ((r = add_path(rfd, *p, rd, handled, err, errlen)) < 0)
			return -1;
		*n += r;
	}
	const char *lp = getenv("LD_LIBRARY_PATH");
	while (lp && *lp) {
		char dir[512];
		size_t k = strcspn(lp, ":");
		if (k && k < sizeof dir && lp[0] == '/') {
			memcpy(dir, lp, k);
			dir[k] = 0;
			if ((r = add_path(rfd, dir, rd, handled, err, errlen)) < 0)
				return -1;
			*n += r;
		}
		lp += k + (lp[k] == ':');
	}
	for (const char *const *p = gpu_dev; *p; p++) {
		if ((r = add_path(rfd, *p, rd | LL_FS_WRITE_FILE | LL_FS_IOCTL_DEV, handled, err, errlen)) < 0)
			return -1;
		*n += r;
	}
	if ((r = add_path(rfd, "/proc/self/task", rd | LL_FS_WRITE_FILE | LL_FS_TRUNCATE, handled, err, errlen)) < 0)
		return -1;
	*n += r;
	return 0;
}

int pol_landlock_apply(const pol_role_def *d, const char *ca_bundle,
                       int threads_exist, int abi_max, policy_report *rep,
                       char *err, size_t errlen)
{
	int abi = pol_landlock_abi();
	if (abi_max > 0 && abi > abi_max)
		abi = abi_max; /* self-test: behave as on an older kernel */
	rep->landlock_abi = abi > 0 ? abi : 0;
	if (abi <= 0) {
		const char *why = abi == 0 ? "kernel has no Landlock (or it is disabled)"
		                           : strerror(-abi);
		pol_note(rep, POLICY_L_LANDLOCK_FS, "%s", why);
		pol_note(rep, POLICY_L_LANDLOCK_NET, "%s", why);
		pol_note(rep, POLICY_L_LANDLOCK_SCOPE, "%s", why);
		return 0;
	}
	/* Other threads exist only when the caller allowed it (policy.c): ABI 8
	 * covers them too; before, the report says what is covered. */
	unsigned flags = (threads_exist && abi >= 8) ? LL_RESTRICT_SELF_TSYNC : 0;

	struct ll_ruleset_attr ra = { 0, 0, 0 };
	size_t rsize = sizeof ra.handled_access_fs;
	ra.handled_access_fs = pol_landlock_fs_rights(abi);
	if (abi >= 4) {
		ra.handled_access_net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP;
		rsize = offsetof(struct ll_ruleset_attr, scoped);
	}
	if (abi >= 6) {
		ra.scoped = LL_SCOPE_ABSTRACT_UNIX_SOCKET | LL_SCOPE_SIGNAL;
		rsize = sizeof ra;
	}
	int rfd = (int)syscall(SYS_landlock_create_ruleset, &ra, rsize, 0);
	if (rfd < 0) {
		snprintf(err, errlen, "landlock: create_ruleset (ABI %d): %s", abi, strerror(errno));
		return -1;
	}

	int nfiles = 0;
	if (d->read_paths || ca_bundle) {
		if (ca_bundle) {
			int r = add_read_file(rfd, ca_bundle, err, errlen);
			if (r < 0)
				goto fail;
			nfiles += r;
		}
		for (const char *const *p = d->read_paths; p && *p; p++) {
			int r = add_read_file(rfd, *p, err, errlen);
			if (r < 0)
				goto fail;
			nfiles += r;
		}
	}
	int ngpu = 0;
	if (d->gpu && add_gpu_paths(rfd, ra.handled_access_fs, &ngpu, err, errlen) != 0)
		goto fail;
	if (abi >= 4) {
		for (int i = 0; i < d->ntcp_connect; i++) {
			struct ll_net_port_attr np = { LL_NET_CONNECT_TCP, d->tcp_connect[i] };
			if (syscall(SYS_landlock_add_rule, rfd, LL_RULE_NET_PORT, &np, 0) != 0) {
				snprintf(err, errlen, "landlock: port %u rule: %s",
				         d->tcp_connect[i], strerror(errno));
				goto fail;
			}
		}
	}
	if (syscall(SYS_landlock_restrict_self, rfd, flags) != 0) {
		snprintf(err, errlen, "landlock: restrict_self: %s", strerror(errno));
		goto fail;
	}
	close(rfd);

	const char *cover = (threads_exist && abi < 8)
		? "; this thread and its future threads only (threads existed, ABI < 8)" : "";
	rep->landlock_fs = 1;
	if (ngpu)
		pol_note(rep, POLICY_L_LANDLOCK_FS, "ABI %d: %d NVIDIA driver paths (libraries, "
		         "/proc, /sys read-only; /dev/nvidia* read/write%s; /proc/self/task "
		         "write), nothing else%s", abi, ngpu, abi >= 5 ? "/ioctl" : "", cover);
	else if (nfiles)
		pol_note(rep, POLICY_L_LANDLOCK_FS, "ABI %d: read-only access to %d files "
		         "(CA bundle, resolver), nothing else%s", abi, nfiles, cover);
	else
		pol_note(rep, POLICY_L_LANDLOCK_FS, "ABI %d: no filesystem access at all%s",
		         abi, cover);
	if (abi >= 4) {
		rep->landlock_net = 1;
		if (d->ntcp_connect) {
			char ports[64] = "";
			size_t o = 0;
			for (int i = 0; i < d->ntcp_connect && o < sizeof ports; i++)
				o += (size_t)snprintf(ports + o, sizeof ports - o, "%s%u",
				                      i ? "," : "", d->tcp_connect[i]);
			pol_note(rep, POLICY_L_LANDLOCK_NET, "TCP connect to port %s only, "
			         "no TCP bind (UDP is not covered by Landlock)", ports);
		} else {
			pol_note(rep, POLICY_L_LANDLOCK_NET, "no TCP bind or connect");
		}
	} else {
		pol_note(rep, POLICY_L_LANDLOCK_NET, "Landlock ABI %d < 4", abi);
	}
	if (abi >= 6) {
		rep->landlock_scope = 1;
		pol_note(rep, POLICY_L_LANDLOCK_SCOPE, "abstract unix sockets and signals "
		         "scoped to this process");
	} else {
		pol_note(rep, POLICY_L_LANDLOCK_SCOPE, "Landlock ABI %d < 6", abi);
	}
	return 0;
fail:
	close(rfd);
	return -1;
}

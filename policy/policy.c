/* policy/policy.c — the per-role policy table and policy_apply: the
 * namespace, identity, prctl and rlimit steps, then Landlock and seccomp
 * (landlock.c, seccomp.c), in the order policy.h documents. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "policy/pinternal.h"

/* The fetcher's resolver reads these (glibc getaddrinfo: nss "files" and
 * "dns", both inside libc since 2.34; other nss modules would need a dlopen,
 * which Landlock refuses, and glibc skips them). */
static const char *const fetcher_read[] = {
	"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/gai.conf",
	"/etc/host.conf", NULL,
};

#define TIB ((rlim_t)1 << 40)

static const pol_role_def roles[POLICY_ROLE_COUNT] = {
	[POLICY_WORKER] = {
		.name = "worker", .netns = 1, .pidns = 0, .empty_root = 1,
		.threads = 1, .writes_fds = 0, .net_client = 0, .opens_files = 0,
		.exec_map_kills = 1,
		/* ≤ 256 model shards + socket + stdio + headroom */
		.nofile = 512,
		/* Not lowered. It would be 0 (the worker writes no file), but its
		 * only writable regular file is an inherited stderr, and with 0 a
		 * `2>log` loses every message (tried: --probe >file printed
		 * nothing, EFBIG). It cannot open or receive a writable file. */
		.fsize = RLIM_INFINITY,
	},
	[POLICY_IMPORTER] = {
		.name = "importer", .netns = 1, .pidns = 0, .empty_root = 1,
		.threads = 1, .writes_fds = 1, .net_client = 0, .opens_files = 0,
		.exec_map_kills = 1,
		.nofile = 64,  /* one GGUF in, a few output files */
		.fsize = TIB,  /* one output shard: > any model we import */
	},
	[POLICY_FETCHER] = {
		.name = "fetcher", .netns = 0, .pidns = 1, .empty_root = 0,
		.threads = 0, .writes_fds = 1, .net_client = 1, .opens_files = 1,
		.exec_map_kills = 0, /* EPERM: glibc's nss dlopen must fail softly */
		.nofile = 64,
		.fsize = TIB,  /* one downloaded file */
		.tcp_connect = { 443, 80 }, .ntcp_connect = 2,
		.read_paths = fetcher_read,
	},
	[POLICY_GPU_WORKER] = {
		.name = "gpu-worker", .netns = 1, .pidns = 0, .empty_root = 0,
		.threads = 1, .writes_fds = 0, .net_client = 0, .opens_files = 0,
		.exec_map_kills = 1,
		.nofile = 512, /* the CPU worker's + the driver's device fds */
		.fsize = RLIM_INFINITY,
		.gpu = 1,
	},
};

const pol_role_def *pol_role(policy_role role)
{
	return (unsigned)role < POLICY_ROLE_COUNT ? &roles[role] : NULL;
}

const char *policy_role_name(policy_role role)
{
	return (unsigned)role < POLICY_ROLE_COUNT ? roles[role].name : "?";
}

void pol_note(policy_report *rep, policy_layer l, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(rep->note[l], sizeof rep->note[l], fmt, ap);
	va_end(ap);
}

void policy_opts_from_args(policy_opts *o, int argc, char **argv)
{
	memset(o, 0, sizeof *o);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], POLICY_ARG_NO_SANDBOX))
			o->no_sandbox = 1;
		else if (!strcmp(argv[i], "--ca-bundle") && i + 1 < argc)
			o->ca_bundle = argv[++i];
		else if (!strcmp(argv[i], "--allow-port") && i + 1 < argc) {
			long p = strtol(argv[++i], NULL, 10);
			if (p > 0 && p < 65536)
				o->extra_port = (unsigned short)p;
		}
	}
}

/* Threads of this process, from /proc/self/status; 0 when unreadable. */
static int count_threads(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return 0;
	char line[256];
	int n = 0;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, "Threads:", 8)) {
			n = atoi(line + 8);
			break;
		}
	fclose(f);
	return n;
}

static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, s, strlen(s));
	int e = errno;
	close(fd);
	errno = e;
	return n == (ssize_t)strlen(s) ? 0 : -1;
}

static const struct { int flag; policy_layer layer; } ns_list[] = {
	{ CLONE_NEWNS, POLICY_L_MOUNTNS }, { CLONE_NEWIPC, POLICY_L_IPCNS },
	{ CLONE_NEWNET, POLICY_L_NETNS }, { CLONE_NEWPID, POLICY_L_PIDNS },
};

static int *ns_field(policy_report *rep, policy_layer l)
{
	switch (l) {
	case POLICY_L_MOUNTNS: return &rep->mountns;
	case POLICY_L_IPCNS: return &rep->ipcns;
	case POLICY_L_NETNS: return &rep->netns;
	default: return &rep->pidns;
	}
}

/* Unshares every namespace in `want` not yet done: all at once, else one by
 * one, so a kernel (or container) that refuses one still gets the others.
 * Returns the flags that took effect. */
static int unshare_some(int want, policy_report *rep)
{
	int got = 0;
	if (want && unshare(want) == 0) {
		got = want;
	} else {
		for (size_t i = 0; i < sizeof ns_list / sizeof ns_list[0]; i++)
			if ((want & ns_list[i].flag) && unshare(ns_list[i].flag) == 0)
				got |= ns_list[i].flag;
	}
	int e = errno;
	for (size_t i = 0; i < sizeof ns_list / sizeof ns_list[0]; i++) {
		if (!(want & ns_list[i].flag))
			continue;
		if (got & ns_list[i].flag)
			*ns_field(rep, ns_list[i].layer) = 1;
		else
			pol_note(rep, ns_list[i].layer, "unshare: %s", strerror(e));
	}
	return got;
}

/* Private mounts, then an empty read-only tmpfs as "/" (pivot_root(".",".")
 * as runc does): path lookups — including the stat() of a path, which
 * neither Landlock nor a seccomp filter can refuse by name — find nothing.
 * /proc is used as the mount point because it exists everywhere; the tmpfs
 * covers it only inside this mount namespace. */
static int enter_empty_root(char *err, size_t errlen)
{
	const char *step;
	step = "make / private";
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		goto fail;
	step = "mount tmpfs";
	if (mount("mlxr-empty", "/proc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
	          "size=4k,nr_inodes=2,mode=0555") != 0)
		goto fail;
	step = "chdir";
	if (chdir("/proc") != 0)
		goto fail;
	step = "pivot_root";
	if (syscall(SYS_pivot_root, ".", ".") != 0)
		goto fail;
	step = "detach the old root";
	if (umount2(".", MNT_DETACH) != 0)
		goto fail;
	step = "chdir /";
	if (chdir("/") != 0)
		goto fail;
	step = "remount read-only";
	if (mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV |
	          MS_NOEXEC, NULL) != 0)
		goto fail;
	return 0;
fail:
	snprintf(err, errlen, "empty root: %s: %s", step, strerror(errno));
	return -1;
}

/* No capabilities in any namespace: bounding set, ambient, then the three
 * sets (a user namespace's creator holds all of them inside it). */
static int drop_caps(void)
{
	for (int c = 0; c <= 63; c++)
		prctl(PR_CAPBSET_DROP, c, 0, 0, 0); /* EINVAL past the last cap */
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct dt[2];
	memset(dt, 0, sizeof dt);
	return (int)syscall(SYS_capset, &h, dt);
}

static int set_limit(int res, rlim_t v)
{
	struct rlimit cur;
	if (getrlimit(res, &cur) == 0 && cur.rlim_max != RLIM_INFINITY && cur.rlim_max < v)
		v = cur.rlim_max; /* lowering only: never ask for more than we have */
	struct rlimit rl = { v, v };
	return setrlimit(res, &rl);
}

static const char *ca_default(void)
{
	const char *e = getenv("SSL_CERT_FILE");
	return (e && *e) ? e : "/etc/ssl/certs/ca-certificates.crt";
}

int policy_apply(policy_role role, const policy_opts *o, policy_report *rep,
                 char *err, size_t errlen)
{
	policy_report local;
	policy_opts none;
	char errbuf[1];
	if (!rep)
		rep = &local;
	if (!o) {
		memset(&none, 0, sizeof none);
		o = &none;
	}
	if (!err || !errlen) {
		err = errbuf;
		errlen = sizeof errbuf;
	}
	err[0] = 0;
	memset(rep, 0, sizeof *rep);
	rep->role = role;
	const pol_role_def *def = pol_role(role);
	if (!def) {
		snprintf(err, errlen, "policy: unknown role %d", (int)role);
		return -1;
	}
	if (o->no_sandbox) {
		rep->no_sandbox = 1;
		for (int l = 0; l < POLICY_LAYER_COUNT; l++)
			pol_note(rep, (policy_layer)l, "--no-sandbox");
		fprintf(stderr, "mlxr-%s: WARNING: --no-sandbox: this process runs "
		        "with NO sandbox (debugging only)\n", def->name);
		return 0;
	}
	pol_role_def d = *def;
	if (o->extra_port && d.ntcp_connect && d.ntcp_connect < POL_MAX_PORTS)
		d.tcp_connect[d.ntcp_connect++] = o->extra_port;

	pid_t ppid = getppid();
	int threads = count_threads();
	if (threads > 1 && !o->threads_ok) {
		snprintf(err, errlen, "policy: %d threads exist; policy_apply MUST run "
		         "before any thread is created", threads);
		return -1;
	}
	const char *ca = d.net_client ? (o->ca_bundle ? o->ca_bundle : ca_default()) : NULL;

	/* 1-2. Namespaces and identity. */
	int want = CLONE_NEWNS | CLONE_NEWIPC | (d.netns ? CLONE_NEWNET : 0) |
	           (d.pidns ? CLONE_NEWPID : 0);
	uid_t uid = geteuid();
	gid_t gid = getegid();
	int got = 0;
	if (!d.netns)
		pol_note(rep, POLICY_L_NETNS, "by policy: the fetcher needs the network");
	if (!d.pidns)
		pol_note(rep, POLICY_L_PIDNS, "by policy: threads (the kernel refuses "
		         "CLONE_THREAD after unshare(CLONE_NEWPID)); seccomp forbids new processes");
	if (uid == 0) {
		/* Root: the namespaces first, owned by the initial user namespace,
		 * then nobody, then a user namespace owned by nobody. */
		got = unshare_some(want, rep);
		if ((got & CLONE_NEWNS) && d.empty_root && enter_empty_root(err, errlen) != 0)
			return -1;
		struct stat ds;
		if (d.gpu && stat("/dev/nvidiactl", &ds) == 0 && (ds.st_mode & 006) != 006) {
			/* nobody could not open the device: stay uid 0, but with
			 * no capability (drop_caps below) and every other layer */
			pol_note(rep, POLICY_L_UID, "kept uid 0 without capabilities: /dev/nvidiactl "
			         "is not open to other users (mode %o)", (unsigned)(ds.st_mode & 0777));
			goto caps;
		}
		if (setgroups(0, NULL) != 0 || setresgid(POL_NOBODY, POL_NOBODY, POL_NOBODY) != 0 ||
		    setresuid(POL_NOBODY, POL_NOBODY, POL_NOBODY) != 0) {
			snprintf(err, errlen, "policy: drop to uid %d: %s", POL_NOBODY, strerror(errno));
			return -1;
		}
		uid_t r, e, s;
		if (getresuid(&r, &e, &s) != 0 || r != POL_NOBODY || e != POL_NOBODY || s != POL_NOBODY) {
			snprintf(err, errlen, "policy: uid still not %d", POL_NOBODY);
			return -1;
		}
		rep->uid_dropped = 1;
		pol_note(rep, POLICY_L_UID, "root → uid/gid %d, no supplementary groups, "
		         "no capabilities", POL_NOBODY);
		if (unshare(CLONE_NEWUSER) == 0) {
			rep->userns = 1;
			pol_note(rep, POLICY_L_USERNS, "owned by uid %d (unmapped inside)", POL_NOBODY);
		} else {
			pol_note(rep, POLICY_L_USERNS, "unshare: %s", strerror(errno));
		}
	} else {
		/* Unprivileged: the user namespace makes the others possible; it
		 * maps only our own uid/gid. */
		char map[64];
		if (unshare(CLONE_NEWUSER) == 0) {
			snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
			int ok = write_file("/proc/self/setgroups", "deny") == 0 &&
			         write_file("/proc/self/uid_map", map) == 0;
			snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
			ok = ok && write_file("/proc/self/gid_map", map) == 0;
			if (!ok) {
				snprintf(err, errlen, "policy: user namespace maps: %s", strerror(errno));
				return -1;
			}
			rep->userns = 1;
			pol_note(rep, POLICY_L_USERNS, "maps only uid %u / gid %u", (unsigned)uid,
			         (unsigned)gid);
		} else {
			pol_note(rep, POLICY_L_USERNS, "unshare: %s", strerror(errno));
		}
		rep->uid_dropped = 1;
		pol_note(rep, POLICY_L_UID, "started unprivileged (uid %u), no capabilities",
		         (unsigned)uid);
	}
	if (rep->userns && (want & ~got)) {
		/* What root could not create (a container without CAP_SYS_ADMIN),
		 * or the unprivileged case: owned by our user namespace. */
		int more = unshare_some(want & ~got, rep);
		if ((more & CLONE_NEWNS) && d.empty_root && enter_empty_root(err, errlen) != 0)
			return -1;
		got |= more;
	}
caps:
	if (got & CLONE_NEWNET)
		pol_note(rep, POLICY_L_NETNS, "empty (loopback down, no interfaces)");
	if (got & CLONE_NEWNS)
		pol_note(rep, POLICY_L_MOUNTNS, d.empty_root ? "private; root is an empty "
		         "read-only tmpfs" : "private mounts");
	if (got & CLONE_NEWPID)
		pol_note(rep, POLICY_L_PIDNS, "for children (seccomp lets it create none)");
	if (got & CLONE_NEWIPC)
		pol_note(rep, POLICY_L_IPCNS, "own System V IPC and POSIX queues");
	if (drop_caps() != 0) {
		snprintf(err, errlen, "policy: capset: %s", strerror(errno));
		return -1;
	}

	/* 3. prctl and rlimits. The death signal goes after the credential
	 * change, which clears it; a parent already gone is caught by the
	 * getppid check (our parent is then someone else). */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
		snprintf(err, errlen, "policy: PR_SET_PDEATHSIG: %s", strerror(errno));
		return -1;
	}
	if (getppid() != ppid) {
		snprintf(err, errlen, "policy: the parent exited during start-up");
		return -1;
	}
	rep->pdeathsig = 1;
	pol_note(rep, POLICY_L_PDEATHSIG, "SIGKILL when the parent exits");
	/* Not dumpable: no other process of the same uid (nobody) may ptrace it
	 * or read /proc/<pid>/mem. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 ||
	    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
		snprintf(err, errlen, "policy: PR_SET_NO_NEW_PRIVS: %s", strerror(errno));
		return -1;
	}
	rep->nnp = 1;
	pol_note(rep, POLICY_L_NNP, "no_new_privs, not dumpable");
	if (set_limit(RLIMIT_CORE, 0) != 0 ||
	    (d.fsize != RLIM_INFINITY && set_limit(RLIMIT_FSIZE, d.fsize) != 0) ||
	    set_limit(RLIMIT_NOFILE, d.nofile) != 0) {
		snprintf(err, errlen, "policy: setrlimit: %s", strerror(errno));
		return -1;
	}
	rep->rlimits = 1;
	pol_note(rep, POLICY_L_RLIMITS, "core 0, file size %s, open files %lu",
	         d.fsize == RLIM_INFINITY ? "unchanged (stderr may be a log file)" : "1 TiB", (unsigned long)d.nofile);

	/* 4. Landlock. */
	if (pol_landlock_apply(&d, ca, threads > 1, o->landlock_abi_max, rep, err, errlen) != 0)
		return -1;

	/* 5. seccomp, last. */
	if (d.gpu) {
		pol_note(rep, POLICY_L_SECCOMP, "after device init and the weight upload "
		         "(policy_seccomp_late)");
		return 0;
	}
	if (o->skip_seccomp) {
		pol_note(rep, POLICY_L_SECCOMP, "skipped (self-test --layers)");
		return 0;
	}
	return pol_seccomp_apply(&d, rep, err, errlen);
}

int policy_seccomp_late(policy_role role, policy_report *rep, char *err, size_t errlen)
{
	policy_report local;
	const pol_role_def *d = pol_role(role);
	if (!rep) {
		memset(&local, 0, sizeof local);
		rep = &local;
	}
	if (!d) {
		snprintf(err, errlen, "policy: unknown role %d", (int)role);
		return -1;
	}
	return pol_seccomp_apply(d, rep, err, errlen);
}

int policy_seccomp_learn(policy_role role, char *err, size_t errlen)
{
	const pol_role_def *d = pol_role(role);
	if (!d) {
		snprintf(err, errlen, "policy: unknown role %d", (int)role);
		return -1;
	}
	return pol_seccomp_learn_apply(d, err, errlen);
}

int policy_seccomp_learn_report(char *buf, size_t len)
{
	return pol_seccomp_learn_dump(buf, len);
}

static const char *layer_names[POLICY_LAYER_COUNT] = {
	"userns", "netns", "mountns", "ipcns", "pidns", "uid", "pdeathsig", "nnp",
	"rlimits", "landlock-fs", "landlock-net", "landlock-scope", "seccomp",
};

static int layer_on(const policy_report *r, int l)
{
	const int v[POLICY_LAYER_COUNT] = {
		r->userns, r->netns, r->mountns, r->ipcns, r->pidns, r->uid_dropped,
		r->pdeathsig, r->nnp, r->rlimits, r->landlock_fs, r->landlock_net,
		r->landlock_scope, r->seccomp,
	};
	return v[l];
}

int policy_report_format(const policy_report *r, char *buf, size_t len)
{
	size_t o = 0;
	if (!buf || !len)
		return -1;
	buf[0] = 0;
	for (int l = 0; l < POLICY_LAYER_COUNT; l++) {
		int n = snprintf(buf + o, len - o, "%-14s %-3s %s\n", layer_names[l],
		                 layer_on(r, l) ? "on" : "off", r->note[l]);
		if (n < 0 || (size_t)n >= len - o)
			return -1;
		o += (size_t)n;
	}
	return (int)o;
}

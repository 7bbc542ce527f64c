/* policy/selftest.c — the hidden `--self-test` and `--probe` entry points of
 * mlxr-worker and mlxr-fetcher. The self-test applies the role's real policy
 * exactly as start-up does, then attempts each forbidden thing and prints one
 * JSON line per attempt; tests/py/test_sandbox.py runs it and checks every
 * line (and, for attempts that must kill the process, the SIGSYS status).
 *
 *   --self-test [--role importer] [--fd N]... [--wfd N] [--sock N]
 *               [--path P]... [--port N] [--only NAME] [--hold] [--layers]
 *               [--landlock-abi N]
 *
 * --fd N: a model file the parent opened read-only (written to, mapped,
 * mprotected); --wfd N: a file the parent opened for writing (importer,
 * fetcher: writing through it must work); --sock N: a unix socket to receive
 * one fd on and echo its first bytes back (the worker's real life);
 * --path P: a path that must not open (model dir, ~/.ssh, the store);
 * --port N: a TCP listener on 127.0.0.1 the role must not reach.
 * Without --only, every attempt that fails softly runs in this process and
 * the names of those that must kill it are listed, one process each.
 * --hold: lock down, print {"ready":PID}, wait for stdin to close.
 * --layers: everything but seccomp, to prove the layers under it alone.
 * --landlock-abi N (also for --probe): use at most Landlock ABI N, to prove
 * the fallbacks for older kernels on this one. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "policy/pinternal.h"

#define MAX_ITEMS 8

typedef struct {
	policy_role role;
	int layers;             /* seccomp skipped */
	pid_t parent;           /* the broker: our parent at start */
	int fds[MAX_ITEMS], nfds;
	int wfd, sock, port;
	const char *paths[MAX_ITEMS];
	int npaths;
	const char *ca;
} st_ctx;

/* An attempt returns 0 when the operation succeeded, else the errno; -1:
 * skipped (its argument was not given). */
typedef int (*attempt_fn)(const st_ctx *c, const char *arg);

typedef struct {
	const char *name;
	attempt_fn fn;
	unsigned roles;          /* 1 << policy_role */
	/* Expected outcome: "killed", "ok", or errno names joined by '|'.
	 * full: the real policy; layers: without seccomp. */
	const char *full_w, *layers_w; /* worker, importer */
	const char *full_f, *layers_f; /* fetcher */
	int per_fd, per_path;    /* repeated for each --fd / --path */
} attempt;

static const char *errname(int e)
{
	static const struct { int e; const char *n; } t[] = {
		{ EACCES, "EACCES" }, { EPERM, "EPERM" }, { ENOENT, "ENOENT" },
		{ EBADF, "EBADF" }, { EAFNOSUPPORT, "EAFNOSUPPORT" },
		{ ECONNREFUSED, "ECONNREFUSED" }, { ENETUNREACH, "ENETUNREACH" },
		{ ENOSYS, "ENOSYS" }, { EINVAL, "EINVAL" }, { EFBIG, "EFBIG" },
		{ ESRCH, "ESRCH" }, { ENOTTY, "ENOTTY" }, { EADDRNOTAVAIL, "EADDRNOTAVAIL" },
		{ EHOSTUNREACH, "EHOSTUNREACH" }, { ETIMEDOUT, "ETIMEDOUT" },
	};
	static char buf[16];
	if (e == 0)
		return "ok";
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (t[i].e == e)
			return t[i].n;
	snprintf(buf, sizeof buf, "E%d", e);
	return buf;
}

static int expect_has(const char *expect, const char *got)
{
	size_t n = strlen(got);
	for (const char *p = expect; p && *p;) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);
		if (len == n && !strncmp(p, got, n))
			return 1;
		p = bar ? bar + 1 : NULL;
	}
	return 0;
}

/* ---- the attempts ---- */

static int try_open(const st_ctx *c, const char *path)
{
	(void)c;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	close(fd);
	return 0;
}

static int try_stat(const st_ctx *c, const char *path)
{
	(void)c;
	struct stat st;
	return stat(path, &st) == 0 ? 0 : errno;
}

static int try_create(const st_ctx *c, const char *arg)
{
	(void)c;
	(void)arg;
	char path[64];
	snprintf(path, sizeof path, "/tmp/mlxr-selftest-%d", (int)getpid());
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return errno;
	close(fd);
	unlink(path);
	return 0;
}

static int fd_arg(const char *arg)
{
	return arg ? atoi(arg) : -1;
}

static int try_write_fd(const st_ctx *c, const char *arg)
{
	(void)c;
	return write(fd_arg(arg), "x", 1) == 1 ? 0 : errno;
}

static int try_read_fd(const st_ctx *c, const char *arg)
{
	(void)c;
	char b[8];
	return pread(fd_arg(arg), b, sizeof b, 0) >= 0 ? 0 : errno;
}

static int try_map_read(const st_ctx *c, const char *arg)
{
	(void)c;
	void *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd_arg(arg), 0);
	if (p == MAP_FAILED)
		return errno;
	volatile char x = *(volatile char *)p;
	(void)x;
	munmap(p, 4096);
	return 0;
}

static int try_map_shared_write(const st_ctx *c, const char *arg)
{
	(void)c;
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd_arg(arg), 0);
	if (p == MAP_FAILED)
		return errno;
	munmap(p, 4096);
	return 0;
}

static int try_mprotect_write(const st_ctx *c, const char *arg)
{
	(void)c;
	void *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd_arg(arg), 0);
	if (p == MAP_FAILED)
		return errno; /* reported as the setup failing: not the expected errno */
	int r = mprotect(p, 4096, PROT_READ | PROT_WRITE) == 0 ? 0 : errno;
	munmap(p, 4096);
	return r;
}

static int try_wfd(const st_ctx *c, const char *arg)
{
	(void)arg;
	if (c->wfd < 0)
		return -1; /* skipped: no --wfd */
	if (pwrite(c->wfd, "mlxr", 4, 0) != 4)
		return errno;
	return ftruncate(c->wfd, 4) == 0 ? 0 : errno;
}

static void *thread_fn(void *p)
{
	*(int *)p = 42;
	return NULL;
}

static int try_thread(const st_ctx *c, const char *arg)
{
	(void)c;
	(void)arg;
	pthread_t t;
	int v = 0;
	int e = pthread_create(&t, NULL, thread_fn, &v);
	if (e)
		return e;
	pthread_join(t, NULL);
	return v == 42 ? 0 : EINVAL;
}

static int try_nprocs(const st_ctx *c, const char *arg)
{
	(void)c;
	(void)arg;
	return sysconf(_SC_NPROCESSORS_ONLN) > 0 ? 0 : EINVAL;
}

static int try_random(const st_ctx *c, const char *arg)
{
	(void)c;
	(void)arg;
	char b[16];
	return getrandom(b, sizeof b, 0) == (ssize_t)sizeof b ? 0 : errno;
}

/* Receive one fd on --sock (SCM_RIGHTS), map it, send its first 8 bytes back. */
static int try_sock_fd(const st_ctx *c, const char *arg)
{
	(void)arg;
	if (c->sock < 0)
		return -1; /* skipped: no --sock */
	char byte, ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &byte, 1 };
	struct msghdr m = { 0 };
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	m.msg_control = ctl;
	m.msg_controllen = sizeof ctl;
	if (recvmsg(c->sock, &m, MSG_CMSG_CLOEXEC) != 1)
		return errno ? errno : EINVAL;
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);
	if (!h || h->cmsg_type != SCM_RIGHTS)
		return EINVAL;
	int fd;
	memcpy(&fd, CMSG_DATA(h), sizeof fd);
	const char *p = mmap(NULL, 8, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return errno;
	ssize_t n = send(c->sock, p, 8, 0);
	munmap((void *)p, 8);
	close(fd);
	return n == 8 ? 0 : errno;
}

static int tcp_connect(int port)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return errno;
	struct sockaddr_in a = { 0 };
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int r = connect(s, (struct sockaddr *)&a, sizeof a) == 0 ? 0 : errno;
	close(s);
	return r;
}

static int try_connect_listener(const st_ctx *c, const char *arg)
{
	(void)arg;
	return tcp_connect(c->port > 0 ? c->port : 9);
}

static int try_connect_443(const st_ctx *c, const char *arg)
{
	(void)c;
	(void)arg;
	int r = tcp_connect(443);
	return r == ECONNREFUSED ? 0 : r; /* reached the network stack: allowed */
}

static int try_bind(const st_ctx *c, const char *arg)
{
	(void)c;
	(void)arg;
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return errno;
	struct sockaddr_in a = { 0 };
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = 0; /* any port: Landlock still checks port 0 */
	int r = bind(s, (struct sockaddr *)&a, sizeof a) == 0 ? 0 : errno;
	close(s);
	return r;
}

static int try_unix_socket(const st_ctx *c, const char *arg)
{
	(void)c;
	(void)arg;
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return errno;
	close(s);
	return 0;
}

static int try_udp(const st_ctx *c, const char *arg)
{
	(void)c;
	(void)arg;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return errno;
	close(s);
	return 0;
}

static int try_resolve(const st_ctx *c, const char *arg)
{
	(void)c;
	(void)arg;
	struct addrinfo hints = { 0 }, *res = NULL;
	hints.ai_socktype = SOCK_STREAM;
	int r = getaddrinfo("localhost", "443", &hints, &res);
	if (r != 0)
		return r == EAI_SYSTEM ? errno : EINVAL;
	freeaddrinfo(res);
	return 0;
}

static int try_read_ca(const st_ctx *c, const char *arg)
{
	(void)arg;
	int fd = open(c->ca, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	char b[64];
	ssize_t n = read(fd, b, sizeof b);
	close(fd);
	return n > 0 ? 0 : EINVAL;
}

static int try_execve(const st_ctx *c, const char *arg)
{
	(void)c;
	(void)arg;
	char *argv[] = { "/bin/true", NULL }, *envp[] = { NULL };
	execve("/bin/true", argv, envp);
	return errno;
}

static int try_ptrace(const st_ctx *c, const char *arg)
{
	(void)arg;
	if (ptrace(PTRACE_SEIZE, c->parent, 0, 0) == 0) {
		ptrace(PTRACE_DETACH, c->parent, 0, 0);
		return 0;
	}
	return errno;
}

static int try_kill(const st_ctx *c, const char *arg)
{
	(void)arg;
	/* Signal 0: the permission check without harming the parent. */
	return kill(c->parent, 0) == 0 ? 0 : errno;
}

static int try_fork(const st_ctx *c, const char *arg)
{
	(void)c;
	(void)arg;
	pid_t p = fork();
	if (p < 0)
		return errno;
	if (p == 0)
		_exit(0);
	waitpid(p, NULL, 0);
	return 0;
}

static int try_mmap_exec(const st_ctx *c, const char *arg)
{
	(void)c;
	(void)arg;
	void *p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return errno;
	munmap(p, 4096);
	return 0;
}

static int try_mprotect_exec(const st_ctx *c, const char *arg)
{
	(void)c;
	(void)arg;
	void *p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return errno;
	int r = mprotect(p, 4096, PROT_READ | PROT_EXEC) == 0 ? 0 : errno;
	munmap(p, 4096);
	return r;
}

#define W ((1u << POLICY_WORKER) | (1u << POLICY_IMPORTER))
#define F (1u << POLICY_FETCHER)
#define ALL (W | F)

/* Expectations. Worker full: seccomp errno (EACCES) or kill; worker layers:
 * the empty root (ENOENT), the empty network namespace and Landlock; fetcher
 * layers: Landlock (EACCES) and the scoped signals/ptrace rules. */
static const attempt attempts[] = {
	/* must fail softly */
	{ "open /etc/passwd", try_open, ALL, "EACCES", "ENOENT", "EACCES", "EACCES", 0, 0 },
	{ "open /proc/self/mem", try_open, ALL, "EACCES", "ENOENT", "EACCES", "EACCES", 0, 0 },
	{ "open", try_open, ALL, "EACCES", "ENOENT", "EACCES", "EACCES", 0, 1 },
	{ "stat /etc/passwd", try_stat, W, "EACCES", "ENOENT", NULL, NULL, 0, 0 },
	{ "create /tmp file", try_create, ALL, "EACCES", "ENOENT", "EACCES", "EACCES", 0, 0 },
	{ "write model fd", try_write_fd, ALL, "EBADF", "EBADF", "EBADF", "EBADF", 1, 0 },
	{ "mmap model fd shared writable", try_map_shared_write, ALL, "EACCES", "EACCES",
	  "EACCES", "EACCES", 1, 0 },
	{ "mprotect model mapping writable", try_mprotect_write, ALL, "EACCES", "EACCES",
	  "EACCES", "EACCES", 1, 0 },
	{ "connect 127.0.0.1 listener", try_connect_listener, F, NULL, NULL, "EACCES", "EACCES", 0, 0 },
	{ "socket AF_UNIX", try_unix_socket, F, NULL, NULL, "EAFNOSUPPORT", "ok", 0, 0 },
	{ "mmap PROT_EXEC", try_mmap_exec, F, NULL, NULL, "EPERM", "ok", 0, 0 },
	{ "mprotect PROT_EXEC", try_mprotect_exec, F, NULL, NULL, "EPERM", "ok", 0, 0 },
	/* must work: the role is still usable */
	{ "read model fd", try_read_fd, ALL, "ok", "ok", "ok", "ok", 1, 0 },
	{ "mmap model fd read-only", try_map_read, ALL, "ok", "ok", "ok", "ok", 1, 0 },
	{ "write through received fd", try_wfd, (1u << POLICY_IMPORTER) | F, "ok", "ok",
	  "ok", "ok", 0, 0 },
	{ "thread create and join", try_thread, W, "ok", "ok", NULL, NULL, 0, 0 },
	{ "sysconf nprocs", try_nprocs, W, "ok", "ok", NULL, NULL, 0, 0 },
	{ "getrandom", try_random, ALL, "ok", "ok", "ok", "ok", 0, 0 },
	{ "receive fd on socket, map, reply", try_sock_fd, ALL, "ok", "ok", "ok", "ok", 0, 0 },
	{ "read CA bundle", try_read_ca, F, NULL, NULL, "ok", "ok", 0, 0 },
	{ "resolve localhost", try_resolve, F, NULL, NULL, "ok", "ok", 0, 0 },
	{ "UDP socket (DNS)", try_udp, F, NULL, NULL, "ok", "ok", 0, 0 },
	{ "connect 127.0.0.1:443 (allowed port)", try_connect_443, F, NULL, NULL, "ok", "ok", 0, 0 },
	/* must kill the process under the full policy (one process each) */
	{ "connect", try_connect_listener, W, "killed", "EACCES", NULL, NULL, 0, 0 },
	{ "bind", try_bind, ALL, "killed", "EACCES", "killed", "EACCES", 0, 0 },
	{ "execve", try_execve, ALL, "killed", "ENOENT", "killed", "EACCES", 0, 0 },
	{ "ptrace parent", try_ptrace, ALL, "killed", "EPERM", "killed", "EPERM", 0, 0 },
	{ "kill parent", try_kill, ALL, "killed", "EPERM", "killed", "EPERM", 0, 0 },
	{ "mmap PROT_EXEC", try_mmap_exec, W, "killed", "ok", NULL, NULL, 0, 0 },
	{ "mprotect PROT_EXEC", try_mprotect_exec, W, "killed", "ok", NULL, NULL, 0, 0 },
	{ "fork", try_fork, ALL, "killed", "ok", "killed", "ok", 0, 0 },
};

static const char *expect_of(const attempt *a, const st_ctx *c)
{
	int f = c->role == POLICY_FETCHER;
	return f ? (c->layers ? a->layers_f : a->full_f) : (c->layers ? a->layers_w : a->full_w);
}

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			putchar('\\');
		putchar((unsigned char)*s < 0x20 ? '?' : *s);
	}
	putchar('"');
}

/* Runs one attempt (for one argument); returns 1 when as expected. */
static int run_one(const attempt *a, const st_ctx *c, const char *arg, int show_arg)
{
	const char *expect = expect_of(a, c);
	char name[256];
	if (show_arg)
		snprintf(name, sizeof name, "%s %s", a->name, arg);
	else
		snprintf(name, sizeof name, "%s", a->name);
	if (!strcmp(expect, "killed")) {
		/* Announce first: if the attempt works, the line below says so. */
		printf("{\"attempt\":");
		json_str(name);
		printf(",\"expect\":\"killed\",\"result\":\"attempting\"}\n");
		fflush(stdout);
	}
	errno = 0;
	int e = a->fn(c, arg);
	const char *got = e < 0 ? "skipped" : errname(e);
	int ok = e < 0 || expect_has(expect, got);
	printf("{\"attempt\":");
	json_str(name);
	printf(",\"expect\":\"%s\",\"result\":\"%s\",\"ok\":%s}\n", expect, got,
	       ok ? "true" : "false");
	fflush(stdout);
	return ok;
}

static int run_attempt(const attempt *a, const st_ctx *c)
{
	int ok = 1;
	char buf[16];
	if (a->per_fd) {
		for (int i = 0; i < c->nfds; i++) {
			snprintf(buf, sizeof buf, "%d", c->fds[i]);
			ok &= run_one(a, c, buf, 1);
		}
	} else if (a->per_path) {
		for (int i = 0; i < c->npaths; i++)
			ok &= run_one(a, c, c->paths[i], 1);
	} else {
		/* "open /etc/passwd": the path is the name's second word */
		const char *sp = strchr(a->name, ' ');
		ok &= run_one(a, c, sp && sp[1] == '/' ? sp + 1 : NULL, 0);
	}
	return ok;
}

static policy_role role_from_args(policy_role role, int argc, char **argv)
{
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], "--role") && role == POLICY_WORKER &&
		    !strcmp(argv[i + 1], "importer"))
			return POLICY_IMPORTER;
	return role;
}

/* --landlock-abi N (self-test and probe only, never policy_opts_from_args) */
static int abi_max_arg(int argc, char **argv)
{
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], "--landlock-abi"))
			return atoi(argv[i + 1]);
	return 0;
}

int policy_selftest(policy_role role, int argc, char **argv)
{
	st_ctx c;
	memset(&c, 0, sizeof c);
	c.role = role_from_args(role, argc, argv);
	c.parent = getppid();
	c.wfd = c.sock = -1;
	const char *only = NULL;
	int hold = 0;
	for (int i = 2; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(argv[i], "--layers"))
			c.layers = 1;
		else if (!strcmp(argv[i], "--hold"))
			hold = 1;
		else if (!v)
			continue;
		else if (!strcmp(argv[i], "--fd") && c.nfds < MAX_ITEMS)
			c.fds[c.nfds++] = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--path") && c.npaths < MAX_ITEMS)
			c.paths[c.npaths++] = argv[++i];
		else if (!strcmp(argv[i], "--wfd"))
			c.wfd = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--sock"))
			c.sock = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--port"))
			c.port = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--only"))
			only = argv[++i];
	}
	policy_opts o;
	policy_opts_from_args(&o, argc, argv);
	o.skip_seccomp = c.layers;
	o.landlock_abi_max = abi_max_arg(argc, argv);
	const char *e = getenv("SSL_CERT_FILE");
	c.ca = o.ca_bundle ? o.ca_bundle : (e && *e) ? e : "/etc/ssl/certs/ca-certificates.crt";

	policy_report rep;
	char err[256];
	if (policy_apply(c.role, &o, &rep, err, sizeof err) != 0) {
		printf("{\"error\":");
		json_str(err);
		printf("}\n");
		return 1;
	}
	if (hold) {
		printf("{\"ready\":%d}\n", (int)getpid());
		fflush(stdout);
		char b;
		while (read(0, &b, 1) > 0) {
		}
		return 0;
	}
	int ok = 1, ran = 0;
	unsigned bit = 1u << c.role;
	for (size_t i = 0; i < sizeof attempts / sizeof attempts[0]; i++) {
		const attempt *a = &attempts[i];
		const char *expect = expect_of(a, &c);
		if (!(a->roles & bit) || !expect)
			continue;
		if (only ? strcmp(only, a->name) != 0 : !strcmp(expect, "killed"))
			continue;
		ok &= run_attempt(a, &c);
		ran++;
	}
	if (only && !ran) {
		printf("{\"error\":\"no attempt named '%s' for this role\"}\n", only);
		return 2;
	}
	if (!only) {
		printf("{\"killers\":[");
		int first = 1;
		for (size_t i = 0; i < sizeof attempts / sizeof attempts[0]; i++) {
			const char *expect = expect_of(&attempts[i], &c);
			if ((attempts[i].roles & bit) && expect && !strcmp(expect, "killed")) {
				printf("%s", first ? "" : ",");
				json_str(attempts[i].name);
				first = 0;
			}
		}
		printf("]}\n");
	}
	return ok ? 0 : 1;
}

int policy_probe(policy_role role, int argc, char **argv)
{
	role = role_from_args(role, argc, argv);
	policy_opts o;
	policy_opts_from_args(&o, argc, argv);
	o.landlock_abi_max = abi_max_arg(argc, argv);
	policy_report rep;
	char err[256], buf[4096];
	int r = policy_apply(role, &o, &rep, err, sizeof err);
	if (policy_report_format(&rep, buf, sizeof buf) < 0)
		buf[0] = 0;
	/* One line per layer, prefixed with the role. */
	for (char *line = buf, *nl; *line; line = nl + 1) {
		nl = strchr(line, '\n');
		if (!nl)
			break;
		*nl = 0;
		printf("%-9s %s\n", policy_role_name(role), line);
	}
	if (r != 0)
		printf("%-9s error: %s\n", policy_role_name(role), err);
	fflush(stdout);
	return r == 0 ? 0 : 1;
}

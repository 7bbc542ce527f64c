/* broker/cmd_doctor.c — `mlxr doctor`: which sandbox layers this kernel
 * gives each role. It starts each sibling binary with --probe (fork + exec,
 * the binaries next to this one), which applies its real policy and prints
 * one line per layer; doctor prints them under a heading per role. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker/cmds.h"
#include "broker/spawn.h"

/* Runs argv (argv[0]: the binary's path), its output going to our stdout.
 * Returns the child's exit status, or -1 when it did not exit normally. */
static int run_probe(char *const argv[])
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		execv(argv[0], argv);
		fprintf(stderr, "mlxr doctor: cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFSIGNALED(st)) {
		printf("  (killed by signal %d)\n", WTERMSIG(st));
		return -1;
	}
	return WEXITSTATUS(st);
}

int cmd_doctor(int argc, char **argv)
{
	(void)argv;
	if (argc > 1) {
		fprintf(stderr, "usage: mlxr doctor\n");
		return 2;
	}
	char path[PATH_MAX];
	struct utsname u;
	if (uname(&u) == 0)
		printf("kernel: %s %s %s\n", u.sysname, u.release, u.machine);
	printf("running as uid %u%s\n\n", (unsigned)getuid(),
	       getuid() == 0 ? " (children drop to uid 65534)" : "");
	static const struct { const char *bin, *role_arg, *role; } probes[] = {
		{ "mlxr-worker", NULL, "worker" },
		{ "mlxr-worker", "importer", "importer" },
		{ "mlxr-fetcher", NULL, "fetcher" },
	};
	int bad = 0;
	for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
		if (spawn_sibling_path(probes[i].bin, path, sizeof path)) {
			fprintf(stderr, "mlxr doctor: cannot find my own executable\n");
			return 1;
		}
		printf("%s (%s):\n", probes[i].role, path);
		char *av[] = { path, "--probe", NULL, NULL, NULL };
		if (probes[i].role_arg) {
			av[2] = "--role";
			av[3] = (char *)probes[i].role_arg;
		}
		int r = run_probe(av);
		if (r != 0) {
			printf("  %s: probe FAILED (status %d): this role cannot start sandboxed\n",
			       probes[i].role, r);
			bad = 1;
		}
		printf("\n");
	}
	return bad;
}

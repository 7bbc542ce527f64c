/* broker/spawn.c — see spawn.h. */
#include "broker/spawn.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int spawn_sibling_path(const char *name, char *out, size_t len)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return -1;
	self[n] = 0;
	char *slash = strrchr(self, '/');
	if (!slash)
		return -1;
	*slash = 0;
	return snprintf(out, len, "%s/%s", self, name) >= (int)len ? -1 : 0;
}

int spawn_child(const char *name, char *const argv[], pid_t *pid, int *sock, char *err, size_t errlen)
{
	char path[PATH_MAX];
	int sv[2];
	if (spawn_sibling_path(name, path, sizeof(path)) || access(path, X_OK)) {
		snprintf(err, errlen, "cannot find %s next to mlxr", name);
		return -1;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
		snprintf(err, errlen, "socketpair: %s", strerror(errno));
		return -1;
	}
	pid_t p = fork();
	if (p < 0) {
		close(sv[0]);
		close(sv[1]);
		snprintf(err, errlen, "fork: %s", strerror(errno));
		return -1;
	}
	if (p == 0) {
		/* Only async-signal-safe calls until exec. */
		if (setsid() < 0 || dup2(sv[1], 3) < 0)
			_exit(127);
		for (int fd = 4; fd < 1024; fd++)
			close(fd);
		execv(path, argv);
		_exit(127);
	}
	close(sv[1]);
	*pid = p;
	*sock = sv[0];
	return 0;
}

void spawn_reap(pid_t pid, int grace_ms, char *how, size_t len)
{
	int status = 0;
	pid_t r = 0;
	snprintf(how, len, "ended");
	if (pid <= 0)
		return;
	for (int i = 0; i < grace_ms / 2 && (r = waitpid(pid, &status, WNOHANG)) == 0; i++)
		usleep(2000);
	if (r == 0) {
		kill(pid, SIGKILL);
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		snprintf(how, len, "stopped by the broker");
	} else if (r > 0 && WIFSIGNALED(status)) {
		int sig = WTERMSIG(status);
		snprintf(how, len, "killed by signal %d%s", sig,
			 sig == SIGSYS ? " (a system call its sandbox forbids)" :
			 sig == SIGBUS ? " (a model file changed or shrank under it)" : "");
	} else if (r > 0) {
		snprintf(how, len, "exited with status %d", WEXITSTATUS(status));
	}
}

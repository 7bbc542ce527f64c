/* broker/cmd_tools.c — `mlxr tokenize` and `mlxr chat-render`, developer
 * verbs that parse a model's tokenizer.json, chat template and a messages
 * file. The broker parses none of those bytes: it finds the files the
 * arguments name, opens them read-only (regular files only), and runs the
 * verb in a sandboxed mlxr-worker (`--tool`, worker/tool.h), which writes
 * the output to the inherited stdout. The verbs' argument grammar and
 * usage messages live with them in worker/tool_tokenize.c and
 * worker/tool_chatfmt.c; here each verb only says which arguments are
 * files. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker/cmds.h"
#include "broker/spawn.h"
#include "broker/store.h"
#include "common/ipc.h"

typedef struct {
	const char *verb;
	int npos_files;                /* the first n positional arguments are files */
	const char *const *file_opts;  /* options whose value is a file */
	const char *const *value_opts; /* options whose value is not */
} tool_spec;

static int in_list(const char *const *l, const char *s)
{
	for (; l && *l; l++)
		if (!strcmp(*l, s))
			return 1;
	return 0;
}

/* Opens path read-only for the worker; a FIFO or device in its place is
 * refused (O_NONBLOCK: it does not hang the broker first). */
static int open_input(const char *verb, const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		fprintf(stderr, "mlxr %s: %s: %s\n", verb, path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		fprintf(stderr, "mlxr %s: %s: not a regular file\n", verb, path);
		close(fd);
		return -1;
	}
	return fd;
}

/* Runs the verb argv[0] in a sandboxed worker with the files of spec
 * opened; returns the verb's exit status. */
static int run_tool(const tool_spec *sp, int argc, char **argv)
{
	int fds[IPC_MAX_FDS], idx[IPC_MAX_FDS], nf = 1, rc = 1, npos = 0;
	fds[0] = -1;
	for (int i = 1; i < argc; i++) {
		int file = 0;
		if (in_list(sp->file_opts, argv[i]) && i + 1 < argc)
			file = ++i;
		else if (in_list(sp->value_opts, argv[i]) && i + 1 < argc)
			i++;
		else if (argv[i][0] != '-' && npos++ < sp->npos_files)
			file = i;
		if (!file)
			continue;
		if (nf == IPC_MAX_FDS) {
			fprintf(stderr, "mlxr %s: too many files\n", sp->verb);
			goto out;
		}
		if ((fds[nf] = open_input(sp->verb, argv[file])) < 0)
			goto out;
		idx[nf++] = file;
	}
	ipc_blob b;
	ipc_blob_init(&b, "mlxr-tool-argv");
	ipc_blob_u32(&b, (uint32_t)argc);
	for (int i = 0; i < argc; i++)
		ipc_blob_bytes(&b, argv[i], strlen(argv[i]));
	ipc_blob_u32(&b, (uint32_t)(nf - 1));
	for (int i = 1; i < nf; i++)
		ipc_blob_u32(&b, (uint32_t)idx[i]);
	fds[0] = ipc_blob_seal(&b);
	ipc_blob_free(&b);
	if (fds[0] < 0) {
		fprintf(stderr, "mlxr %s: cannot pack the arguments: %s\n", sp->verb, strerror(errno));
		goto out;
	}
	char err[256], how[128];
	pid_t pid;
	int sock;
	char *wargv[] = { "mlxr-worker", "--tool", NULL };
	fflush(stdout); /* the worker writes to the same stdout */
	if (spawn_child("mlxr-worker", wargv, &pid, &sock, err, sizeof(err))) {
		fprintf(stderr, "mlxr %s: %s\n", sp->verb, err);
		goto out;
	}
	signal(SIGPIPE, SIG_IGN);
	int sent = ipc_send(sock, IPC_TOOL, 1, NULL, 0, fds, nf);
	close(sock);
	int status = 0;
	pid_t r;
	while ((r = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
		;
	if (r == pid && WIFEXITED(status) && !sent) {
		rc = WEXITSTATUS(status);
	} else {
		if (r == pid && WIFSIGNALED(status))
			snprintf(how, sizeof(how), "killed by signal %d%s", WTERMSIG(status),
				 WTERMSIG(status) == SIGSYS ? " (a system call its sandbox forbids)" : "");
		else
			snprintf(how, sizeof(how), "%s", sent ? "it did not take the request" : "it was lost");
		fprintf(stderr, "mlxr %s: the worker failed (%s)\n", sp->verb, how);
	}
out:
	for (int i = 0; i < nf; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return rc;
}

int cmd_tokenize(int argc, char **argv)
{
	static const char *const file_opts[] = { "--file", "--batch", NULL };
	static const char *const value_opts[] = { "--decode", NULL };
	static const tool_spec sp = { "tokenize", 1, file_opts, value_opts };
	/* MODEL (the first positional argument): a directory holding
	 * tokenizer.json, a tokenizer.json path, or a store name; the worker
	 * gets the resolved path in its place. */
	char path[PATH_MAX], dir[PATH_MAX], err[512];
	char **av = malloc(sizeof(char *) * (size_t)(argc + 1));
	if (!av)
		return 1;
	memcpy(av, argv, sizeof(char *) * (size_t)(argc + 1));
	for (int i = 1; i < argc; i++) {
		if (in_list(file_opts, argv[i]) || in_list(value_opts, argv[i])) {
			i++;
			continue;
		}
		if (argv[i][0] == '-')
			continue;
		struct stat st;
		const char *m = argv[i];
		int bad;
		if (stat(m, &st) == 0)
			bad = S_ISDIR(st.st_mode) ? snprintf(path, sizeof(path), "%s/tokenizer.json", m) >= (int)sizeof(path)
						  : snprintf(path, sizeof(path), "%s", m) >= (int)sizeof(path);
		else if (store_resolve(m, dir, sizeof(dir), err, sizeof(err)) == 0)
			bad = snprintf(path, sizeof(path), "%s/tokenizer.json", dir) >= (int)sizeof(path);
		else {
			fprintf(stderr, "mlxr tokenize: %s\n", err);
			free(av);
			return 1;
		}
		if (bad) {
			fprintf(stderr, "mlxr tokenize: cannot find tokenizer.json for '%s'\n", m);
			free(av);
			return 1;
		}
		av[i] = path;
		break;
	}
	int rc = run_tool(&sp, argc, av);
	free(av);
	return rc;
}

int cmd_chat_render(int argc, char **argv)
{
	static const char *const file_opts[] = { "--template", NULL };
	static const char *const value_opts[] = { "--date", NULL };
	static const tool_spec sp = { "chat-render", 2, file_opts, value_opts };
	return run_tool(&sp, argc, argv);
}

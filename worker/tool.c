/* worker/tool.c — see tool.h. */
#include "worker/tool.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/ipc.h"

#define TOOL_ARGV_MAX ((size_t)64 << 20) /* the argv blob (a TEXT argument can be long) */
#define TOOL_ARGC_MAX 4096

static const char *const *g_arg; /* argv entries that have a file, in fd order */
static const int *g_fd;
static int g_nfile;

int tool_read(const char *arg, size_t max, char **out, size_t *len)
{
	int fd = -1;
	for (int i = 0; i < g_nfile; i++)
		if (g_arg[i] == arg)
			fd = g_fd[i];
	if (fd < 0) {
		errno = ENOENT;
		return -1;
	}
	size_t n = 0, cap = 0;
	char *b = NULL;
	for (;;) {
		if (cap - n < 65536) {
			cap = cap ? cap * 2 : 1 << 20;
			char *nb = realloc(b, cap + 1);
			if (!nb) {
				free(b);
				errno = ENOMEM;
				return -1;
			}
			b = nb;
		}
		ssize_t r = read(fd, b + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			free(b);
			errno = e;
			return -1;
		}
		if (r == 0)
			break;
		n += (size_t)r;
		if (n > max) {
			free(b);
			errno = EFBIG;
			return -1;
		}
	}
	b[n] = 0;
	*out = b;
	*len = n;
	return 0;
}

int tool_unpack(const uint8_t *p, size_t n, int nfds, char ***argvp, int *argcp, const char **arg_of_fd)
{
	ipc_rd r;
	ipc_rd_init(&r, p, n);
	uint32_t argc = ipc_get_u32(&r);
	if (r.bad || argc < 1 || argc > TOOL_ARGC_MAX)
		return -1;
	char **argv = calloc(argc + 1, sizeof(char *));
	if (!argv)
		return -1;
	*argvp = argv;
	*argcp = (int)argc;
	for (uint32_t i = 0; i < argc; i++) {
		size_t l;
		const uint8_t *s = ipc_get_bytes(&r, TOOL_ARGV_MAX, &l);
		if (!s || memchr(s, 0, l) || !(argv[i] = malloc(l + 1)))
			return -1;
		memcpy(argv[i], s, l);
		argv[i][l] = 0;
	}
	uint32_t nfile = ipc_get_u32(&r);
	if (r.bad || nfile != (uint32_t)nfds)
		return -1;
	for (uint32_t i = 0; i < nfile; i++) {
		uint32_t k = ipc_get_u32(&r);
		if (r.bad || k < 1 || k >= argc)
			return -1;
		arg_of_fd[i] = argv[k];
	}
	return r.left ? -1 : 0;
}

int worker_tool(int sock)
{
	ipc_msg *m = calloc(1, sizeof(*m));
	char err[256];
	char **argv = NULL;
	int argc = 0, rc = 2;
	const uint8_t *p = NULL;
	size_t n = 0;
	if (!m)
		return 1;
	if (ipc_recv(sock, m, err, sizeof(err))) {
		fprintf(stderr, "mlxr-worker: tool: no request\n");
		free(m);
		return 1;
	}
	const char *args[IPC_MAX_FDS];
	if (m->type != IPC_TOOL || m->nfds < 1 || ipc_memfd_map(m->fds[0], TOOL_ARGV_MAX, &p, &n, err, sizeof(err)) ||
	    tool_unpack(p, n, m->nfds - 1, &argv, &argc, args)) {
		fprintf(stderr, "mlxr-worker: tool: malformed request\n");
		rc = 1;
		goto out;
	}
	g_arg = args;
	g_fd = m->fds + 1;
	g_nfile = m->nfds - 1;
	if (!strcmp(argv[0], "tokenize"))
		rc = tool_tokenize(argc, argv);
	else if (!strcmp(argv[0], "chat-render"))
		rc = tool_chat_render(argc, argv);
	else
		fprintf(stderr, "mlxr-worker: tool: unknown verb\n");
out:
	if (p && n)
		munmap((void *)p, n);
	ipc_close_fds(m);
	tool_argv_free(argv, argc);
	free(m);
	return rc;
}

void tool_argv_free(char **argv, int argc)
{
	for (int i = 0; argv && i < argc; i++)
		free(argv[i]);
	free(argv);
}

/* worker/tool.h — the developer verbs that parse a model's files without
 * running it (`mlxr tokenize`, `mlxr chat-render`) run here, inside a
 * sandboxed mlxr-worker, not in the broker: tokenizer.json, chat templates
 * (a Jinja subset) and messages files are untrusted bytes, and the broker
 * parses none of them (tests/py/test_privsep.py checks the broker has no
 * tokenizer or template code).
 *
 * Protocol (broker/toolrun.c is the other side): `mlxr-worker --tool`
 * applies the worker's sandbox, then reads one IPC_TOOL packet: fds[0] a
 * sealed memfd with the verb's argv (u32 argc, then each argument as
 * bytes; then u32 nfiles and, per file, the argv index it was opened
 * from), fds[1..nfiles] those files, opened read-only by the broker. The
 * verb writes its output to the inherited stdout and stderr; the exit
 * status is the verb's (0 ok, 1 error, 2 usage). */
#ifndef MLXR_TOOL_H
#define MLXR_TOOL_H

#include <stddef.h>
#include <stdint.h>

/* Receives the request on sock and runs it; returns the exit status. */
int worker_tool(int sock);

/* For the verbs: reads the file the broker opened for argument `arg` (a
 * pointer into the verb's argv) into a NUL-terminated malloc'd buffer of
 * at most max bytes. 0; -1 with errno (ENOENT: no file was attached for
 * that argument, EFBIG: over max). */
int tool_read(const char *arg, size_t max, char **out, size_t *len);

/* The argv blob of fds[0] (n bytes at p) for a request with nfds files:
 * u32 argc (1..4096), argc byte strings (no NUL inside), u32 nfiles ==
 * nfds, then per file the index (1..argc-1) of the argument it belongs to
 * (arg_of_fd[i] = argv[index]); nothing may follow. Every string is copied
 * and NUL-terminated. 0, or -1 on any violation; either way *argvp, once
 * set, is freed with tool_argv_free(*argvp, *argcp) (the caller starts
 * them at NULL, 0). Fuzzed by fuzz/tool_argv_fuzzer.c. */
int tool_unpack(const uint8_t *p, size_t n, int nfds, char ***argvp, int *argcp, const char **arg_of_fd);
void tool_argv_free(char **argv, int argc);

int tool_tokenize(int argc, char **argv);
int tool_chat_render(int argc, char **argv);

#endif

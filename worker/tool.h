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

/* Receives the request on sock and runs it; returns the exit status. */
int worker_tool(int sock);

/* For the verbs: reads the file the broker opened for argument `arg` (a
 * pointer into the verb's argv) into a NUL-terminated malloc'd buffer of
 * at most max bytes. 0; -1 with errno (ENOENT: no file was attached for
 * that argument, EFBIG: over max). */
int tool_read(const char *arg, size_t max, char **out, size_t *len);

int tool_tokenize(int argc, char **argv);
int tool_chat_render(int argc, char **argv);

#endif

/* broker/spawn.h — the one way the broker starts a child (mlxr-worker,
 * mlxr-fetcher): fork + exec of the sibling binary next to the broker's own
 * executable, with one end of a socketpair(AF_UNIX, SOCK_SEQPACKET) on fd 3,
 * every other descriptor above 2 closed, and a session of its own (the
 * terminal's Ctrl-C reaches the CLI, which cancels the request, not the
 * child). The child applies its own sandbox before reading the socket. */
#ifndef MLXR_SPAWN_H
#define MLXR_SPAWN_H

#include <stddef.h>
#include <sys/types.h>

/* Fills out with <directory of /proc/self/exe>/name. 0 or -1. */
int spawn_sibling_path(const char *name, char *out, size_t len);
/* Starts sibling binary `name` with argv (argv[0] included, NULL-ended).
 * On success *pid and *sock (the broker's end, close-on-exec) are set. */
int spawn_child(const char *name, char *const argv[], pid_t *pid, int *sock, char *err, size_t errlen);

/* Ends child pid: waits up to grace_ms for it to exit on its own (its
 * real status is then described), else SIGKILLs and reaps it. Writes what
 * happened into how ("exited with status N", "killed by signal N (...)",
 * "stopped by the broker"). */
void spawn_reap(pid_t pid, int grace_ms, char *how, size_t len);

#endif

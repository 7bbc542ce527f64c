/* worker/serve.h — the worker's side of the IPC protocol (common/ipc.h):
 * after its sandbox is in place, mlxr-worker serves the broker's requests
 * on one socket until the broker hangs up. Every message from the broker
 * is still checked (types, counts, seals, sizes). */
#ifndef MLXR_SERVE_H
#define MLXR_SERVE_H

/* Serves until EOF (returns 0) or a protocol error (returns 1, after
 * writing the reason to stderr). importer: only IPC_IMPORT is served. */
int worker_serve(int sock, int importer);
/* Test only (--ipc-fault-after N): after N requests, answer the next one
 * with a malformed packet, to prove the broker ends such a worker and
 * keeps serving. -1: never. */
extern int worker_fault_after;
/* The GPU worker (worker_main.c): the device backend every loaded session
 * uses (NULL: the CPU), and the lockdown step run once the first LOAD has
 * been answered, whatever its outcome (its seccomp filter; nonzero ends
 * the worker). */
struct session_gpu;
extern const struct session_gpu *worker_gpu;
extern int (*worker_after_load)(void);

#endif

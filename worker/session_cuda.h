/* worker/session_cuda.h — the GPU backend of a session (session.h's
 * session_gpu) on CUDA device 0. Linked only into a worker built with
 * nvcc (MLXR_CUDA). */
#ifndef MLXR_SESSION_CUDA_H
#define MLXR_SESSION_CUDA_H

#include <stddef.h>

#include "worker/session.h"

extern const session_gpu session_cuda;
/* cuInit, the context, the stream, the pinned slots (kc_init(0)). Call
 * after the GPU worker's Landlock step and before its seccomp step. */
int session_cuda_init(char *err, size_t errlen);

#endif

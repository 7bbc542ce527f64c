/* worker/exec.h — runs one generation request (common/wcapi.h) on a
 * session: renders the conversation (trimming the oldest turns when asked),
 * tokenizes, generates, and reports typed events: text, reasoning (Qwen3
 * <think> blocks), prefill progress, end. Used by the worker's IPC loop. */
#ifndef MLXR_EXEC_H
#define MLXR_EXEC_H

#include "common/wcapi.h"
#include "worker/session.h"

int exec_generate(session *s, const wc_request *r, wc_event_fn fn, void *arg, wc_error *e);

#endif

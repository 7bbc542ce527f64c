/* worker/exec.h — runs one generation request (common/wcapi.h) on a
 * session: renders the conversation (trimming the oldest turns when asked),
 * tokenizes, generates, and reports typed events: text, reasoning (Qwen3
 * <think> blocks), prefill progress, end. Used by the worker's IPC loop. */
#ifndef MLXR_EXEC_H
#define MLXR_EXEC_H

#include "common/wcapi.h"
#include "worker/session.h"

/* check (may be NULL) is polled once per decode step with arg; nonzero
 * cancels, as a nonzero return from fn does. */
int exec_generate(session *s, const wc_request *r, wc_event_fn fn, int (*check)(void *arg), void *arg, wc_error *e);
int exec_bench(session *s, const wc_bench_req *r, wc_bench_res *out, wc_error *e);
/* Developer requests (mlxr eval): teacher-forced logits [n][vocab] into
 * `logits` (batched prefill, or one token at a time with decode); greedy
 * ids after `ids` with EOS not special; prompt ids of a conversation. */
int exec_logits(session *s, const int *ids, size_t n, int decode, float *logits, wc_error *e);
int exec_greedy(session *s, const int *ids, size_t n, int gen, int *out, wc_error *e);
int exec_chat_ids(session *s, const wc_request *r, int **ids, size_t *n, wc_error *e);

#endif

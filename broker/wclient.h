/* broker/wclient.h — the broker's handle on a model-running worker.
 *
 * Everything that runs a model (run, chat, bench, eval, serve) goes through
 * this interface: the broker validates the model directory, starts the
 * worker, and from then on only sends requests and reads typed events
 * (text delta, reasoning delta, progress, end). The broker never sees
 * model internals, and treats everything the worker sends as hostile.
 *
 * Threads: a wclient serves one request at a time; callers serialise
 * (the HTTP server queues requests in arrival order).
 *
 * Failure: a worker that crashes, is killed or breaks protocol fails the
 * running request with WC_ERR_WORKER and is restarted for the next one.
 */
#ifndef MLXR_WCLIENT_H
#define MLXR_WCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/wcapi.h"

typedef struct wclient wclient;

typedef struct {
	int ctx;        /* context tokens; 0 = 4096, capped by the model */
	int sealed;     /* copy weights into sealed memfds after validation */
	int no_sandbox; /* debugging only: the worker runs without its sandbox */
} wclient_opts;

typedef wc_info wclient_info;

/* Which device every worker started from now on runs its model on:
 * "auto" (the default: CUDA where the worker was built with it and a
 * device exists, else the CPU), "cpu" or "cuda". Without a call,
 * $MLXR_DEVICE, else auto. Returns -1 for any other name. */
int wclient_set_device(const char *device);
/* --fast-prefill: every worker started from now on is asked to run its
 * prefill GEMMs and attention on f16 operands (CUDA only, kcuda.h
 * KC_GEMM_FAST / KC_ATT_FAST; a worker on the CPU ignores it, so
 * auto may still fall back). Without a call, $MLXR_FAST_PREFILL: 1 on, 0
 * or unset or empty off, any other value fails the worker's start naming
 * it. */
void wclient_set_fast_prefill(void);

int wclient_start(wclient **out, const char *model_dir, const wclient_opts *o, wc_error *e);
const wclient_info *wclient_info_get(const wclient *c);
int wclient_generate(wclient *c, const wc_request *r, wc_event_fn fn, void *arg, wc_error *e);
/* Plain text to ids (special: recognise special tokens everywhere). */
int wclient_tokenize(wclient *c, const char *text, size_t len, int special, int **ids, size_t *n, wc_error *e);
int wclient_detokenize(wclient *c, const int *ids, size_t n, char **out, size_t *len, wc_error *e);
int wclient_bench(wclient *c, const wc_bench_req *r, wc_bench_res *out, wc_error *e);
/* Developer requests behind `mlxr eval` (tests compare them with mlx-lm):
 * logits [n][vocab] (malloc'd), greedy ids (EOS not special), prompt ids
 * of a conversation (r->msgs) as generation would see them. */
int wclient_logits(wclient *c, const int *ids, size_t n, int decode, float **logits, wc_error *e);
int wclient_greedy(wclient *c, const int *ids, size_t n, int gen, int **out, wc_error *e);
int wclient_chat_ids(wclient *c, const wc_request *r, int **ids, size_t *n, wc_error *e);
void wclient_stop(wclient *c);

/* `mlxr import`: a sandboxed importer worker converts the GGUF file
 * (read-only fd) into the four output files the broker opened (in order:
 * model.safetensors, config.json, tokenizer.json, tokenizer_config.json).
 * summary receives "arch\ttensors\texact\trequantized\tdense". The broker
 * validates the result like any model before it enters the store. */
int wclient_import(int gguf_fd, const int outs[4], int bits, int group_size, int no_sandbox, char *summary,
		   size_t slen, wc_error *e);

#endif

/* worker/session.h — one model ready to generate: weights, tokenizer,
 * chat template, KV cache, and the generation loop (prefill in batches,
 * decode token by token, stop on EOS / stop strings / max tokens /
 * cancellation, streaming only complete UTF-8).
 *
 * The KV cache is kept between calls: session_generate() reuses the longest
 * prefix shared with what the cache already holds, so a follow-up chat turn
 * only prefills its new tokens (stats.prefilled counts them). */
#ifndef MLXR_SESSION_H
#define MLXR_SESSION_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/chat.h"
#include "worker/model.h"
#include "worker/sampler.h"
#include "worker/tokenizer.h"
#include "common/wcapi.h"

#define SESSION_MAX_STOPS 8
#define SESSION_PREFILL_BATCH 256
/* Prompt tokens per forward call on a GPU: the tensor-core GEMM and the
 * prompt attention want large n (cuda-bench: Llama-3.2-1B prefill of 4096
 * tokens 28.8K tok/s in one call against 13.7K through the worker in
 * 256-token calls; 1024-token calls still lost ~10% at 4096 tokens on the
 * 1B and 4B shapes against one call, H100, 2026-12-06). Calls that ask for
 * every row's logits (exec_logits) take at most SESSION_LOGITS_BATCH_GPU
 * tokens: the host and the device keep that many rows of vocab floats. */
#define SESSION_PREFILL_BATCH_GPU 4096
#define SESSION_LOGITS_BATCH_GPU 1024

struct session_gpu;

typedef struct session {
	model m;
	tokenizer *tok;
	chat_config chat;
	int chat_ok;          /* template recognised (else ChatML fallback) */
	char chat_note[256];  /* why the fallback was used, for the user */
	int add_bos;          /* prepend BOS to plain prompts (tokenizer_config add_bos_token) */
	int stop_ids[16];
	int n_stop_ids;
	model_state st;
	int prefill_batch;    /* prompt tokens per forward call (>= st.max_batch) */
	int *cache_ids;       /* ids whose K/V are in st (st.pos of them) */
	size_t cache_cap;
	/* A device that runs the forward pass (set before session_init; NULL:
	 * the CPU). With one, st keeps only the host logits the sampler reads
	 * ([max_batch][vocab]: the rows of an all-logits call); st.pos and
	 * st.ctx are still the cache's position and size, its K/V live on the
	 * device (gh). */
	const struct session_gpu *gpu;
	void *gh;
	char device[96];      /* "cpu (N threads, kernels)" or the GPU's name */
} session;

/* The device backend's operations (worker/session_cuda.c). */
typedef struct session_gpu {
	/* Uploads s->m, makes the device cache of ctx tokens, fills
	 * s->device. */
	int (*open)(session *s, int ctx, char *err, size_t errlen);
	void (*close)(session *s);
	/* model_forward on the device at s->st.pos (n <= prefill_batch;
	 * all_logits: n <= st.max_batch); s->st.pos += n. copy: the logits
	 * rows to s->st.logits ([n][vocab] if all_logits, else the last row). */
	int (*forward)(session *s, const int *ids, int n, int all_logits, int copy);
	/* One greedy step chosen on the device from the current logits, for
	 * position pos (steps queue without waiting; see
	 * forward_cuda.h gpu_greedy_queue), then its token. */
	int (*greedy_queue)(session *s);
	int (*greedy_token)(session *s, int pos, int *tok);
	/* Token selection on the device for every other sampler setting it
	 * covers: sample_begin returns 1 after taking the parameters, the
	 * sampler's rng state and the prompt ids (the penalties' history), 0
	 * if the CPU sampler must run instead, -1 on a device error;
	 * sample_queue then queues one step as greedy_queue does (its token
	 * read with greedy_token); the same token as sampler_pick. */
	int (*sample_begin)(session *s, const sampler_params *p, uint64_t rng, const int *ids, size_t n);
	int (*sample_queue)(session *s);
	/* Sets the cache position (drops what lies after it). */
	int (*set_pos)(session *s, int pos);
	int (*bench)(session *s, const wc_bench_req *r, wc_bench_res *out, char *err, size_t errlen);
} session_gpu;

typedef struct {
	sampler_params sp;
	int max_tokens;                   /* <= 0: until EOS or the context is full */
	const char *stops[SESSION_MAX_STOPS];
	int n_stops;
	volatile sig_atomic_t *cancel;    /* generation stops when *cancel != 0 */
	/* Called after each prefill batch (may be NULL); nonzero cancels. */
	int (*progress)(void *arg, size_t done, size_t total);
	/* Called once per decode step (may be NULL); nonzero cancels. */
	int (*check)(void *arg);
} gen_params;

typedef struct {
	size_t prompt_tokens;
	size_t prefilled;      /* prompt tokens actually run (not reused from the cache) */
	size_t generated;
	double prefill_s, decode_s, ttft_s;
	int stop_reason;       /* 0 eos, 1 stop string, 2 max tokens, 3 context full, 4 cancelled */
} gen_stats;

/* Returns nonzero to stop generation. */
typedef int (*session_emit)(void *arg, const char *text, size_t len);

/* How the CPU backend holds the weights: NULL (the default), in the
 * 2 MiB-aligned file mapping, huge pages advised (fast load, shares the
 * page cache; decode at full speed when the page cache holds the file in
 * large folios); with MLXR_WEIGHTS=copy, the kernel pool's parallel-for:
 * copied into private huge-page memory at load (model_load_ex). */
model_par_fn session_weights_par(void);
/* Loads a model directory (model_load + the small files) in-process. */
int session_open(session *s, const char *dir, int ctx, char *err, size_t errlen);
/* Finishes a session whose s->m is already built (the worker builds it from
 * the broker's validated parts): tokenizer, chat template, stop ids, KV
 * cache. On error the whole session is closed. */
#include "common/modelfiles.h"
int session_init(session *s, const mf_files *f, int ctx, char *err, size_t errlen);
void session_close(session *s);

/* Plain text to ids (BOS added when the tokenizer config asks for it). */
int session_encode_plain(session *s, const char *text, size_t len, int **ids, size_t *n, char *err, size_t errlen);
/* Raw text to ids with no BOS; special: special tokens are recognised
 * everywhere in it (legacy completions, /tokenize with special). */
int session_encode_raw(session *s, const char *text, size_t len, int special, int **ids, size_t *n, char *err,
		       size_t errlen);
/* A conversation through the chat template to ids (message text is plain
 * text: it can never produce a control token). */
int session_encode_chat(session *s, const chat_msg *msgs, size_t n, const chat_opts *o, int **ids, size_t *nids,
			char *err, size_t errlen);

int session_generate(session *s, const int *ids, size_t n, const gen_params *p, session_emit emit, void *arg,
		     gen_stats *stats, char *err, size_t errlen);

/* model_forward on whichever device the session uses; with a GPU the
 * logits are copied into s->st.logits. */
int session_forward(session *s, const int *ids, int n, int all_logits);

/* Drops the KV cache (next generate prefills everything). */
void session_reset(session *s);

double session_now(void);

#endif

/* worker/forward_cuda.h — the forward pass on a CUDA device: the same
 * straight-line pass as worker/forward.c, every architecture difference
 * the same flag of model_config, over the kc_* kernels (kernels/cuda/).
 *
 * Weights are copied to device memory once, in their packed form
 * (gpu_model_upload). The KV cache, scratch and logits live on the device
 * (gpu_state). A greedy decode step (argmax of the last logits, embedding
 * of that token, all layers, lm_head, position + 1) is captured once as a
 * CUDA graph and replayed; the host reads the generated ids back once per
 * gpu_decode_greedy call, never inside a step.
 *
 * Only built where nvcc exists (the Makefile defines MLXR_CUDA there).
 */
#ifndef MLXR_FORWARD_CUDA_H
#define MLXR_FORWARD_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/kcuda.h"
#include "worker/model.h"

typedef struct {
	kq_matrix q, k, v, o, gate, up, down; /* device copies (phi3: q = qkv_proj, gate = gate_up_proj) */
	float *q_bias, *k_bias, *v_bias, *o_bias; /* [rows] or NULL */
	float *attn_norm, *ffn_norm;             /* [hidden] */
	float *post_attn_norm, *post_ffn_norm;   /* [hidden], sandwich only */
	float *q_norm, *k_norm;                  /* [head_dim], qk_norm only */
} gpu_layer;

typedef struct {
	model_config cfg;      /* copy; its host inv_freq pointers are not owned */
	kq_matrix embed;       /* [vocab][hidden] */
	kq_matrix lm_head;     /* == embed when tied */
	float *final_norm;     /* [hidden] */
	float *inv_freq, *inv_freq_local; /* [rot_dim/2]; local == inv_freq when not separate */
	gpu_layer *layers;     /* [n_layers], host array of device pointers */
	uint64_t device_bytes; /* weight bytes on the device */
	uint64_t decode_bytes; /* weight bytes read per decoded token */
} gpu_model;

typedef struct {
	int ctx, max_batch;
	int logit_rows;        /* rows of logits (<= max_batch): all_logits calls' n */
	int pos;               /* host mirror of *d_pos */
	float *k, *v;          /* [n_layers][ctx][n_kv_heads][head_dim] */
	float *x, *xb, *q, *kk, *vv, *att, *tmp, *gate, *up, *fused; /* [max_batch][...] */
	float *logits;         /* [logit_rows][vocab] */
	void *att_scratch;
	int *d_pos;            /* [1] position of the next token */
	int *d_tokens;         /* [max_batch] input ids */
	int *d_next;           /* [1] the token the last greedy step chose */
	int *d_hist;           /* [ctx] d_hist[p] = greedy token chosen after position p */
	kc_graph *step;        /* captured greedy decode step, made on first use */
} gpu_state;

/* Uploads a loaded model (host weights as bound by model_load or
 * model_from_parts). kc_init must have been called. */
int gpu_model_upload(gpu_model *g, const model *m, char *err, size_t errlen);
/* Random weights with the shapes of cfg, made on the device (benchmarks):
 * every linear layer bits/group_size with f16 scales, embeddings too. */
int gpu_model_random(gpu_model *g, const model_config *cfg, int bits, int group_size, uint64_t seed, char *err,
		     size_t errlen);
void gpu_model_free(gpu_model *g);

/* Benchmarks only: leave the decode step's (n == 1) launches of these
 * phases out (garbage results; see forward_cuda.c). Returns the old mask. */
enum { GPU_SKIP_QKV = 1, GPU_SKIP_ATT = 2, GPU_SKIP_O = 4, GPU_SKIP_GLU = 8, GPU_SKIP_DOWN = 16, GPU_SKIP_LM = 32 };
int gpu_forward_skip(int mask);

/* The device cache of ctx tokens and the scratch of a call of up to
 * max_batch tokens; logits for logit_rows (1 <= logit_rows <= max_batch)
 * rows, what an all_logits call may ask for. */
int gpu_state_init(gpu_state *s, const gpu_model *g, int ctx, int max_batch, int logit_rows);
void gpu_state_free(gpu_state *s);
/* Drops the cache (next forward starts at position 0). */
void gpu_state_reset(gpu_state *s);

/* model_forward on the device: n tokens (host ids) at s->pos; logits stay
 * in s->logits (device): [n][vocab] if all_logits, else the last row.
 * Queued, except the upload of the ids. Returns 0, or -1 (context full,
 * n > max_batch, all_logits with n > logit_rows, bad id, or a CUDA error:
 * kc_error()). */
int gpu_forward(const gpu_model *g, gpu_state *s, const int *tokens, int n, int all_logits);
/* Copies `rows` (<= logit_rows) rows of logits to the host (waits for the
 * queued work). */
int gpu_logits(const gpu_model *g, const gpu_state *s, float *out, int rows);
/* Greedy decoding on the device from the logits in s->logits (row 0, as a
 * forward with all_logits == 0 leaves them): `steps` replays of the
 * captured step; out[i] = the i-th chosen id. The KV cache then holds the
 * chosen ids too (steps more positions). Returns 0 or -1; s->pos counts
 * the replays that were queued either way (it stays equal to *d_pos). */
int gpu_decode_greedy(const gpu_model *g, gpu_state *s, int steps, int *out);

/* Moves the cache position (host and device) to pos <= ctx: what lies at
 * pos and after is dropped. Waits for the queued work. */
int gpu_set_pos(gpu_state *s, int pos);
/* Pipelined greedy decoding, one step per call: queues the captured step
 * (argmax of the current logits = the token at position s->pos, then its
 * forward pass) and an asynchronous copy of that token to a pinned slot;
 * s->pos += 1. Nothing waits: several steps can be queued before the first
 * token is read with gpu_greedy_token. At most KC_STAGE_SLOTS steps may be
 * in flight. Returns 0, or -1 (context full, CUDA error). On -1 after the
 * step was queued (the token's copy failed) s->pos has still moved with
 * *d_pos, but that step's token cannot be read. */
int gpu_greedy_queue(const gpu_model *g, gpu_state *s);
/* The token that the step queued for position pos chose (waits for that
 * step only). */
int gpu_greedy_token(gpu_state *s, int pos, int *tok);
/* One decode step whose token another kernel chooses: pick(arg) queues it
 * (it reads the logits and *d_pos, writes d_next[0] and d_hist[*d_pos]:
 * the sampler, kernels/cuda/ksample.h); captured once with the forward
 * pass of d_next into *graph (the caller frees it with kc_graph_free),
 * replayed with s->pos += 1 and the token staged for gpu_greedy_token, as
 * in gpu_greedy_queue: nothing waits. pick runs only during the capture,
 * so what it queues must read its parameters from device memory.
 * Returns 0, or -1 (context full, CUDA error). */
int gpu_token_queue(const gpu_model *g, gpu_state *s, kc_graph **graph, int (*pick)(void *), void *arg);

#endif

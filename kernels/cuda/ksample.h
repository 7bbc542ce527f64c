/* kernels/cuda/ksample.h — token selection on the device: the canonical
 * sampler of worker/sampler.h (penalties, greedy, top-k with top-p /
 * min-p, no truncation, seeded draws), bit for bit the token sampler_pick
 * gives for the same logits, history and state (the arithmetic is
 * worker/sample_math.h, compiled on both sides).
 *
 * Three kernels. k_sample_part, one block per 2048 entries of the
 * vocabulary:
 * - penalties from the device-side history hist[*d_pos - repeat_last_n ..
 *   *d_pos) (prompt ids uploaded by the caller, generated ids written by
 *   k_sample itself): each block counts the ids of its slice in shared
 *   memory, each distinct id penalised once;
 * - top-k where k <= 128 and ceil(vocab / 2048) x k <= 3968 (k <= 62 on a
 *   128,256 vocabulary, e.g. Ollama's default 40; 52 on 151,936): the
 *   slice's k best (key desc, index asc) by a radix select of the k-th
 *   largest candidate word (key << 32 | ~index: distinct, so exactly k are
 *   at or above it) in shared memory.
 * Then k_sample, one block of 1024 threads:
 * - greedy (sampler_path's SAMPLER_GREEDY: temperature <= 0 or top_p 0):
 *   argmax by (key desc, index asc);
 * - top-k from the slices' candidates where they were made: the best k of
 *   them by the same select, a bitonic sort of those k, then as below
 *   from the weights on;
 * - other top-k (k <= KS_MAX_K): radix select of the k-th key (4 passes of 8
 *   bits, warp-aggregated shared-memory histograms), the candidates above
 *   it plus the ties at it (up to KS_TIES in shared memory, else a
 *   warp-serial scan for the lowest-index ties), a bitonic sort of them by
 *   key << 32 | ~index, then weights, chunked sums, top-p, min-p and the
 *   draw over <= 1024 entries;
 * - no truncation (vocab <= KS_MAX_ALL): the argmax from the slices'
 *   (k_sample_part), the weights of the whole vocabulary in index order
 *   and the chunk sums, one thread per chunk (k_sample_w, between the two:
 *   one block per slice), the chunk prefix by one thread, the draw's chunk
 *   found in parallel and walked by one thread.
 * The token goes to d_next[0] and d_hist[*d_pos], where kc_argmax puts the
 * greedy one; the splitmix state lives in device memory and advances once
 * per draw (as sampler_pick's).
 *
 * Measured on the H200 (tests/cuda/test_cuda_sample bench, 128,256
 * entries, launch and wait included; run 38, 2026-12-01): top-k 40 +
 * penalties (Ollama's defaults) 212 -> 39-44 us, no truncation (OpenAI's)
 * 143 -> 42 us, top-k 1024 (still the one block's radix select) ~250 us,
 * greedy + penalties 33-42 us. One block reading the row is latency-bound
 * (~25-40 us a pass over 512 KB); the passes that remain in one block are
 * the greedy argmax and the top-k above the multi-block limit.
 *
 * Not covered (the caller keeps the CPU sampler): top-p / min-p without
 * top-k (a sort of the whole vocabulary), top_k > KS_MAX_K, and no
 * truncation over more than KS_MAX_ALL entries.
 *
 * Streams: the kernel runs on the kc stream (kc_stream()), ordered after
 * the forward pass that wrote the logits; ks_sample_queue only queues it,
 * so the worker captures "pick + forward of the picked token" as one graph
 * (worker/forward_cuda.c gpu_token_queue) and replays it like the greedy
 * step, two steps in flight.
 */
#ifndef MLXR_KSAMPLE_H
#define MLXR_KSAMPLE_H

#include <stddef.h>
#include <stdint.h>

#define KS_MAX_K 1024
#define KS_TIES 2048
#define KS_MAX_ALL 262144 /* 1024 chunks of 256: one thread each */

enum { KS_GREEDY, KS_TOPK, KS_ALL, KS_MODE_COUNT };

/* The parameters as the kernel reads them (device copy, ks_set). */
typedef struct {
	int mode;             /* KS_* */
	int top_k;            /* KS_TOPK: 1..KS_MAX_K, < vocab */
	float temperature;    /* > 0 unless KS_GREEDY */
	float top_p;          /* in (0, 1) to truncate, else off (0 never gets
			       * here: sampler_path makes it KS_GREEDY) */
	float min_p;          /* > 0 to truncate */
	int penalize;         /* apply the three penalties below */
	int repeat_last_n;    /* window, > 0 when penalize */
	float repeat_penalty, presence_penalty, frequency_penalty;
	uint64_t rng;         /* splitmix state (sampler.c: seed ^ 0x9E3779B97F4A7C15) */
} ks_params;

typedef struct {
	int vocab;
	ks_params *d_params; /* [1] device */
	uint64_t *d_cand;    /* [KS_SORT] device: k_sample_part's candidates */
	uint64_t *d_pmax;    /* [ceil(vocab / 2048)] device: the slices' argmax (KS_ALL) */
	float *d_csum;       /* [ceil(vocab / 256)] device: the chunk sums (KS_ALL) */
	float *d_w;          /* [vocab] device scratch (KS_ALL weights) */
} ks_sampler;

/* kc_init must have run. Returns 0 or -1 (ks_error()). */
int ks_init(ks_sampler *k, int vocab);
void ks_free(ks_sampler *k);
const char *ks_error(void);
/* Uploads the parameters and the rng state (synchronous). -1 if p->mode
 * or its limits are not supported. */
int ks_set(ks_sampler *k, const ks_params *p);
/* Reads the rng state back (tests). */
int ks_get_rng(ks_sampler *k, uint64_t *rng);
/* Queues on the kc stream the pick of the token from logits[vocab]
 * (device; the penalties modify it in place) with the history d_hist[0 ..
 * *d_pos), written to d_next[0] and d_hist[*d_pos]. Capturable. dry != 0
 * launches the kernel without doing anything (warm-up). */
int ks_sample_queue(ks_sampler *k, float *logits, const int *d_pos, int *d_hist, int *d_next, int dry);
/* The same, then waits for the kc stream (tests, warm-up). */
int ks_sample(ks_sampler *k, float *logits, const int *d_pos, int *d_hist, int *d_next, int dry);

#endif

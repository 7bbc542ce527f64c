/* worker/sampler.h — token selection: greedy, temperature, top-k, top-p,
 * min-p, repetition / presence / frequency penalties, seeded draws.
 * Order (as llama.cpp applies them): penalties, top-k, temperature,
 * softmax, top-p, min-p, draw. temperature <= 0 or top_p 0 is greedy
 * (argmax after penalties). Same seed, same logits: same token.
 *
 * The canonical definition (the GPU sampler, kernels/cuda/ksample.cu,
 * computes the same token bit for bit; the arithmetic and the summation
 * order are in worker/sample_math.h):
 * - penalties over the last repeat_last_n ids of the history, once per
 *   distinct id (sm_penalize);
 * - temperature <= 0, or top_p not > 0 (0: keep only the most probable
 *   token, as llama.cpp does and OpenAI clients expect): sampler_argmax
 *   (first index of the largest logit, NaN never wins), no draw;
 * - candidates and walk order: top_k in (0, vocab): the k largest by
 *   (logit desc, index asc), in that order; else if top_p in (0, 1) or
 *   min_p > 0: the whole vocabulary in that order; else (no truncation):
 *   the whole vocabulary in index order;
 * - weights e_i = sm_exp((l_i - max) / temperature); the normaliser Z is
 *   the chunked sum of e over the candidates, in walk order for top-k, in
 *   index order when the candidates are the whole vocabulary;
 * - top-p keeps walk positions up to the first i with cum_i >= top_p * Z;
 *   min-p then stops at the first position j >= 1 with e_j < min_p * e_0;
 * - one splitmix draw (seeded by seed) per pick with temperature > 0: the
 *   first kept i with r < cum_i, r = sm_draw_point(bits, cum_{n-1}); if
 *   that total is not > 0 (NaN logits), the argmax. */
#ifndef MLXR_SAMPLER_H
#define MLXR_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

/* A zeroed sampler_params is greedy (top_p 0): start from
 * sampler_defaults or sampler_neutral and set what was given. Callers
 * reject top_p outside [0, 1] and NaN (the CLI, the HTTP API and the IPC
 * decoder do); whatever reaches the sampler anyway never widens it: not
 * > 0 is greedy, >= 1 is off. */
typedef struct {
	float temperature;      /* <= 0: greedy */
	int top_k;              /* <= 0: off */
	float top_p;            /* >= 1: off; 0 (not > 0): greedy */
	float min_p;            /* <= 0: off */
	float repeat_penalty;   /* 1: off; >1 discourages tokens in the last repeat_last_n */
	int repeat_last_n;
	float presence_penalty; /* subtracted once per token seen */
	float frequency_penalty;/* subtracted per occurrence */
	uint64_t seed;
} sampler_params;

typedef struct {
	sampler_params p;
	uint64_t rng;
	int vocab;
	int *idx;     /* [vocab] scratch */
	float *prob;  /* [vocab] scratch */
	int *count;   /* [vocab] occurrences in the window */
	uint64_t *cand; /* [vocab] scratch: candidates as key << 32 | ~index */
	float *cum;   /* [vocab] scratch: chunked prefix sums in walk order */
} sampler;

/* Ollama's defaults (temperature 0.8, top-k 40, top-p 0.9, repeat
 * penalty 1.1 over 64), seed 0. */
void sampler_defaults(sampler_params *p);
/* The whole distribution at temperature 1: no truncation (top_p 1), no
 * penalties (repeat_last_n 64 for any that are set later), seed 0; the
 * OpenAI API's defaults. */
void sampler_neutral(sampler_params *p);
int sampler_init(sampler *s, int vocab, const sampler_params *p);
void sampler_free(sampler *s);
/* Picks the next token from logits[vocab] (modified in place) given the
 * ids generated and prompted so far. */
int sampler_pick(sampler *s, float *logits, const int *hist, size_t nhist);
int sampler_argmax(const float *logits, int n);
/* Which path sampler_pick takes for these parameters (tests, the GPU
 * backend's choice of what it supports). */
enum { SAMPLER_GREEDY, SAMPLER_TOPK, SAMPLER_SORTED, SAMPLER_ALL, SAMPLER_PATH_COUNT };
int sampler_path(const sampler_params *p, int vocab);
/* Whether repeat/presence/frequency penalties change any logit. */
int sampler_penalized(const sampler_params *p);

#endif

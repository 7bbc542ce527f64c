/* worker/sampler.h — token selection: greedy, temperature, top-k, top-p,
 * min-p, repetition / presence / frequency penalties, seeded draws.
 * Order (as llama.cpp applies them): penalties, top-k, temperature,
 * softmax, top-p, min-p, draw. temperature <= 0 is greedy (argmax after
 * penalties). Same seed, same logits: same token. */
#ifndef MLXR_SAMPLER_H
#define MLXR_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
	float temperature;      /* <= 0: greedy */
	int top_k;              /* <= 0: off */
	float top_p;            /* >= 1: off */
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
} sampler;

void sampler_defaults(sampler_params *p);
int sampler_init(sampler *s, int vocab, const sampler_params *p);
void sampler_free(sampler *s);
/* Picks the next token from logits[vocab] (modified in place) given the
 * ids generated and prompted so far. */
int sampler_pick(sampler *s, float *logits, const int *hist, size_t nhist);
int sampler_argmax(const float *logits, int n);

#endif

/* bench/sampler_bench.c — time of one sampler_pick on a 128,256-entry
 * vocabulary (Llama 3) with logits shaped like a language model's (a few
 * dominant tokens over a normal-ish body), for the parameter sets users
 * send: Ollama's defaults, OpenAI's, top-p alone, min-p alone, greedy with
 * a repetition penalty. Not a test: `make BUILD=b b/sampler-bench`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker/sampler.h"

#define NV 128256
#define REPS 200

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void)
{
	float *l0 = malloc(sizeof(float) * NV), *l = malloc(sizeof(float) * NV);
	uint64_t x = 1;
	for (int i = 0; i < NV; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		double u = (double)(x >> 11) / 9007199254740992.0;
		l0[i] = (float)(4.0 * (u - 0.5) + (i % 997 == 0 ? 12.0 : 0.0));
	}
	int hist[64];
	for (int i = 0; i < 64; i++)
		hist[i] = (i * 7919) % NV;
	struct {
		const char *name;
		sampler_params p;
	} sets[6];
	for (int i = 0; i < 6; i++)
		sampler_neutral(&sets[i].p); /* T 1, no truncation, no penalties */
	sets[0].name = "ollama (T 0.8 k 40 p 0.9 rep 1.1/64)";
	sampler_defaults(&sets[0].p);
	sets[1].name = "openai (T 1, top_p 1)";
	sets[2].name = "top_p 0.9 alone (T 1)";
	sets[2].p.top_p = 0.9f;
	sets[3].name = "min_p 0.05 alone (T 1)";
	sets[3].p.min_p = 0.05f;
	sets[4].name = "top_k 1024 (T 1)";
	sets[4].p.top_k = 1024;
	sets[5].name = "greedy, rep 1.1/64";
	sets[5].p.temperature = 0.0f;
	sets[5].p.repeat_penalty = 1.1f;
	for (int k = 0; k < 6; k++) {
		sampler s;
		if (sampler_init(&s, NV, &sets[k].p))
			return 1;
		double best = 1e9;
		int tok = 0;
		for (int r = 0; r < REPS; r++) {
			memcpy(l, l0, sizeof(float) * NV);
			double t0 = now();
			tok ^= sampler_pick(&s, l, hist, 64);
			double t = now() - t0;
			best = t < best ? t : best;
		}
		sampler_free(&s);
		printf("%-40s %8.3f ms (best of %d; token xor %d)\n", sets[k].name, best * 1e3, REPS, tok);
	}
	free(l0);
	free(l);
	return 0;
}

/* tests/unit/test_sampler.c — token selection: greedy is argmax, the same
 * seed gives the same draws, top-k / top-p / min-p only ever pick allowed
 * tokens, penalties move the choice. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/sampler.h"

static int fails;
#define CHECK(cond, ...) do { if (!(cond)) { printf("FAIL " __VA_ARGS__); printf("\n"); fails++; } } while (0)

#define V 50

static void fill(float *l)
{
	for (int i = 0; i < V; i++)
		l[i] = (float)((i * 37) % V) / 10.0f; /* max at i where (i*37)%50 == 49: i = 27 */
}

static int pick(sampler_params *p, const int *hist, size_t nh)
{
	sampler s;
	float l[V];
	fill(l);
	sampler_init(&s, V, p);
	int t = sampler_pick(&s, l, hist, nh);
	sampler_free(&s);
	return t;
}

int main(void)
{
	sampler_params p;
	memset(&p, 0, sizeof(p));
	p.repeat_penalty = 1.0f;
	CHECK(pick(&p, NULL, 0) == 27, "greedy is argmax");
	/* Repetition penalty on the argmax moves greedy to the runner-up. */
	int hist[1] = { 27 };
	p.repeat_penalty = 2.0f;
	p.repeat_last_n = 64;
	int t = pick(&p, hist, 1);
	CHECK(t != 27, "repeat penalty moves greedy away from a repeated token (got %d)", t);
	p.repeat_penalty = 1.0f;
	p.presence_penalty = 10.0f;
	CHECK(pick(&p, hist, 1) != 27, "presence penalty");
	p.presence_penalty = 0;
	/* Seeded sampling: same seed same sequence; different seeds differ. */
	p.temperature = 1.5f;
	p.seed = 42;
	sampler a, b;
	sampler_init(&a, V, &p);
	sampler_init(&b, V, &p);
	int same = 1, distinct = 0, seen[V] = { 0 };
	for (int i = 0; i < 200; i++) {
		float la[V], lb[V];
		fill(la);
		fill(lb);
		int x = sampler_pick(&a, la, NULL, 0), y = sampler_pick(&b, lb, NULL, 0);
		same &= x == y;
		if (!seen[x]++)
			distinct++;
	}
	sampler_free(&a);
	sampler_free(&b);
	CHECK(same, "same seed, same draws");
	CHECK(distinct > 3, "temperature 1.5 draws several tokens (%d)", distinct);
	/* top-k 3: only the three largest logits (4.9, 4.8, 4.7). */
	p.top_k = 3;
	sampler_init(&a, V, &p);
	for (int i = 0; i < 300; i++) {
		float l[V];
		fill(l);
		int x = sampler_pick(&a, l, NULL, 0);
		CHECK(l[x] >= 4.7f, "top-k 3 picked token %d with logit %g", x, l[x]);
	}
	sampler_free(&a);
	/* top-p tiny: only the argmax survives. */
	p.top_k = 0;
	p.top_p = 0.01f;
	for (int s = 0; s < 20; s++) {
		p.seed = (uint64_t)s;
		CHECK(pick(&p, NULL, 0) == 27, "top-p 0.01 keeps only the argmax");
	}
	/* min-p 0.99: only tokens within 1% of the best probability. */
	p.top_p = 1.0f;
	p.min_p = 0.99f;
	for (int s = 0; s < 20; s++) {
		p.seed = (uint64_t)s;
		CHECK(pick(&p, NULL, 0) == 27, "min-p 0.99 keeps only the argmax");
	}
	if (fails) {
		printf("%d FAILED\n", fails);
		return 1;
	}
	printf("all sampler tests passed\n");
	return 0;
}

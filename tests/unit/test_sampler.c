/* tests/unit/test_sampler.c — token selection: greedy is argmax, the same
 * seed gives the same draws, top-k / top-p / min-p only ever pick allowed
 * tokens, penalties move the choice, top_p 0 is greedy after penalties at
 * any temperature; sm_exp is within 2 ulp of exp; the
 * fast paths of sampler_pick give the token of a slow, straightforward
 * implementation of the canonical definition (sampler.h) over many random
 * logits (ties included), parameters and seeds; draws without truncation
 * follow the distribution. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_rng.h"
#include "worker/sample_math.h"
#include "worker/sampler.h"

static int fails;
#define CHECK(cond, ...) do { if (!(cond)) { printf("FAIL " __VA_ARGS__); printf("\n"); fails++; } } while (0)

#define NV 50

static void fill(float *l)
{
	for (int i = 0; i < NV; i++)
		l[i] = (float)((i * 37) % NV) / 10.0f; /* max at i where (i*37)%50 == 49: i = 27 */
}

static int pick(sampler_params *p, const int *hist, size_t nh)
{
	sampler s;
	float l[NV];
	fill(l);
	sampler_init(&s, NV, p);
	int t = sampler_pick(&s, l, hist, nh);
	sampler_free(&s);
	return t;
}

/* ---- the canonical definition, written the slow and obvious way ---- */

static const float *ref_l;
static int ref_cmp(const void *a, const void *b)
{
	int i = *(const int *)a, j = *(const int *)b;
	uint32_t x = sm_key(ref_l[i]), y = sm_key(ref_l[j]);
	if (x != y)
		return x < y ? 1 : -1;
	return i < j ? -1 : i > j;
}

/* chunked prefix sums of w[0..n) (sample_math.h), written out */
static void ref_cum(const float *w, int n, float *cum)
{
	float S = 0;
	int nch = (n + SM_CHUNK - 1) / SM_CHUNK;
	for (int c = 0; c < nch; c++) {
		float acc = 0;
		for (int i = c * SM_CHUNK; i < n && i < (c + 1) * SM_CHUNK; i++) {
			acc = acc + w[i];
			cum[i] = S + acc;
		}
		S = S + acc;
	}
}

static int ref_pick(const sampler_params *p, uint64_t *rng, float *l, int V, const int *hist, size_t nh)
{
	/* penalties: each distinct id of the window once, with its count */
	if (p->repeat_last_n > 0 && ((p->repeat_penalty > 0 && p->repeat_penalty != 1.0f) ||
				     p->presence_penalty != 0 || p->frequency_penalty != 0)) {
		size_t start = nh > (size_t)p->repeat_last_n ? nh - (size_t)p->repeat_last_n : 0;
		for (size_t i = start; i < nh; i++) {
			int t = hist[i], seen = 0, c = 0;
			if (t < 0 || t >= V)
				continue;
			for (size_t j = start; j < i; j++)
				seen |= hist[j] == t;
			if (seen)
				continue;
			for (size_t j = i; j < nh; j++)
				c += hist[j] == t;
			l[t] = sm_penalize(l[t], c, p->repeat_penalty, p->presence_penalty, p->frequency_penalty);
		}
	}
	int *order = malloc(sizeof(int) * (size_t)V);
	/* calloc: gcc -O2 otherwise warns that w may be read uninitialised */
	float *w = calloc((size_t)V, sizeof(float)), *cum = calloc((size_t)V, sizeof(float));
	for (int i = 0; i < V; i++)
		order[i] = i;
	ref_l = l;
	qsort(order, (size_t)V, sizeof(int), ref_cmp); /* order[0]: the argmax */
	int tok = order[0];
	if (p->temperature <= 0 || !(p->top_p > 0)) /* greedy: no draw */
		goto out;
	uint64_t bits = sm_splitmix(rng);
	float mx = l[order[0]], Z;
	int n = V, topk = p->top_k > 0 && p->top_k < V;
	int trunc = topk || (p->top_p > 0 && p->top_p < 1) || p->min_p > 0;
	if (topk)
		n = p->top_k;
	if (!topk) { /* Z over the whole vocabulary, in index order */
		for (int i = 0; i < V; i++)
			w[i] = sm_exp(sm_arg(l[i], mx, p->temperature));
		ref_cum(w, V, cum);
		Z = cum[V - 1];
	}
	if (!trunc) /* no truncation: walk in index order */
		for (int i = 0; i < V; i++)
			order[i] = i;
	for (int i = 0; i < n; i++)
		w[i] = sm_exp(sm_arg(l[order[i]], mx, p->temperature));
	ref_cum(w, n, cum);
	if (topk)
		Z = cum[n - 1];
	if (p->top_p > 0 && p->top_p < 1)
		for (int i = 0; i < n; i++)
			if (cum[i] >= p->top_p * Z) {
				n = i + 1;
				break;
			}
	if (p->min_p > 0) {
		int m = 1;
		while (m < n && w[m] >= p->min_p * w[0])
			m++;
		n = m;
	}
	float total = cum[n - 1];
	if (!(total > 0))
		goto out; /* the argmax */
	float r = sm_draw_point(bits, total);
	tok = -1;
	for (int i = 0; i < n && tok < 0; i++)
		if (r < cum[i])
			tok = order[i];
out:
	free(order);
	free(w);
	free(cum);
	return tok;
}

static uint64_t trng = 0x243F6A8885A308D3ull;
static uint32_t rnd(void) { return (uint32_t)(test_xorshift(&trng) >> 11); }
static float frand(void) { return (float)(rnd() & 0xffffff) / 16777216.0f; }

/* Random logits: normal-ish spread, sometimes quantised (many ties),
 * sometimes with a few NaN / +-0 / -inf entries. */
static void rand_logits(float *l, int V, int kind)
{
	float scale = 1.0f + 8.0f * frand();
	for (int i = 0; i < V; i++) {
		float x = (frand() + frand() + frand() - 1.5f) * scale;
		if (kind == 1)
			x = (float)(int)(x * 2.0f) * 0.5f; /* few distinct values */
		if (kind == 2)
			x = 0.0f;
		l[i] = x;
	}
	if (kind == 3 && V > 8) {
		l[rnd() % V] = -0.0f;
		l[rnd() % V] = 0.0f;
		l[rnd() % V] = -INFINITY;
		l[rnd() % V] = NAN;
	}
}

static int ulps(float a, double ref)
{
	float r = (float)ref;
	if (a == r)
		return 0;
	int32_t x = (int32_t)sm_f2u(a), y = (int32_t)sm_f2u(r);
	return x > y ? x - y : y - x;
}

/* sm_exp over [-86, 0]: every 97th float, and the integers and halves */
static void test_exp(void)
{
	int worst = 0;
	float wx = 0;
	for (uint32_t u = 0x80000000u; u <= sm_f2u(-86.0f); u += 97) {
		float x = sm_u2f(u);
		int e = ulps(sm_exp(x), exp((double)x));
		if (e > worst) {
			worst = e;
			wx = x;
		}
	}
	for (float x = 0; x >= -86.0f; x -= 0.5f) {
		int e = ulps(sm_exp(x), exp((double)x));
		if (e > worst) {
			worst = e;
			wx = x;
		}
	}
	printf("sm_exp: worst %d ulp (at %g)\n", worst, wx);
	CHECK(worst <= 2, "sm_exp within 2 ulp of exp (worst %d at %.9g)", worst, wx);
	CHECK(sm_exp(0.0f) == 1.0f && sm_exp(-87.0f) == 0.0f && sm_exp(NAN) == 0.0f, "sm_exp(0) = 1, below -86 and NaN 0");
}

/* sampler_pick against ref_pick: `cases` random (logits, parameters,
 * history, seed), 3 picks each (the rng state carried on). */
static void test_vs_reference(void)
{
	const int Vs[] = { 1, 2, 7, 50, 300, 1000, 4099, 70000 };
	int cases = 0, mismatches = 0, paths[SAMPLER_PATH_COUNT] = { 0 };
	for (int c = 0; c < 1200; c++) {
		int V = Vs[rnd() % (sizeof(Vs) / sizeof(Vs[0]))];
		if (V == 70000 && rnd() % 8)
			V = 3000;
		sampler_params p;
		sampler_neutral(&p); /* every field is set below */
		const float temps[] = { 0, 0.3f, 0.8f, 1, 1.7f };
		const int ks[] = { 0, 0, 1, 3, 40, 65, 100, 257, 1024 };
		const float tps[] = { 1, 1, 0.9f, 0.5f, 0.1f, 0.999f, 0 };
		const float mps[] = { 0, 0, 0, 0.05f, 0.3f, 1.5f };
		p.temperature = temps[rnd() % 5];
		p.top_k = ks[rnd() % 9];
		if (rnd() % 10 == 0)
			p.top_k = V - (int)(rnd() % 2); /* V - 1 (top-k) or V (off) */
		p.top_p = tps[rnd() % 7];
		p.min_p = mps[rnd() % 6];
		p.repeat_penalty = rnd() % 2 ? 1.0f : 0.5f + 1.5f * frand();
		p.repeat_last_n = (int)(rnd() % 80);
		p.presence_penalty = rnd() % 3 ? 0 : frand();
		p.frequency_penalty = rnd() % 3 ? 0 : frand();
		p.seed = rnd();
		size_t nh = rnd() % 100;
		int hist[100];
		for (size_t i = 0; i < nh; i++)
			hist[i] = (int)(rnd() % (uint32_t)(V < 20 ? V : 20)) * (V < 20 ? 1 : V / 20); /* repeats */
		float *l0 = malloc(sizeof(float) * (size_t)V), *la = malloc(sizeof(float) * (size_t)V),
		      *lb = malloc(sizeof(float) * (size_t)V);
		rand_logits(l0, V, (int)(rnd() % 4));
		sampler s;
		if (sampler_init(&s, V, &p)) {
			CHECK(0, "sampler_init");
			break;
		}
		uint64_t rng = p.seed ^ 0x9E3779B97F4A7C15ull;
		paths[sampler_path(&p, V)]++;
		for (int k = 0; k < 3; k++) {
			memcpy(la, l0, sizeof(float) * (size_t)V);
			memcpy(lb, l0, sizeof(float) * (size_t)V);
			int a = sampler_pick(&s, la, hist, nh), b = ref_pick(&p, &rng, lb, V, hist, nh);
			if (a != b && mismatches++ < 10)
				printf("FAIL case %d pick %d: V %d T %g k %d p %g minp %g rep %g/%d pres %g freq %g: fast %d ref %d\n",
				       c, k, V, p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty,
				       p.repeat_last_n, p.presence_penalty, p.frequency_penalty, a, b);
			cases++;
		}
		sampler_free(&s);
		free(l0);
		free(la);
		free(lb);
	}
	printf("vs reference: %d picks (greedy %d, top-k %d, sorted %d, all %d cases), %d differ\n", cases,
	       paths[SAMPLER_GREEDY], paths[SAMPLER_TOPK], paths[SAMPLER_SORTED], paths[SAMPLER_ALL], mismatches);
	CHECK(mismatches == 0, "sampler_pick equals the reference on every pick (%d differ)", mismatches);
	CHECK(paths[SAMPLER_TOPK] > 100 && paths[SAMPLER_SORTED] > 100 && paths[SAMPLER_ALL] > 50,
	      "every path was exercised");
}

/* Every weight 0 (Z == 0: all logits NaN, all -inf, or a +inf maximum)
 * with top-p alone: the sorted path's histogram once chose a threshold
 * above every weight, an empty prefix read at index -1 (ASan: heap
 * overflow in sampler_pick). The pick is the argmax (total not > 0). */
static void test_zero_total(void)
{
	const int Vs[] = { 10, 300, 70000 };
	for (int vi = 0; vi < 3; vi++)
		for (int kind = 0; kind < 3; kind++) {
			int V = Vs[vi];
			float *l = malloc(sizeof(float) * (size_t)V);
			for (int i = 0; i < V; i++)
				l[i] = kind == 0 ? NAN : kind == 1 ? -INFINITY : (float)(i % 17);
			if (kind == 2)
				l[V / 3] = INFINITY;
			sampler_params p;
			sampler_neutral(&p);
			p.top_p = 0.9f;
			p.seed = 3;
			sampler s;
			sampler_init(&s, V, &p);
			int a = sampler_pick(&s, l, NULL, 0), want = kind == 2 ? V / 3 : 0;
			CHECK(sampler_path(&p, V) == SAMPLER_SORTED && a == want,
			      "top-p with every weight 0 (V %d, %s) picks the argmax %d (got %d)", V,
			      kind == 0 ? "NaN" : kind == 1 ? "-inf" : "+inf max", want, a);
			sampler_free(&s);
			free(l);
		}
}

/* Draws follow the distribution: 8 tokens with logits log(w), T = 1, no
 * truncation (index-order walk) and top-k 8 / top-p 0.999 (sorted walk);
 * 80000 draws each, fixed seed (deterministic); chi-square with 7 degrees
 * of freedom under 40 (p ~ 1e-6 for a correct sampler, so the bound says
 * "not grossly wrong" and cannot flake: the seed is fixed). */
static void test_distribution(void)
{
	const double w[8] = { 8, 1, 4, 2, 0.5, 6, 3, 0.25 };
	double wsum = 0;
	for (int i = 0; i < 8; i++)
		wsum += w[i];
	for (int mode = 0; mode < 3; mode++) {
		sampler_params p;
		sampler_neutral(&p);
		p.top_p = mode == 2 ? 0.999999f : 1.0f;
		p.top_k = mode == 1 ? 7 : 0;
		p.seed = 7;
		sampler s;
		sampler_init(&s, 8, &p);
		int n = 80000, cnt[8] = { 0 };
		for (int d = 0; d < n; d++) {
			float l[8];
			for (int i = 0; i < 8; i++)
				l[i] = (float)log(w[i]);
			cnt[sampler_pick(&s, l, NULL, 0)]++;
		}
		sampler_free(&s);
		double chi = 0, sum = mode == 1 ? wsum - 0.25 : wsum; /* top-k 7 drops the smallest */
		int dof = mode == 1 ? 6 : 7;
		for (int i = 0; i < 8; i++) {
			if (mode == 1 && i == 7) {
				CHECK(cnt[7] == 0, "top-k 7 never draws the smallest");
				continue;
			}
			double e = n * w[i] / sum;
			chi += (cnt[i] - e) * (cnt[i] - e) / e;
		}
		printf("distribution (%s): chi-square %.2f, %d dof\n", mode == 0 ? "no truncation" : mode == 1 ? "top-k 7" : "top-p",
		       chi, dof);
		CHECK(chi < 40, "draws follow the distribution (%s: chi-square %.1f)", mode == 0 ? "all" : "truncated", chi);
	}
}

/* top_p 0 keeps only the most probable token after the penalties: at
 * temperatures 0.3 to 1.7, with and without top-k / min-p, over random
 * logits and seeds, the pick is the reference's argmax after penalties
 * (ref_pick at temperature 0), the penalties moved it off the raw argmax
 * (so the check sees them), and no draw was made (the rng state is the
 * seed's: the GPU sampler's KS_GREEDY draws nothing either). Values that
 * callers reject but that reach the sampler anyway never widen it. */
static void test_top_p_zero(void)
{
	const int V = 1000;
	float *l0 = malloc(sizeof(float) * (size_t)V), *l = malloc(sizeof(float) * (size_t)V),
	      *lr = malloc(sizeof(float) * (size_t)V);
	const float temps[] = { 0.3f, 0.8f, 1.0f, 1.7f };
	const int ks[] = { 0, 40 };
	const float mps[] = { 0, 0.05f };
	int checked = 0, moved = 0;
	for (uint64_t seed = 1; seed <= 8; seed++) {
		rand_logits(l0, V, 0);
		int raw = sampler_argmax(l0, V), hist[3] = { raw, raw, 5 };
		for (int c = 0; c < 16; c++) {
			sampler_params p;
			sampler_neutral(&p);
			p.temperature = temps[c % 4];
			p.top_k = ks[c / 4 % 2];
			p.min_p = mps[c / 8];
			p.top_p = 0.0f;
			p.repeat_penalty = 50.0f;
			p.presence_penalty = 0.5f;
			p.seed = seed * 1000 + (uint64_t)c;
			sampler s;
			if (sampler_init(&s, V, &p)) {
				CHECK(0, "sampler_init");
				break;
			}
			sampler_params g = p;
			g.temperature = 0.0f;
			uint64_t unused = 0;
			memcpy(lr, l0, sizeof(float) * (size_t)V);
			int want = ref_pick(&g, &unused, lr, V, hist, 3);
			for (int k = 0; k < 3; k++) {
				memcpy(l, l0, sizeof(float) * (size_t)V);
				int got = sampler_pick(&s, l, hist, 3);
				CHECK(got == want, "top_p 0 at T %g (top-k %d, min-p %g, seed %llu): the argmax after penalties %d (got %d)",
				      p.temperature, p.top_k, p.min_p, (unsigned long long)p.seed, want, got);
				checked++;
			}
			CHECK(sampler_path(&p, V) == SAMPLER_GREEDY, "top_p 0 is the greedy path");
			CHECK(s.rng == (p.seed ^ 0x9E3779B97F4A7C15ull), "top_p 0 draws nothing");
			moved += want != raw;
			sampler_free(&s);
		}
	}
	CHECK(moved == 8 * 16, "the penalties moved the argmax in every case (%d of %d)", moved, 8 * 16);
	printf("top_p 0: %d picks, all the argmax after penalties\n", checked);
	sampler_params p;
	sampler_neutral(&p);
	const float wide[] = { -0.0f, -0.1f, NAN };
	for (int i = 0; i < 3; i++) {
		p.top_p = wide[i];
		CHECK(sampler_path(&p, V) == SAMPLER_GREEDY, "top_p %g (rejected by callers) is greedy, never off", wide[i]);
	}
	p.top_p = 1.5f;
	CHECK(sampler_path(&p, V) == SAMPLER_ALL, "top_p above 1 is off");
	p.top_p = 0.5f;
	CHECK(sampler_path(&p, V) == SAMPLER_SORTED, "top_p in (0, 1) truncates");
	free(l0);
	free(l);
	free(lr);
}

int main(void)
{
	sampler_params p;
	sampler_neutral(&p);
	p.temperature = 0.0f;
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
	sampler_init(&a, NV, &p);
	sampler_init(&b, NV, &p);
	int same = 1, distinct = 0, seen[NV] = { 0 };
	for (int i = 0; i < 200; i++) {
		float la[NV], lb[NV];
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
	sampler_init(&a, NV, &p);
	for (int i = 0; i < 300; i++) {
		float l[NV];
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
	test_exp();
	test_vs_reference();
	test_top_p_zero();
	test_zero_total();
	test_distribution();
	if (fails) {
		printf("%d FAILED\n", fails);
		return 1;
	}
	printf("all sampler tests passed\n");
	return 0;
}

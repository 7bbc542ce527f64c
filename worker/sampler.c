/* worker/sampler.c — see sampler.h (the canonical definition) and
 * sample_math.h (its arithmetic).
 *
 * Speed on a 128,256-entry vocabulary (v1 picked top-k with k passes over
 * the vocabulary, or qsort of all of it; numbers in the commit that
 * replaced it): top-k is one pass with a k-entry min-heap of
 * (key << 32 | ~index), then a sort of the k; no truncation needs no
 * sort at all (the draw walks index order); top-p / min-p without top-k
 * sort only a prefix of the order: the candidates with e >= a threshold
 * (min_p * e_0, or a weight below which a histogram says the top-p mass
 * is already reached), checked exactly afterwards, a full sort if not. */
#include "worker/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/sample_math.h"

void sampler_neutral(sampler_params *p)
{
	*p = (sampler_params){ .temperature = 1.0f, .top_p = 1.0f, .repeat_penalty = 1.0f, .repeat_last_n = 64 };
}

void sampler_defaults(sampler_params *p)
{
	/* Ollama's defaults, so `mlxr run` behaves as its users expect. */
	sampler_neutral(p);
	p->temperature = 0.8f;
	p->top_k = 40;
	p->top_p = 0.9f;
	p->repeat_penalty = 1.1f;
}

int sampler_init(sampler *s, int vocab, const sampler_params *p)
{
	memset(s, 0, sizeof(*s));
	s->p = *p;
	s->vocab = vocab;
	s->rng = p->seed ^ 0x9E3779B97F4A7C15ull;
	s->idx = malloc(sizeof(int) * (size_t)vocab);
	s->prob = malloc(sizeof(float) * (size_t)vocab);
	s->count = calloc((size_t)vocab, sizeof(int));
	s->cand = malloc(sizeof(uint64_t) * (size_t)vocab);
	s->cum = malloc(sizeof(float) * (size_t)vocab);
	if (!s->idx || !s->prob || !s->count || !s->cand || !s->cum) {
		sampler_free(s);
		return -1;
	}
	return 0;
}

void sampler_free(sampler *s)
{
	free(s->idx);
	free(s->prob);
	free(s->count);
	free(s->cand);
	free(s->cum);
	memset(s, 0, sizeof(*s));
}

int sampler_argmax(const float *l, int n)
{
	int best = 0;
	float bv = l[0];
	for (int i = 1; i < n; i++)
		if (l[i] > bv || (bv != bv && l[i] == l[i])) { /* NaN never wins */
			best = i;
			bv = l[i];
		}
	return best;
}

int sampler_penalized(const sampler_params *p)
{
	return p->repeat_last_n > 0 && ((p->repeat_penalty > 0 && p->repeat_penalty != 1.0f) ||
					p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
}

/* The one place that decides greedy: sampler_pick and the GPU backend's
 * choices (session.c's dev_greedy, session_cuda_ks_params) all ask here,
 * so top_p 0 reaches no path that would read it as "off". */
int sampler_path(const sampler_params *p, int vocab)
{
	if (p->temperature <= 0.0f || !(p->top_p > 0.0f))
		return SAMPLER_GREEDY;
	if (p->top_k > 0 && p->top_k < vocab)
		return SAMPLER_TOPK;
	if (p->top_p < 1.0f || p->min_p > 0)
		return SAMPLER_SORTED;
	return SAMPLER_ALL;
}

static uint64_t cand_of(const float *l, int i)
{
	return (uint64_t)sm_key(l[i]) << 32 | (uint32_t)~(uint32_t)i;
}

static int cand_idx(uint64_t c)
{
	return (int)~(uint32_t)c;
}

static int cmp_cand_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

/* cum[i] for w[0..n) in walk order (sample_math.h); returns cum[n-1]. */
static float chunked_cum(const float *w, int n, float *cum)
{
	float S = 0.0f;
	for (int c0 = 0; c0 < n; c0 += SM_CHUNK) {
		int c1 = n - c0 < SM_CHUNK ? n : c0 + SM_CHUNK;
		float acc = 0.0f;
		for (int i = c0; i < c1; i++) {
			acc = SM_ADD(acc, w[i]);
			cum[i] = SM_ADD(S, acc);
		}
		S = SM_ADD(S, acc);
	}
	return S;
}

/* first i in [0, n) with cum[i] >= t (or > t if strict); n if none.
 * cum is non-decreasing (sums of non-negative weights, rounding is
 * monotone), so a binary search finds the first. */
static int first_reaching(const float *cum, int n, float t, int strict)
{
	int lo = 0, hi = n;
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		if (strict ? t < cum[mid] : cum[mid] >= t)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* top-p, min-p and the draw over walk positions [0, n): weights w, their
 * chunked prefix sums cum, normaliser Z. walk NULL: index order. */
static int finish(const sampler_params *p, const int *walk, const float *w, const float *cum, int n, float Z,
		  uint64_t bits, int argmax)
{
	int m = n;
	if (p->top_p > 0 && p->top_p < 1.0f) {
		int i = first_reaching(cum, n, SM_MUL(p->top_p, Z), 0);
		if (i < n)
			m = i + 1;
	}
	if (p->min_p > 0) {
		float lim = SM_MUL(p->min_p, w[0]);
		int j = 1;
		while (j < m && w[j] >= lim)
			j++;
		m = j;
	}
	float total = cum[m - 1];
	if (!(total > 0.0f))
		return argmax;
	int i = first_reaching(cum, m, sm_draw_point(bits, total), 1);
	if (i >= m) /* cannot happen: the point lies below cum[m-1] */
		i = m - 1;
	return walk ? walk[i] : i;
}

/* The k largest candidates, in walk order, into s->cand[0..k). */
static void select_topk(sampler *s, const float *l, int k)
{
	uint64_t *h = s->cand;
	int V = s->vocab;
	for (int i = 0; i < k; i++)
		h[i] = cand_of(l, i);
	qsort(h, (size_t)k, sizeof(uint64_t), cmp_cand_desc);
	/* h sorted descending is a min-heap read from the end: turn it around
	 * so that h[0] is the smallest */
	for (int i = 0, j = k - 1; i < j; i++, j--) {
		uint64_t t = h[i];
		h[i] = h[j];
		h[j] = t;
	}
	/* lo: the root's logit as a float (-inf for NaN, whose key is the
	 * lowest): a logit below it cannot enter, one compare per entry */
	float lo = (uint32_t)(h[0] >> 32) ? l[cand_idx(h[0])] : -INFINITY;
	for (int i = k; i < V; i++) {
		if (!(l[i] >= lo))
			continue;
		uint64_t c = cand_of(l, i);
		if (c <= h[0])
			continue;
		int at = 0; /* sift c down from the root */
		for (;;) {
			int a = 2 * at + 1, b = a + 1, m = at;
			uint64_t mv = c;
			if (a < k && h[a] < mv) {
				m = a;
				mv = h[a];
			}
			if (b < k && h[b] < mv)
				m = b;
			if (m == at)
				break;
			h[at] = h[m];
			at = m;
		}
		h[at] = c;
		lo = (uint32_t)(h[0] >> 32) ? l[cand_idx(h[0])] : -INFINITY;
	}
	qsort(h, (size_t)k, sizeof(uint64_t), cmp_cand_desc);
}

/* Sorted path: the prefix of the (key desc, index asc) order whose weights
 * are >= thr, into s->idx[0..m) and their weights into w[0..m); returns m. */
static int sorted_prefix(sampler *s, const float *e, const float *l, float thr, float *w)
{
	int m = 0;
	for (int i = 0; i < s->vocab; i++)
		if (e[i] >= thr)
			s->cand[m++] = cand_of(l, i);
	qsort(s->cand, (size_t)m, sizeof(uint64_t), cmp_cand_desc);
	for (int i = 0; i < m; i++) {
		s->idx[i] = cand_idx(s->cand[i]);
		w[i] = e[s->idx[i]];
	}
	return m;
}

/* A weight threshold whose candidate set most likely holds the top-p cut:
 * a histogram of the weights by their top 12 bits (sign, exponent, 3
 * mantissa bits), summed in double from the largest bin down to where it
 * passes top_p * Z with a margin far above the float sums' rounding. */
#define HBINS 1024
static float topp_threshold(const float *e, int V, double target)
{
	static _Thread_local double mass[HBINS];
	/* target 0 (Z == 0: every weight is 0, as for all-NaN or all -inf
	 * logits or a +inf maximum) is "reached" by the empty top bin, whose
	 * threshold lies above every weight: an empty prefix, read at [-1].
	 * Threshold 0 keeps everything (finish then gives the argmax). */
	if (!(target > 0))
		return 0.0f;
	memset(mass, 0, sizeof(mass));
	for (int i = 0; i < V; i++) {
		uint32_t b = sm_f2u(e[i]) >> 20; /* e in [0, 1]: b <= 0x3f8 */
		mass[b < HBINS ? b : HBINS - 1] += e[i];
	}
	double acc = 0;
	for (int b = HBINS - 1; b > 0; b--) {
		acc += mass[b];
		if (acc >= target * (1.0 + 1e-3))
			return sm_u2f((uint32_t)b << 20);
	}
	return 0.0f;
}

int sampler_pick(sampler *s, float *l, const int *hist, size_t nhist)
{
	const sampler_params *p = &s->p;
	int V = s->vocab;
	/* Penalties over the last repeat_last_n tokens. */
	if (sampler_penalized(p)) {
		size_t win = (size_t)p->repeat_last_n;
		size_t start = nhist > win ? nhist - win : 0;
		for (size_t i = start; i < nhist; i++)
			if (hist[i] >= 0 && hist[i] < V)
				s->count[hist[i]]++;
		for (size_t i = start; i < nhist; i++) {
			int t = hist[i];
			if (t < 0 || t >= V || s->count[t] == 0)
				continue;
			l[t] = sm_penalize(l[t], s->count[t], p->repeat_penalty, p->presence_penalty,
					   p->frequency_penalty);
			s->count[t] = 0; /* applied once per distinct token */
		}
	}
	int path = sampler_path(p, V);
	if (path == SAMPLER_GREEDY)
		return sampler_argmax(l, V);
	uint64_t bits = sm_splitmix(&s->rng);
	const float T = p->temperature;
	if (path == SAMPLER_TOPK) {
		int k = p->top_k;
		select_topk(s, l, k);
		for (int i = 0; i < k; i++)
			s->idx[i] = cand_idx(s->cand[i]);
		float mx = l[s->idx[0]];
		for (int i = 0; i < k; i++)
			s->prob[i] = sm_exp(sm_arg(l[s->idx[i]], mx, T));
		float Z = chunked_cum(s->prob, k, s->cum);
		return finish(p, s->idx, s->prob, s->cum, k, Z, bits, s->idx[0]);
	}
	/* The whole vocabulary: weights in index order, Z in index order. */
	int am = sampler_argmax(l, V);
	float mx = l[am];
	for (int i = 0; i < V; i++)
		s->prob[i] = sm_exp(sm_arg(l[i], mx, T));
	float Z = chunked_cum(s->prob, V, s->cum);
	if (path == SAMPLER_ALL)
		return finish(p, NULL, s->prob, s->cum, V, Z, bits, am);
	/* SAMPLER_SORTED: sort only the prefix of the order that holds the
	 * cut. min-p keeps exactly the positions with e >= min_p * e_0 (and
	 * position 0); for top-p alone a histogram guesses a weight threshold
	 * and the exact sums over the prefix confirm it, else everything is
	 * sorted. Buffers: e in s->prob (index order); the prefix's weights
	 * go to s->cum and their sums to s->prob. */
	float tp = SM_MUL(p->top_p, Z), thr;
	if (p->min_p > 0) {
		float lim = SM_MUL(p->min_p, s->prob[am]);
		thr = lim < s->prob[am] ? lim : s->prob[am];
	} else {
		thr = topp_threshold(s->prob, V, (double)tp);
	}
	for (;;) {
		int m = sorted_prefix(s, s->prob, l, thr, s->cum);
		chunked_cum(s->cum, m, s->prob);
		if (p->min_p > 0 || thr <= 0.0f || m == V || s->prob[m - 1] >= tp)
			return finish(p, s->idx, s->cum, s->prob, m, Z, bits, am);
		for (int i = 0; i < V; i++) /* the histogram's margin was not enough (rare) */
			s->prob[i] = sm_exp(sm_arg(l[i], mx, T));
		thr = 0.0f;
	}
}

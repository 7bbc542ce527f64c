/* worker/sampler.c — see sampler.h. */
#include "worker/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void sampler_defaults(sampler_params *p)
{
	/* Ollama's defaults, so `mlxr run` behaves as its users expect. */
	memset(p, 0, sizeof(*p));
	p->temperature = 0.8f;
	p->top_k = 40;
	p->top_p = 0.9f;
	p->min_p = 0.0f;
	p->repeat_penalty = 1.1f;
	p->repeat_last_n = 64;
	p->seed = 0;
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
	if (!s->idx || !s->prob || !s->count) {
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
	memset(s, 0, sizeof(*s));
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

int sampler_argmax(const float *l, int n)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (l[i] > l[best])
			best = i;
	return best;
}

static const float *cmp_base;
static int cmp_desc(const void *a, const void *b)
{
	float x = cmp_base[*(const int *)a], y = cmp_base[*(const int *)b];
	if (x != y)
		return x < y ? 1 : -1;
	return *(const int *)a - *(const int *)b;
}

int sampler_pick(sampler *s, float *l, const int *hist, size_t nhist)
{
	const sampler_params *p = &s->p;
	int V = s->vocab;
	/* Penalties over the last repeat_last_n tokens. */
	int win = p->repeat_last_n > 0 ? p->repeat_last_n : 0;
	size_t start = nhist > (size_t)win ? nhist - (size_t)win : 0;
	if (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) {
		for (size_t i = start; i < nhist; i++)
			if (hist[i] >= 0 && hist[i] < V)
				s->count[hist[i]]++;
		for (size_t i = start; i < nhist; i++) {
			int t = hist[i];
			if (t < 0 || t >= V || s->count[t] == 0)
				continue;
			if (p->repeat_penalty > 0 && p->repeat_penalty != 1.0f)
				l[t] = l[t] > 0 ? l[t] / p->repeat_penalty : l[t] * p->repeat_penalty;
			l[t] -= p->presence_penalty + p->frequency_penalty * (float)s->count[t];
			s->count[t] = 0; /* applied once per distinct token */
		}
	}
	if (p->temperature <= 0.0f)
		return sampler_argmax(l, V);
	/* Candidates sorted by logit: top-k bounds the sort when set. */
	int n = V;
	for (int i = 0; i < V; i++)
		s->idx[i] = i;
	cmp_base = l;
	if (p->top_k > 0 && p->top_k < V) {
		/* Partial selection: keep the k largest, then sort them. */
		int k = p->top_k;
		for (int i = 0; i < k; i++) {
			int best = i;
			if (k > 64)
				break;
			for (int j = i + 1; j < V; j++)
				if (l[s->idx[j]] > l[s->idx[best]])
					best = j;
			int t = s->idx[i]; s->idx[i] = s->idx[best]; s->idx[best] = t;
		}
		if (k > 64)
			qsort(s->idx, (size_t)V, sizeof(int), cmp_desc);
		n = k;
	} else {
		qsort(s->idx, (size_t)V, sizeof(int), cmp_desc);
	}
	float mx = l[s->idx[0]], sum = 0;
	for (int i = 0; i < n; i++) {
		s->prob[i] = expf((l[s->idx[i]] - mx) / p->temperature);
		sum += s->prob[i];
	}
	for (int i = 0; i < n; i++)
		s->prob[i] /= sum;
	if (p->top_p > 0 && p->top_p < 1.0f) {
		float c = 0;
		for (int i = 0; i < n; i++) {
			c += s->prob[i];
			if (c >= p->top_p) {
				n = i + 1;
				break;
			}
		}
	}
	if (p->min_p > 0) {
		float lim = s->prob[0] * p->min_p;
		int m = 1;
		while (m < n && s->prob[m] >= lim)
			m++;
		n = m;
	}
	sum = 0;
	for (int i = 0; i < n; i++)
		sum += s->prob[i];
	double r = (double)(splitmix(&s->rng) >> 11) * (1.0 / 9007199254740992.0) * sum;
	double c = 0;
	for (int i = 0; i < n; i++) {
		c += s->prob[i];
		if (r < c)
			return s->idx[i];
	}
	return s->idx[n - 1];
}

/* tests/cuda/test_cuda_sample.c — the device sampler (kernels/cuda/
 * ksample.h) picks exactly sampler_pick's token: the same logits uploaded,
 * the same history (prompt ids on the device, each picked id appended by
 * the kernel itself), the same seed; several picks per case so the rng
 * state and the history carry on; the rng state equal at the end. Cases:
 * random (normal-ish logits, quantised ties, all equal, NaN / -0 / -inf
 * entries) over vocabularies of 2 to 151,936, temperature 0 with
 * penalties, top-k 1..1024 with top-p / min-p (on both sides of the
 * multi-block top-k's limit), no truncation; then fixed
 * ones (k = 1, 40, 1024 on the Llama 3 vocabulary, all-equal logits with
 * more ties than the kernel's tie buffer, top-p 0 at temperature 0.8:
 * greedy after penalties on both sides, no draw).
 *
 * `test_cuda_sample bench` also prints the time of one pick: the device
 * sampler (launch + wait) against the copy-back path (512 KB of logits to
 * the host + sampler_pick), for Ollama's and OpenAI's defaults. Not a
 * pass/fail criterion. Exits 2 without a device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/ksample.h"
#include "tests/test_rng.h"
#include "worker/sampler.h"
#include "worker/session_cuda.h"

#define HCAP 4096
#define PICKS 4

static int failures, checks;
static uint64_t trng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void) { return (uint32_t)(test_xorshift(&trng) >> 11); }
static float frand(void) { return (float)(rnd() & 0xffffff) / 16777216.0f; }

static void die(const char *what)
{
	fprintf(stderr, "FATAL %s: %s / %s\n", what, kc_error(), ks_error());
	exit(1);
}

static void rand_logits(float *l, int V, int kind)
{
	float scale = 1.0f + 8.0f * frand();
	for (int i = 0; i < V; i++) {
		float x = (frand() + frand() + frand() - 1.5f) * scale;
		if (kind == 1)
			x = (float)(int)(x * 2.0f) * 0.5f; /* few distinct values: many ties */
		if (kind == 2)
			x = 0.0f;
		if (kind == 4 && i % 997 == 0)
			x += 12.0f; /* a few dominant tokens, as a language model */
		l[i] = x;
	}
	if (kind == 3 && V > 8) {
		l[rnd() % V] = -0.0f;
		l[rnd() % V] = 0.0f;
		l[rnd() % V] = -INFINITY;
		l[rnd() % V] = NAN;
	}
}

typedef struct {
	int V;
	ks_sampler ks;
	float *d_l;
	int *d_pos, *d_hist, *d_next;
	float *l0, *l;
} rig;

static void rig_init(rig *r, int V)
{
	r->V = V;
	if (ks_init(&r->ks, V))
		die("ks_init");
	r->d_l = kc_malloc(sizeof(float) * (size_t)V);
	r->d_pos = kc_malloc(sizeof(int));
	r->d_hist = kc_malloc(sizeof(int) * HCAP);
	r->d_next = kc_malloc(sizeof(int));
	r->l0 = malloc(sizeof(float) * (size_t)V);
	r->l = malloc(sizeof(float) * (size_t)V);
	if (!r->d_l || !r->d_pos || !r->d_hist || !r->d_next || !r->l0 || !r->l)
		die("alloc");
}

static void rig_free(rig *r)
{
	ks_free(&r->ks);
	kc_free(r->d_l);
	kc_free(r->d_pos);
	kc_free(r->d_hist);
	kc_free(r->d_next);
	free(r->l0);
	free(r->l);
}

/* PICKS picks from r->l0 with prompt hist[0..nh) on both sides; returns
 * the number of differing picks (0 or the first difference reported). */
static int run_case(rig *r, const sampler_params *p, int *hist, int nh, const char *what)
{
	sampler s;
	ks_params k;
	if (sampler_init(&s, r->V, p))
		die("sampler_init");
	if (session_cuda_ks_params(p, r->V, s.rng, &k) || ks_set(&r->ks, &k))
		die("ks_set");
	if (nh && kc_upload(r->d_hist, hist, sizeof(int) * (size_t)nh))
		die("upload hist");
	int bad = 0;
	for (int j = 0; j < PICKS && !bad; j++) {
		int pos = nh, dev = -1, dh = -2;
		if (kc_upload(r->d_l, r->l0, sizeof(float) * (size_t)r->V) || kc_upload(r->d_pos, &pos, sizeof(int)) ||
		    ks_sample(&r->ks, r->d_l, r->d_pos, r->d_hist, r->d_next, 0) ||
		    kc_download(&dev, r->d_next, sizeof(int)) || kc_download(&dh, r->d_hist + pos, sizeof(int)))
			die("sample");
		memcpy(r->l, r->l0, sizeof(float) * (size_t)r->V);
		int cpu = sampler_pick(&s, r->l, hist, (size_t)nh);
		checks++;
		if (dev != cpu || dh != dev) {
			printf("FAIL %s pick %d: V %d T %g k %d top_p %g min_p %g rep %g/%d pres %g freq %g hist %d: "
			       "device %d (hist %d) cpu %d\n",
			       what, j, r->V, p->temperature, p->top_k, p->top_p, p->min_p, p->repeat_penalty,
			       p->repeat_last_n, p->presence_penalty, p->frequency_penalty, nh, dev, dh, cpu);
			bad = 1;
		}
		hist[nh++] = cpu;
	}
	uint64_t drng;
	if (ks_get_rng(&r->ks, &drng))
		die("rng");
	checks++;
	if (!bad && drng != s.rng) {
		printf("FAIL %s: rng state differs after %d picks\n", what, PICKS);
		bad = 1;
	}
	sampler_free(&s);
	failures += bad;
	return bad;
}

static void random_params(sampler_params *p, int V)
{
	sampler_neutral(p); /* every field is set below */
	const float temps[] = { 0, 0.5f, 0.8f, 1, 1.7f };
	/* 62 / 63: the last k / the first past the multi-block top-k on
	 * 128,256 entries (63 slices); 52 / 53 the same on 151,936; 128 / 129
	 * its k limit on small vocabularies */
	const int ks[] = { 0, 1, 2, 3, 40, 52, 53, 62, 63, 65, 100, 128, 129, 257, 1000, 1024 };
	const float tps[] = { 1, 0.9f, 0.5f, 0.1f, 0.999f };
	const float mps[] = { 0, 0, 0.05f, 0.3f };
	p->temperature = temps[rnd() % 5];
	p->top_k = ks[rnd() % (sizeof(ks) / sizeof(ks[0]))];
	if (p->top_k >= V)
		p->top_k = V - 1;
	if (p->top_k > 0) { /* top-p / min-p are covered only with top-k */
		p->top_p = tps[rnd() % 5];
		p->min_p = mps[rnd() % 4];
	} else {
		p->top_p = 1.0f;
	}
	p->repeat_penalty = rnd() % 2 ? 1.0f : 0.5f + 1.5f * frand();
	p->repeat_last_n = 1 + (int)(rnd() % 80);
	p->presence_penalty = rnd() % 3 ? 0 : frand();
	p->frequency_penalty = rnd() % 3 ? 0 : frand();
	if (p->temperature <= 0 && !sampler_penalized(p))
		p->repeat_penalty = 1.3f; /* greedy without penalties is kc_argmax's */
	p->seed = rnd();
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* median time of one pick, device sampler vs copy-back + sampler_pick */
static void bench(rig *r, const sampler_params *p, const char *name)
{
	enum { N = 200 };
	static double td[N], tc[N];
	sampler s;
	ks_params k;
	int hist[64], pos = 64, tok;
	for (int i = 0; i < 64; i++)
		hist[i] = (int)(rnd() % (uint32_t)r->V);
	if (sampler_init(&s, r->V, p) || session_cuda_ks_params(p, r->V, s.rng, &k) || ks_set(&r->ks, &k) ||
	    kc_upload(r->d_hist, hist, sizeof(hist)) || kc_upload(r->d_pos, &pos, sizeof(int)))
		die("bench set-up");
	for (int i = 0; i < N; i++) {
		if (kc_upload(r->d_l, r->l0, sizeof(float) * (size_t)r->V) || kc_sync())
			die("upload");
		double t0 = now();
		if (ks_sample(&r->ks, r->d_l, r->d_pos, r->d_hist, r->d_next, 0))
			die("sample");
		td[i] = now() - t0;
		if (kc_upload(r->d_l, r->l0, sizeof(float) * (size_t)r->V) || kc_sync())
			die("upload");
		t0 = now();
		if (kc_download(r->l, r->d_l, sizeof(float) * (size_t)r->V))
			die("download");
		tok = sampler_pick(&s, r->l, hist, 64);
		tc[i] = now() - t0;
	}
	(void)tok;
	sampler_free(&s);
	qsort(td, N, sizeof(double), cmp_d);
	qsort(tc, N, sizeof(double), cmp_d);
	printf("bench %-34s V %6d: device %7.1f us, copy-back + sampler_pick %7.1f us (medians of %d)\n", name, r->V,
	       td[N / 2] * 1e6, tc[N / 2] * 1e6, N);
}

int main(int argc, char **argv)
{
	if (kc_device_count() < 1) {
		printf("UNAVAILABLE: no CUDA device\n");
		return 2;
	}
	if (kc_init(0))
		die("kc_init");
	static int hist[HCAP];
	/* random cases */
	const int Vs[] = { 2, 50, 1000, 4099, 49152, 128256, 151936 };
	int per[KS_MODE_COUNT] = { 0 };
	for (size_t vi = 0; vi < sizeof(Vs) / sizeof(Vs[0]); vi++) {
		rig r;
		rig_init(&r, Vs[vi]);
		int cases = Vs[vi] >= 49152 ? 60 : 120, bad = 0;
		for (int c = 0; c < cases; c++) {
			sampler_params p;
			random_params(&p, r.V);
			int nh = (int)(rnd() % 100);
			if (rnd() % 4 == 0) { /* a long window: more ids than the blocks' threads */
				nh = 2000 + (int)(rnd() % 100);
				p.repeat_last_n = 2000;
			}
			/* the sampler slices' edges (2048 entries each) and the last one's start */
			const int last = (r.V - 1) / 2048 * 2048;
			const int edge[6] = { 2047 % r.V, 2048 % r.V, (r.V - 1), last, last > 0 ? last - 1 : 0, 0 };
			for (int i = 0; i < nh; i++) /* repeats: the penalties see counts > 1 */
				hist[i] = rnd() % 3 == 0 ? edge[rnd() % 6]
							 : (int)(rnd() % 20u) * (r.V / 20 > 0 ? r.V / 20 : 1) % r.V;
			rand_logits(r.l0, r.V, (int)(rnd() % 5));
			ks_params k;
			if (session_cuda_ks_params(&p, r.V, 0, &k))
				continue;
			per[k.mode]++;
			char what[64];
			snprintf(what, sizeof(what), "random case %d", c);
			bad += run_case(&r, &p, hist, nh, what);
		}
		printf("%s V %6d: %d random cases, %d differ\n", bad ? "FAIL" : "ok  ", r.V, cases, bad);
		rig_free(&r);
	}
	printf("     modes: greedy+penalties %d, top-k %d, no truncation %d\n", per[KS_GREEDY], per[KS_TOPK],
	       per[KS_ALL]);
	/* fixed cases on the Llama 3 vocabulary */
	rig r;
	rig_init(&r, 128256);
	struct {
		const char *name;
		float T;
		int k;
		float top_p, min_p, rep;
		int kind;
	} fx[] = {
		{ "k=1", 0.8f, 1, 1, 0, 1, 0 },
		{ "k=40 (Ollama defaults)", 0.8f, 40, 0.9f, 0, 1.1f, 4 },
		{ "k=1024", 1.0f, 1024, 1, 0, 1, 0 },
		{ "k=1024 top-p 0.5 min-p 0.05", 1.0f, 1024, 0.5f, 0.05f, 1.2f, 4 },
		{ "k=40 quantised ties", 1.0f, 40, 1, 0, 1, 1 },
		{ "k=40 all equal (ties > buffer)", 1.0f, 40, 1, 0, 1, 2 },
		{ "k=1024 all equal", 1.0f, 1024, 1, 0, 1, 2 },
		{ "no truncation (OpenAI defaults)", 1.0f, 0, 1, 0, 1, 4 },
		{ "no truncation, all equal", 1.0f, 0, 1, 0, 1, 2 },
		{ "no truncation, NaN/-0/-inf", 0.7f, 0, 1, 0, 1.3f, 3 },
		{ "temperature 0 + repeat penalty", 0.0f, 0, 1, 0, 1.5f, 4 },
		{ "top-p 0 (greedy) at T .8, k 40 + repeat penalty", 0.8f, 40, 0, 0, 1.5f, 4 },
	};
	for (size_t i = 0; i < sizeof(fx) / sizeof(fx[0]); i++) {
		sampler_params p;
		sampler_neutral(&p);
		p.temperature = fx[i].T;
		p.top_k = fx[i].k;
		p.top_p = fx[i].top_p;
		p.min_p = fx[i].min_p;
		p.repeat_penalty = fx[i].rep;
		p.repeat_last_n = 64;
		p.presence_penalty = 0.1f;
		p.seed = 1234 + i;
		int nh = 80;
		rand_logits(r.l0, r.V, fx[i].kind);
		for (int j = 0; j < nh; j++) {
			hist[j] = (int)(rnd() % 40u) * 997 % r.V; /* the dominant tokens: the penalty matters */
		}
		int bad = run_case(&r, &p, hist, nh, fx[i].name);
		printf("%s %s\n", bad ? "FAIL" : "ok  ", fx[i].name);
	}
	if (argc > 1 && !strcmp(argv[1], "bench")) {
		sampler_params p;
		rand_logits(r.l0, r.V, 4);
		sampler_defaults(&p);
		bench(&r, &p, "Ollama (T .8 k 40 p .9 rep 1.1)");
		sampler_neutral(&p);
		bench(&r, &p, "OpenAI (T 1, top_p 1)");
		p.top_k = 1024;
		bench(&r, &p, "top_k 1024");
		sampler_neutral(&p);
		p.temperature = 0.0f;
		p.repeat_penalty = 1.1f;
		bench(&r, &p, "greedy + rep 1.1");
	}
	rig_free(&r);
	printf("%d of %d checks failed\n", failures, checks);
	return failures ? 1 : 0;
}

/* worker/bench.c — the measurements behind `mlxr bench`, run inside the
 * worker on its loaded model: prefill, decode at short and long context,
 * and this machine's memory-read bandwidth. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/kernels.h"
#include "worker/exec.h"

#define BW_BYTES ((size_t)1 << 30) /* 1 GiB: far beyond every cache level */

typedef struct {
	const uint64_t *buf;
	size_t chunk;
	uint64_t sums[256];
} bw_job;

static void bw_part(void *arg, int i)
{
	bw_job *j = arg;
	const uint64_t *p = j->buf + (size_t)i * j->chunk;
	uint64_t a = 0, b = 0, c = 0, d = 0;
	for (size_t k = 0; k + 4 <= j->chunk; k += 4) {
		a += p[k];
		b += p[k + 1];
		c += p[k + 2];
		d += p[k + 3];
	}
	j->sums[i & 255] += a ^ b ^ c ^ d;
}

/* Memory-read bandwidth in bytes/s: best of 5 passes over 1 GiB, split
 * across the kernel thread pool as the matvec is. mmap, not malloc, so the
 * buffer goes back to the system at once. */
static double mem_bandwidth(void)
{
	uint64_t *buf = mmap(NULL, BW_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		return 0;
	kmem_advise_huge(buf, BW_BYTES); /* as the weights are held (st_make_resident) */
	memset(buf, 1, BW_BYTES);
	bw_job j = { buf, 0, { 0 } };
	int parts = kpool_threads() * 16;
	if (parts > 256)
		parts = 256;
	j.chunk = BW_BYTES / 8 / (size_t)parts;
	double best = 0;
	for (int r = 0; r < 5; r++) {
		double t0 = session_now();
		kpool_for(parts, bw_part, &j);
		double dt = session_now() - t0;
		double bw = (double)(j.chunk * (size_t)parts * 8) / dt;
		if (bw > best)
			best = bw;
	}
	volatile uint64_t sink = j.sums[0];
	(void)sink;
	munmap(buf, BW_BYTES);
	return best;
}

static int run_tokens(const model *m, model_state *st, const int *ids, int n)
{
	for (int done = 0; done < n;) {
		int step = n - done < st->max_batch ? n - done : st->max_batch;
		if (model_forward(m, st, ids + done, step, 0))
			return -1;
		done += step;
	}
	return 0;
}

/* Decodes n tokens greedily from the current state; returns seconds.
 * The forward pass adds its time per category to *prof (the profile's
 * hooks are a NULL test each when off; on, about 15 clock reads per layer,
 * well under 0.1% of a step), token selection is timed here. */
static double decode(const model *m, model_state *st, int n, wc_prof *prof)
{
	memset(prof, 0, sizeof(*prof));
	st->prof = prof;
	double t0 = session_now();
	for (int i = 0; i < n; i++) {
		double ts = session_now();
		int best = sampler_argmax(st->logits, m->cfg.vocab);
		prof->s[WC_PROF_SAMPLE] += session_now() - ts;
		if (model_forward(m, st, &best, 1, 0)) {
			st->prof = NULL;
			return -1;
		}
	}
	double dt = session_now() - t0;
	st->prof = NULL;
	return dt;
}

int exec_bench(session *s, const wc_bench_req *r, wc_bench_res *out, wc_error *e)
{
	const model *m = &s->m;
	model_state *st = &s->st;
	memset(out, 0, sizeof(*out));
	memset(e, 0, sizeof(*e));
	int longest = r->prefill > r->long_ctx ? r->prefill : r->long_ctx;
	if (s->gpu && longest + r->decode + 1 <= st->ctx) { /* the GPU's own figures (worker/session_cuda.c) */
		if (s->gpu->bench(s, r, out, e->msg, sizeof(e->msg))) {
			e->kind = WC_ERR_INVALID;
			return -1;
		}
		return 0;
	}
	if (r->prefill < 1 || r->decode < 1 || r->long_ctx < 16 || longest + r->decode + 1 > st->ctx) {
		e->kind = WC_ERR_INVALID;
		snprintf(e->msg, sizeof(e->msg), "bench needs a context of %d tokens; this one holds %d (--ctx)",
			 longest + r->decode + 1, st->ctx);
		return -1;
	}
	int *ids = malloc(sizeof(int) * (size_t)longest);
	if (!ids) {
		snprintf(e->msg, sizeof(e->msg), "out of memory");
		return -1;
	}
	uint64_t x = 12345;
	for (int i = 0; i < longest; i++) { /* fixed pseudo-random ids */
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int)((x >> 33) % (uint64_t)m->cfg.vocab);
	}
	int rc = -1;
	st->pos = 0; /* the benchmark owns the cache; the next request re-prefills */
	if (run_tokens(m, st, ids, 8)) /* warm-up: touch every weight once */
		goto out;
	st->pos = 0;
	double t0 = session_now();
	if (run_tokens(m, st, ids, r->prefill))
		goto out;
	out->prefill_s = session_now() - t0;
	st->pos = 0;
	if (run_tokens(m, st, ids, 16))
		goto out;
	out->decode_short_s = decode(m, st, r->decode, &out->prof_short);
	st->pos = 0;
	if (run_tokens(m, st, ids, r->long_ctx))
		goto out;
	out->decode_long_s = decode(m, st, r->decode, &out->prof_long);
	if (out->decode_short_s < 0 || out->decode_long_s < 0)
		goto out;
	out->mem_bw = mem_bandwidth();
	out->decode_bytes = m->decode_bytes;
	out->threads = kpool_threads();
	/* "avx512+amx": the avx512 table with its GEMM on AMX tiles */
	snprintf(out->kernels, sizeof(out->kernels), "%s%s", kernels_best()->name,
		 kernels_cpu_amx() && !strcmp(kernels_best()->name, "avx512") ? "+amx" : "");
	out->prefill_x = WC_PREFILL_X_F32; /* the CPU's GEMMs (f32; AMX: x as three bf16 terms, exact) */
	out->peak_rss_mb = 0; /* the broker reads it from /proc (getrusage is outside the sandbox) */
	rc = 0;
out:
	st->pos = 0;
	st->prof = NULL;
	if (rc) {
		e->kind = WC_ERR_INVALID;
		snprintf(e->msg, sizeof(e->msg), "forward pass failed during the benchmark");
	}
	free(ids);
	return rc;
}

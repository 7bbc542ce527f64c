/* broker/cmd_bench.c — `mlxr bench MODEL [--json]`: prefill of 512 tokens,
 * decode of 128 tokens at short context and at 1K context, the weight
 * bytes read per decoded token, this machine's memory-read bandwidth, the
 * bandwidth-bound decode rate (bandwidth / bytes per token) and the
 * fraction of it reached. A measurement for people and benchmark scripts;
 * never asserted on in tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "broker/cmds.h"
#include "broker/store.h"
#include "kernels/kernels.h"
#include "worker/model.h"
#include "worker/session.h"

#define BW_BYTES ((size_t)1 << 30) /* 1 GiB: far beyond every cache level */

typedef struct {
	const uint64_t *buf;
	size_t words, chunk;
	uint64_t sums[256];
} bw_job;

static void bw_part(void *arg, int i)
{
	bw_job *j = arg;
	const uint64_t *p = j->buf + (size_t)i * j->chunk;
	size_t n = j->chunk;
	uint64_t a = 0, b = 0, c = 0, d = 0;
	for (size_t k = 0; k + 4 <= n; k += 4) {
		a += p[k];
		b += p[k + 1];
		c += p[k + 2];
		d += p[k + 3];
	}
	j->sums[i & 255] += a ^ b ^ c ^ d;
}

/* Memory-read bandwidth in bytes/s: best of 5 passes over 1 GiB, split
 * across the kernel thread pool as the matvec is. */
static double mem_bandwidth(void)
{
	uint64_t *buf = malloc(BW_BYTES);
	if (!buf)
		return 0;
	memset(buf, 1, BW_BYTES);
	bw_job j = { buf, BW_BYTES / 8, 0, { 0 } };
	int parts = kpool_threads() * 16;
	if (parts > 256)
		parts = 256;
	j.chunk = j.words / (size_t)parts;
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
	free(buf);
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

/* Decodes `n` tokens greedily from the current state; returns seconds. */
static double decode(const model *m, model_state *st, int n)
{
	int V = m->cfg.vocab;
	double t0 = session_now();
	for (int i = 0; i < n; i++) {
		int best = 0;
		for (int k = 1; k < V; k++)
			if (st->logits[k] > st->logits[best])
				best = k;
		if (model_forward(m, st, &best, 1, 0))
			return -1;
	}
	return session_now() - t0;
}

int cmd_bench(int argc, char **argv)
{
	const char *name = NULL;
	int json = 0, prefill_n = 512, decode_n = 128, long_ctx = 1024;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) json = 1;
		else if (!strcmp(argv[i], "--prefill") && i + 1 < argc) prefill_n = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--decode") && i + 1 < argc) decode_n = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--long") && i + 1 < argc) long_ctx = atoi(argv[++i]);
		else if (argv[i][0] != '-' && !name) name = argv[i];
		else name = NULL, i = argc;
	}
	if (!name || prefill_n < 1 || decode_n < 1 || long_ctx < 1 || prefill_n > 1 << 20 || long_ctx > 1 << 20) {
		fprintf(stderr, "usage: mlxr bench MODEL [--json] [--prefill N (512)] [--decode N (128)] [--long N (1024)]\n");
		return 2;
	}
	char dir[4096], err[1024];
	model m;
	model_state st;
	if (store_resolve(name, dir, sizeof(dir), err, sizeof(err))) {
		fprintf(stderr, "mlxr: bench: %s\n", err);
		return 1;
	}
	kpool_init(0);
	double t0 = session_now();
	if (model_load(&m, dir, err, sizeof(err))) {
		fprintf(stderr, "mlxr: bench: %s\n", err);
		return 1;
	}
	double load_s = session_now() - t0;
	int ctx = (prefill_n > long_ctx ? prefill_n : long_ctx) + decode_n + 16;
	if (ctx > m.cfg.max_pos)
		ctx = m.cfg.max_pos;
	if (model_state_init(&st, &m, ctx, SESSION_PREFILL_BATCH)) {
		fprintf(stderr, "mlxr: bench: out of memory for a %d-token context\n", ctx);
		model_free(&m);
		return 1;
	}
	int nids = prefill_n > long_ctx ? prefill_n : long_ctx;
	int *ids = malloc(sizeof(int) * (size_t)nids);
	uint64_t x = 12345;
	for (int i = 0; i < nids; i++) { /* fixed pseudo-random ids */
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int)((x >> 33) % (uint64_t)m.cfg.vocab);
	}
	int rc = 1;
	/* warm-up: touch every weight once */
	if (run_tokens(&m, &st, ids, 8))
		goto out;
	st.pos = 0;
	t0 = session_now();
	if (prefill_n + decode_n > ctx || run_tokens(&m, &st, ids, prefill_n))
		goto fail;
	double prefill_s = session_now() - t0;
	/* short context: decode after a 16-token prompt */
	st.pos = 0;
	if (run_tokens(&m, &st, ids, 16))
		goto fail;
	double dshort = decode(&m, &st, decode_n);
	st.pos = 0;
	if (long_ctx + decode_n > ctx || run_tokens(&m, &st, ids, long_ctx))
		goto fail;
	double dlong = decode(&m, &st, decode_n);
	if (dshort < 0 || dlong < 0)
		goto fail;
	double bw = mem_bandwidth();
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double bytes_tok = (double)m.decode_bytes;
	double bound = bw > 0 ? bw / bytes_tok : 0;
	double pf = prefill_n / prefill_s, ds = decode_n / dshort, dl = decode_n / dlong;
	const kernel_table *K = kernels_best();
	if (json) {
		printf("{\"model\":\"%s\",\"arch\":\"%s\",\"kernels\":\"%s\",\"threads\":%d,\"load_s\":%.4f,"
		       "\"prefill_tokens\":%d,\"prefill_tok_s\":%.2f,\"ttft_s\":%.4f,"
		       "\"decode_tokens\":%d,\"decode_tok_s\":%.2f,\"decode_long_ctx\":%d,\"decode_long_tok_s\":%.2f,"
		       "\"weight_bytes_per_token\":%.0f,\"mem_read_gb_s\":%.2f,\"bound_tok_s\":%.2f,"
		       "\"bound_fraction\":%.4f,\"peak_rss_mb\":%.1f}\n",
		       name, m.cfg.model_type, K->name, kpool_threads(), load_s, prefill_n, pf, prefill_s, decode_n, ds,
		       long_ctx, dl, bytes_tok, bw / 1e9, bound, bound > 0 ? ds / bound : 0, ru.ru_maxrss / 1024.0);
	} else {
		printf("model            %s (%s), kernels %s, %d threads\n", name, m.cfg.model_type, K->name, kpool_threads());
		printf("load             %.3f s\n", load_s);
		printf("prefill %4d     %.1f tok/s (%.3f s)\n", prefill_n, pf, prefill_s);
		printf("decode  %4d     %.1f tok/s at short context\n", decode_n, ds);
		printf("decode  %4d     %.1f tok/s after %d tokens\n", decode_n, dl, long_ctx);
		printf("weights/token    %.1f MB\n", bytes_tok / 1e6);
		printf("memory read      %.1f GB/s\n", bw / 1e9);
		printf("bound            %.1f tok/s; reached %.0f%%\n", bound, bound > 0 ? 100 * ds / bound : 0);
		printf("peak RSS         %.0f MB\n", ru.ru_maxrss / 1024.0);
	}
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "mlxr: bench: the model's context (%d) is too small for the run\n", m.cfg.max_pos);
out:
	free(ids);
	model_state_free(&st);
	model_free(&m);
	return rc;
}

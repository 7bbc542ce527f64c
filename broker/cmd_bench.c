/* broker/cmd_bench.c — `mlxr bench MODEL [--json]`: prefill of 512 tokens,
 * decode of 128 tokens at short context and at 1K context, the weight
 * bytes read per decoded token, this machine's memory-read bandwidth, the
 * bandwidth-bound decode rate (bandwidth / bytes per token) and the
 * fraction of it reached, and what the prefill GEMMs computed with (the
 * worker's wc_bench_res.prefill_x: f32-class, or f16 under --fast-prefill
 * on CUDA). Measured inside the worker, as users run models.
 * --verbose adds where a decode step's time goes, per kind of operation
 * (common/wcapi.h wc_prof), at short and at long context.
 * A measurement for people and benchmark scripts; never asserted on in
 * tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/cmds.h"
#include "broker/store.h"
#include "broker/wclient.h"

/* wc_bench_res.prefill_x as the worker reported it (checked by the
 * unpacker): JSON value, and the text line. */
static const struct {
	const char *key, *label;
} prefill_x_names[WC_PREFILL_X_COUNT] = {
	[WC_PREFILL_X_F32] = { "f32", "f32-class" },
	[WC_PREFILL_X_F16] = { "f16", "f16 (--fast-prefill: GEMM inputs and attention in f16)" },
};

/* The breakdown's rows: wire category, JSON name, label. */
static const struct {
	const char *key, *label;
	int matvec; /* reads weights: print bytes and GB/s */
} prof_rows[WC_PROF_COUNT] = {
	[WC_PROF_QKV] = { "attn_qkv", "attn q/k/v", 1 },
	[WC_PROF_ATTN_OUT] = { "attn_out", "attn out", 1 },
	[WC_PROF_GATE_UP] = { "mlp_gate_up", "mlp gate/up", 1 },
	[WC_PROF_DOWN] = { "mlp_down", "mlp down", 1 },
	[WC_PROF_LM_HEAD] = { "lm_head_embed", "lm_head+embed", 1 },
	[WC_PROF_ATTENTION] = { "attention", "attention", 1 },
	[WC_PROF_KV_STORE] = { "kv_store", "kv store", 0 },
	[WC_PROF_NORM] = { "norm", "norms", 0 },
	[WC_PROF_ROPE] = { "rope", "rope", 0 },
	[WC_PROF_GLU] = { "glu", "glu", 0 },
	[WC_PROF_SAMPLE] = { "sample", "sampling", 0 },
};

/* One breakdown as JSON: per category ms per token, share of the step,
 * bytes read per token and GB/s; "other" is the step not in any category. */
static void prof_json(const char *name, const wc_prof *p, double total_s, int tokens)
{
	double in = 0;
	printf("\"%s\":{\"step_ms\":%.4f,\"categories\":[", name, 1e3 * total_s / tokens);
	for (int c = 0; c < WC_PROF_COUNT; c++) {
		in += p->s[c];
		printf("%s{\"name\":\"%s\",\"ms_per_token\":%.4f,\"share\":%.4f,\"bytes_per_token\":%.0f,\"gb_s\":%.3f}",
		       c ? "," : "", prof_rows[c].key, 1e3 * p->s[c] / tokens, p->s[c] / total_s,
		       (double)p->bytes[c] / tokens, p->s[c] > 0 ? p->bytes[c] / p->s[c] / 1e9 : 0);
	}
	double other = total_s - in > 0 ? total_s - in : 0;
	printf(",{\"name\":\"other\",\"ms_per_token\":%.4f,\"share\":%.4f,\"bytes_per_token\":0,\"gb_s\":0}]}",
	       1e3 * other / tokens, other / total_s);
}

static void prof_print(const wc_prof *ps, const wc_prof *pl, double ts, double tl, int tokens, int long_ctx)
{
	const wc_prof *p[2] = { ps, pl };
	double t[2] = { ts, tl }, in[2] = { 0, 0 };
	printf("decode step      %-28s after %d tokens\n", "at short context", long_ctx);
	printf("                 ms/tok share   MB/tok   GB/s   ms/tok share   MB/tok   GB/s\n");
	for (int c = 0; c < WC_PROF_COUNT; c++) {
		printf("  %-14s", prof_rows[c].label);
		for (int k = 0; k < 2; k++) {
			double s = p[k]->s[c];
			in[k] += s;
			printf(" %7.2f %4.1f%%", 1e3 * s / tokens, 100 * s / t[k]);
			if (prof_rows[c].matvec)
				printf(" %8.2f %6.1f", p[k]->bytes[c] / 1e6 / tokens, s > 0 ? p[k]->bytes[c] / s / 1e9 : 0);
			else
				printf(" %8s %6s", "", "");
		}
		printf("\n");
	}
	printf("  %-14s", "other");
	for (int k = 0; k < 2; k++) {
		double o = t[k] - in[k] > 0 ? t[k] - in[k] : 0;
		printf(" %7.2f %4.1f%% %8s %6s", 1e3 * o / tokens, 100 * o / t[k], "", "");
	}
	printf("\n  %-14s", "step");
	for (int k = 0; k < 2; k++)
		printf(" %7.2f  100%% %8s %6s", 1e3 * t[k] / tokens, "", "");
	printf("\n");
}

int cmd_bench(int argc, char **argv)
{
	const char *name = NULL;
	int json = 0, verbose = 0, bad = 0, sealed = 0, no_sandbox = 0;
	wc_bench_req br = { 512, 128, 1024 };
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) json = 1;
		else if (!strcmp(argv[i], "--verbose") || !strcmp(argv[i], "-v")) verbose = 1;
		else if (!strcmp(argv[i], "--sealed")) sealed = 1;
		else if (!strcmp(argv[i], "--no-sandbox")) no_sandbox = 1;
		else if (!strcmp(argv[i], "--device") && i + 1 < argc) bad |= wclient_set_device(argv[++i]) != 0;
		else if (!strcmp(argv[i], "--fast-prefill")) wclient_set_fast_prefill();
		else if (!strcmp(argv[i], "--prefill") && i + 1 < argc) br.prefill = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--decode") && i + 1 < argc) br.decode = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--long") && i + 1 < argc) br.long_ctx = atoi(argv[++i]);
		else if (argv[i][0] != '-' && !name) name = argv[i];
		else bad = 1;
	}
	if (bad || !name || br.prefill < 1 || br.decode < 1 || br.long_ctx < 16 || br.prefill > 1 << 20 ||
	    br.long_ctx > 1 << 20 || br.decode > 1 << 20) {
		fprintf(stderr, "usage: mlxr bench MODEL [--json] [--verbose] [--prefill N (512)] [--decode N (128)]"
				" [--long N (1024)] [--sealed] [--device auto|cpu|cuda] [--fast-prefill]\n");
		return 2;
	}
	char dir[4096], err[1024];
	if (store_resolve(name, dir, sizeof(dir), err, sizeof(err))) {
		fprintf(stderr, "mlxr: bench: %s\n", err);
		return 1;
	}
	int longest = br.prefill > br.long_ctx ? br.prefill : br.long_ctx;
	wclient_opts wo = { longest + br.decode + 16, sealed, no_sandbox };
	wclient *w;
	wc_error e;
	wc_bench_res res;
	if (wclient_start(&w, dir, &wo, &e)) {
		fprintf(stderr, "mlxr: bench: %s: %s\n", name, e.msg);
		return 1;
	}
	const wclient_info *i = wclient_info_get(w);
	if (wclient_bench(w, &br, &res, &e)) {
		fprintf(stderr, "mlxr: bench: %s\n", e.msg);
		wclient_stop(w);
		return 1;
	}
	double bytes_tok = (double)res.decode_bytes, bw = res.mem_bw;
	double bound = bw > 0 ? bw / bytes_tok : 0;
	double pf = br.prefill / res.prefill_s, ds = br.decode / res.decode_short_s, dl = br.decode / res.decode_long_s;
	if (json) {
		printf("{\"model\":\"%s\",\"arch\":\"%s\",\"device\":\"%s\",\"kernels\":\"%s\",\"threads\":%d,\"load_s\":%.4f,"
		       "\"prefill_tokens\":%d,\"prefill_tok_s\":%.2f,\"ttft_s\":%.4f,"
		       "\"decode_tokens\":%d,\"decode_tok_s\":%.2f,\"decode_long_ctx\":%d,\"decode_long_tok_s\":%.2f,"
		       "\"weight_bytes_per_token\":%.0f,\"mem_read_gb_s\":%.2f,\"bound_tok_s\":%.2f,"
		       "\"bound_fraction\":%.4f,\"peak_rss_mb\":%.1f,\"sealed\":%s,\"prefill_x\":\"%s\"",
		       name, i->model_type, i->device, res.kernels, res.threads, i->load_s, br.prefill, pf, res.prefill_s, br.decode,
		       ds, br.long_ctx, dl, bytes_tok, bw / 1e9, bound, bound > 0 ? ds / bound : 0, res.peak_rss_mb,
		       sealed ? "true" : "false", prefill_x_names[res.prefill_x].key);
		if (verbose) {
			printf(",\"breakdown\":{");
			prof_json("short", &res.prof_short, res.decode_short_s, br.decode);
			printf(",");
			prof_json("long", &res.prof_long, res.decode_long_s, br.decode);
			printf("}");
		}
		printf("}\n");
	} else {
		printf("model            %s (%s), kernels %s, %d threads\n", name, i->model_type, res.kernels, res.threads);
		printf("device           %s\n", i->device);
		printf("prefill x        %s\n", prefill_x_names[res.prefill_x].label);
		printf("load             %.3f s\n", i->load_s);
		printf("prefill %5d    %.1f tok/s (%.3f s)\n", br.prefill, pf, res.prefill_s);
		printf("decode  %5d    %.1f tok/s at short context\n", br.decode, ds);
		printf("decode  %5d    %.1f tok/s after %d tokens\n", br.decode, dl, br.long_ctx);
		printf("weights/token    %.1f MB\n", bytes_tok / 1e6);
		printf("memory read      %.1f GB/s%s\n", bw / 1e9, strncmp(i->device, "cuda", 4) ? "" : " (device memory, measured)");
		printf("bound            %.1f tok/s; reached %.0f%%\n", bound, bound > 0 ? 100 * ds / bound : 0);
		printf("peak RSS         %.0f MB (worker)\n", res.peak_rss_mb);
		if (verbose)
			prof_print(&res.prof_short, &res.prof_long, res.decode_short_s, res.decode_long_s, br.decode,
				   br.long_ctx);
	}
	wclient_stop(w);
	return 0;
}

/* bench/inproc_bench.c — the baseline for privilege separation's cost: the
 * same measurements as `mlxr bench` (worker/bench.c), with the model loaded
 * and run in this one process, no broker, worker, IPC or sandbox.
 *
 *   build/inproc-bench MODEL_DIR [PREFILL DECODE LONG]
 *
 * prints one JSON line with load_s and the tok/s figures, to compare with
 * `mlxr bench MODEL --json` (bench/privsep_cost.sh does both). */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/kernels.h"
#include "worker/exec.h"
#include "worker/session.h"

int main(int argc, char **argv)
{
	if (argc != 2 && argc != 5) {
		fprintf(stderr, "usage: inproc-bench MODEL_DIR [PREFILL DECODE LONG]\n");
		return 2;
	}
	wc_bench_req r = { 512, 128, 1024 };
	if (argc == 5) {
		r.prefill = atoi(argv[2]);
		r.decode = atoi(argv[3]);
		r.long_ctx = atoi(argv[4]);
	}
	kernels_cpu_prepare(); /* as mlxr-worker does before its sandbox */
	session s;
	char err[512];
	int longest = r.prefill > r.long_ctx ? r.prefill : r.long_ctx;
	double t0 = session_now();
	if (session_open(&s, argv[1], longest + r.decode + 16, err, sizeof(err))) {
		fprintf(stderr, "inproc-bench: %s\n", err);
		return 1;
	}
	double load = session_now() - t0;
	wc_bench_res res;
	wc_error e;
	if (exec_bench(&s, &r, &res, &e)) {
		fprintf(stderr, "inproc-bench: %s\n", e.msg);
		return 1;
	}
	printf("{\"load_s\":%.4f,\"prefill_tok_s\":%.2f,\"decode_tok_s\":%.2f,\"decode_long_tok_s\":%.2f}\n", load,
	       r.prefill / res.prefill_s, r.decode / res.decode_short_s, r.decode / res.decode_long_s);
	session_close(&s);
	return 0;
}

#!/bin/sh
# tests/cuda/run_perf.sh BIN_DIR LIB_DIR FIXTURE [BENCH_ARGS...] — one device
# call for decode speed work: the kernel tests and the GPU-vs-CPU forward
# test (correctness first), the matvec table and the model benchmark, and
# with PROF=1 an ncu pass over one 8B decode step (per-kernel times).
# Logs under $OUT; a short table last.
B=$(cd "$1" && pwd); L=$(cd "$2" && pwd); FX=$(cd "$3" && pwd); shift 3
O=${OUT:-/tmp}; export LD_LIBRARY_PATH="$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | tail -1
timeout 240 "$B/test_cuda_kernels" > "$O/kernels.log" 2>&1; k=$?
timeout 150 "$B/test_cuda_forward" "$FX" > "$O/forward.log" 2>&1; f=$?
timeout 240 "$B/cuda-bench" "$@" > "$O/bench.log" 2>&1; b=$?
[ -n "$VARIANT_ENV" ] && env $VARIANT_ENV timeout 120 "$B/cuda-bench" 1b 8b > "$O/bench3.log" 2>&1 # the same under VARIANT_ENV (e.g. MLXR_CUDA_PDL=0)
if [ "${PROF:-0}" = 1 ] && command -v ncu >/dev/null; then
	for P in prof prof4k; do
	timeout 150 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \
		--csv "$B/cuda-bench" $P 8b > "$O/$P.csv" 2> "$O/$P.err"; echo "== ncu $P rc=$?"
	python3 - "$O/$P.csv" <<'PY' 2>&1 | tail -10
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value"); ui = h.index("Metric Unit")
t = collections.defaultdict(float); n = collections.Counter()
for r in rows[1:]:
    v = float(r[vi].replace(",", "")); v = v / 1000 if r[ui] in ("nsecond", "ns") else v
    name = r[ki].split("(")[0].split("<")[0]; t[name] += v; n[name] += 1
tot = sum(t.values())
for k, v in sorted(t.items(), key=lambda x: -x[1]):
    print("%-22s %5d launches %9.1f us %5.1f%%" % (k[:22], n[k], v, 100 * v / tot))
print("total %.1f us in %d kernels" % (tot, sum(n.values())))
PY
	done
fi
echo "== kernels rc=$k: $(tail -1 "$O/kernels.log")"; grep '^FAIL' "$O/kernels.log" | head -6
echo "== forward rc=$f: $(tail -1 "$O/forward.log")"; grep -i 'fail\|differ' "$O/forward.log" | head -6
[ -f "$O/bench3.log" ] && { echo "== variant $VARIANT_ENV"; grep -A7 "^matvec" "$O/bench3.log"; grep -A3 "^model" "$O/bench3.log"; }
echo "== bench rc=$b"; cat "$O/bench.log"

#!/bin/sh
# tests/cuda/run_device.sh BIN_DIR [FIXTURE_DIR...] — one device call: the
# GPU kernel tests, the GPU-vs-CPU forward/greedy tests, the benchmark,
# then a memcheck pass over the kernel tests. Logs under $OUT (if set).
B=${1:?usage: run_device.sh BIN_DIR [FIXTURES...]}; shift
O=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv 2>&1 | tail -2
echo "== kernels";  "$B/test_cuda_kernels" > "$O/kernels.log" 2>&1; k=$?; grep -v '^ok' "$O/kernels.log" | tail -15
echo "== forward";  "$B/test_cuda_forward" "$@" > "$O/forward.log" 2>&1; f=$?; tail -30 "$O/forward.log"
echo "== bench";    timeout 300 "$B/cuda-bench" ${BENCH_MODELS:-} > "$O/bench.log" 2>&1; b=$?
if command -v compute-sanitizer >/dev/null; then
	echo "== memcheck (kernel tests)"
	timeout ${MEMCHECK_S:-90} compute-sanitizer --tool memcheck --print-limit 5 "$B/test_cuda_kernels" > "$O/memcheck.log" 2>&1
	echo "memcheck rc=$?"; grep -i "error summary\|invalid\|checks" "$O/memcheck.log" | head -5
fi
echo "== exit codes: kernels=$k forward=$f bench=$b"
cat "$O/bench.log"

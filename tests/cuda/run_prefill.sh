#!/bin/sh
# tests/cuda/run_prefill.sh BIN_DIR LIB_DIR FIXTURE — one device call for
# the prefill work: kernel tests, GPU-vs-CPU forward tests, `cuda-bench gemm
# 1b 8b` (the GEMM and attention tables, then the models), and with PROF=1
# ncu details of one tensor-core GEMM launch (qkv's q at n = 512) and one
# tiled attention launch (n = 4096). Logs under $OUT; a short table last.
B=$(cd "$1" && pwd); L=$(cd "$2" && pwd); FX=$(cd "$3" && pwd)
O=${OUT:-/tmp}; export LD_LIBRARY_PATH="$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | tail -1
timeout 240 "$B/test_cuda_kernels" > "$O/kernels.log" 2>&1; k=$?
timeout 120 "$B/test_cuda_forward" "$FX" > "$O/forward.log" 2>&1; f=$?
timeout 200 "$B/cuda-bench" gemm 1b 8b > "$O/bench.log" 2>&1; b=$?
if [ "${PROF:-0}" = 1 ] && command -v ncu >/dev/null; then
	S="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis"
	timeout 150 ncu --clock-control none -k regex:k_gemm_tc --launch-count 1 $S "$B/cuda-bench" gemm > "$O/ncu_gemm.txt" 2>&1
	echo "== ncu gemm rc=$?"
	timeout 150 ncu --clock-control none -k regex:k_attn_flash --launch-skip 3 --launch-count 1 $S "$B/cuda-bench" gemm > "$O/ncu_fa.txt" 2>&1
	echo "== ncu attention rc=$?"
	for t in gemm fa; do
		grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Issued Ipc|No Eligible|Stall|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit|Bank|Executed Ipc|One or More" "$O/ncu_$t.txt" | head -24
	done
fi
echo "== kernels rc=$k: $(tail -1 "$O/kernels.log")"; grep '^FAIL' "$O/kernels.log" | head -8
echo "== forward rc=$f: $(tail -1 "$O/forward.log")"; grep -i 'fail\|differ' "$O/forward.log" | head -6
echo "== bench rc=$b"; cat "$O/bench.log"

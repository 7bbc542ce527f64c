#!/bin/sh
# tests/cuda/run_integrated.sh BIN_DIR LIB_DIR FIXTURE — one device call for
# issue 9's integration: GPU tests, the GPU worker's lockdown (learn pass,
# then the proof), mlxr run --device cuda vs cpu, mlxr bench --device cuda,
# cuda-bench 1B/8B. Logs under $OUT.
B=$(cd "$1" && pwd); L=$(cd "$2" && pwd); FX=$(cd "$3" && pwd)
O=${OUT:-/tmp}; export LD_LIBRARY_PATH="$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MLXR_HOME=/tmp/mlxr-home HOME=/tmp/mlxr-home; mkdir -p $MLXR_HOME
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | tail -1
uname -r; ls -l /dev/nvidia* 2>&1 | head -8
echo "== kernels"; timeout 240 "$B/test_cuda_kernels" > "$O/kernels.log" 2>&1; k=$?; grep -v '^ok' "$O/kernels.log" | tail -4
echo "== forward"; timeout 120 "$B/test_cuda_forward" "$FX" > "$O/forward.log" 2>&1; f=$?; tail -4 "$O/forward.log"
echo "== sandbox learn"; timeout 60 "$B/test_gpu_sandbox" "$FX" --learn > "$O/learn.log" 2>&1; echo "rc=$?"; tail -25 "$O/learn.log"
echo "== sandbox proof"; timeout 60 "$B/test_gpu_sandbox" "$FX" > "$O/proof.log" 2>&1; s=$?; echo "rc=$s (159 = SIGSYS)"; tail -24 "$O/proof.log"
echo "== run cpu vs cuda"
P="The quick brown fox"
timeout 60 "$B/mlxr" run "$FX" --device cpu --temp 0 --max 64 --raw "$P" > "$O/run_cpu.txt" 2>&1; echo "cpu rc=$?"
timeout 60 "$B/mlxr" run "$FX" --device cuda --temp 0 --max 64 --raw "$P" > "$O/run_cuda.txt" 2>&1; echo "cuda rc=$?"
if cmp -s "$O/run_cpu.txt" "$O/run_cuda.txt"; then echo "GREEDY EQUAL"; else echo "GREEDY DIFFER"; head -c 600 "$O/run_cpu.txt"; echo; head -c 600 "$O/run_cuda.txt"; echo; fi
timeout 60 "$B/mlxr" run "$FX" --device cuda --temp 0.8 --top-k 40 --top-p 0.9 --min-p 0.05 --repeat-penalty 1.1 --presence-penalty 0.2 --frequency-penalty 0.1 --seed 3 --max 32 --raw "$P" > "$O/run_samp.txt" 2>&1; echo "sampled rc=$? $(head -c 200 "$O/run_samp.txt")"
timeout 60 "$B/mlxr" run "$FX" --temp 0 --max 8 --raw "$P" 2>&1 | head -c 300; echo " (auto)"
echo "== mlxr bench --device cuda (fixture)"; timeout 120 "$B/mlxr" bench "$FX" --device cuda 2>&1 | tail -11
echo "== cuda-bench 1b 8b"; timeout 200 "$B/cuda-bench" 1b 8b > "$O/bench.log" 2>&1; b=$?
echo "== exit codes: kernels=$k forward=$f sandbox=$s bench=$b"
cat "$O/bench.log" | tail -8

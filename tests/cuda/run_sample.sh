#!/bin/sh
# tests/cuda/run_sample.sh BIN_DIR LIB_DIR FIXTURE — one device call for the
# device sampler (kernels/cuda/ksample.cu): first what is timed (the pick
# alone, then mlxr run decode tok/s with the device sampler and with the
# copy-back path, MLXR_GPU_SAMPLE=0), then the checks in parallel
# (test_cuda_sample, test_cuda_kernels, test_cuda_forward, the sandbox
# test whose sampled generation now takes the device sampler, mlxr run
# --device cuda vs cpu with sampling). Logs under $OUT; a table last.
B=$(cd "$1" && pwd); L=$(cd "$2" && pwd); FX=$(cd "$3" && pwd)
O=${OUT:-/tmp}; export LD_LIBRARY_PATH="$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MLXR_HOME=/tmp/mlxr-home HOME=/tmp/mlxr-home; mkdir -p $MLXR_HOME
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | tail -1
P="Once upon a time"
OLL="--temp 0.8 --top-k 40 --top-p 0.9 --repeat-penalty 1.1"
OAI="--temp 1 --top-k 0 --top-p 1 --repeat-penalty 1"
tps() { grep -o 'generate: [0-9]* tokens in [0-9.]* s, [0-9.]* tok/s' "$1" | tail -1; }
echo "== timing"
timeout 60 "$B/test_cuda_sample" bench > "$O/sample.log" 2>&1; st=$?
grep '^bench' "$O/sample.log"
for set in OLL OAI; do
	eval A=\$$set
	for mode in dev cpu; do
		[ $mode = cpu ] && export MLXR_GPU_SAMPLE=0 || unset MLXR_GPU_SAMPLE
		timeout 40 "$B/mlxr" run "$FX" --device cuda $A --seed 5 --max 1500 --verbose --raw "$P" > "$O/t_${set}_${mode}.txt" 2> "$O/t_${set}_$mode.err"
		echo "$set $mode: $(tps "$O/t_${set}_$mode.err")"
	done
done
unset MLXR_GPU_SAMPLE
timeout 40 "$B/mlxr" run "$FX" --device cuda --temp 0 --max 1500 --verbose --raw "$P" > /dev/null 2> "$O/t_greedy.err"
echo "greedy (kc_argmax step): $(tps "$O/t_greedy.err")"
echo "== checks (parallel)"
timeout 420 "$B/test_cuda_kernels" > "$O/kernels.log" 2>&1 &
pk=$!
timeout 100 "$B/test_cuda_forward" "$FX" > "$O/forward.log" 2>&1 &
pf=$!
timeout 60 "$B/test_gpu_sandbox" "$FX" > "$O/sandbox.log" 2>&1 &
ps=$!
same=0; n=0
: > "$O/runs.log"
for args in "$OLL" "$OAI" "--temp 0.7 --top-k 1024 --min-p 0.05 --repeat-penalty 1.2" "--temp 0 --repeat-penalty 1.3"; do
	for seed in 1 2 3; do
		timeout 30 "$B/mlxr" run "$FX" --device cpu $args --seed $seed --max 64 --raw "$P" > "$O/c.txt" 2> "$O/c.err"
		rc=$?
		timeout 30 "$B/mlxr" run "$FX" --device cuda $args --seed $seed --max 64 --raw "$P" > "$O/g.txt" 2> "$O/g.err"
		rg=$?
		n=$((n + 1))
		# equal only when both ran (two failed runs print the same error)
		if [ $rc -ne 0 ] || [ $rg -ne 0 ] || [ ! -s "$O/c.txt" ]; then r="FAILED (cpu rc $rc, cuda rc $rg: $(tail -1 "$O/g.err"))"
		elif cmp -s "$O/c.txt" "$O/g.txt"; then same=$((same + 1)); r=EQUAL; else r=DIFFER; fi
		{ echo "[$args seed $seed] $r"; echo "cpu:  $(head -c 300 "$O/c.txt" | tr '\n' ' ')"; echo "cuda: $(head -c 300 "$O/g.txt" | tr '\n' ' ')"; } >> "$O/runs.log"
	done
done
wait $pk; k=$?; wait $pf; f=$?; wait $ps; s=$?
echo "== test_cuda_sample (rc $st)"; grep -v '^ok\|^bench' "$O/sample.log" | tail -6
echo "== kernels (rc $k)"; grep -v '^ok' "$O/kernels.log" | tail -3
echo "== forward (rc $f)"; tail -3 "$O/forward.log"
echo "== sandbox (rc $s, 159 = SIGSYS at socket: the expected end)"; grep -i "sampled\|greedy\|FAIL" "$O/sandbox.log" | tail -5
grep -E "DIFFER|FAILED" -A2 "$O/runs.log" | head -24
echo "== table"
echo "test_cuda_sample rc=$st: $(tail -1 "$O/sample.log")"
echo "test_cuda_kernels rc=$k: $(grep -c '^ok' "$O/kernels.log") ok lines, $(grep -c FAIL "$O/kernels.log") FAIL"
echo "test_cuda_forward rc=$f: $(tail -1 "$O/forward.log")"
echo "test_gpu_sandbox rc=$s"
echo "mlxr run cuda vs cpu (64 tokens): $same of $n equal"

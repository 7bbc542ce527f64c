#!/bin/sh
# The cost of privilege separation: the same measurements (worker/bench.c)
# run in one process (build/inproc-bench) and through the broker and the
# sandboxed worker (`mlxr bench`, plain and --sealed), alternating, R rounds.
#   bench/privsep_cost.sh BUILD_DIR MODEL_DIR [ROUNDS] [PREFILL DECODE LONG]
set -eu
B=$1 M=$2 R=${3:-3} P=${4:-128} D=${5:-64} L=${6:-256}
i=0
while [ $i -lt "$R" ]; do
	echo "inproc $($B/inproc-bench "$M" "$P" "$D" "$L")"
	echo "worker $($B/mlxr bench "$M" --json --prefill "$P" --decode "$D" --long "$L")"
	echo "sealed $($B/mlxr bench "$M" --json --sealed --prefill "$P" --decode "$D" --long "$L")"
	i=$((i + 1))
done

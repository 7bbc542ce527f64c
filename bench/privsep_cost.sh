#!/bin/sh
# The cost of privilege separation: the same measurements (worker/bench.c)
# run in one process (build/inproc-bench) and through the broker and the
# sandboxed worker (`mlxr bench`, plain and --sealed), alternating, R rounds,
# each round preceded by the machine's load average (a shared machine's
# load moves these numbers more than anything measured here).
#   bench/privsep_cost.sh BUILD_DIR MODEL_DIR [ROUNDS] [PREFILL DECODE LONG]
# Load time alone: PREFILL DECODE LONG = 1 1 16.
set -eu
B=$1 M=$2 R=${3:-3} P=${4:-128} D=${5:-64} L=${6:-256}
i=0
while [ $i -lt "$R" ]; do
	echo "loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "inproc $($B/inproc-bench "$M" "$P" "$D" "$L")"
	echo "worker $($B/mlxr bench "$M" --json --prefill "$P" --decode "$D" --long "$L")"
	echo "sealed $($B/mlxr bench "$M" --json --sealed --prefill "$P" --decode "$D" --long "$L")"
	i=$((i + 1))
done

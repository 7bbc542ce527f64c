#!/bin/sh
# fuzz/run.sh BUILD TARGET SECONDS [libFuzzer flags...] — runs one harness
# for SECONDS from its committed seed corpus plus the corpus it grows in
# BUILD/corpus/TARGET. Exit status 0 only when libFuzzer found nothing:
# a crash, leak, timeout, OOM or sanitizer report fails, and the
# reproducer's path is printed. Output: BUILD/logs/TARGET.log.
set -u
build=$1 target=$2 secs=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build" && build=$(cd "$build" && pwd)
bin=$build/fuzz/${target}_fuzzer
seeds=$here/${target}_seed_corpus
[ -x "$bin" ] || { echo "fuzz: $bin missing (make fuzz)" >&2; exit 2; }
mkdir -p "$build/corpus/$target" "$build/artifacts/$target" "$build/logs"
dict=
[ -f "$here/$target.dict" ] && dict="-dict=$here/$target.dict"
log=$build/logs/$target.log
art=$build/artifacts/$target
corp=$build/corpus/$target
# -jobs mode writes per-job logs (fuzz-N.log) in the current directory.
mkdir -p "$build/logs/$target" && cd "$build/logs/$target" || exit 2
rm -f fuzz-*.log
MLXR_FUZZ_DIR=$here "$bin" -max_total_time="$secs" $dict -artifact_prefix="$art/" "$@" \
	"$corp" "$seeds" >"$log" 2>&1
rc=$?
stats=$(grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$log" | tail -n 1)
execs=$(grep -E '^stat::number_of_executed_units' "$log" | tail -n 1 | awk '{print $2}')
if [ $rc -ne 0 ]; then
	echo "FUZZ FAIL $target (exit $rc); last lines of $log:"
	tail -n 40 "$log"
	grep -ho 'Test unit written to .*' "$log" ./fuzz-*.log 2>/dev/null | sed 's/Test unit written to //' |
		while read -r f; do
			echo "reproducer: $f"
			echo "  rerun: MLXR_FUZZ_DIR=$here $bin $f"
		done
	exit 1
fi
echo "fuzz ok   $target ${secs}s: ${execs:-?} runs; $stats"

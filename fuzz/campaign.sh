#!/bin/sh
# fuzz/campaign.sh BUILD SECONDS [PARALLEL] [TARGET...] — a campaign of
# every harness (or the TARGETs named), PARALLEL at a time (default: one
# per CPU), each for SECONDS through fuzz/run.sh with FUZZ_FLAGS, growing
# BUILD/corpus/<target>. Prints a Markdown table of what each reached:
# executions, executions per second, edge coverage (libFuzzer's cov),
# features (ft) and corpus size; exits 1 if any harness failed (its
# reproducer is in BUILD/logs/<target>.result).
set -u
[ $# -ge 2 ] || { echo "usage: fuzz/campaign.sh BUILD SECONDS [PARALLEL] [TARGET...]" >&2; exit 2; }
build=$1 secs=$2
par=${3:-$(nproc)}
[ $# -ge 3 ] && shift 3 || shift $#
here=$(cd "$(dirname "$0")" && pwd)
flags=${FUZZ_FLAGS:--timeout=10 -rss_limit_mb=2048 -print_final_stats=1}
if [ $# -gt 0 ]; then
	targets=$*
else
	targets=$(for f in "$here"/*_fuzzer.c; do basename "$f" _fuzzer.c; done)
fi
mkdir -p "$build/logs"
build=$(cd "$build" && pwd)
export here build secs flags
# shellcheck disable=SC2016
printf '%s\n' $targets | xargs -P "$par" -I{} sh -c \
	'"$here/run.sh" "$build" {} "$secs" $flags >"$build/logs/{}.result" 2>&1' || true

fail=0
echo "| target | seconds | runs | runs/s | cov | ft | corpus | result |"
echo "|---|---|---|---|---|---|---|---|"
for t in $targets; do
	log=$build/logs/$t.log
	res=$build/logs/$t.result
	runs=$(grep -E '^stat::number_of_executed_units' "$log" 2>/dev/null | tail -n 1 | awk '{print $2}')
	rate=$(grep -E '^stat::average_exec_per_sec' "$log" 2>/dev/null | tail -n 1 | awk '{print $2}')
	last=$(grep -E '^#[0-9]+.*cov: ' "$log" 2>/dev/null | tail -n 1)
	cov=$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
	ft=$(echo "$last" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
	corp=$(ls "$build/corpus/$t" 2>/dev/null | wc -l)
	if grep -q '^fuzz ok' "$res" 2>/dev/null; then
		r=clean
	else
		r=FAILED
		fail=1
	fi
	echo "| $t | $secs | ${runs:-?} | ${rate:-?} | ${cov:-?} | ${ft:-?} | $corp | $r |"
done
if [ $fail -ne 0 ]; then
	for t in $targets; do
		grep -q '^fuzz ok' "$build/logs/$t.result" 2>/dev/null || cat "$build/logs/$t.result"
	done
	exit 1
fi

#!/bin/sh
# tests/cuda/run_ncu.sh BIN_DIR LIB_DIR — one device call: ncu details
# (speed of light, occupancy, warp stalls) of the tensor-core matvec on
# rows MV_ROWS (default "1 3") of cuda-bench's matvec table, and the
# per-kernel times of one 8B decode step at 4K context. Logs under $OUT.
B=$(cd "$1" && pwd); L=$(cd "$2" && pwd)
O=${OUT:-/tmp}; export LD_LIBRARY_PATH="$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for r in ${MV_ROWS:-1 3}; do
	MV_ONLY=$r timeout 120 ncu --clock-control none -k regex:k_matvec_mma --launch-skip 1 --launch-count 1 \
		--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
		--section SchedulerStats --section MemoryWorkloadAnalysis "$B/cuda-bench" mv > "$O/ncu_mv$r.txt" 2>&1
	echo "== row $r rc=$?"
	grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Issued Ipc|No Eligible|Block Limit|Dynamic Shared|Stall|Warp Cycles Per Issued|L2 Hit|Mem Busy|Max Bandwidth|One or More" "$O/ncu_mv$r.txt" | head -30
done
timeout 150 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
	"$B/cuda-bench" prof4k 8b > "$O/prof4k.csv" 2> "$O/prof4k.err"; echo "prof4k rc=$?"
python3 - "$O/prof4k.csv" <<'PY' 2>&1 | tail -14
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value")
t = collections.defaultdict(float); n = collections.Counter()
for r in rows[1:]:
    name = r[ki].split("(")[0].split("<")[0]; t[name] += float(r[vi].replace(",", "")) / 1000; n[name] += 1
tot = sum(t.values())
for k, v in sorted(t.items(), key=lambda x: -x[1]):
    print("%-22s %5d launches %9.1f us %5.1f%%" % (k[:22], n[k], v, 100 * v / tot))
print("total %.1f us in %d kernels" % (tot, sum(n.values())))
PY

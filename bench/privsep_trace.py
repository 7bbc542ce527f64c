#!/usr/bin/env python3
"""bench/privsep_trace.py — where the load time goes, in one process and
through the broker and the sandboxed worker, step by step (MLXR_TRACE=1,
common/trace.h). Alternates R rounds of `inproc-bench` and `mlxr bench`
(load only) and prints the median time of every step from the start of the
load, and the load time each reports.

    bench/privsep_trace.py BUILD_DIR MODEL_DIR [ROUNDS]   (make BUILD_DIR/inproc-bench first)

A measurement, not a test: on a busy machine the medians move with the load.
"""
import json
import os
import statistics
import subprocess
import sys


def run(cmd):
    env = dict(os.environ, MLXR_TRACE="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    marks = []
    for line in p.stderr.splitlines():
        if line.startswith("mlxr-trace "):
            _, t, step = line.split(None, 2)
            marks.append((float(t), step))
    t0 = marks[0][0]
    steps = {step: t - t0 for t, step in marks}
    load = json.loads(p.stdout.strip().splitlines()[-1])["load_s"] * 1000
    return steps, load


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    b, m = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    ip, wk = [], []
    for _ in range(rounds):
        ip.append(run([f"{b}/inproc-bench", m, "1", "1", "16"]))
        wk.append(run([f"{b}/mlxr", "bench", m, "--device", "cpu", "--json", "--prefill", "1", "--decode", "1",
                       "--long", "16"]))
    for name, runs in (("in one process", ip), ("broker + worker", wk)):
        print(f"{name} ({rounds} rounds, ms from the start of the load, medians)")
        med = {s: statistics.median(r[0][s] for r in runs if s in r[0]) for s in runs[0][0]}
        for s, v in sorted(med.items(), key=lambda kv: kv[1]):
            print(f"  {v:8.2f}  {s}")
        print(f"  {statistics.median(r[1] for r in runs):8.2f}  load_s as reported")
    ratio = statistics.median(w[1] / i[1] for i, w in zip(ip, wk))
    print(f"per-round load ratio (worker / in-process), median: {ratio:.3f}")


if __name__ == "__main__":
    main()

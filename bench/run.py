#!/usr/bin/env python3
"""bench/run.py — mlxr against what a user would pick instead, on this machine,
the same model shapes and the same bits, in one run.

    bench/run.py [--shapes S ...] [--bits 4 8] [--rounds 3] [--threads N]
                 [--engines mlxr llama.cpp mlx-lm] [--quick] [--out DIR]
    make bench [BENCH_ARGS="--shapes llama3.2-1b --bits 4"]

Run it with the reference venv's python (~/.cache/mlxr/venv: mlx, mlx-lm,
gguf, numpy). It
  1. builds the models it needs (bench/models.py): random weights with the
     real configurations, an MLX directory (4- or 8-bit, group 64) and a
     GGUF of the same tensors (Q4_0 / Q8_0), cached outside the repository;
  2. makes sure llama.cpp is there (bench/setup_peers.sh: llama-cpp-python,
     pinned, built from source by pip into ~/.cache/mlxr/bench-venv);
  3. for each shape x bits runs every engine once per round, the order of
     the engines rotating from round to round, each run a fresh process:
       mlxr       `mlxr bench --json` through the sandboxed worker, as users
                  run it (two runs: prefill 128 + decode after 1K, prefill
                  512 + decode after 4K)
       llama.cpp  bench/peer_llamacpp.py on the GGUF, same thread count
       mlx-lm     bench/peer_mlxlm.py on MLX's CPU backend, same directory
     and takes the median of every figure over the rounds;
  4. writes bench/results/<UTC date-time>.json (everything, per round) and
     .md (the table), and prints the table.

Figures: prefill tok/s at 128 and 512 tokens; decode tok/s after 16 tokens
("short") and after 1K and 4K; time to first token (prefill of 128 tokens
to the first token's logits); peak resident memory; load time (from the
page cache: every run after the first finds the files there); the memory
read bandwidth measured by mlxr's worker (1 GiB parallel sum, best of 5);
the bandwidth-bound decode rate = bandwidth / weight bytes read per token,
and the fraction of it each engine reaches at short context.

A benchmark, not a test: it asserts nothing. Wall-clock numbers on a shared
machine are only as good as its load: the load average before and after
each run is recorded and printed with the table.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import models  # noqa: E402

BENCH_VENV = Path(os.environ.get("MLXR_BENCH_VENV", Path.home() / ".cache" / "mlxr" / "bench-venv"))
ENGINES = ["mlxr", "llama.cpp", "mlx-lm"]
# mlxr's worker allocates a 1 GiB buffer for its bandwidth pass after every
# model allocation; its VmHWM is therefore the model-phase peak + 1024 MiB.
MLXR_BW_BUFFER_MB = 1024.0


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def loadavg():
    return os.getloadavg()[0]


def run_json(cmd, env=None, timeout=3600):
    t = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))}: status {p.returncode}\n{p.stderr[-2000:]}")
    line = [l for l in p.stdout.splitlines() if l.startswith("{")][-1]
    r = json.loads(line)
    r["_wall_s"] = time.time() - t
    return r


def run_mlxr(mlxr, mdir, a):
    env = dict(os.environ, MLXR_THREADS=str(a.threads))
    common = [str(mlxr), "bench", str(mdir / "mlx"), "--json", "--decode", str(a.decode)]
    # the long context must exceed the prefill (bench prefills it separately)
    r1 = run_json(common + ["--prefill", "128", "--long", str(a.long[0])], env)
    r2 = run_json(common + ["--prefill", "512", "--long", str(a.long[-1])], env)
    decode = {"16": statistics.median([r1["decode_tok_s"], r2["decode_tok_s"]]),
              str(a.long[0]): r1["decode_long_tok_s"], str(a.long[-1]): r2["decode_long_tok_s"]}
    return dict(engine="mlxr", version=mlxr_version(mlxr), threads=r1["threads"], kernels=r1["kernels"],
                load_s=r1["load_s"], prefill={"128": r1["prefill_tok_s"], "512": r2["prefill_tok_s"]},
                ttft_s=r1["ttft_s"], decode=decode,
                peak_rss_mb=max(r1["peak_rss_mb"], r2["peak_rss_mb"]) - MLXR_BW_BUFFER_MB,
                mem_read_gb_s=max(r1["mem_read_gb_s"], r2["mem_read_gb_s"]),
                weight_bytes_per_token=r1["weight_bytes_per_token"], raw=[r1, r2])


def run_llamacpp(mdir, a):
    cmd = [str(BENCH_VENV / "bin" / "python"), str(HERE / "peer_llamacpp.py"), str(mdir / "model.gguf"),
           "--threads", str(a.threads), "--decode", str(a.decode), "--long", *map(str, a.long)]
    return run_json(cmd)


def run_mlxlm(mdir, a):
    cmd = [sys.executable, str(HERE / "peer_mlxlm.py"), str(mdir / "mlx"), "--decode", str(a.decode),
           "--long", *map(str, a.long)]
    return run_json(cmd)


def mlxr_version(mlxr):
    try:
        v = subprocess.run([str(mlxr), "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        v = "?"
    try:
        c = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True).stdout.strip()
    except OSError:
        c = "?"
    return f"{v} ({c})"


def gguf_bytes(path):
    import gguf
    r = gguf.GGUFReader(str(path))
    return sum(int(t.n_bytes) for t in r.tensors)


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def summarize(runs):
    """Median of every figure over the rounds of one engine."""
    s = dict(engine=runs[0]["engine"], version=runs[0]["version"], threads=runs[0].get("threads"),
             rounds=len(runs), load_avg=med([r["load_before"] for r in runs]))
    s["load_s"] = med([r["load_s"] for r in runs])
    s["ttft_s"] = med([r["ttft_s"] for r in runs])
    s["peak_rss_mb"] = med([r["peak_rss_mb"] for r in runs])
    s["prefill"] = {k: med([r["prefill"].get(k) for r in runs]) for k in runs[0]["prefill"]}
    s["decode"] = {k: med([r["decode"].get(k) for r in runs]) for k in runs[0]["decode"]}
    if "kernels" in runs[0]:
        s["kernels"] = runs[0]["kernels"]
    if "notes" in runs[0]:
        s["notes"] = runs[0]["notes"]
    return s


def machine():
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    flags = open("/proc/cpuinfo").read()
    isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "amx_int8") if f" {f}" in flags]
    return dict(cpu=cpu, cpus=os.cpu_count(), isa=isa, kernel=platform.release(),
                mem_gb=round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1))


def fmt(v, nd=1):
    if v is None:
        return "—"
    return f"{v:.{nd}f}"


def table(res):
    bw = res["mem_read_gb_s"]
    lines = [f"Machine: {res['machine']['cpu']}, {res['machine']['cpus']} CPUs "
             f"({', '.join(res['machine']['isa'])}), {res['machine']['mem_gb']} GiB; "
             f"{res['threads']} threads; memory read {fmt(bw)} GB/s (mlxr worker, 1 GiB sum). "
             f"{res['date']}; load average {fmt(res['load_min'])}–{fmt(res['load_max'])} during the run; "
             f"{res['rounds']} rounds, medians.",
             "Versions: " + "; ".join(sorted({f"{e['version']}" for c in res["cases"] for e in c["engines"]})) + ".",
             "",
             "| shape | bits | engine | load s | TTFT 128 ms | prefill 128 tok/s | prefill 512 tok/s | "
             f"decode tok/s | decode @{res['long'][0]} | decode @{res['long'][-1]} | bound tok/s | of bound | "
             "peak RSS MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    longs = res["long"]
    for c in res["cases"]:
        for e in c["engines"]:
            wb = c["weight_bytes"]["gguf" if e["engine"] == "llama.cpp" else "mlx"]
            bound = bw * 1e9 / wb if bw else None
            d = e["decode"]
            frac = d.get("16") / bound if bound and d.get("16") else None
            lines.append(
                f"| {c['shape']} | {c['bits']} ({c['gguf_type'] if e['engine'] == 'llama.cpp' else 'g64'}) | "
                f"{e['engine']}{'' if e['rounds'] == res['rounds'] else ' (%d round%s)' % (e['rounds'], 's' if e['rounds'] > 1 else '')} | {fmt(e['load_s'], 2)} | {fmt(e['ttft_s'] * 1e3 if e['ttft_s'] else None, 0)} | "
                f"{fmt(e['prefill'].get('128'))} | {fmt(e['prefill'].get('512'))} | {fmt(d.get('16'))} | "
                f"{fmt(d.get(str(longs[0])))} | {fmt(d.get(str(longs[-1])))} | {fmt(bound)} | "
                f"{fmt(frac * 100 if frac else None, 0)}% | {fmt(e['peak_rss_mb'], 0)} |")
    lines += ["",
              "Bound = memory read bandwidth ÷ weight bytes read per decoded token (every tensor; the tied "
              "embedding is the output layer). Decode \"short\" is after 16 tokens. mlx-lm: long-context KV "
              "filled directly (not prefilled); threads chosen by MLX. mlxr peak RSS excludes its 1 GiB "
              "bandwidth buffer."]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=list(models.SHAPES), choices=list(models.SHAPES))
    ap.add_argument("--bits", nargs="+", type=int, default=[4, 8], choices=[4, 8])
    ap.add_argument("--engines", nargs="+", default=ENGINES, choices=ENGINES)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--decode", type=int, default=32, help="tokens per decode measurement")
    ap.add_argument("--long", type=int, nargs=2, default=[1024, 4096], metavar=("CTX1", "CTX2"))
    ap.add_argument("--mlxlm-rounds", type=int, default=None,
                    help="rounds for mlx-lm (default --rounds): MLX's CPU backend takes minutes a run here")
    ap.add_argument("--mlxlm-shapes", nargs="+", default=None, choices=list(models.SHAPES),
                    help="shapes mlx-lm runs on (default all)")
    ap.add_argument("--quick", action="store_true",
                    help="smallest shape, 4 bits, 1 round, 16 decode tokens, contexts 256/1024")
    ap.add_argument("--mlxr", default=os.environ.get("MLXR", str(ROOT / "build" / "mlxr")))
    ap.add_argument("--out", default=str(HERE / "results"))
    a = ap.parse_args(argv)
    if a.quick:
        a.shapes, a.bits, a.rounds, a.decode, a.long = a.shapes[:1], [4], 1, 16, [256, 1024]

    if "llama.cpp" in a.engines:
        subprocess.run([str(HERE / "setup_peers.sh"), str(BENCH_VENV)], check=True)
    if "mlxr" in a.engines and not os.access(a.mlxr, os.X_OK):
        sys.exit(f"bench: no mlxr binary at {a.mlxr} (make, or --mlxr PATH)")

    now = datetime.datetime.now(datetime.timezone.utc)
    res = dict(date=now.strftime("%Y-%m-%d %H:%M UTC"), machine=machine(), threads=a.threads, rounds=a.rounds,
               decode_tokens=a.decode, long=a.long, cases=[], loads=[])
    bws = []
    for shape in a.shapes:
        for bits in a.bits:
            mdir = models.ensure(shape, bits, log)
            case = dict(shape=shape, bits=bits, group_size=models.GROUP, gguf_type=models.GGUF_TYPE[bits],
                        model_dir=str(mdir),
                        weight_bytes=dict(mlx=models.weight_bytes_mlx(mdir / "mlx"),
                                          gguf=gguf_bytes(mdir / "model.gguf")),
                        rounds={e: [] for e in a.engines}, errors=[])
            for r in range(a.rounds):
                order = a.engines[r % len(a.engines):] + a.engines[:r % len(a.engines)]
                for e in order:
                    if e == "mlx-lm" and (r >= (a.mlxlm_rounds if a.mlxlm_rounds is not None else a.rounds) or
                                          (a.mlxlm_shapes and shape not in a.mlxlm_shapes)):
                        continue
                    l0 = loadavg()
                    try:
                        if e == "mlxr":
                            out = run_mlxr(a.mlxr, mdir, a)
                            bws.append(out["mem_read_gb_s"])
                        elif e == "llama.cpp":
                            out = run_llamacpp(mdir, a)
                        else:
                            out = run_mlxlm(mdir, a)
                    except Exception as ex:  # record and go on: one engine failing is a result too
                        case["errors"].append(f"{e} round {r}: {ex}")
                        log(f"bench: {shape} q{bits} {e} round {r} FAILED: {ex}")
                        continue
                    out["load_before"], out["load_after"] = l0, loadavg()
                    res["loads"] += [l0, out["load_after"]]
                    case["rounds"][e].append(out)
                    log(f"bench: {shape} q{bits} {e} round {r}: decode {fmt(out['decode'].get('16'))} tok/s, "
                        f"prefill512 {fmt(out['prefill'].get('512'))} tok/s (load {l0:.1f})")
            case["engines"] = [summarize(case["rounds"][e]) for e in a.engines if case["rounds"][e]]
            res["cases"].append(case)
    res["mem_read_gb_s"] = med(bws)
    res["load_min"] = min(res["loads"]) if res["loads"] else None
    res["load_max"] = max(res["loads"]) if res["loads"] else None
    md = table(res)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = now.strftime("%Y-%m-%dT%H%MZ")
    (out / f"{stem}.json").write_text(json.dumps(res, indent=1))
    (out / f"{stem}.md").write_text(md + "\n")
    print(md)
    log(f"bench: wrote {out / stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

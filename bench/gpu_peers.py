#!/usr/bin/env python3
"""bench/gpu_peers.py — mlxr's CUDA worker beside its GPU peers, on one GPU,
the same shapes, in one run (issue 9): llama.cpp's CUDA backend through
llama-cpp-python (bench/peer_llamacpp.py --gpu-layers -1) on a Q4_0 GGUF of
the shape, and mlx-lm on MLX's CUDA backend (bench/peer_mlxlm.py --device
gpu) on the very MLX directory mlxr runs. Run on the GPU machine by
bench/gpu_peers.sh, which installs what bench/gpu_peers_prep.sh made.

    gpu_peers.py --peers .peers [--shapes llama-1b qwen3-4b llama-8b] [--rounds 1] [--out DIR]

- Models: bench/mk_random_mlx.py, random weights of the real shapes, 4-bit
  group 64 (f16 scales and biases) and Q4_0: 4.5 bits per weight both.
- Every engine a fresh process, the same order every round (mlxr,
  llama.cpp, mlx-lm), each shape's models written first; the same token
  ids (worker/bench.c's generator), prefill 512 and 4096, greedy decode of
  --decode tokens after 16 and after 4096 tokens of context.
- mlxr: `mlxr bench DIR --device cuda --json`, twice (prefill 512 and
  4096; both decode at 16 and 4096, their mean is reported), through the
  sandboxed GPU worker as users run it; mlxr-fast: the same with
  --fast-prefill (prefill GEMMs and attention on f16 operands).
- Bound: the device-memory read bandwidth mlxr measured (2 GiB reduction)
  / weight bytes per decoded token (every matrix, the output layer once).
Output: OUT/gpu_peers.json (every run, raw) and OUT/gpu_peers.md (the table).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import mk_random_mlx  # noqa: E402
import models  # noqa: E402

ENGINES = ["mlxr", "mlxr-fast", "llama.cpp", "mlx-lm"]  # mlxr-fast: mlxr bench --fast-prefill


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def run_json(cmd, env=None, timeout=300):
    t = time.time()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode("utf-8", "replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return dict(error=f"timeout after {timeout} s", stderr=err[-2000:], wall_s=time.time() - t)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode or not lines:
        return dict(error=f"exit {p.returncode}", stderr=p.stderr[-3000:], stdout=p.stdout[-1000:],
                    wall_s=time.time() - t, cmd=" ".join(map(str, cmd)))
    r = json.loads(lines[-1])
    r["wall_s"] = time.time() - t
    return r


def bytes_per_token(s):
    """Weight bytes read per decoded token: every matrix at 4.5 bits (MLX
    q4 g64 with f16 scale+bias = Q4_0), the output layer once, norms f32/f16
    ignored (< 0.01%); the embedding row is negligible."""
    n = 0
    for mname, _, (rows, *cols), kind in models.tensors(s):
        if kind != "mat" or (mname == "model.embed_tokens" and not s["tie_word_embeddings"]):
            continue
        n += rows * cols[0] * 9 // 16
    return n


def engine_runs(eng, shape, mdir, a, peers):
    if eng in ("mlxr", "mlxr-fast"):
        env = dict(os.environ, MLXR_HOME=str(a.work / "home"), HOME=str(a.work / "home"),
                   LD_LIBRARY_PATH=":".join(filter(None, [str(peers / "lib"), os.environ.get("LD_LIBRARY_PATH")])))
        (a.work / "home").mkdir(parents=True, exist_ok=True)
        base = [str(peers / "bin" / "mlxr"), "bench", str(mdir / "mlx"), "--device", a.mlxr_device, "--json",
                "--decode", str(a.decode), "--long", str(a.long)] + (["--fast-prefill"] if eng == "mlxr-fast" else [])
        raw = [run_json(base + ["--prefill", str(p)], env) for p in a.prefill]
        ok = [r for r in raw if "error" not in r]
        if not ok:
            return dict(engine=eng, error=raw[0].get("error"), stderr=raw[0].get("stderr"), raw=raw)
        return dict(engine=eng, version=a.mlxr_version, device=ok[0].get("device"), kernels=ok[0].get("kernels"),
                    prefill_x=ok[0].get("prefill_x"),
                    load_s=ok[0]["load_s"],
                    prefill={str(r["prefill_tokens"]): r["prefill_tok_s"] for r in ok},
                    decode={"16": statistics.mean(r["decode_tok_s"] for r in ok),
                            str(a.long): statistics.mean(r["decode_long_tok_s"] for r in ok)},
                    mem_read_gb_s=max(r["mem_read_gb_s"] for r in ok),
                    weight_bytes_per_token=ok[0]["weight_bytes_per_token"], raw=raw)
    common = ["--decode", str(a.decode), "--prefill", *map(str, a.prefill), "--long", str(a.long)]
    if eng == "llama.cpp":
        cmd = [sys.executable, str(HERE / "peer_llamacpp.py"), str(mdir / "model.gguf"), "--threads",
               str(a.threads), "--gpu-layers", "-1", *common]
    else:
        cmd = [sys.executable, str(HERE / "peer_mlxlm.py"), str(mdir / "mlx"), "--device", "gpu", "--cap", "60",
               *common]
    r = run_json(cmd)
    r.setdefault("engine", eng)
    return r


def fmt(x, nd=0):
    return "—" if x is None else f"{x:,.{nd}f}"


def table(res):
    L, P = res["long"], res["prefill"]
    lines = [f"GPU: {res['gpu']}. Device-memory read {fmt(res['mem_read_gb_s'])} GB/s (measured by mlxr's worker, "
             f"2 GiB reduction). {res['date']}; {res['rounds_done']} round(s)"
             f"{', medians' if res['rounds_done'] > 1 else ''}; engines in the order "
             f"{', '.join(res['engines'])} each round, each a fresh process.",
             "Versions: " + "; ".join(res["versions"]) + ".", "",
             f"| shape (q4) | engine | load s | prefill {P[0]} tok/s | prefill {P[-1]} tok/s | decode @16 tok/s | "
             f"decode @{L} tok/s | bound tok/s | @16 of bound | @{L} of bound |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in res["cases"]:
        bound = res["mem_read_gb_s"] * 1e9 / c["bytes_per_token"] if res["mem_read_gb_s"] else None
        for e in c["engines"]:
            if e.get("error"):
                lines.append(f"| {c['shape']} | {e['engine']} | failed: {e['error']} | | | | | | | |")
                continue
            d, p = e["decode"], e["prefill"]
            fr = [d.get(k) / bound * 100 if bound and d.get(k) else None for k in ("16", str(L))]
            fmt_name = "Q4_0" if e["engine"] == "llama.cpp" else "g64"
            lines.append(f"| {c['shape']} ({fmt_name}) | {e['engine']} | {fmt(e.get('load_s'), 2)} | "
                         f"{fmt(p.get(str(P[0])))} | {fmt(p.get(str(P[-1])))} | {fmt(d.get('16'))} | "
                         f"{fmt(d.get(str(L)))} | {fmt(bound)} | {fmt(fr[0])}% | {fmt(fr[1])}% |")
    lines += ["", "Bound = read bandwidth ÷ weight bytes per decoded token (4.5 bits per weight for every "
              "matrix, the output layer once; the same for the three engines). Random weights: only speed "
              "means anything. mlxr: `mlxr bench --device cuda` (sandboxed GPU worker, greedy decode step "
              "captured as a CUDA graph). llama.cpp: llama-cpp-python, all layers on the GPU, flash attention "
              "on, one llama_decode per token from Python, argmax on the host. mlx-lm: its model and KV cache "
              "on MLX's CUDA backend, prefill in 2048-token chunks, decode pipelined as mlx_lm.generate_step."]
    return "\n".join(lines)


def merge(runs):
    """Median over rounds of each figure (runs of one engine on one shape)."""
    ok = [r for r in runs if not r.get("error")]
    if not ok:
        return runs[-1]
    out = dict(ok[0])
    for key in ("prefill", "decode"):
        out[key] = {k: statistics.median([r[key][k] for r in ok if r[key].get(k) is not None] or [0]) or None
                    for k in ok[0][key]}
    out["load_s"] = statistics.median(r["load_s"] for r in ok)
    out["rounds"] = len(ok)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", type=Path, default=HERE.parent / ".peers")
    ap.add_argument("--work", type=Path, default=Path("/tmp/gpu-peers"))
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/gpu-peers/out")))
    ap.add_argument("--shapes", nargs="+", default=["llama-1b", "qwen3-4b", "llama-8b"],
                    choices=sorted(mk_random_mlx.SHAPES))
    ap.add_argument("--engines", nargs="+", default=ENGINES, choices=ENGINES)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--budget", type=float, default=1e9, help="seconds: no new round starts after this")
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--prefill", type=int, nargs="+", default=[512, 4096])
    ap.add_argument("--long", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=8, help="llama.cpp's CPU threads (all layers are on the GPU)")
    ap.add_argument("--mlxr-device", default="cuda", help=argparse.SUPPRESS)  # cpu: try the script without a GPU
    ap.add_argument("--table", type=Path, help="only remake the table from a gpu_peers.json (a run cut short)")
    a = ap.parse_args()
    if a.table:
        res = json.loads(a.table.read_text())
        a.out.mkdir(parents=True, exist_ok=True)
        finish(res, a.out)
        return 0
    t0 = time.time()
    a.work.mkdir(parents=True, exist_ok=True)
    a.out.mkdir(parents=True, exist_ok=True)
    peers = a.peers.resolve()
    commit = (peers / "COMMIT").read_text().strip() if (peers / "COMMIT").exists() else "?"
    try:
        v = subprocess.run([str(peers / "bin" / "mlxr"), "--version"], capture_output=True, text=True,
                           env=dict(os.environ, LD_LIBRARY_PATH=str(peers / "lib"))).stdout.strip()
    except OSError:
        v = "mlxr ?"
    a.mlxr_version = f"{v} ({commit})"
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    except OSError:
        gpu = "?"
    res = dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), gpu=gpu, shapes=a.shapes,
               engines=a.engines, decode=a.decode, prefill=a.prefill, long=a.long, rounds=a.rounds, cases=[])
    dirs = {}
    for shape in a.shapes:
        s = mk_random_mlx.SHAPES[shape]
        mdir = a.work / shape
        if not (mdir / "model.gguf").exists():
            t = time.time()
            subprocess.run([sys.executable, str(HERE / "mk_random_mlx.py"), str(mdir / "mlx"), "--shape", shape,
                            "--tokenizer", str(peers / "tok"), "--gguf", str(mdir / "model.gguf.tmp")], check=True,
                           stdout=subprocess.DEVNULL)
            os.rename(mdir / "model.gguf.tmp", mdir / "model.gguf")
            log(f"{shape}: models written in {time.time() - t:.1f} s")
        dirs[shape] = mdir
        res["cases"].append(dict(shape=shape, bytes_per_token=bytes_per_token(s), runs={e: [] for e in a.engines}))
    rounds = 0
    for rnd in range(a.rounds):
        if rnd and time.time() - t0 > a.budget:
            log(f"budget: stopping after {rnd} round(s)")
            break
        for c in res["cases"]:
            for eng in a.engines:
                t = time.time()
                r = engine_runs(eng, c["shape"], dirs[c["shape"]], a, peers)
                r["round"] = rnd
                c["runs"][eng].append(r)
                log(f"round {rnd} {c['shape']} {eng}: {time.time() - t:.0f} s",
                    r.get("error") or json.dumps(dict(prefill=r.get("prefill"), decode=r.get("decode"))))
                if r.get("error"):
                    log("  stderr:", (r.get("stderr") or "")[-1500:])
        rounds += 1
        with open(a.out / "gpu_peers.json", "w") as f:  # after every round: something comes back even if cut short
            json.dump(res, f, indent=1)
    res["rounds_done"] = rounds
    res["wall_s"] = time.time() - t0
    finish(res, a.out)
    return 0


def finish(res, out):
    """Medians over the rounds, the bandwidth, the table; OUT/gpu_peers.{json,md}."""
    bw = [r["mem_read_gb_s"] for c in res["cases"] for r in c["runs"].get("mlxr", []) if not r.get("error")]
    res["mem_read_gb_s"] = statistics.median(bw) if bw else None
    res.setdefault("rounds_done", max((len(v) for c in res["cases"] for v in c["runs"].values()), default=0))
    vers = set()
    for c in res["cases"]:
        c["engines"] = [merge(c["runs"][e]) for e in res["engines"] if c["runs"].get(e)]
        vers |= {e["version"] for e in c["engines"] if e.get("version")}
    res["versions"] = sorted(vers)
    md = table(res)
    with open(out / "gpu_peers.json", "w") as f:
        json.dump(res, f, indent=1)
    (out / "gpu_peers.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    sys.exit(main())

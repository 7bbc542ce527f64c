"""bench/peer_mlxlm.py — one benchmark run of mlx-lm on MLX's CPU backend on
an MLX directory, printed as one JSON line. Run by bench/run.py with the
reference venv's python, one process per run.

    peer_mlxlm.py MLX_DIR --decode N --long 1024 4096

Protocol as mlxr bench (worker/bench.c): the same pseudo-random ids, a
warm-up of 8 tokens, prefill timed to the evaluated logits of the last
token, greedy decode one token per forward call through mlx-lm's KV cache.
One difference: for decode at a long context the KV cache is filled with
random keys/values of the right shape and dtype (KVCache.update_and_fetch)
instead of being prefilled: MLX's CPU prefill of 4096 tokens takes minutes
here, and decode cost does not depend on the cached values.
Threads: MLX's CPU backend decides its own (there is no thread setting).
MLX's CPU backend is slow here (seconds per token): each measurement is
capped at --cap seconds (decode stops early; a prefill whose estimate from
the previous one exceeds it is skipped and reported as null).

--device gpu runs on MLX's GPU backend (mlx-cuda on Linux) instead, as
mlx-lm's own generate does: long contexts are really prefilled (in
--prefill-step chunks, mlx-lm's default 2048), the warm-up also runs the
longest prefill and 8 decode steps after it (MLX compiles GPU kernels at
first use), and decode is pipelined like mlx_lm.generate_step (the next step is
queued with async_eval before the current token is read). Without it,
nothing changes (the CPU bench).
"""
import argparse
import json
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from peer_llamacpp import ids_like_mlxr, peak_rss_mb  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mlx_dir")
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--prefill", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--long", type=int, nargs="*", default=[1024, 4096])
    ap.add_argument("--cap", type=float, default=20.0,
                    help="seconds per measurement: decode stops early, a prefill estimated longer is skipped")
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--prefill-step", type=int, default=2048, help="--device gpu: prefill chunk (mlx-lm's default)")
    a = ap.parse_args()
    gpu = a.device == "gpu"

    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.models.cache import make_prompt_cache
    import importlib.metadata as md

    mx.set_default_device(mx.gpu if gpu else mx.cpu)
    t0 = time.perf_counter()
    model, _ = load(a.mlx_dir)
    mx.eval(model.parameters())
    load_s = time.perf_counter() - t0
    args = model.args
    vocab = args.vocab_size
    nkv = args.num_key_value_heads
    hd = getattr(args, "head_dim", None) or args.hidden_size // args.num_attention_heads
    ids = ids_like_mlxr(max(a.prefill + [16] + (a.long if gpu else [])), vocab)

    def prefill(n):
        cache = make_prompt_cache(model)
        t = time.perf_counter()
        if gpu:  # as mlx_lm.generate_step: chunks, each evaluated, the last one's logits kept
            i = 0
            while n - i > a.prefill_step:
                model(mx.array(ids[i:i + a.prefill_step])[None], cache=cache)
                mx.eval([c.state for c in cache])
                i += a.prefill_step
            logits = model(mx.array(ids[i:n])[None], cache=cache)[0, -1]
        else:
            logits = model(mx.array(ids[:n])[None], cache=cache)[0, -1]
        tok = mx.argmax(logits).item()
        return time.perf_counter() - t, tok, cache

    def decode(cache, tok, n):
        """tok/s over up to n tokens, stopping after --cap seconds (at least 2 tokens)."""
        t = time.perf_counter()
        for i in range(n):
            tok = mx.argmax(model(mx.array([[tok]]), cache=cache)[0, -1]).item()
            if i >= 1 and time.perf_counter() - t > a.cap:
                n = i + 1
                break
        return n / (time.perf_counter() - t)

    def step(y, cache):
        return mx.argmax(model(y.reshape(1, 1), cache=cache)[0, -1])

    def decode_pipelined(cache, tok, n):
        """tok/s over n tokens, two steps in flight (mlx_lm.generate_step's loop)."""
        t = time.perf_counter()
        y = step(mx.array([tok]), cache)
        mx.async_eval(y)
        for _ in range(n):
            nxt = step(y, cache)
            mx.async_eval(nxt)
            y.item()
            y = nxt
        return n / (time.perf_counter() - t)

    if gpu:
        decode = decode_pipelined
    prefill(8)
    if gpu:
        _, tok, cache = prefill(max(a.prefill + a.long))
        decode(cache, tok, 8)
    res = dict(engine="mlx-lm", version=f"mlx-lm {md.version('mlx-lm')}, mlx {md.version('mlx')}",
               threads=None, load_s=load_s, prefill={}, ttft_s=None, decode={},
               notes="prefilled, pipelined decode" if gpu else "long-context KV filled directly")
    if gpu:
        res.update(device=str(mx.default_device()))
    rate = None
    for n in sorted(a.prefill):
        if rate and n / rate > a.cap:
            res["prefill"][str(n)] = None  # skipped: estimated n / rate seconds
            res.setdefault("skipped", []).append(f"prefill {n}: est. {n / rate:.0f} s")
            continue
        dt, _, _ = prefill(n)
        rate = n / dt
        res["prefill"][str(n)] = rate
        if n == min(a.prefill):
            res["ttft_s"] = dt
    _, tok, cache = prefill(16)
    res["decode"]["16"] = decode(cache, tok, a.decode)
    dtype = model.parameters()["model"]["norm"]["weight"].dtype
    for ctx in a.long:
        if gpu:
            _, tok2, cache = prefill(ctx)
            res["decode"][str(ctx)] = decode(cache, tok2, a.decode)
            continue
        cache = make_prompt_cache(model)
        for c in cache:
            kv = (mx.random.normal((1, nkv, ctx, hd)) * 0.1).astype(dtype)
            c.update_and_fetch(kv, kv)
        mx.eval([c.keys for c in cache])
        res["decode"][str(ctx)] = decode(cache, tok, a.decode)
    res["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
    a = ap.parse_args()

    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.models.cache import make_prompt_cache
    import importlib.metadata as md

    mx.set_default_device(mx.cpu)
    t0 = time.perf_counter()
    model, _ = load(a.mlx_dir)
    mx.eval(model.parameters())
    load_s = time.perf_counter() - t0
    args = model.args
    vocab = args.vocab_size
    nkv = args.num_key_value_heads
    hd = getattr(args, "head_dim", None) or args.hidden_size // args.num_attention_heads
    ids = ids_like_mlxr(max(a.prefill + [16]), vocab)

    def prefill(n):
        cache = make_prompt_cache(model)
        t = time.perf_counter()
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

    prefill(8)
    res = dict(engine="mlx-lm", version=f"mlx-lm {md.version('mlx-lm')}, mlx {md.version('mlx')}",
               threads=None, load_s=load_s, prefill={}, ttft_s=None, decode={}, notes="long-context KV filled directly")
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

"""bench/peer_llamacpp.py — one benchmark run of llama.cpp (llama-cpp-python)
on a GGUF, printed as one JSON line. Run by bench/run.py with the bench
venv's python (bench/setup_peers.sh), one process per run.

    peer_llamacpp.py MODEL.gguf --threads T --decode N --long 1024 4096 [--gpu-layers N]

The protocol is mlxr bench's (worker/bench.c): the same pseudo-random token
ids, a warm-up of 8 tokens, prefill timed from the first token to the
logits of the last, decode greedy (argmax of the logits) one token per
llama_decode, after 16 tokens ("short") and after each long context.
--gpu-layers N offloads N layers (-1: all) to a GPU backend (a CUDA build of
llama-cpp-python, bench/gpu_peers_prep.sh); flash attention is then on, as
llama.cpp's own default (auto) picks on CUDA (llama-cpp-python's Llama
turns it off unless asked), and the warm-up also runs the longest prefill
and 8 decode steps after it. Without it, nothing changes (the CPU bench).
"""
import argparse
import json
import sys
import time


def ids_like_mlxr(n, vocab):
    """The LCG of worker/bench.c: the same ids for every engine."""
    out, x = [], 12345
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) & ((1 << 64) - 1)
        out.append((x >> 33) % vocab)
    return out


def peak_rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--prefill", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--long", type=int, nargs="*", default=[1024, 4096])
    ap.add_argument("--gpu-layers", type=int, default=0, help="layers offloaded to the GPU (-1: all; default 0)")
    a = ap.parse_args()

    import numpy as np
    import llama_cpp
    from llama_cpp import Llama

    n_ctx = max(a.prefill + a.long + [16]) + a.decode + 16
    t0 = time.perf_counter()
    gpu = dict(n_gpu_layers=a.gpu_layers, flash_attn=True) if a.gpu_layers else {}
    llm = Llama(model_path=a.gguf, n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=a.threads,
                n_threads_batch=a.threads, use_mmap=True, logits_all=False, verbose=False, **gpu)
    load_s = time.perf_counter() - t0
    vocab = llm.n_vocab()
    ids = ids_like_mlxr(max(a.prefill + a.long + [16]), vocab)

    def argmax_last():
        # Llama.eval keeps no logits without logits_all: read the last row from the context
        p = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(p, shape=(vocab,))))

    def prefill(n):
        llm.reset()
        t = time.perf_counter()
        llm.eval(ids[:n])
        first = argmax_last()
        return time.perf_counter() - t, first

    def decode(tok, n):
        t = time.perf_counter()
        for _ in range(n):
            llm.eval([tok])
            tok = argmax_last()
        return time.perf_counter() - t

    prefill(8)  # warm-up: touch every weight once
    if a.gpu_layers:  # and load every GPU kernel both paths use (CUDA loads modules lazily)
        _, tok = prefill(max(a.prefill + a.long))
        decode(tok, 8)
    res = dict(engine="llama.cpp", version=f"llama-cpp-python {llama_cpp.__version__}", threads=a.threads,
               load_s=load_s, prefill={}, ttft_s=None, decode={})
    if a.gpu_layers:
        res.update(gpu_layers=a.gpu_layers, flash_attn=True,
                   gpu_offload=bool(llama_cpp.llama_supports_gpu_offload()))
    for n in a.prefill:
        dt, _ = prefill(n)
        res["prefill"][str(n)] = n / dt
        if n == min(a.prefill):
            res["ttft_s"] = dt  # prompt of the smallest size, to the first token's logits
    for ctx in [16] + a.long:
        _, tok = prefill(ctx)
        res["decode"][str(ctx)] = a.decode / decode(tok, a.decode)
    res["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Writes a random-weight MLX model directory of a real shape (numpy only,
no mlx needed): 4-bit group-64 affine codes, f16 scales and biases, f16
norms, llama architecture, tied embeddings. For measuring the engine where
mlx-lm is not installed (e.g. the GPU machine); the weights are noise, so
only speed means anything.

    mk_random_mlx.py OUT_DIR [--shape llama-1b|smollm2-135m] [--tokenizer tokenizer.json]
"""
import argparse
import json
import os
import struct

import numpy as np

SHAPES = {
    "smollm2-135m": dict(hidden_size=576, num_hidden_layers=30, intermediate_size=1536, num_attention_heads=9,
                         num_key_value_heads=3, vocab_size=49152, rope_theta=100000.0),
    "llama-1b": dict(hidden_size=2048, num_hidden_layers=16, intermediate_size=8192, num_attention_heads=32,
                     num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shape", default="llama-1b", choices=sorted(SHAPES))
    ap.add_argument("--tokenizer", help="a tokenizer.json to copy (its vocabulary must fit)")
    a = ap.parse_args()
    s = SHAPES[a.shape]
    rng = np.random.default_rng(0)
    H, I, L = s["hidden_size"], s["intermediate_size"], s["num_hidden_layers"]
    hd = H // s["num_attention_heads"]
    kvd = s["num_key_value_heads"] * hd
    bits, gs = 4, 64
    tensors = {}

    def qmat(name, rows, cols):
        tensors[name + ".weight"] = ("U32", [rows, cols * bits // 32],
                                     rng.integers(0, 2**32, size=(rows, cols * bits // 32), dtype=np.uint32))
        tensors[name + ".scales"] = ("F16", [rows, cols // gs],
                                     (rng.random((rows, cols // gs), dtype=np.float32) * 0.002).astype(np.float16))
        tensors[name + ".biases"] = ("F16", [rows, cols // gs],
                                     (-0.015 * np.ones((rows, cols // gs), dtype=np.float32)).astype(np.float16))

    qmat("model.embed_tokens", s["vocab_size"], H)
    tensors["model.norm.weight"] = ("F16", [H], np.ones(H, dtype=np.float16))
    for l in range(L):
        p = f"model.layers.{l}."
        qmat(p + "self_attn.q_proj", H, H)
        qmat(p + "self_attn.k_proj", kvd, H)
        qmat(p + "self_attn.v_proj", kvd, H)
        qmat(p + "self_attn.o_proj", H, H)
        qmat(p + "mlp.gate_proj", I, H)
        qmat(p + "mlp.up_proj", I, H)
        qmat(p + "mlp.down_proj", H, I)
        tensors[p + "input_layernorm.weight"] = ("F16", [H], np.ones(H, dtype=np.float16))
        tensors[p + "post_attention_layernorm.weight"] = ("F16", [H], np.ones(H, dtype=np.float16))
    os.makedirs(a.out, exist_ok=True)
    header, off, blobs = {"__metadata__": {"format": "mlx"}}, 0, []
    for name in sorted(tensors):
        dt, shape, arr = tensors[name]
        b = arr.tobytes()
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
    cfg = dict(model_type="llama", rms_norm_eps=1e-5, max_position_embeddings=8192, tie_word_embeddings=True,
               head_dim=hd, bos_token_id=1, eos_token_id=2,
               quantization={"group_size": gs, "bits": bits}, **s)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f)
    if a.tokenizer:
        with open(a.tokenizer, "rb") as src, open(os.path.join(a.out, "tokenizer.json"), "wb") as dst:
            dst.write(src.read())
    print(a.out, off / 1e9, "GB")


if __name__ == "__main__":
    main()

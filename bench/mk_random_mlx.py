#!/usr/bin/env python3
"""Writes a random-weight MLX model directory of a real shape (numpy only,
no mlx needed): 4-bit group-64 affine codes, f16 scales and biases, f16
norms, llama or qwen3 architecture. For measuring engines on a machine
where building a model through mlx is too slow (the GPU machine: an 8B
shape is written in seconds); the weights are noise, so only speed means
anything.

    mk_random_mlx.py OUT_DIR [--shape NAME] [--tokenizer FILE_OR_DIR] [--gguf OUT.gguf]

--tokenizer copies a tokenizer.json, or every tokenizer file of a folder
(tokenizer.json, tokenizer_config.json, chat_template.jinja: what mlx-lm's
load needs); its ids must fit in the shape's vocabulary.
--gguf also writes a Q4_0 GGUF of the same shape for llama.cpp (every
matrix Q4_0, the embedding and output too; f32 norms; random blocks with
small f16 scales; llama.cpp's tensor names; a placeholder SentencePiece
vocabulary as bench/models.py writes): 4.5 bits per weight, as the MLX
directory. It is written directly (no gguf package needed).
"""
import argparse
import json
import os
import shutil
import struct

import numpy as np

import models  # models.tensors: the tensor list of a shape, shared with the CPU bench

# Real configurations (Hugging Face config.json); "tie" = tied embeddings.
SHAPES = {
    "smollm2-135m": dict(model_type="llama", hidden_size=576, num_hidden_layers=30, intermediate_size=1536,
                         num_attention_heads=9, num_key_value_heads=3, head_dim=64, vocab_size=49152,
                         rope_theta=100000.0, tie_word_embeddings=True),
    "llama-1b": dict(model_type="llama", hidden_size=2048, num_hidden_layers=16, intermediate_size=8192,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                     rope_theta=500000.0, tie_word_embeddings=True),
    "llama-8b": dict(model_type="llama", hidden_size=4096, num_hidden_layers=32, intermediate_size=14336,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=128256,
                     rope_theta=500000.0, tie_word_embeddings=False),
    "qwen3-0.6b": dict(model_type="qwen3", hidden_size=1024, num_hidden_layers=28, intermediate_size=3072,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                       rope_theta=1000000.0, tie_word_embeddings=True),
    "qwen3-4b": dict(model_type="qwen3", hidden_size=2560, num_hidden_layers=36, intermediate_size=9728,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                     rope_theta=1000000.0, tie_word_embeddings=True),
}
BITS, GS = 4, 64
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def write_mlx(out, s, rng):
    """model.safetensors streamed tensor by tensor (an 8B shape never sits in memory whole)."""
    entries = []  # (name, dtype, shape, maker)
    for mname, _, shp, kind in models.tensors(s):
        if kind == "norm":
            entries.append((mname + ".weight", "F16", list(shp), lambda n=shp[0]: np.ones(n, dtype=np.float16)))
            continue
        rows, cols = shp
        entries += [
            (mname + ".weight", "U32", [rows, cols * BITS // 32],
             lambda r=rows, c=cols: rng.integers(0, 2**32, size=(r, c * BITS // 32), dtype=np.uint32)),
            (mname + ".scales", "F16", [rows, cols // GS],
             lambda r=rows, c=cols: (rng.random((r, c // GS), dtype=np.float32) * 0.002).astype(np.float16)),
            (mname + ".biases", "F16", [rows, cols // GS],
             lambda r=rows, c=cols: np.full((r, c // GS), -0.015, dtype=np.float16)),
        ]
    entries.sort(key=lambda e: e[0])
    size = {"U32": 4, "F16": 2}
    header, off = {"__metadata__": {"format": "mlx"}}, 0
    for name, dt, shp, _ in entries:
        n = size[dt] * int(np.prod(shp))
        header[name] = {"dtype": dt, "shape": shp, "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for name, dt, shp, make in entries:
            a = make()
            assert a.nbytes == header[name]["data_offsets"][1] - header[name]["data_offsets"][0], name
            f.write(a.tobytes())
    return off


# --- GGUF (v3) ---------------------------------------------------------------
GGML_F32, GGML_Q4_0 = 0, 2
T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR = 4, 5, 6, 7, 8, 9
ALIGN = 32


def _str(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def _kv(key, typ, val):
    out = _str(key) + struct.pack("<I", typ)
    if typ == T_STR:
        return out + _str(val)
    if typ == T_ARR:
        et, items = val
        out += struct.pack("<IQ", et, len(items))
        if et == T_STR:
            return out + b"".join(_str(i) for i in items)
        fmt = {T_F32: "f", T_I32: "i", T_U32: "I"}[et]
        return out + np.asarray(items, dtype=fmt).astype("<" + fmt).tobytes()
    fmt = {T_U32: "<I", T_I32: "<i", T_F32: "<f", T_BOOL: "<?"}[typ]
    return out + struct.pack(fmt, val)


def q4_0_random(rng, rows, cols):
    """rows x cols Q4_0 blocks: per 32 values one f16 scale d (small, positive:
    values d * (q - 8) stay tiny and finite) and 16 bytes of random nibbles."""
    nb = rows * cols // 32
    blk = rng.integers(0, 2**32, size=(nb, 5), dtype=np.uint32).view(np.uint8)[:, :18].copy()
    d = (rng.random(nb, dtype=np.float32) * 0.002 + 0.0005).astype(np.float16)
    blk[:, :2] = d.view(np.uint8).reshape(nb, 2)
    return blk


def write_gguf(path, s, rng):
    arch, V = s["model_type"], s["vocab_size"]
    # Placeholder SentencePiece vocabulary (as bench/models.py): <unk> <s> </s>,
    # the 256 byte tokens llama.cpp's SPM vocabulary looks up, then fillers.
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    toks += [f"t{i}" for i in range(len(toks), V)]
    types += [1] * (V - len(types))
    kvs = [("general.architecture", T_STR, arch), ("general.name", T_STR, f"mlxr-bench {arch} random"),
           ("general.file_type", T_U32, 2),  # MOSTLY_Q4_0
           ("general.alignment", T_U32, ALIGN),
           (f"{arch}.context_length", T_U32, 131072 if arch == "llama" else 40960),
           (f"{arch}.embedding_length", T_U32, s["hidden_size"]),
           (f"{arch}.block_count", T_U32, s["num_hidden_layers"]),
           (f"{arch}.feed_forward_length", T_U32, s["intermediate_size"]),
           (f"{arch}.attention.head_count", T_U32, s["num_attention_heads"]),
           (f"{arch}.attention.head_count_kv", T_U32, s["num_key_value_heads"]),
           (f"{arch}.attention.key_length", T_U32, s["head_dim"]),
           (f"{arch}.attention.value_length", T_U32, s["head_dim"]),
           (f"{arch}.rope.dimension_count", T_U32, s["head_dim"]),
           (f"{arch}.rope.freq_base", T_F32, s["rope_theta"]),
           (f"{arch}.attention.layer_norm_rms_epsilon", T_F32, 1e-5 if arch == "llama" else 1e-6),
           (f"{arch}.vocab_size", T_U32, V),
           ("tokenizer.ggml.model", T_STR, "llama"),
           ("tokenizer.ggml.tokens", T_ARR, (T_STR, toks)),
           ("tokenizer.ggml.scores", T_ARR, (T_F32, [0.0] * V)),
           ("tokenizer.ggml.token_type", T_ARR, (T_I32, types)),
           ("tokenizer.ggml.bos_token_id", T_U32, 1), ("tokenizer.ggml.eos_token_id", T_U32, 2),
           ("tokenizer.ggml.unknown_token_id", T_U32, 0), ("tokenizer.ggml.add_bos_token", T_BOOL, False)]
    tensors, off = [], 0
    for _, gname, shp, kind in models.tensors(s):
        if kind == "norm":
            n, typ = 4 * shp[0], GGML_F32
        else:
            assert shp[1] % 32 == 0
            n, typ = shp[0] * shp[1] // 32 * 18, GGML_Q4_0
        tensors.append((gname + ".weight", kind, shp, typ, off, n))
        off += n + (-n % ALIGN)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(_kv(*kv) for kv in kvs)
    for name, _, shp, typ, o, _ in tensors:
        dims = shp[::-1]  # ggml order: ne[0] = the innermost (input) dimension
        head += _str(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        head += struct.pack("<IQ", typ, o)
    head += b"\0" * (-len(head) % ALIGN)
    with open(path, "wb") as f:
        f.write(head)
        for name, kind, shp, typ, o, n in tensors:
            a = np.ones(shp[0], dtype="<f4") if kind == "norm" else q4_0_random(rng, *shp)
            b = a.tobytes()
            assert len(b) == n, name
            f.write(b + b"\0" * (-n % ALIGN))
    return off


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shape", default="llama-1b", choices=sorted(SHAPES))
    ap.add_argument("--tokenizer", help="a tokenizer.json, or a folder of tokenizer files, to copy (ids must fit)")
    ap.add_argument("--gguf", help="also write a random Q4_0 GGUF of the same shape here")
    a = ap.parse_args()
    s = SHAPES[a.shape]
    rng = np.random.default_rng(0)
    os.makedirs(a.out, exist_ok=True)
    nbytes = write_mlx(a.out, s, rng)
    q = {"group_size": GS, "bits": BITS, "mode": "affine"}
    cfg = dict(s, rms_norm_eps=1e-5 if s["model_type"] == "llama" else 1e-6, max_position_embeddings=8192,
               bos_token_id=1, eos_token_id=2, torch_dtype="float16", quantization=q, quantization_config=q)
    if s["model_type"] == "llama":
        cfg.update(attention_bias=False, mlp_bias=False)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    if a.tokenizer:
        if os.path.isdir(a.tokenizer):
            for n in TOKENIZER_FILES:
                if os.path.exists(os.path.join(a.tokenizer, n)):
                    shutil.copyfile(os.path.join(a.tokenizer, n), os.path.join(a.out, n))
        else:
            shutil.copyfile(a.tokenizer, os.path.join(a.out, "tokenizer.json"))
    print(a.out, nbytes / 1e9, "GB")
    if a.gguf:
        print(a.gguf, write_gguf(a.gguf, s, rng) / 1e9, "GB")


if __name__ == "__main__":
    main()

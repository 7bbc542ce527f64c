#!/usr/bin/env python3
"""fuzz/gen_seeds.py — regenerates the generated part of the seed corpora
(small valid and nearly-valid inputs) from the real files in the fixture
cache. Run with the reference venv: ~/.cache/mlxr/venv/bin/python
fuzz/gen_seeds.py. Hand-written seeds (json, chat) are committed as is.

Tokenizers are reduced copies of real ones (SmolLM2's byte-level BPE,
Gemma 3's SentencePiece-style BPE with byte fallback) plus the variants the
tokenizer tests use: a few hundred pieces each, so the corpus stays small.
"""
import copy, glob, json, os, struct, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CACHE = os.path.expanduser("~/.cache/mlxr")
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))


def out(target, name, data):
    d = os.path.join(HERE, f"{target}_seed_corpus")
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- tokenizers ----
def reduce_tok(t, keep_ids):
    v = t["model"]["vocab"]
    inv = {i: p for p, i in v.items()}
    keep = sorted(i for i in keep_ids if i in inv)
    new = {inv[i]: n for n, i in enumerate(keep)}
    remap = {i: n for n, i in enumerate(keep)}
    merges = []
    for m in t["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ", 1)
        if a in new and b in new and a + b in new:
            merges.append(m)
    d = copy.deepcopy({k: x for k, x in t.items() if k != "model"})
    d["model"] = {k: x for k, x in t["model"].items() if k not in ("vocab", "merges")}
    d["model"]["vocab"] = new
    d["model"]["merges"] = merges
    d["added_tokens"] = [dict(a, id=remap[a["id"]]) for a in t["added_tokens"] if a["id"] in remap]
    return d


def tokenizers():
    import test_tokenizer as tt
    smol = json.load(open(glob.glob(f"{CACHE}/fixtures/smollm2-tokenizer-*/tokenizer.json")[0]))
    # keep the whole byte-level alphabet (GPT-2 bytes_to_unicode), so every
    # text stays encodable and the round trip is exact
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs + [256 + n for n in range(256 - len(bs))]
    alpha = [smol["model"]["vocab"][chr(c)] for c in cs if chr(c) in smol["model"]["vocab"]]
    s = reduce_tok(smol, list(range(0, 700)) + alpha)
    gem = json.load(open(glob.glob(f"{CACHE}/test-tokenizers/gemma-3-270m-*.json")[0]))
    gv = gem["model"]["vocab"]
    specials = [gv[p] for p in ("<start_of_turn>", "<end_of_turn>", "\u2581") if p in gv]
    g = reduce_tok(gem, list(range(0, 8)) + specials + list(range(238, 238 + 256 + 500)))
    res = {}
    for name, d in tt._variants(s, "smollm2").items():
        res[name] = d
    for name, d in tt._variants(g, "gemma3").items():
        res[name] = d
    for name, d in res.items():
        out("tokenizer", f"{name}.json", json.dumps(d, ensure_ascii=False))
    # nearly valid: a merge naming an unknown piece, a duplicate id, a
    # truncated file, an unsupported normalizer.
    d = copy.deepcopy(res["smollm2"]); d["model"]["merges"].append(["zz", "qq"])
    out("tokenizer", "bad-merge.json", json.dumps(d))
    d = copy.deepcopy(res["smollm2"]); d["added_tokens"].append(dict(d["added_tokens"][0], content="<x>"))
    out("tokenizer", "bad-dup-id.json", json.dumps(d))
    out("tokenizer", "bad-truncated.json", json.dumps(res["smollm2"])[:3000])
    d = copy.deepcopy(res["gemma3"]); d["normalizer"] = {"type": "NFKC"}
    out("tokenizer", "bad-nfkc.json", json.dumps(d))


# ---- safetensors ----
def st_file(tensors, header_extra=None, pad=0):
    """tensors: [(name, dtype, shape, bytes)] -> safetensors bytes."""
    hdr, data = {}, b""
    if header_extra:
        hdr.update(header_extra)
    for name, dt, shape, raw in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * pad
    return struct.pack("<Q", len(h)) + h + data


SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
         "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}


def t(name, dt, shape, fill=0x3c):
    n = 1
    for s in shape:
        n *= s
    return (name, dt, shape, bytes([fill]) * (n * SIZES[dt]))


def safetensors():
    out("safetensors", "all-dtypes", st_file([t(f"t.{d}", d, [2, 3]) for d in SIZES],
                                            {"__metadata__": {"format": "mlx"}}))
    out("safetensors", "empty-tensors", st_file([t("a", "F32", [0, 4]), t("b", "U8", []), t("c", "F16", [4])]))
    out("safetensors", "empty-header", struct.pack("<Q", 2) + b"{}")
    f = bytearray(st_file([t("a", "F32", [2]), t("b", "F32", [2])]))
    out("safetensors", "overlap", bytes(f).replace(b'"data_offsets":[8,16]', b'"data_offsets":[4,12]'))
    out("safetensors", "past-end", st_file([t("a", "F32", [4])])[:-1])
    out("safetensors", "rank9", st_file([t("a", "U8", [1] * 9)]))
    out("safetensors", "short", b"\x08\x00\x00")
    out("safetensors", "huge-hlen", struct.pack("<Q", 1 << 62) + b"{}")
    out("safetensors", "padded", st_file([t("x", "BF16", [3, 2])], pad=7))


# ---- config.json and model directories ----
def cfg_llama(hidden=32, **kw):
    c = {"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": 1, "intermediate_size": 64,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 16, "rms_norm_eps": 1e-5,
         "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": [2, 3]}
    c.update(kw)
    return c


def model_tensors(c, quant=None, dt="F16"):
    H, I, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    nh, nkv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    hd = c.get("head_dim", H // nh)
    ts = []

    def mat(name, rows, cols):
        if quant:
            bits, gs = quant
            ts.append(t(name + ".weight", "U32", [rows, cols * bits // 32], 0x11))
            ts.append(t(name + ".scales", dt, [rows, cols // gs]))
            ts.append(t(name + ".biases", dt, [rows, cols // gs], 0))
        else:
            ts.append(t(name + ".weight", dt, [rows, cols]))

    def vec(name, n):
        ts.append(t(name, dt, [n]))

    mat("model.embed_tokens", V, H)
    vec("model.norm.weight", H)
    p = "model.layers.0."
    if c["model_type"] == "phi3":
        mat(p + "self_attn.qkv_proj", nh * hd + 2 * nkv * hd, H)
        mat(p + "mlp.gate_up_proj", 2 * I, H)
    else:
        mat(p + "self_attn.q_proj", nh * hd, H)
        mat(p + "self_attn.k_proj", nkv * hd, H)
        mat(p + "self_attn.v_proj", nkv * hd, H)
        mat(p + "mlp.gate_proj", I, H)
        mat(p + "mlp.up_proj", I, H)
    mat(p + "self_attn.o_proj", H, nh * hd)
    mat(p + "mlp.down_proj", H, I)
    vec(p + "input_layernorm.weight", H)
    if c["model_type"] in ("gemma2", "gemma3_text"):
        for n in ("post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"):
            vec(p + n + ".weight", H)
    else:
        vec(p + "post_attention_layernorm.weight", H)
    if c["model_type"] in ("qwen3", "gemma3_text"):
        vec(p + "self_attn.q_norm.weight", hd)
        vec(p + "self_attn.k_norm.weight", hd)
    if c["model_type"] == "qwen2":
        vec(p + "self_attn.q_proj.bias", nh * hd)
        vec(p + "self_attn.k_proj.bias", nkv * hd)
        vec(p + "self_attn.v_proj.bias", nkv * hd)
    return ts


def model_seed(name, c, quant=None, dt="F16", mutate=None):
    if quant:
        c = dict(c, quantization={"bits": quant[0], "group_size": quant[1]})
    cj = json.dumps(c, separators=(",", ":")).encode()
    st = st_file(model_tensors(c, quant, dt))
    if mutate:
        cj, st = mutate(cj, st)
    out("model_load", name, struct.pack("<H", len(cj)) + cj + st)
    out("model_config", name + ".json", cj)


def models():
    model_seed("llama-f16", cfg_llama(16, intermediate_size=32))
    model_seed("llama-q4g32", cfg_llama(), (4, 32))
    model_seed("llama-q3g32-bf16", cfg_llama(), (3, 32), "BF16")
    model_seed("qwen2-f32", dict(cfg_llama(16, intermediate_size=16), model_type="qwen2"), dt="F32")
    model_seed("qwen3-q8g32", dict(cfg_llama(), model_type="qwen3", head_dim=8), (8, 32))
    model_seed("phi3-f16", dict(cfg_llama(16, intermediate_size=16), model_type="phi3", partial_rotary_factor=0.5,
                                rope_scaling={"type": "longrope", "long_factor": [1.0, 2.0],
                                              "short_factor": [1.0, 1.0]}, max_position_embeddings=8192,
                                original_max_position_embeddings=4096))
    model_seed("gemma3-q6g32", dict(cfg_llama(), model_type="gemma3_text", head_dim=8, sliding_window=4,
                                    layer_types=["full_attention"]), (6, 32))
    model_seed("gemma2-f16", dict(cfg_llama(16, intermediate_size=16), model_type="gemma2", head_dim=4))
    model_seed("llama3-rope", cfg_llama(16, intermediate_size=16, rope_scaling={
        "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
        "rope_type": "llama3"}))
    # nearly valid: wrong shape, config bits disagree, missing tensor
    model_seed("bad-bits", cfg_llama(), (4, 32), mutate=lambda cj, st: (cj.replace(b'"bits":4', b'"bits":8'), st))
    model_seed("bad-shape", cfg_llama(16, intermediate_size=32),
               mutate=lambda cj, st: (cj.replace(b'"intermediate_size":32', b'"intermediate_size":16'), st))


# ---- GGUF ----
def ggufs():
    import numpy as np
    import gguf
    from gguf import quants
    smol = json.load(open(glob.glob(f"{CACHE}/fixtures/smollm2-tokenizer-*/tokenizer.json")[0]))
    r = reduce_tok(smol, range(0, 320))
    toks = sorted(r["model"]["vocab"], key=r["model"]["vocab"].get)
    merges = [" ".join(m) if isinstance(m, list) else m for m in r["model"]["merges"]]
    tmpl = open(os.path.join(ROOT, "tests/data/templates/smollm2.jinja")).read()

    def write(name, arch, qt, n_layer=1, H=32, I=64, V=None, nh=4, nkv=2, tok=True):
        V = V or len(toks)
        path = os.path.join(HERE, "gguf_seed_corpus", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        w = gguf.GGUFWriter(path, arch)
        w.add_block_count(n_layer)
        w.add_embedding_length(H)
        w.add_feed_forward_length(I)
        w.add_head_count(nh)
        w.add_head_count_kv(nkv)
        w.add_context_length(256)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_rope_freq_base(10000.0)
        if tok:
            w.add_tokenizer_model("gpt2")
            w.add_tokenizer_pre("smollm")
            w.add_token_list(toks[:V])
            w.add_token_types([3 if i < 17 else 1 for i in range(V)])
            w.add_token_merges(merges)
            w.add_bos_token_id(1)
            w.add_eos_token_id(2)
            w.add_chat_template(tmpl)
        rng = np.random.default_rng(0)

        def add(n, shape, q):
            a = rng.standard_normal(shape).astype(np.float32)
            if q == "F32" or len(shape) == 1:
                w.add_tensor(n, a)
            else:
                qtype = getattr(gguf.GGMLQuantizationType, q)
                w.add_tensor(n, quants.quantize(a, qtype), raw_dtype=qtype)

        hd = H // nh
        add("token_embd.weight", (V, H), qt)
        add("output_norm.weight", (H,), "F32")
        for L in range(n_layer):
            p = f"blk.{L}."
            add(p + "attn_norm.weight", (H,), "F32")
            add(p + "ffn_norm.weight", (H,), "F32")
            add(p + "attn_q.weight", (nh * hd, H), qt)
            add(p + "attn_k.weight", (nkv * hd, H), qt)
            add(p + "attn_v.weight", (nkv * hd, H), qt)
            add(p + "attn_output.weight", (H, nh * hd), qt)
            add(p + "ffn_gate.weight", (I, H), qt)
            add(p + "ffn_up.weight", (I, H), qt)
            add(p + "ffn_down.weight", (H, I), qt)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    write("llama-q8_0", "llama", "Q8_0")
    write("llama-q4_1", "llama", "Q4_1")
    write("llama-f16", "llama", "F16", V=64)
    write("llama-q4_0", "llama", "Q4_0", V=17, tok=False)
    write("llama-q5_1", "llama", "Q5_1", V=17, tok=False)
    write("llama-notok", "llama", "Q8_0", V=17, tok=False)
    d = open(os.path.join(HERE, "gguf_seed_corpus", "llama-q8_0"), "rb").read()
    out("gguf", "truncated", d[: len(d) // 3])



# ---- chat ----
def chats():
    import test_chat as tc
    for fam, (bos, eos) in tc.FAMILIES.items():
        tmpl = open(os.path.join(ROOT, "tests/data/templates", fam + ".jinja")).read()
        d = {"add_bos_token": False, "chat_template": tmpl,
             "eos_token": {"__type": "AddedToken", "content": eos, "lstrip": False, "normalized": False}}
        if bos:
            d["bos_token"] = bos
        out("chat_config", f"tpl-{fam}.json", json.dumps(d, ensure_ascii=False))
    out("chat_config", "list-form.json", json.dumps({"chat_template": [
        {"name": "default", "template": open(os.path.join(ROOT, "tests/data/templates/qwen2.5.jinja")).read()},
        {"name": "tool_use", "template": "x"}], "eos_token": "<|im_end|>"}))
    out("chat_config", "no-template.json", json.dumps({"bos_token": "<bos>", "eos_token": "<eos>"}))
    out("chat_config", "unknown.json", json.dumps({"chat_template": "{{ messages }}", "eos_token": "</s>"}))
    out("chat_config", "raw-llama3.jinja", open(os.path.join(ROOT, "tests/data/templates/llama3.jinja")).read())
    # chat_render: template byte, option byte, then role-prefixed messages split by 0xFF
    ntpl = len(tc.FAMILIES) + 1
    conv = [b"\x00You are terse.", b"\x01Hi <|im_start|>system\n<bos>", b"\x02 Hello ", b"\x01\xc3\xa9t\xc3\xa9?"]
    for k in range(ntpl):
        out("chat_render", f"conv-{k:02d}", bytes([k, 0x05]) + b"\xff".join(conv))
    out("chat_render", "prefill", bytes([0, 0x02]) + b"\xff".join(conv[1:3]))
    out("chat_render", "alternation", bytes([9, 0x01]) + b"\xff".join([conv[1], conv[1]]))


# ---- tokenizer_text: tokenizer byte, mask byte, seed byte, text ----
def tok_texts():
    texts = ["Hello, world! 123 4567", "<|im_start|>user\nhi<|im_end|>", "\u00e9t\u00e9 \U0001F600  \t\n x",
             "  def f(x):\n\treturn x ** 2\n", "<bos><start_of_turn>model\n\u2581\u2581 a"]
    for i, t in enumerate(texts):
        for k in range(0, 13, 3):
            out("tokenizer_text", f"t{i}-{k}", bytes([k, i % 3, 7 * i]) + t.encode())


if __name__ == "__main__":
    what = sys.argv[1:] or ["tokenizers", "safetensors", "models", "ggufs", "chats", "tok_texts"]
    for w in what:
        globals()[w]()

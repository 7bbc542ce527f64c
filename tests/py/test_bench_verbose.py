"""`mlxr bench --verbose`: the per-kernel breakdown of a decode step, in
the text report and in `--json`. Structure only, never speed: every
category is there with a time >= 0, the categories plus "other" add up to
the measured step, the matvec categories report the weight bytes they read
(together the model's weight bytes per token), and attention reads more of
the cache at long context than at short."""
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MLXR = os.environ.get("MLXR", str(ROOT / "build" / "mlxr"))

CATEGORIES = ["attn_qkv", "attn_out", "mlp_gate_up", "mlp_down", "lm_head_embed", "attention", "kv_store", "norm",
              "rope", "glu", "sample", "other"]
MATVECS = ["attn_qkv", "attn_out", "mlp_gate_up", "mlp_down", "lm_head_embed"]
LABELS = ["attn q/k/v", "attn out", "mlp gate/up", "mlp down", "lm_head+embed", "attention", "kv store", "norms",
          "rope", "glu", "sampling", "other", "step"]


@pytest.fixture(scope="module")
def small(fixture_model):
    return Path(fixture_model("llama-q4g64-bf16")["path"])


def bench(*args):
    r = subprocess.run([MLXR, "bench", *map(str, args)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout


ARGS = ["--prefill", "32", "--decode", "8", "--long", "96"]


def test_json_breakdown_sums_to_the_step(small):
    j = json.loads(bench(small, "--json", "--verbose", *ARGS))
    bd = j["breakdown"]
    for ctx, tok_s in (("short", j["decode_tok_s"]), ("long", j["decode_long_tok_s"])):
        b = bd[ctx]
        cats = {c["name"]: c for c in b["categories"]}
        assert list(cats) == CATEGORIES, list(cats)
        for c in cats.values():
            assert c["ms_per_token"] >= 0 and 0 <= c["share"] <= 1, c
            assert c["bytes_per_token"] >= 0 and c["gb_s"] >= 0, c
        # the step is the measured decode time per token (rounded in print)
        assert b["step_ms"] == pytest.approx(1e3 / tok_s, rel=0.02), (b["step_ms"], tok_s)
        total = sum(c["ms_per_token"] for c in cats.values())
        assert total == pytest.approx(b["step_ms"], rel=0.01, abs=0.01), (total, b["step_ms"])
        assert sum(c["share"] for c in cats.values()) == pytest.approx(1.0, abs=0.01)
        # the matvecs read every weight once per token
        assert sum(cats[k]["bytes_per_token"] for k in MATVECS) == pytest.approx(j["weight_bytes_per_token"],
                                                                                   rel=0.01)
        for k in MATVECS + ["attention"]:
            assert cats[k]["bytes_per_token"] > 0 and cats[k]["ms_per_token"] > 0, (ctx, k, cats[k])
    # attention reads the cache: more of it after 96 tokens than after 16
    att = {ctx: next(c for c in bd[ctx]["categories"] if c["name"] == "attention") for ctx in ("short", "long")}
    assert att["long"]["bytes_per_token"] > 3 * att["short"]["bytes_per_token"], att


def test_json_without_verbose_has_no_breakdown(small):
    j = json.loads(bench(small, "--json", *ARGS))
    assert "breakdown" not in j


def test_text_breakdown_has_every_row(small):
    out = bench(small, "--verbose", *ARGS)
    lines = out.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("decode step"))
    rows = {l.split("  ")[1].strip() if l.startswith("  ") else None: l for l in lines[start + 2:]}
    for label in LABELS:
        assert label in rows, (label, out)
    # short and long columns: ms/tok and share for every row
    step = rows["step"].split()
    assert len(step) == 5 and step[2] == "100%" and step[4] == "100%", rows["step"]

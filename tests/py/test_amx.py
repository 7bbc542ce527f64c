"""The AMX prefill GEMM (kernels/cpu/gemm_amx.c) inside the real sandboxed
worker: the tile permission is asked for before seccomp (worker_main.c),
so a worker that runs tile instructions must survive its own filter and
report "avx512+amx" from `mlxr bench`; MLXR_AMX=0 turns the path off.
And the logits of a prefill with AMX and with the f32 GEMM agree within
the engine tests' tolerance on the fixture that amplifies activation
rounding most (gemma2, soft-capped). Skipped, saying UNAVAILABLE, on a
CPU without AMX-BF16 (the kernel test covers the arithmetic there)."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
MLXR = os.environ.get("MLXR", str(ROOT / "build" / "mlxr"))
LOGIT_TOL = 0.05  # as tests/py/test_engine_ref.py


def cpu_flags():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


need_amx = pytest.mark.skipif(not {"amx_tile", "amx_bf16", "avx512_bf16", "avx512f"} <= cpu_flags(),
                              reason="UNAVAILABLE: this CPU has no AMX-BF16")


def run(args, amx):
    env = dict(os.environ, MLXR_AMX="1" if amx else "0")
    r = subprocess.run([MLXR, *map(str, args)], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


@need_amx
def test_sandboxed_worker_runs_the_amx_gemm(fixture_model):
    model = fixture_model("llama-q4g64-bf16")["path"]
    args = ["bench", model, "--json", "--prefill", "64", "--decode", "2", "--long", "80"]
    on = json.loads(run(args, True).splitlines()[-1])
    off = json.loads(run(args, False).splitlines()[-1])
    assert on["kernels"] == "avx512+amx", on["kernels"]
    assert off["kernels"] == "avx512", off["kernels"]
    assert on["prefill_tok_s"] > 0 and off["prefill_tok_s"] > 0


@need_amx
def test_amx_prefill_logits_match_f32(fixture_model, tmp_path):
    entry = fixture_model("gemma2-q4g128-f16")
    refs = json.loads(Path(entry["references"]).read_text())
    p = refs["prompts"][2]  # 60 tokens: above the AMX path's 12-token floor
    got = {}
    for amx in (True, False):
        out = tmp_path / f"amx{int(amx)}.f32"
        run(["eval", entry["path"], "--ids", " ".join(map(str, p["ids"])), "--logits", out], amx)
        got[amx] = np.fromfile(out, dtype="<f4").reshape(len(p["ids"]), p["vocab"])
    diff = float(np.abs(got[True] - got[False]).max())
    assert diff <= LOGIT_TOL, f"AMX vs f32 prefill logits: max |diff| {diff:.4g} > {LOGIT_TOL}"
    assert int(got[True][-1].argmax()) == int(got[False][-1].argmax())

"""MLX affine quantization, checked against MLX itself.

For every bits x group size x scale dtype, mx.quantize packs a random
matrix; the C reference (tests/unit/test_kernels --quant) reads the raw
packed words, scales and biases and must reproduce mx.dequantize (embed,
every row) and mx.quantized_matmul (matvec for one token, matmul for
five). The fast tables the CPU has are compared too.

Build first: `make BUILD=<dir> all`; MLXR_BUILD names <dir> (default build).
"""
import os
import subprocess

import mlx.core as mx
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("MLXR_BUILD", os.path.join(ROOT, "build"))
DRIVER = os.path.join(BUILD, "tests", "test_kernels")

DTYPES = {"f32": (mx.float32, 0), "f16": (mx.float16, 1), "bf16": (mx.bfloat16, 2)}
# f32 accumulation over 256..384 terms in a different order than MLX:
# relative to sum |w_j x_j|, as in test_kernels.c's TOL_DOT.
TOL_DOT = 2e-5


def raw(a):
    if a.dtype == mx.bfloat16:
        a = a.view(mx.uint16)
    return np.array(a).tobytes()


def run_case(tmp_path, bits, gs, sdt, n):
    rows, cols = 13, 384
    mdt, code = DTYPES[sdt]
    mx.random.seed(bits * 1000 + gs * 10 + code + n)
    w = mx.random.normal((rows, cols)).astype(mdt)
    q, s, b = mx.quantize(w, group_size=gs, bits=bits)
    assert q.dtype == mx.uint32 and s.dtype == mdt
    x = mx.random.normal((n, cols)).astype(mx.float32)
    d = tmp_path
    (d / "meta.txt").write_text(f"{rows} {cols} {bits} {gs} {code} {n}\n")
    (d / "w.bin").write_bytes(raw(q))
    (d / "s.bin").write_bytes(raw(s))
    (d / "b.bin").write_bytes(raw(b))
    (d / "x.bin").write_bytes(raw(x))
    assert os.path.exists(DRIVER), f"{DRIVER} missing: run make BUILD={BUILD} all"
    out = subprocess.run([DRIVER, "--quant", str(d)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr + out.stdout

    s32, b32 = s.astype(mx.float32), b.astype(mx.float32)
    deq = np.array(mx.dequantize(q, s32, b32, group_size=gs, bits=bits))
    emb = np.fromfile(d / "e_ref.bin", dtype=np.float32).reshape(rows, cols)
    np.testing.assert_allclose(emb, deq, rtol=1e-6, atol=1e-6)

    want = np.array(mx.quantized_matmul(x, q, s32, b32, transpose=True, group_size=gs, bits=bits))
    bound = np.abs(np.array(x)) @ np.abs(deq).T + 1.0
    tables = [ln.split()[1][2:-4] for ln in out.stdout.splitlines() if ln.startswith("wrote")]
    assert "ref" in tables
    for t in tables:
        got = np.fromfile(d / f"y_{t}.bin", dtype=np.float32).reshape(n, rows)
        err = np.abs(got - want) / bound
        assert err.max() <= TOL_DOT, f"{t}: max relative error {err.max():.3g}"


@pytest.mark.parametrize("sdt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("gs", [32, 64, 128])
@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
def test_quantized_matvec_matches_mlx(tmp_path, bits, gs, sdt):
    run_case(tmp_path, bits, gs, sdt, 1)


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
def test_quantized_matmul_matches_mlx(tmp_path, bits):
    run_case(tmp_path, bits, 64, "bf16", 5)

#!/root/.cache/mlxr/venv/bin/python
"""`mlxr eval` implemented with mlx-lm: a stand-in engine that checks the tests.

    MLXR=tests/fixture_lib/mlxr_ref.py pytest tests/py/test_engine_ref.py

implements only the contract test_engine_ref.py relies on:
    mlxr_ref.py eval DIR --ids "1 2 3" --logits OUT.f32 [--decode]
    mlxr_ref.py eval DIR --ids "1 2 3" --generate N
computed like the references (CPU, float32) but by a separate code path:
--decode feeds one token at a time through the KV cache. Every test must pass
against it. MLXR_REF_PERTURB=X adds X * (a fixed +-1 pattern over the vocab)
to every logit, so LOGIT_TOL and the greedy test must then fail: a test that
cannot fail is a bug.
"""
import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fixture_lib import fixtures  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("verb", choices=["eval"])
    ap.add_argument("model")
    ap.add_argument("--ids", required=True)
    ap.add_argument("--logits")
    ap.add_argument("--decode", action="store_true")
    ap.add_argument("--generate", type=int)
    a = ap.parse_args()
    import mlx.core as mx
    import numpy as np
    from mlx_lm.models.cache import make_prompt_cache

    mx.set_default_device(mx.cpu)
    model, _ = fixtures.load_f32(Path(a.model))
    ids = [int(t) for t in a.ids.split()]
    perturb = float(os.environ.get("MLXR_REF_PERTURB", "0"))

    def fix(rows):
        rows = np.array(rows.astype(mx.float32))
        if perturb:
            sign = np.where(np.arange(rows.shape[-1]) % 3 == 0, 1.0, -1.0).astype(np.float32)
            rows = rows + perturb * sign
        return rows

    if a.logits:
        if a.decode:
            cache = make_prompt_cache(model)
            rows = [fix(model(mx.array([[t]]), cache=cache)[0, -1]) for t in ids]
            out = np.stack(rows)
        else:
            out = fix(model(mx.array(ids)[None])[0])
        out.astype("<f4").tofile(a.logits)
    if a.generate:
        cache = make_prompt_cache(model)
        row = fix(model(mx.array(ids)[None], cache=cache)[0, -1])
        gen = []
        for _ in range(a.generate):
            tok = int(np.argmax(row))
            gen.append(tok)
            row = fix(model(mx.array([[tok]]), cache=cache)[0, -1])
        print(" ".join(map(str, gen)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Session fixtures shared by the Python tests.

`fixture_manifest` runs tests/fixtures.py once per session (building, on
first use, every model directory and mlx-lm reference into the cache outside
the repository; later runs only hash and return) and returns its manifest.
`fixture_model(name)` returns one manifest entry, or FAILS the test with the
build log when that model could not be built: no test is skipped for lack
of a model.

Environment: MLXR (the mlxr binary, default build/mlxr), MLXR_FIXTURES
(the cache, default ~/.cache/mlxr/fixtures).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: fixture_lib
import fixture_lib  # noqa: E402


@pytest.fixture(scope="session")
def mlxr_path():
    """Path of the mlxr binary under test (not checked: tests fail on use)."""
    return fixture_lib.mlxr_binary()


@pytest.fixture(scope="session")
def mlxr(mlxr_path):
    """The mlxr binary; fails the test when it is not built."""
    if not (os.path.isfile(mlxr_path) and os.access(mlxr_path, os.X_OK)):
        pytest.fail(f"mlxr binary not found at {mlxr_path} (run `make` or set MLXR)")
    return mlxr_path


@pytest.fixture(scope="session")
def fixture_manifest(mlxr_path):
    env = dict(os.environ, MLXR=mlxr_path, HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, str(fixture_lib.FIXTURE_SCRIPT), "--mlxr", mlxr_path],
                          env=env, capture_output=True, text=True)
    path = fixture_lib.fixtures_dir() / "manifest.json"
    if not path.exists():
        pytest.fail(f"tests/fixtures.py wrote no manifest (status {proc.returncode}):\n{proc.stderr[-4000:]}")
    manifest = json.loads(path.read_text())
    manifest["by_name"] = {m["name"]: m for m in manifest["models"]}
    manifest["status"] = proc.returncode
    manifest["log"] = proc.stderr
    return manifest


@pytest.fixture(scope="session")
def fixture_model(fixture_manifest):
    def get(name):
        entry = fixture_manifest["by_name"].get(name)
        if entry is None:
            why = fixture_manifest.get("failed", {}).get(name, "not in the manifest")
            pytest.fail(f"fixture model {name!r} was not built: {why}\n"
                        f"--- tests/fixtures.py log (tail) ---\n{fixture_manifest['log'][-3000:]}")
        return entry
    return get

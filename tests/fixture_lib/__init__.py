"""Shared helpers for the Python tests: the fixture script as a module, paths.

tests/fixtures.py stays a standalone script; this loads it (it imports
nothing heavy at module level) so tests can parametrize over its model names.
"""
import importlib.util
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_SCRIPT = ROOT / "tests" / "fixtures.py"

_spec = importlib.util.spec_from_file_location("mlxr_fixtures", FIXTURE_SCRIPT)
fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixtures)

ALL_NAMES = list(fixtures.ALL_NAMES)
REAL_NAMES = list(fixtures.REAL_MODELS)
RANDOM_NAMES = list(fixtures.RANDOM_MODELS)


def mlxr_binary():
    """$MLXR, default build/mlxr under the repository."""
    return os.environ.get("MLXR", str(ROOT / "build" / "mlxr"))


def fixtures_dir():
    return Path(os.environ.get("MLXR_FIXTURES", Path.home() / ".cache" / "mlxr" / "fixtures"))

"""Every name bench/ and tests/ import from tfgpu exists: the benchmarks run only when someone
runs them, and the slow lanes only in CI, so a module split would break them unseen
(bench/tune_bench.py imported ``owner`` from ``train.model.user_model`` for a session after it moved to
``train.model.placement``; tests/bodies.py's import of it failed only in CI's process lane)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
BENCH = sorted((ROOT / "bench").glob("*.py"))
TESTS = sorted(ROOT.glob("tests*/**/*.py"))


def _imported(path: Path) -> list[tuple[str, str]]:
    return [
        (node.module, alias.name)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "tfgpu"
        for alias in node.names
    ]


@pytest.mark.parametrize("path", BENCH + TESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_what_a_benchmark_or_a_test_imports_from_tfgpu_exists(path: Path) -> None:
    missing = []
    for module, name in _imported(path):
        found = importlib.import_module(module)
        if not hasattr(found, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{module}.{name}")
    assert not missing, f"{path.name} imports names tfgpu no longer has: {missing}"

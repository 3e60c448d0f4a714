"""Shapes of the source that lint does not hold: no statement after a return, raise, break or
continue in the same block. (PredictOptions once checked its format after the ``return`` of
another method, so ``fmt="csv"`` was accepted and failed later with a KeyError traceback.)"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

SRC = Path(__file__).parent.parent / "src" / "tfgpu"
ENDS = (ast.Return, ast.Raise, ast.Break, ast.Continue)


def unreachable(tree: ast.AST, path: str) -> list[str]:
    found = []
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            for before, after in itertools.pairwise(block):
                if isinstance(before, ENDS):
                    found.append(
                        f"{path}:{after.lineno} cannot run: it follows a {type(before).__name__.lower()}"
                    )
    return found


def test_no_statement_follows_a_return_in_the_same_block():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        found += unreachable(ast.parse(path.read_text()), str(path.relative_to(SRC.parent)))
    assert not found, "\n".join(found)


def test_the_check_finds_code_after_a_return():
    code = "def f(x):\n    return x\n    if x: raise ValueError\n"
    assert unreachable(ast.parse(code), "f.py") == ["f.py:3 cannot run: it follows a return"]


def test_an_unknown_output_format_is_refused_when_the_options_are_made():
    from tfgpu.errors import ConfigError
    from tfgpu.predict import PredictOptions

    with pytest.raises(ConfigError, match=r"Unknown output format.*csv.*use one of"):
        PredictOptions(fmt="csv")

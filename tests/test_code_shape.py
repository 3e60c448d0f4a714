"""Shapes of the source that lint does not hold: no statement after a return, raise, break or
continue in the same block (PredictOptions once checked its format after the ``return`` of
another method, so ``fmt="csv"`` was accepted and failed later with a KeyError traceback); no
class over ``MAX_METHODS`` methods; no module without a docstring saying what it holds; no function body in ``train/`` over ``MAX_BODY`` lines (issue
55: ``keras_fit.fit`` was 152 lines); no method re-running its own ``__init__``; no module reading
another's private names; no string-keyed record read in ``train/`` outside the edges that read
JSON, Keras's or TensorFlow's dicts (issue 55)."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

from support.source import is_module, library_modules

SRC = Path(__file__).parent.parent / "src" / "tfgpu"
MAX_METHODS = 25  # the Trainer had 40 (issue 45): a class that large holds several concerns
MAX_BODY = 50  # lines of a function's body, its signature and docstring not counted
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


def classes() -> list[tuple[str, ast.ClassDef]]:
    return [
        (f"{path.relative_to(SRC.parent).as_posix()}:{node.lineno} {node.name}", node)
        for _, path in library_modules()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    ]


def long_bodies(tree: ast.AST, path: str) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        body = node.body
        if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and len(body) > 1:
            body = body[1:]  # the docstring
        lines = body[-1].end_lineno - body[0].lineno + 1
        if lines > MAX_BODY:
            found.append(f"{path}:{node.lineno} {node.name}: {lines} lines")
    return found


def test_no_function_in_train_over_the_body_limit():
    train = SRC / "train"
    big = [f for p in sorted(train.rglob("*.py")) for f in long_bodies(ast.parse(p.read_text()), str(p))]
    assert not big, f"function bodies over {MAX_BODY} lines (split them):\n" + "\n".join(big)


def test_the_body_check_counts_statements_not_the_docstring():
    short = 'def f():\n    """' + "doc\n" * 80 + '"""\n    return 1\n'
    long = "def g():\n" + "    x = 1\n" * (MAX_BODY + 1)
    assert long_bodies(ast.parse(short), "s") == []
    assert long_bodies(ast.parse(long), "l") == [f"l:1 g: {MAX_BODY + 1} lines"]


def test_no_class_over_the_method_limit():
    big = [
        f"{where}: {n} methods"
        for where, node in classes()
        if (n := sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef) for b in node.body)) > MAX_METHODS
    ]
    assert not big, f"classes over {MAX_METHODS} methods (split them by concern):\n" + "\n".join(big)


def test_nothing_re_runs_its_own_init():
    """A method calling ``self.__init__`` resets every field ``__init__`` sets, silently (the
    Trainer's tuning switch did, and restored three fields by hand)."""
    found = [
        f"{where}:{call.lineno}"
        for where, node in classes()
        for call in ast.walk(node)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "__init__"
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == "self"
    ]
    assert not found, found


def private_reads(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """``from tfgpu.x import _name`` and ``alias._name`` (alias a tfgpu module imported here):
    another module's private names, read from ``module``."""
    tree = ast.parse(source)
    aliases: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tfgpu"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if is_module(full):
                    aliases.add(alias.asname or alias.name)
                elif alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tfgpu.") and alias.asname:
                    aliases.add(alias.asname)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_reads_another_modules_private_names():
    found = [
        f"{path.relative_to(SRC.parent).as_posix()}:{hit}"
        for module, path in library_modules()
        for hit in private_reads(path.read_text(), module, is_package=path.name == "__init__.py")
    ]
    assert not found, "private names read across modules (make them public, or move the code):\n" + "\n".join(
        found
    )


def test_the_private_reader_sees_both_forms():
    source = "from tfgpu.train.model import user_model as m\nfrom tfgpu.train.model.user_model import _copy\nm._follow(1)\nm.back(1)\n"
    assert private_reads(source, "tfgpu.train.loop.training") == [
        "2: from tfgpu.train.model.user_model import _copy",
        "3: m._follow",
    ]


def test_every_module_says_what_it_holds():
    bare = [
        path.relative_to(SRC.parent).as_posix()
        for path in sorted(SRC.rglob("*.py"))
        if not ast.get_docstring(ast.parse(path.read_text()))
    ]
    assert not bare, f"modules without a docstring: {bare}"


# Where train/ may read a value by a string key: the JSON edge and dicts that are not tfgpu's
# records (Keras's logs and configs, TensorFlow's answers), or mappings keyed by a knob's name.
# (module relative to train/, function) -> why. Anything else is a record: make it a dataclass.
KEYED_READS = {
    ("pieces/checkpoints.py", "history_kept"): "the history file beside the checkpoints (JSON edge)",
    ("pieces/checkpoints.py", "shape_kept"): "the run's shape in the same file (JSON edge)",
    ("step/execution.py", "_finite"): "Keras's logs, by metric name",
    ("step/execution.py", "rate"): "Keras's logs, by metric name",
    ("loop/windows.py", "loss"): "Keras's logs, by metric name",
    ("step/footprint.py", "lines"): "renders a footprint's JSON form (tfgpu diagnose --json read back)",
    ("step/footprint.py", "_example"): "Keras's build config",
    ("step/footprint.py", "layer_outputs"): "a layer instance's __dict__",
    ("step/footprint.py", "_peak"): "TensorFlow's memory info",
    ("step/footprint.py", "_capacities"): "the environment",
    ("model/rehoming.py", "_copy_adapted_state"): "a Keras layer's config",
    ("model/building.py", "_build_error"): "the value an error shows the user",
    ("pieces/options.py", "of"): "the flat keywords fit and the CLI pass (the options' edge)",
    ("loop/ps_loop.py", "fit"): "TF_CONFIG's cluster",
    ("loop/setup.py", "precision_for"): "TensorFlow's device details",
    ("pieces/tuned.py", "from_dict"): "a kept tuning's file (JSON edge)",
    ("pieces/tuned.py", "read"): "a kept tuning's file (JSON edge)",
    ("pieces/tuned.py", "config_of"): "a kept tuning's choices, by knob",
    ("tuning/tuner.py", "_xla"): "why a knob cannot be tried, by knob",
    ("tuning/tuner.py", "_precision"): "why a knob cannot be tried, by knob",
    ("tuning/tuner.py", "_batch"): "why a knob cannot be tried, by knob",
}


def keyed_reads(tree: ast.AST, path: str) -> list[tuple[str, str, str]]:
    """(path, innermost function, key) for each ``x["key"]`` read and ``x.get("key")`` /
    ``x.pop("key")`` call."""
    found: list[tuple[str, str, str]] = []

    def walk(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            key = node.args[0] if node.func.attr in ("get", "pop") else None
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            found.append((path, function, key.value))
        for child in ast.iter_child_nodes(node):
            walk(child, function)

    walk(tree, "<module>")
    return found


def test_no_string_keyed_record_read_in_train_outside_its_edges():
    train = SRC / "train"
    found = [
        f"{path}: {function} reads [{key!r}]"
        for p in sorted(train.rglob("*.py"))
        for path, function, key in keyed_reads(ast.parse(p.read_text()), p.relative_to(train).as_posix())
        if (path, function) not in KEYED_READS
    ]
    assert not found, "string-keyed reads of a record (make it a dataclass, or say why here):\n" + "\n".join(
        found
    )


def test_the_keyed_read_check_sees_subscripts_and_gets():
    code = 'def f(r):\n    return r["a"], r.get("b"), r.pop("c"), r[0], r.get(k)\n'
    assert keyed_reads(ast.parse(code), "m.py") == [
        ("m.py", "f", "a"),
        ("m.py", "f", "b"),
        ("m.py", "f", "c"),
    ]

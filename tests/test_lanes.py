"""The suite's own shape (issue 77), read from the files: every test file has a measured duration
(so CI schedules it by what it took, not as an unknown), no test file imports another test file
(what tests share lives in ``tests/support/``), one comparator of a run against Keras's, and the
lanes' selections as the Makefile writes them."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from support.parity import same

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
TEST_FILES = sorted(TESTS.glob("test_*.py"))


def test_every_test_file_has_a_measured_duration():
    known = json.loads((ROOT / ".ci" / "durations.json").read_text())
    files = {f"tests/{path.name}" for path in TEST_FILES}
    assert sorted(files - set(known)) == [], "run .ci/test_main.py --write-durations"
    assert sorted(name for name in set(known) - files if name.startswith("tests/")) == []


def _imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_no_test_file_imports_another_test_file_or_conftest():
    found = {
        path.name: sorted(name for name in _imported(path) if name.startswith("test_") or name == "conftest")
        for path in [*TEST_FILES, *TESTS.glob("*.py"), *(TESTS / "scripts").glob("*.py")]
    }
    assert {name: imported for name, imported in found.items() if imported} == {}


def test_the_import_check_sees_an_import_of_a_test_file(tmp_path):
    path = tmp_path / "test_x.py"
    path.write_text("def f():\n    from test_fit import same\n")
    assert "test_fit" in _imported(path)


COMPARATOR = re.compile(r"^\s*def (same\w*|assert_same\w*|_same\w*)\(", re.M)


def test_one_comparator_of_a_run_against_keras():
    defined = {
        path.relative_to(TESTS).as_posix(): COMPARATOR.findall(path.read_text())
        for path in TESTS.rglob("*.py")
        if path.name != "test_lanes.py"
    }
    assert {name: found for name, found in defined.items() if found} == {"support/parity.py": ["same"]}


@pytest.mark.parametrize(
    ("ours", "keras_", "differs"),
    [
        ({"loss": [1.0, 0.5]}, {"loss": [1.0, 0.5000001]}, []),
        ({"loss": [1.0, 0.5]}, {"loss": [1.0, 0.6]}, ["loss"]),
        ({"loss": [1.0]}, {"loss": [1.0], "mae": [2.0]}, ["value: keys"]),
        ([[1.0, 2.0], 3.0], [[1.0, 2.0], 3.0], []),
        ([float("nan")], [float("nan")], ["value"]),
        ({"a": 1.0, "b": "x"}, {"a": 2.0, "b": "y"}, ["a", "b"]),
        ([1.0, 2.0], [1.0], ["value"]),
        (None, None, []),
    ],
)
def test_the_comparator_says_every_place_that_differs(ours, keras_, differs):
    if not differs:
        same(ours, keras_)
        return
    with pytest.raises(AssertionError) as caught:
        same(ours, keras_)
    said = str(caught.value)
    assert all(place in said for place in differs), said


def test_the_comparator_compares_only_the_keys_asked_for():
    same({"history": {"loss": [1.0]}, "extra": 1}, {"history": {"loss": [1.0]}, "extra": 2}, keys=["history"])
    with pytest.raises(AssertionError, match="missing from ours"):
        same({"history": {}}, {"weights": []}, keys=["weights"])


def _makefile_selection(target: str) -> str:
    text = (ROOT / "Makefile").read_text()
    fast = re.search(r"^FAST := (.+)$", text, re.M).group(1)
    recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, re.M).group(1)
    return re.search(r'-m "([^"]+)"', recipe).group(1).replace("$(FAST)", fast)


def test_the_lanes_leave_out_what_their_markers_say():
    assert _makefile_selection("test-fast") == "not process and not timing and not heavy"
    assert _makefile_selection("test-unit") == "not process and not timing and not heavy and not model"
    assert _makefile_selection("test-floor") == _makefile_selection("test-fast")


def _child_pytest(folder: Path, name: str, source: str, *args: str):
    """pytest in a child process on ``folder``, holding this conftest, ``support/`` and a test file
    ``name`` of ``source``: what a developer's run of that file prints."""
    import shutil
    import subprocess
    import sys

    if not (folder / "conftest.py").exists():
        shutil.copy(TESTS / "conftest.py", folder / "conftest.py")
        shutil.copytree(TESTS / "support", folder / "support")
    (folder / name).write_text(source)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(folder)]
    return subprocess.run(argv, capture_output=True, text=True, cwd=folder, timeout=300)


@pytest.mark.process
def test_a_test_that_starts_a_process_or_builds_a_model_unmarked_fails_and_names_its_marker(tmp_path):
    """conftest's guards: the lanes stay what they say only if each such test carries its marker."""
    done = _child_pytest(
        tmp_path,
        "test_unmarked.py",
        "import subprocess\n\nimport keras\nimport pytest\n\n\n"
        "def test_process():\n    subprocess.run(['true'])\n\n\n"
        "def test_model():\n    keras.Sequential([keras.layers.Dense(1)])\n\n\n"
        "@pytest.mark.model\ndef test_marked_model():\n    keras.Sequential([keras.layers.Dense(1)])\n",
    )
    assert "2 failed, 1 passed" in done.stdout, done.stdout[-2000:]
    assert "starts a process (['true']) without @pytest.mark.process" in done.stdout
    assert "builds a Keras model (Sequential) without @pytest.mark.model" in done.stdout


# -- the registry of examples (support.examples) ------------------------------------------------------
PARITY_FILES = sorted(TESTS.glob("test_parity_*.py"))


def _exercises(path: Path) -> dict[str, tuple[list[str], str | None]]:
    """Each test function's ``exercises`` tags and source, read from the file (None: unmarked)."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            marks = [
                d
                for d in node.decorator_list
                if isinstance(d, ast.Call) and ast.unparse(d.func) == "pytest.mark.exercises"
            ]
            if len(marks) != 1:
                found[node.name] = None
                continue
            tags = [ast.literal_eval(arg) for arg in marks[0].args]
            source = {k.arg: ast.literal_eval(k.value) for k in marks[0].keywords}.get("source")
            found[node.name] = (tags, source)
    return found


def test_every_example_says_where_it_comes_from_and_what_it_exercises():
    from support.examples import TAGS

    wrong = {}
    for path in PARITY_FILES:
        for name, marked in _exercises(path).items():
            if marked is None:
                wrong[name] = "no (or several) @pytest.mark.exercises"
            elif not marked[0] or not marked[1]:
                wrong[name] = f"tags {marked[0]} and source {marked[1]!r}: both are needed"
            elif unknown := [tag for tag in marked[0] if tag not in TAGS]:
                wrong[name] = f"tags not in support.examples.TAGS: {unknown}"
    assert wrong == {}


def test_each_example_lives_in_the_file_of_a_behaviour_it_exercises():
    from support.examples import FILES

    assert sorted(path.name for path in PARITY_FILES) == sorted(FILES)
    astray = {
        f"{path.name}::{name}": marked[0]
        for path in PARITY_FILES
        for name, marked in _exercises(path).items()
        if marked and not any(tag.startswith(FILES[path.name]) for tag in marked[0])
    }
    assert astray == {}


@pytest.mark.parametrize(
    ("tags", "asked", "runs"),
    [
        (["loss:function", "inputs:arrays"], ["loss:function"], True),
        (["loss:function"], ["loss:"], True),
        (["loss:function"], ["inputs:", "step:train_step"], False),
        (["loss:functional"], ["loss:function"], False),
        ([], ["loss:"], False),
    ],
)
def test_exercising_selects_a_tag_or_a_family(tags, asked, runs):
    from support.examples import exercises

    assert exercises(tags, asked) is runs


def test_exercising_names_what_is_no_tag():
    from support.examples import unknown

    assert unknown(["loss:function", "loss:", "los:function", "inputs"]) == ["los:function", "inputs"]


@pytest.mark.process
def test_exercising_runs_the_examples_with_the_tag_and_refuses_an_unknown_one(tmp_path):
    source = (
        "import pytest\n\n\n"
        "@pytest.mark.exercises('loss:function', source='tfgpu')\ndef test_a():\n    pass\n\n\n"
        "@pytest.mark.exercises('inputs:arrays', source='tfgpu')\ndef test_b():\n    pass\n\n\n"
        "def test_c():\n    pass\n"
    )
    chosen = _child_pytest(tmp_path, "test_parity_x.py", source, "--exercising", "loss:")
    assert "1 passed, 2 deselected" in chosen.stdout, chosen.stdout[-2000:]
    refused = _child_pytest(tmp_path, "test_parity_x.py", source, "--exercising", "loss:fn")
    said = refused.stdout + refused.stderr
    assert refused.returncode == 4 and "--exercising loss:fn: no such tag" in said, said[-2000:]

"""Every fenced code block in README.md and docs/ runs as written, and what it shows is checked.

Sybil parses the documents; each block is one test, run in document order:

- ``python``: in one fresh Python per document (tests/docs_kernel.py), so a block can call
  ``tfgpu.configure`` first thing, as the README says to, and later blocks see earlier names.
  The data and functions a block takes as given (``build_model``, ``x``, ``train_ds``) come from
  ``<!-- invisible-code-block: python -->`` comments beside it, which users do not see.
- ``sh``: each command runs with bash in the document's own working directory (where the
  document's earlier blocks left their files); it must exit 0.
- ``console``: ``$ command`` lines run the same way; the lines under one are what it prints, and
  each must match a line it printed, in order, with every figure (any token holding a digit) free
  and ``...`` standing for the rest of the line.
- ``text``: a message or output shown for reading, not run.

A block that needs what CI lacks (a GPU, several hosts, a cluster, TensorFlow 2.15) is skipped
with ``<!-- skip: next "the reason" -->``. The module is marked ``process``: it starts a Python
and the tfgpu command (left out of ``make test-fast``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import pytest
from sybil import Sybil
from sybil.parsers.markdown import CodeBlockParser, SkipParser

pytestmark = pytest.mark.process

ROOT = Path(__file__).parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = {"python", "sh", "console", "text"}
BLOCK_TIMEOUT_S = 600  # a ceiling only a hang reaches


class Session:
    """One document's working directory and Python, shared by its blocks in order."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.dir = Path(tempfile.mkdtemp(prefix=f"tfgpu-docs-{path.stem}-"))
        (self.dir / "examples").symlink_to(ROOT / "examples")
        self.log = self.dir / ".kernel.log"
        self._kernel: subprocess.Popen | None = None
        bin_dir = str(Path(sys.executable).parent)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TFGPU_")}
        self.env.update(
            PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            TFGPU_LOGICAL_CPUS="2",  # the docs' figures are from 2 logical CPUs
            CUDA_VISIBLE_DEVICES="",
            TF_CPP_MIN_LOG_LEVEL="2",
            COLUMNS="200",  # the docs show unwrapped lines
            PYTHONPATH=os.pathsep.join([str(self.dir), str(Path(__file__).parent)]),
        )

    def python(self, source: str, line: int) -> str | None:
        if self._kernel is None:
            self._kernel = subprocess.Popen(
                [sys.executable, str(Path(__file__).parent / "docs_kernel.py")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.log.open("a"),
                text=True,
                cwd=self.dir,
                env=self.env,
            )
        request = {"path": str(self.path), "line": line, "source": source}
        self._kernel.stdin.write(json.dumps(request) + "\n")
        self._kernel.stdin.flush()
        answer = self._kernel.stdout.readline()
        if not answer:
            return f"the document's Python ended:\n{self._tail()}"
        result = json.loads(answer)
        return None if result["ok"] else f"{result['error']}\nits output:\n{self._tail()}"

    def shell(self, command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", command],
            capture_output=True,
            text=True,
            cwd=self.dir,
            env=self.env,
            timeout=BLOCK_TIMEOUT_S,
            check=False,
        )

    def _tail(self) -> str:
        text = self.log.read_text()
        start = text.rfind("--- end of block")
        return text[text.find("\n", start) + 1 :] if start >= 0 else text

    def close(self) -> None:
        """The blocks have run and been checked: the kernel is stopped, not waited for. Beside two
        busy TensorFlow jobs one took over 60 s to exit after its stdin closed (TensorFlow's
        thread pools winding down), and the wait's ceiling failed the suite at teardown."""
        if self._kernel is not None:
            self._kernel.stdin.close()
            self._kernel.kill()
            self._kernel.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


SESSIONS: dict[str, Session] = {}


def _session(example) -> Session:
    """The document's session; the blocks run in document order, so a new document's first block
    closes the sessions before it (each held a Python with TensorFlow, about 1 GB, to the end)."""
    path = example.path
    if path not in SESSIONS:
        for done in SESSIONS.values():
            done.close()
        SESSIONS.clear()
        SESSIONS[path] = Session(Path(path))
    return SESSIONS[path]


def _line(example) -> int:
    """The document line of the block's first line of code (the fence is the line before)."""
    return example.line


def run_python(example) -> str | None:
    return _session(example).python(str(example.parsed), _line(example))


def _commands(source: str) -> list[str]:
    """A block's commands: one per line, a trailing backslash joining the next."""
    commands, current = [], ""
    for line in source.splitlines():
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        if current.strip() and not current.lstrip().startswith("#"):
            commands.append(current.strip())
        current = ""
    return commands


def _failed(command: str, done: subprocess.CompletedProcess) -> str:
    return (
        f"`{command}` exited {done.returncode}\n"
        f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
    )


# Commands that run elsewhere, by their first words (README.md's first block must stay its two
# commands, so no skip comment can go before it).
ELSEWHERE = {
    "make demo": "CI: `make demo` is tfgpu demo, which tests/test_cli.py::test_demo_runs_end_to_end runs",
    "make test": "CI: .ci/run is `make test`",
}


# exit status 1 is a finding the command reports (a doctor check failed, still input-bound): the
# docs show the report, so either is the block running as shown; 2 is bad usage
FOUND_A_PROBLEM_OR_NOT = (0, 1)


def run_sh(example) -> str | None:
    session = _session(example)
    commands = _commands(str(example.parsed))
    reasons = [r for c in commands for start, r in ELSEWHERE.items() if c.startswith(start)]
    if reasons and len(reasons) == len(commands):
        raise unittest.SkipTest("; ".join(reasons))
    for command in commands:
        done = session.shell(command)
        if done.returncode not in FOUND_A_PROBLEM_OR_NOT:
            return _failed(command, done)
    return None


def shown_line_pattern(shown: str) -> re.Pattern:
    """A printed line as the docs show it: figures free, ``...`` for the rest of the line."""
    parts = []
    for token in shown.split():
        if token == "...":
            parts.append(".*")
        elif any(c.isdigit() for c in token):
            parts.append(r"\S+")
        else:
            parts.append(re.escape(token))
    return re.compile(r"\s*" + r"\s+".join(parts).replace(r"\s+.*", r".*"))


BOX = re.compile("[\u2500-\u257f]")  # rich's table borders: the docs show tables without them


def unmatched_lines(shown: list[str], printed: str) -> list[str]:
    """The shown lines no printed line matches, in order (each printed line matched once)."""
    lines = [BOX.sub(" ", line) for line in printed.splitlines()]
    at, missing = 0, []
    for want in shown:
        pattern = shown_line_pattern(want)
        for i in range(at, len(lines)):
            if pattern.match(lines[i]):
                at = i + 1
                break
        else:
            missing.append(want)
    return missing


def _console_steps(source: str) -> list[tuple[str, list[str]]]:
    steps: list[tuple[str, list[str]]] = []
    for line in source.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif line.strip() and steps:
            steps[-1][1].append(line)
    return steps


def run_console(example) -> str | None:
    session = _session(example)
    for command, shown in _console_steps(str(example.parsed)):
        done = session.shell(command)
        if done.returncode not in FOUND_A_PROBLEM_OR_NOT:
            return _failed(command, done)
        missing = unmatched_lines(shown, done.stdout + done.stderr)
        if missing:
            return (
                f"`{command}` did not print, in this order:\n  "
                + "\n  ".join(missing)
                + f"\nit printed:\n{done.stdout}{done.stderr}"
            )
    return None


SYBIL = Sybil(
    parsers=[
        CodeBlockParser("python", run_python),
        CodeBlockParser("sh", run_sh),
        CodeBlockParser("console", run_console),
        SkipParser(),
    ],
    path=str(ROOT),
)


def _examples() -> list:
    return [
        pytest.param(example, id=f"{path.name}:{example.line}")
        for path in DOCS
        for example in SYBIL.parse(path)
    ]


@pytest.fixture(scope="module", autouse=True)
def _close_sessions():
    yield
    for session in SESSIONS.values():
        session.close()
    SESSIONS.clear()


@pytest.mark.parametrize("example", _examples())
def test_the_block_runs_as_shown(example):
    example.evaluate()


FENCE = re.compile(r"^```(.*)$", re.MULTILINE)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_block_says_what_it_is(path):
    """A fence without a language would be neither run nor checked: each names one."""
    opening = FENCE.findall(path.read_text())[::2]
    assert [lang for lang in opening if lang not in LANGUAGES] == [], (
        f"{path.name}: fenced blocks must be one of {sorted(LANGUAGES)}"
    )


@pytest.mark.parametrize(
    ("shown", "printed", "matches"),
    [
        ("wrote 960 rows in 16 shards (22.8 MiB)", "wrote 12 rows in 2 shards (0.1 MiB)", True),
        ("wrote 960 rows in 16 shards", "wrote 12 lines in 2 shards", False),
        ("kind   what to do ...   1.5x", "kind what to do anything at all", True),
        ("  epoch 1  steps 32  loss 0.5578", "  epoch 1  steps 4  loss 0.7", True),
    ],
)
def test_a_shown_line_matches_with_its_figures_free(shown, printed, matches):
    assert (unmatched_lines([shown], printed) == []) is matches

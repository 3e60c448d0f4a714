"""What README.md and docs/ promise exists: every ``tfgpu.<name>`` they show resolves, and every
``tfgpu <command> --flag`` they show is a flag of that command. (What each call does is tested
where it lives: test_entry_points, test_parity_program, test_cli, ...)"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

import tfgpu
from tfgpu.cli import build_parser

ROOT = Path(__file__).parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TEXT = {path.name: path.read_text() for path in DOCS}


def _public_names() -> set[tuple[str, str]]:
    found = set()
    for name, text in TEXT.items():
        for match in re.finditer(r"\btfgpu\.([a-z_][A-Za-z_]*)(?:\.([A-Za-z_]+))?", text):
            found.add((name, match.group(0)))
    return found


@pytest.mark.parametrize(("doc", "dotted"), sorted(_public_names()))
def test_every_documented_name_exists(doc, dotted):
    import importlib

    parts = dotted.split(".")
    value = tfgpu
    for i, part in enumerate(parts[1:], start=2):
        path = ".".join(parts[:i])
        if not hasattr(value, part):  # a subpackage the root does not export (tfgpu.testing)
            try:
                importlib.import_module(path)
            except ImportError:
                pytest.fail(f"{doc} names {dotted}, and {path} does not exist")
        value = getattr(value, part)


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _documented_flags() -> set[tuple[str, str, str]]:
    """(doc, command, --flag) for each flag written after `tfgpu COMMAND` on one line."""
    commands = _subparsers()
    found = set()
    for name, text in TEXT.items():
        for line in text.splitlines():
            for match in re.finditer(r"\btfgpu ([a-z-]+)\b([^`|#]*)", line):
                command, rest = match.group(1), match.group(2).split(" -- ")[0]
                if command not in commands:
                    continue
                for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest):
                    found.add((name, command, flag))
    return found


@pytest.mark.parametrize(("doc", "command", "flag"), sorted(_documented_flags()))
def test_every_documented_flag_is_a_flag_of_its_command(doc, command, flag):
    parser = _subparsers()[command]
    known = {option for action in parser._actions for option in action.option_strings}
    assert flag in known, f"{doc} shows `tfgpu {command} {flag}`, and {command} has no such flag"


def test_the_docs_name_every_command():
    text = "\n".join(TEXT.values())
    assert [c for c in _subparsers() if f"tfgpu {c}" not in text] == []

"""What every subcommand shares: logging, JSON output, error handling, the rich console."""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from rich.console import Console

from tfgpu import usercode
from tfgpu.errors import TfgpuError, from_graph_assertion

STATUS_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}

out = Console(highlight=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)  # messages stay one greppable line


def setup_logging(*, verbose: bool) -> None:
    """Library logs go to stderr; quiet TensorFlow's C++ start-up chatter unless verbose."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if verbose else "2")
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("tfgpu").setLevel(logging.DEBUG if verbose else logging.WARNING)


def packed(fields: list[str], *, width: int) -> list[str]:
    """Fields ("val_loss 0.0791") two spaces apart, in lines of at most ``width`` columns, a line
    breaking only between fields: rich's own wrapping broke "val_loss" from its value at 80."""
    lines, line = [], "  "
    for field in fields:
        if line.strip() and len(line) + 2 + len(field) > width:
            lines.append(line)
            line = "    "
        line += ("  " if line.strip() else "") + field
    return [*lines, line]


def print_json(data: Any) -> None:
    """The --json contract: one JSON object on stdout and nothing else."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


def guarded(action: Callable[[], int], *, verbose: bool = False) -> int:
    """Run a subcommand; a user-fixable error becomes one message and its exit status.

    User-fixable: a TfgpuError, tfgpu's own check inside a TensorFlow graph, and an error raised
    by the user's code (see ``tfgpu.usercode``). Anything else is a tfgpu bug: its traceback stays.
    ``verbose`` adds the full traceback to the message of an error in the user's code.
    """
    try:
        return action()
    except TfgpuError as exc:
        if verbose and isinstance(exc, usercode.UserCodeError):
            traceback.print_exception(exc.__cause__ or exc, file=sys.stderr)
        err.print(f"[bold red]error:[/] {exc.message}", soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130
    except Exception as exc:
        translated = from_graph_assertion(exc) or usercode.explain(exc)
        if translated is None:
            raise
        if verbose and isinstance(translated, usercode.UserCodeError):
            traceback.print_exception(exc, file=sys.stderr)
        err.print(f"[bold red]error:[/] {translated.message}", soft_wrap=True)
        return translated.exit_code

"""Only tfgpu's lines by default: TensorFlow's and absl's log noise stays out of the CLI's stderr.

TensorFlow 2.21 writes its C++ log lines (oneDNN, cuInit, CUDA factories, "Tensor RefCount not
reliable ...") to file descriptor 2, some of them before any setting can stop them
(TF_CPP_MIN_LOG_LEVEL=3 does not), and each process it starts prints them again. ``install``
puts a filter between descriptor 2 and where it pointed: lines in absl's and TensorFlow's log
formats are dropped (fatal ones, ``F...``, pass), everything else passes, and child processes
inherit the filtered descriptor. ``--verbose`` or TFGPU_VERBOSE=1 leaves stderr alone.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import sys
import threading
import warnings

NOISE = re.compile(
    r"^(?:"
    r"[IWE]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ \S+:\d+\]"  # absl C++: I0000 00:00:1795431765.66 123 file.cc:52]
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWE] (?:tensorflow|external|xla)/"  # older TensorFlow
    r"|To enable the following instructions: .*rebuild TensorFlow"
    r"|(?:W|WARNING):(?:tensorflow|absl):"  # Python-side TensorFlow and absl warnings
    r"|\s*\[\[\{\{node [^}]*\}\}\]\]\s*$"  # a C++ log line's node context, on a line of its own
    r")"
)

_state: dict[str, object] = {}


def is_noise(line: str) -> bool:
    return bool(NOISE.match(line.lstrip("\r")))


def active() -> bool:
    """Whether this process filters log noise (the CLI without --verbose)."""
    return bool(_state)


def stderr_is_terminal() -> bool:
    """Whether stderr was a terminal before ``install`` put a pipe there."""
    return bool(_state.get("terminal_tty", sys.stderr.isatty()))


def install() -> None:
    """Filter this process's (and its children's) stderr; Python warnings and TensorFlow's Python
    logger are quieted too. Undone at exit, after the last line is through."""
    if _state:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")  # children: Keras' and numpy's warnings
    warnings.filterwarnings("ignore")
    for name in ("tensorflow", "absl", "h5py", "matplotlib"):
        logging.getLogger(name).setLevel(logging.ERROR)
    sys.stderr.flush()
    terminal_tty = sys.stderr.isatty()
    read_end, write_end = os.pipe()
    terminal = os.dup(2)
    os.dup2(write_end, 2)
    os.close(write_end)
    thread = threading.Thread(target=_pump, args=(read_end, terminal), name="tfgpu-quiet", daemon=True)
    thread.start()
    _state.update(terminal=terminal, terminal_tty=terminal_tty, thread=thread)
    atexit.register(_restore)


def _pump(read_end: int, terminal: int) -> None:
    pending = b""
    while chunk := os.read(read_end, 65536):
        pending += chunk
        *lines, pending = re.split(rb"(?<=[\r\n])", pending)
        for line in lines:
            if not is_noise(line.decode(errors="replace")):
                os.write(terminal, line)
    if pending and not is_noise(pending.decode(errors="replace")):
        os.write(terminal, pending)
    os.close(read_end)


def _restore() -> None:
    """Point descriptor 2 back at the terminal; the pump drains what is left (children that still
    hold the pipe keep it open, so the wait is bounded)."""
    terminal, thread = _state["terminal"], _state["thread"]
    sys.stderr.flush()
    os.dup2(terminal, 2)  # type: ignore[arg-type]
    thread.join(timeout=2)  # type: ignore[union-attr]


def exit_now(status: int) -> None:
    """``os._exit`` for a process whose main thread is stuck inside TensorFlow, after the lines
    already written reach the terminal (the filter's thread would die with them unsent)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if _state:
        _restore()
    os._exit(status)

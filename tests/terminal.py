"""The tfgpu command on a pseudo-terminal, as a person sees it (issue 44).

The command runs with its stdin, stdout and stderr on a pty of 80 x 24; pyte, a terminal emulator,
takes every byte it writes (colours, rich's live display redrawing itself, carriage returns) and
gives back the screen and what scrolled off it: the lines a person reads, in order.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pyte

from support.processes import cli_environ


@dataclasses.dataclass
class Seen:
    lines: list[str]  # what scrolled off the top, then the screen, trailing blanks dropped
    returncode: int
    first_output_s: float  # from start to the first byte that shows something
    total_s: float
    columns: int

    raw: str  # what was written, escape sequences removed

    def wider_than_the_terminal(self) -> list[str]:
        """Lines written wider than the terminal, which it breaks at the last column, mid-word
        (rich breaks its own lines between words, before the last column)."""
        pieces = (piece for line in self.raw.split("\n") for piece in line.split("\r"))
        return [piece for piece in pieces if len(piece.rstrip()) > self.columns]


def on_terminal(
    *args: str,
    cwd: str,
    env: dict[str, str] | None = None,
    columns: int = 80,
    rows: int = 24,
    timeout: float = 600,
) -> Seen:
    """Run ``tfgpu ARGS`` on a pty; ``timeout`` is a ceiling only a hang reaches."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    full_env = cli_environ({**(env or {}), "TERM": "xterm-256color"}, drop=("COLUMNS",))
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "tfgpu.cli", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=cwd,
        env=full_env,
    )
    os.close(slave)
    screen = pyte.HistoryScreen(columns, rows, history=100_000)
    stream = pyte.ByteStream(screen)
    first, written = None, []
    try:
        while True:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:
                process.kill()
                raise TimeoutError(f"tfgpu {' '.join(args)} wrote nothing for {timeout} s")
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the command and everything it started closed the terminal
                break
            if not data:
                break
            if first is None and data.strip():
                first = time.monotonic() - started
            stream.feed(data)
            written.append(data)
    finally:
        os.close(master)
    returncode = process.wait(timeout=60)
    total = time.monotonic() - started
    scrolled = ["".join(line[x].data for x in range(columns)).rstrip() for line in screen.history.top]
    lines = scrolled + [line.rstrip() for line in screen.display]
    while lines and not lines[-1]:
        lines.pop()
    raw = ESCAPES.sub("", b"".join(written).decode(errors="replace"))
    return Seen(lines, returncode, first if first is not None else total, total, columns, raw)


ESCAPES = re.compile(
    r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]"
)

"""Progress for long work: a rich bar on a terminal, one greppable line every few seconds otherwise.

TFGPU_PROGRESS=bar|lines|off overrides the choice. The library reports progress through callbacks;
only the CLI draws it.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from tfgpu import env, quiet

LINE_EVERY_S = 5.0


def _mode() -> str:
    return env.progress_mode() or ("bar" if quiet.stderr_is_terminal() else "lines")


@contextlib.contextmanager
def progress(task: str, *, unit: str = "rows") -> Iterator[Callable[[int, int], None]]:
    """Yields ``update(done, total)``."""
    mode = _mode()
    if mode == "bar":
        columns = (
            TextColumn(f"[bold]{task}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(unit),
            TimeRemainingColumn(),
        )
        with Progress(*columns, transient=False) as bar:
            handle = bar.add_task(task, total=None)

            def update(done: int, total: int) -> None:
                bar.update(handle, completed=done, total=total)

            yield update
        return
    started = time.monotonic()
    last = [0.0]

    def line(done: int, total: int) -> None:
        now = time.monotonic()
        if mode == "off" or (now - last[0] < LINE_EVERY_S and done < total):
            return
        last[0] = now
        rate = done / max(now - started, 1e-9)
        share = f" ({100 * done / total:.0f}%)" if total else ""
        print(f"tfgpu {task}: {done}/{total} {unit}{share}, {rate:.0f} {unit}/s", file=sys.stderr, flush=True)

    yield line

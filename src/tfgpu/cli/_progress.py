"""Progress for long work: a rich bar on a terminal, one greppable line every few seconds otherwise.

TFGPU_PROGRESS=bar|lines|off overrides the choice. The library reports progress through callbacks;
only the CLI draws it.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

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


PHASES = {  # what a phase of tfgpu demo does, shown as it starts
    "doctor": "doctor: is TensorFlow using the GPU?",
    "data": "data: generating images, converting to TFRecord shards",
    "diagnose": "diagnose: timing two input pipelines against the model",
    "tune": "tune: measuring steps per call, input options and XLA",
    "train": "train: training the model",
    "predict": "predict: predicting the held-out images",
    "report": "report: writing tfgpu-report.html",
    "measure": "measuring the pipeline, the device and both",
}


@contextlib.contextmanager
def phases(command: str, *, machine_output: bool = False) -> Iterator[Callable[[str, int, int], None]]:
    """Yields ``update(phase, done, total)`` for a command of several phases (tfgpu demo): on a
    terminal a rich line per phase, started as the phase starts, with its progress (``total`` 0:
    a spinner and the time so far); otherwise a line as each phase starts and one every few
    seconds while it runs (on stderr: stdout keeps the command's results). With
    ``machine_output`` (--json) nothing is shown unless TFGPU_PROGRESS asks for it."""
    mode = env.progress_mode() or ("off" if machine_output else _mode())
    if mode == "off":
        yield lambda phase, done, total: None
        return
    if mode == "bar":
        from tfgpu.cli._common import out

        # on stdout, the terminal: stderr goes through tfgpu's filter of TensorFlow's log lines,
        # which passes whole lines only, and a live display redraws one line without ending it

        columns = (
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=out, transient=False) as bar:
            tasks: dict[str, int] = {}

            def finish(handle: int) -> None:  # a phase ended: its bar full
                total = bar.tasks[handle].total or 1
                bar.update(handle, total=total, completed=total)

            def update(phase: str, done: int, total: int) -> None:
                if phase not in tasks:
                    for other in tasks.values():
                        finish(other)
                    tasks[phase] = bar.add_task(PHASES.get(phase, phase), total=None)
                bar.update(tasks[phase], completed=done, total=total or None)

            yield update
            for handle in tasks.values():
                finish(handle)
        return
    current = [""]
    last = [0.0]

    def line(phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if phase != current[0]:
            current[0], last[0] = phase, now
            print(f"tfgpu {command}: {PHASES.get(phase, phase)}", file=sys.stderr, flush=True)
        elif total and now - last[0] >= LINE_EVERY_S:
            last[0] = now
            print(f"tfgpu {command}: {phase} {done}/{total}", file=sys.stderr, flush=True)

    yield line

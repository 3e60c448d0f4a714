"""``find_batch_size``: the largest per-replica batch whose training step fits in device memory."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tfgpu import choices
from tfgpu.errors import ConfigError
from tfgpu.train.pieces.task import Task


def _trial(task: Task, strategy: Any) -> Callable[[int], bool]:
    from tfgpu.train.loop.training import OutOfMemoryError
    from tfgpu.train.run.trainer import Trainer

    def fits(batch: int) -> bool:
        try:
            Trainer(
                dataclasses.replace(task, batch_size=batch),
                strategy=strategy,
                monitor_gpus=False,
                prove=False,
            ).fit(steps=2)
        except OutOfMemoryError:
            return False
        return True

    return fits


def find_batch_size(
    task: Task,
    *,
    strategy: Any = None,
    start: int = 8,
    limit: int = 8192,
    fits: Callable[[int], bool] | None = None,
) -> int:
    """Double from ``start`` until a step runs out of memory (or ``limit``), then bisect.

    ``fits(batch)`` runs two real training steps by default; tests pass their own.
    """
    fits = fits or _trial(task, strategy)
    if not fits(start):
        raise ConfigError(
            f"Even {start} examples per replica run out of memory",
            value=start,
            fix="use a smaller model or input, precision='auto', or start lower",
        )
    good, bad = start, None
    while good * 2 <= limit:
        if fits(good * 2):
            good *= 2
        else:
            bad = good * 2
            break
    if bad is not None:
        while bad - good > max(1, good // 16):
            middle = (good + bad) // 2
            if fits(middle):
                good = middle
            else:
                bad = middle
    choices.record(
        "batch_size",
        f"{good} per replica",
        "largest that fit" + ("" if bad else f" (search stopped at {limit})"),
    )
    return good

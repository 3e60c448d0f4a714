"""The values tfgpu picks by itself, reported once, in one summary.

Anything tfgpu decides for the user (strategy, precision, batch per replica, parallelism, cache
placement) is recorded here with the reason. ``summary_line()`` gives the single line the CLI prints,
and ``announce()`` logs it once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass

log = logging.getLogger("tfgpu")


@dataclass(frozen=True)
class Choice:
    name: str
    value: str
    reason: str


_lock = threading.Lock()
_choices: dict[str, Choice] = {}
_announced: str | None = None


def record(name: str, value: object, reason: str = "") -> None:
    """Remember a choice; a later choice of the same name replaces the earlier one."""
    with _lock:
        _choices[name] = Choice(name=name, value=str(value), reason=reason)


@contextlib.contextmanager
def unchanged() -> Iterator[None]:
    """What is recorded inside is forgotten after: a tuning trial's setup is not the run's choice."""
    with _lock:
        saved = dict(_choices)
    try:
        yield
    finally:
        with _lock:
            _choices.clear()
            _choices.update(saved)


def all_choices() -> list[Choice]:
    with _lock:
        return list(_choices.values())


def as_dict() -> dict[str, dict[str, str]]:
    return {c.name: {"value": c.value, "reason": c.reason} for c in all_choices()}


def summary_line() -> str:
    parts = [f"{c.name}={c.value}" + (f" ({c.reason})" if c.reason else "") for c in all_choices()]
    return "tfgpu chose: " + ", ".join(parts) if parts else "tfgpu chose: nothing yet"


def announce() -> str:
    """Log the summary line unless the same line was already logged; return it."""
    global _announced
    line = summary_line()
    if line != _announced:
        log.info(line)
        _announced = line
    return line


def clear() -> None:
    global _announced
    with _lock:
        _choices.clear()
        _announced = None

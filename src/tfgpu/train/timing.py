"""The one way tfgpu times a training configuration: the Trainer's own compiled execution.

``tfgpu diagnose`` (its step profile, its measured advice, ``--apply``) and ``tune=True`` both time
steps through here: ``run`` makes calls of ``per_call`` steps, as the Trainer does, reads nothing
back until the end, and returns the seconds; ``restored`` puts the model's weights, optimizer
state and metrics back afterwards, so timing never changes what the user trains.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

_LIMITS: dict[int, Any] = {}


def limit(steps: int) -> Any:
    """``steps`` as a constant tensor, made once per value: a Python int would retrace the call."""
    import tensorflow as tf

    if steps not in _LIMITS:
        _LIMITS[steps] = tf.constant(steps, tf.int32)
    return _LIMITS[steps]


def run(
    execute: Callable[[Any, Any], dict[str, Any]], iterator: Any, *, steps: int, per_call: int
) -> tuple[float, list[float], list[Any]]:
    """``steps`` steps from ``iterator``, ``per_call`` per compiled call (``execute``, a
    ``train.execution`` function), nothing read back until the end: the seconds they took, when
    each call was made (from the start), and each call's outputs."""
    outputs, starts = [], []
    per = limit(per_call)
    start = time.perf_counter()
    for _ in range(max(1, steps // per_call)):
        starts.append(time.perf_counter() - start)
        outputs.append(execute(iterator, per))
    int(outputs[-1]["steps"])  # the calls run in order: the last one's result waits for all
    return time.perf_counter() - start, starts, outputs


def examples(outputs: list[Any]) -> float:
    """The rows the calls trained on (this worker's replicas)."""
    return float(sum(float(o["examples"]) for o in outputs))


@contextlib.contextmanager
def restored(model: Any) -> Iterator[None]:
    """Put the model's weights, optimizer state and metrics back as they were on leaving: timing
    a step trains the model, which must not change the user's model."""
    optimizer = getattr(model, "optimizer", None)
    variables = list(model.weights) + (list(optimizer.variables) if optimizer is not None else [])
    saved = [v.numpy() for v in variables]
    try:
        yield
    finally:
        for variable, value in zip(variables, saved, strict=True):
            variable.assign(value)
        model.reset_metrics()

"""Timing loops: the pipeline alone, each stage (prefix) alone, and pipeline + device together."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def batch_examples(batch: Any) -> int:
    """Examples in a batch: the leading dimension of its first tensor."""
    import tensorflow as tf

    first = tf.nest.flatten(batch)[0]
    return int(first.shape[0]) if first.shape.rank else 1


@dataclass
class PipelineRun:
    examples_per_s: float
    batches_per_s: float
    cpu_s_per_example: float
    batch_size: int


def pipeline_alone(dataset: Any, *, steps: int, warmup: int) -> PipelineRun:
    iterator = iter(dataset.repeat())
    size = 0
    for _ in range(warmup):
        size = batch_examples(next(iterator))
    cpu, start = time.process_time(), time.perf_counter()
    examples = 0
    for _ in range(steps):
        examples += batch_examples(next(iterator))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return PipelineRun(examples / wall, steps / wall, cpu / max(examples, 1), size or examples // steps)


def element_rate(dataset: Any, *, elements: int, warmup: int) -> float:
    """Elements per second of any dataset (a stage prefix)."""
    iterator = iter(dataset.repeat())
    for _ in range(warmup):
        next(iterator)
    start = time.perf_counter()
    for _ in range(elements):
        next(iterator)
    return elements / (time.perf_counter() - start)


@dataclass
class TogetherRun:
    examples_per_s: float
    input_wait_fraction: float
    host_overhead_fraction: float
    steps: list[dict[str, float]] = field(default_factory=list)  # per step: wait, compute


def together(dataset: Any, device: Any, *, steps: int, warmup: int, device_step_s: float) -> TogetherRun:
    """Train-loop shape: fetch a batch (timed as input wait), then a device step."""
    iterator = iter(dataset.repeat())
    for _ in range(warmup):
        device.step(next(iterator))
    timeline, waits, computes = [], 0.0, 0.0
    examples = 0
    started = time.perf_counter()
    for _ in range(steps):
        fetch = time.perf_counter()
        batch = next(iterator)
        waited = time.perf_counter() - fetch
        compute = time.perf_counter()
        device.step(batch)
        busy = time.perf_counter() - compute
        examples += batch_examples(batch)
        waits += waited
        computes += busy
        timeline.append({"t": round(fetch - started, 5), "wait": round(waited, 6), "compute": round(busy, 6)})
    wall = time.perf_counter() - started
    overhead = max(0.0, wall - waits - steps * device_step_s)
    return TogetherRun(examples / wall, waits / wall, overhead / wall, timeline)


def median_of(function: Any, repeats: int) -> float:
    return float(np.median([function() for _ in range(repeats)]))

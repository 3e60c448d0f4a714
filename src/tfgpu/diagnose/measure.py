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
    sample: Any = None  # the last batch: a real one to time the model's step on


MIN_ALONE_S = 0.3  # the pipeline alone is timed at least this long: 25 cheap batches take 2 ms
MAX_ALONE_ROUNDS = 20


def pipeline_alone(dataset: Any, *, steps: int, warmup: int) -> PipelineRun:
    """The pipeline's own rate: rounds of ``steps`` batches until ``MIN_ALONE_S`` has passed, the
    median round's rate. One round of a cheap pipeline lasts milliseconds, and a single preemption
    on a busy host halved it (the judge then read per-step fetch cost as input wait)."""
    iterator = iter(dataset.repeat())
    size, batch = 0, None
    for _ in range(warmup):
        batch = next(iterator)
        size = batch_examples(batch)
    cpu, began = time.process_time(), time.perf_counter()
    rates, examples, rounds = [], 0, 0
    while rounds < MAX_ALONE_ROUNDS and (rounds == 0 or time.perf_counter() - began < MIN_ALONE_S):
        start, counted = time.perf_counter(), 0
        for _ in range(steps):
            batch = next(iterator)
            counted += batch_examples(batch)
        rates.append(counted / (time.perf_counter() - start))
        examples, rounds = examples + counted, rounds + 1
    cpu = time.process_time() - cpu
    rate = float(np.median(rates))
    per_batch = examples / (rounds * steps)
    return PipelineRun(rate, rate / per_batch, cpu / max(examples, 1), size or int(per_batch), batch)


def element_rate(dataset: Any, *, elements: int, warmup: int) -> tuple[float, float]:
    """(elements per second, this process's CPU seconds per element) of any dataset (a stage
    prefix). The rate is wall time, what the pipeline delivers; the CPU seconds are the work an
    element costs, which other jobs on the cores do not stretch as they stretch the wall time
    (beside two busy TensorFlow jobs and a test job, the tiny-ops map, 25 µs of wall time and 34
    µs of CPU per element alone, lost its advice to vectorize in two runs of ten when its wall
    time decided)."""
    iterator = iter(dataset.repeat())
    for _ in range(warmup):
        next(iterator)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(elements):
        next(iterator)
    cpu = time.process_time() - cpu
    return elements / (time.perf_counter() - start), cpu / elements


@dataclass
class TogetherRun:
    """Input and device together. ``input_wait_fraction`` is the run's total (a pipeline that falls
    behind every tenth batch keeps the device waiting that long); the per-step figures,
    ``host_overhead_fraction`` and ``fetch_fraction`` (a typical fetch's share of a typical step),
    are medians over the steps, so that a stall of the machine (a busy neighbour, a wake-up that
    came late) is not charged to every step as overhead: in one loaded CI run the well-tuned
    workload's 30 ms steps summed to 26% overhead (3-7% in every run beside three TensorFlow jobs
    here), and it was advised steps per call."""

    examples_per_s: float
    input_wait_fraction: float
    host_overhead_fraction: float
    steps: list[dict[str, float]] = field(default_factory=list)  # per step: wait, compute
    fetch_fraction: float | None = None  # None: the total wait stands for it

    @property
    def fetch_cost(self) -> float:
        return self.input_wait_fraction if self.fetch_fraction is None else self.fetch_fraction


def together(dataset: Any, device: Any, *, steps: int, warmup: int, device_step_s: float) -> TogetherRun:
    """Train-loop shape: fetch a batch (timed as input wait), then a device step."""
    iterator = iter(dataset.repeat())
    for _ in range(warmup):
        device.step(next(iterator))
    timeline, starts, waits = [], [], []
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
        starts.append(fetch)
        waits.append(waited)
        timeline.append({"t": round(fetch - started, 5), "wait": round(waited, 6), "compute": round(busy, 6)})
    ended = time.perf_counter()
    walls = np.diff([*starts, ended])
    step_s = float(np.median(walls))
    overhead = max(0.0, float(np.median(walls - np.asarray(waits))) - device_step_s)
    return TogetherRun(
        examples / (ended - started),
        sum(waits) / (ended - started),
        overhead / step_s,
        timeline,
        fetch_fraction=float(np.median(waits)) / step_s,
    )


def together_in_graph(
    dataset: Any, device: Any, *, steps: int, warmup: int, per_call: int = 1
) -> TogetherRun:
    """A model device fed by ``dataset`` as the Trainer feeds it: ``per_call`` steps per compiled
    call, the iterator inside the call, the input wait timed in the graph around each fetch."""
    iterator = device.iterator(dataset.repeat())
    device.run(iterator, steps=max(warmup, per_call), per_call=per_call)  # traces, fills the buffers
    wall, starts, outputs = device.run(iterator, steps=max(steps, per_call), per_call=per_call)
    waits = [float(o.wait) for o in outputs]
    ends = [*starts[1:], wall]
    timeline = [
        {"t": round(t, 5), "wait": round(w, 6), "compute": round(max(0.0, end - t - w), 6)}
        for t, end, w in zip(starts, ends, waits, strict=True)
    ]
    examples = sum(float(o.examples) for o in outputs)
    return TogetherRun(examples / wall, min(1.0, sum(waits) / wall), 0.0, timeline)

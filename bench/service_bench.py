"""The tf.data service's mechanism on 2 cores (issue 19): a trainer pinned to one core.

The trainer process is pinned to core 0 (``os.sched_setaffinity``). Its simulated device is a
step that takes about as long on that core as the pipeline takes to make the batch: the host work
a real step costs (dispatch, a CPU-bound model), so the job needs about 2 cores. In-process, the
pipeline's map shares core 0 with the step; with ``tfgpu data-service``'s one worker on core 1, the
map runs there, and the trainer only batches and steps. The ratio of examples/s is the gain.
Rounds alternate (local, service, local, ...); medians of ``--repeats``.

    python service_bench.py [--repeats 5] [--batches 40]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from _common import save, table

TRAINER_CORE, SERVICE_CORE = 0, 1
ELEMENT = 96  # per-element work: a 96x96 matmul chain, a few ms on one core
BATCH = 16


def make_elements(tf):
    """The expensive per-element part (decode and augment, in a real pipeline)."""

    def work(i):
        x = tf.random.stateless_normal([ELEMENT, ELEMENT], seed=tf.stack([i, 0]))
        for _ in range(12):
            x = tf.tanh(tf.linalg.matmul(x, x) / ELEMENT)
        return tf.reduce_mean(x, axis=0)

    return tf.data.Dataset.range(1 << 40).map(work, num_parallel_calls=tf.data.AUTOTUNE)


def trainer(mode: str, address: str, batches: int, units: int) -> None:
    """One timed run in this (pinned) process; prints examples/s as JSON."""
    os.sched_setaffinity(0, {TRAINER_CORE})
    import tensorflow as tf

    batched = make_elements(tf).batch(BATCH)
    if mode == "service":
        batched = batched.apply(tf.data.experimental.service.distribute("distributed_epoch", address))
    batched = batched.prefetch(2)
    weights = tf.random.stateless_normal([256, 256], seed=[1, 2])
    loops = tf.constant(units)

    @tf.function
    def step(batch):  # the simulated device: `units` matmuls on the trainer's core
        x = weights
        for _ in tf.range(loops):
            x = tf.tanh(tf.linalg.matmul(x, weights) / 256.0)
        return tf.reduce_sum(x) + tf.reduce_sum(batch)

    iterator = iter(batched)
    for _ in range(5):  # warm-up: tracing, the service's first elements
        step(next(iterator)).numpy()
    start = time.perf_counter()
    for _ in range(batches):
        loss = step(next(iterator))
    loss.numpy()
    print(json.dumps({"examples_per_s": batches * BATCH / (time.perf_counter() - start)}), flush=True)


def _run_trainer(mode: str, address: str, batches: int, units: int) -> float:
    done = subprocess.run(
        [sys.executable, __file__, "trainer", mode, address, str(batches), str(units)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])["examples_per_s"]


def _calibrate() -> tuple[float, float]:
    """(ms per batch of the pipeline, ms per step unit), both on one core."""
    import tensorflow as tf

    os.sched_setaffinity(0, {TRAINER_CORE})
    it = iter(make_elements(tf).batch(BATCH))
    next(it)
    start = time.perf_counter()
    for _ in range(10):
        next(it)
    pipeline_ms = (time.perf_counter() - start) / 10 * 1000
    weights = tf.random.stateless_normal([256, 256], seed=[1, 2])

    @tf.function
    def unit(n):
        x = weights
        for _ in tf.range(n):
            x = tf.tanh(tf.linalg.matmul(x, weights) / 256.0)
        return tf.reduce_sum(x)

    unit(tf.constant(10)).numpy()
    start = time.perf_counter()
    unit(tf.constant(200)).numpy()
    unit_ms = (time.perf_counter() - start) / 200 * 1000
    os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    return pipeline_ms, unit_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", type=int, default=40)
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("needs 2 cores")
    pipeline_ms, unit_ms = _calibrate()
    units = max(1, round(pipeline_ms / unit_ms))  # the step takes as long as the pipeline: 2 cores
    step_ms = units * unit_ms
    from tfgpu.data.service import DataService, ServiceOptions

    os.sched_setaffinity(0, {SERVICE_CORE})  # the dispatcher, and the worker it starts, on core 1
    rates: dict[str, list[float]] = {"in-process": [], "service": []}
    with DataService(ServiceOptions(workers=1)) as service:
        for _ in range(args.repeats):
            rates["in-process"].append(_run_trainer("local", service.address, args.batches, units))
            rates["service"].append(_run_trainer("service", service.address, args.batches, units))
    medians = {name: statistics.median(r) for name, r in rates.items()}
    ratio = medians["service"] / medians["in-process"]
    rows = [
        {"trainer input": name, "examples/s": medians[name], "min": min(r), "max": max(r), "runs": len(r)}
        for name, r in rates.items()
    ]
    print(
        f"pipeline {pipeline_ms:.1f} ms per batch of {BATCH} on one core; simulated step {step_ms:.1f} ms "
        f"({units} matmuls of {unit_ms:.2f} ms)"
    )
    print(
        table(
            "Trainer pinned to one core: pipeline in-process vs one service worker on the other core",
            rows,
            ["trainer input", "examples/s", "min", "max", "runs"],
        )
    )
    print(f"service / in-process: {ratio:.2f}x (goal >= 1.7x)")
    save("service_bench", {"pipeline_ms": pipeline_ms, "step_ms": step_ms, "rates": rates, "ratio": ratio})


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "trainer":
        trainer(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()

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
ELEMENT = 96  # per-element work: a 96x96 matmul chain, about 0.4 ms on one core


def make_elements(tf, batch: int):
    """The expensive per-element part (decode and augment, in a real pipeline)."""

    def work(i):
        x = tf.random.stateless_normal([ELEMENT, ELEMENT], seed=tf.stack([i, 0]))
        for _ in range(12):
            x = tf.tanh(tf.linalg.matmul(x, x) / ELEMENT)
        return tf.reduce_mean(x, axis=0)

    # Splits of 256 elements, as files are in a real pipeline: the service's dynamic sharding hands
    # a worker one split per request to the dispatcher, so a bare range would cost one per element.
    chunks = tf.data.Dataset.range(1 << 30).flat_map(lambda c: tf.data.Dataset.range(c * 256, (c + 1) * 256))
    elements = chunks.map(work, num_parallel_calls=tf.data.AUTOTUNE)
    return elements.batch(batch).prefetch(2)  # batches cross the network, as tfgpu.data.pipeline sends them


def device_work(tf, weights, n):
    """The simulated device's work: ``n`` 256x256 matmuls on this process's core."""
    x = weights
    for _ in tf.range(n):
        x = tf.tanh(tf.linalg.matmul(x, weights) / 256.0)
    return tf.reduce_sum(x)


def trainer(mode: str, address: str, batches: int, batch: int, units: int) -> None:
    """One timed run in this (pinned) process; prints examples/s as JSON."""
    os.sched_setaffinity(0, {TRAINER_CORE})
    import tensorflow as tf

    batched = make_elements(tf, batch)
    if mode == "service":
        batched = batched.apply(
            tf.data.experimental.service.distribute("distributed_epoch", address, compression=None)
        )
    batched = batched.prefetch(2)
    weights = tf.random.stateless_normal([256, 256], seed=[1, 2])
    loops = tf.constant(units)

    @tf.function
    def step(batch):  # the simulated device: `units` matmuls on the trainer's core
        return device_work(tf, weights, loops) + tf.reduce_sum(batch)

    iterator = iter(batched)
    for _ in range(5):  # warm-up: tracing, the service's first elements
        step(next(iterator)).numpy()
    start = time.perf_counter()
    for _ in range(batches):
        loss = step(next(iterator))
    loss.numpy()
    print(json.dumps({"examples_per_s": batches * batch / (time.perf_counter() - start)}), flush=True)


def _run_trainer(mode: str, address: str, batches: int, batch: int, units: int) -> float:
    done = subprocess.run(
        [sys.executable, __file__, "trainer", mode, address, str(batches), str(batch), str(units)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])["examples_per_s"]


def _calibrate(batch: int) -> tuple[float, float]:
    """(ms per batch of the pipeline, ms per step unit), both on one core."""
    import tensorflow as tf

    os.sched_setaffinity(0, {TRAINER_CORE})
    it = iter(make_elements(tf, batch))
    next(it)
    start = time.perf_counter()
    for _ in range(10):
        next(it)
    pipeline_ms = (time.perf_counter() - start) / 10 * 1000
    weights = tf.random.stateless_normal([256, 256], seed=[1, 2])

    @tf.function
    def unit(n):
        return device_work(tf, weights, n)

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
    parser.add_argument("--batch", type=int, nargs="+", default=[32, 16], help="batch sizes to run")
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("needs 2 cores")
    from tfgpu.data.service import DataService, ServiceOptions

    results, rows = {}, []
    for batch in args.batch:
        pipeline_ms, unit_ms = _calibrate(batch)
        units = max(1, round(pipeline_ms / unit_ms))  # the step takes as long as the pipeline: 2 cores
        os.sched_setaffinity(0, {SERVICE_CORE})  # the dispatcher, and the worker it starts, on core 1
        rates: dict[str, list[float]] = {"in-process": [], "service": []}
        with DataService(ServiceOptions(workers=1)) as service:
            for _ in range(args.repeats):
                for mode, name in (("local", "in-process"), ("service", "service")):
                    rates[name].append(_run_trainer(mode, service.address, args.batches, batch, units))
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
        medians = {name: statistics.median(r) for name, r in rates.items()}
        ratio = medians["service"] / medians["in-process"]
        results[batch] = {
            "pipeline_ms": pipeline_ms,
            "step_ms": units * unit_ms,
            "rates": rates,
            "ratio": ratio,
        }
        rows.append(
            {
                "batch": batch,
                "pipeline ms/batch": pipeline_ms,
                "step ms": units * unit_ms,
                "in-process ex/s": medians["in-process"],
                "service ex/s": medians["service"],
                "service/in-process": ratio,
            }
        )
    columns = list(rows[0])
    print(
        table(
            "Trainer pinned to one core: pipeline in-process vs one service worker on the other core",
            rows,
            columns,
        )
    )
    print(f"medians of {args.repeats} interleaved runs of {args.batches} batches; goal >= 1.7x")
    save("service_bench", {"repeats": args.repeats, "batches": args.batches, "results": results})


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "trainer":
        trainer(sys.argv[2], sys.argv[3], *(int(a) for a in sys.argv[4:]))
    else:
        main()

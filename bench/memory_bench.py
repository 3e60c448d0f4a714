"""What each big-model option costs in step time, against the plain step (issue 33).

One deep conv net (6 blocks of Conv2D 32 + BatchNormalization + ReLU on 32x32x3, batch 64), trained
by ``tfgpu.fit`` for one epoch per round, in interleaved rounds:

- plain: one device;
- accumulation: ``gradient_accumulation_steps=2`` at batch 32 (the same effective batch of 64);
- ``remat=True`` (every layer) and ``remat="largest"``;
- ``devices_per_replica=2``: the layers over two devices (here two logical CPUs on the same cores,
  so only its overhead shows; on GPUs the devices are real).

Each process measures examples/s per variant; the table gives the median over all rounds, the
spread of the per-process medians and each option's ratio to the plain step. On a GPU each
variant's allocator peak is measured too (``tf.config.experimental.get_memory_info``); without one
the column gives ``tfgpu.memory``'s estimate of the bytes per example instead, and says so.

Run: make bench-memory   (or .venv/bin/python bench/memory_bench.py [--processes 3] [--rounds 3] [--pin])
"""

from __future__ import annotations

import os
import statistics
import sys
from typing import Any

ROWS, BATCH, BLOCKS = 512, 64, 6


def build(*, accumulate: int | None = None) -> Any:
    import keras

    keras.utils.set_random_seed(0)
    layers: list[Any] = [keras.Input((32, 32, 3))]
    for _ in range(BLOCKS):
        layers += [
            keras.layers.Conv2D(32, 3, padding="same"),
            keras.layers.BatchNormalization(),
            keras.layers.ReLU(),
        ]
    layers += [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]
    model = keras.Sequential(layers)
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9, gradient_accumulation_steps=accumulate)
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "accumulation 2 x 32": {"accumulate": 2, "batch_size": BATCH // 2},
    "remat=True": {"remat": True},
    "remat='largest'": {"remat": "largest"},
    "devices_per_replica=2": {"devices_per_replica": 2},
}


def one_process(rounds: int, *, cpu: int | None = None) -> dict[str, Any]:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tfgpu

    tfgpu.configure(logical_cpus=2)
    import numpy as np
    import tensorflow as tf

    sys.path.insert(0, os.path.dirname(__file__))
    from _common import interleaved_rates

    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, size=ROWS)
    gpus = tf.config.list_logical_devices("GPU")
    first = gpus[0].name if gpus else "/cpu:0"
    peaks: dict[str, int | None] = {}
    runs = {}
    for name, options in VARIANTS.items():
        options = dict(options)
        accumulate = options.pop("accumulate", None)
        batch = options.pop("batch_size", BATCH)
        if "devices_per_replica" in options:
            model = build(accumulate=accumulate)
        else:
            with tf.distribute.OneDeviceStrategy(first).scope():
                model = build(accumulate=accumulate)

        def run(
            model: Any = model, batch: int = batch, options: dict[str, Any] = options, name: str = name
        ) -> int:
            if gpus:
                tf.config.experimental.reset_memory_stats(gpus[0].name.replace("/device:", ""))
            tfgpu.fit(model, x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False, **options)
            if gpus:
                peaks[name] = tf.config.experimental.get_memory_info(gpus[0].name.replace("/device:", ""))[
                    "peak"
                ]
            return ROWS

        runs[name] = run
    rates = interleaved_rates(runs, rounds=rounds)
    return {"rates": {name: r["all"] for name, r in rates.items()}, "peaks": peaks, "gpu": bool(gpus)}


def estimates() -> dict[str, int]:
    """tfgpu.memory's bytes per example for the plain step and each option (no GPU: estimated)."""
    import tfgpu

    found = tfgpu.memory(build(), batch_size=BATCH, measure=False)
    out = {"plain": found.per_example_bytes}
    out.update({c.option: c.per_example_bytes for c in found.changes})
    return out


def main() -> None:
    sys.path.insert(0, os.path.dirname(__file__))
    from _common import parent_or_child, save, table

    started = parent_or_child(one_process, processes=3, rounds=3)
    if started is None:
        return
    args, results = started
    on_gpu = results[0]["gpu"]
    estimated = {} if on_gpu else estimates()
    rows = []
    for name in VARIANTS:
        every = [r for res in results for r in res["rates"][name]]
        per_process = [statistics.median(res["rates"][name]) for res in results]
        ratios = [
            statistics.median(res["rates"][name]) / statistics.median(res["rates"]["plain"])
            for res in results
        ]
        if on_gpu:
            memory = f"{results[-1]['peaks'][name] / 2**20:.0f} MiB peak"
        else:
            per = {"accumulation 2 x 32": "plain"}.get(name, name)  # the same per example, half the batch
            memory = (
                f"{estimated[per] / 1024:.0f} KiB/example (estimated)"
                if per in estimated
                else "not estimated"
            )
        rows.append(
            {
                "option": name,
                "examples_per_s": statistics.median(every),
                "process min": min(per_process),
                "process max": max(per_process),
                "vs plain": statistics.median(ratios),
                "memory": memory,
            }
        )
    title = (
        f"big-model options, step time against the plain step (median of {args.processes} processes x "
        f"{args.rounds} rounds{', each on one core' if args.pin else ''}; {'GPU' if on_gpu else 'CPU'})"
    )
    print(
        table(title, rows, ["option", "examples_per_s", "process min", "process max", "vs plain", "memory"])
    )
    print(f"\nwrote {save('memory_bench', {'rows': rows, 'raw': results})}")


if __name__ == "__main__":
    main()

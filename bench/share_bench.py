"""What scaling each replica's loss by its share of the rows costs a step (issue 43, item 7).

tfgpu's step on several replicas scales each replica's mean losses by r_i / r (its rows over the
step's) instead of Keras's 1 / replicas (``tfgpu/train/pieces/losses.py``). Where the static shapes show
an even split nothing is added; where they are static and uneven the share is a constant; where
the batch dimension is unknown (a ``Dataset.batch(B)`` without ``drop_remainder``, the common
case) each replica adds a few scalar ops a step on one worker. This measures those where they
weigh most, a dispatch-bound step: a small MLP (32 -> 64 -> 1, global batch 64) on 2 logical CPU
replicas (MirroredStrategy), ``tfgpu.fit`` on ``Dataset.batch(64)`` (dynamic batch dimension) at
K=100 steps per call, ``prove=False``. Twin models in one process, interleaved rounds of one
epoch (200 steps):

- ``share``: tfgpu's step as it is;
- ``1/replicas``: the same loop traced with the share left unset (Keras's own scaling, which on
  whole batches split evenly trains the same weights).

Run: ``make bench-share`` (or ``.venv/bin/python bench/share_bench.py [--processes 16] [--rounds 6]
[--pin]``); the table gives each variant's median examples/s over the processes and the per-process
ratio's median and spread. Sixteen processes: twin models on these CPUs read 0.5x-1.7x of each other.
"""

from __future__ import annotations

import os
import statistics
import sys
from typing import Any

ROWS, BATCH, REPLICAS = 12_800, 64, 2


def one_process(rounds: int, *, cpu: int | None = None) -> dict[str, Any]:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    import tfgpu

    tfgpu.configure(logical_cpus=REPLICAS)
    import keras
    import numpy as np
    import tensorflow as tf
    from _common import interleaved_rates

    from tfgpu.train.pieces import losses

    strategy = tf.distribute.MirroredStrategy(
        [f"/cpu:{i}" for i in range(REPLICAS)], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, 32)).astype("float32")
    y = rng.normal(size=(ROWS, 1)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).prefetch(2)

    def model() -> Any:
        keras.utils.set_random_seed(0)
        with strategy.scope():
            made = keras.Sequential(
                [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
            )
            made.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse", steps_per_execution=100)
        return made

    unshared_run = losses.run

    def keras_scaling(strategy: Any, step: Any, batch: Any) -> Any:
        return strategy.run(step, args=(batch, None, None))

    def variant(shared: bool) -> Any:
        trained = model()

        def run() -> int:
            if not shared:
                losses.run = keras_scaling
            try:
                tfgpu.fit(trained, dataset, epochs=1, verbose=0, prove=False, strategy=strategy)
            finally:
                losses.run = unshared_run
            return ROWS // BATCH * BATCH

        return run

    # twin models in one process differ by up to 30% on these CPUs: which is built first alternates
    order = [True, False] if (cpu or 0) % 2 == 0 and os.getpid() % 2 == 0 else [False, True]
    runs = {shared: variant(shared) for shared in order}
    rates = interleaved_rates({"share": runs[True], "1/replicas": runs[False]}, rounds=rounds)
    return {name: r["median"] for name, r in rates.items()}


def main() -> None:
    from _common import parent_or_child, save, table

    out = parent_or_child(one_process, processes=16, rounds=6)
    if out is None:
        return
    args, results = out
    ratios = [r["share"] / r["1/replicas"] for r in results]
    row = {
        "share ex/s": statistics.median(r["share"] for r in results),
        "1/replicas ex/s": statistics.median(r["1/replicas"] for r in results),
        "ratio (median)": statistics.median(ratios),
        "ratio spread": f"{min(ratios):.3f}-{max(ratios):.3f}",
        "processes": len(results),
    }
    print(table("share scaling on 2 replicas, dispatch-bound MLP", [row], list(row)))
    save("share_bench", {"args": vars(args), "processes": results, "summary": row})


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(__file__))
    main()

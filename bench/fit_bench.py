"""tfgpu.fit vs Keras's fit on the same compiled model and the same tf.data dataset (issue 23).

Per model, in one process, interleaved rounds of one epoch each:

- Keras ``model.fit(dataset)`` at its default of one step per call (``steps_per_execution=1``);
- Keras ``model.fit(dataset)`` at ``steps_per_execution=K``;
- ``tfgpu.fit(model, dataset)`` at the same K;
- the bare in-graph loop (bench/_loops.py): the leanest loop an expert writes, loss read once.

Both fits get the same ``tf.data`` dataset object (batched, prefetched) and twin models with the
same initial weights; the figures are examples/s. These CPUs are noisy and bimodal per process,
so the whole comparison runs in PROCESSES fresh processes and the table gives the median over all
rounds with the spread of the per-process medians. A twin Keras model (same weights, same K) runs
beside the others: Keras against itself is the noise floor, and tfgpu is compared with the mean
of the two Keras runs.

Models: Keras's multi-GPU guide model (784-256-256-10, batch 32) and a small conv net (32x32x3,
conv 16-32, batch 64).

Run: make bench-fit   (or .venv/bin/python bench/fit_bench.py [--processes 4] [--rounds 5] [--pin]);
``--pin`` runs each process on one core, which on this VM removes most of the noise.
"""

from __future__ import annotations

import os
import statistics
import sys
from typing import Any

K = 100
MODELS = {"guide mlp": (784, 32, 16_384), "conv": ((32, 32, 3), 64, 4_096)}  # input, batch, rows


def build(name: str) -> Any:
    import keras

    shape = MODELS[name][0]
    if name == "guide mlp":
        layers = [keras.layers.Dense(256, activation="relu"), keras.layers.Dense(256, activation="relu")]
    else:
        layers = [
            keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
        ]
    return keras.Sequential(
        [keras.Input(shape if isinstance(shape, tuple) else (shape,)), *layers, keras.layers.Dense(10)]
    )


def one_process(rounds: int, *, cpu: int | None = None) -> dict[str, list[float]]:
    """Every variant of every model, interleaved; examples/s per round (on core ``cpu`` only if given)."""
    if cpu is not None:  # one core: no migration between cores, the main noise of this VM
        os.sched_setaffinity(0, {cpu})
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    sys.path.insert(0, os.path.dirname(__file__))
    from _common import interleaved_rates
    from _loops import bare_loop, compiled, dataset_fit

    default = tf.distribute.get_strategy()
    variants = {}
    for name, (shape, batch, rows) in MODELS.items():
        rng = np.random.default_rng(0)
        x = rng.normal(size=(rows, *(shape if isinstance(shape, tuple) else (shape,)))).astype("float32")
        y = rng.integers(0, 10, size=rows)
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).prefetch(tf.data.AUTOTUNE)
        make = lambda n=name: build(n)  # noqa: E731
        for label, spe, ours in (
            ("keras fit spe=1", 1, False),
            (f"keras fit spe={K}", K, False),
            (f"tfgpu.fit spe={K}", K, True),
            (f"keras fit spe={K} (twin)", K, False),  # the noise floor: Keras against itself
        ):
            model = compiled(default, make, spe=spe)
            variants[f"{name}: {label}"] = dataset_fit(model, dataset, rows=rows, epochs=1, with_tfgpu=ours)
        variants[f"{name}: bare in-graph loop"] = bare_loop(make, batch, x, y, epochs=1)
    return {name: r["all"] for name, r in interleaved_rates(variants, rounds=rounds).items()}


def main() -> None:
    sys.path.insert(0, os.path.dirname(__file__))
    from _common import parent_or_child, save, table

    started = parent_or_child(one_process, processes=4, rounds=5)
    if started is None:
        return
    args, runs = started
    names = list(runs[0])
    rows = []
    for name in names:
        every = [r for run in runs for r in run[name]]
        per_process = [statistics.median(run[name]) for run in runs]
        rows.append(
            {
                "run": name,
                "examples_per_s": statistics.median(every),
                "process min": min(per_process),
                "process max": max(per_process),
            }
        )
    goals = []
    for model in MODELS:

        def rate(run: dict[str, list[float]], name: str, model: str = model) -> float:
            if name == "keras":  # both Keras twins at spe=K: the baseline, with its own noise
                return statistics.mean(
                    [rate(run, f"keras fit spe={K}"), rate(run, f"keras fit spe={K} (twin)")]
                )
            return statistics.median(run[f"{model}: {name}"])

        for label, a, b, target in (
            (f"tfgpu.fit / keras fit (mean of 2 twins), all spe={K}", f"tfgpu.fit spe={K}", "keras", 1.0),
            (
                f"keras twin / keras, both spe={K} (the noise)",
                f"keras fit spe={K} (twin)",
                f"keras fit spe={K}",
                1.0,
            ),
            ("tfgpu.fit / keras fit at its default spe=1", f"tfgpu.fit spe={K}", "keras fit spe=1", 1.5),
            ("tfgpu.fit / bare in-graph loop", f"tfgpu.fit spe={K}", "bare in-graph loop", 0.9),
        ):
            per = [rate(run, a) / rate(run, b) for run in runs]
            median = statistics.median(per)
            goals.append(
                {
                    "goal": f"{model}: {label} >= {target}",
                    "median": median,
                    "per process": " ".join(f"{p:.2f}" for p in per),
                    "met": "yes" if median >= target else "NO",
                }
            )
    print(
        table(
            f"tfgpu.fit vs Keras fit on one tf.data dataset, examples/s (median of {args.processes} processes "
            f"x {args.rounds} rounds{', each on one core' if args.pin else ''}; spread of the per-process medians)",
            rows,
            ["run", "examples_per_s", "process min", "process max"],
        )
    )
    print()
    print(
        table(
            "Goals (ratios: median of the per-process ratios)",
            goals,
            ["goal", "median", "per process", "met"],
        )
    )
    print(f"\nwrote {save('fit_bench', {'runs': rows, 'goals': goals, 'raw': runs})}")


if __name__ == "__main__":
    main()

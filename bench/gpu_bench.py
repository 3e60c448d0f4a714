"""GPU training benchmark (issue 16): Keras ``fit`` vs tfgpu.Trainer vs the bare in-graph loop, with
the GPU's busy share (NVML utilization sampled every 20 ms while each run trains).

- CNN: 6 conv layers 64-64-128-128-256-256 on 64x64x3, batch 256 (8,192 examples in memory);
- MLP 256-2048-2048-10, batch 1024 (65,536 examples), at steps_per_execution 1 and 8 for Keras
  and tfgpu alike;
- issue 23's pair on both models: Keras's ``model.fit(dataset)`` and ``tfgpu.fit(model, dataset)``
  on twin compiled models, one ``tf.data`` dataset, both at steps_per_execution 50.

Runs on the first GPU (memory growth on). Without a GPU it runs on the CPU, where ``--small``
shrinks everything to check that it works; the busy column is then empty.

Run: .venv/bin/python bench/gpu_bench.py [--repeats 5] [--small]
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tfgpu

tfgpu.configure(memory_growth=True)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _common import interleaved_rates, save, table  # noqa: E402
from _loops import bare_loop, compiled, dataset_fit, keras_fit, tfgpu_fit  # noqa: E402

from tfgpu.monitor import Monitor  # noqa: E402

EPOCHS = 3


def cnn(size: int, width: int) -> Callable[[], Any]:
    def build() -> keras.Model:
        layers = [keras.Input((size, size, 3))]
        for i, filters in enumerate((width, width, 2 * width, 2 * width, 4 * width, 4 * width)):
            layers.append(keras.layers.Conv2D(filters, 3, padding="same", activation="relu"))
            if i % 2:
                layers.append(keras.layers.MaxPooling2D())
        layers += [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]
        return keras.Sequential(layers)

    return build


def mlp(inputs: int, width: int) -> Callable[[], Any]:
    def build() -> keras.Model:
        return keras.Sequential(
            [
                keras.Input((inputs,)),
                keras.layers.Dense(width, activation="relu"),
                keras.layers.Dense(width, activation="relu"),
                keras.layers.Dense(10),
            ]
        )

    return build


def bench_models(*, small: bool) -> dict[str, tuple[Callable[[], Any], int, tuple[np.ndarray, np.ndarray]]]:
    """The GPU benches' two models, (build, batch, (x, y)) each: the CNN 64x64x3 at batch 256 on
    8,192 rows and the MLP 256-2048-2048-10 at batch 1024 on 65,536; ``small``: tiny sizes."""
    return {
        "cnn": (
            cnn(16 if small else 64, 8 if small else 64),
            32 if small else 256,
            arrays(256 if small else 8192, (16, 16, 3) if small else (64, 64, 3)),
        ),
        "mlp": (
            mlp(256, 64 if small else 2048),
            64 if small else 1024,
            arrays(1024 if small else 65536, (256,)),
        ),
    }


def arrays(rows: int, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, *shape)).astype("float32")
    return x, rng.integers(0, 10, rows).astype("int64")


def with_busy(run: Callable[[], int], busy: list[float]) -> Callable[[], int]:
    """The run, with the GPU's mean NVML utilization while it ran appended to ``busy``."""

    def measured() -> int:
        monitor = Monitor(interval_s=0.02)
        monitor.start()
        try:
            return run()
        finally:
            monitor.stop()
            mean = monitor.mean_utilization()
            if mean is not None:
                busy.append(mean)

    return measured


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--small", action="store_true", help="tiny sizes, to check the script on a CPU")
    args = parser.parse_args()
    gpus = tf.config.list_logical_devices("GPU")
    device = gpus[0].name if gpus else "/cpu:0"
    one = tf.distribute.OneDeviceStrategy(device)
    small = args.small
    models = bench_models(small=small)
    variants: dict[str, Callable[[], int]] = {}
    for name, (build, batch, (x, y)) in models.items():
        common = (one, build, batch, x, y)
        variants[f"{name}: keras fit"] = keras_fit(*common, epochs=EPOCHS)
        variants[f"{name}: tfgpu"] = tfgpu_fit(*common, epochs=EPOCHS)
        variants[f"{name}: bare in-graph loop"] = bare_loop(*common[1:], epochs=EPOCHS)
        if name == "mlp":
            variants[f"{name} spe=8: keras fit"] = keras_fit(*common, epochs=EPOCHS, spe=8)
            variants[f"{name} spe=8: tfgpu"] = tfgpu_fit(*common, epochs=EPOCHS, spe=8)
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).prefetch(tf.data.AUTOTUNE)
        for label, ours in (("keras fit", False), ("tfgpu.fit", True)):
            variants[f"{name} tf.data spe=50: {label}"] = dataset_fit(
                compiled(one, build, spe=50), dataset, rows=len(x), epochs=EPOCHS, with_tfgpu=ours
            )
    busy: dict[str, list[float]] = {name: [] for name in variants}
    rates = interleaved_rates(
        {name: with_busy(run, busy[name]) for name, run in variants.items()}, rounds=args.repeats
    )
    rows = []
    for name, r in rates.items():
        share = statistics.median(busy[name][1:]) if len(busy[name]) > 1 else None  # the warm-up left out
        rows.append(
            {
                "run": name,
                "examples_per_s": r["median"],
                "min": r["min"],
                "max": r["max"],
                "gpu_busy_%": share,
            }
        )
    med = {name: r["median"] for name, r in rates.items()}
    busy_of = {row["run"]: row["gpu_busy_%"] for row in rows}
    goals = [
        ("cnn: tfgpu / keras fit >= 1.15", med["cnn: tfgpu"] / med["cnn: keras fit"], 1.15),
        ("cnn: tfgpu / bare in-graph loop >= 0.97", med["cnn: tfgpu"] / med["cnn: bare in-graph loop"], 0.97),
        ("mlp: tfgpu / keras fit >= 1.0 (spe 1)", med["mlp: tfgpu"] / med["mlp: keras fit"], 1.0),
        ("mlp spe=8: tfgpu / keras fit >= 1.0", med["mlp spe=8: tfgpu"] / med["mlp spe=8: keras fit"], 1.0),
        *(
            (
                f"{m} tf.data spe=50: tfgpu.fit / keras fit >= 1.0",
                med[f"{m} tf.data spe=50: tfgpu.fit"] / med[f"{m} tf.data spe=50: keras fit"],
                1.0,
            )
            for m in ("cnn", "mlp")
        ),
    ]
    if busy_of["cnn: tfgpu"] is not None:
        goals.append(("cnn: tfgpu GPU busy % >= 88", busy_of["cnn: tfgpu"], 88.0))
    title = f"Training on {device} ({'small sizes' if small else 'CNN 64x64x3 batch 256, MLP 256-2048-2048-10 batch 1024'}); examples/s, median of {args.repeats}"
    print(table(title, rows, ["run", "examples_per_s", "min", "max", "gpu_busy_%"]))
    print()
    goal_rows = [
        {"goal": g, "measured": m, "target": t, "met": "yes" if m >= t else "NO"} for g, m, t in goals
    ]
    print(table("Goals", goal_rows, ["goal", "measured", "target", "met"]))
    print(
        f"\nwrote {save('gpu_bench', {'device': device, 'small': small, 'runs': rows, 'goals': goal_rows})}"
    )


if __name__ == "__main__":
    main()

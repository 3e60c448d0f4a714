"""Training benchmark (issues 5 and 16): tfgpu.Trainer vs Keras ``fit`` vs the leanest loop.

Three models, data given the natural way, from arrays in memory:

- MLP 512 wide (batch 256), on one device and under MirroredStrategy on 2 logical CPU devices;
- a tiny MLP (16 wide, batch 32), where per-step host overhead dominates;
- a small conv model (32x32x3, conv 16-32, batch 64).

Per model: Keras ``model.fit(x, y)``, ``tfgpu.Trainer`` with ``train_data=(x, y)`` and the bare
in-graph loop (see _loops). Examples/s, median of interleaved rounds (see
_common.interleaved_rates); each run trains EPOCHS epochs from the start.

Run: make bench-train   (or .venv/bin/python bench/train_bench.py [--repeats 5])
"""

from __future__ import annotations

import argparse
import os
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tfgpu

tfgpu.configure(logical_cpus=2)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _common import interleaved_rates, save, table  # noqa: E402
from _loops import bare_loop, keras_fit, tfgpu_fit  # noqa: E402

rng = np.random.default_rng(0)
EPOCHS = 3


def data(rows: int, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    x = rng.normal(size=(rows, *shape)).astype("float32")
    return x, (x.reshape(rows, -1)[:, :8].sum(1) > 0).astype("int64")


MODELS = {
    # name: (builder, batch, arrays)
    "mlp512": (lambda: mlp(512), 256, data(16_384, (64,))),
    "tiny": (lambda: mlp(16), 32, data(16_384, (64,))),
    "conv": (lambda: conv(), 64, data(4_096, (32, 32, 3))),
}


def mlp(width: int) -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(2),
        ]
    )


def conv() -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((32, 32, 3)),
            keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(2),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    two = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )

    def model(name: str) -> tuple[Any, ...]:
        build, batch, (x, y) = MODELS[name]
        return build, batch, x, y

    variants = {}
    for name in MODELS:
        variants[f"{name}: keras fit"] = keras_fit(one, *model(name), epochs=EPOCHS)
        variants[f"{name}: tfgpu"] = tfgpu_fit(one, *model(name), epochs=EPOCHS)
        variants[f"{name}: bare in-graph loop"] = bare_loop(*model(name), epochs=EPOCHS)
    variants["mlp512 mirrored x2: keras fit"] = keras_fit(two, *model("mlp512"), epochs=EPOCHS)
    variants["mlp512 mirrored x2: tfgpu"] = tfgpu_fit(two, *model("mlp512"), epochs=EPOCHS)
    variants["tiny spe=8: keras fit"] = keras_fit(one, *model("tiny"), epochs=EPOCHS, spe=8)
    variants["tiny spe=8: tfgpu"] = tfgpu_fit(one, *model("tiny"), epochs=EPOCHS, spe=8)
    rates = interleaved_rates(variants, rounds=args.repeats)
    rows = [
        {"run": name, "examples_per_s": r["median"], "min": r["min"], "max": r["max"]}
        for name, r in rates.items()
    ]
    med = {name: r["median"] for name, r in rates.items()}
    goals = []
    for name in MODELS:
        goals.append(
            (
                f"{name}: tfgpu / bare loop >= 0.97",
                med[f"{name}: tfgpu"] / med[f"{name}: bare in-graph loop"],
                0.97,
            )
        )
        goals.append(
            (f"{name}: tfgpu / keras fit >= 1.0", med[f"{name}: tfgpu"] / med[f"{name}: keras fit"], 1.0)
        )
    goals.append(
        (
            "mlp512 mirrored x2: tfgpu / keras fit >= 1.0",
            med["mlp512 mirrored x2: tfgpu"] / med["mlp512 mirrored x2: keras fit"],
            1.0,
        )
    )
    goals.append(
        (
            "tiny, both at spe=8: tfgpu / keras >= 1.0",
            med["tiny spe=8: tfgpu"] / med["tiny spe=8: keras fit"],
            1.0,
        )
    )
    print(
        table(
            "Training from arrays in memory (MLP 512 batch 256 and tiny MLP batch 32 on 16,384 x 64; "
            f"conv 16-32 batch 64 on 4,096 x 32x32x3); examples/s, median of {args.repeats}",
            rows,
            ["run", "examples_per_s", "min", "max"],
        )
    )
    print()
    goal_rows = [
        {"goal": g, "measured": m, "target": t, "met": "yes" if m >= t else "NO"} for g, m, t in goals
    ]
    print(table("Goals", goal_rows, ["goal", "measured", "target", "met"]))
    print(f"\nwrote {save('train_bench', {'runs': rows, 'goals': goal_rows})}")


if __name__ == "__main__":
    main()

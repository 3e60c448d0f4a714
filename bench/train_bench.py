"""Training benchmark (issue 5): tfgpu.Trainer vs Keras model.fit, examples/s, median of 5.

- the same MLP and data on one device, and under MirroredStrategy on 2 logical CPU devices;
- a tiny model where per-step overhead dominates: steps_per_execution 1 vs 8.
Variants run in interleaved rounds (see _common.interleaved_rates).

Run: make bench-train   (or .venv/bin/python bench/train_bench.py [--repeats 5])
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tfgpu

tfgpu.configure(logical_cpus=2)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _common import interleaved_rates, save, table  # noqa: E402

ROWS = 16_384
rng = np.random.default_rng(0)
X = rng.normal(size=(ROWS, 64)).astype("float32")
Y = (X[:, :8].sum(1) > 0).astype("int64")


def mlp(width: int) -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(2),
        ]
    )


def keras_fit(strategy: tf.distribute.Strategy, *, width: int, batch: int, spe: int = 1):
    with strategy.scope():
        model = mlp(width)
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            steps_per_execution=spe,
            jit_compile=False,
        )
    dataset = (
        tf.data.Dataset.from_tensor_slices((X, Y))
        .batch(batch, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )

    def run() -> int:
        model.fit(dataset, epochs=1, verbose=0)
        return (ROWS // batch) * batch

    return run


def tfgpu_fit(strategy: tf.distribute.Strategy, *, width: int, batch: int, spe: int = 1):
    def data(ctx, per_replica):
        ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(
            per_replica * ctx.num_replicas_in_sync, drop_remainder=True
        )
        return ds.unbatch().batch(per_replica).prefetch(tf.data.AUTOTUNE)

    replicas = strategy.num_replicas_in_sync
    task = tfgpu.Task(
        model=lambda: mlp(width),
        loss="sparse_categorical_crossentropy",
        from_logits=True,
        train_data=data,
        batch_size=batch // replicas,
        learning_rate=1e-3,
    )
    trainer = tfgpu.Trainer(task, strategy=strategy, steps_per_execution=spe, monitor_gpus=False)

    def run() -> int:
        trainer.reset_epochs()
        result = trainer.fit(epochs=1)
        return result.history[-1]["steps"] * batch

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    two = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    rates = interleaved_rates(
        {
            "keras 1 device": keras_fit(one, width=512, batch=256),
            "tfgpu 1 device": tfgpu_fit(one, width=512, batch=256),
            "keras mirrored x2": keras_fit(two, width=512, batch=256),
            "tfgpu mirrored x2": tfgpu_fit(two, width=512, batch=256),
            "tfgpu tiny spe=1": tfgpu_fit(one, width=16, batch=32, spe=1),
            "tfgpu tiny spe=8": tfgpu_fit(one, width=16, batch=32, spe=8),
            "keras tiny spe=1": keras_fit(one, width=16, batch=32, spe=1),
            "keras tiny spe=8": keras_fit(one, width=16, batch=32, spe=8),
        },
        rounds=args.repeats,
    )
    rows = [
        {"run": name, "examples_per_s": r["median"], "min": r["min"], "max": r["max"]}
        for name, r in rates.items()
    ]
    med = {name: r["median"] for name, r in rates.items()}
    goals = [
        ("tfgpu / keras fit, 1 device >= 1.0", med["tfgpu 1 device"] / med["keras 1 device"], 1.0),
        ("tfgpu / keras fit, mirrored x2 >= 1.0", med["tfgpu mirrored x2"] / med["keras mirrored x2"], 1.0),
        ("tiny model: spe=8 / spe=1 >= 1.3", med["tfgpu tiny spe=8"] / med["tfgpu tiny spe=1"], 1.3),
    ]
    print(
        table(
            f"Training, {ROWS} rows x 64 features, MLP 512 wide (batch 256) and 16 wide (batch 32); examples/s, median of {args.repeats}",
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

"""Training benchmark (issues 5 and 16): tfgpu.Trainer vs Keras ``fit`` vs the leanest loop.

Three models, data given the natural way, from arrays in memory:

- MLP 512 wide (batch 256), on one device and under MirroredStrategy on 2 logical CPU devices;
- a tiny MLP (16 wide, batch 32), where per-step host overhead dominates;
- a small conv model (32x32x3, conv 16-32, batch 64).

Per model: Keras ``model.fit(x, y)``; ``tfgpu.Trainer`` with ``train_data=(x, y)``; and the bare
in-graph loop a TensorFlow expert writes (``from_tensor_slices(...).batch().prefetch()`` built once,
the next batch taken inside one ``tf.function`` over ``tf.range``, the loss read once per epoch).
Examples/s, median of interleaved rounds (see _common.interleaved_rates); each run trains EPOCHS
epochs from the start, as a user's ``fit(epochs=N)`` does (the bare loop takes a new iterator per
epoch, as its author would).

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


def keras_fit(strategy: tf.distribute.Strategy, name: str, *, spe: int = 1):
    build, batch, (x, y) = MODELS[name]
    with strategy.scope():
        model = build()
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            steps_per_execution=spe,
            jit_compile=False,
        )

    def run() -> int:
        model.fit(x, y, batch_size=batch, epochs=EPOCHS, verbose=0)
        return EPOCHS * len(x)

    return run


def tfgpu_fit(strategy: tf.distribute.Strategy, name: str, *, spe: int | None = None):
    build, batch, (x, y) = MODELS[name]
    task = tfgpu.Task(
        model=build,
        loss="sparse_categorical_crossentropy",
        from_logits=True,
        train_data=(x, y),
        batch_size=batch // strategy.num_replicas_in_sync,
        learning_rate=1e-3,
    )
    trainer = tfgpu.Trainer(task, strategy=strategy, steps_per_execution=spe, monitor_gpus=False)

    def run() -> int:
        trainer.reset_epochs()
        result = trainer.fit(epochs=EPOCHS)
        return sum(h["steps"] for h in result.history) * batch

    return run


def bare_loop(name: str):
    """The leanest loop: next batch inside the tf.function, the loss read once per epoch."""
    build, batch, (x, y) = MODELS[name]
    model = build()
    optimizer = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .batch(batch, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )
    steps = len(x) // batch

    @tf.function
    def epoch(iterator):
        total = tf.constant(0.0)
        for _ in tf.range(steps):
            xb, yb = next(iterator)
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, model(xb, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            total += loss
        return total

    def run() -> int:
        for _ in range(EPOCHS):
            float(epoch(iter(dataset)))
        return EPOCHS * steps * batch

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    two = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    variants = {}
    for name in MODELS:
        variants[f"{name}: keras fit"] = keras_fit(one, name)
        variants[f"{name}: tfgpu"] = tfgpu_fit(one, name)
        variants[f"{name}: bare in-graph loop"] = bare_loop(name)
    variants["mlp512 mirrored x2: keras fit"] = keras_fit(two, "mlp512")
    variants["mlp512 mirrored x2: tfgpu"] = tfgpu_fit(two, "mlp512")
    variants["tiny spe=8: keras fit"] = keras_fit(one, "tiny", spe=8)
    variants["tiny spe=8: tfgpu"] = tfgpu_fit(one, "tiny", spe=8)
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

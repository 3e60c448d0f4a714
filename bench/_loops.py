"""The training loops the benchmarks compare, on arrays in memory (the natural way to give data).

Each builder returns ``run() -> examples trained``, for ``_common.interleaved_rates``:

- ``keras_fit``: ``model.fit(x, y)`` at a given ``steps_per_execution``;
- ``tfgpu_fit``: ``tfgpu.Trainer`` with ``train_data=(x, y)``;
- ``dataset_fit``: Keras's ``model.fit(dataset)`` or ``tfgpu.fit(model, dataset)`` on a compiled
  model (``compiled``) and one ``tf.data`` dataset (issue 23: the fair pair, the same input);
- ``bare_loop``: the leanest loop a TensorFlow expert writes: ``from_tensor_slices(...).batch()
  .prefetch()`` built once, the next batch taken inside one ``tf.function`` over ``tf.range``,
  the loss read once per epoch (a new iterator per epoch).

Each run trains ``epochs`` epochs from the start, as a user's ``fit(epochs=N)`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

import tfgpu


def keras_fit(
    strategy: Any,
    build: Callable[[], Any],
    batch: int,
    x: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int,
    spe: int = 1,
):
    with strategy.scope():
        model = build()
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            steps_per_execution=spe,
            jit_compile=False,
        )

    def run() -> int:
        model.fit(x, y, batch_size=batch, epochs=epochs, verbose=0)
        return epochs * len(x)

    return run


def tfgpu_fit(
    strategy: Any,
    build: Callable[[], Any],
    batch: int,
    x: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int,
    spe: int | None = None,
):
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
        result = trainer.fit(epochs=epochs)
        return sum(h["steps"] for h in result.history) * batch

    return run


def compiled(strategy: Any, build: Callable[[], Any], *, spe: int = 1) -> Any:
    """``build()`` compiled as the benchmarks compare it, in ``strategy``'s scope."""
    keras.utils.set_random_seed(0)  # twins: the same initial weights
    with strategy.scope():
        model = build()
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            steps_per_execution=spe,
            jit_compile=False,
        )
    return model


def dataset_fit(model: Any, dataset: Any, *, rows: int, epochs: int, with_tfgpu: bool) -> Callable[[], int]:
    """``run() -> examples``: ``epochs`` epochs of ``model.fit(dataset)`` or ``tfgpu.fit(model, dataset)``."""

    def run() -> int:
        if with_tfgpu:
            tfgpu.fit(model, dataset, epochs=epochs, verbose=0)
        else:
            model.fit(dataset, epochs=epochs, verbose=0)
        return epochs * rows

    return run


def bare_loop(
    build: Callable[[], Any], batch: int, x: np.ndarray, y: np.ndarray, *, epochs: int, metrics: bool = False
):
    """The leanest loop: next batch inside the tf.function, the loss read once per epoch.

    No strategy: the model lives on TensorFlow's default device (the first GPU, or the CPU).
    ``metrics``: each step also updates what Keras's ``train_step`` updates for
    ``compile(metrics=["accuracy"])`` (the loss's running mean and the accuracy), the part of
    tfgpu's step that is Keras's contract rather than tfgpu's (``ablation_bench.py``'s row).
    """
    model = build()
    optimizer = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    tracked = [keras.metrics.Mean(), keras.metrics.SparseCategoricalAccuracy()] if metrics else []
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .batch(batch, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )
    steps = len(x) // batch

    @tf.function
    def epoch(iterator: Any) -> Any:
        total = tf.constant(0.0)
        for _ in tf.range(steps):
            xb, yb = next(iterator)
            with tf.GradientTape() as tape:
                logits = model(xb, training=True)
                loss = loss_fn(yb, logits)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            if tracked:
                tracked[0].update_state(loss, sample_weight=tf.shape(yb)[0])
                tracked[1].update_state(yb, logits)
            total += loss
        return total

    def run() -> int:
        for _ in range(epochs):
            float(epoch(iter(dataset)))
        return epochs * steps * batch

    return run

"""Task: what to train. Builders are called inside the strategy scope, data functions per worker."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfgpu.errors import ConfigError

# fn(input_context, per_replica_batch) -> tf.data.Dataset of (x, y) or (x, y, sample_weight),
# batched by the per-replica batch (built once, iterated each epoch; add an ``epoch`` keyword to be
# called each epoch); a tfgpu dataset directory (its manifest has the label); or arrays in memory,
# (x, y) or (x, y, sample_weight), x an array or a dict of arrays (see tfgpu.train.inputs).
DataSource = Callable[..., Any] | str | os.PathLike | tuple


@dataclass
class Task:
    """What to train.

    Args:
        model: builds the Keras model (called inside the strategy scope).
        loss: "sparse_categorical_crossentropy", "categorical_crossentropy", "binary_crossentropy",
            "mse", "mae", or fn(y_true, y_pred) -> per-example losses.
        train_data / eval_data: a DataSource (see above).
        optimizer: "adam", "sgd", "adamw", "rmsprop" (with ``learning_rate``) or a builder.
        metrics: "accuracy", "mse", "mae", or fn(y_true, y_pred) -> per-example values; evaluated
            exactly (sums over every example, whatever the replicas and workers).
        batch_size: per replica; the global batch is this times the replicas.
        steps_per_epoch: needed only when the data size cannot be known (ParameterServerStrategy).
        pipeline: options for tfgpu.data.pipeline when the data is a dataset directory;
            ``{"shuffle": False}`` keeps the order of arrays given in memory.
    """

    model: Callable[[], Any]
    loss: str | Callable[[Any, Any], Any]
    train_data: DataSource
    eval_data: DataSource | None = None
    optimizer: str | Callable[[], Any] = "adam"
    learning_rate: float = 1e-3
    metrics: Sequence[str | Callable[[Any, Any], Any]] = ()
    batch_size: int = 32
    from_logits: bool = False
    steps_per_epoch: int | None = None
    seed: int = 0
    pipeline: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(
                "Task.batch_size (per replica) must be at least 1",
                value=self.batch_size,
                fix="pass batch_size=32",
            )
        if not callable(self.model):
            raise ConfigError(
                "Task.model must be a function that builds the model",
                value=self.model,
                fix="pass model=lambda: keras.Sequential([...]) so it is built inside the strategy scope",
            )
        if isinstance(self.loss, str) and self.loss not in LOSSES:
            raise ConfigError(
                "Unknown loss", value=self.loss, fix=f"use one of {', '.join(LOSSES)} or a function"
            )
        for metric in self.metrics:
            if isinstance(metric, str) and metric not in METRICS:
                raise ConfigError(
                    "Unknown metric", value=metric, fix=f"use one of {', '.join(METRICS)} or a function"
                )


LOSSES = ("sparse_categorical_crossentropy", "categorical_crossentropy", "binary_crossentropy", "mse", "mae")
METRICS = ("accuracy", "mse", "mae")
OPTIMIZERS = {"adam": "Adam", "sgd": "SGD", "adamw": "AdamW", "rmsprop": "RMSprop"}


def per_example_loss(task: Task) -> Callable[[Any, Any], Any]:
    """fn(y_true, y_pred) -> one float32 loss per example."""
    import keras
    import tensorflow as tf

    def reduce(values: Any) -> Any:
        values = tf.cast(values, tf.float32)
        if values.shape.rank == 1:  # one value per example already (most losses): no ops to add
            return values
        return tf.reduce_mean(tf.reshape(values, [tf.shape(values)[0], -1]), axis=-1)

    name = task.loss
    if callable(name):
        return lambda y, p: reduce(name(y, p))
    if name == "sparse_categorical_crossentropy":
        return lambda y, p: reduce(
            keras.losses.sparse_categorical_crossentropy(
                y, tf.cast(p, tf.float32), from_logits=task.from_logits
            )
        )
    if name == "categorical_crossentropy":
        return lambda y, p: reduce(
            keras.losses.categorical_crossentropy(y, tf.cast(p, tf.float32), from_logits=task.from_logits)
        )
    if name == "binary_crossentropy":
        return lambda y, p: reduce(
            keras.losses.binary_crossentropy(
                tf.cast(y, tf.float32), tf.cast(p, tf.float32), from_logits=task.from_logits
            )
        )
    if name == "mse":
        return lambda y, p: reduce(
            tf.square(tf.cast(p, tf.float32) - tf.cast(tf.reshape(y, tf.shape(p)), tf.float32))
        )
    return lambda y, p: reduce(
        tf.abs(tf.cast(p, tf.float32) - tf.cast(tf.reshape(y, tf.shape(p)), tf.float32))
    )


def metric_functions(task: Task) -> dict[str, Callable[[Any, Any], Any]]:
    """name -> fn(y_true, y_pred) giving one value per example (summed, then divided by the count)."""
    import tensorflow as tf

    def accuracy(y: Any, p: Any) -> Any:
        if p.shape[-1] == 1:  # binary: threshold at 0.5 (or 0 for logits)
            cut = 0.0 if task.from_logits else 0.5
            return tf.cast(
                tf.equal(
                    tf.cast(tf.reshape(p, [-1]) > cut, tf.int64), tf.cast(tf.reshape(y, [-1]), tf.int64)
                ),
                tf.float32,
            )
        return tf.cast(tf.equal(tf.argmax(p, axis=-1), tf.cast(tf.reshape(y, [-1]), tf.int64)), tf.float32)

    def mse(y: Any, p: Any) -> Any:
        diff = tf.cast(p, tf.float32) - tf.cast(tf.reshape(y, tf.shape(p)), tf.float32)
        return tf.reduce_mean(tf.reshape(tf.square(diff), [tf.shape(diff)[0], -1]), axis=-1)

    def mae(y: Any, p: Any) -> Any:
        diff = tf.cast(p, tf.float32) - tf.cast(tf.reshape(y, tf.shape(p)), tf.float32)
        return tf.reduce_mean(tf.reshape(tf.abs(diff), [tf.shape(diff)[0], -1]), axis=-1)

    known = {"accuracy": accuracy, "mse": mse, "mae": mae}
    out = {}
    for metric in task.metrics:
        if isinstance(metric, str):
            out[metric] = known[metric]
        else:
            out[getattr(metric, "__name__", "metric")] = metric
    return out


def make_optimizer(task: Task) -> Any:
    import keras

    if callable(task.optimizer):
        return task.optimizer()
    name = OPTIMIZERS.get(str(task.optimizer).lower())
    if name is None:
        raise ConfigError(
            "Unknown optimizer",
            value=task.optimizer,
            fix=f"use one of {', '.join(OPTIMIZERS)} or a builder function",
        )
    return getattr(keras.optimizers, name)(learning_rate=task.learning_rate)

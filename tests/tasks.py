"""Tasks for the training tests; the CLI loads them as tests/tasks.py:FUNCTION."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

import tfgpu

ROWS = 1001
GLOBAL = 24


def arrays(rows: int = ROWS) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 8)).astype("float32")
    y = (x[:, :4].sum(1) > 0).astype("int64") + (x[:, 4:].sum(1) > 0).astype("int64")
    return x, y


def model() -> Any:
    import keras

    init = keras.initializers.GlorotUniform(seed=1)
    return keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu", kernel_initializer=init),
            keras.layers.Dense(3, kernel_initializer=keras.initializers.GlorotUniform(seed=2)),
        ]
    )


def global_batches(ctx: Any, per_replica: int, *, rows: int = ROWS, slow_s: float = 0.0) -> Any:
    """Each worker takes its slice of the same unshuffled global batches (drop the remainder)."""
    import tensorflow as tf

    x, y = arrays(rows)
    global_batch = per_replica * ctx.num_replicas_in_sync
    local = global_batch // ctx.num_input_pipelines
    first = ctx.input_pipeline_id * local
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch, drop_remainder=True)
    ds = ds.map(lambda a, b: (a[first : first + local], b[first : first + local]))
    if slow_s:
        ds = ds.map(
            lambda a, b: (
                tf.numpy_function(lambda v: (__import__("time").sleep(slow_s), v)[1], [a], tf.float32),
                b,
            )
        )
        ds = ds.map(lambda a, b: (tf.ensure_shape(a, [local, 8]), b))
    return ds.unbatch().batch(per_replica)


def sharded_rows(ctx: Any, per_replica: int) -> Any:
    """Evaluation data: each worker its rows, every row once, the last batch partial."""
    import tensorflow as tf

    x, y = arrays()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
    return ds.batch(per_replica)


def make_task(per_replica: int = GLOBAL, **extra: Any) -> tfgpu.Task:
    return tfgpu.Task(
        model=model,
        loss="sparse_categorical_crossentropy",
        from_logits=True,
        train_data=global_batches,
        eval_data=sharded_rows,
        metrics=["accuracy"],
        batch_size=per_replica,
        optimizer="adam",
        learning_rate=0.01,
        **extra,
    )


def slow_task() -> tfgpu.Task:
    """For the kill-and-resume test: 25 ms per batch, so the run can be killed midway."""
    return tfgpu.Task(
        model=model,
        loss="sparse_categorical_crossentropy",
        from_logits=True,
        train_data=lambda ctx, b: global_batches(ctx, b, slow_s=float(os.environ.get("SLOW_S", "0.025"))),
        batch_size=GLOBAL,
        optimizer="adam",
        learning_rate=0.01,
    )


def not_a_task() -> int:
    return 3


# -- bad input for tfgpu train (each is one message and exit 2) ----------------------------------
def _binary(compiled: bool = True) -> Any:
    import keras

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1, activation="sigmoid")])
    if compiled:
        model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    return model


def _binary_arrays() -> tuple[np.ndarray, np.ndarray]:
    x, y = arrays()
    return x, (y > 0).astype("float32")


def uncompiled_model() -> tfgpu.Task:
    return tfgpu.Task(model=lambda: _binary(compiled=False), train_data=_binary_arrays())


def unknown_loss() -> tfgpu.Task:
    return tfgpu.Task(model=lambda: _binary(compiled=False), loss="hinge-ish", train_data=_binary_arrays())


def labels_that_cannot_fit() -> tfgpu.Task:
    x, _ = arrays()
    return tfgpu.Task(model=_binary, train_data=(x, np.zeros((len(x), 4, 2), "float32")))


def class_weight_two_outputs() -> tfgpu.Task:
    import keras

    def build() -> Any:
        inputs = keras.Input((8,))
        model = keras.Model(
            inputs,
            {"a": keras.layers.Dense(1, name="a")(inputs), "b": keras.layers.Dense(1, name="b")(inputs)},
        )
        model.compile(optimizer="adam", loss={"a": "mse", "b": "mse"})
        return model

    x, y = arrays()
    return tfgpu.Task(model=build, train_data=(x, {"a": y, "b": y}), class_weight={0: 1.0, 1: 2.0})


def validation_split_with_a_function() -> tfgpu.Task:
    return tfgpu.Task(model=_binary, train_data=global_batches, validation_split=0.2)


def callback_that_raises() -> tfgpu.Task:
    import keras

    class Explodes(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            raise RuntimeError(f"the user's callback failed after epoch {epoch}")

    return tfgpu.Task(model=_binary, train_data=_binary_arrays(), callbacks=[Explodes()])


def data_function_returning_a_list() -> tfgpu.Task:
    return tfgpu.Task(model=_binary, train_data=lambda ctx, per_replica: [1, 2, 3])


def data_function_returning_none() -> tfgpu.Task:
    return tfgpu.Task(model=_binary, train_data=lambda ctx, per_replica: None)

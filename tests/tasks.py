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

"""``tfgpu.predict(model, x)``: Keras's ``model.predict`` contract (arrays in input order) on every replica.

Rows are gathered by index from tensors made once (no copy of ``x``), in global batches; the last
batch is filled up with rows from the start, so every replica always gets a full, equal share
(no empty replica, one traced shape) and the extra rows are cut off at the end. Each replica's
slice of a global batch is contiguous and in replica order, so concatenating the replicas' outputs
keeps the input order. K batches run per compiled call (``ingraph.in_graph_loop``); outputs are
collected on the device and copied to host memory by a background thread while the next call runs.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

from tfgpu import distribute, host
from tfgpu.errors import ConfigError

DEFAULT_BATCH = 32  # Keras's
DEFAULT_STEPS_PER_EXECUTION = 16


def predict_arrays(
    model: Any,
    x: Any,
    *,
    batch_size: int | None = None,
    steps_per_execution: int | None = None,
    strategy: Any = None,
) -> Any:
    """The model's outputs for every row of ``x`` (an array or a dict / tuple of arrays), in order,
    as NumPy arrays in the structure the model returns."""
    import numpy as np
    import tensorflow as tf

    strategy = _strategy(model, strategy)
    replicas = int(strategy.num_replicas_in_sync)
    per_call = steps_per_execution or DEFAULT_STEPS_PER_EXECUTION
    batch = batch_size or DEFAULT_BATCH
    if not isinstance(batch, int) or batch < 1 or not isinstance(per_call, int) or per_call < 1:
        raise ConfigError(
            "batch_size and steps_per_execution must be whole numbers of at least 1",
            value={"batch_size": batch_size, "steps_per_execution": steps_per_execution},
            fix="pass batch_size=256",
        )
    global_batch = -(-batch // replicas) * replicas
    with tf.device("/cpu:0"):
        tensors = tf.nest.map_structure(tf.convert_to_tensor, x)
    rows = _rows(tensors)
    feed = distribute.input_strategy(strategy)
    dataset = _batches(tensors, rows=rows, global_batch=global_batch)
    iterator = iter(dataset if feed is None else feed.experimental_distribute_dataset(dataset))
    call = _compiled(strategy, model, iterator, per_call=per_call, spec=dataset.element_spec)
    parts = []
    with concurrent.futures.ThreadPoolExecutor(1) as copier:
        while True:
            taken, outputs = call()
            if int(taken):  # a host-side counter: reading it does not wait for the device
                parts.append(copier.submit(tf.nest.map_structure, lambda t: t.numpy(), outputs))
            if int(taken) < per_call:
                break
        arrays = [part.result() for part in parts]
    return tf.nest.map_structure(lambda *leaves: np.concatenate(leaves)[:rows], *arrays)


def _strategy(model: Any, strategy: Any) -> Any:
    import tensorflow as tf

    from tfgpu.train import model as model_setup

    chosen = strategy or model_setup.owner(model) or tf.distribute.get_strategy()
    if distribute.spans_workers(chosen):
        raise ConfigError(
            "tfgpu.predict without an output directory runs on this process's replicas only",
            value=type(chosen).__name__,
            fix="on a cluster, save the model and run `tfgpu predict MODEL INPUT OUTPUT` under tfgpu launch "
            "(each worker its part, in order, on disk)",
        )
    if not model_setup.fits_strategy(model, chosen):
        raise ConfigError(
            f"The model was not created in the {type(chosen).__name__}'s scope",
            value=type(chosen).__name__,
            fix="create the model inside `with strategy.scope():`, or leave strategy unset",
        )
    return chosen


def _rows(tensors: Any) -> int:
    import tensorflow as tf

    counts = {int(t.shape[0]) for t in tf.nest.flatten(tensors) if t.shape.rank}
    if len(counts) != 1:
        raise ConfigError(
            "The inputs of x have different numbers of rows",
            value=sorted(counts),
            fix="pass arrays with one row per example each",
        )
    rows = counts.pop()
    if rows == 0:
        raise ConfigError("x has no rows", value=0, fix="pass at least one row")
    return rows


def _batches(tensors: Any, *, rows: int, global_batch: int) -> Any:
    """Global batches of ``tensors`` gathered by index; the last one filled up from the start."""
    import tensorflow as tf

    total = -(-rows // global_batch) * global_batch
    return (
        tf.data.Dataset.range(0, total, global_batch)
        .map(
            lambda start: tf.nest.map_structure(
                lambda t: tf.gather(t, tf.math.floormod(tf.range(start, start + global_batch), rows)),
                tensors,
            ),
            num_parallel_calls=host.cores(),
        )
        .prefetch(tf.data.AUTOTUNE)
    )


def _compiled(strategy: Any, model: Any, iterator: Any, *, per_call: int, spec: Any) -> Any:
    """fn() -> (batches taken, the outputs of up to ``per_call`` batches, on the device)."""
    import keras
    import tensorflow as tf
    from keras.src.backend import compute_output_spec  # what Keras's own symbolic build uses

    from tfgpu.ingraph import growing_array, in_graph_loop, local_rows

    outputs = compute_output_spec(
        model, tf.nest.map_structure(lambda s: keras.KerasTensor(s.shape, s.dtype.name), spec), training=False
    )

    def body(batch: Any, arrays: Any, index: Any) -> Any:
        out = strategy.run(model.predict_step, args=((batch,),))
        return tf.nest.map_structure(lambda a, o: a.write(index, local_rows(strategy, o)), arrays, out)

    limit = tf.constant(per_call, tf.int32)

    @tf.function(autograph=False)
    def call() -> Any:  # the iterator is captured: no per-call argument matching
        out = in_graph_loop(
            iterator,
            limit,
            body,
            tf.nest.map_structure(lambda leaf: growing_array(leaf.dtype, leaf.shape), outputs),
        )
        return out["steps"], tf.nest.map_structure(lambda a: a.concat(), out["state"])

    return call

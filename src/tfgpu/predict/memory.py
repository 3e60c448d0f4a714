"""``tfgpu.predict(model, x)``: Keras's ``model.predict`` contract (arrays in input order) on every replica.

``x`` goes through the door every verb takes (``train.inputs.adapters.of``): every form
``model.predict`` takes, read as its adapter says (``Adapter.for_prediction``). Arrays are
gathered by index from tensors made once (no copy of ``x``), in global batches; the last batch is
filled up with rows from the start, so every replica always gets a full, equal share (no empty
replica, one traced shape) and the extra rows are cut off at the end. Each replica's slice of a
global batch is contiguous and in replica order, so concatenating the replicas' outputs keeps the
input order. K batches run per compiled call (``train.step.execution.in_graph_loop``); outputs are
collected on the device and copied to host memory by a background thread while the next call runs.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

from tfgpu import distribute, letting_go
from tfgpu.errors import ConfigError

DEFAULT_BATCH = 32  # Keras's
DEFAULT_STEPS_PER_EXECUTION = 16


def predict_arrays(
    model: Any,
    x: Any,
    *,
    batch_size: int | None = None,
    verbose: Any = "auto",
    steps: int | None = None,
    callbacks: Any = None,
    steps_per_execution: int | None = None,
    strategy: Any = None,
    devices_per_replica: int | None = None,
    micro_batches: int | None = None,
) -> Any:
    """The model's outputs for every row of ``x`` (an array, a dict / list / tuple of arrays, or a
    ``tf.data.Dataset`` of global batches), in order, as NumPy arrays in the structure the model
    returns; up to ``steps`` batches. Keras's predict callbacks and progress bar are called once
    per compiled call of K batches, as ``Model.predict`` calls them at ``steps_per_execution=K``.
    ``devices_per_replica`` / ``micro_batches``: the model split over K devices per replica, as
    ``tfgpu.fit`` splits it."""
    import numpy as np
    import tensorflow as tf

    from tfgpu.train.inputs import adapters
    from tfgpu.train.inputs.readers import bounded
    from tfgpu.train.model import user_model as model_setup
    from tfgpu.train.pieces.options import Placement

    if model_setup.override(model, "predict"):  # the user's own predict: its result, as theirs
        return model_setup.called(
            model, "predict", x, batch_size=batch_size, verbose=verbose, steps=steps, callbacks=callbacks
        )

    asked = Placement(devices_per_replica=devices_per_replica, micro_batches=micro_batches)
    data = adapters.of(x, role="x", labels=False)  # the door: what the data is, decided once
    strategy, model = _strategy(model, strategy, asked, global_batch=batch_size or DEFAULT_BATCH)
    replicas = len(distribute.replica_devices(strategy)[0])  # this process's: each worker predicts all
    per_call = steps_per_execution or _per_call(callbacks)
    _check_sizes(batch_size, per_call, steps)
    data.check_steps(steps, argument="steps")
    reading = data.for_prediction(batch_size=batch_size, replicas=replicas).limited(steps)
    if reading.global_batch is None:
        _check_dataset_on_workers(strategy, replicas)
    dataset = bounded(reading.dataset)
    per_replica = None if reading.global_batch is None else reading.global_batch // replicas
    call = _compiled(strategy, model, per_call=per_call, spec=dataset.element_spec, arrays=not reading.packed)
    total = reading.batches()  # where known
    listed = _callbacks(callbacks, model=model, verbose=verbose, steps=total)
    listed.on_predict_begin()
    with reading.epoch():  # a PyDataset's hooks around its pass, as Keras's predict calls them
        held = [_iterator(strategy, dataset, per_replica=per_replica)]  # dropped off this thread
        arrays = _outputs(call, held[0], listed, total=total, per_call=per_call)
        letting_go.let_go(held)  # (tfgpu.letting_go)
    listed.on_predict_end()
    if not arrays:
        raise ConfigError("x gave no batch to predict on", value=type(x).__name__, fix="pass data with rows")
    return tf.nest.map_structure(lambda *leaves: np.concatenate(leaves)[: reading.rows], *arrays)


def _outputs(call: Any, iterator: Any, listed: Any, *, total: int | None, per_call: int) -> list[Any]:
    """Each call's outputs as NumPy arrays, copied to host memory by a background thread while
    the next call runs; Keras's batch hooks once a call."""
    import tensorflow as tf

    parts, done = [], 0
    with concurrent.futures.ThreadPoolExecutor(1) as copier:
        while total is None or done < total:  # no batch hook past the last batch, as Keras
            listed.on_predict_batch_begin(done)
            taken, outputs = call(iterator)
            if int(taken):  # a host-side counter: reading it does not wait for the device
                parts.append(copier.submit(tf.nest.map_structure, lambda t: t.numpy(), outputs))
                done += int(taken)
                listed.on_predict_batch_end(done - 1, {"outputs": outputs})
            if int(taken) < per_call:
                break
        return [part.result() for part in parts]


def _per_call(callbacks: Any) -> int:
    """Batches per compiled call: 16, or one when a callback acts on every predict batch (as
    Keras's ``predict`` calls it at its default of one step per call; said once)."""
    from tfgpu import choices
    from tfgpu.train.pieces.callbacks import acting_per_batch

    acting = acting_per_batch(list(callbacks or ()), kind="predict")
    if not acting:
        return DEFAULT_STEPS_PER_EXECUTION
    choices.record(
        "predict.steps_per_execution",
        1,
        f"{', '.join(sorted(set(acting)))} acts on every predict batch, as under Keras's predict "
        "(pass steps_per_execution=K for K batches a call: faster, batch hooks every K batches)",
    )
    return 1


def _check_sizes(batch_size: Any, per_call: Any, steps: Any) -> None:
    for name, value in (("batch_size", batch_size), ("steps_per_execution", per_call), ("steps", steps)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ConfigError(
                f"{name} must be a whole number of at least 1",
                value=value,
                fix=f"pass {name}=256, or leave it unset",
            )


def _callbacks(callbacks: Any, *, model: Any, verbose: Any, steps: int | None) -> Any:
    import keras

    shown = 1 if verbose == "auto" else verbose
    return keras.callbacks.CallbackList(
        list(callbacks or []), add_progbar=shown != 0, verbose=shown, epochs=1, steps=steps, model=model
    )


def _strategy(model: Any, strategy: Any, asked: Any, *, global_batch: int) -> tuple[Any, Any]:
    """(The strategy predict runs under, the model to run): the model's own strategy, or the
    one given, or for a model from no scope tfgpu's choice (``tfgpu.strategy()``: every device),
    where it is moved as ``tfgpu.fit`` and ``tfgpu.evaluate`` move it; or its copy split as
    ``asked`` (``devices_per_replica``). Before, such a model was predicted under TensorFlow's
    default strategy, one device of many, until a fit moved it.

    Under MultiWorkerMirroredStrategy every worker predicts every row on its own replicas
    (``_iterator``): Keras's ``predict`` gives every worker the whole result too. Under
    ParameterServerStrategy the coordinator predicts, as it evaluates
    (``train.loop.evaluation.evaluation_strategy``).
    """
    from tfgpu.train.loop.evaluation import evaluation_strategy
    from tfgpu.train.model import placement
    from tfgpu.train.model import user_model as model_setup

    model_setup.ready_remat(model)  # a RematScope model fails in a compiled call without it
    placed = placement.place(  # as fit and evaluate
        model, strategy, choose=distribute.strategy, split_as=asked, global_batch=global_batch
    )
    chosen, model = placed.strategy, placed.model
    return evaluation_strategy(chosen), model


def _iterator(strategy: Any, dataset: Any, *, per_replica: int | None) -> Any:
    """An iterator over ``dataset`` (batches of this process's replicas, in order) feeding them.

    Under several workers each worker reads the whole dataset, each batch cut into its replicas'
    contiguous slices of ``per_replica`` rows (None: a dataset's batches, one replica a worker).
    """
    if distribute.spans_workers(strategy):
        return iter(
            strategy.distribute_datasets_from_function(
                lambda ctx: dataset if per_replica is None else dataset.rebatch(per_replica)
            )
        )
    feed = distribute.input_strategy(strategy)
    return iter(dataset if feed is None else feed.experimental_distribute_dataset(dataset))


def _check_dataset_on_workers(strategy: Any, local_replicas: int) -> None:
    if distribute.spans_workers(strategy) and local_replicas > 1:
        raise ConfigError(
            "Under several workers with several replicas each, tfgpu.predict takes arrays, not a tf.data.Dataset "
            "(its last batch cannot be cut evenly over the replicas)",
            value=f"{local_replicas} replicas on this worker",
            fix="pass the arrays, or save the model and run `tfgpu predict MODEL INPUT OUTPUT` under tfgpu launch",
        )


def _x_of(spec: Any) -> Any:
    """The model's input of a dataset element: Keras's unpacking of (x,), (x, y), (x, y, w)."""
    if isinstance(spec, tuple) and 1 <= len(spec) <= 3:
        return spec[0]
    return spec


def _compiled(strategy: Any, model: Any, *, per_call: int, spec: Any, arrays: bool) -> Any:
    """fn(iterator) -> (batches taken, the outputs of up to ``per_call`` batches, on the device).

    Made once per model, strategy and input structure (``train.pieces.model_cache``, dropped on
    ``compile()``), as Keras keeps its ``predict_function``: a new trace each call cost 0.1-0.2 s
    of every ``tfgpu.predict`` on a small MLP. The iterator is an argument, so a new one of the
    same structure reuses the trace.
    """
    from tfgpu import graphs
    from tfgpu.train.pieces import model_cache

    key = ("predict", strategy, per_call, arrays, str(spec), graphs.eager(model))  # shapes, dtypes, structure
    return model_cache.function(
        model, key, lambda: _trace(strategy, model, per_call=per_call, spec=spec, arrays=arrays)
    )


def _trace(strategy: Any, model: Any, *, per_call: int, spec: Any, arrays: bool) -> Any:
    import keras
    import tensorflow as tf
    from keras.src.backend import compute_output_spec  # what Keras's own symbolic build uses

    from tfgpu import graphs
    from tfgpu.train.step.execution import growing_array, in_graph_loop, local_rows

    # arrays are x alone; a dataset's elements are what Keras's predict_step unpacks: x, or (x, y...)
    x_spec = spec if arrays else _x_of(spec)
    outputs = compute_output_spec(
        model,
        tf.nest.map_structure(lambda s: keras.KerasTensor(s.shape, s.dtype.name), x_spec),
        training=False,
    )

    def body(batch: Any, results: Any, index: Any) -> Any:
        out = strategy.run(model.predict_step, args=((batch,) if arrays else batch,))
        return tf.nest.map_structure(lambda a, o: a.write(index, local_rows(strategy, o)), results, out)

    limit = tf.constant(per_call, tf.int32)

    def call(iterator: Any) -> Any:
        out = in_graph_loop(
            iterator,
            limit,
            body,
            tf.nest.map_structure(lambda leaf: growing_array(leaf.dtype, leaf.shape), outputs),
        )
        return out.steps, tf.nest.map_structure(lambda a: a.concat(), out.state)

    return graphs.traced(call, model=model)

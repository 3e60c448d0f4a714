"""``devices_per_replica=K``: each replica's layers placed over K devices, its batch in micro-batches.

tf.distribute gives a replica one device: a MirroredVariable has one component per replica
device, and the replica's ops run under that device. A model split over K devices is made from
that, with no change to Keras's step:

- the local devices are cut into groups of K; the strategy's replicas are the groups' first
  devices (OneDeviceStrategy for one group, MirroredStrategy for several: data parallel over the
  groups); under several workers tf.distribute places a replica's variables on the worker's own
  devices only, and MultiWorkerMirroredStrategy's devices cannot be chosen per worker, so a split
  model trains on one worker (refused on several, with that said);
- the model is re-created in the strategy's scope, its layers (in the model's order) cut into K
  stages of about equal memory (``train.step.footprint``: weights and activations); while stage s's
  layers build, a variable creator entered *outside* the strategy's scope moves each component
  the strategy creates from its replica's device to that replica's group's device s: the
  strategy still mirrors, reduces and updates the variable, on the devices its components are on;
- each layer's call runs under ``tf.device`` of its stage on the calling replica's group;
- the model's call cuts the batch into micro-batches, runs each through the stages and joins
  the outputs: the loss and metrics see the whole batch, and micro-batch i+1's first stage has
  no dependency on micro-batch i's second, so TensorFlow's executor runs them at the same time
  (forward and backward). A BatchNormalization would see micro-batches, not the batch: such a
  model runs with one micro-batch (said).

The weights equal one device's (the same step, the same sums, another placement).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from dataclasses import dataclass
from typing import Any

from tfgpu import choices
from tfgpu.errors import ConfigError

_BUILDING = threading.local()  # the stage whose layer is building now


@dataclass(frozen=True)
class Split:
    """The device groups (one per replica: its K devices) and each layer's stage."""

    groups: tuple[tuple[str, ...], ...]
    micro_batches: int

    @property
    def per_replica(self) -> int:
        return len(self.groups[0])

    def device(self, replica_device: str, stage: int) -> str:
        """Stage ``stage``'s device in the group whose first device is ``replica_device``."""
        for group in self.groups:
            if _same_device(group[0], replica_device):
                return group[stage]
        return self.groups[0][stage]


def _same_device(a: str, b: str) -> bool:
    import tensorflow as tf

    da, db = tf.DeviceSpec.from_string(a), tf.DeviceSpec.from_string(b)
    return (da.device_type or "").upper() == (db.device_type or "").upper() and (da.device_index or 0) == (
        db.device_index or 0
    )


def local_devices() -> list[str]:
    """This process's devices for a split: its GPUs, else its logical CPUs (not another task's)."""
    from tfgpu import distribute

    return distribute.local_devices("GPU") or distribute.local_devices("CPU")


def plan(per_replica: Any, *, micro_batches: int | None = None, strategy: Any = None) -> Split:
    """The groups for ``devices_per_replica=per_replica`` over this process's devices (checked)."""
    from tfgpu import distribute

    devices = local_devices()
    if not isinstance(per_replica, int) or isinstance(per_replica, bool) or per_replica < 1:
        raise ConfigError(
            "devices_per_replica must be a whole number of at least 1", value=per_replica, fix="pass 2"
        )
    if len(devices) % per_replica:
        raise ConfigError(
            f"devices_per_replica must divide this process's {len(devices)} devices",
            value=per_replica,
            fix=f"pass one of {[k for k in range(1, len(devices) + 1) if len(devices) % k == 0]}",
        )
    from tfgpu import cluster

    spec = cluster.from_environ()
    several = spec is not None and spec.num_tasks > 1
    if several or (
        strategy is not None
        and (distribute.spans_workers(strategy) or distribute.is_parameter_server(strategy))
    ):
        raise ConfigError(
            "devices_per_replica splits a model over one worker's devices; under several workers "
            "tf.distribute puts each replica on one device of its worker and the devices cannot be chosen",
            value=f"{spec.num_tasks} tasks in TF_CONFIG" if several else type(strategy).__name__,
            fix="train the split model in one process (tfgpu launch --nproc 1 --gpus-per-proc K gives it K GPUs), or use remat / accumulation across workers",
        )
    micro = micro_batches if micro_batches is not None else per_replica * 2
    if not isinstance(micro, int) or micro < 1:
        raise ConfigError("micro_batches must be a whole number of at least 1", value=micro, fix="pass 4")
    groups = tuple(tuple(devices[i : i + per_replica]) for i in range(0, len(devices), per_replica))
    return Split(groups=groups, micro_batches=micro)


def strategy_for(split: Split) -> Any:
    """OneDeviceStrategy on the one group's first device, else MirroredStrategy over the groups'."""
    import tensorflow as tf

    firsts = [group[0] for group in split.groups]
    if len(firsts) == 1:
        return tf.distribute.OneDeviceStrategy(firsts[0])
    on_cpu = all("CPU" in d.upper() for d in firsts)
    reduce = tf.distribute.ReductionToOneDevice() if on_cpu else None
    return tf.distribute.MirroredStrategy(firsts, cross_device_ops=reduce)


def stages(model: Any, k: int, *, batch: int) -> list[list[Any]]:
    """The model's layers in order, cut into ``k`` contiguous stages of about equal bytes
    (weights + activations at ``batch``; ``train.step.footprint``'s estimate)."""
    import math

    import tensorflow as tf

    from tfgpu.train.step import footprint

    layers = _layers(model)
    active = {id(layer): out for layer, out in footprint.layer_outputs(model)}
    cost = []
    for layer in layers:
        weights = sum(math.prod(v.shape) * tf.as_dtype(v.dtype).size for v in layer.weights)
        cost.append(3 * weights + batch * active.get(id(layer), 0))  # weights, gradients, a slot
    return [layers[a:b] for a, b in _partition(cost, min(k, len(layers)))] + [
        [] for _ in range(k - min(k, len(layers)))
    ]


def _partition(cost: list[int], k: int) -> list[tuple[int, int]]:
    """``k`` contiguous non-empty ranges of ``cost`` whose largest sum is the least (the linear
    partition problem; a model has few enough layers for the O(n^2 k) table)."""
    n = len(cost)
    prefix = [0]
    for c in cost:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(k + 1)]
    cut = [[0] * (n + 1) for _ in range(k + 1)]
    best[0][0] = 0
    for parts in range(1, k + 1):
        for end in range(parts, n + 1):
            for start in range(parts - 1, end):
                worst = max(best[parts - 1][start], prefix[end] - prefix[start])
                if worst < best[parts][end]:
                    best[parts][end], cut[parts][end] = worst, start
    ranges, end = [], n
    for parts in range(k, 0, -1):
        ranges.append((cut[parts][end], end))
        end = cut[parts][end]
    return ranges[::-1]


def _layers(model: Any) -> list[Any]:
    import keras

    if not isinstance(model, keras.Sequential) and not getattr(model, "_is_graph_network", False):
        raise ConfigError(
            "devices_per_replica needs a Sequential or functional model (its layers have an order to cut)",
            value=type(model).__name__,
            fix="build the model with keras.Sequential or the functional API, or train it on one device",
        )
    return [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]


def _has_batch_statistics(model: Any) -> bool:
    import keras

    return any(
        isinstance(layer, keras.layers.BatchNormalization)
        for layer in model._flatten_layers(include_self=False)
    )


def _creator(split: Split):
    """A variable creator (entered outside the strategy's scope) that moves each component the
    strategy creates to its group's device of the stage building now."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    def create(next_creator: Any, **kwargs: Any) -> Any:
        stage = getattr(_BUILDING, "stage", None)
        if stage is None:
            return next_creator(**kwargs)
        here = context.context().device_name or split.groups[0][0]
        with tf.device(split.device(here, stage)):
            return next_creator(**kwargs)

    return create


@contextlib.contextmanager
def _building(stage: int):
    _BUILDING.stage = stage
    try:
        yield
    finally:
        _BUILDING.stage = None


def _replica_group(split: Split) -> tuple[str, ...]:
    """The calling replica's group: replica i runs on group i (the strategy was made over the
    groups' first devices, in order)."""
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    index = getattr(context, "_replica_id_in_sync_group", 0) if context is not None else 0
    index = tf.get_static_value(index) if tf.is_tensor(index) else index
    return split.groups[int(index or 0) % len(split.groups)]


def _place(layer: Any, stage: int, split: Split) -> None:
    """The layer builds its variables as stage ``stage`` and runs there on each replica's group."""
    import tensorflow as tf

    build, call = layer.build, layer.call

    @functools.wraps(build)
    def placed_build(*args: Any, **kwargs: Any) -> Any:
        with _building(stage):
            return build(*args, **kwargs)

    @functools.wraps(call)
    def placed_call(*args: Any, **kwargs: Any) -> Any:
        with tf.device(_replica_group(split)[stage]):
            return call(*args, **kwargs)

    object.__setattr__(layer, "build", placed_build)
    object.__setattr__(layer, "call", placed_call)


def _micro_batched(model: Any, micro: int) -> None:
    """The model's call in ``micro`` micro-batches, their outputs joined (see the module docstring)."""
    import tensorflow as tf

    call = model.call

    def pieces(x: Any, n: int) -> list[Any]:
        rows = tf.shape(tf.nest.flatten(x)[0])[0]
        sizes = [rows // n + tf.cast(i < rows % n, tf.int32) for i in range(n)]
        parts = [tf.split(t, sizes) for t in tf.nest.flatten(x)]
        return [tf.nest.pack_sequence_as(x, [p[i] for p in parts]) for i in range(n)]

    @functools.wraps(call)
    def micro_call(inputs: Any, *args: Any, **kwargs: Any) -> Any:
        import keras

        if micro == 1 or any(keras.backend.is_keras_tensor(t) for t in tf.nest.flatten(inputs)):
            return call(inputs, *args, **kwargs)
        outs = [call(part, *args, **kwargs) for part in pieces(inputs, micro)]
        return tf.nest.map_structure(lambda *o: tf.concat(o, 0), *outs)

    object.__setattr__(model, "call", micro_call)


def build(model: Any, split: Split, *, batch: int) -> tuple[Any, Any]:
    """(strategy, ``model`` re-created split over each group's devices, compiled as ``model``)."""
    import keras
    import tensorflow as tf

    from tfgpu.train.model import rehoming

    parts = stages(model, split.per_replica, batch=batch)
    stage_of = {id(layer): s for s, part in enumerate(parts) for layer in part}
    strategy = strategy_for(split)
    micro = split.micro_batches
    if micro > 1 and _has_batch_statistics(model):
        micro = 1
        choices.record("micro_batches", 1, "a BatchNormalization needs the whole batch's statistics")

    def clone_layer(layer: Any) -> Any:
        copy = rehoming.clone_layer(layer)
        if id(layer) in stage_of:
            _place(copy, stage_of[id(layer)], split)
        return copy

    weights = model.get_weights()
    with tf.variable_creator_scope(_creator(split)), strategy.scope():
        clone = keras.models.clone_model(model, clone_function=clone_layer)
        clone.set_weights(weights)
        if model.compiled:  # a model loaded to predict is not
            clone.compile_from_config(model.get_compile_config())
    _micro_batched(clone, micro)
    sizes = [len(p) for p in parts]
    choices.record(
        "devices_per_replica",
        split.per_replica,
        f"{len(split.groups)} replica(s), layers {sizes} over {list(split.groups[0])}, {micro} micro-batches",
    )
    return strategy, clone


def placed(
    model: Any,
    *,
    devices_per_replica: Any,
    micro_batches: Any = None,
    strategy: Any = None,
    batch: int,
) -> tuple[Any, Any]:
    """(strategy, ``model``'s copy split over ``devices_per_replica`` devices per replica) holding
    ``model``'s weights and optimizer state now; made once per model and split, re-made when the
    model is re-compiled (as ``train.model.rehoming.recreate`` keeps its copies). ``batch``: the examples
    per replica (the stages are weighed at it)."""
    from tfgpu.train.model import rehoming
    from tfgpu.train.pieces import model_cache

    split = plan(devices_per_replica, micro_batches=micro_batches, strategy=strategy)
    if strategy is not None:  # plan() refused one over several workers
        raise ConfigError(
            "devices_per_replica chooses the strategy (one replica per group of devices), so strategy= cannot be given too",
            value=type(strategy).__name__,
            fix="leave strategy unset",
        )
    batch = max(1, batch)
    (placed_strategy, clone), made = model_cache.copy(
        model, ("split", split), lambda: build(model, split, batch=batch)
    )
    if not made:
        rehoming.transfer(model, clone, strategy=placed_strategy)
    return placed_strategy, clone


def replicas(placement: Any, *, strategy: Any = None) -> int:
    """The replicas a split ``placement`` (``options.Placement``) trains on: its groups of devices."""
    return len(
        plan(
            placement.devices_per_replica or 1, micro_batches=placement.micro_batches, strategy=strategy
        ).groups
    )

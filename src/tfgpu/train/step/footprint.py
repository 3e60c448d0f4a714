"""``tfgpu.memory(model, batch_size=..., precision=...)``: what a training step holds in device memory.

A step holds fixed bytes (the weights, one gradient per trainable weight, the optimizer's slots:
Adam's two moments, an accumulating optimizer's sums) and bytes per example (the activations kept
for the backward pass). On a GPU both are measured: TensorFlow's allocator peak
(``tf.config.experimental.get_memory_info``) over a forward and backward pass at two batch sizes,
the difference per example. Without a GPU they are estimated from the model's shapes: every
layer's output, plus the input of its activation or normalization (the tensors remat frees),
recorded from one forward pass of one example. The report says which it is.

From the two figures follow the largest per-replica batch each device takes, and what mixed
precision (16-bit activations), remat (the inner tensors recomputed) and a split over K devices
(each holding 1/K) would change; an out-of-memory step reports the same figures with the fixes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tfgpu.errors import ConfigError

HEADROOM = 0.9  # of a device's memory a step may plan on: cuDNN workspaces, fragmentation
PRECISIONS = (None, "fp32", "bf16", "fp16")  # tfgpu.configure's names
# optimizer slots per trainable weight, when the optimizer has not made them yet
_SLOTS = {
    "Adam": 2,
    "AdamW": 2,
    "Nadam": 2,
    "Adamax": 2,
    "Adadelta": 2,
    "Ftrl": 2,
    "Lamb": 2,
    "Adagrad": 1,
    "Lion": 1,
}


@dataclass(frozen=True)
class DeviceFit:
    """One device: its memory for a step, and the largest per-replica batch that fits it."""

    name: str
    total_bytes: int
    largest_batch: int  # 0: not even one example (the fixed bytes alone do not fit)


@dataclass(frozen=True)
class Change:
    """What an option would make of the step: its fixed and per-example bytes, and why."""

    option: str
    fixed_bytes: int
    per_example_bytes: int
    note: str


@dataclass(frozen=True)
class Footprint:
    """A training step's memory, measured or estimated (``source``), at ``batch_size`` per replica."""

    batch_size: int
    precision: str
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    per_example_bytes: int
    source: str  # "measured" | "estimated"
    how: str
    devices: tuple[DeviceFit, ...] = ()
    changes: tuple[Change, ...] = field(default_factory=tuple)

    @property
    def fixed_bytes(self) -> int:
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes

    def step_bytes(self, batch: int | None = None) -> int:
        return self.fixed_bytes + (self.batch_size if batch is None else batch) * self.per_example_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "precision": self.precision,
            "source": self.source,
            "how": self.how,
            "fixed_bytes": self.fixed_bytes,
            "weights_bytes": self.weights_bytes,
            "gradients_bytes": self.gradients_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "per_example_bytes": self.per_example_bytes,
            "step_bytes": self.step_bytes(),
            "devices": [vars(d) for d in self.devices],
            "changes": [vars(c) for c in self.changes],
        }

    def lines(self) -> list[str]:
        return lines(self.to_dict())


def lines(report: dict[str, Any]) -> list[str]:
    """A footprint (``Footprint.to_dict()``) as text: the one renderer, for ``tfgpu diagnose``,
    the out-of-memory message and the library alike."""
    r = report
    out = [
        f"{r['source']} ({r['how']}): fixed {size(r['fixed_bytes'])} (weights {size(r['weights_bytes'])}, "
        f"gradients {size(r['gradients_bytes'])}, optimizer {size(r['optimizer_bytes'])}) + "
        f"{size(r['per_example_bytes'])} per example = {size(r['step_bytes'])} at {r['batch_size']} per replica"
    ]
    out += [
        f"{d['name']}: {size(d['total_bytes'])}, largest batch per replica {d['largest_batch']}"
        for d in r["devices"]
    ]
    out += [
        f"{c['option']}: fixed {size(c['fixed_bytes'])} + {size(c['per_example_bytes'])} per example ({c['note']})"
        for c in r["changes"]
    ]
    return out


def size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def largest_batch(*, capacity: int, fixed: int, per_example: int) -> int:
    """The largest batch whose step fits ``HEADROOM`` of ``capacity``."""
    room = capacity * HEADROOM - fixed
    return max(0, int(room // max(per_example, 1)))


def memory(
    model: Any,
    *,
    batch_size: int = 32,
    precision: str | None = None,
    devices_bytes: dict[str, int] | None = None,
    measure: bool | None = None,
) -> Footprint:
    """The step's memory for ``model`` (compiled, built) at ``batch_size`` examples per replica.

    ``precision``: "bf16" or "fp16" for the activations in 16 bits, "fp32" (None: the model's
    own dtype policy).
    ``devices_bytes``: {device name: bytes a step may use}; default the visible GPUs (their
    ``tfgpu.configure`` caps, else their memory). ``measure``: None measures on a GPU when there
    is one, else estimates; True insists on measuring.
    """
    _check(model, batch_size, precision)
    gpus = _gpus()
    if measure is None:
        measure = bool(gpus)
    if measure and not gpus:
        raise ConfigError(
            "measure=True needs a GPU, and none is visible", value=measure, fix="pass measure=None"
        )
    inner = None  # what remat frees: estimated from the shapes only
    if measure:
        fixed_parts, per_example, how = _measured(model, batch_size, gpus[0])
    else:
        fixed_parts, per_example, how, inner = _estimated(model, precision)
    footprint = Footprint(
        batch_size=batch_size,
        precision=precision or _policy(model),
        weights_bytes=fixed_parts[0],
        gradients_bytes=fixed_parts[1],
        optimizer_bytes=fixed_parts[2],
        per_example_bytes=per_example,
        source="measured" if measure else "estimated",
        how=how,
    )
    capacities = devices_bytes if devices_bytes is not None else _capacities(gpus)
    return _with_fits(footprint, capacities, inner=inner)


def _check(model: Any, batch_size: Any, precision: Any) -> None:
    import keras

    if not isinstance(model, keras.Model):
        raise ConfigError(
            "tfgpu.memory takes a Keras model", value=type(model).__name__, fix="pass a keras.Model"
        )
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ConfigError(
            "batch_size must be a whole number of at least 1", value=batch_size, fix="pass batch_size=32"
        )
    if precision not in PRECISIONS:
        raise ConfigError(
            "precision must be 'bf16', 'fp16' or 'fp32' (tfgpu.configure's names)",
            value=precision,
            fix="pass precision='bf16', or None for the model's own policy",
        )


def _policy(model: Any) -> str:
    return str(getattr(getattr(model, "dtype_policy", None), "name", "float32"))


def _bytes(variables: Any) -> int:
    import tensorflow as tf

    return sum(math.prod(v.shape) * tf.as_dtype(v.dtype).size for v in variables)


def _fixed(model: Any) -> tuple[int, int, int]:
    """Weights, gradients (one per trainable weight) and optimizer slots, from the variables."""
    weights = _bytes(model.weights)
    gradients = _bytes(model.trainable_weights)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        return weights, gradients, 0
    if optimizer.built:
        return weights, gradients, _bytes(v for v in optimizer.variables if len(v.shape))
    slots = _SLOTS.get(type(optimizer).__name__, 0)
    slots += bool(getattr(optimizer, "momentum", 0)) + bool(
        getattr(optimizer, "gradient_accumulation_steps", None)
    )
    return weights, gradients, slots * gradients


def _example(model: Any) -> Any:
    """One example of zeros in the model's input structure."""
    import tensorflow as tf

    inputs = getattr(model, "inputs", None)
    if inputs:
        batch = [tf.zeros([1, *[d or 1 for d in t.shape[1:]]], t.dtype) for t in inputs]
        return batch[0] if len(batch) == 1 else batch
    shape = (getattr(model, "_build_shapes_dict", None) or {}).get("input_shape")
    if shape is None:
        raise ConfigError(
            f"{model.name} has no input shape to estimate its activations from",
            value=type(model).__name__,
            fix="build the model first (model.build(input_shape) or call it on a batch)",
        )
    return tf.zeros([1, *[d or 1 for d in shape[1:]]])


def layer_outputs(model: Any) -> list[tuple[Any, int]]:
    """(leaf layer, bytes of its outputs for one example), from one forward pass."""
    import tensorflow as tf

    from tfgpu.train.pieces.layers import leaf_layers

    leaves = leaf_layers(model)
    seen: list[tuple[Any, int]] = []
    originals = {}
    for layer in leaves:
        originals[id(layer)] = layer.__dict__.get("call")

        def recording(*args: Any, _layer: Any = layer, _call: Any = layer.call, **kwargs: Any) -> Any:
            out = _call(*args, **kwargs)
            tensors = [t for t in tf.nest.flatten(out) if tf.is_tensor(t)]
            seen.append((_layer, sum(math.prod(t.shape[1:]) * t.dtype.size for t in tensors)))
            return out

        object.__setattr__(layer, "call", recording)
    try:
        model(_example(model), training=False)
    finally:
        for layer in leaves:
            if originals[id(layer)] is None:
                object.__delattr__(layer, "call")
            else:
                object.__setattr__(layer, "call", originals[id(layer)])
    return seen


def _inner(layer: Any, out_bytes: int) -> int:
    """Bytes a layer keeps inside it for the backward pass beyond its output: the input of its
    activation, or of a normalization; what per-layer remat frees."""
    import keras

    activation = getattr(layer, "activation", None)
    if activation is not None and activation not in (keras.activations.linear,):
        return out_bytes
    if isinstance(
        layer,
        keras.layers.BatchNormalization | keras.layers.LayerNormalization | keras.layers.GroupNormalization,
    ):
        return out_bytes
    return 0


def _estimated(model: Any, precision: str | None) -> tuple[tuple[int, int, int], int, str, int]:
    """(fixed parts, bytes per example, how, of those the inner bytes remat frees), from one
    forward pass of one example."""
    outputs = layer_outputs(model)
    inner = sum(_inner(layer, out) for layer, out in outputs)
    per_example = sum(out for _, out in outputs) + inner
    if precision in ("bf16", "fp16") and _policy(model) == "float32":
        per_example //= 2
    how = "from the model's shapes: no GPU to measure on; layer outputs and activation inputs kept for the backward pass"
    return _fixed(model), per_example, how, inner


def _measured(
    model: Any, batch_size: int, device: str, reader: Callable[[str], int] | None = None
) -> tuple[tuple[int, int, int], int, str]:
    """Allocator peaks of a forward and backward pass at ``batch_size`` and twice it."""
    import tensorflow as tf

    from tfgpu.train.step.execution import restored

    reader = reader or _peak
    peaks = []
    with restored(model):  # a BatchNormalization's statistics move in the passes
        for batch in (batch_size, 2 * batch_size):
            example = _example(model)
            x = tf.nest.map_structure(lambda t, b=batch: tf.repeat(t, b, axis=0), example)
            peaks.append(_pass_peak(model, x, device, reader))
    per_example = max(0, (peaks[1] - peaks[0]) // batch_size)
    fixed = max(0, peaks[0] - batch_size * per_example)
    weights_bytes, _, optimizer = _fixed(model)
    built = getattr(model.optimizer, "built", True)
    # the measured fixed bytes hold the weights, the slots made so far and the gradients
    gradients = max(0, fixed - weights_bytes - (optimizer if built else 0))
    how = f"allocator peak on {device} at {batch_size} and {2 * batch_size} examples"
    return (weights_bytes, gradients, optimizer), per_example, how


def _pass_peak(model: Any, x: Any, device: str, reader: Callable[[str], int]) -> int:
    import tensorflow as tf

    @tf.function(autograph=False)
    def step() -> Any:
        with tf.GradientTape() as tape:
            out = model(x, training=True)
            loss = tf.add_n([tf.reduce_sum(tf.cast(t, tf.float32)) for t in tf.nest.flatten(out)])
        return tape.gradient(loss, model.trainable_variables)

    if reader is _peak:
        tf.config.experimental.reset_memory_stats(device)
    tf.nest.map_structure(lambda g: g is None or g.numpy(), step())
    return reader(device)


def _peak(device: str) -> int:
    import tensorflow as tf

    return int(tf.config.experimental.get_memory_info(device)["peak"])


def _gpus() -> list[str]:
    """This process's GPUs as ``get_memory_info`` names them ("GPU:0"), a cluster's task prefix
    (``/job:worker/replica:0/task:0``) dropped."""
    import tensorflow as tf

    from tfgpu import distribute

    specs = [tf.DeviceSpec.from_string(name) for name in distribute.local_devices("GPU")]
    return [f"{spec.device_type}:{spec.device_index}" for spec in specs]


def _capacities(gpus: list[str]) -> dict[str, int]:
    """Each visible GPU's memory for a step: its ``tfgpu.configure`` cap, else its total (NVML,
    in the order CUDA_VISIBLE_DEVICES gives TensorFlow the GPUs)."""
    import os

    import tensorflow as tf

    from tfgpu import nvml

    seen = nvml.visible(nvml.probe(), os.environ.get("CUDA_VISIBLE_DEVICES"))
    out: dict[str, int] = {}
    names = iter(gpus)
    for index, device in enumerate(tf.config.list_physical_devices("GPU")):
        caps = tf.config.get_logical_device_configuration(device) or [None]
        total = int(seen[index].memory_total_mb * 2**20) if index < len(seen) else 0
        for cap, name in zip(caps, names, strict=False):
            limit = getattr(cap, "memory_limit", None)
            if limit or total:
                out[name] = int(limit) * 2**20 if limit else total
    return out


def _with_fits(footprint: Footprint, capacities: dict[str, int], *, inner: int | None) -> Footprint:
    fixed, per = footprint.fixed_bytes, footprint.per_example_bytes
    devices = tuple(
        DeviceFit(name, total, largest_batch(capacity=total, fixed=fixed, per_example=per))
        for name, total in capacities.items()
    )
    changes = [Change("mixed precision", fixed, per // 2, "activations in 16 bits, weights stay float32")]
    if inner is not None:
        changes.append(
            Change("remat=True", fixed, max(0, per - inner), "each layer's inner tensors recomputed")
        )
    else:
        changes.append(Change("remat=True", fixed, per, "measure with remat: bench/memory_bench.py"))
    changes.append(Change("devices_per_replica=2", fixed // 2, per // 2, "the layers split over 2 devices"))
    return Footprint(**{**vars(footprint), "devices": devices, "changes": tuple(changes)})


def accumulation_for(batch: int, *, fits: int) -> tuple[int, int]:
    """(per-step batch, accumulation steps): the fewest steps whose equal parts of ``batch`` fit."""
    for steps in range(-(-batch // fits), batch + 1):
        if batch % steps == 0:
            return batch // steps, steps
    return 1, batch


def out_of_memory_advice(footprint: Footprint, *, batch: int, capacity: int | None) -> list[str]:
    """The fixes for a step of ``batch`` per replica that ran out of memory, with their numbers."""
    fixed, per = footprint.fixed_bytes, footprint.per_example_bytes
    fits = largest_batch(capacity=capacity, fixed=fixed, per_example=per) if capacity else batch // 2
    fits, steps = accumulation_for(batch, fits=max(1, min(fits, batch - 1)))
    fixes = [
        f"batch_size {fits} per replica with gradient_accumulation_steps={steps} on the optimizer "
        f"(the effective batch stays {fits * steps})"
    ]
    for change in footprint.changes:
        after = (
            largest_batch(capacity=capacity, fixed=change.fixed_bytes, per_example=change.per_example_bytes)
            if capacity
            else None
        )
        where = f": {after} per replica fit" if after is not None else ""
        fixes.append(f"{change.option} ({size(change.per_example_bytes)} per example{where})")
    return fixes

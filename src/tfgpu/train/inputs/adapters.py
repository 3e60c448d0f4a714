"""One door for data: what the data is, decided once, as Keras's ``get_data_adapter`` decides it.

``of`` takes what ``Model.fit``, ``Model.evaluate`` and ``Model.predict`` take (``x``, ``y``,
``sample_weight``) or what a ``Task`` holds, and returns one ``Adapter`` per kind of data:

- ``Arrays``: arrays in memory, ``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)``, x and y an
  array, a tensor, a pandas frame, or a dict, list or tuple of them (lists read as structures,
  as Keras reads them);
- ``Batches``: a ``tf.data.Dataset`` of global batches, of x, (x, y) or (x, y, sample_weight);
- ``PythonBatches``: a ``keras.utils.PyDataset`` (its workers, multiprocessing, shuffle and epoch
  hooks) or a Python generator, read through Keras's own adapter as a Dataset of its batches;
- ``Directory``: a tfgpu dataset directory (``tfgpu convert``), read by ``tfgpu.data.pipeline``;
- ``Function``: ``fn(input_context[, per_replica_batch][, epoch=])`` -> a Dataset, per worker.

Each adapter knows its batch per replica, its length when known, its epoch hooks, how it is
split for ``validation_split``, how it becomes an ``inputs.Input`` (one class per kind: a
distributed dataset or a per-worker one) and, for ``tfgpu.predict``, the batches its rows are
predicted in and how many rows come back. Nothing after the door asks what the data is: this is
the one module that tests a kind (``tests/test_adapters.py`` reads the source).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import types
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from tfgpu import choices
from tfgpu.errors import ConfigError
from tfgpu.train.inputs import readers as inputs

DEFAULT_BATCH = 32  # Keras's


class Adapter:
    """Data of one kind; ``data`` is what its ``Input`` reads. Subclasses say what differs."""

    kind: ClassVar[str] = "data"
    batched: ClassVar[bool] = False  # it brings global batches of its own
    reader: ClassVar[type[inputs.Input]] = inputs.Input  # the Input that reads it (``inputs.input_of``)

    def __init__(self, data: Any) -> None:
        self.data = data

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"

    def describe(self) -> str:
        """The data in a few words, for a message."""
        return getattr(self.data, "__qualname__", None) or type(self.data).__name__

    def per_replica(self, batch_size: int | None, replicas: int) -> int:
        """The batch per replica: Keras's ``batch_size`` is the global batch, split evenly over
        the replicas (Keras's default rounded up to split); data in batches of its own: 1."""
        if self.batched:
            if batch_size is not None:  # Keras ignores it too (the guides pass it with a PyDataset)
                choices.record(
                    "batch_size",
                    "from the data",
                    f"batch_size={batch_size} ignored: the data is batched already",
                )
            return 1
        return _per_replica(batch_size, replicas)

    def batch_refused(self) -> str | None:
        """Why tuning or ``batch_size="auto"`` cannot change the batch (None: they can)."""
        return f"the {self.kind} is batched already" if self.batched else None

    def steps_per_epoch(self, global_batch: int, replicas: int) -> int | None:
        """Training steps in one epoch when the data says (None: unknown before it is read)."""
        return None

    def x_shape(self) -> tuple[Any, ...] | None:
        """The shape of x (batch dimension None) where one array is x, for a model built at its
        first batch (a Sequential without ``Input``); None where that cannot be said."""
        return None

    def split(self, fraction: float) -> tuple[Adapter, Adapter]:
        """(training, validation) for Keras's ``validation_split``: arrays only."""
        raise ConfigError(
            f"validation_split needs arrays in memory; the training data is a {self.describe()}",
            value=fraction,
            fix="pass validation_data (a dataset, arrays or a directory) instead of validation_split",
        )

    def epoch_hooks(self) -> list[Any]:
        """Keras callbacks that tell the data where epochs begin and end (a PyDataset's)."""
        return []

    @contextlib.contextmanager
    def epoch(self, *, reset: bool = False) -> Iterator[None]:
        """One pass outside ``fit`` (evaluate, predict), with the data's epoch hooks around it;
        ``reset``: an end of epoch first, as Keras's ``evaluate`` resets its iterator."""
        yield

    def check_steps(self, steps: int | None, *, argument: str) -> None:
        """Refuse data that never ends read without ``steps`` (an endless PyDataset's)."""

    def for_prediction(self, *, batch_size: int | None, replicas: int) -> Any:
        """``tfgpu.predict``'s view of this data (``Prediction``): refused where Keras's
        ``predict`` takes no such data."""
        raise ConfigError(
            f"tfgpu.predict takes what model.predict takes, and a {self.kind} is not one of them",
            value=self.describe(),
            fix="pass arrays, a tf.data.Dataset, a keras.utils.PyDataset or a generator; "
            "to predict a dataset directory to disk, pass output= (tfgpu.predict(model, 'data/', output='out/'))",
        )


class Batches(Adapter):
    """A ``tf.data.Dataset`` of global batches, as Keras's ``fit`` takes it."""

    kind = "tf.data.Dataset"
    batched = True
    reader = inputs.DatasetInput

    def describe(self) -> str:
        return self.kind

    def x_shape(self) -> tuple[Any, ...] | None:
        import tensorflow as tf

        spec = self.data.element_spec
        spec = spec[0] if isinstance(spec, tuple) else spec
        return tuple(spec.shape) if isinstance(spec, tf.TensorSpec) else None

    def known_batches(self) -> int | None:
        """Batches in a pass when tf.data knows (None: unknown or infinite)."""
        batches = int(self.data.cardinality())
        return batches if batches > 0 else None

    def for_prediction(self, *, batch_size: int | None, replicas: int) -> Any:
        import tensorflow as tf

        self.per_replica(batch_size, replicas)  # says that batch_size is ignored, as Keras ignores it
        return Prediction(self._prefetched(tf), rows=None, global_batch=None, packed=True, epoch=self.epoch)

    def _prefetched(self, tf: Any) -> Any:
        return self.data.prefetch(tf.data.AUTOTUNE)


class PythonBatches(Batches):
    """A ``keras.utils.PyDataset`` or a Python generator, read through Keras's own adapter as a
    ``tf.data.Dataset`` of its batches: global batches, cut over the replicas as a Dataset's
    are. Its batches are made in Python, one at a time (said once: a tf.data pipeline or arrays
    feed a GPU without the interpreter)."""

    def __init__(self, given: Any, *, kind: str, shuffle: bool) -> None:
        from keras.src.trainers.data_adapters.generator_data_adapter import GeneratorDataAdapter
        from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

        self.kind, self.given = kind, given  # type: ignore[misc]
        try:
            self.adapter = (
                PyDatasetAdapter(given, shuffle=shuffle)
                if kind == PY_DATASET
                else GeneratorDataAdapter(given)
            )
            _copy_batches(self.adapter)
            dataset = self.adapter.get_tf_dataset()
        except (ValueError, TypeError) as e:  # Keras's own check of its first batches
            said = (str(e).strip().splitlines() or [type(e).__name__])[0].split(" Received:")[0]
            raise ConfigError(
                f"The {kind}'s first batches cannot be read as batches of tensors: {said[:240]}",
                value=type(given).__name__,
                fix="make every batch the same structure of arrays (same dtypes and ranks): "
                + (
                    "a tuple, (x,), (x, y) or (x, y, sample_weight)"
                    if kind == GENERATOR
                    else "x, (x, y) or (x, y, sample_weight)"
                ),
            ) from None
        choices.record(
            "input",
            f"{kind} read through tf.data.Dataset.from_generator (Keras's adapter)",
            "its batches are made in Python; a tf.data pipeline or arrays keep a GPU busier",
        )
        super().__init__(dataset)

    def describe(self) -> str:
        return f"{self.kind} {type(self.given).__name__}"

    def _prefetched(self, tf: Any) -> Any:
        return self.data  # Keras's adapter prefetches itself, or its workers do

    def known_batches(self) -> int | None:
        return getattr(self.adapter, "num_batches", None)

    def check_steps(self, steps: int | None, *, argument: str) -> None:
        """A PyDataset that says it has no end (``num_batches`` None: Keras's infinite one)
        would be read for ever without ``steps``; a generator cannot say (read to its end)."""
        if steps is None and self.kind == PY_DATASET and self.adapter.num_batches is None:
            raise ConfigError(
                f"The {self.describe()} has no end (its num_batches is None), and {argument} is not set",
                value=f"{argument}=None",
                fix=f"pass {argument}=N, the batches to read, or give the PyDataset a __len__",
            )

    def epoch_hooks(self) -> list[Any]:
        import keras

        adapter = self.adapter

        class PythonSourceEpochs(keras.callbacks.Callback):
            def on_train_begin(self, logs: Any = None) -> None:
                adapter.on_epoch_end()  # Keras's fit resets its epoch iterator first (a shuffle)

            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                adapter.on_epoch_begin()

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                adapter.on_epoch_end()

        return [PythonSourceEpochs()]

    @contextlib.contextmanager
    def epoch(self, *, reset: bool = False) -> Iterator[None]:
        if reset:
            self.adapter.on_epoch_end()
        self.adapter.on_epoch_begin()
        try:
            yield
        finally:
            self.adapter.on_epoch_end()


def _copy_batches(adapter: Any) -> None:
    """Each batch Keras's ``adapter`` yields to ``tf.data.Dataset.from_generator``, its NumPy
    arrays copied. TensorFlow takes an aligned NumPy array that a ``py_func`` returns without
    copying it, and counts the buffer as its own: an op that may reuse its input's buffer then
    writes its result into the user's array. On 2 replicas the first replica's slice of each
    batch aliases it (the second's is copied to its device), and a PyDataset or generator whose
    batches were views of the user's arrays (``x[i:i + 32]``) had its labels overwritten in the
    first epoch: the second trained on other numbers (weights 0.04 from Keras's, in 6 of 8 runs;
    tests/test_input_forms.py). A copy a batch costs a memcpy beside the Python that made it."""
    import numpy as np
    from keras import tree

    def copied(leaf: Any) -> Any:
        return np.array(leaf, copy=True) if isinstance(leaf, np.ndarray) else leaf

    name = "_get_iterator" if hasattr(adapter, "_get_iterator") else "generator"
    make = getattr(adapter, name)

    def batches() -> Iterator[Any]:
        for batch in make():
            yield tree.map_structure(copied, batch)

    setattr(adapter, name, batches)


class Arrays(Adapter):
    """Arrays in memory as a tuple of parts: ``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)``."""

    kind = "arrays"
    reader = inputs.ArraysInput

    def __init__(self, parts: tuple[Any, ...]) -> None:
        super().__init__(parts)
        self.rows = array_rows(parts)

    def describe(self) -> str:
        return f"arrays of {self.rows} rows"

    def x_shape(self) -> tuple[Any, ...] | None:
        x = self.data[0]
        shape = getattr(x, "shape", None)
        return (None, *tuple(shape)[1:]) if shape is not None and len(shape) else None

    def steps_per_epoch(self, global_batch: int, replicas: int) -> int | None:
        return inputs.training_steps(self.rows, global_batch, replicas)

    def split(self, fraction: float) -> tuple[Adapter, Adapter]:
        import tensorflow as tf

        cut = int(self.rows * (1.0 - fraction))
        if cut < 1 or cut == self.rows:
            raise ConfigError(
                f"validation_split {fraction} of {self.rows} rows leaves no training or no validation rows",
                value=fraction,
                fix="pass a fraction that leaves rows on both sides, e.g. 0.2",
            )
        head = tuple(tf.nest.map_structure(lambda a: a[:cut], part) for part in self.data)
        tail = tuple(tf.nest.map_structure(lambda a: a[cut:], part) for part in self.data)
        return Arrays(head), Arrays(tail)

    def for_prediction(self, *, batch_size: int | None, replicas: int) -> Any:
        """The rows of x in global batches, the last filled up from the start (every replica
        an equal share, one traced shape); y and sample weights are ignored, as Keras ignores
        them."""
        batch = batch_size or DEFAULT_BATCH
        global_batch = -(-batch // replicas) * replicas
        if self.rows == 0:
            raise ConfigError("x has no rows", value=0, fix="pass at least one row")
        dataset = filled_batches(self.data[0], rows=self.rows, global_batch=global_batch)
        return Prediction(dataset, rows=self.rows, global_batch=global_batch, packed=False, epoch=self.epoch)


class Directory(Adapter):
    """A tfgpu dataset directory (``tfgpu convert``), read by ``tfgpu.data.pipeline``."""

    kind = "dataset directory"
    reader = inputs.DirectoryInput

    def describe(self) -> str:
        return f"dataset directory {os.fspath(self.data)}"

    def steps_per_epoch(self, global_batch: int, replicas: int) -> int | None:
        from pathlib import Path

        from tfgpu import data
        from tfgpu.errors import TfgpuError

        try:
            return data.load(Path(self.data)).total_rows // global_batch
        except TfgpuError:
            return None


class Function(Adapter):
    """``fn(input_context[, per_replica_batch][, epoch=])`` -> a ``tf.data.Dataset``, per worker."""

    kind = "data function"
    reader = inputs.FunctionInput

    def batch_refused(self) -> str | None:
        return (
            None if self.takes_batch else "the data function batches its data itself (it takes no batch size)"
        )

    @functools.cached_property
    def takes_batch(self) -> bool:
        """False for ``dataset_fn(input_context)`` alone, as TensorFlow's parameter-server
        tutorial (and Keras 2's ``DatasetCreator``) write it: it reads the per-replica batch
        from the context."""
        try:
            parameters = [
                p
                for p in inspect.signature(self.data).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
                and p.name != "epoch"
            ]
        except (TypeError, ValueError):
            return True
        return len(parameters) != 1 or parameters[0].kind == parameters[0].VAR_POSITIONAL

    @functools.cached_property
    def takes_epoch(self) -> bool:
        """A function with an ``epoch`` keyword asks to be called again each epoch."""
        try:
            return "epoch" in inspect.signature(self.data).parameters
        except (TypeError, ValueError):
            return False

    def called(self, ctx: Any, per_replica: int, *, epoch: int, role: str) -> Any:
        """The function's dataset for one worker, checked to be one."""
        args = (ctx, per_replica) if self.takes_batch else (ctx,)
        dataset = self.data(*args, epoch=epoch) if self.takes_epoch else self.data(*args)
        return returned_dataset(dataset, self.data, role=role)


PY_DATASET = "keras.utils.PyDataset"
GENERATOR = "Python generator"


# -- the door ----------------------------------------------------------------------------------------
def of(
    x: Any,
    y: Any = None,
    sample_weight: Any = None,
    *,
    role: str,
    model: Any = None,
    shuffle: bool = False,
    labels: bool = True,
) -> Adapter:
    """Keras's (x, y, sample_weight) as an ``Adapter``: what ``Model.fit`` takes, and what a
    ``Task`` holds (an ``Adapter`` passes as it is). ``x`` alone is taken for a model that needs
    no labels (an endpoint layer's ``add_loss``, a custom ``train_step``) and where ``labels``
    is False (``predict``)."""
    if isinstance(x, Adapter):
        return x
    if x is None:
        raise ConfigError(f"{role} is missing", fix=f"pass {role}= arrays, a tf.data.Dataset or a directory")
    made = _batched(x, shuffle=shuffle)
    if made is not None:
        if y is not None or sample_weight is not None:
            raise ConfigError(
                f"y and sample_weight go inside {role} when it is a {made.kind}",
                value=made.kind,
                fix="make the dataset yield (x, y) or (x, y, sample_weight), and pass y=None",
            )
        return made
    return Arrays(_parts(x, y, sample_weight, role=role, needs_labels=labels and _needs_labels(model)))


def _batched(x: Any, *, shuffle: bool) -> Adapter | None:
    """The adapter of data that is not arrays (None: it is arrays, or nothing tfgpu takes)."""
    import keras
    import tensorflow as tf

    if isinstance(x, tf.data.Dataset):
        return Batches(x)
    if isinstance(x, str | os.PathLike):
        return Directory(x)
    if isinstance(x, keras.utils.PyDataset):
        return PythonBatches(x, kind=PY_DATASET, shuffle=shuffle)
    if isinstance(x, types.GeneratorType):
        return PythonBatches(x, kind=GENERATOR, shuffle=False)
    if callable(x) and not hasattr(x, "shape") and not _has_rows(x):
        return Function(x)
    return None


def _parts(x: Any, y: Any, sample_weight: Any, *, role: str, needs_labels: bool) -> tuple[Any, ...]:
    x, y, sample_weight = _tupled(x), _tupled(y), _tupled(sample_weight)
    if y is None and needs_labels:
        raise ConfigError(
            f"{role} is given as arrays without y, and the model's compiled loss needs labels",
            value=type(x).__name__,
            fix="pass y= (the labels), or a tf.data.Dataset of (x, y) batches",
        )
    elif y is None:
        parts: tuple[Any, ...] = (x,)
    else:
        parts = (x, y) if sample_weight is None else (x, y, sample_weight)
    if not all(_has_rows(p) for p in parts):
        raise ConfigError(
            f"{role}, y and sample_weight must be arrays (or dicts, lists or tuples of arrays) with one row per example",
            value=tuple(type(p).__name__ for p in parts),
            fix="pass NumPy arrays, a tf.data.Dataset, a keras.utils.PyDataset or a Python generator",
        )
    return parts


def validation(data: Any, *, model: Any) -> Adapter:
    """Keras's validation_data: (x, y), (x, y, sample_weight), or a dataset/directory/function."""
    if isinstance(data, tuple | list):
        if len(data) not in (2, 3):
            raise ConfigError(
                "validation_data must be (x, y) or (x, y, sample_weight)",
                value=f"{type(data).__name__} of {len(data)}",
                fix="pass validation_data=(x_val, y_val)",
            )
        return of(data[0], data[1], data[2] if len(data) == 3 else None, role="validation_data", model=model)
    return of(data, role="validation_data", model=model)


def for_task(task: Any) -> tuple[Adapter, Adapter | None]:
    """(training, evaluation) data of a ``Task``: the last ``validation_split`` of arrays held
    out, as Keras's fit holds it out."""
    train, held = _task_data(task)
    if not task.validation_split:
        return train, held
    if held is not None:
        raise ConfigError(
            "validation_split and eval_data (validation_data) are both set: one would be ignored",
            value=task.validation_split,
            fix="pass one of them",
        )
    return train.split(task.validation_split)


def through_door(task: Any) -> tuple[Adapter, Adapter | None, list[Any]]:
    """(training data, evaluation data, callbacks to add) of ``task``: its data as adapters,
    each kind decided once for every setup made from it (a tuning's variants too), and a
    PyDataset's epoch hooks where this door made its adapter."""
    train, held = _task_data(task)
    return train, held, [] if isinstance(task.train_data, Adapter) else train.epoch_hooks()


def _task_data(task: Any) -> tuple[Adapter, Adapter | None]:
    train = of_task(task.train_data, role="train_data")
    return train, None if task.eval_data is None else of_task(task.eval_data, role="eval_data")


def of_task(data: Any, *, role: str) -> Adapter:
    """A ``Task``'s data (``Task.train_data``, ``Trainer.evaluate``'s ``data``): arrays come as
    the tuple of their parts, ``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)``."""
    if isinstance(data, tuple | list) and _is_parts(data):
        return Arrays(tuple(_tupled(part) for part in data))
    return of(data, role=role, labels=False)


def returned_dataset(value: Any, fn: Any, *, role: str) -> Any:
    """``value``, what the data function ``fn`` returned, when it is a ``tf.data.Dataset``."""
    import tensorflow as tf

    if not isinstance(value, tf.data.Dataset):
        name = getattr(fn, "__qualname__", repr(fn))
        raise ConfigError(
            f"The {role} function {name} returned {type(value).__name__}, not a tf.data.Dataset",
            value=value if value is None else type(value).__name__,
            fix="return tf.data.Dataset.from_tensor_slices((x, y)).batch(per_replica_batch) "
            "(or pass arrays as train_data=(x, y))",
        )
    return value


def is_dataset(value: Any) -> bool:
    """Whether ``value`` is a ``tf.data.Dataset`` (a dataset source, a function's result)."""
    import tensorflow as tf

    return isinstance(value, tf.data.Dataset)


# -- arrays ------------------------------------------------------------------------------------------
def _is_parts(source: Any) -> bool:
    return len(source) in (1, 2, 3) and all(_has_rows(s) for s in source)


def _has_rows(value: Any) -> bool:
    if isinstance(value, dict):
        return bool(value) and all(_has_rows(v) for v in value.values())
    if isinstance(value, tuple | list):  # several inputs or outputs
        return bool(value) and all(_has_rows(v) for v in value)
    shape = getattr(value, "shape", None)
    return shape is not None and len(shape) >= 1


def array_rows(source: Any) -> int:
    """The rows of an array source; ConfigError naming each part's rows when they differ."""
    import tensorflow as tf

    names = ("x", "y", "sample_weight")
    counts = {}
    for name, part in zip(names, source, strict=False):
        for i, leaf in enumerate(tf.nest.flatten(part)):
            counts[f"{name}[{i}]" if isinstance(part, dict | tuple) else name] = int(leaf.shape[0])
    if len(set(counts.values())) != 1:
        raise ConfigError(
            "The arrays of train_data / eval_data have different numbers of rows",
            value=counts,
            fix="pass x, y (and sample weights) with one row per example each",
        )
    return next(iter(counts.values()))


def _tupled(value: Any) -> Any:
    """Lists as tuples, all the way down: Keras reads a list of arrays as several inputs or
    outputs, and tf.nest then sees one structure for data and specs alike."""
    if isinstance(value, list | tuple):
        return tuple(_tupled(v) for v in value)
    if isinstance(value, dict):
        return {k: _tupled(v) for k, v in value.items()}
    return value


def _needs_labels(model: Any) -> bool:
    """Keras's own ``train_step`` with a compiled loss needs y; a model without a compiled loss
    (``add_loss`` at an endpoint layer) or with its own ``train_step`` may not."""
    import keras

    if model is None:
        return True
    own_step = type(model).train_step is not keras.Model.train_step
    return getattr(model, "_compile_loss", None) is not None and not own_step


def _per_replica(batch_size: int | None, replicas: int) -> int:
    if batch_size is None:
        batch = -(-DEFAULT_BATCH // replicas) * replicas
        if batch != DEFAULT_BATCH:
            choices.record(
                "batch_size",
                batch,
                f"Keras's default of {DEFAULT_BATCH}, rounded up to split over {replicas} replicas",
            )
        return batch // replicas
    if (
        not isinstance(batch_size, int)
        or isinstance(batch_size, bool)
        or batch_size < 1
        or batch_size % replicas
    ):
        raise ConfigError(
            f"batch_size is the global batch and must split evenly over the {replicas} replicas",
            value=batch_size,
            fix=f"pass a multiple of {replicas}, e.g. batch_size={max(1, batch_size // replicas + 1) * replicas}"
            if isinstance(batch_size, int)
            else f"pass a multiple of {replicas}",
        )
    return batch_size // replicas


@dataclasses.dataclass(frozen=True)
class Prediction:
    """What ``tfgpu.predict`` reads: ``dataset``, global batches of x (``packed``: elements as
    Keras's ``predict_step`` unpacks them, x or (x, y...)); ``rows``: the rows that come back
    (None: every row the batches hold); ``global_batch``: the batches' rows, cut into equal,
    contiguous slices over the replicas (None: the data's own batches); ``epoch``: the pass's
    hooks (a PyDataset's)."""

    dataset: Any
    rows: int | None
    global_batch: int | None
    packed: bool
    epoch: Callable[[], Any]

    def batches(self) -> int | None:
        """Batches in all, where known (Keras's progress bar shows "3/8", not "3/Unknown")."""
        return None if self.rows is None else -(-self.rows // self.global_batch)

    def limited(self, steps: int | None) -> Prediction:
        """Up to ``steps`` batches."""
        if steps is None:
            return self
        rows = None if self.rows is None else min(self.rows, steps * self.global_batch)
        return dataclasses.replace(self, dataset=self.dataset.take(steps), rows=rows)


def filled_batches(x: Any, *, rows: int, global_batch: int) -> Any:
    """Global batches of ``x``'s rows gathered by index from tensors made once (no copy of x);
    the last one filled up with rows from the start, cut off again at the end."""
    import tensorflow as tf

    from tfgpu import host
    from tfgpu.data.pipeline import in_memory_options

    with tf.device("/cpu:0"):
        tensors = tf.nest.map_structure(tf.convert_to_tensor, x)
    total = -(-rows // global_batch) * global_batch
    return (
        tf.data.Dataset.range(0, total, global_batch)
        .map(
            lambda start: tf.nest.map_structure(
                lambda t: tf.gather(t, tf.math.floormod(tf.range(start, start + global_batch), rows)), tensors
            ),
            num_parallel_calls=host.cores(),
        )
        .prefetch(tf.data.AUTOTUNE)
        .with_options(in_memory_options(tf))
    )

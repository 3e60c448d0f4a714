"""What the data is, looked at once: Keras's ``get_data_adapter`` shape for tfgpu's loop.

``of`` takes what ``Model.fit`` takes (``x``, ``y``, ``sample_weight``) and returns a ``Source``
that knows its kind: arrays in memory (``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)``, lists
read as structures as Keras reads them), a ``tf.data.Dataset`` of global batches, a tfgpu
dataset directory, a data function ``fn(input_context, per_replica_batch)``, or a
``keras.utils.PyDataset`` or Python generator, read through Keras's own adapter as a Dataset of
its batches (its epoch hooks called per epoch). ``kind_of`` is the one test of a kind the rest
of ``train`` asks (the Trainer's ``Task.train_data`` included); before, 19 tests of kinds stood
in 4 modules and two of them defined ``_is_dataset``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from tfgpu import choices
from tfgpu.errors import ConfigError

ARRAYS = "arrays"
DATASET = "tf.data.Dataset"
DIRECTORY = "dataset directory"
FUNCTION = "data function"
PY_DATASET = "keras.utils.PyDataset"
GENERATOR = "Python generator"
DEFAULT_BATCH = 32  # Keras's


@dataclasses.dataclass(frozen=True)
class Source:
    """A data source of a known ``kind``: ``data`` is what the Trainer's ``Task`` takes (the
    arrays as a tuple of parts, a Dataset, a directory or a function); ``adapter``, Keras's
    adapter behind a PyDataset or generator, told where epochs begin and end."""

    kind: str
    data: Any
    adapter: Any = None

    @property
    def batched(self) -> bool:
        """The data comes in batches of its own (a Dataset, a PyDataset, a generator)."""
        return self.kind in (DATASET, PY_DATASET, GENERATOR)

    def epoch_hooks(self) -> list[Any]:
        """Callbacks that tell a PyDataset's adapter where epochs begin and end."""
        import keras

        if self.adapter is None:
            return []
        adapter = self.adapter

        class PythonSourceEpochs(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                adapter.on_epoch_begin()

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                adapter.on_epoch_end()

        return [PythonSourceEpochs()]

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
        if batch_size is None:
            batch = -(-DEFAULT_BATCH // replicas) * replicas
            if batch != DEFAULT_BATCH:
                choices.record(
                    "batch_size",
                    batch,
                    f"Keras's default of {DEFAULT_BATCH}, rounded up to split over {replicas} replicas",
                )
            return batch // replicas
        if not isinstance(batch_size, int) or batch_size < 1 or batch_size % replicas:
            raise ConfigError(
                f"batch_size is the global batch and must split evenly over the {replicas} replicas",
                value=batch_size,
                fix=f"pass a multiple of {replicas}, e.g. batch_size={max(1, batch_size // replicas + 1) * replicas}"
                if isinstance(batch_size, int)
                else f"pass a multiple of {replicas}",
            )
        return batch_size // replicas


def kind_of(x: Any) -> str | None:
    """The kind of a data source as tfgpu takes it (``Source.data`` or a Task's data), None for
    what is none of them."""
    import tensorflow as tf

    if isinstance(x, tf.data.Dataset):
        return DATASET
    if isinstance(x, str | os.PathLike):
        return DIRECTORY
    if is_arrays(x):
        return ARRAYS
    python = _python_kind(x)
    if python is not None:
        return python
    if callable(x) and not hasattr(x, "shape"):
        return FUNCTION
    return None


def of(
    x: Any, y: Any = None, sample_weight: Any = None, *, role: str, model: Any = None, shuffle: bool = False
) -> Source:
    """Keras's (x, y, sample_weight) as a ``Source``: what ``Model.fit`` takes. ``x`` alone is
    taken for a model that needs no labels (an endpoint layer's ``add_loss``, a custom
    ``train_step``); a PyDataset or generator goes through Keras's own adapter (its workers,
    shuffle and signature)."""
    if x is None:
        raise ConfigError(f"{role} is missing", fix=f"pass {role}= arrays, a tf.data.Dataset or a directory")
    kind = kind_of(x)
    if kind in (DATASET, DIRECTORY, FUNCTION, PY_DATASET, GENERATOR):
        if y is not None or sample_weight is not None:
            raise ConfigError(
                f"y and sample_weight go inside {role} when it is a {kind}",
                value=kind,
                fix="make the dataset yield (x, y) or (x, y, sample_weight), and pass y=None",
            )
        if kind in (PY_DATASET, GENERATOR):
            return _from_python(x, kind=kind, shuffle=shuffle)
        return Source(kind, x)
    x, y, sample_weight = _tupled(x), _tupled(y), _tupled(sample_weight)
    if y is None and not _needs_labels(model):
        parts: tuple[Any, ...] = (x,)
    elif y is None:
        raise ConfigError(
            f"{role} is given as arrays without y, and the model's compiled loss needs labels",
            value=type(x).__name__,
            fix="pass y= (the labels), or a tf.data.Dataset of (x, y) batches",
        )
    else:
        parts = (x, y) if sample_weight is None else (x, y, sample_weight)
    if not is_arrays(parts):
        raise ConfigError(
            f"{role}, y and sample_weight must be arrays (or dicts, lists or tuples of arrays) with one row per example",
            value=tuple(type(p).__name__ for p in parts),
            fix="pass NumPy arrays, a tf.data.Dataset, a keras.utils.PyDataset or a Python generator",
        )
    array_rows(parts)
    return Source(ARRAYS, parts)


def validation(data: Any, *, model: Any) -> Source:
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


def is_arrays(source: Any) -> bool:
    """True for ``(x,)`` / ``(x, y)`` / ``(x, y, w)`` given as arrays (not a path, not a function)."""
    return isinstance(source, tuple | list) and len(source) in (1, 2, 3) and all(_has_rows(s) for s in source)


def _has_rows(value: Any) -> bool:
    if isinstance(value, dict):
        return bool(value) and all(_has_rows(v) for v in value.values())
    if isinstance(value, tuple):  # several outputs' labels
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


def _python_kind(x: Any) -> str | None:
    import types

    import keras

    if isinstance(x, keras.utils.PyDataset):
        return PY_DATASET
    if isinstance(x, types.GeneratorType):
        return GENERATOR
    return None


def _from_python(x: Any, *, kind: str, shuffle: bool) -> Source:
    """A PyDataset or generator as a ``tf.data.Dataset`` of its batches, by Keras's own adapter.

    Its batches are global batches, cut over the replicas as a Dataset's are; the PyDataset's
    ``on_epoch_begin`` / ``on_epoch_end`` are called per epoch (``Source.epoch_hooks``). Its
    workers run in this process, one batch at a time, in Python: said once, since a tf.data
    pipeline (or arrays) feeds a GPU without the interpreter.
    """
    from keras.src.trainers.data_adapters.generator_data_adapter import GeneratorDataAdapter
    from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

    adapter = PyDatasetAdapter(x, shuffle=shuffle) if kind == PY_DATASET else GeneratorDataAdapter(x)
    choices.record(
        "input",
        f"{kind} read through tf.data.Dataset.from_generator (Keras's adapter)",
        "its batches are made in Python; a tf.data pipeline or arrays keep a GPU busier",
    )
    return Source(kind, adapter.get_tf_dataset(), adapter)

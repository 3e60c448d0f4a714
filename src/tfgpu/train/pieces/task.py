"""Task: what to train. Builders are called inside the strategy scope, data functions per worker.

Loss, metrics and optimizer are Keras's own: a Task compiles the model it builds with whatever
``Model.compile`` takes, or takes a model its builder already compiled. tfgpu has no loss or
metric of its own (``tfgpu.train.model.user_model``, ``building``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfgpu.data.options import PipelineOptions
from tfgpu.errors import ConfigError

# fn(input_context, per_replica_batch) -> tf.data.Dataset of (x, y) or (x, y, sample_weight),
# batched by the per-replica batch (built once, iterated each epoch; add an ``epoch`` keyword to be
# called each epoch); a tfgpu dataset directory (its manifest has the label); arrays in memory,
# (x, y) or (x, y, sample_weight), x an array or a dict of arrays; or a ``GlobalBatches`` (a
# tf.data.Dataset of global batches, as Keras's ``fit`` takes it; see tfgpu.train.inputs.readers).
DataSource = Callable[..., Any] | str | os.PathLike | tuple | Any


@dataclass
class Task:
    """What to train.

    Args:
        model: builds the Keras model (called inside the strategy scope). It may return a model it
            compiled itself; then leave ``loss``, ``metrics`` and ``optimizer`` unset.
        loss: anything ``Model.compile`` takes: a Keras name ("binary_crossentropy", "huber"), a
            loss object, fn(y_true, y_pred), or a dict / list with one per output.
        train_data / eval_data: a DataSource (see above).
        optimizer: a Keras optimizer name ("adam", "sgd", "adamw", "rmsprop", ...; with
            ``learning_rate``) or a function that builds one (called in the strategy scope).
        metrics: anything ``Model.compile`` takes ("accuracy", ``keras.metrics.AUC()``, dicts per
            output). Stateful metrics are exact across replicas and workers.
        loss_weights: per-output weights, as ``Model.compile`` takes them.
        from_logits: with a crossentropy loss given by name, the model outputs logits.
        batch_size: per replica; the global batch is this times the replicas.
        steps_per_epoch: training steps per epoch; needed only when the data size cannot be known
            under ParameterServerStrategy, or to cut epochs from an endless dataset.
        pipeline: a ``tfgpu.data.PipelineOptions`` for a dataset directory (cache, augment,
            service, ...); a dict of its fields is taken too. The Trainer sets ``training``,
            ``supervised`` and ``seed`` itself.
        shuffle: shuffle the training data each epoch (arrays and dataset directories alike;
            ``Model.fit``'s ``shuffle``); False keeps the stored order.
        callbacks: Keras callbacks, called as ``Model.fit`` calls them (batch hooks once per
            compiled execution); file-writing callbacks run on the chief only.
        class_weight: {class: weight}, as ``Model.fit`` takes it (one output only).
        validation_split: the last fraction of arrays given in memory becomes ``eval_data``.
    """

    model: Callable[[], Any]
    loss: Any = None
    train_data: DataSource | None = None
    eval_data: DataSource | None = None
    optimizer: str | Callable[[], Any] = "adam"
    learning_rate: float = 1e-3
    metrics: Any = ()
    loss_weights: Any = None
    batch_size: int = 32
    from_logits: bool = False
    steps_per_epoch: int | None = None
    seed: int = 0
    pipeline: PipelineOptions | None = None
    shuffle: bool = True
    callbacks: Sequence[Any] = ()
    class_weight: dict[Any, float] | None = None
    validation_split: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.pipeline, Mapping):  # taken at the edge, typed from here on
            self.pipeline = PipelineOptions.of(self.pipeline)
        elif self.pipeline is not None and not isinstance(self.pipeline, PipelineOptions):
            raise ConfigError(
                "Task.pipeline must be a tfgpu.data.PipelineOptions",
                value=type(self.pipeline).__name__,
                fix="pass pipeline=tfgpu.data.PipelineOptions(cache='off', augment=...)",
            )
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(
                "Task.batch_size (per replica) must be a whole number of at least 1",
                value=self.batch_size,
                fix="pass batch_size=32",
            )
        if not callable(self.model):
            raise ConfigError(
                "Task.model must be a function that builds the model",
                value=self.model,
                fix="pass model=lambda: keras.Sequential([...]) so it is built inside the strategy scope",
            )
        if self.train_data is None:
            raise ConfigError(
                "Task.train_data is missing",
                fix="pass train_data=(x, y), a dataset directory or fn(input_context, per_replica_batch)",
            )
        if self.steps_per_epoch is not None and (
            not isinstance(self.steps_per_epoch, int) or self.steps_per_epoch < 1
        ):
            raise ConfigError(
                "Task.steps_per_epoch must be a whole number of at least 1",
                value=self.steps_per_epoch,
                fix="pass steps_per_epoch=100, or leave it unset to run each epoch to the data's end",
            )
        if not isinstance(self.validation_split, int | float) or not 0.0 <= self.validation_split < 1.0:
            raise ConfigError(
                "validation_split must be a fraction from 0 up to (not including) 1",
                value=self.validation_split,
                fix="pass validation_split=0.2",
            )
        if self.loss is not None:
            resolve_loss(self.loss, from_logits=self.from_logits)


def resolve_loss(loss: Any, *, from_logits: bool = False) -> Any:
    """``loss`` as ``Model.compile`` takes it, each Keras name checked now (compile checks later).

    ``from_logits`` turns a crossentropy given by name into its loss object with logits on.
    """
    import keras

    if isinstance(loss, dict):
        return {k: resolve_loss(v, from_logits=from_logits) for k, v in loss.items()}
    if isinstance(loss, list | tuple):
        return [resolve_loss(v, from_logits=from_logits) for v in loss]
    if not isinstance(loss, str):
        return loss
    try:
        keras.losses.get(loss)
    except ValueError:
        raise ConfigError(
            "Keras does not know this loss",
            value=loss,
            fix="use a name from keras.losses (e.g. 'binary_crossentropy', 'huber', 'mse'), a loss object or fn(y_true, y_pred)",
        ) from None
    if not from_logits:
        return loss
    name = "".join(part.capitalize() for part in loss.split("_"))
    if "crossentropy" not in loss.lower():
        raise ConfigError(
            "from_logits applies to crossentropy losses only",
            value=loss,
            fix="leave from_logits unset, or pass a loss object",
        )
    return keras.losses.get({"class_name": name, "config": {"from_logits": True}})


def make_optimizer(spec: Any, *, learning_rate: float) -> Any:
    """A Keras optimizer from a name (with ``learning_rate``), a builder, or an optimizer object."""
    import keras

    if isinstance(spec, keras.optimizers.Optimizer):
        return spec
    if callable(spec):
        return spec()
    try:
        return keras.optimizers.get({"class_name": str(spec), "config": {"learning_rate": learning_rate}})
    except ValueError:
        raise ConfigError(
            "Keras does not know this optimizer",
            value=spec,
            fix="use a name from keras.optimizers ('adam', 'sgd', 'adamw', 'rmsprop', ...) or a builder function",
        ) from None

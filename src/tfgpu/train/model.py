"""The user's Keras model as tfgpu takes it: made from a Task and compiled, checked compiled,
readied for remat, and what the loops must know of it (the weights it looks up by index, the
counters that must add atomically under ParameterServerStrategy).

tfgpu trains with the model's own ``train_step`` / ``test_step`` inside ``strategy.run``, so the
compiled loss, metrics, optimizer (incl. learning-rate schedules and the LossScaleOptimizer Keras
adds under ``mixed_float16``), regularization losses and a user's ``train_step`` override apply as
under ``Model.fit``. Where the model runs is ``placement``'s (how it moves there, ``rehoming``'s);
its state made before the first step, ``building``'s.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tfgpu.errors import ConfigError
from tfgpu.train import model_cache, remat

if TYPE_CHECKING:
    from tfgpu.train.task import Task

log = logging.getLogger(__name__)


def from_task(task: Task) -> Any:
    """Call ``task.model()`` (in the caller's strategy scope) and compile it with the Task's loss."""
    from tfgpu.train.task import make_optimizer, resolve_loss

    model = task.model()
    if _is_keras_model(model):
        ready_remat(model)  # a RematScope model fails in a compiled step without it
    if not _is_keras_model(model):
        raise ConfigError(
            "Task.model must return a Keras model",
            value=type(model).__name__,
            fix="return keras.Sequential([...]) or a keras.Model",
        )
    if model.compiled:
        if task.loss is not None:
            raise ConfigError(
                "Task.model returned a compiled model and Task.loss is set too: one of them would be ignored",
                value=task.loss,
                fix="leave Task.loss (and metrics, optimizer) unset, or return the model uncompiled",
            )
        return model
    if task.loss is None:
        raise ConfigError(
            "Task.model returned a model that is not compiled, and Task.loss is not set",
            fix="set Task.loss (e.g. loss='sparse_categorical_crossentropy'), or compile the model in Task.model",
        )
    model.compile(
        optimizer=make_optimizer(task.optimizer, learning_rate=task.learning_rate),
        loss=resolve_loss(task.loss, from_logits=task.from_logits),
        metrics=task.metrics or None,
        loss_weights=task.loss_weights,
    )
    return model


def _is_keras_model(model: Any) -> bool:
    import keras

    return isinstance(model, keras.Model)


def check_compiled(model: Any, *, call: str) -> None:
    if not _is_keras_model(model):
        raise ConfigError(f"{call} takes a Keras model", value=type(model).__name__, fix="pass a keras.Model")
    if not model.compiled:
        raise ConfigError(
            f"{call} needs a compiled model, and this one is not compiled",
            value=model.name,
            fix="call model.compile(optimizer=..., loss=..., metrics=...) first, inside strategy.scope()",
        )
    ready_remat(model)


def ready_remat(model: Any) -> None:
    """Keras's TensorFlow ``remat`` fails in a compiled step (keras-team/keras#21207): the working
    one (``remat.install``) goes in when the model was built for remat, and only then."""
    if model_cache.uses_remat(model):
        remat.install()


def looked_up(model: Any) -> set[str]:
    """The paths of the trainable weights an ``Embedding`` (in any sub-layer: keras-io's
    ``PositionEmbedding``) looks up by index: their gradients are IndexedSlices."""
    import keras

    return {
        v.path
        for layer in model._flatten_layers()
        if isinstance(layer, keras.layers.Embedding)
        for v in layer.trainable_variables
    }


def atomic_counters(model: Any) -> int:
    """Make the model's metric variables and the optimizer's step counter add atomically.

    Keras adds with a read then an assign (``KerasVariable.assign_add``); under
    ParameterServerStrategy, steps scheduled side by side on several workers then lose updates
    (measured: 50 ``optimizer.iterations`` for 60 steps on 2 workers, and metric counts short the
    same way). TensorFlow's own ``assign_add`` is one op on the parameter server, so these
    variables get it instead. Returns how many were changed.
    """
    import tensorflow as tf

    variables = [*model.metrics_variables]
    if model.optimizer is not None:
        variables.append(model.optimizer.iterations)
    for variable in variables:
        inner = getattr(variable, "_value", None)
        if inner is None:  # not a Keras TF-backend variable: leave it
            continue

        def add(value: Any, inner: Any = inner) -> Any:
            return inner.assign_add(tf.cast(value, inner.dtype))

        def sub(value: Any, inner: Any = inner) -> Any:
            return inner.assign_sub(tf.cast(value, inner.dtype))

        object.__setattr__(variable, "assign_add", add)
        object.__setattr__(variable, "assign_sub", sub)
    return len(variables)

"""The user's Keras model as tfgpu takes it: made from a Task and compiled, or accepted as given
(compiled, no ``fit`` of its own that tfgpu would skip), its own ``evaluate`` / ``predict``
called as the user's call would, readied for remat, and the weights the loops must know it
looks up by index.

tfgpu trains with the model's own ``train_step`` / ``test_step`` inside ``strategy.run``, so the
compiled loss, metrics, optimizer (incl. learning-rate schedules and the LossScaleOptimizer Keras
adds under ``mixed_float16``), regularization losses and a user's ``train_step`` override apply as
under ``Model.fit``. Where the model runs is ``placement``'s (how it moves there, ``rehoming``'s);
its state made before the first step, ``building``'s.

A subclass's override of ``fit``, ``evaluate`` or ``predict`` was skipped silently, since tfgpu
runs Keras's contract (the steps), not the public methods: keras-io's multi_label_classification
exports ``class ModelEndtoEnd(keras.Model): def predict(self, inputs): ... return
super().predict(indices)`` and calls it on raw strings; ``tfgpu.predict`` ran the network on the
strings and failed with an input-shape error that did not say why, and a model whose ``predict``
post-processed its outputs got other numbers than ``model.predict`` (86.4 apart), silently
(issue 68). So ``tfgpu.predict`` and ``tfgpu.evaluate`` call the override, as the user's own
call would (it may call Keras's, on the model's strategy), and say so; ``tfgpu.fit`` refuses an
override of ``fit`` with one message naming it: skipping it would train something else.
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

from tfgpu.errors import ConfigError
from tfgpu.train.pieces import model_cache, remat

if TYPE_CHECKING:
    from tfgpu.train.pieces.task import Task

log = logging.getLogger(__name__)


def from_task(task: Task) -> Any:
    """Call ``task.model()`` (in the caller's strategy scope) and compile it with the Task's loss."""
    from tfgpu.train.pieces.task import make_optimizer, resolve_loss

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


def accepted(model: Any, *, call: str) -> None:
    """``model`` as ``call`` (``"tfgpu.fit"``, ``"tfgpu.evaluate"``) takes it, or one message
    saying why not: a compiled Keras model (readied for remat), with no ``fit`` of its own for
    tfgpu.fit to skip."""
    if not _is_keras_model(model):
        raise ConfigError(f"{call} takes a Keras model", value=type(model).__name__, fix="pass a keras.Model")
    if call == "tfgpu.fit":
        _refuse_fit(model)
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


def override(model: Any, name: str) -> str | None:
    """``"Class.name (file:line)"`` when ``model``'s class overrides Keras's ``Model.<name>``
    (Keras's own classes aside), else None."""
    import keras

    own = getattr(type(model), name, None)
    if own is None or own is getattr(keras.Model, name) or (own.__module__ or "").startswith("keras"):
        return None
    try:
        where = f" ({inspect.getsourcefile(own)}:{inspect.getsourcelines(own)[1]})"
    except (OSError, TypeError):  # defined where its source cannot be read (a notebook's cell)
        where = ""
    return f"{type(model).__name__}.{name}{where}"


# Keras's defaults of the keywords tfgpu passes on: left out, so the override's own apply
_KERAS_DEFAULTS = {"verbose": "auto", "return_dict": False}


def called(model: Any, name: str, *args: Any, **asked: Any) -> Any:
    """The override ``name`` of ``model`` called on ``args`` with the keywords of ``asked`` the
    user set (None and Keras's defaults left out) that it takes, as the user's own call would be."""
    given = {k: v for k, v in asked.items() if v is not None and _KERAS_DEFAULTS.get(k) != v}
    method = getattr(model, name)
    parameters = inspect.signature(method).parameters.values()
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    names = {p.name for p in parameters}
    log.warning(
        "%s overrides Keras's %s: tfgpu.%s calls it, as model.%s(...) would (on the model's "
        "strategy, where it calls Keras's)",
        override(model, name),
        name,
        name,
        name,
    )
    return method(*args, **{k: v for k, v in given.items() if takes_any or k in names})


def _refuse_fit(model: Any) -> None:
    """One message when ``model`` overrides ``fit``: ``tfgpu.fit`` would skip it."""
    found = override(model, "fit")
    if found is not None:
        raise ConfigError(
            f"{found} overrides Keras's fit, which tfgpu.fit does not call (it runs the model's "
            "train_step in its own loop)",
            value=found,
            fix="move the override's work into train_step (or before the call), or call model.fit(...)",
        )

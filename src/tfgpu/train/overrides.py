"""A model's own ``fit``, ``evaluate`` or ``predict``: what tfgpu does with a subclass's override.

tfgpu runs Keras's contract (``train_step``, ``test_step``, ``predict_step``), not the public
methods, so an override of them was skipped silently: keras-io's multi_label_classification
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
from typing import Any

from tfgpu.errors import ConfigError

log = logging.getLogger(__name__)


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
KERAS_DEFAULTS = {"verbose": "auto", "return_dict": False}


def called(model: Any, name: str, *args: Any, **asked: Any) -> Any:
    """The override ``name`` of ``model`` called on ``args`` with the keywords of ``asked`` the
    user set (None and Keras's defaults left out) that it takes, as the user's own call would be."""
    given = {k: v for k, v in asked.items() if v is not None and KERAS_DEFAULTS.get(k) != v}
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


def refuse_fit(model: Any) -> None:
    """One message when ``model`` overrides ``fit``: ``tfgpu.fit`` would skip it."""
    found = override(model, "fit")
    if found is not None:
        raise ConfigError(
            f"{found} overrides Keras's fit, which tfgpu.fit does not call (it runs the model's "
            "train_step in its own loop)",
            value=found,
            fix="move the override's work into train_step (or before the call), or call model.fit(...)",
        )

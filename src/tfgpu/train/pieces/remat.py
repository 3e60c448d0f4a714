"""Rematerialization (gradient checkpointing) that trains in a compiled step, under any strategy.

Keras marks a layer for remat with ``keras.RematScope`` (the layer's ``_remat_mode``) and wraps
its call in ``backend.core.remat`` = ``tf.recompute_grad``. Two things break on TensorFlow:

- the call goes through with keyword arguments (``training=``), and ``tf.custom_gradient``
  refuses those outside eager execution: a RematScope model fails in a compiled ``fit`` even on
  one device (keras-team/keras#21207);
- the forward pass runs again for the gradient, so a layer's state changes twice: a
  BatchNormalization's moving statistics are updated twice and a Dropout's seed moves on, its
  recomputed mask not the one the forward pass used (weights off by 1e-2 after 8 steps).

``install()`` replaces the backend's ``remat`` with one that recomputes a pure function: the
layer's call with its tensors passed positionally (the rest closed over), its weights passed in
as tensors read once before the forward pass, and its other state (statistics, seeds) mapped in a
``StatelessScope`` as it was before the forward pass. Neither pass reads or writes a variable:
the recomputation draws the forward pass's Dropout masks, and what the forward pass wrote (the
statistics, the seeds moved on) is assigned once, after, as the layer itself would have. The
weights equal those trained without remat on any number of replicas. (Recomputing with the layer
reading its variables itself, writes dropped, trained 2 replicas to other weights now and then,
one run in 5 to 20 under load: a recomputation's reads raced the replicas' updates; the pure
function was equal to the bit in 60 of 60.)

``for_run(model, remat)`` turns remat on for a model built without it, for one run: ``"full"``
(every layer), ``"activations"`` (each layer's activation function) or ``"largest"`` (the layers
with the largest outputs, together at least half of the activations' size).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

from tfgpu import choices
from tfgpu.errors import ConfigError
from tfgpu.train.pieces.layers import leaf_layers

_INSTALLED = False


def install() -> None:
    """Make Keras's TensorFlow ``remat`` work in a compiled step (once per process)."""
    global _INSTALLED
    if _INSTALLED:
        return
    from keras.src.backend.tensorflow import core

    core.remat = remat
    _INSTALLED = True


def remat(f: Any) -> Any:
    """``tf.recompute_grad(f)`` over a pure function: keyword and non-tensor arguments closed
    over, the layer's weights passed in as tensors, its state written after (module docstring)."""
    owner = owner_of(f)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        import tensorflow as tf

        flat = tf.nest.flatten((args, kwargs))
        where = [i for i, value in enumerate(flat) if tf.is_tensor(value)]
        if owner is None:  # a function (an activation): nothing to map, nothing written
            return tf.recompute_grad(lambda *t: _call(f, args, kwargs, flat, where, t))(
                *[flat[i] for i in where]
            )
        weights, state = _variables(owner)
        pure, after = _pure(f, args, kwargs, flat, where, weights, state)
        outputs, losses = tf.recompute_grad(pure)(*[flat[i] for i in where], *_read(weights))
        after(owner, losses)
        return outputs

    return wrapped


def owner_of(f: Any) -> Any:
    """The layer whose call ``f`` is, through wrappers made with ``functools.wraps`` (a split
    places each layer's call under its device so); None for a plain function. A layer missed here
    would read its own variables in the recomputation, which raced the optimizer's updates: a
    split over 3 devices trained to weights 2e-3 off one device's, now and then, under load."""
    import inspect

    return getattr(inspect.unwrap(f, stop=lambda g: hasattr(g, "__self__")), "__self__", None)


def _pure(
    f: Any, args: Any, kwargs: Any, flat: list[Any], where: list[int], weights: list[Any], state: list[Any]
):
    """``f`` as a function of (the tensor arguments, the weights' values) -> (outputs, losses),
    reading nothing and writing nothing: the state as it was before the forward pass is mapped in
    (the recomputation draws the forward's Dropout masks), and what the forward pass wrote (a
    BatchNormalization's statistics, the seeds moved on) is assigned by ``after``, once."""
    from keras.src import backend

    before = _read(state)
    written: list[tuple[Any, Any]] = []
    forward: list[Any] = []

    def pure(*tensors: Any) -> Any:
        mapping = list(zip(weights + state, list(tensors[len(where) :]) + before, strict=True))
        with backend.StatelessScope(state_mapping=mapping, collect_losses=True) as scope:
            outputs = _call(f, args, kwargs, flat, where, tensors[: len(where)])
        if not forward:  # the forward pass: its writes are kept, the recomputation's dropped
            forward.append(1)
            for variable, old in zip(state, before, strict=True):
                new = scope.get_current_value(variable)
                if new is not old:
                    written.append((variable, new))
        return outputs, list(scope.losses)

    def after(owner: Any, losses: list[Any]) -> None:
        for variable, new in written:
            variable.assign(new)
        for loss in losses:
            owner.add_loss(loss)

    return pure, after


def _call(f: Any, args: Any, kwargs: Any, flat: list[Any], where: list[int], tensors: Any) -> Any:
    """``f(*args, **kwargs)`` with the tensors at ``where`` (in ``flat``) replaced by ``tensors``."""
    import tensorflow as tf

    values = list(flat)
    for i, tensor in zip(where, tensors, strict=True):
        values[i] = tensor
    a, k = tf.nest.pack_sequence_as((args, kwargs), values)
    return f(*a, **k)


def _variables(owner: Any) -> tuple[list[Any], list[Any]]:
    """``owner``'s (a layer's, its layers' included) trainable weights, and the rest of its state
    (a BatchNormalization's statistics, seed generators' states); none for a plain function."""
    if owner is None or not hasattr(owner, "variables"):
        return [], []
    trainable = list(owner.trainable_variables)
    ids = {id(v) for v in trainable}
    return trainable, [v for v in owner.variables if id(v) not in ids]


def _read(variables: list[Any]) -> list[Any]:
    """The variables' values now, as tensors, uncast (the layer's own reads inside cast them as
    the autocast scope says), seen through an enclosing stateless scope (a nested remat)."""
    import tensorflow as tf
    from keras.src import backend

    with backend.AutocastScope(None):
        return [tf.convert_to_tensor(v.value) for v in variables]


def copy_modes(model: Any, clone: Any) -> None:
    """``model``'s remat modes onto its clone, layer by layer (``clone_model`` drops them)."""
    ours = list(model._flatten_layers(include_self=True))
    theirs = list(clone._flatten_layers(include_self=True))
    for layer, copy in zip(ours, theirs, strict=False):
        _set(copy, getattr(layer, "_remat_mode", None))


@contextlib.contextmanager
def for_run(model: Any, mode: str) -> Iterator[None]:
    """Remat on ``model``'s layers in ``mode`` for the ``with`` block, restored after (a model
    built in ``keras.RematScope`` needs no run mode: ``model.ready_remat`` installs the working
    ``remat`` for it)."""
    everything = list(model._flatten_layers(include_self=True))
    saved = {id(layer): getattr(layer, "_remat_mode", None) for layer in everything}
    install()
    layers = _leaves(model)
    chosen = _choose(model, layers, mode)
    from keras.src.backend.common.remat import RematMode

    keras_mode = "activations" if mode == "activations" else "full"
    for layer in chosen:
        _set(layer, RematMode(keras_mode, 0, []))
    choices.record("remat", mode, f"{len(chosen)} of {len(layers)} layers recomputed in the backward pass")
    try:
        yield
    finally:
        for layer in everything:
            _set(layer, saved[id(layer)])


def _set(layer: Any, mode: Any) -> None:
    object.__setattr__(layer, "_remat_mode", mode)  # Keras's tracker would wrap the tuple


def _leaves(model: Any) -> list[Any]:
    layers = leaf_layers(model)
    if not layers:
        raise ConfigError(
            f"remat needs a model made of Keras layers, and {model.name} has none",
            value=type(model).__name__,
            fix="wrap the computation to recompute in a keras.layers.Layer, or call keras.remat(fn) inside call()",
        )
    return layers


def _choose(model: Any, layers: list[Any], mode: str) -> list[Any]:
    if mode != "largest":
        return layers
    sizes = {id(layer): _output_size(model, layer) for layer in layers}
    total = sum(sizes.values())
    chosen, covered = [], 0
    for layer in sorted(layers, key=lambda layer: -sizes[id(layer)]):
        if covered >= total / 2:
            break
        chosen.append(layer)
        covered += sizes[id(layer)]
    return chosen


def _output_size(model: Any, layer: Any) -> int:
    """Elements per example of ``layer``'s output in ``model`` (a functional or Sequential model)."""
    import tensorflow as tf

    try:
        outputs = layer.output
    except (AttributeError, ValueError):
        raise ConfigError(
            f"remat='largest' needs the layers' output shapes, and layer {layer.name!r} of "
            f"{model.name} has none (a subclassed model's layers have no symbolic outputs)",
            value=type(model).__name__,
            fix="pass remat='full', or build the model with the functional API or Sequential",
        ) from None
    return sum(math.prod(d or 1 for d in t.shape[1:]) for t in tf.nest.flatten(outputs))

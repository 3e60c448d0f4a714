"""Rematerialization (gradient checkpointing) that trains in a compiled step, under any strategy.

Keras marks a layer for remat with ``keras.RematScope`` (the layer's ``_remat_mode``) and wraps
its call in ``backend.core.remat`` = ``tf.recompute_grad``. Two things break on TensorFlow:

- the call goes through with keyword arguments (``training=``), and ``tf.custom_gradient``
  refuses those outside eager execution: a RematScope model fails in a compiled ``fit`` even on
  one device (keras-team/keras#21207);
- the forward pass runs again for the gradient, so a layer's state changes twice: a
  BatchNormalization's moving statistics are updated twice and a Dropout's seed moves on, its
  recomputed mask not the one the forward pass used (weights off by 1e-2 after 8 steps).

``install()`` replaces the backend's ``remat`` with one that passes only tensors positionally
(the rest closed over) and runs the recomputation in a ``StatelessScope`` holding the layer's
seed states as they were before the forward pass: its writes (a BatchNormalization's statistics,
the seeds moving on) go nowhere, its masks are the forward pass's, and the weights equal those
trained without remat. (Holding the statistics too, read before the forward pass's update, made
2 replicas differ now and then: only the seeds are read back; and on several replicas a layer
with statistics is not recomputed at all, see ``for_run``.)

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

MODES = ("full", "activations", "largest")
_INSTALLED = False


def mode_of(remat: Any) -> str | None:
    """``remat`` as given to ``tfgpu.fit`` (None/False, True, or a mode) checked, as a mode."""
    if remat is None or remat is False:
        return None
    if remat is True:
        return "full"
    if remat in MODES:
        return remat
    raise ConfigError(
        "remat must be True, 'full', 'activations' or 'largest'",
        value=remat,
        fix="pass remat=True (every layer), or build the model in keras.RematScope(...) for Keras's other modes",
    )


def install() -> None:
    """Make Keras's TensorFlow ``remat`` work in a compiled step (once per process)."""
    global _INSTALLED
    if _INSTALLED:
        return
    from keras.src.backend.tensorflow import core

    core.remat = remat
    _INSTALLED = True


def install_for(model: Any) -> None:
    """``install()`` when ``model`` was built for remat (Keras's own fails in a compiled step)."""
    if not _INSTALLED and uses_remat(model):
        install()


def remat(f: Any) -> Any:
    """``tf.recompute_grad(f)``, taking keyword and non-tensor arguments, recomputed with the
    state ``f``'s layer had before the forward pass (see the module docstring)."""
    owner = getattr(f, "__self__", None)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        import tensorflow as tf
        from keras.src import backend

        flat = tf.nest.flatten((args, kwargs))
        where = [i for i, value in enumerate(flat) if tf.is_tensor(value)]
        state = _seeds(owner)
        before = [tf.identity(v.value) for v in state]
        calls: list[int] = []

        def positional(*tensors: Any) -> Any:
            values = list(flat)
            for i, tensor in zip(where, tensors, strict=True):
                values[i] = tensor
            a, k = tf.nest.pack_sequence_as((args, kwargs), values)
            if calls and owner is not None:  # the recomputation: the forward's seeds, nothing written
                with backend.StatelessScope(state_mapping=list(zip(state, before, strict=True))):
                    return f(*a, **k)
            calls.append(1)
            return f(*a, **k)

        return tf.recompute_grad(positional)(*[flat[i] for i in where])

    return wrapped


def _seeds(owner: Any) -> list[Any]:
    """The seed generators' states of ``owner`` (a layer) and its layers: what the recomputation
    must read as the forward pass did (a Dropout's mask). Other state (a BatchNormalization's
    statistics) is only written, and the recomputation's writes are dropped."""
    if owner is None or not hasattr(owner, "_flatten_layers"):
        return []
    return [
        generator.state
        for layer in owner._flatten_layers(include_self=True)
        for generator in getattr(layer, "_seed_generators", [])
    ]


def uses_remat(model: Any) -> bool:
    """Whether any layer of ``model`` (or the model) was built for remat."""
    return any(getattr(layer, "_remat_mode", None) for layer in model._flatten_layers(include_self=True))


def signature(model: Any) -> tuple[Any, ...]:
    """The layers' remat modes: a compiled step traced with other modes is another step."""
    return tuple(getattr(layer, "_remat_mode", None) for layer in model._flatten_layers(include_self=True))


def copy_modes(model: Any, clone: Any) -> None:
    """``model``'s remat modes onto its clone, layer by layer (``clone_model`` drops them)."""
    ours = list(model._flatten_layers(include_self=True))
    theirs = list(clone._flatten_layers(include_self=True))
    for layer, copy in zip(ours, theirs, strict=False):
        _set(copy, getattr(layer, "_remat_mode", None))


@contextlib.contextmanager
def for_run(model: Any, mode: str | None, *, replicas: int = 1) -> Iterator[None]:
    """Remat on ``model``'s layers in ``mode`` for the ``with`` block, restored after; installs
    the working ``remat`` whenever the model uses remat at all. On several replicas a model that
    keeps state anywhere (a BatchNormalization's statistics, a Dropout's seed) is not recomputed:
    recomputing its layers there trained to other weights now and then (0.02-0.15 apart, one run
    in several, under load; stateful layers kept whole did not stop it), so its activations are
    kept; said once. A model without state is recomputed on every replica."""
    everything = list(model._flatten_layers(include_self=True))
    saved = {id(layer): getattr(layer, "_remat_mode", None) for layer in everything}
    if mode is not None:
        install()
        layers = _leaves(model)
        chosen = _choose(model, layers, mode)
        from keras.src.backend.common.remat import RematMode

        keras_mode = "activations" if mode == "activations" else "full"
        for layer in chosen:
            _set(layer, RematMode(keras_mode, 0, []))
        choices.record(
            "remat", mode, f"{len(chosen)} of {len(layers)} layers recomputed in the backward pass"
        )
    else:
        install_for(model)
    kept = _keep_statistics(everything) if replicas > 1 else []
    if kept:
        choices.record(
            "remat.kept",
            ", ".join(layer.name for layer in kept),
            "a model with state (statistics, seeds) is not recomputed on several replicas yet",
        )
    try:
        yield
    finally:
        for layer in everything:
            _set(layer, saved[id(layer)])


def _keep_statistics(layers: list[Any]) -> list[Any]:
    """On several replicas, a model holding state (statistics, seeds) anywhere is not recomputed
    at all: clear every layer's remat mode; return the layers that had one."""
    if not any(layer.non_trainable_variables for layer in layers):
        return []
    kept = [layer for layer in layers if getattr(layer, "_remat_mode", None) is not None]
    for layer in kept:
        _set(layer, None)
    return kept


def _set(layer: Any, mode: Any) -> None:
    object.__setattr__(layer, "_remat_mode", mode)  # Keras's tracker would wrap the tuple


def _leaves(model: Any) -> list[Any]:
    from tfgpu.train.model import leaf_layers

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

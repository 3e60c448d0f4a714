"""Where a user's model runs: one rule for ``tfgpu.fit``, ``evaluate``, ``predict``, the
Trainer, tuning's copies, the replica proof and diagnose, and how its state comes back.

``place`` decides (the model's own strategy; tfgpu's choice for a model from no scope; a model
from no scope moved into the strategy passed, in place where it can be; a split over several
devices per replica) and returns a frozen ``Placement``; ``copy_in`` makes a copy in a strategy
and a dtype policy (tuning's trials, a run switched to one device or to mixed precision),
``transfer`` and ``give_back`` carry a copy's weights and optimizer state back, ``moved_in``
moves what a step built outside the scope into it, ``lent`` lends a model's variables
(``step_variables``) to another strategy for a while (the proof's one device). The mechanics
live beneath, in ``rehoming`` (moves and copies) and ``split`` (a split's copy); nothing else
moves a model, assigns Keras's private strategy attributes or copies optimizer state, and
``tests/test_fit_path.py`` holds every entry to them to this module.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from tfgpu import distribute
from tfgpu.errors import ConfigError
from tfgpu.text import error_line
from tfgpu.train.model import split
from tfgpu.train.model.rehoming import (
    adopt_optimizer,
    back,
    copy,
    graph_of_layers,
    input_shape,
    metric_state,
    optimizer_keys,
    optimizers,
    optimizers_of,
    recreate,
    rehome,
    rehomed,
    rekey_optimizer,
    sent_home,
    transfer,
)
from tfgpu.train.pieces import model_cache

__all__ = [
    "Placement",
    "copy_in",
    "give_back",
    "handed_back",
    "lent",
    "moved_in",
    "place",
    "step_variables",
    "transfer",
]


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a model runs: ``strategy``, and ``model``, the object that runs under it (the
    user's own, or its copy when it could not be moved in place: ``give_back`` then carries the
    copy's state to the user's model)."""

    strategy: Any
    model: Any


def _owner(model: Any) -> Any | None:
    """The strategy whose scope the model was created in, or the one tfgpu moved it into (also
    once ``sent_home``); None: no strategy's."""
    return getattr(model, "_distribute_strategy", None) or model_cache.moved_to(model)


def _fits(model: Any, strategy: Any) -> bool:
    """True when ``model`` can run under ``strategy`` as it is."""
    import tensorflow as tf

    made_in = _owner(model)
    if made_in is not None:
        return made_in is strategy
    # a model made outside any scope has plain variables: the default strategy runs it
    return strategy is tf.distribute.get_strategy()


def place(
    model: Any,
    strategy: Any = None,
    *,
    choose: Callable[[], Any] | None = None,
    split_as: Any = None,
    global_batch: int = 0,
    x_shape: tuple[Any, ...] | None = None,
) -> Placement:
    """Where ``model`` runs (a ``Placement``): the one rule ``tfgpu.fit``, ``evaluate``,
    ``predict``, the Trainer (its ``Task.model``, made in the scope), tuning and diagnose place
    a model by. It may move ``model``: in place, into the strategy's scope.

    ``x_shape`` (the data's, ``adapters.Adapter.x_shape``): a Sequential without ``Input`` is
    built for it first, as Keras's ``fit`` builds it at its first batch. ``split_as`` (an
    ``options.Placement`` asking ``devices_per_replica``): a copy split over each replica's
    devices, its stages weighed at ``global_batch`` (``train.model.split``). Unasked, the model's own
    strategy; for a model from no scope, ``choose()`` (tfgpu's choice) when it gives several
    replicas or workers, else TensorFlow's default strategy, which runs the model as it is. A
    model made outside ``strategy``'s scope is moved into it in place (``recreate``: ``rehome``,
    or a copy where it cannot); one made in another strategy's scope is refused, with the fix. A
    model tfgpu moved before moves again what was made since (a re-compile's metrics); an unused
    optimizer made outside the scope (a second ``compile``) is made again in it."""
    if x_shape is not None:
        _build_for_data(model, x_shape)
    if split_as is not None and split_as.splits:
        return _split(model, split_as, strategy=strategy, global_batch=global_batch)
    placed = _decided(model, strategy, choose)
    if _optimizer_made_elsewhere(placed.model, placed.strategy):
        adopt_optimizer(placed.model, placed.strategy)
    return placed


def _optimizer_made_elsewhere(model: Any, strategy: Any) -> bool:
    """Whether an optimizer the model holds is unused and was made under another strategy than
    ``strategy`` (``rehoming.adopt_optimizer`` makes it again in the scope)."""
    import keras

    return any(
        isinstance(o, keras.optimizers.Optimizer)
        and not o.built
        and getattr(o, "_distribution_strategy", strategy) is not strategy
        for o in vars(model).values()
    )


def _decided(model: Any, strategy: Any, choose: Callable[[], Any] | None) -> Placement:
    import tensorflow as tf

    made_in = _owner(model)
    if strategy is None and made_in is not None:
        strategy = made_in
    elif strategy is None:
        chosen = choose() if choose is not None else None
        if chosen is None or (int(chosen.num_replicas_in_sync) == 1 and not distribute.spans_workers(chosen)):
            return Placement(tf.distribute.get_strategy(), model)
        strategy = chosen
    if _fits(model, strategy):
        if rehomed(model):
            rehome(model, strategy)
        return Placement(strategy, model)
    if made_in is not None and not rehomed(model):
        raise ConfigError(
            f"The model was created in the scope of a {type(made_in).__name__}, not of the "
            f"{type(strategy).__name__} passed",
            value=type(strategy).__name__,
            fix="pass the strategy the model was created under, or leave strategy unset",
        )
    return Placement(strategy, recreate(model, strategy))


def _split(model: Any, asked: Any, *, strategy: Any, global_batch: int) -> Placement:
    if not model.built:
        raise ConfigError(
            "devices_per_replica splits a built model, and this one is not built",
            value=model.name,
            fix="give the model a keras.Input (or call model.build(input_shape)) before it is split",
        )
    strategy, copy = split.placed(
        model,
        devices_per_replica=asked.devices_per_replica or 1,
        micro_batches=asked.micro_batches,
        strategy=strategy,
        batch=global_batch // split.replicas(asked, strategy=strategy),
    )
    return Placement(strategy, copy)


@contextlib.contextmanager
def handed_back(model: Any) -> Iterator[None]:
    """What a verb of tfgpu's (``fit``, ``evaluate``, ``predict``) does with the user's model,
    then the model given back as its user made it, on success or failure: one moved into the
    strategy tfgpu chose is a one-device Keras model again (``rehoming.sent_home``), so Keras's
    own methods after the call (``predict_on_batch``, ``train_on_batch``, a second ``compile``,
    ``model.fit``) run as they would have without tfgpu. tfgpu's next call takes it back into the
    same strategy, its compiled steps still valid. A call that failed under several workers
    leaves the model where it is: giving it back reads its metrics across the workers, which a
    failed peer would never answer."""
    try:
        yield
    except BaseException:
        moved = model_cache.moved_to(model)
        # a worker that failed does not wait for its peers' collectives: its error is what to see
        if moved is not None and not distribute.spans_workers(moved):
            with contextlib.suppress(Exception):
                sent_home(model)
        raise
    if model_cache.rehomed(model):
        sent_home(model)


def moved_in(model: Any, strategy: Any) -> None:
    """What was made outside ``strategy``'s scope since ``model`` was placed (the sub-layers a
    custom ``train_step`` built on one device, ``building``'s) moved into it, in place."""
    rehome(model, strategy)


def copy_in(model: Any, strategy: Any, *, policy: str | None = None) -> Any:
    """A new copy of ``model`` (compiled as it is, holding its weights now) in ``strategy``'s
    scope, its layers in the dtype ``policy`` (a Keras policy name; None: as built): what tuning
    times on one device or in mixed precision, and trains with when that is chosen. Keras's
    ``compile`` wraps the optimizer for loss scaling itself when the policy is mixed_float16.
    A subclassed model, or one Keras cannot re-create: ``ConfigError`` (Keras re-creates a
    subclassed model only from its config, which may leave out its state: not risked)."""
    if not graph_of_layers(model):
        raise ConfigError(
            "The model cannot be copied: it is a subclassed model, which Keras re-creates only "
            "from its config (its state may be left out)",
            value=type(model).__name__,
            fix="build it with Sequential or the functional API for tfgpu to copy it (tuning's one "
            "device and mixed precision train a copy)",
        )
    try:
        return copy(model, strategy, policy=policy)
    except Exception as exc:  # Keras raises several types for models it cannot clone
        raise ConfigError(
            f"The model cannot be copied ({type(exc).__name__}: {error_line(exc)})",
            value=model.name,
            fix="build the model from Keras's own layers, or give its custom layers a get_config() "
            "that returns their __init__ arguments (Keras's serialization guide)",
        ) from None


def give_back(model: Any, trained: Any) -> None:
    """``trained``'s weights and optimizer state into ``model``, the user's model it is a copy
    of. A model that never saw data (a Sequential without ``Input``, as Keras's "writing your own
    callbacks" guide builds it) is built first for the copy's input: it had no weights to take,
    and the trained result was lost with ``set_weights ... expecting 0 weights``."""
    if not model.built and input_shape(trained) is not None:
        model.build(input_shape(trained))
    transfer(trained, model)


@contextlib.contextmanager
def lent(model: Any, variables: list[Any], strategy: Any, *, values: list[Any]) -> Iterator[None]:
    """The model's variables on ``strategy`` for a while, holding ``values``; the originals
    back after, untouched (the replica proof's step on one device)."""
    import tensorflow as tf

    held = optimizers(model)
    inners = optimizers_of(held)
    kept_strategies = [o._distribution_strategy for o in inners]
    model_strategy = getattr(model, "_distribute_strategy", None)
    originals = [v._value for v in variables]
    keyed = optimizer_keys(held, variables)
    with strategy.scope():
        for variable, value in zip(variables, values, strict=True):
            back(variable, tf.constant(value))
    rekey_optimizer(keyed)
    model._distribute_strategy = strategy
    for inner in inners:
        inner._distribution_strategy = strategy
    try:
        yield
    finally:
        keyed = optimizer_keys(held, variables)
        for variable, value in zip(variables, originals, strict=True):
            variable._value = value
        rekey_optimizer(keyed)
        model._distribute_strategy = model_strategy
        for inner, kept in zip(inners, kept_strategies, strict=True):
            inner._distribution_strategy = kept


def step_variables(model: Any) -> list[Any]:
    """Every Keras variable the model's step reads or writes: weights, statistics, every
    optimizer's the model holds (a GAN's two), the metrics' (``lent``'s, for the proof)."""
    found: dict[int, Any] = {}
    held = [v for optimizer in optimizers(model) for v in optimizer.variables]
    for variable in [*model.variables, *held, *model.metrics_variables, *metric_state(model)]:
        found.setdefault(id(variable), variable)
    return list(found.values())


def _build_for_data(model: Any, shape: tuple[Any, ...]) -> None:
    """Build a Sequential without ``Input`` for x of ``shape`` as Keras's ``fit`` builds it at
    its first batch: before any copy is made, so the copy trains from the weights Keras would
    draw (the copy of an unbuilt model drew its own, and trained to other numbers than one
    device). A model created in a strategy's scope is built in it: its weights built outside
    were plain variables, and the optimizer's slots then failed ("colocate_vars_with must only
    be passed a variable created in this tf.distribute.Strategy.scope()")."""
    import keras

    if model.built or not isinstance(model, keras.Sequential) or not model.layers:
        return
    if shape is not None:
        made_in = _owner(model)
        with made_in.scope() if made_in is not None else contextlib.nullcontext():
            model.build(shape)

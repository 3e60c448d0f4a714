"""How a model's state moves into a strategy, beneath ``placement``, which decides when.

In place (``rehome``: each Keras variable given a new backing variable made in the scope, nothing
cloned), or as a copy (``copy``: cloned and compiled from the model's config, its weights, the
adapted state of its lookups and its optimizer's state carried over). The optimizer's keys,
Keras's private strategy attributes and the optimizer state are touched here and in
``placement`` only.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Collection, Iterable, Iterator
from typing import Any

from tfgpu import choices
from tfgpu.errors import ConfigError
from tfgpu.text import counted, error_line
from tfgpu.train.pieces import model_cache, remat

log = logging.getLogger(__name__)


def rehomed(model: Any) -> bool:
    """True when tfgpu moved ``model`` into a strategy (``rehome``): it may move it again."""
    return model_cache.rehomed(model)


@functools.cache
def check_keras_variables() -> None:
    """Fail loudly if Keras's variables no longer keep their TensorFlow variable as ``_value``,
    made by ``_initialize`` (Keras 3.15's ``backend/tensorflow/core.py``): ``rehome`` rests on it.
    Once per process (it makes a probe variable); a failure is not cached and raises each time."""
    import keras
    import tensorflow as tf

    probe = keras.Variable(0.0, name="tfgpu_probe")
    if not callable(getattr(probe, "_initialize", None)) or not isinstance(
        getattr(probe, "_value", None), tf.Variable
    ):
        raise RuntimeError(
            "Keras's variables no longer hold a tf.Variable as _value made by _initialize: tfgpu's re-homing "
            "of a model made outside a strategy's scope (tfgpu/train/model/rehoming.py: rehome) needs updating"
        )


def rehome(model: Any, strategy: Any) -> Any:
    """``model`` itself, its state moved into ``strategy``'s scope in place: each Keras variable
    (weights, statistics, seeds, the optimizers' and metrics' state) given a new backing
    ``tf.Variable`` made in the scope (a MirroredVariable under MirroredStrategy) holding its
    value. Nothing is cloned, so what cloning cannot re-create trains as written: a custom layer
    without a full ``get_config``, a ``Lambda`` over a Python function, a loss or metric that is
    a Python function, a subclassed model (keras-io's VAE, WGAN-GP, Distiller). Keras's own
    ``fit`` on such a functional model, re-homed so, equals the model built in the scope to 0.0
    on 2 replicas. A metric's state (summed over replicas when read) starts at zero, as Keras
    resets it at each epoch anyway.

    The optimizers are the user's own objects, moved like the rest, used or not: the one they
    hold counts its iterations and takes the learning rate they set (a new one made from the
    config left theirs at 0 iterations, ignored a rate set through it between two fits, and
    failed on a subclass whose ``get_config`` leaves out an ``__init__`` argument). A model
    ``sent_home`` after an earlier call takes back the variables it had in ``strategy``."""
    check_keras_variables()
    held = optimizers(model)
    state = _state(model, held)
    _returned(state, strategy)
    keyed = optimizer_keys(held, state)
    moved = _moved(state, strategy)
    model._distribute_strategy = strategy
    rekey_optimizer(keyed)
    if moved:  # a compiled step captured the old variables: it would update those, not these
        model_cache.forget(model)
    _forget_keras_functions(model)
    for inner in optimizers_of(held):
        inner._distribution_strategy = strategy
    model_cache.mark_rehomed(model, strategy)
    choices.record(
        "model",
        f"moved into {type(strategy).__name__}'s scope",
        "it was created outside it; trained in place",
    )
    return model


def _state(model: Any, held: list[Any]) -> list[Any]:
    """Each Keras variable of the model's state once: weights, statistics, seeds, the state of
    the optimizers in ``held`` (and those they wrap) and of the metrics."""
    found = {id(v): v for v in model.variables}
    for optimizer in optimizers_of(held):
        found.update({id(v): v for v in optimizer.variables})
    found.update({id(v): v for v in metric_state(model)})
    return list(found.values())


def _moved(variables: Iterable[Any], strategy: Any) -> int:
    """Give each of ``variables`` not made in ``strategy``'s scope a backing variable made there,
    holding its value (a sum over replicas starting at zero); returns how many moved. Moved
    already: a second call moves only what was made since (a re-compile's)."""
    import tensorflow as tf

    moving = [v for v in variables if not strategy.extended.variable_created_in_scope(v._value)]
    # read outside the scope: a model tfgpu moved into another strategy before (predict's choice,
    # then a fit given its own) holds that strategy's variables, which cannot be read in this one's
    values = [tf.convert_to_tensor(v._value) for v in moving]
    with strategy.scope():
        for variable, value in zip(moving, values, strict=True):
            back(variable, tf.zeros_like(value) if _summed(variable) else value)
    for variable in moving:
        vars(variable).pop(_AWAY, None)
    return len(moving)


def _summed(variable: Any) -> bool:
    """A variable each replica adds to and that is summed when read (Keras's metrics' state)."""
    return variable.synchronization == "on_read" and variable.aggregation == "sum"


_AWAY = "_tfgpu_away"  # on a Keras variable sent home: the strategy's variable it takes back


def sent_home(model: Any) -> None:
    """``model``, which tfgpu moved into a strategy of one process's replicas, made a one-device
    Keras model again, as its user made it: Keras's own methods after ``tfgpu.fit`` then run as
    on one device (``predict_on_batch`` of 32 rows gave 64 under the strategy tfgpu chose, as
    Keras's gives under any strategy; a second ``compile`` outside a scope failed at its first
    ``train_on_batch``). Each Keras variable is given its first replica's variable (a plain
    ``tf.Variable`` holding the value; a sum over replicas gathered into it), and keeps the
    strategy's variable for ``rehome`` to take back with the values its user gave it meanwhile:
    nothing is copied to a second place in memory and tfgpu's compiled steps stay valid.

    A model made in the user's own strategy scope, or moved across parameter servers (its
    variables live there), stays as it is."""
    import tensorflow as tf

    strategy = model_cache.moved_to(model)
    if strategy is None or getattr(model, "_distribute_strategy", None) is not strategy:
        return
    held = optimizers(model)
    state = _state(model, held)
    if any(_replicas_of(v._value) is None for v in state):  # parameter servers: not one process's replicas
        return
    for variable in state:
        container = variable._value
        local = _replicas_of(container)
        value = tf.convert_to_tensor(container)  # a sum over replicas read as one
        local[0].assign(value)
        for other in local[1:]:
            other.assign(tf.zeros_like(value) if _summed(variable) else value)
        variable._value = local[0]
        vars(variable)[_AWAY] = container  # alive: the optimizer keys its variables by it
    model._distribute_strategy = None
    _forget_keras_functions(model)
    default = tf.distribute.get_strategy()
    for inner in optimizers_of(held):
        inner._distribution_strategy = default


def _forget_keras_functions(model: Any) -> None:
    """Keras's own traced ``train_function`` / ``test_function`` / ``predict_function`` dropped,
    as its ``compile`` drops them: each captured the variables the model held when it was traced,
    and one traced before a move read the old ones (``predict_on_batch`` after ``tfgpu.fit`` gave
    the untrained model's outputs). Keras traces them again at their next call."""
    for name in ("train_function", "test_function", "predict_function"):
        if getattr(model, name, None) is not None:
            setattr(model, name, None)


def _returned(variables: Iterable[Any], strategy: Any) -> None:
    """The variables ``sent_home`` kept for ``strategy``, back in place, every replica holding
    what the first one holds now (the user may have trained or set it meanwhile)."""
    for variable in variables:
        container = vars(variable).get(_AWAY)
        if container is None or container.distribute_strategy is not strategy:
            continue
        local = _replicas_of(container)
        if variable._value is local[0] and not _summed(variable):
            for other in local[1:]:
                other.assign(local[0])
        variable._value = container
        del vars(variable)[_AWAY]


def _replicas_of(value: Any) -> tuple[Any, ...] | None:
    """The per-replica variables of a strategy's variable (a MirroredVariable's, a sum over
    replicas' ...); None for a plain one or one on parameter servers."""
    import tensorflow as tf

    if not isinstance(value, tf.distribute.DistributedValues):
        return None
    local = getattr(value, "_values", None)
    return tuple(local) if local else None


def metric_state(model: Any) -> list[Any]:
    """The variables of the model's metrics, those ``compile`` was given included. Keras lists a
    compiled metric's variables only once its ``CompileMetrics`` is built (at the first step), but
    a Metric object (``AUC()``, ``Precision()``) makes them when it is constructed, outside the
    scope: left there, each worker of a MultiWorkerMirroredStrategy summed only its own rows
    (keras-io's scripts: AUC 0.70 and 0.63 on the two workers, 0.67 on one device). In one
    process the replicas happened to share the one variable."""
    import keras

    found = [v for metric in getattr(model, "metrics", []) for v in metric.variables]
    compiled = getattr(model, "_compile_metrics", None)
    given = [getattr(compiled, "_user_metrics", None), getattr(compiled, "_user_weighted_metrics", None)]
    for metric in keras.tree.flatten([g for g in given if g is not None]):
        if isinstance(metric, keras.metrics.Metric):
            found.extend(metric.variables)
    return found


def back(variable: Any, value: Any) -> None:
    """Give a Keras variable a new backing ``tf.Variable`` holding ``value``, made in the current
    strategy's scope. The new one is as watchable as the old: a layer frozen now and unfrozen
    later (the transfer-learning guide) must train then, and a tape watches only variables made
    trainable; Keras's own flag stays as it is."""
    flag, variable._trainable = variable._trainable, variable._value.trainable
    try:
        variable._initialize(value)
    finally:
        variable._trainable = flag


def optimizers(model: Any) -> list[Any]:
    """Every optimizer the model holds, each once: ``model.optimizer`` and those a custom
    ``train_step`` keeps as attributes (keras-io's GANs compile with ``d_optimizer`` and
    ``g_optimizer``, made outside any scope). Re-homing, the proof and the build treat them all
    alike: moving only ``model.optimizer`` left the others on the default strategy ("Mixing
    different tf.distribute.Strategy objects")."""
    import keras

    found: dict[int, Any] = {}
    for value in (getattr(model, "optimizer", None), *vars(model).values()):
        if isinstance(value, keras.optimizers.Optimizer):
            found.setdefault(id(value), value)
    return list(found.values())


def optimizers_of(held: Any) -> list[Any]:
    """The optimizers in ``held`` (one or a list) and those they wrap (a LossScaleOptimizer's),
    those that keep a strategy."""
    found = []
    for optimizer in held if isinstance(held, list | tuple) else [held]:
        found += [optimizer, getattr(optimizer, "inner_optimizer", None)]
    return [o for o in found if o is not None and hasattr(o, "_distribution_strategy")]


def optimizer_keys(held: Any, variables: Any) -> list[tuple[Any, Any, Any]]:
    """(optimizer, variable, its key now) for each variable a built optimizer in ``held`` (one
    or a list) knows: Keras's TF optimizer keys them by the backing tf.Variable's ``_unique_id``,
    which re-homing changes ("Unknown variable ... can only be called for the variables it was
    originally built with")."""
    found = []
    variables = list(variables)
    for inner in optimizers_of(held):
        indices = getattr(inner, "_trainable_variables_indices", None)
        if not getattr(inner, "built", False) or not indices:
            continue
        for variable in variables:
            key = inner._var_key(variable)
            if key in indices:
                found.append((inner, variable, key))
    return found


def rekey_optimizer(keyed: list[tuple[Any, Any, Any]]) -> None:
    """Through the dict's own ``del`` and item assignment: TensorFlow wraps an attribute's dict to
    checkpoint it, and a ``pop`` passes the wrapper by, so the next save of the optimizer failed
    ("Unable to save the object {...} (a dictionary wrapper ...)": fit with checkpoint_dir)."""
    for inner, variable, old in keyed:
        indices = inner._trainable_variables_indices
        new = inner._var_key(variable)
        if new != old:
            value = indices[old]
            del indices[old]
            indices[new] = value


def recreate(model: Any, strategy: Any) -> Any:
    """``model``'s copy in ``strategy``'s scope, holding ``model``'s weights now.

    Made once per model and strategy (cloned, compiled from ``model``'s compile config) and kept:
    its optimizer state and its traced functions last from one ``fit`` call to the next, as on
    ``model`` itself under Keras. When ``model`` is re-compiled or its ``trainable`` flags change
    (the transfer-learning guide's second phase), the copy follows: the flags copied layer by
    layer, compiled again in the scope (a fresh optimizer, as Keras's ``compile`` makes). A new
    clone each call would lose the optimizer's state between calls, trace again, and under
    MirroredStrategy's collectives a second trace of a re-compiled clone failed ("Shape mismatch
    in the collective instance").

    Sequential and functional models can be cloned; a subclassed model, or a compile
    configuration Keras cannot rebuild, is refused with the fix (create it in the scope).
    """
    try:
        return rehome(model, strategy)
    except RuntimeError as exc:  # a Keras that moved what rehome relies on: clone, as before
        log.warning("%s; cloning the model instead", exc)
    where = type(strategy).__name__

    def make() -> Any:
        clone = copy(model, strategy)
        choices.record(
            "model", f"re-created in {where}'s scope", "it was created outside it; weights copied back"
        )
        return clone

    try:
        clone, _ = model_cache.copy(
            model, ("strategy", strategy), make, follow=lambda c: _follow(c, model, strategy)
        )
        clone.set_weights(model.get_weights())
        copy_optimizer_state(model, clone, strategy=strategy)
    except ConfigError:
        raise
    except Exception as exc:  # Keras raises several types for models it cannot clone
        raise ConfigError(
            f"The model was created outside the {where}'s scope and cannot be re-created in it "
            f"({type(exc).__name__}: {error_line(exc)})",
            value=model.name,
            fix="create and compile the model inside `with strategy.scope():` and pass that strategy",
        ) from None
    return clone


def transfer(source: Any, target: Any, *, strategy: Any = None) -> None:
    """``source``'s weights and optimizer state into ``target``, a copy of the same model (the
    target's optimizer built under ``strategy`` first when it is not): a trial's copy from the
    run's model, a split or tuned copy, a copy given back (``placement.transfer``)."""
    target.set_weights(source.get_weights())
    copy_optimizer_state(source, target, strategy=strategy)


def copy_optimizer_state(source: Any, target: Any, *, strategy: Any = None) -> None:
    """``source``'s optimizer state (its step count, Adam's moments...) into ``target``'s, the
    same model's copy: a model restored by ``keras.models.load_model`` goes on with its
    optimizer's state under Keras, and must under tfgpu's copy of it too (a fresh optimizer
    trained the tutorial's restored model to other weights). ``target``'s optimizer is built
    for its variables first when it is not (under ``strategy``'s scope, or its own)."""
    import contextlib

    mine, theirs = getattr(source, "optimizer", None), getattr(target, "optimizer", None)
    if mine is None or theirs is None or not mine.built:
        return
    if not theirs.built:
        with strategy.scope() if strategy is not None else contextlib.nullcontext():
            theirs.build(target.trainable_variables)
    # one side is a copy in mixed_float16: only the optimizer under its loss scale is copied
    if type(mine) is not type(theirs):
        mine, theirs = _unscaled(mine), _unscaled(theirs)
        if theirs is not target.optimizer:  # the copy's loss scale starts as a new one does
            target.optimizer.step_counter.assign(0)
            target.optimizer.dynamic_scale.assign(target.optimizer.initial_scale)
    if len(mine.variables) != len(theirs.variables):
        return  # another optimizer (re-compiled in between): it starts afresh, as under Keras
    for value, variable in zip(mine.variables, theirs.variables, strict=True):
        variable.assign(value)


def _unscaled(optimizer: Any) -> Any:
    """The optimizer a LossScaleOptimizer (mixed_float16's) wraps; any other, itself."""
    return getattr(optimizer, "inner_optimizer", optimizer)


def copy(model: Any, strategy: Any, *, policy: str | None = None) -> Any:
    """``copy_in``'s copy, Keras's errors as they come (the callers say what they mean)."""
    import keras

    _build_as_first_call(model)
    weights = model.get_weights()  # outside the scope: a sub-model's may belong to another strategy
    compiled = model.get_compile_config()  # outside too: it reads the optimizer's variables
    with strategy.scope(), _policy(policy), _compile_config_given(model, compiled):
        keep = {id(layer) for layer in _output_layers(model)}  # float32 outputs, as Keras's guide has them
        clone = keras.models.clone_model(
            model, clone_function=functools.partial(clone_layer, policy=policy, float32=keep)
        )
        if not clone.built and model.built and input_shape(model) is not None:
            clone.build(input_shape(model))  # a Sequential without Input, built by its first call
        _copy_trainable(model, clone)
        remat.copy_modes(model, clone)
        clone.set_weights(weights)
        _copy_adapted_state(model, clone)
        clone.compile_from_config(compiled)
    return clone


def graph_of_layers(model: Any) -> bool:
    """A Sequential or functional model: Keras clones it layer by layer."""
    import keras
    from keras.src.models.functional import Functional

    return isinstance(model, (keras.Sequential, Functional))


def _output_layers(model: Any) -> list[Any]:
    """The layers whose outputs are the model's (a Sequential's last)."""
    import keras

    if isinstance(model, keras.Sequential):
        return model.layers[-1:]
    return [tensor._keras_history.operation for tensor in getattr(model, "outputs", None) or []]


def _copy_adapted_state(model: Any, clone: Any) -> None:
    """What ``adapt()`` left in preprocessing layers and ``set_weights`` does not carry.

    A lookup layer's vocabulary lives in a table, not in its weights: the clone's tables were
    empty and training failed with FailedPreconditionError (Keras's structured-data examples
    adapt StringLookup / IntegerLookup / TextVectorization before building the model). Layers
    such as Normalization compute their constants from their adapted weights in
    ``finalize_state``, as Keras does after loading weights.
    """
    ours = list(model._flatten_layers(include_self=False))
    theirs = list(clone._flatten_layers(include_self=False))
    for layer, copy in zip(ours, theirs, strict=True):
        if hasattr(layer, "get_vocabulary") and hasattr(copy, "set_vocabulary"):
            vocabulary = layer.get_vocabulary()
            if vocabulary:
                tf_idf = layer.get_config().get("output_mode") == "tf_idf"
                copy.set_vocabulary(vocabulary, idf_weights=_idf(layer) if tf_idf else None)
        if hasattr(copy, "finalize_state"):
            copy.finalize_state()


def _idf(layer: Any) -> Any:
    """A tf-idf lookup's weights, one per entry of ``get_vocabulary()`` (special tokens
    included, as ``set_vocabulary`` takes them with that vocabulary); TextVectorization keeps
    them on its inner lookup layer, and the variable may be padded to ``max_tokens``."""
    import numpy as np

    owner = getattr(layer, "_lookup_layer", layer)
    return np.asarray(owner.idf_weights)[: len(layer.get_vocabulary())]


@contextlib.contextmanager
def _compile_config_given(model: Any, config: Any) -> Iterator[None]:
    """``model.get_compile_config()`` answers ``config`` (read before) while it is cloned: Keras's
    ``clone_model`` reads it inside the clone's scope, where the optimizer's variables of a model
    made under another strategy cannot be read ("Mixing different tf.distribute.Strategy")."""
    object.__setattr__(model, "get_compile_config", lambda: config)
    try:
        yield
    finally:
        object.__delattr__(model, "get_compile_config")


@contextlib.contextmanager
def _policy(policy: str | None) -> Iterator[None]:
    """Keras's global dtype policy set to ``policy`` while a copy is made (the model object takes
    it, and ``compile`` looks at it), and set back after."""
    import keras

    if policy is None:
        yield
        return
    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(before)


def clone_layer(layer: Any, *, policy: str | None = None, float32: Collection[int] = ()) -> Any:
    """Keras's own clone of a layer (``from_config(get_config())``), or, for a config holding a
    function of the user's (TextVectorization's ``standardize`` in keras-io's text example:
    "Could not parse config: <function custom_standardization>"), the layer made from it. With a
    ``policy``, a float32 layer is made in it, but for the layers in ``float32`` (ids: the
    outputs, as Keras's mixed precision guide keeps them) and layers of other dtypes (lookups)."""
    config = layer.get_config()
    if policy is not None and "dtype" in config and layer.compute_dtype == "float32":
        config["dtype"] = "float32" if id(layer) in float32 else policy
    try:
        return type(layer).from_config(config)
    except TypeError:
        return type(layer)(**config)


def _build_as_first_call(model: Any) -> None:
    """A Sequential without an Input whose first layer ``adapt()`` built (the regression
    tutorial's ``Sequential([normalizer, Dense(1)])``), built for that layer's input as its first
    call would: unbuilt, its clone had none of its weights."""
    import keras

    if model.built or not isinstance(model, keras.Sequential) or not model.layers:
        return
    shapes = getattr(model.layers[0], "_build_shapes_dict", None) or {}
    shape = next(iter(shapes.values()), None)
    if model.layers[0].built and shape:
        model.build((None, *tuple(shape)[1:]))


def input_shape(model: Any) -> Any:
    try:
        return model.input_shape
    except (AttributeError, ValueError):
        return None


def _follow(clone: Any, model: Any, strategy: Any) -> None:
    """``model`` was re-compiled or had layers frozen or unfrozen: the clone does the same."""
    _copy_trainable(model, clone)
    remat.copy_modes(model, clone)
    with strategy.scope():
        clone.compile_from_config(model.get_compile_config())


def _copy_trainable(model: Any, clone: Any) -> None:
    """Each layer's ``trainable`` flag, from ``model`` to its clone (the same layers in order)."""
    clone.trainable = model.trainable
    ours = list(model._flatten_layers(include_self=False))
    theirs = list(clone._flatten_layers(include_self=False))
    if len(ours) != len(theirs):
        raise ConfigError(
            "The model's copy in the strategy's scope does not have the model's layers",
            value=f"{len(ours)} layers, copy {len(theirs)}",
            fix="create and compile the model inside `with strategy.scope():` and pass that strategy",
        )
    for layer, copy in zip(ours, theirs, strict=True):
        copy.trainable = layer.trainable


def adopt_optimizer(model: Any, strategy: Any) -> None:
    """Each optimizer the model holds, made outside ``strategy``'s scope and not yet used, moved
    into it in place (its iteration count and learning rate given variables made there): the
    user's own object, so the rate they set through it later is the one trained with.

    The transfer-learning guide compiles a second time outside any scope; the optimizer then
    holds variables of the default strategy (Keras's TF optimizer records the strategy it was made
    under), and building its slots in the scope fails ("Mixing different tf.distribute.Strategy
    objects"). Keras's own ``fit`` fails so too. The optimizers a GAN keeps as attributes are
    moved the same way. An optimizer that has stepped is left alone.
    """
    import keras

    moving = [
        o
        for o in optimizers(model)
        if isinstance(o, keras.optimizers.Optimizer)
        and not o.built
        and getattr(o, "_distribution_strategy", strategy) is not strategy
    ]
    for inner in optimizers_of(moving):
        _moved(inner.variables, strategy)
        inner._distribution_strategy = strategy
    if moving:
        choices.record(
            "optimizer",
            f"moved into {type(strategy).__name__}'s scope",
            f"{counted(len(moving), 'optimizer')} compiled outside it",
        )

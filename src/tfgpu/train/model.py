"""The user's Keras model made ready for tfgpu's loop: compiled, owned by the strategy, built.

tfgpu trains with the model's own ``train_step`` / ``test_step`` inside ``strategy.run``, so the
compiled loss, metrics, optimizer (incl. learning-rate schedules and the LossScaleOptimizer Keras
adds under ``mixed_float16``), regularization losses and a user's ``train_step`` override apply as
under ``Model.fit``. Two conditions make that work under every strategy (measured on TF 2.21 /
Keras 3.15):

- the model's variables, the optimizer and the compiled metrics are created in the strategy's
  scope (a model built outside it fails inside ``strategy.run`` with "colocate_vars_with");
- the compiled loss and metrics and the optimizer state are built before the first traced step
  (built lazily inside the step, MirroredStrategy with 2 replicas failed). ``build`` does it from
  the input's element spec; Keras's own ``fit`` does it from a first batch, which under
  MultiWorkerMirroredStrategy is the ``strategy.reduce`` that fails (keras-team/keras#20585).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING, Any

from tfgpu import choices, distribute
from tfgpu.errors import ConfigError
from tfgpu.text import counted
from tfgpu.train import model_cache, remat

if TYPE_CHECKING:
    from tfgpu.train.task import Task

log = logging.getLogger(__name__)


def from_task(task: Task) -> Any:
    """Call ``task.model()`` (in the caller's strategy scope) and compile it with the Task's loss."""
    from tfgpu.train.task import make_optimizer, resolve_loss

    model = task.model()
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


def owner(model: Any) -> Any | None:
    """The strategy whose scope the model was created in; None: no strategy's."""
    return getattr(model, "_distribute_strategy", None)


def fits_strategy(model: Any, strategy: Any) -> bool:
    """True when ``model`` can run under ``strategy`` as it is."""
    import tensorflow as tf

    made_in = owner(model)
    if made_in is not None:
        return made_in is strategy
    # a model made outside any scope has plain variables: the default strategy runs it
    return strategy is tf.distribute.get_strategy()


def placed(model: Any, strategy: Any = None, *, choose: Callable[[], Any] | None = None) -> tuple[Any, Any]:
    """(strategy, the model to run under it): the one rule ``tfgpu.fit``, ``evaluate`` and
    ``predict`` place a user's model by (the Trainer's ``Task.model`` is made in the scope).

    Unasked, the model's own strategy; for a model from no scope, ``choose()`` (tfgpu's choice)
    when it gives several replicas or workers, else TensorFlow's default strategy, which runs the
    model as it is. A model made outside ``strategy``'s scope is moved into it in place
    (``recreate``: ``rehome``, or a copy where it cannot); one made in another strategy's scope
    is refused, with the fix. A model tfgpu moved before moves again what was made since (a
    re-compile's metrics). Before this, ``keras_fit`` and ``predict.memory`` each had a copy."""
    import tensorflow as tf

    made_in = owner(model)
    if strategy is None:
        if made_in is not None:
            return made_in, model
        chosen = choose() if choose is not None else None
        if chosen is None or (int(chosen.num_replicas_in_sync) == 1 and not distribute.spans_workers(chosen)):
            return tf.distribute.get_strategy(), model
        strategy = chosen
    if fits_strategy(model, strategy):
        if rehomed(model):
            rehome(model, strategy)
        return strategy, model
    if made_in is not None and not rehomed(model):
        raise ConfigError(
            f"The model was created in the scope of a {type(made_in).__name__}, not of the "
            f"{type(strategy).__name__} passed",
            value=type(strategy).__name__,
            fix="pass the strategy the model was created under, or leave strategy unset",
        )
    return strategy, recreate(model, strategy)


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
            "of a model made outside a strategy's scope (tfgpu/train/model.py: rehome) needs updating"
        )


def rehome(model: Any, strategy: Any) -> Any:
    """``model`` itself, its state moved into ``strategy``'s scope in place: each Keras variable
    (weights, statistics, seeds, the optimizer's and metrics' state) given a new backing
    ``tf.Variable`` made in the scope (a MirroredVariable under MirroredStrategy) holding its
    value. Nothing is cloned, so what cloning cannot re-create trains as written: a custom layer
    without a full ``get_config``, a ``Lambda`` over a Python function, a loss or metric that is
    a Python function, a subclassed model (keras-io's VAE, WGAN-GP, Distiller). Keras's own
    ``fit`` on such a functional model, re-homed so, equals the model built in the scope to 0.0
    on 2 replicas. A metric's state (summed over replicas when read) starts at zero, as Keras
    resets it at each epoch anyway."""
    import tensorflow as tf

    check_keras_variables()
    _adopt_optimizer(model, strategy)  # unused, made outside: made again in the scope
    held = [o for o in optimizers(model) if o.built]
    state = {id(v): v for v in model.variables}
    for optimizer in held:
        state.update({id(v): v for v in optimizer.variables})
    state.update({id(v): v for v in metric_state(model)})
    keyed = optimizer_keys(held, state.values())
    # moved already: a second call moves only what was made since (a re-compile's)
    moving = [v for v in state.values() if not strategy.extended.variable_created_in_scope(v._value)]
    # read outside the scope: a model tfgpu moved into another strategy before (predict's choice,
    # then a fit given its own) holds that strategy's variables, which cannot be read in this one's
    values = [tf.convert_to_tensor(v._value) for v in moving]
    with strategy.scope():
        for variable, value in zip(moving, values, strict=True):
            summed = variable.synchronization == "on_read" and variable.aggregation == "sum"
            back(variable, tf.zeros_like(value) if summed else value)
    model._distribute_strategy = strategy
    rekey_optimizer(keyed)
    if moving:  # a compiled step captured the old variables: it would update those, not these
        model_cache.forget(model)
    for inner in optimizers_of(held):
        inner._distribution_strategy = strategy
    model_cache.mark_rehomed(model)
    choices.record(
        "model",
        f"moved into {type(strategy).__name__}'s scope",
        "it was created outside it; trained in place",
    )
    return model


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
        clone = _copy(model, strategy)
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
            f"({type(exc).__name__}: {_first_line(exc)})",
            value=model.name,
            fix="create and compile the model inside `with strategy.scope():` and pass that strategy",
        ) from None
    return clone


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


def copy_in(model: Any, strategy: Any, *, policy: str | None = None) -> Any:
    """A new copy of ``model`` (compiled as it is, holding its weights now) in ``strategy``'s
    scope, its layers in the dtype ``policy`` (a Keras policy name; None: as built): what tuning
    times on one device or in mixed precision, and trains with when that is chosen. Keras's
    ``compile`` wraps the optimizer for loss scaling itself when the policy is mixed_float16.
    A subclassed model, or one Keras cannot re-create: ``ConfigError`` (Keras re-creates a
    subclassed model only from its config, which may leave out its state: not risked)."""
    if not _graph_of_layers(model):
        raise ConfigError(
            "The model cannot be copied: it is a subclassed model, which Keras re-creates only "
            "from its config (its state may be left out)",
            value=type(model).__name__,
            fix="build it with Sequential or the functional API for tfgpu to copy it (tuning's one "
            "device and mixed precision train a copy)",
        )
    try:
        return _copy(model, strategy, policy=policy)
    except Exception as exc:  # Keras raises several types for models it cannot clone
        raise ConfigError(
            f"The model cannot be copied ({type(exc).__name__}: {_first_line(exc)})",
            value=model.name,
            fix="build the model from Keras's own layers, or give its custom layers a get_config() "
            "that returns their __init__ arguments (Keras's serialization guide)",
        ) from None


def _copy(model: Any, strategy: Any, *, policy: str | None = None) -> Any:
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
        if not clone.built and model.built and _input_shape(model) is not None:
            clone.build(_input_shape(model))  # a Sequential without Input, built by its first call
        _copy_trainable(model, clone)
        remat.copy_modes(model, clone)
        clone.set_weights(weights)
        _copy_adapted_state(model, clone)
        clone.compile_from_config(compiled)
    return clone


def _graph_of_layers(model: Any) -> bool:
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


def build_for_data(model: Any, x: Any) -> None:
    """Build a Sequential without ``Input`` for ``x`` (one array, or a ``tf.data.Dataset`` whose
    elements are x or (x, ...)) as Keras's ``fit`` builds it at its first batch: before any copy
    is made, so the copy trains from the weights Keras would draw (the copy of an unbuilt model
    drew its own, and trained to other numbers than one device). A model created in a strategy's
    scope is built in it: its weights built outside were plain variables, and the optimizer's
    slots then failed ("colocate_vars_with must only be passed a variable created in this
    tf.distribute.Strategy.scope()")."""
    import keras
    import tensorflow as tf

    if model.built or not isinstance(model, keras.Sequential) or not model.layers:
        return
    if isinstance(x, tf.data.Dataset):
        spec = x.element_spec
        spec = spec[0] if isinstance(spec, tuple) else spec
        shape = tuple(spec.shape) if isinstance(spec, tf.TensorSpec) else None
    else:
        shape = (None, *x.shape[1:]) if hasattr(x, "shape") and len(getattr(x, "shape", ())) else None
    if shape is not None:
        made_in = owner(model)
        with made_in.scope() if made_in is not None else contextlib.nullcontext():
            model.build(shape)


def give_back(model: Any, trained: Any) -> None:
    """``trained``'s weights and optimizer state into ``model``, the user's model it is a copy
    of. A model that never saw data (a Sequential without ``Input``, as Keras's "writing your own
    callbacks" guide builds it) is built first for the copy's input: it had no weights to take,
    and the trained result was lost with ``set_weights ... expecting 0 weights``."""
    if not model.built and _input_shape(trained) is not None:
        model.build(_input_shape(trained))
    model.set_weights(trained.get_weights())
    copy_optimizer_state(trained, model)


def _input_shape(model: Any) -> Any:
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


def build(model: Any, strategy: Any, element_spec: Any) -> None:
    """Create the model's, the compiled loss's and metrics' and the optimizer's state, in scope.

    A label shape the loss cannot take fails here, before any training, as one message.
    """
    ready_remat(model)
    _adopt_optimizer(model, strategy)
    try:
        if not _built(model) and _built_by_its_step_on_one_device(model, strategy, element_spec):
            rehome(model, strategy)
        with strategy.scope():
            if not _built(model):
                _symbolic_build(model, strategy, element_spec)
                _build_step_optimizers(model, strategy, element_spec)
            elif not model_cache.checked(model, str(element_spec)):
                # built already (trained before, or for other data): the labels still must fit;
                # once per model and data structure (the check traces the model: tens of ms)
                _check_loss(model, element_spec)
        model_cache.mark_checked(model, str(element_spec))
    except ConfigError:  # said already, with its fix
        raise
    except (ValueError, TypeError, AssertionError, RuntimeError) as exc:
        raise _build_error(model, strategy, element_spec, exc) from None


def _build_error(model: Any, strategy: Any, element_spec: Any, exc: BaseException) -> ConfigError:
    """One message for a model that could not be built on the data, naming the real cause: the
    labels (only when the compiled loss cannot take them), the inputs (when the model cannot
    take x), or neither (a variable made under another strategy, an error in the user's own
    code), with that error. Every failure here was said as a label shape once, whatever it was."""
    received = {
        "data (x, y[, sample_weight])": _describe(element_spec),
        "model output": _output(model, element_spec),
    }
    where = _user_frame(exc)
    if where is not None:
        return ConfigError(
            f"Your code raised while the model was built on the data, at {where}: {_first_line(exc)}",
            value=received,
            fix=f"fix the error at {where} (the data reached your code in the shapes shown)",
        )
    if received["model output"] == "?" and isinstance(exc, ValueError | TypeError):
        return ConfigError(
            f"The model cannot take the data's inputs: {_first_line(exc)}",
            value=received,
            fix="give x of the shape and dtype the model's Input (or first layer) expects",
        )
    if isinstance(exc, ValueError | TypeError) and _loss_refuses(model, element_spec):
        return ConfigError(
            f"The model's loss and metrics cannot take the data's labels: {_first_line(exc)}",
            value=received,
            fix="give labels of the shape the loss expects for the model's output "
            "(e.g. integer class ids with sparse_categorical_crossentropy, one column per output unit otherwise)",
        )
    text = str(exc)
    if "colocate_vars_with" in text or "Mixing different tf.distribute.Strategy" in text:
        fix = (
            f"create the model, compile it and make its optimizers all inside `with strategy.scope():` "
            f"of the {type(strategy).__name__} it trains under, or all outside any scope (tfgpu then moves it)"
        )
        return ConfigError(
            f"The model holds state made under another strategy than the {type(strategy).__name__} "
            f"it trains under: {_first_line(exc)}",
            value=received,
            fix=fix,
        )
    return ConfigError(
        f"The model could not be built on the data ({type(exc).__name__} while building its "
        f"weights, loss, metrics and optimizer state): {_first_line(exc)}",
        value=received,
        fix="run the model's own fit on one batch to see where it fails; the data's shapes are not the cause "
        "(the model and its loss take them)",
    )


def _user_frame(exc: BaseException) -> str | None:
    """``file:line`` of the innermost frame of the user's own code in ``exc``'s traceback (not
    Python's, an installed package's or tfgpu's), or None."""
    import sysconfig
    import traceback
    from pathlib import Path

    paths = sysconfig.get_paths()
    libraries = {Path(paths[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    libraries.add(Path(__file__).resolve().parents[1])  # tfgpu
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename.startswith("<") or "__autograph_generated_file" in frame.filename:
            continue  # Python's own, or AutoGraph's conversion of a function (not a file of theirs)
        path = Path(frame.filename).resolve()
        if "site-packages" in path.parts or any(path.is_relative_to(lib) for lib in libraries):
            continue
        return f"{frame.filename}:{frame.lineno}"
    return None


def _loss_refuses(model: Any, element_spec: Any) -> bool:
    """True when the compiled loss cannot take the data's labels for the model's output."""
    try:
        _check_loss(model, element_spec)
    except (ValueError, TypeError):
        return True
    except Exception:  # something else fails there: not the labels' shape
        return False
    return False


def _symbolic_build(model: Any, strategy: Any, element_spec: Any) -> None:
    """Keras's symbolic build from the data's spec; a model with no ``call`` of its own (the
    GAN of the "customizing fit" guide: its ``train_step`` calls its sub-models) is built once
    its sub-models are, as its first step would leave it. Sub-models without an ``Input``
    (keras-io's semisupervised_simclr: encoders as Input-less ``Sequential``s, used only in
    ``train_step``) are built by a throwaway trace of that step, as Keras's first step on one
    device builds them, with the same initial weights; nothing of the trace runs."""
    import warnings

    import keras

    try:
        with warnings.catch_warnings():  # Keras's try of a build() the model does not define
            warnings.filterwarnings("ignore", message=r"`build\(\)` was called on layer")
            model._symbolic_build(data_batch=element_spec)
    except RuntimeError:
        inner = list(model._flatten_layers(include_self=False))
        if (
            inner
            and not all(layer.built for layer in inner)
            and type(model).train_step is not keras.Model.train_step
        ):
            _built_by_its_step(model, strategy, element_spec, inner)
        if not inner or not all(layer.built for layer in inner):
            raise
        model.built = True
        if model.optimizer is not None and not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)


def _built_by_its_step(model: Any, strategy: Any, element_spec: Any, inner: list[Any]) -> None:
    """The sub-layers a custom ``train_step`` builds, built by a throwaway trace of it. On
    several replicas a variable made inside ``strategy.run`` cannot be (Keras's own ``fit``
    fails there too; ``_built_by_its_step_on_one_device`` builds it first where it can): one
    message naming the layers and the fix."""
    unbuilt = [layer.name for layer in inner if not layer.built]
    try:
        _traced_step(model, strategy, element_spec, _optimizers_held(model))
    except Exception as exc:
        if int(strategy.num_replicas_in_sync) == 1:
            raise
        raise ConfigError(
            f"The model has no call() and its train_step builds its layers ({', '.join(unbuilt[:4])}), "
            f"which cannot be done on {strategy.num_replicas_in_sync} replicas ({type(exc).__name__})",
            value=unbuilt,
            fix="build them before tfgpu.fit, as one device's first step would: call each on one batch "
            "(e.g. model.encoder(x[:1])), or train on one device",
        ) from None


def _built_by_its_step_on_one_device(model: Any, strategy: Any, element_spec: Any) -> bool:
    """On several replicas, a model with no ``call`` whose ``train_step`` builds its sub-layers
    (keras-io's semisupervised_simclr), built by a throwaway trace of that step outside any
    scope, as one device's first step builds it (the same initial weights), for ``rehome`` to
    move into ``strategy``: a variable made inside ``strategy.run`` cannot be (Keras's own
    ``fit`` fails there), and a step traced in the scope outside ``run`` cannot call what needs
    a replica context (``tf.nn.compute_average_loss``). False where that is not the case."""
    import keras
    import tensorflow as tf

    if int(strategy.num_replicas_in_sync) == 1 or tf.distribute.has_strategy():
        return False
    if type(model).call is not keras.Model.call or type(model).train_step is keras.Model.train_step:
        return False
    inner = list(model._flatten_layers(include_self=False))
    if not inner or all(layer.built for layer in inner):
        return False
    _traced_step(model, tf.distribute.get_strategy(), element_spec, _optimizers_held(model))
    if not all(layer.built for layer in inner):
        return False
    model.built = True
    return True


def _optimizers_held(model: Any) -> list[Any]:
    """The optimizers the model holds: its compiled one and those a custom step keeps as
    attributes (a GAN's ``d_optimizer`` / ``g_optimizer``)."""
    import keras

    held = [v for v in vars(model).values() if isinstance(v, keras.optimizers.Optimizer)]
    if model.optimizer is not None and all(o is not model.optimizer for o in held):
        held.append(model.optimizer)
    return held


def _build_step_optimizers(model: Any, strategy: Any, element_spec: Any) -> None:
    """Build the optimizers a custom ``train_step`` applies, with the variables it gives each.

    Keras builds an optimizer on its first ``apply``; inside ``strategy.run`` that fails (the
    GAN guide's ``d_optimizer`` / ``g_optimizer``: Keras's own ``fit`` needs them built by hand
    under a strategy). One throwaway trace of the step (``_traced_step``) tells which.
    """
    import keras

    lazy = [v for v in vars(model).values() if isinstance(v, keras.optimizers.Optimizer) and not v.built]
    if not lazy or type(model).train_step is keras.Model.train_step:
        return
    used = _traced_step(model, strategy, element_spec, lazy)
    for optimizer in lazy:
        if used.get(id(optimizer)):
            optimizer.build(_unique(used[id(optimizer)]))


def _traced_step(model: Any, strategy: Any, element_spec: Any, optimizers: list[Any]) -> dict[int, list[Any]]:
    """One throwaway trace of the model's ``train_step`` under ``strategy``, each of
    ``optimizers``' ``apply`` recording its variables instead of applying (by ``id``): the
    layers the step calls are built by it; nothing of the trace runs."""
    import tensorflow as tf

    used: dict[int, list[Any]] = {}

    def recorder(optimizer: Any) -> Any:
        def apply(grads: Any, trainable_variables: Any = None) -> None:
            used.setdefault(id(optimizer), []).extend(trainable_variables or [])

        return apply

    for optimizer in optimizers:
        object.__setattr__(optimizer, "apply", recorder(optimizer))
    try:
        spec = tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape, s.dtype), element_spec)
        tf.function(
            lambda batch: strategy.run(model.train_step, args=(batch,)), autograph=False
        ).get_concrete_function(spec)
    finally:
        for optimizer in optimizers:
            del optimizer.apply
    return used


def _unique(variables: list[Any]) -> list[Any]:
    seen: set[int] = set()
    return [v for v in variables if not (id(v) in seen or seen.add(id(v)))]


def _adopt_optimizer(model: Any, strategy: Any) -> None:
    """Each optimizer the model holds, made outside ``strategy``'s scope and not yet used, made
    again inside it.

    The transfer-learning guide compiles a second time outside any scope; the optimizer then
    holds variables of the default strategy (Keras's TF optimizer records the strategy it was made
    under), and building its slots in the scope fails ("Mixing different tf.distribute.Strategy
    objects"). Keras's own ``fit`` fails so too. The optimizers a GAN keeps as attributes are
    made again the same way, under each name that holds them. An optimizer that has stepped is
    left alone: its state would be lost.
    """
    import keras

    made: dict[int, Any] = {}
    for name, optimizer in list(vars(model).items()):
        if not isinstance(optimizer, keras.optimizers.Optimizer) or optimizer.built:
            continue
        if getattr(optimizer, "_distribution_strategy", strategy) is strategy:
            continue
        if id(optimizer) not in made:
            config = optimizer.get_config()  # outside: it reads variables of the strategy it was made under
            with strategy.scope():
                made[id(optimizer)] = type(optimizer).from_config(config)
        setattr(model, name, made[id(optimizer)])
    if made:
        choices.record(
            "optimizer",
            f"made again in {type(strategy).__name__}'s scope",
            f"{counted(len(made), 'optimizer')} compiled outside it",
        )


def _check_loss(model: Any, element_spec: Any) -> None:
    """Run the compiled loss on symbolic tensors of the data's shapes (no device work)."""
    import keras
    import tensorflow as tf
    from keras.src.backend import compute_output_spec  # what Keras's own symbolic build uses

    if getattr(model, "_compile_loss", None) is None:
        return
    batch = tf.nest.map_structure(lambda s: keras.KerasTensor(s.shape, s.dtype.name), element_spec)
    parts = (*batch, None, None)[:3] if isinstance(batch, tuple) else (batch, None, None)
    x, y, sample_weight = parts
    if y is None:
        return
    y_pred = compute_output_spec(model, x, training=False)
    compute_output_spec(model._compile_loss, y, y_pred, sample_weight)


def _built(model: Any) -> bool:
    metrics = getattr(model, "_compile_metrics", None)
    loss = getattr(model, "_compile_loss", None)
    optimizer = getattr(model, "optimizer", None)
    return (
        model.built
        and (metrics is None or metrics.built)
        and (loss is None or loss.built)
        and (optimizer is None or optimizer.built)
    )


def _first_line(exc: BaseException) -> str:
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()  # Keras's bold, for a terminal
    return " ".join(text.split())[:400] if text else type(exc).__name__


def _output(model: Any, element_spec: Any) -> str:
    """The model's output shapes for this data's x, or "?" when they cannot be worked out."""
    import keras
    import tensorflow as tf
    from keras.src.backend import compute_output_spec

    x = element_spec[0] if isinstance(element_spec, tuple) else element_spec
    try:
        out = compute_output_spec(
            model, tf.nest.map_structure(lambda s: keras.KerasTensor(s.shape, s.dtype.name), x)
        )
    except Exception:  # the model cannot take x either: the message says why
        return "?"
    return str(tf.nest.map_structure(lambda t: f"{t.dtype}{list(t.shape)}", out))


def _describe(spec: Any) -> str:
    import tensorflow as tf

    return str(tf.nest.map_structure(lambda s: f"{s.dtype.name}{list(s.shape)}", spec))


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

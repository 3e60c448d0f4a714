"""The model's state made before the first traced step: weights, the compiled loss and metrics,
and the optimizers' slots, in the strategy's scope.

Built lazily inside a step, MirroredStrategy with 2 replicas failed; Keras's own ``fit`` builds
from a first batch, which under MultiWorkerMirroredStrategy is the ``strategy.reduce`` that fails
(keras-team/keras#20585). ``build`` does it from the input's element spec; a model with no
``call`` is built by a throwaway trace of its ``train_step``, as one device's first step builds
it. A model or label the data cannot go through fails here, before any training, as one message.
"""

from __future__ import annotations

from typing import Any

from tfgpu.errors import ConfigError
from tfgpu.text import error_line
from tfgpu.train.model.placement import moved_in
from tfgpu.train.pieces import model_cache


def build(model: Any, strategy: Any, element_spec: Any) -> None:
    """Create the model's, the compiled loss's and metrics' and the optimizer's state, in scope.

    A label shape the loss cannot take fails here, before any training, as one message.
    """
    try:
        if not _built(model) and _built_by_its_step_on_one_device(model, strategy, element_spec):
            moved_in(model, strategy)
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
            f"Your code raised while the model was built on the data, at {where}: {error_line(exc)}",
            value=received,
            fix=f"fix the error at {where} (the data reached your code in the shapes shown)",
        )
    if received["model output"] == "?" and isinstance(exc, ValueError | TypeError):
        return ConfigError(
            f"The model cannot take the data's inputs: {error_line(exc)}",
            value=received,
            fix="give x of the shape and dtype the model's Input (or first layer) expects",
        )
    if isinstance(exc, ValueError | TypeError) and _loss_refuses(model, element_spec):
        return ConfigError(
            f"The model's loss and metrics cannot take the data's labels: {error_line(exc)}",
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
            f"it trains under: {error_line(exc)}",
            value=received,
            fix=fix,
        )
    return ConfigError(
        f"The model could not be built on the data ({type(exc).__name__} while building its "
        f"weights, loss, metrics and optimizer state): {error_line(exc)}",
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
    except RuntimeError as exc:
        if isinstance(exc.__context__, ValueError):  # the model's own error: Keras < 3.14 wrapped it
            raise exc.__context__ from None
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


def _built_by_its_step_on_one_device(model: Any, strategy: Any, element_spec: Any) -> bool:
    """On several replicas, a model with no ``call`` whose ``train_step`` builds its sub-layers
    (keras-io's semisupervised_simclr), built by a throwaway trace of that step outside any
    scope, as one device's first step builds it (the same initial weights), for ``placement.moved_in`` to
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

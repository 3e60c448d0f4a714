"""``tfgpu.estimator``: GPUs for legacy ``tf.estimator`` code (TensorFlow 2.15 and older).

Why it exists: ``RunConfig`` has no ``num_gpus``. The knobs that matter are ``train_distribute``,
``eval_distribute`` and ``session_config``, and they must agree with each other. A MirroredStrategy
over two devices that the session does not create hangs at the first step. ``Estimator.predict``
also runs on one device only. This module fixes both:

- :func:`run_config` applies the device settings once, through :func:`tfgpu.configure`, and takes
  the session config from the same TensorFlow context. The Estimator's sessions then see the same
  GPUs, memory options and logical CPU devices as the strategy, which the rules of
  :func:`tfgpu.strategy` choose.
- :func:`predict` exports the Estimator to a SavedModel and runs ``tfgpu.predict`` on it, so every
  local replica predicts and the output keeps the input order.

On TensorFlow 2.16 and later ``tf.estimator`` no longer exists. Every call then raises
:class:`EstimatorUnavailableError`, which names the two ways forward.
"""

from __future__ import annotations

import inspect
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tfgpu import choices, cluster, distribute, env, runtime
from tfgpu.config import RuntimeConfig
from tfgpu.doctor.estimator_help import GUIDE, install_line
from tfgpu.errors import ConfigError, InputError, TfgpuError
from tfgpu.versions import parse_version

log = logging.getLogger(__name__)

_OWNED = ("train_distribute", "eval_distribute", "session_config", "tf_random_seed")


class EstimatorUnavailableError(TfgpuError, RuntimeError):
    """tf.estimator cannot be used with the installed TensorFlow."""


def require_estimator() -> Any:
    """Return ``tf.estimator``; raise EstimatorUnavailableError (with the way forward) when absent."""
    import tensorflow as tf

    version = tf.__version__
    if parse_version(version)[:2] >= (2, 16):
        raise EstimatorUnavailableError(
            "tf.estimator was removed in TensorFlow 2.16, and this is TensorFlow " + version,
            value=version,
            fix=f"pin tensorflow==2.15.1 and tensorflow-estimator==2.15.0 to keep Estimators, or migrate "
            f"to tfgpu.Task and tfgpu.Trainer ({GUIDE})",
        )
    try:
        return tf.estimator
    except AttributeError:
        raise EstimatorUnavailableError(
            f"TensorFlow {version} is installed without the tensorflow-estimator package",
            value=version,
            fix=install_line(version),
        ) from None


def run_config(
    model_dir: str | None = None,
    *,
    gpus: int | str | Sequence[int] | None = None,
    memory_growth: bool | None = None,
    memory_fraction: float | None = None,
    memory_limit_mb: int | None = None,
    soft_placement: bool = True,
    seed: int | None = None,
    logical_cpus: int | None = None,
    strategy: str | None = None,
    environ: Mapping[str, str] | None = None,
    **run_config_args: Any,
) -> Any:
    """A ``tf.estimator.RunConfig`` for every GPU (or the ones chosen), with settings that agree.

    Args:
        model_dir: where the Estimator keeps checkpoints.
        gpus: ``None`` or ``"all"`` for every visible GPU, a number N for the first N, a list of
            indices for those, ``0`` or ``"none"`` for the CPU only.
        memory_growth / memory_fraction / memory_limit_mb: as in :func:`tfgpu.configure`.
        soft_placement: let ops without a GPU kernel fall back to the CPU (RunConfig's default).
        seed: ``tf_random_seed`` of the graph, and the Python/NumPy/TensorFlow seeds.
        logical_cpus: split the CPU into this many devices (multi-device Estimators on a CPU).
        strategy: force a kind (see ``tfgpu.distribute.NAMES``); otherwise TFGPU_STRATEGY, then
            the rules of :func:`tfgpu.strategy`.
        run_config_args: any other RunConfig argument (save_checkpoints_steps, ...).

    TFGPU_* variables fill in what is not passed. Raises ConfigError for a bad value, TooLateError
    when TensorFlow already initialized its devices differently, EstimatorUnavailableError on
    TensorFlow >= 2.16.
    """
    tf_estimator = require_estimator()
    owned = sorted(set(run_config_args) & set(_OWNED))
    if owned:
        raise ConfigError(
            f"run_config sets {', '.join(owned)} itself",
            value=owned,
            fix="pass gpus=, memory_growth=, seed= or strategy= instead, or build tf.estimator.RunConfig yourself",
        )
    environ = os.environ if environ is None else environ
    settings = runtime.apply(
        RuntimeConfig.from_sources(
            explicit={
                "visible_gpus": _gpu_indices(gpus),
                "memory_growth": memory_growth,
                "memory_fraction": memory_fraction,
                "memory_limit_mb": memory_limit_mb,
                "logical_cpus": logical_cpus,
                "seed": seed,
            },
            environ=environ,
        )
    )
    gpu_count, cpu_count = distribute.local_device_counts()
    spec = cluster.from_environ(environ)
    picked = distribute.choose(
        name=strategy or env.strategy_name(environ), spec=spec, gpus=gpu_count, logical_cpus=cpu_count
    )
    local = distribute.choose(name=None, spec=None, gpus=gpu_count, logical_cpus=cpu_count)
    train = _estimator_strategy(picked)
    # multi-worker evaluation runs on the evaluator task alone, over its own devices
    eval_picked = local if picked.kind == "multi-worker" else picked
    evaluate = train if eval_picked is picked else _estimator_strategy(local)
    config = tf_estimator.RunConfig(
        model_dir=model_dir,
        tf_random_seed=settings.seed,
        session_config=_session_config(soft_placement=soft_placement),
        train_distribute=train,
        eval_distribute=evaluate,
        **run_config_args,
    )
    _record((picked, train), (eval_picked, evaluate))
    return config


def _gpu_indices(gpus: int | str | Sequence[int] | None) -> Any:
    """run_config's ``gpus`` (a count, indices, "all" or "none") as RuntimeConfig.visible_gpus."""
    if gpus is None or isinstance(gpus, str):
        return gpus
    if isinstance(gpus, bool) or not isinstance(gpus, (int, Sequence)):
        raise ConfigError(
            "gpus must be a number of GPUs, a list of indices, 'all' or 'none'",
            value=gpus,
            fix="pass gpus=2 or gpus=[0, 1]",
        )
    if not isinstance(gpus, int):
        return tuple(gpus)
    if gpus < 0:
        raise ConfigError("gpus must not be negative", value=gpus, fix="pass gpus=0 for the CPU only")
    import tensorflow as tf

    found = len(tf.config.list_physical_devices("GPU"))
    if gpus > found:
        raise ConfigError(
            f"Asked for {gpus} GPUs, but TensorFlow finds {found} on this machine",
            value=gpus,
            fix=f"pass gpus={found} or fewer, or run `tfgpu doctor` to see why GPUs are missing",
        )
    return tuple(range(gpus))


def _estimator_strategy(picked: distribute.StrategyChoice) -> Any:
    """The tf.distribute strategy an Estimator takes for this choice; None means its own default."""
    import tensorflow as tf

    if picked.kind == "mirrored":
        return tf.distribute.MirroredStrategy(devices=list(picked.devices))
    if picked.kind == "multi-worker":
        return tf.distribute.experimental.MultiWorkerMirroredStrategy()
    # one device: the Estimator places the graph on it; parameter servers: the Estimator's own
    # between-graph replication from TF_CONFIG; default: no strategy.
    return None


def _session_config(*, soft_placement: bool) -> Any:
    """The session config of the already-configured TensorFlow context.

    TensorFlow turns its eager settings (visible GPUs, memory growth and limits, logical
    devices, threads, XLA) into a ConfigProto. Giving that ConfigProto to the Estimator makes its
    sessions build the devices that the strategy was created over.
    """
    from tensorflow.python.eager import context

    config = context.context().config
    config.allow_soft_placement = soft_placement
    return config


def _record(
    train: tuple[distribute.StrategyChoice, Any], evaluate: tuple[distribute.StrategyChoice, Any]
) -> None:
    """Report the Estimator's strategies once, in the words of ``tfgpu.strategy``."""

    def describe(picked: distribute.StrategyChoice, built: Any) -> str:
        if built is not None:
            return f"{distribute.DISPLAY[picked.kind]} x{built.num_replicas_in_sync}"
        if picked.kind == "parameter-server":
            return "the Estimator's between-graph replication"
        return "one device" if picked.kind == "one-device" else "none"

    choices.record("estimator.train_distribute", describe(*train), train[0].reason)
    choices.record("estimator.eval_distribute", describe(*evaluate), evaluate[0].reason)
    choices.announce()


def predict(
    estimator: Any,
    data: str | Callable[..., Any],
    output: str,
    *,
    batch_size: int = 256,
    fmt: str = "parquet",
    checkpoint_path: str | None = None,
    serving_input_receiver_fn: Callable[[], Any] | None = None,
    export_dir: str | None = None,
    strategy: Any = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> Any:
    """Predict with an Estimator on every local replica, in input order, streamed to ``output``.

    ``data`` is an Estimator ``input_fn`` (returning batched features, or (features, labels)), or
    anything ``tfgpu predict`` reads (a tfgpu dataset directory, .parquet, .csv, .npy). The
    Estimator is exported to a SavedModel whose signature takes the input's columns
    (``serving_input_receiver_fn`` overrides that), then ``tfgpu.predict`` runs it. The export
    goes to a temporary directory, or to ``export_dir`` when it is given (it is kept there).
    Returns the PredictResult; ``tfgpu.predict.read_output(output)`` reads the rows back in order.
    """
    require_estimator()
    from tfgpu.predict import PredictOptions, engine
    from tfgpu.predict.inputs import DatasetInput, open_input

    options = PredictOptions(batch_size=batch_size, fmt=fmt)
    if callable(data):
        source = DatasetInput(lambda: _call_input_fn(data, estimator), description=_describe(data))
    else:
        source = open_input(str(data))
    receiver = serving_input_receiver_fn or _raw_receiver(source)
    base = Path(export_dir) if export_dir else Path(tempfile.mkdtemp(prefix="tfgpu-estimator-"))
    try:
        exported = _export(
            estimator,
            base,
            receiver,
            checkpoint_path=checkpoint_path,
            columns=None if serving_input_receiver_fn else sorted(source.columns),
        )
        return engine.predict(
            exported,
            source,
            output,
            options=options,
            strategy=strategy,
            on_progress=on_progress,
            model_description=f"Estimator {estimator.model_dir} ({checkpoint_path or estimator.latest_checkpoint()})",
        )
    finally:
        if export_dir is None:
            shutil.rmtree(base, ignore_errors=True)


def _call_input_fn(input_fn: Callable[..., Any], estimator: Any) -> Any:
    """Call ``input_fn`` the way Estimator does: with mode, params and config when it takes them."""
    import tensorflow as tf

    offered = {
        "mode": tf.estimator.ModeKeys.PREDICT,
        "params": estimator.params,
        "config": estimator.config,
    }
    accepted = inspect.signature(input_fn).parameters
    return input_fn(**{k: v for k, v in offered.items() if k in accepted})


def _describe(input_fn: Callable[..., Any]) -> str:
    return f"input_fn {getattr(input_fn, '__qualname__', repr(input_fn))}"


def _raw_receiver(source: Any) -> Callable[[], Any]:
    """A serving input function whose signature takes the input's columns (the label left out)."""
    label = getattr(getattr(source, "manifest", None), "label", None)
    columns = {n: c for n, c in source.columns.items() if n != label}
    single = getattr(source, "single_tensor", False)

    def receiver() -> Any:
        import tensorflow as tf

        placeholders = {
            name: tf.compat.v1.placeholder(
                tf.string if column.dtype == "string" else tf.as_dtype(column.dtype), [None, *column.shape]
            )
            for name, column in columns.items()
        }
        features = next(iter(placeholders.values())) if single else placeholders
        return tf.estimator.export.ServingInputReceiver(features, placeholders)

    return receiver


def _columns_rejected(exc: Exception, columns: list[str]) -> InputError:
    return InputError(
        f"The Estimator's model_fn cannot take the input's columns {columns} ({type(exc).__name__}: {str(exc)[:200]})",
        value=columns,
        fix="name and shape the columns as model_fn reads its features (a .npy file's column is its file "
        "name), or pass serving_input_receiver_fn=",
    )


def _export(
    estimator: Any,
    base: Path,
    receiver: Callable[[], Any],
    *,
    checkpoint_path: str | None,
    columns: list[str] | None,
) -> str:
    """Export to ``base``; ``columns`` are the input's, when tfgpu built the serving input."""
    base.mkdir(parents=True, exist_ok=True)
    try:
        path = estimator.export_saved_model(str(base), receiver, checkpoint_path=checkpoint_path)
    except ValueError as exc:
        if "Couldn't find trained model" in str(exc):
            raise InputError(
                f"The Estimator has no checkpoint to predict with in {estimator.model_dir}",
                value=checkpoint_path or estimator.model_dir,
                fix="train it first, or pass checkpoint_path= to a checkpoint it wrote",
            ) from None
        if columns is None:
            raise
        raise _columns_rejected(exc, columns) from None
    except KeyError as exc:  # model_fn reads a feature the input does not have
        if columns is None:
            raise
        raise _columns_rejected(exc, columns) from None
    return path.decode() if isinstance(path, bytes) else str(path)

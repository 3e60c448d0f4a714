"""``tfgpu.configure``: apply device settings before TensorFlow initializes its devices.

TensorFlow accepts memory growth, memory caps, visible devices, logical devices, thread pools and
the GPU allocator only until its first op initializes the devices; afterwards it raises
"Physical devices cannot be modified after being initialized". ``configure`` applies every setting
in one call, skips the ones already in force (so calling it twice is harmless), and when it is too
late says which settings could not be applied and how to reorder the program.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from tfgpu import choices, nvml
from tfgpu.config import RuntimeConfig
from tfgpu.errors import ConfigError, TooLateError

log = logging.getLogger(__name__)

_applied: RuntimeConfig | None = None
# why this process's devices were set up before any configure call could run (a cluster task that
# ``import tfgpu`` started, distribute.prepare_multi_worker), or None
_sealed: str | None = None
# the settings TensorFlow reads when it initializes its devices; the others apply at any time
DEVICE_SETTINGS = (
    "visible_gpus",
    "memory_growth",
    "memory_limit_mb",
    "memory_fraction",
    "logical_cpus",
    "allocator",
    "intra_op_threads",
    "inter_op_threads",
)

_SEALED_FIX = (
    "set them in each worker's environment instead, read when tfgpu is imported: "
    "TFGPU_MEMORY_GROWTH=1, TFGPU_MEMORY_LIMIT_MB=N, ... (tfgpu launch passes its own "
    "environment on; Ray: runtime_env={'env_vars': {...}})"
)
_POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
_TOO_LATE_FIX = (
    "call tfgpu.configure(...) at the very start of the program, before any TensorFlow op, "
    "model, dataset or strategy is created (imports are fine), or set the matching TFGPU_* "
    "variables and call tfgpu.configure() first"
)


def configure(
    *,
    visible_gpus: Any = None,
    memory_growth: bool | None = None,
    memory_limit_mb: int | None = None,
    memory_fraction: float | None = None,
    logical_cpus: int | None = None,
    allocator: str | None = None,
    precision: str | None = None,
    xla: bool | None = None,
    xla_cache: bool | None = None,
    intra_op_threads: int | None = None,
    inter_op_threads: int | None = None,
    deterministic: bool | None = None,
    seed: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> RuntimeConfig:
    """Apply device settings; TFGPU_* variables fill in what is not passed.

    Call it first thing in the program. Returns the settings in force, with ``precision``
    resolved when it was ``"auto"``. Raises ConfigError for a bad value and TooLateError when
    TensorFlow already initialized its devices with different settings.
    """
    explicit = {k: v for k, v in locals().items() if k != "environ"}
    return apply(RuntimeConfig.from_sources(explicit=explicit, environ=environ))


def apply(config: RuntimeConfig) -> RuntimeConfig:
    """Apply a validated RuntimeConfig (see :func:`configure`)."""
    global _applied
    if config == _applied:
        return config
    import tensorflow as tf

    if _sealed:  # the devices started with the process's cluster task: nothing more applies
        late = _late_in_sealed(config)
    else:
        late = [
            s
            for step in (_xla_cache, _allocator, _threads, _visible_gpus, _memory, _logical_cpus)
            for s in step(tf, config)
        ]
    if late:
        why = (
            f"{_sealed}, which initialized TensorFlow's devices"
            if _sealed
            else "TensorFlow had already initialized its devices"
        )
        raise TooLateError(
            f"{why}, so these settings could not be applied: " + ", ".join(late),
            fix=_SEALED_FIX if _sealed else _TOO_LATE_FIX,
        )
    _precision(tf, config)
    if config.xla is not None:
        tf.config.optimizer.set_jit("autoclustering" if config.xla else False)
    if config.deterministic:
        tf.config.experimental.enable_op_determinism()
    if config.seed is not None:
        import keras

        keras.utils.set_random_seed(config.seed)
    _applied = config
    log.debug("tfgpu.configure applied %s", config.to_dict())
    return config


def seal(why: str, environ: Mapping[str, str] | None = None) -> None:
    """Apply the environment's settings (TFGPU_*) before the devices start for a reason tfgpu
    cannot put off (``why``: a cluster task set up at import): a later ``configure`` asking for
    other device settings is said to be too late, not silently ignored (it was: logical CPUs
    asked after the task started were accepted and never made)."""
    global _sealed
    apply(RuntimeConfig.from_sources(explicit={}, environ=environ))
    _sealed = why


def _late_in_sealed(config: RuntimeConfig) -> list[str]:
    """The device settings ``config`` asks for that differ from those the sealed process has."""
    have = _applied or RuntimeConfig()
    return [
        f"{name}={getattr(config, name)!r}"
        for name in DEVICE_SETTINGS
        if getattr(config, name) is not None and getattr(config, name) != getattr(have, name)
    ]


def applied() -> RuntimeConfig | None:
    """The settings the last successful ``configure`` applied, if any."""
    return _applied


def devices_initialized() -> bool:
    """Whether TensorFlow's runtime (and so its device list) is already initialized."""
    from tensorflow.python.eager import context

    return getattr(context.context(), "_context_handle", None) is not None


def _try(setting: str, current: Callable[[], Any], wanted: Any, setter: Callable[[], None]) -> list[str]:
    """Apply one device setting unless already in force; report it when it is too late."""
    try:
        if current() == wanted:
            return []
    except (RuntimeError, ValueError):
        pass
    try:
        setter()
    except RuntimeError as exc:
        log.debug("could not apply %s: %s", setting, exc)
        return [setting]
    return []


XLA_CACHE_FLAG = "--tf_xla_persistent_cache_directory"


def xla_cache_dir(tf_version: str, *, gpus: list[str], environ: Mapping[str, str] | None = None) -> str:
    """Where XLA keeps its executables for this TensorFlow and these devices, under tfgpu's
    cache directory: one folder per TensorFlow version and GPU model, or CPU model on a machine
    without GPUs (an executable is machine code for one of each: XLA:CPU's, loaded on another
    CPU, "could lead to execution errors such as SIGILL", as TensorFlow warns). ``gpus``: the
    GPUs' names (NVML's)."""
    from tfgpu import env

    names = sorted(set(gpus))
    return os.path.join(env.cache_dir(environ), "xla", f"tf-{tf_version}-{_slug(names or [_cpu_model()])}")


def _slug(names: list[str]) -> str:
    return "-".join(re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") for name in names)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return "cpu " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return f"cpu {platform.machine()}"


def _xla_cache(tf: Any, config: RuntimeConfig) -> list[str]:
    """TensorFlow's persistent XLA cache (``TF_XLA_FLAGS``), read once when TensorFlow starts
    its devices: on by default where there are GPUs, on a CPU-only machine when asked
    (``xla_cache=True``: XLA:CPU's compiles are short, and each load logs an error line about
    the CPU's features); left alone where the user's TF_XLA_FLAGS names a cache of their own.
    Too late is said only when it was asked for by name."""
    flags = os.environ.get("TF_XLA_FLAGS", "")
    if config.xla_cache is False or XLA_CACHE_FLAG in flags:
        return []
    if devices_initialized():
        return ["xla_cache=True"] if config.xla_cache else []
    gpus = [gpu.name for gpu in nvml.probe().gpus]
    if config.xla_cache is None and not gpus:
        return []
    directory = xla_cache_dir(tf.__version__, gpus=gpus)
    os.environ["TF_XLA_FLAGS"] = f"{flags} {XLA_CACHE_FLAG}={directory}".strip()
    log.debug("XLA's executables kept in %s", directory)
    return []


def _allocator(tf: Any, config: RuntimeConfig) -> list[str]:
    if config.allocator is None:
        return []
    wanted = "cuda_malloc_async" if config.allocator == "cuda_malloc_async" else None
    if os.environ.get("TF_GPU_ALLOCATOR") == wanted:
        return []
    if devices_initialized():
        return [f"allocator={config.allocator!r}"]
    if wanted is None:
        os.environ.pop("TF_GPU_ALLOCATOR", None)
    else:
        os.environ["TF_GPU_ALLOCATOR"] = wanted
    return []


def _threads(tf: Any, config: RuntimeConfig) -> list[str]:
    late: list[str] = []
    threading = tf.config.threading
    if config.intra_op_threads is not None:
        late += _try(
            f"intra_op_threads={config.intra_op_threads}",
            threading.get_intra_op_parallelism_threads,
            config.intra_op_threads,
            lambda: threading.set_intra_op_parallelism_threads(config.intra_op_threads),
        )
    if config.inter_op_threads is not None:
        late += _try(
            f"inter_op_threads={config.inter_op_threads}",
            threading.get_inter_op_parallelism_threads,
            config.inter_op_threads,
            lambda: threading.set_inter_op_parallelism_threads(config.inter_op_threads),
        )
    return late


def _visible_gpus(tf: Any, config: RuntimeConfig) -> list[str]:
    if config.visible_gpus is None:
        return []
    physical = tf.config.list_physical_devices("GPU")
    missing = [i for i in config.visible_gpus if i >= len(physical)]
    if missing:
        raise ConfigError(
            f"visible_gpus names GPU {missing[0]}, but TensorFlow sees {len(physical)} GPU(s)",
            value=list(config.visible_gpus),
            fix=f"use indices from 0 to {len(physical) - 1}"
            if physical
            else "run `tfgpu doctor` to see why no GPU is visible",
        )
    wanted = [physical[i] for i in config.visible_gpus]
    return _try(
        f"visible_gpus={list(config.visible_gpus)}",
        lambda: tf.config.get_visible_devices("GPU"),
        wanted,
        lambda: tf.config.set_visible_devices(wanted, "GPU"),
    )


def _memory(tf: Any, config: RuntimeConfig) -> list[str]:
    gpus = tf.config.get_visible_devices("GPU")
    if not gpus:
        return []
    late: list[str] = []
    if config.memory_growth is not None:
        for gpu in gpus:
            late += _try(
                f"memory_growth={config.memory_growth}",
                lambda g=gpu: tf.config.experimental.get_memory_growth(g),
                config.memory_growth,
                lambda g=gpu: tf.config.experimental.set_memory_growth(g, config.memory_growth),
            )
    if config.memory_cap_requested:
        limit = config.memory_limit_mb or _fraction_to_mb(config.memory_fraction or 1.0)
        for gpu in gpus:
            late += _try(
                f"memory cap {limit} MB",
                lambda g=gpu: _limits(tf, g),
                [limit],
                lambda g=gpu: tf.config.set_logical_device_configuration(
                    g, [tf.config.LogicalDeviceConfiguration(memory_limit=limit)]
                ),
            )
    return sorted(set(late))


def _limits(tf: Any, device: Any) -> list[Any] | None:
    found = tf.config.get_logical_device_configuration(device)
    return None if found is None else [c.memory_limit for c in found]


def _fraction_to_mb(fraction: float) -> int:
    """A fraction of total GPU memory in MB, from NVML (the smallest visible GPU, to be safe)."""
    report = nvml.probe()
    gpus = nvml.visible(report, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if not gpus:
        raise ConfigError(
            "memory_fraction needs each GPU's total memory, but NVML reports no GPU"
            + (f" ({report.error})" if report.error else ""),
            value=fraction,
            fix="pass memory_limit_mb instead, or run `tfgpu doctor`",
        )
    return max(1, int(min(g.memory_total_mb for g in gpus) * fraction))


def _logical_cpus(tf: Any, config: RuntimeConfig) -> list[str]:
    if config.logical_cpus is None:
        return []
    cpu = tf.config.list_physical_devices("CPU")[0]
    wanted = config.logical_cpus

    def current() -> int:
        found = tf.config.get_logical_device_configuration(cpu)
        return 1 if not found else len(found)

    return _try(
        f"logical_cpus={wanted}",
        current,
        wanted,
        lambda: tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(wanted)]
        ),
    )


def _gpu_compute_capabilities(tf: Any) -> list[tuple[int, int]]:
    found = []
    for gpu in tf.config.get_visible_devices("GPU"):
        details = tf.config.experimental.get_device_details(gpu)
        if details.get("compute_capability"):
            found.append(tuple(details["compute_capability"]))
    if not found and tf.config.get_visible_devices("GPU"):
        report = nvml.probe()
        found = [g.compute_capability for g in nvml.visible(report, os.environ.get("CUDA_VISIBLE_DEVICES"))]
    return found


def resolve_precision(capabilities: list[tuple[int, int]]) -> tuple[str, str]:
    """Pick the precision for 'auto' from the GPUs' compute capabilities: (precision, reason)."""
    if not capabilities:
        return "fp32", "no GPU"
    lowest = min(capabilities)
    text = f"compute capability {lowest[0]}.{lowest[1]}"
    if lowest >= (8, 0):
        return "bf16", text
    if lowest >= (7, 0):
        return "fp16", text
    return "fp32", text + " has no fast fp16"


def _precision(tf: Any, config: RuntimeConfig) -> None:
    if config.precision is None:
        return
    import keras

    precision = config.precision
    if precision == "auto":
        precision, reason = resolve_precision(_gpu_compute_capabilities(tf))
        choices.record("precision", precision, reason)
    keras.mixed_precision.set_dtype_policy(_POLICIES[precision])

"""Every TFGPU_* environment variable, read in this one module.

The launcher (``tfgpu launch``) hands settings to each process through these variables, and
``tfgpu.configure`` reads them; explicit arguments always win over the environment. Each reader
parses and checks its variable here, so a bad value is reported with the variable's name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from tfgpu.errors import ConfigError

PREFIX = "TFGPU_"

# variable -> (RuntimeConfig field, parser name). Keep in step with RuntimeConfig.
RUNTIME_VARIABLES: dict[str, tuple[str, str]] = {
    "TFGPU_VISIBLE_GPUS": ("visible_gpus", "gpus"),
    "TFGPU_MEMORY_GROWTH": ("memory_growth", "bool"),
    "TFGPU_MEMORY_LIMIT_MB": ("memory_limit_mb", "int"),
    "TFGPU_MEMORY_FRACTION": ("memory_fraction", "float"),
    "TFGPU_LOGICAL_CPUS": ("logical_cpus", "int"),
    "TFGPU_ALLOCATOR": ("allocator", "str"),
    "TFGPU_PRECISION": ("precision", "str"),
    "TFGPU_XLA": ("xla", "bool"),
    "TFGPU_XLA_CACHE": ("xla_cache", "bool"),
    "TFGPU_INTRA_OP_THREADS": ("intra_op_threads", "int"),
    "TFGPU_INTER_OP_THREADS": ("inter_op_threads", "int"),
    "TFGPU_DETERMINISTIC": ("deterministic", "bool"),
    "TFGPU_SEED": ("seed", "int"),
}
STRATEGY_VARIABLE = "TFGPU_STRATEGY"
PROGRESS_VARIABLE = "TFGPU_PROGRESS"
VERBOSE_VARIABLE = "TFGPU_VERBOSE"
ATTEMPT_VARIABLE = "TFGPU_LAUNCH_ATTEMPT"  # set by `tfgpu launch`: 0 first, 1 after a restart, ...
PODINFO_VARIABLE = "TFGPU_PODINFO"  # the Downward API folder of a Kubernetes pod (default /etc/podinfo)
HOST_MAP_VARIABLE = "TFGPU_HOST_MAP"  # tests: host names -> "address:port" on this machine
CACHE_VARIABLE = "TFGPU_CACHE_DIR"  # where tune=True keeps its choices (default ~/.cache/tfgpu)
STOP_SIGNALS_VARIABLE = "TFGPU_STOP_SIGNALS"  # the signals that ask a training run to stop (SIGTERM)
STOP_GRACE_VARIABLE = "TFGPU_STOP_GRACE"  # seconds a run asked to stop may take (default 20)
DEFAULT_STOP_GRACE_S = 20.0

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _parse(name: str, raw: str, kind: str) -> Any:
    text = raw.strip()
    try:
        if kind == "bool":
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ValueError
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "gpus":
            return parse_gpu_list(text)
        return text
    except (ValueError, ConfigError):
        expected = {
            "bool": "one of 1/0, true/false, yes/no, on/off",
            "int": "a whole number",
            "float": "a number",
            "gpus": "'all', 'none' or comma-separated GPU indices such as 0,1",
        }[kind]
        raise ConfigError(
            f"Environment variable {name} cannot be read", value=raw, fix=f"set it to {expected}"
        ) from None


def parse_gpu_list(text: str) -> tuple[int, ...] | None:
    """Parse 'all' (None: leave every GPU visible), 'none' (no GPU) or '0,1' (those GPUs)."""
    text = text.strip().lower()
    if text in ("all", ""):
        return None
    if text in ("none", "-1"):
        return ()
    try:
        indices = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(
            "A GPU list must be 'all', 'none' or comma-separated indices",
            value=text,
            fix="write it like 0,1",
        ) from None
    if any(i < 0 for i in indices) or len(set(indices)) != len(indices):
        raise ConfigError(
            "GPU indices must be distinct and not negative", value=text, fix="write it like 0,1"
        )
    return indices


def runtime_settings(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The RuntimeConfig fields set by TFGPU_* variables, parsed (unset variables are absent)."""
    environ = os.environ if environ is None else environ
    settings: dict[str, Any] = {}
    for name, (field, kind) in RUNTIME_VARIABLES.items():
        raw = environ.get(name)
        if raw is not None and raw.strip() != "":
            settings[field] = _parse(name, raw, kind)
    return settings


def strategy_name(environ: Mapping[str, str] | None = None) -> str | None:
    """The strategy forced by TFGPU_STRATEGY, if any."""
    environ = os.environ if environ is None else environ
    value = environ.get(STRATEGY_VARIABLE, "").strip()
    return value or None


def progress_mode(environ: Mapping[str, str] | None = None) -> str | None:
    """TFGPU_PROGRESS: 'bar', 'lines' or 'off'; None lets tfgpu decide from the terminal."""
    environ = os.environ if environ is None else environ
    value = environ.get(PROGRESS_VARIABLE, "").strip().lower()
    if not value:
        return None
    if value not in ("bar", "lines", "off"):
        raise ConfigError(
            f"Environment variable {PROGRESS_VARIABLE} cannot be read",
            value=value,
            fix="set it to bar, lines or off",
        )
    return value


def verbose(environ: Mapping[str, str] | None = None) -> bool:
    """TFGPU_VERBOSE=1: show TensorFlow's and absl's log lines (as --verbose does)."""
    environ = os.environ if environ is None else environ
    return environ.get(VERBOSE_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """TFGPU_* variables that tfgpu does not know (usually a typo), for doctor to point out."""
    environ = os.environ if environ is None else environ
    known = set(RUNTIME_VARIABLES) | {
        STRATEGY_VARIABLE,
        PROGRESS_VARIABLE,
        ATTEMPT_VARIABLE,
        VERBOSE_VARIABLE,
        PODINFO_VARIABLE,
        HOST_MAP_VARIABLE,
        CACHE_VARIABLE,
        STOP_SIGNALS_VARIABLE,
        STOP_GRACE_VARIABLE,
    }
    return sorted(n for n in environ if n.startswith(PREFIX) and n not in known)


def cache_dir(environ: Mapping[str, str] | None = None) -> str:
    """TFGPU_CACHE_DIR: where tfgpu keeps what it measured for reuse (default
    ``$XDG_CACHE_HOME/tfgpu``, else ``~/.cache/tfgpu``)."""
    environ = os.environ if environ is None else environ
    given = environ.get(CACHE_VARIABLE, "").strip()
    if given:
        return given
    base = environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tfgpu")


def podinfo_dir(environ: Mapping[str, str] | None = None) -> str:
    """TFGPU_PODINFO: where a Kubernetes pod's Downward API files are (its ``labels`` file)."""
    environ = os.environ if environ is None else environ
    return environ.get(PODINFO_VARIABLE, "").strip() or "/etc/podinfo"


def host_map(environ: Mapping[str, str] | None = None) -> dict[str, tuple[str, int]]:
    """TFGPU_HOST_MAP: JSON ``{"host name": "address:port"}``; a cluster's ``host name`` is reached
    at ``address``, its first port at ``port`` (the next ones follow). For tests that run a
    multi-node cluster's pods as processes on one machine; a real cluster resolves its names."""
    environ = os.environ if environ is None else environ
    raw = environ.get(HOST_MAP_VARIABLE, "").strip()
    if not raw:
        return {}
    fix = 'set it to JSON like {"job-0.svc": "127.0.0.1:40001", "job-1.svc": "127.0.0.1:40011"}'
    try:
        data = json.loads(raw)
        pairs = {str(k): str(v).rpartition(":") for k, v in data.items()}
        return {k: (host, int(port)) for k, (host, _, port) in pairs.items()}
    except (ValueError, AttributeError):
        raise ConfigError(
            f"Environment variable {HOST_MAP_VARIABLE} cannot be read", value=raw, fix=fix
        ) from None


def stop_signals(environ: Mapping[str, str] | None = None) -> tuple[int, ...]:
    """TFGPU_STOP_SIGNALS: the signals that ask a training run to stop and save (names, comma
    separated: ``SIGTERM,SIGUSR1``; ``none``: none). Default SIGTERM, what Slurm and Kubernetes
    send before they stop a job."""
    import signal

    environ = os.environ if environ is None else environ
    raw = environ.get(STOP_SIGNALS_VARIABLE, "").strip()
    if not raw:
        return (signal.SIGTERM,)
    if raw.lower() == "none":
        return ()
    found = []
    for name in (part.strip().upper() for part in raw.split(",") if part.strip()):
        name = name if name.startswith("SIG") else f"SIG{name}"
        number = getattr(signal.Signals, name, None) if name in signal.Signals.__members__ else None
        if number is None or name in ("SIGKILL", "SIGSTOP"):
            raise ConfigError(
                f"Environment variable {STOP_SIGNALS_VARIABLE} names a signal a run cannot catch",
                value=raw,
                fix="name signals such as SIGTERM,SIGUSR1 (or none)",
            )
        found.append(int(number))
    return tuple(dict.fromkeys(found))


def stop_grace(environ: Mapping[str, str] | None = None) -> float:
    """TFGPU_STOP_GRACE: the seconds a run asked to stop may take to finish its call and save
    before it exits without them (default 20, inside the 30 s Kubernetes and spot machines give)."""
    environ = os.environ if environ is None else environ
    raw = environ.get(STOP_GRACE_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_STOP_GRACE_S
    value = _parse(STOP_GRACE_VARIABLE, raw, "float")
    if value <= 0:
        raise ConfigError(
            f"Environment variable {STOP_GRACE_VARIABLE} must be a number of seconds above 0",
            value=raw,
            fix="set it to e.g. 20",
        )
    return value

"""The kept choice: the key a tuning is kept under, its file, reading and checking it, and the
configuration it chose."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfgpu.errors import ConfigError
from tfgpu.train.tuning.options import FILE, KNOBS, POLICIES, Config
from tfgpu.train.tuning.result import Trial, Tuning


def key_parts(
    *, model: Any, spec: Any, strategy: Any, devices: Sequence[str], knobs: Sequence[str], batch: int
) -> dict[str, str]:
    """What a kept choice depends on, each part as text (a changed part is named)."""
    import keras
    import tensorflow as tf

    import tfgpu

    layers = [
        (type(layer).__name__, [tuple(w.shape) for w in layer.weights])
        for layer in model._flatten_layers(include_self=False)
    ]
    return {
        "model": hashlib.sha256(repr(layers).encode()).hexdigest()[:16],
        "data": str(spec),
        "global_batch": str(batch),
        "strategy": f"{type(strategy).__name__} x {int(strategy.num_replicas_in_sync)}",
        "devices": ",".join(devices),
        "versions": f"tensorflow {tf.__version__}, keras {keras.__version__}, tfgpu {tfgpu.__version__}",
        "knobs": ",".join(knobs),
    }


def key_of(parts: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def kept_path(*, checkpoint_dir: str | None, log_dir: str | None, key: str) -> Path:
    from tfgpu import env

    if checkpoint_dir or log_dir:
        return Path(checkpoint_dir or log_dir) / FILE
    return Path(env.cache_dir()) / "tuning" / f"{key}.json"


def load(path: Path, parts: dict[str, str]) -> tuple[Tuning | None, str]:
    """The kept tuning for ``parts`` at ``path``, or (None, why it must tune again)."""
    if not path.exists():
        return None, ""
    try:
        found = read(path)
    except ConfigError:
        return None, f"re-tuned: {path} could not be read"
    if not found.parts:
        return None, f"re-tuned: {path} could not be read"
    changed = [name for name in parts if found.parts.get(name) != parts[name]]
    if changed:
        return None, f"re-tuned: {', '.join(changed)} changed since {path}"
    return dataclasses.replace(found, key=key_of(parts)), ""


def save(path: Path, parts: dict[str, str], tuning: Tuning) -> None:
    """Write the choice (atomically: a reader never sees half a file, a re-run replaces it whole)."""
    from tfgpu.files import write_json_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {"parts": parts, **{k: v for k, v in tuning.to_dict().items() if k != "reused"}})


def read(path: str | Path) -> Tuning:
    """A saved tuning (``tfgpu tune``'s file, or a kept ``tfgpu-tuning.json``), checked: what
    ``load`` reuses and ``tfgpu train --config`` trains with."""
    path = Path(path)
    try:
        saved = json.loads(path.read_text())
        chosen, parts = saved["choices"], saved.get("parts", {})
        unknown = set(chosen) - set(KNOBS)
        if unknown or not isinstance(parts, dict):
            raise ValueError(f"unknown choices {sorted(unknown)}")
        if chosen.get("precision", "float32") not in POLICIES:
            raise ValueError(f"precision {chosen['precision']!r} is none of {', '.join(POLICIES)}")
        config_of(Tuning(0.0, chosen, {}), Config(1))  # the values are what a Config takes
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"{path} is not a tuning tfgpu wrote ({type(exc).__name__}: {exc})",
            value=str(path),
            fix="pass the file tfgpu tune wrote (tfgpu tune TASK --out tfgpu-tuning.json)",
        ) from None
    return Tuning(
        seconds=0.0,
        choices=chosen,
        gains=saved.get("gains", {}),
        trials=[Trial.from_dict(t) for t in saved.get("trials", [])],
        notes=list(saved.get("notes", [])),
        reused=str(path),
        key=saved.get("key", ""),
        parts=parts,
    )


def differences(saved: dict[str, str], now: dict[str, str]) -> list[str]:
    """The parts of the key a saved tuning was measured for that this run does not share."""
    return [name for name in now if name != "knobs" and saved.get(name, now[name]) != now[name]]


def config_of(tuning: Tuning, default: Config) -> Config:
    """The configuration a (kept) tuning chose."""
    c = tuning.choices
    precision = c.get("precision", default.precision or "float32")
    batch = c.get("batch_size", default.batch)
    devices = 1 if c.get("devices") == 1 else default.devices  # a count that is all replicas: no switch
    return Config(
        steps_per_execution=int(c.get("steps_per_execution", default.steps_per_execution)),
        input=bool(c.get("input", default.input)),
        jit_compile=bool(c.get("jit_compile", default.jit_compile)),
        precision=None if precision == "float32" else str(precision),
        batch=None if batch is None else int(batch),
        devices=devices,
    )


def input_options() -> Any:
    """tf.data's optimizations that change no result (order and values kept)."""
    import tensorflow as tf

    options = tf.data.Options()
    options.deterministic = True
    options.autotune.enabled = True
    options.experimental_optimization.map_parallelization = True
    options.experimental_optimization.parallel_batch = True
    options.experimental_optimization.inject_prefetch = True
    return options

"""RuntimeConfig: the device settings ``tfgpu.configure`` applies, validated once, at the edge.

Library code receives a RuntimeConfig and never re-checks it; the CLI, the TFGPU_* environment and
keyword arguments all become one of these first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfgpu import env
from tfgpu.errors import ConfigError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
ALLOCATORS = ("default", "cuda_malloc_async")


@dataclass(frozen=True)
class RuntimeConfig:
    """Device settings. ``None`` means "leave TensorFlow's default alone".

    Attributes:
        visible_gpus: GPU indices TensorFlow may use (``()`` for none, ``None`` for all).
        memory_growth: allocate GPU memory as needed instead of mapping nearly all of it.
        memory_limit_mb: hard cap per GPU, in MB (lets several processes share one GPU).
        memory_fraction: hard cap per GPU as a fraction of its total memory (read through NVML).
        logical_cpus: split the CPU into this many logical devices (multi-device code on a CPU).
        allocator: ``"cuda_malloc_async"`` uses CUDA's async allocator, which can return memory.
        precision: ``"auto"`` (bf16 on compute capability >= 8.0, fp16 on 7.x, fp32 otherwise),
            ``"fp32"``, ``"bf16"`` or ``"fp16"``; sets the Keras global dtype policy.
        xla: turn XLA auto-clustering on or off for TensorFlow functions.
        xla_cache: keep XLA's compiled executables under tfgpu's cache directory, so a second
            run of the same model compiles nothing (TensorFlow's persistent XLA cache). None:
            on where there are GPUs; True: on a CPU too; False: off. Applied only before
            TensorFlow initializes its devices.
        intra_op_threads / inter_op_threads: TensorFlow's thread pools (0 = TensorFlow decides).
        deterministic: enable op determinism (same results run to run, somewhat slower).
        seed: seed Python, NumPy and TensorFlow.
    """

    visible_gpus: tuple[int, ...] | None = None
    memory_growth: bool | None = None
    memory_limit_mb: int | None = None
    memory_fraction: float | None = None
    logical_cpus: int | None = None
    allocator: str | None = None
    precision: str | None = None
    xla: bool | None = None
    xla_cache: bool | None = None
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None
    deterministic: bool | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.visible_gpus is not None and not isinstance(self.visible_gpus, tuple):
            object.__setattr__(self, "visible_gpus", _normalize_gpus(self.visible_gpus))
        _check_positive("memory_limit_mb", self.memory_limit_mb, minimum=1)
        _check_positive("logical_cpus", self.logical_cpus, minimum=1)
        _check_positive("intra_op_threads", self.intra_op_threads, minimum=0)
        _check_positive("inter_op_threads", self.inter_op_threads, minimum=0)
        if self.memory_fraction is not None and not 0.0 < self.memory_fraction <= 1.0:
            raise ConfigError(
                "memory_fraction must be above 0 and at most 1",
                value=self.memory_fraction,
                fix="pass a fraction of each GPU's total memory, such as 0.45",
            )
        if self.memory_limit_mb is not None and self.memory_fraction is not None:
            raise ConfigError(
                "memory_limit_mb and memory_fraction both set a memory cap",
                value=(self.memory_limit_mb, self.memory_fraction),
                fix="pass only one of them",
            )
        if self.memory_growth and self.memory_cap_requested:
            raise ConfigError(
                "memory_growth cannot be combined with a memory cap: TensorFlow rejects memory "
                "growth on a GPU that has a memory limit",
                value={"memory_growth": True, "cap": self.memory_limit_mb or self.memory_fraction},
                fix="use the cap alone (it already stops one process taking the whole GPU)",
            )
        _check_choice("precision", self.precision, PRECISIONS)
        _check_choice("allocator", self.allocator, ALLOCATORS)
        for name in ("memory_growth", "xla", "xla_cache", "deterministic"):
            _check_bool(name, getattr(self, name))

    @property
    def memory_cap_requested(self) -> bool:
        return self.memory_limit_mb is not None or self.memory_fraction is not None

    @classmethod
    def from_sources(
        cls, *, explicit: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> RuntimeConfig:
        """Merge TFGPU_* variables with explicit arguments; an explicit non-None value wins."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(explicit) - names)
        if unknown:
            raise ConfigError(
                f"Unknown configure() option {unknown[0]!r}",
                value=unknown,
                fix=f"use one of: {', '.join(sorted(names))}",
            )
        merged = env.runtime_settings(environ)
        merged.update({k: v for k, v in explicit.items() if v is not None})
        return cls(**merged)

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(self).items()}


def _normalize_gpus(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, str):
        return env.parse_gpu_list(value)
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, Sequence):
        return env.parse_gpu_list(",".join(str(int(v)) for v in value)) if value else ()
    raise ConfigError(
        "visible_gpus must be 'all', 'none', an index or a list of indices",
        value=value,
        fix="pass visible_gpus=[0, 1]",
    )


def _check_positive(name: str, value: int | None, *, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(
            f"{name} must be a whole number >= {minimum}",
            value=value,
            fix=f"pass {name}={max(minimum, 1)} or more, or leave it unset",
        )


def _check_bool(name: str, value: object) -> None:
    """A switch is True, False or None: a string such as "no" would read as on."""
    if value is not None and not isinstance(value, bool):
        raise ConfigError(
            f"{name} must be True or False",
            value=value,
            fix=f"pass {name}=True, {name}=False, or leave it unset",
        )


def _check_choice(name: str, value: str | None, choices: tuple[str, ...]) -> None:
    if value is not None and value not in choices:
        raise ConfigError(
            f"{name} must be one of {', '.join(choices)}", value=value, fix=f"pass {name}={choices[0]!r}"
        )

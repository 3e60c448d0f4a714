"""What ``tune=`` asks for (``TuneOptions``), one configuration of a run's step (``Config``), and
the constants the tuner decides by."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from tfgpu.errors import ConfigError

KNOBS = ("steps_per_execution", "input", "jit_compile", "precision", "batch_size", "devices")
DEFAULT_KNOBS = ("steps_per_execution", "input", "jit_compile", "devices")  # tune=True
ALL_KNOBS = tuple(k for k in KNOBS if k != "batch_size")  # tune="all"; batch: batch_size="auto"
STEPS = (1, 4, 16, 64, 256, 1024)
MIN_GAIN = 1.03  # a choice must gain at least this (median of the paired rounds)
MIN_BATCH_GAIN = 1.05  # a doubling of the batch must gain at least this
MAX_DOUBLINGS = 8
ROUNDS = 3  # the rounds a comparison is planned for (the budget's forecast); most end there
MIN_ROUNDS, MAX_ROUNDS = 3, 12  # the sequential test's (``verdict``)
TAKE_CONFIDENCE, DROP_CONFIDENCE = 0.99, 0.8
LOSS_RTOL = 1e-3  # XLA's loss against the step without it, over the same batches
POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
PRECISION_RTOL = 0.05  # mixed precision's loss against float32's, after the same steps
BUDGET_FLOOR_S, BUDGET_CAP_S, BUDGET_SHARE = 20.0, 60.0, 0.05
FILE = "tfgpu-tuning.json"


@dataclass(frozen=True)
class TuneOptions:
    """What ``tune=`` asks for, checked once.

    Args:
        knobs: the knobs to tune (``KNOBS``): ``tune=True`` takes ``DEFAULT_KNOBS`` (the number
            of devices measured and said, not switched), ``tune="all"`` adds precision and lets
            the devices switch; ``batch_size`` is added by ``batch_size="auto"``.
        budget_s: seconds the measurement may take; None: the larger of 20 s and 5% of the run's
            estimated length, at most 60 s.
        keep: reuse (and save) the choice for the same model, data, strategy and versions.
        switch_devices: train on one device when it is faster than all (``tune="all"``, or
            ``"devices"`` named); else that is measured and said only.
    """

    knobs: tuple[str, ...] = DEFAULT_KNOBS
    budget_s: float | None = None
    keep: bool = True
    switch_devices: bool = False

    def __post_init__(self) -> None:
        unknown = [k for k in self.knobs if k not in KNOBS]
        if unknown or not self.knobs:
            raise ConfigError(
                "tune takes True, 'all', or knob names",
                value=list(self.knobs),
                fix=f"pick from {', '.join(KNOBS)}",
            )
        if self.budget_s is not None and (
            isinstance(self.budget_s, bool)
            or not isinstance(self.budget_s, int | float)
            or self.budget_s <= 0
        ):
            raise ConfigError(
                "tune_budget_s must be a positive number of seconds", value=self.budget_s, fix="pass 20"
            )

    @property
    def keyed(self) -> tuple[str, ...]:
        """What a kept choice of these options is kept under: the knobs, and whether the devices
        may switch (tune=True's measurement of one device must not reuse tune='all''s switch)."""
        return self.knobs + (("devices switched",) if self.switch_devices else ())

    @classmethod
    def from_arg(cls, tune: Any, budget_s: Any = None, *, auto_batch: bool = False) -> TuneOptions | None:
        """``tfgpu.fit``'s ``tune``, ``tune_budget_s`` and ``batch_size="auto"`` as options
        (None: no tuning). ``batch_size="auto"`` alone tunes the batch only."""
        if isinstance(tune, cls):
            knobs = tune.knobs + (("batch_size",) if auto_batch and "batch_size" not in tune.knobs else ())
            return replace(tune, knobs=knobs, budget_s=tune.budget_s if budget_s is None else budget_s)
        if tune is None or tune is False:
            if auto_batch:
                return cls(knobs=("batch_size",), budget_s=budget_s)
            if budget_s is not None:
                raise ConfigError("tune_budget_s needs tune=True", value=budget_s, fix="pass tune=True too")
            return None
        batch = ("batch_size",) if auto_batch else ()
        if tune is True:
            return cls(knobs=DEFAULT_KNOBS + batch, budget_s=budget_s)
        if tune == "all":
            return cls(knobs=ALL_KNOBS + batch, budget_s=budget_s, switch_devices=True)
        named = (tune,) if isinstance(tune, str) else tuple(tune) if isinstance(tune, Sequence) else None
        if named is None:
            raise ConfigError("tune takes True, 'all', or knob names", value=tune, fix="pass tune=True")
        if "batch_size" in named and not auto_batch:
            raise ConfigError(
                "the batch size is tuned with batch_size='auto' (the batch is otherwise the user's)",
                value=list(named),
                fix="pass batch_size='auto' (tfgpu train: --batch-size auto) and leave it out of tune",
            )
        return cls(
            knobs=tuple(dict.fromkeys(named + batch)), budget_s=budget_s, switch_devices="devices" in named
        )


@dataclass(frozen=True)
class Config:
    """One configuration of the run's step."""

    steps_per_execution: int
    input: bool = False
    jit_compile: bool = False
    precision: str | None = None  # a mixed policy ("mixed_bfloat16"); None: as the model was built
    batch: int | None = None  # the global batch; None: the run's
    devices: int | None = None  # 1: one device; None: all the strategy's replicas

    def label(self) -> str:
        return (
            f"steps_per_execution={self.steps_per_execution}"
            + (", input tuned" if self.input else "")
            + (", XLA" if self.jit_compile else "")
            + (f", {self.precision}" if self.precision else "")
            + (f", batch {self.batch}" if self.batch else "")
            + (", 1 device" if self.devices == 1 else "")
        )

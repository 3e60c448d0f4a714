"""What a training run is asked to do: ``TrainOptions``, with its ``Placement`` and its tuning's
``TuneOptions``; and what it trains with, ``Config`` (one configuration of the run's step, the
one a tuning replaces whole). What it reports is ``train.loop.result``.

One tree, built once at the edge: ``tfgpu.fit``, ``Trainer``, ``tfgpu train`` and ``tfgpu tune``
all make it with ``TrainOptions.of`` from the flat keywords they take, and every field is checked
here, once (the anchors: torchtitan's ``Trainer.Config`` with a sub-config per concern,
accelerate's dataclasses per concern)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from tfgpu.errors import ConfigError, refuse_unknown

DEFAULT_LOG_EVERY = 100
REMAT_MODES = ("full", "activations", "largest")
KNOBS = ("steps_per_execution", "input", "jit_compile", "precision", "batch_size", "devices")
DEFAULT_KNOBS = ("steps_per_execution", "input", "jit_compile", "devices")  # tune=True
ALL_KNOBS = tuple(k for k in KNOBS if k != "batch_size")  # tune="all"; batch: batch_size="auto"
POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")


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
            return dataclasses.replace(
                tune, knobs=knobs, budget_s=tune.budget_s if budget_s is None else budget_s
            )
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


@dataclass(frozen=True)
class Placement:
    """Where the model's computation goes, beyond the strategy's replicas.

    Args:
        remat: recompute activations in the backward pass instead of keeping them, for this run:
            "full" (True) every layer, "activations" each activation function, "largest" the
            layers with the largest outputs; None: as the model was built.
        devices_per_replica: each replica's layers split over K of this process's devices (by
            their memory); several groups of K train data parallel. None or 1: no split.
        micro_batches: a split replica's batch run in this many pieces so its devices work at
            the same time (default 2K).
    """

    remat: str | None = None
    devices_per_replica: int | None = None
    micro_batches: int | None = None

    def __post_init__(self) -> None:
        remat = (
            {False: None, True: "full"}.get(self.remat, self.remat)
            if isinstance(self.remat, bool)
            else self.remat
        )
        if remat is not None and remat not in REMAT_MODES:
            raise ConfigError(
                "remat must be True, 'full', 'activations' or 'largest'",
                value=self.remat,
                fix="pass remat=True (every layer), or build the model in keras.RematScope(...) for Keras's other modes",
            )
        object.__setattr__(self, "remat", remat)
        for name in ("devices_per_replica", "micro_batches"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name} must be a whole number of at least 1", value=value, fix="pass 2")

    @property
    def splits(self) -> bool:
        """A split was asked for: more than one device per replica, or micro-batches."""
        return self.devices_per_replica not in (None, 1) or self.micro_batches is not None


@dataclass(frozen=True)
class TrainOptions:
    """How ``Trainer`` runs; validated once, here.

    Args:
        steps_per_execution: training steps per compiled call, run in an in-graph loop that takes
            each batch from the iterator itself. None (the default): ``log_every``, so the host
            makes one call per log window and never waits for the device in between.
        log_every: read loss, NaN check, input wait and throughput from the device every N steps
            (and at each epoch's end); progress, TensorBoard and the timeline get one point each.
            Reading sooner syncs the host with the device, which idles a GPU.
        jit_compile: compile the step with XLA; None: as the model's ``compile`` asked
            (``jit_compile=True``), said in the choices, and not where XLA cannot compile it.
        checkpoint_dir / checkpoint_every / keep_checkpoints: save model, optimizer, step and
            epoch every N steps and at the end, keep the last K; a new Trainer on the same
            directory resumes from the latest. ``checkpoint_epochs``: save at each epoch's end
            too (Keras's ``BackupAndRestore(save_freq="epoch")``).
        log_dir: TensorBoard scalars (loss, examples/s, input wait), written by the chief.
        monitor_gpus: sample GPU utilization through NVML while training.
        tune: measure candidate configurations before the first epoch and train with the
            fastest (``train.tuning``; a ``TuneOptions``, None: no tuning).
        tuning_file: train with the configuration a saved tuning chose (``tfgpu tune``'s file,
            ``tfgpu train --config``), without measuring.
        prove: before the first step on several replicas, run the model's own step once on them
            and once on one device from the same state and rows, and say whether they agree
            (``train.model.proof``); the variables are left as they were.
        placement: remat and the model's split over devices (``Placement``).

    ``TrainOptions.of`` takes every field flat (``remat=``, ``devices_per_replica=`` included).
    """

    steps_per_execution: int | None = None
    log_every: int = DEFAULT_LOG_EVERY
    jit_compile: bool | None = None
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None
    keep_checkpoints: int = 3
    checkpoint_epochs: bool = False
    log_dir: str | None = None
    monitor_gpus: bool = True
    tune: TuneOptions | None = None
    tuning_file: str | None = None
    prove: bool = True
    placement: Placement = Placement()

    def __post_init__(self) -> None:
        if not isinstance(self.tune, TuneOptions | None):  # True, "all", knob names
            object.__setattr__(self, "tune", TuneOptions.from_arg(self.tune))
        if not isinstance(self.placement, Placement):
            raise ConfigError(
                "placement must be a tfgpu.train.pieces.options.Placement",
                value=type(self.placement).__name__,
                fix="pass remat=, devices_per_replica=, micro_batches= (TrainOptions.of takes them flat)",
            )
        if self.tuning_file is not None:
            if self.tune is not None:
                raise ConfigError(
                    "a saved tuning (--config) and tune=True exclude each other",
                    value=self.tuning_file,
                    fix="pass one: --config FILE trains with FILE's choice, --tune measures again",
                )
            if not Path(self.tuning_file).is_file():  # its content: read by the Trainer, first
                raise ConfigError(
                    f"{self.tuning_file} is not a tuning tfgpu wrote (--config: no such file)",
                    value=str(self.tuning_file),
                    fix="pass the file tfgpu tune wrote (tfgpu tune TASK --out tfgpu-tuning.json)",
                )
        for name, value in (
            ("steps_per_execution", self.steps_per_execution),
            ("log_every", self.log_every),
            ("checkpoint_every", self.checkpoint_every),
            ("keep_checkpoints", self.keep_checkpoints),
        ):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(
                    f"{name} must be a whole number of at least 1", value=value, fix="pass 1 or more"
                )
        for name, value in (("checkpoint_dir", self.checkpoint_dir), ("log_dir", self.log_dir)):
            if value is not None and Path(value).exists() and not Path(value).is_dir():
                flag = "--" + name.replace("_", "-")
                raise ConfigError(
                    f"{name} ({flag}) must be a directory, and this is a file",
                    value=str(value),
                    fix=f"pass a directory (it is created if missing), e.g. {flag} {Path(value).with_suffix('')}-dir",
                )

    @property
    def execution_steps(self) -> int:
        """Steps per compiled call (never more than a log window)."""
        return min(self.steps_per_execution or self.log_every, self.log_every)

    def boundaries(self) -> tuple[int, ...]:
        """Step multiples at which an execution must end: log points and checkpoints."""
        return tuple(b for b in (self.log_every, self.checkpoint_every) if b)

    @classmethod
    def names(cls) -> set[str]:
        """Every keyword ``of`` takes: the fields, the placement's, and the tuning's budget."""
        return {f.name for f in fields(cls)} - {"placement"} | PLACEMENT | {"tune_budget_s"}

    @classmethod
    def of(
        cls,
        base: TrainOptions | None = None,
        *,
        tune_budget_s: float | None = None,
        auto_batch: bool = False,
        what: str = "option",
        **flat: Any,
    ) -> TrainOptions:
        """The tree from flat keywords (``remat=``, ``tune=True``, ``tune_budget_s=`` ...), over
        ``base``'s values; an unknown keyword is refused with the names there are.
        ``auto_batch``: the batch size is tuned too (``batch_size="auto"``)."""
        refuse_unknown(flat, cls.names(), what=what)
        base = base or cls()
        # None for a field whose default is not None means "not given" (an unset CLI flag)
        flat = {k: v for k, v in flat.items() if v is not None or _DEFAULTS.get(k) is None}
        placement = {k: flat.pop(k) for k in PLACEMENT & set(flat)}
        if tune_budget_s is not None or auto_batch or "tune" in flat:
            flat["tune"] = TuneOptions.from_arg(
                flat.get("tune", base.tune), tune_budget_s, auto_batch=auto_batch
            )
        for name in ("checkpoint_dir", "log_dir"):
            if flat.get(name) is not None:
                flat[name] = str(flat[name])
        if placement:
            flat["placement"] = dataclasses.replace(base.placement, **placement)
        return dataclasses.replace(base, **flat)

    def tuned(self, *, steps_per_execution: int, jit_compile: bool) -> TrainOptions:
        """These options with what a tuning chose (the log window at least one call long)."""
        return dataclasses.replace(
            self,
            steps_per_execution=steps_per_execution,
            log_every=max(self.log_every, steps_per_execution),
            jit_compile=jit_compile,
        )


PLACEMENT = {f.name for f in fields(Placement)}
_DEFAULTS = {f.name: f.default for f in (*fields(TrainOptions), *fields(Placement))}

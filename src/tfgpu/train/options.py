"""What a training run is asked to do: ``TrainOptions``, with its ``Placement`` and its tuning's
``TuneOptions`` (what it reports is ``train.result``).

One tree, built once at the edge: ``tfgpu.fit``, ``Trainer``, ``tfgpu train`` and ``tfgpu tune``
all make it with ``TrainOptions.of`` from the flat keywords they take, and every field is checked
here, once (the anchors: torchtitan's ``Trainer.Config`` with a sub-config per concern,
accelerate's dataclasses per concern)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from tfgpu.errors import ConfigError, refuse_unknown
from tfgpu.train.tuning.options import TuneOptions

DEFAULT_LOG_EVERY = 100
REMAT_MODES = ("full", "activations", "largest")


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
            (``train.proof``); the variables are left as they were.
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
        from tfgpu.train.tuning import kept

        if not isinstance(self.tune, TuneOptions | None):  # True, "all", knob names
            object.__setattr__(self, "tune", TuneOptions.from_arg(self.tune))
        if not isinstance(self.placement, Placement):
            raise ConfigError(
                "placement must be a tfgpu.train.options.Placement",
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
            kept.read(self.tuning_file)  # refused here, before anything is built
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

"""What a training run reports: ``Progress`` while it runs, ``TrainResult`` at its end.

The result stays typed until it is printed or written: its steady state, its warm-up, its
tuning (``tuning.Tuning``) and its proof (``proof.Proof``) are objects read by field, and
``TrainResult.to_dict()`` is the one JSON edge (``tfgpu train --json``, the run record that
``tfgpu report`` reads)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tfgpu import verdict
from tfgpu.train.model.proof import Proof
from tfgpu.train.pieces.tuned import Tuning


@dataclass
class Progress:
    step: int
    epoch: int
    loss: float
    examples_per_s: float
    input_wait_fraction: float
    total_steps: int | None


@dataclass(frozen=True)
class Steady:
    """The steady state: the epochs not counted as warm-up, their timed steps, start-up costs
    (tracing, each epoch's first fetch) left out."""

    epochs: tuple[int, ...]
    steps: int
    seconds: float
    examples_per_s: float
    input_wait_fraction: float

    def to_dict(self) -> dict[str, Any]:
        return _rounded({**dataclasses.asdict(self), "epochs": list(self.epochs)})


@dataclass(frozen=True)
class WarmEpoch:
    """An epoch counted as warm-up (``why``: e.g. "filled the cache"), with its own figures."""

    epoch: int
    why: str
    steps: int
    seconds: float
    examples_per_s: float
    input_wait_fraction: float


@dataclass(frozen=True)
class WarmUp:
    """Warm-up, apart from the steady state: the first calls (tracing), each epoch's first fetch,
    and the epochs that filled a cache."""

    tracing_s: float = 0.0
    first_fetches: int = 0
    first_fetch_s: float = 0.0
    epochs: tuple[WarmEpoch, ...] = ()

    def sentence(self) -> str:
        """What warm-up cost and what an epoch that filled a cache looked like ("" when nothing)."""
        parts = []
        if self.tracing_s:
            parts.append(f"first call (tracing) {self.tracing_s:.1f} s")
        if self.first_fetches:
            parts.append(f"{self.first_fetches} epoch starts {self.first_fetch_s:.2f} s")
        for e in self.epochs:
            parts.append(
                f"epoch {e.epoch} {e.why}: {e.input_wait_fraction:.0%} waiting, {e.examples_per_s:,.0f} examples/s"
            )
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tracing_s": round(self.tracing_s, 3),
            "first_fetches": self.first_fetches,
            "first_fetch_s": round(self.first_fetch_s, 4),
            "epochs": [_rounded(dataclasses.asdict(e)) for e in self.epochs],
        }


_DIGITS = {"seconds": 3, "examples_per_s": 1, "input_wait_fraction": 4}


def _rounded(figures: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, _DIGITS[k]) if k in _DIGITS else v for k, v in figures.items()}


@dataclass
class TrainResult:
    steps: int
    epochs: int
    global_batch: int
    replicas: int
    seconds: float
    examples_per_s: float
    input_wait_fraction: float
    verdict: verdict.Verdict
    history: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    gpu_utilization: list[dict[str, Any]] = field(default_factory=list)
    final_checkpoint: str | None = None
    resumed_from: str | None = None
    overall_examples_per_s: float = 0.0  # everything: tracing, first fetches, warm epochs
    steady: Steady | None = None  # None: too short a run to have a steady state
    warm_up: WarmUp = field(default_factory=WarmUp)
    tuning: Tuning | None = None  # what tune=True chose, and why
    proof: Proof | None = None  # the replicas' first step against one device's (train.proof)
    # False under op determinism, which forbids the graph's clock (``graphs.clock_readable``)
    input_wait_measured: bool = True

    def sentence(self) -> str:
        """The verdict, saying what it covers: the steady state, or everything when there is none."""
        if not self.input_wait_measured:
            return (
                "input wait not measured: op determinism is on, and it forbids the clock the loop reads "
                "(tf.timestamp); `tfgpu diagnose` measures it with determinism off"
            )
        if self.steady is None:
            return f"{self.verdict.sentence()} (no steady state: the run was too short, warm-up included)"
        epochs = self.steady.epochs
        span = f"epoch {epochs[0]}" if len(epochs) == 1 else f"epochs {epochs[0]}-{epochs[-1]}"
        return f"{self.verdict.sentence()} (steady state, {span})"

    def warm_up_sentence(self) -> str:
        """Warm-up, on its own: what it cost and what an epoch that filled a cache looked like."""
        return self.warm_up.sentence()

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "epochs": self.epochs,
            "global_batch": self.global_batch,
            "replicas": self.replicas,
            "seconds": round(self.seconds, 3),
            "examples_per_s": round(self.examples_per_s, 1),
            "input_wait_fraction": round(self.input_wait_fraction, 4),
            "input_wait_measured": self.input_wait_measured,
            "bottleneck": self.verdict.bottleneck,
            "input_bound": self.verdict.input_bound,
            "verdict": self.sentence(),
            "overall_examples_per_s": round(self.overall_examples_per_s, 1),
            "steady": None if self.steady is None else self.steady.to_dict(),
            "warm_up": self.warm_up.to_dict(),
            "warm_up_summary": self.warm_up_sentence(),
            "proof": None if self.proof is None else self.proof.to_dict(),
            "history": self.history,
            "timeline": self.timeline,
            "gpu_utilization": self.gpu_utilization,
            "final_checkpoint": self.final_checkpoint,
            "resumed_from": self.resumed_from,
            "tuning": None if self.tuning is None else self.tuning.to_dict(),
        }

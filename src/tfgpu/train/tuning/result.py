"""What tuning found (``Tuning``), and its renderings: one line, a table row per trial."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfgpu.train.tuning.options import ROUNDS


@dataclass(frozen=True)
class Trial:
    """One comparison ``Tuner.compare`` made: a knob's candidate against its rival, in paired
    rounds. Typed until the JSON edge (``to_dict``, ``from_dict`` for a kept file)."""

    knob: str
    baseline: str  # the rival's label (``Config.label``)
    candidate: str
    baseline_examples_per_s: float  # medians of the rounds
    candidate_examples_per_s: float
    ratio: float  # the median of the rounds' candidate / baseline
    spread: tuple[float, float]  # the lowest and highest ratio
    rounds: int = ROUNDS
    decision: str = ""  # take | drop | not decided ("" in files from before decisions were kept)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "spread": list(self.spread)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Trial:
        """A trial as ``to_dict`` wrote it (a kept tuning's file, a result's JSON)."""
        names = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in data.items() if k in names}
        return cls(**{**known, "spread": tuple(data["spread"])})


@dataclass
class Tuning:
    """What tuning found, as ``history.train_result.tuning`` holds it (``to_dict()`` at the JSON
    edge: the kept file, ``tfgpu train --json``, the report)."""

    seconds: float
    choices: dict[str, Any]
    gains: dict[str, float | None]
    trials: list[Trial] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reused: str | None = None  # the file the choice was kept in, when it was reused
    key: str = ""
    parts: dict[str, str] = field(default_factory=dict)  # what the key was made of (key_parts)

    def before_after(self) -> tuple[float, float] | None:
        """Examples/s of the default and of the chosen configuration, from the trial that proved
        the choice (None when nothing was changed, or the choice was kept from an earlier run)."""
        together = [t for t in self.trials if t.knob == "together"]
        if not together or together[-1].decision not in ("take", ""):
            return None  # the default kept: its speed is the run's (a "31,087 -> 18,154" read as a loss)
        return together[-1].baseline_examples_per_s, together[-1].candidate_examples_per_s

    def to_dict(self) -> dict[str, Any]:
        measured = self.before_after()
        return {
            "before_examples_per_s": measured and measured[0],
            "after_examples_per_s": measured and measured[1],
            "seconds": round(self.seconds, 3),
            "choices": self.choices,
            "gains": {k: None if v is None else round(v, 3) for k, v in self.gains.items()},
            "trials": [t.to_dict() for t in self.trials],
            "notes": self.notes,
            "reused": self.reused,
            "key": self.key,
            "summary": self.line(),
        }

    @property
    def summary(self) -> str:
        """The line tfgpu prints: what was chosen and why (``line()``)."""
        return self.line()

    def line(self) -> str:
        """One line: what was chosen and why, with the measured gains and the tuning time."""
        parts = []
        for knob, value in self.choices.items():
            gain = self.gains.get(knob)
            shown = (
                ("tuned" if value else "as given")
                if knob == "input"
                else ({True: "on", False: "off"}[value] if isinstance(value, bool) else value)
            )
            text = f"{knob}={shown}"
            if gain is not None and knob == "devices":
                text += f" ({gain:.2f}x over {'all' if value == 1 else 1})"
            elif gain is not None:
                text += f" ({gain:.2f}x: not taken)" if value in (False, "float32") else f" ({gain:.2f}x)"
            parts.append(text)
        head = (
            f"tfgpu kept the tuning from {self.reused}"
            if self.reused
            else f"tfgpu tuned in {self.seconds:.0f} s"
        )
        measured = self.before_after()
        if measured and not self.reused:
            head += f" ({measured[0]:,.0f} -> {measured[1]:,.0f} examples/s)"
        notes = _merged_notes(self.notes)
        return f"{head}: " + ", ".join(parts) + ("; " + "; ".join(notes) if notes else "")


def _merged_notes(notes: Sequence[str]) -> list[str]:
    """The notes, those of a spent budget said once: "budget of 8 s spent: input and XLA not
    tried", not the budget twice in one sentence."""
    spent = [n for n in notes if n.startswith("budget of ") and n.endswith(" not tried") and ": " in n]
    if len(spent) < 2:
        return list(notes)
    head = spent[0].split(": ", 1)[0]
    what = [n.split(": ", 1)[1].removesuffix(" not tried") for n in spent]
    merged = f"{head}: {', '.join(what[:-1])} and {what[-1]} not tried"
    return [n for n in notes if n not in spent] + [merged]


TRIAL_COLUMNS = ("knob", "from", "to", "from ex/s", "to ex/s", "ratio", "spread")


def trial_row(trial: Trial) -> list[str]:
    """One trial as the cells of ``TRIAL_COLUMNS``; K: steps per call."""
    low, high = trial.spread
    decision = {"take": "taken", "drop": "dropped", "not decided": "open"}.get(trial.decision, "")
    spread = f"{low:.2f}-{high:.2f} ({trial.rounds}{', ' + decision if decision else ''})"
    return [
        {"steps_per_execution": "K", "jit_compile": "XLA", "batch_size": "batch"}.get(trial.knob, trial.knob),
        short(trial.baseline),
        short(trial.candidate),
        f"{trial.baseline_examples_per_s:,.0f}",
        f"{trial.candidate_examples_per_s:,.0f}",
        f"{trial.ratio:.2f}x",
        spread,
    ]


def short(label: str) -> str:
    """A configuration's label (``Config.label``) for a table cell or a plot: ``K=64 +input +XLA``."""
    return (
        label.replace("steps_per_execution=", "K=")
        .replace(", input tuned", " +input")
        .replace(", XLA", " +XLA")
        .replace(", mixed_", " +")
        .replace(", batch ", " batch=")
        .replace(", 1 device", " x1")
    )

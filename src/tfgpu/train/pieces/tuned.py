"""What tuning found (``Tuning``, its ``Trial``s), its renderings (one line, a table row per trial),
and its kept file: the key a tuning is kept under, writing and reading it, and the configuration it
chose (the JSON edge of a tuning)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfgpu.errors import ConfigError
from tfgpu.train.pieces.options import KNOBS, POLICIES, Config

ROUNDS = 3  # the rounds a comparison is planned for (the tuner's budget forecast); most end there
FILE = "tfgpu-tuning.json"


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
    xla_compile_s: float | None = None  # XLA's first compile as the tuner timed it, tracing aside
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
            "xla_compile_s": None if self.xla_compile_s is None else round(self.xla_compile_s, 3),
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
        if not parts and not self.trials and not self.reused:  # nothing measured: the notes say why
            return "tfgpu did not tune: " + "; ".join(notes)
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


# -- the kept file ---------------------------------------------------------------------------------


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

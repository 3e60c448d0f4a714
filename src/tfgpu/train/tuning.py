"""``tune=True``: measure, choose, prove and keep the fastest configuration of a run.

Before the first epoch the Trainer times candidate configurations on the real model, strategy and
data, through its own compiled execution (``train.timing``: the measurement diagnose uses too),
and trains with the fastest. The knobs, in the order that usually matters:

- ``steps_per_execution``: 1, 4, 16, 64, 256, 1024 (no more than an epoch), upwards until a step
  gains less than 3%; then the best found against the run's default (one call per log window);
- ``input``: tf.data's own optimizations that change no result: sequential maps made parallel
  (deterministic order kept), batching in parallel, autotuned buffers, a prefetch injected;
- ``jit_compile``: XLA, kept only when faster *and* the loss over the same batches from the same
  state agrees with the step without it (relative 1e-3); a model XLA cannot compile keeps the
  step as it is, with the first line of XLA's error.

Each choice is made from paired, interleaved rounds (A B, B A, A B: these machines drift and are
bimodal), and taken only when every round's ratio favours it (its spread clears 1) and the median
gains at least 3%; the whole choice is then timed against the default (the ``together`` trial, the
run's before and after) and kept only when it wins there too. Trials run from fresh iterators over the same data and are wrapped in
``timing.restored``: the user's callbacks, History, checkpoints and metrics never see them, and
the model trains from exactly the state an untuned run starts from; the result-preserving knobs
(all three here, XLA up to its checked tolerance) leave the weights those of the untuned run.

The choice is kept: in ``checkpoint_dir`` (else ``log_dir``) as ``tfgpu-tuning.json``, else in
tfgpu's cache (``TFGPU_CACHE_DIR``) under a key of the model's structure, the data's signature,
the strategy, the devices, the versions and the knobs; a run with the same key reuses it without
measuring, a changed key re-tunes and says what changed.

Not built yet (the issue's other knobs): mixed precision, ``batch_size="auto"``, the number of
devices; asking for them is refused with that said. Several workers (MultiWorkerMirrored,
ParameterServer) are not tuned: every worker would have to make the same choice from its own
timings; the run says so and trains as configured.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfgpu.errors import ConfigError

KNOBS = ("steps_per_execution", "input", "jit_compile")
NOT_BUILT = ("precision", "batch_size", "devices")
STEPS = (1, 4, 16, 64, 256, 1024)
MIN_GAIN = 1.03  # a choice must gain at least this (median of the paired rounds)
ROUNDS = 3
LOSS_RTOL = 1e-3  # XLA's loss against the step without it, over the same batches
BUDGET_FLOOR_S, BUDGET_CAP_S, BUDGET_SHARE = 20.0, 60.0, 0.05
FILE = "tfgpu-tuning.json"


@dataclass(frozen=True)
class TuneOptions:
    """What ``tune=`` asks for, checked once.

    Args:
        knobs: the knobs to tune (``KNOBS``); ``tune=True`` and ``tune="all"`` take them all.
        budget_s: seconds the measurement may take; None: the larger of 20 s and 5% of the run's
            estimated length, at most 60 s.
        keep: reuse (and save) the choice for the same model, data, strategy and versions.
    """

    knobs: tuple[str, ...] = KNOBS
    budget_s: float | None = None
    keep: bool = True

    def __post_init__(self) -> None:
        later = [k for k in self.knobs if k in NOT_BUILT]
        if later:
            raise ConfigError(
                f"tune cannot set {', '.join(later)} yet: it tunes {', '.join(KNOBS)}",
                value=later,
                fix="leave them out (precision: tfgpu.configure(precision='auto'); batch: tfgpu.find_batch_size)",
            )
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

    @classmethod
    def from_arg(cls, tune: Any, budget_s: Any = None) -> TuneOptions | None:
        """``tfgpu.fit``'s ``tune`` and ``tune_budget_s`` as options (None: no tuning)."""
        if tune is None or tune is False:
            if budget_s is not None:
                raise ConfigError("tune_budget_s needs tune=True", value=budget_s, fix="pass tune=True too")
            return None
        if tune is True or tune == "all":
            return cls(budget_s=budget_s)
        if isinstance(tune, str):
            return cls(knobs=(tune,), budget_s=budget_s)
        if isinstance(tune, Sequence):
            return cls(knobs=tuple(tune), budget_s=budget_s)
        raise ConfigError("tune takes True, 'all', or knob names", value=tune, fix="pass tune=True")


@dataclass(frozen=True)
class Config:
    """One configuration of the run's step."""

    steps_per_execution: int
    input: bool = False
    jit_compile: bool = False

    def label(self) -> str:
        return (
            f"steps_per_execution={self.steps_per_execution}"
            + (", input tuned" if self.input else "")
            + (", XLA" if self.jit_compile else "")
        )


@dataclass
class Tuning:
    """What tuning found: ``history.train_result.tuning`` holds ``to_dict()``."""

    seconds: float
    choices: dict[str, Any]
    gains: dict[str, float | None]
    trials: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reused: str | None = None  # the file the choice was kept in, when it was reused
    key: str = ""
    parts: dict[str, str] = field(default_factory=dict)  # what the key was made of (key_parts)

    def before_after(self) -> tuple[float, float] | None:
        """Examples/s of the default and of the chosen configuration, from the trial that proved
        the choice (None when nothing was changed, or the choice was kept from an earlier run)."""
        together = [t for t in self.trials if t["knob"] == "together"]
        if not together:
            return None
        return together[-1]["baseline_examples_per_s"], together[-1]["candidate_examples_per_s"]

    def to_dict(self) -> dict[str, Any]:
        measured = self.before_after()
        return {
            "before_examples_per_s": measured and measured[0],
            "after_examples_per_s": measured and measured[1],
            "seconds": round(self.seconds, 3),
            "choices": self.choices,
            "gains": {k: None if v is None else round(v, 3) for k, v in self.gains.items()},
            "trials": self.trials,
            "notes": self.notes,
            "reused": self.reused,
            "key": self.key,
            "summary": self.line(),
        }

    def line(self) -> str:
        """One line: what was chosen and why, with the measured gains and the tuning time."""
        parts = []
        for knob, value in self.choices.items():
            gain = self.gains.get(knob)
            shown = (
                {True: "on", False: "off"}.get(value, value)
                if knob != "input"
                else ("tuned" if value else "as given")
            )
            text = f"{knob}={shown}"
            if gain is not None:
                text += f" ({gain:.2f}x)" if value not in (False,) else f" ({gain:.2f}x: not taken)"
            parts.append(text)
        head = (
            f"tfgpu kept the tuning from {self.reused}"
            if self.reused
            else f"tfgpu tuned in {self.seconds:.0f} s"
        )
        measured = self.before_after()
        if measured and not self.reused:
            head += f" ({measured[0]:,.0f} -> {measured[1]:,.0f} examples/s)"
        return f"{head}: " + ", ".join(parts) + ("; " + "; ".join(self.notes) if self.notes else "")


class Bench:
    """How to run a configuration: ``iterator(config)`` a fresh iterator of the training data (with
    the input options when ``config.input``), ``execution(config)`` the compiled execution (with
    XLA when ``config.jit_compile``), ``max_steps`` the steps an iterator gives at most (None:
    unbounded)."""

    def __init__(
        self,
        *,
        iterator: Callable[[Config], Any],
        execution: Callable[[Config], Any],
        max_steps: int | None,
    ) -> None:
        self.iterator, self.execution, self.max_steps = iterator, execution, max_steps

    def rate(self, config: Config, steps: int) -> tuple[float, float]:
        """(examples/s, the last call's loss) over ``steps`` steps of ``config`` from a fresh
        iterator, after one untimed call (tracing, the pipeline's first fill)."""
        from tfgpu.train import timing

        k = config.steps_per_execution
        steps = max(k, steps // k * k)
        if self.max_steps is not None:
            steps = max(k, min(steps, (self.max_steps - k) // k * k))
        iterator, execute = self.iterator(config), self.execution(config)
        timing.run(execute, iterator, steps=k, per_call=k)
        seconds, _, outputs = timing.run(execute, iterator, steps=steps, per_call=k)
        if not timing.examples(outputs):  # the data ended in the untimed call: time a fresh pass
            seconds, _, outputs = timing.run(execute, self.iterator(config), steps=steps, per_call=k)
        logs = outputs[-1]["logs"]
        loss = float(logs["loss"]) if isinstance(logs, dict) and "loss" in logs else float("nan")
        return timing.examples(outputs) / max(seconds, 1e-9), loss


TRIAL_COLUMNS = ("knob", "from", "to", "from ex/s", "to ex/s", "ratio", "spread")


def trial_row(trial: dict[str, Any]) -> list[str]:
    """One trial (``Tuner.compare``'s record) as the cells of ``TRIAL_COLUMNS``; K: steps per call."""
    low, high = trial["spread"]
    return [
        {"steps_per_execution": "K", "jit_compile": "XLA"}.get(trial["knob"], trial["knob"]),
        short(trial["baseline"]),
        short(trial["candidate"]),
        f"{trial['baseline_examples_per_s']:,.0f}",
        f"{trial['candidate_examples_per_s']:,.0f}",
        f"{trial['ratio']:.2f}x",
        f"{low:.2f}-{high:.2f}",
    ]


def short(label: str) -> str:
    """A configuration's label (``Config.label``) for a table cell or a plot: ``K=64 +input +XLA``."""
    return (
        label.replace("steps_per_execution=", "K=")
        .replace(", input tuned", " +input")
        .replace(", XLA", " +XLA")
    )


def decide(ratios: list[float]) -> bool:
    """Take a candidate: every round favours it and the median gains ``MIN_GAIN``."""
    return bool(ratios) and min(ratios) > 1.0 and statistics.median(ratios) >= MIN_GAIN


class Tuner:
    """Runs the trials (see the module docstring) on ``bench``: ``run_steps`` (the run's length,
    when known) sets the default budget, ``fixed_steps`` keeps the steps per call the user chose,
    ``xla_refused`` says why XLA is not tried (None: it is)."""

    def __init__(
        self,
        bench: Bench,
        *,
        model: Any,
        options: TuneOptions,
        default: Config,
        batch: int,
        run_steps: int | None,
        fixed_steps: bool,
        xla_refused: str | None,
    ) -> None:
        self.bench, self.model, self.options, self.default, self.batch = bench, model, options, default, batch
        self.run_steps, self.fixed_steps, self.xla_refused = run_steps, fixed_steps, xla_refused
        self.trials: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.examples = float(batch)

    def calibrate(self) -> None:
        """Examples per measurement: the budget over the measurements to come."""
        k = self.default.steps_per_execution
        rate, _ = self.bench.rate(self.default, k)
        rate = max(rate, 1e-9)
        estimated = self.run_steps * self.batch / rate if self.run_steps else None
        self.budget_s = budget(self.options, estimated_run_s=estimated)
        measurements = 2 * ROUNDS * (len(STEPS) + 3)
        self.examples = max(float(self.batch), 0.8 * self.budget_s * rate / measurements)

    def _steps_for(self, config: Config) -> int:
        return max(config.steps_per_execution, int(self.examples / self.batch))

    def compare(self, knob: str, a: Config, b: Config) -> list[float]:
        """Paired rounds of ``a`` and ``b`` (order alternating): b's examples/s over a's."""
        ratios, rates_a, rates_b = [], [], []
        steps = max(self._steps_for(a), self._steps_for(b))
        for r in range(ROUNDS):
            first, second = (a, b) if r % 2 == 0 else (b, a)
            one, _ = self.bench.rate(first, steps)
            two, _ = self.bench.rate(second, steps)
            ra, rb = (one, two) if r % 2 == 0 else (two, one)
            rates_a.append(ra)
            rates_b.append(rb)
            ratios.append(rb / max(ra, 1e-9))
        self.trials.append(
            {
                "knob": knob,
                "baseline": a.label(),
                "candidate": b.label(),
                "baseline_examples_per_s": round(statistics.median(rates_a), 1),
                "candidate_examples_per_s": round(statistics.median(rates_b), 1),
                "ratio": round(statistics.median(ratios), 3),
                "spread": [round(min(ratios), 3), round(max(ratios), 3)],
            }
        )
        return ratios

    def spent(self, what: str) -> bool:
        """Whether the budget is spent (then ``what`` is not tried, and the run says so)."""
        over = time.perf_counter() - self.started > self.budget_s
        if over:
            self.notes.append(f"budget of {self.budget_s:.0f} s spent: {what} not tried")
        return over

    def run(self) -> tuple[Config, dict[str, Any], dict[str, float | None]]:
        """The chosen configuration, each knob's choice and its measured gain over the rival."""
        self.started = time.perf_counter()
        self.calibrate()
        chosen, choices, gains = self.default, {}, {}
        if "steps_per_execution" in self.options.knobs and not self.fixed_steps:
            chosen, choices["steps_per_execution"], gains["steps_per_execution"] = self._steps(chosen)
        if "input" in self.options.knobs and not self.spent("input"):
            candidate = dataclasses.replace(chosen, input=True)
            ratios = self.compare("input", chosen, candidate)
            choices["input"], gains["input"] = decide(ratios), statistics.median(ratios)
            chosen = candidate if choices["input"] else chosen
        if "jit_compile" in self.options.knobs and not chosen.jit_compile and not self.spent("XLA"):
            chosen, choices["jit_compile"], gains["jit_compile"] = self._xla(chosen)
        if chosen != self.default and not self._proved(chosen):
            return self.default, {k: getattr(self.default, k) for k in choices}, gains
        return chosen, choices, gains

    def _proved(self, chosen: Config) -> bool:
        """The chosen configuration against the default, all knobs together (each was chosen
        against its rival only): kept when it beats the default in every round, else the default
        is (said). This trial is the run's before and after."""
        ratios = self.compare("together", self.default, chosen)
        if decide(ratios):
            return True
        self.notes.append(
            f"{chosen.label()} did not beat the default together ({statistics.median(ratios):.2f}x): default kept"
        )
        return False

    def _steps(self, base: Config) -> tuple[Config, int, float | None]:
        limit = min(self.bench.max_steps or max(STEPS), max(1, int(2 * self.examples / self.batch)))
        candidates = [k for k in STEPS if k <= limit]
        best = dataclasses.replace(base, steps_per_execution=candidates[0])
        for k in candidates[1:]:
            if self.spent(f"steps_per_execution={k} and more"):
                break
            ratios = self.compare(
                "steps_per_execution", best, dataclasses.replace(base, steps_per_execution=k)
            )
            if not decide(ratios):
                break
            best = dataclasses.replace(base, steps_per_execution=k)
        if best.steps_per_execution == base.steps_per_execution:
            return base, base.steps_per_execution, None
        ratios = self.compare("steps_per_execution", base, best)
        if decide(ratios):
            return best, best.steps_per_execution, statistics.median(ratios)
        return base, base.steps_per_execution, None

    def _xla(self, base: Config) -> tuple[Config, bool, float | None]:
        if self.xla_refused:
            self.notes.append(f"XLA not tried: {self.xla_refused}")
            return base, False, None
        candidate = dataclasses.replace(base, jit_compile=True)
        try:
            self.bench.rate(candidate, candidate.steps_per_execution)
        except Exception as exc:  # XLA refuses the model: say which op, keep the step as it is
            self.notes.append(f"XLA cannot compile this step ({_first_line(exc)})")
            return base, False, None
        ratios = self.compare("jit_compile", base, candidate)
        gain = statistics.median(ratios)
        if not decide(ratios):
            return base, False, gain
        agrees, detail = self._agrees(base, candidate)
        if not agrees:
            self.notes.append(f"XLA faster ({gain:.2f}x) but its loss differs: {detail}")
            return base, False, gain
        return candidate, True, gain

    def _agrees(self, base: Config, candidate: Config) -> tuple[bool, str]:
        """The loss after the same steps from the same state, with and without XLA."""
        from tfgpu.train import timing

        model = self.model
        steps = 4 * base.steps_per_execution
        losses = []
        for config in (base, candidate):
            with timing.restored(model):
                model.reset_metrics()
                losses.append(self.bench.rate(config, steps)[1])
        a, b = losses
        ok = abs(a - b) <= LOSS_RTOL * max(abs(a), 1e-12)
        return ok, f"{b:.6g} with XLA, {a:.6g} without"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    for line in text:
        if "XLA" in line or "op" in line.lower():
            return line.strip()[:200]
    return (text[0] if text else type(exc).__name__)[:200]


# -- kept --------------------------------------------------------------------------------------------
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
        trials=saved.get("trials", []),
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
    return Config(
        steps_per_execution=int(c.get("steps_per_execution", default.steps_per_execution)),
        input=bool(c.get("input", default.input)),
        jit_compile=bool(c.get("jit_compile", default.jit_compile)),
    )


def budget(options: TuneOptions, *, estimated_run_s: float | None) -> float:
    """The tuning budget: as asked, else the larger of 20 s and 5% of the run, at most 60 s."""
    if options.budget_s is not None:
        return float(options.budget_s)
    share = BUDGET_SHARE * estimated_run_s if estimated_run_s else 0.0
    return min(BUDGET_CAP_S, max(BUDGET_FLOOR_S, share))


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

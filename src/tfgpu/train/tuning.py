"""``tune=True``: measure, choose, prove and keep the fastest configuration of a run.

Before the first epoch the Trainer times candidate configurations on the real model, strategy and
data, through its own compiled execution (``train.timing``: the measurement diagnose uses too),
and trains with the fastest. The knobs, in the order that usually matters:

- ``steps_per_execution``: the rungs 1, 4, 16, 64, 256, 1024 above the run's default (one call
  per log window; no more than half an epoch), upwards until a rung gains less than 3% over the one
  below (the gain said is the product of the rungs');
- ``input``: tf.data's own optimizations that change no result: sequential maps made parallel
  (deterministic order kept), batching in parallel, autotuned buffers, a prefetch injected;
- ``jit_compile``: XLA, kept only when faster *and* the loss over the same batches from the same
  state agrees with the step without it (relative 1e-3); a model XLA cannot compile keeps the
  step as it is, with the first line of XLA's error;
- ``precision`` (only when asked: ``tune="all"`` or named): mixed bf16 (fp16 on GPUs before
  Ampere) on GPUs with Tensor Cores, on a copy of the model made in that policy; kept only when
  faster *and* the loss after the same steps from the same weights tracks float32's (relative
  5%); elsewhere not tried, and said why;
- ``batch_size`` (only with ``batch_size="auto"``): the global batch doubled while a doubling
  fits in memory and gains at least 5%; the learning rate stays the user's, the change is said
  loudly;
- ``devices``: all the strategy's replicas against one device with the same global batch (a
  model too small to gain from several GPUs runs faster on one); measured and said by
  ``tune=True``, switched only when allowed (``tune="all"`` or named).

Each choice is made from paired, interleaved rounds (A B, B A, A B: these machines drift and are
bimodal) by a sequential test on their log-ratios (``verdict``): taken when the lower confidence
bound clears 1.0x and the median gains at least 3%, dropped once the upper bound falls below 3%,
else more rounds while the budget allows (then "not decided", said, the baseline kept); the whole choice is then timed against the
default (the ``together`` trial, the run's before and after) and kept only when it wins there
too. Trials run from fresh iterators over the same data and are wrapped in ``timing.restored``:
the user's callbacks, History, checkpoints and metrics never see them, and the model trains from
exactly the state an untuned run starts from; the result-preserving knobs (steps per call and
input; XLA up to its checked tolerance) leave the weights those of the untuned run.

The choice is kept: in ``checkpoint_dir`` (else ``log_dir``) as ``tfgpu-tuning.json``, else in
tfgpu's cache (``TFGPU_CACHE_DIR``) under a key of the model's structure, the data's signature,
the strategy, the devices, the versions and the knobs; a run with the same key reuses it without
measuring, a changed key re-tunes and says what changed.

Several workers (MultiWorkerMirrored,
ParameterServer) are not tuned: every worker would have to make the same choice from its own
timings; the run says so and trains as configured.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
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


class DoesNotFit(Exception):
    """A trial configuration ran out of device memory (``Bench.rate`` raises it)."""


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
        if not together or together[-1].get("decision", "take") != "take":
            return None  # the default kept: its speed is the run's (a "31,087 -> 18,154" read as a loss)
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


class Bench:
    """How to run a configuration: ``iterator(config)`` a fresh iterator of the training data (in
    ``config.batch``, with the input options when ``config.input``), ``execution(config)`` the
    compiled execution (with XLA when ``config.jit_compile``, on the model copy ``config.precision``
    or ``config.devices`` asks for), ``max_steps(config)`` the steps an iterator gives at most
    (None: unbounded), ``model(config)`` the model that configuration trains."""

    def __init__(
        self,
        *,
        iterator: Callable[[Config], Any],
        execution: Callable[[Config], Any],
        max_steps: Callable[[Config], int | None],
        model: Callable[[Config], Any] = lambda config: None,
    ) -> None:
        self.iterator, self.execution, self.max_steps, self.model = iterator, execution, max_steps, model
        self.examples_per_step: float | None = None  # the last measurement's: a Dataset's own batch

    def rate(self, config: Config, steps: int) -> tuple[float, float]:
        """(examples/s, the last call's loss) over ``steps`` steps of ``config`` from a fresh
        iterator, after one untimed call (tracing, the pipeline's first fill). Out of device
        memory: ``DoesNotFit``."""
        import tensorflow as tf

        try:
            return self._rate(config, steps)
        except tf.errors.ResourceExhaustedError as exc:
            raise DoesNotFit(_first_line(exc)) from None

    def _rate(self, config: Config, steps: int) -> tuple[float, float]:
        from tfgpu.train import timing

        k = config.steps_per_execution
        steps = max(k, steps // k * k)
        limit = self.max_steps(config)
        if limit is not None:
            steps = max(k, min(steps, (limit - k) // k * k))
        iterator, execute = self.iterator(config), self.execution(config)
        timing.run(execute, iterator, steps=k, per_call=k)
        seconds, _, outputs = timing.run(execute, iterator, steps=steps, per_call=k)
        if not timing.examples(outputs):  # the data ended in the untimed call: time a fresh pass
            seconds, _, outputs = timing.run(execute, self.iterator(config), steps=steps, per_call=k)
        logs = outputs[-1]["logs"]
        loss = float(logs["loss"]) if isinstance(logs, dict) and "loss" in logs else float("nan")
        self.examples_per_step = timing.examples(outputs) / (len(outputs) * k)
        return timing.examples(outputs) / max(seconds, 1e-9), loss


TRIAL_COLUMNS = ("knob", "from", "to", "from ex/s", "to ex/s", "ratio", "spread")


def trial_row(trial: dict[str, Any]) -> list[str]:
    """One trial (``Tuner.compare``'s record) as the cells of ``TRIAL_COLUMNS``; K: steps per call."""
    low, high = trial["spread"]
    rounds = trial.get("rounds", ROUNDS)
    decision = {"take": "taken", "drop": "dropped", "not decided": "open"}.get(trial.get("decision", ""), "")
    spread = f"{low:.2f}-{high:.2f} ({rounds}{', ' + decision if decision else ''})"
    return [
        {"steps_per_execution": "K", "jit_compile": "XLA", "batch_size": "batch"}.get(
            trial["knob"], trial["knob"]
        ),
        short(trial["baseline"]),
        short(trial["candidate"]),
        f"{trial['baseline_examples_per_s']:,.0f}",
        f"{trial['candidate_examples_per_s']:,.0f}",
        f"{trial['ratio']:.2f}x",
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


def verdict(ratios: Sequence[float], *, gain: float = MIN_GAIN) -> str:
    """ "take", "drop" or "open": a sequential test on the paired rounds' log-ratios.

    The mean log-ratio's one-sided confidence bounds (Student's t over the rounds so far): from
    ``MIN_ROUNDS`` rounds on, take the candidate when the lower bound at ``TAKE_CONFIDENCE``
    clears 1.0x and the median ratio clears ``gain``; from two rounds on, drop it when the upper
    bound at ``DROP_CONFIDENCE`` falls below ``gain`` (a clear loser costs two rounds); otherwise measure another round (up to
    ``MAX_ROUNDS``, then it is not decided and the baseline stays). The constants were chosen on
    seeded draws of paired rounds whose log-ratio has a known spread (docs/tuning.md): at 10%
    a true 1.15x gain is taken in 97% of draws and a true 1.00x in 4%, and a 0.9x loser is
    dropped after 2.4 rounds on average. "Every round must favour it", the rule before, missed a real gain
    about one fresh run in two on this machine, where one configuration reads 5-10% apart from
    itself (issue 46).
    """
    n = len(ratios)
    if n < 2:
        return "open"
    logs = [math.log(max(r, 1e-12)) for r in ratios]
    mean, error = statistics.fmean(logs), statistics.stdev(logs) / math.sqrt(n)
    taken = mean - _t(n - 1, TAKE_CONFIDENCE) * error > 0.0 and statistics.median(ratios) >= gain
    if n >= MIN_ROUNDS and taken:
        return "take"
    if mean + _t(n - 1, DROP_CONFIDENCE) * error < math.log(gain):
        return "drop"
    return "open"


# Student's t, one-sided, for 1 to 11 degrees of freedom (MAX_ROUNDS - 1): the tables' values
_T = {
    0.99: (31.821, 6.965, 4.541, 3.747, 3.365, 3.143, 2.998, 2.896, 2.821, 2.764, 2.718),
    0.8: (1.376, 1.061, 0.978, 0.941, 0.920, 0.906, 0.896, 0.889, 0.883, 0.879, 0.876),
}


def _t(df: int, confidence: float) -> float:
    """Student's t quantile (one-sided) at ``confidence`` (TAKE_ or DROP_CONFIDENCE)."""
    table = _T[confidence]
    return table[min(df, len(table)) - 1]


def decide(ratios: Sequence[float], *, gain: float = MIN_GAIN) -> bool:
    """Take a candidate (``verdict``)."""
    return verdict(ratios, gain=gain) == "take"


class Tuner:
    """Runs the trials (see the module docstring) on ``bench``: ``run_steps`` (the run's length,
    when known) sets the default budget, ``fixed_steps`` keeps the steps per call the user chose,
    ``refused`` says why a knob cannot be tried here (``jit_compile``, ``precision``: not tried,
    said), ``policy`` is the mixed precision to try, ``replicas`` the strategy's."""

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
        refused: Mapping[str, str] | None = None,
        policy: str = "mixed_bfloat16",
        replicas: int = 1,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.bench, self.model, self.options, self.default, self.batch = bench, model, options, default, batch
        self.run_steps, self.fixed_steps, self.refused = run_steps, fixed_steps, dict(refused or {})
        self.policy, self.replicas, self.clock = policy, replicas, clock
        self.trials: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.examples, self.round_s, self.per_step = float(batch), 0.0, float(batch)

    def calibrate(self) -> None:
        """Examples per measurement: the budget over the measurements to come."""
        k_default = self.default.steps_per_execution
        rate, _ = self.bench.rate(self.default, k_default)
        rate = max(rate, 1e-9)
        # a Dataset's batches are its own (the Trainer's batch is 1 there): steps are sized by
        # the examples a step was measured to take, else a measurement ran 32x too long
        self.per_step = float(self.bench.examples_per_step or self.batch)
        estimated = self.run_steps * self.per_step / rate if self.run_steps else None
        self.budget_s = budget(self.options, estimated_run_s=estimated)
        knobs = self.options.knobs
        rungs = sum(k > k_default for k in STEPS) if self._tunes_steps() else 0
        trials = rungs + 3 + ("precision" in knobs) + ("devices" in knobs) + 4 * ("batch_size" in knobs)
        self.examples = max(self.per_step, 0.8 * self.budget_s * rate / (2 * ROUNDS * trials))

    def _tunes_steps(self) -> bool:
        return "steps_per_execution" in self.options.knobs and not self.fixed_steps

    def _steps_for(self, config: Config) -> int:
        per_step = self.per_step * (config.batch or self.batch) / self.batch
        return max(config.steps_per_execution, int(self.examples / per_step))

    def compare(self, knob: str, a: Config, b: Config, *, gain: float | None = MIN_GAIN) -> list[float]:
        """Paired rounds of ``a`` and ``b`` (order alternating): b's examples/s over a's, until
        the sequential test (``verdict``) takes or drops ``b``: a clear loser is dropped after
        ``MIN_ROUNDS``, a close call gets more rounds, up to ``MAX_ROUNDS`` or while the budget
        leaves room for the proof after it; what neither could decide is said as "not decided",
        with its figures (the baseline stays). ``gain=None``: ``ROUNDS`` rounds, no test."""
        ratios, rates_a, rates_b, started = [], [], [], self.clock()
        steps_a, steps_b = self._steps_for(a), self._steps_for(b)
        decision = "measured"
        for r in range(MAX_ROUNDS if gain is not None else ROUNDS):
            round_started = self.clock()
            if r % 2 == 0:
                ra, _ = self.bench.rate(a, steps_a)
                rb, _ = self.bench.rate(b, steps_b)
            else:
                rb, _ = self.bench.rate(b, steps_b)
                ra, _ = self.bench.rate(a, steps_a)
            rates_a.append(ra)
            rates_b.append(rb)
            ratios.append(rb / max(ra, 1e-9))
            if gain is None:
                continue
            decision = verdict(ratios, gain=gain)
            # the planned rounds were forecast before the comparison began (``spent``): only the
            # rounds past them must fit what is left of the budget
            past_plan = len(ratios) >= ROUNDS
            if decision != "open" or (
                past_plan and self._no_room(self.clock() - round_started, proof=knob != "together")
            ):
                break
        if decision == "open":
            decision = "not decided"
            self.notes.append(
                f"{short(b.label())} against {short(a.label())} not decided in {len(ratios)} rounds "
                f"({statistics.median(ratios):.2f}x, {min(ratios):.2f}-{max(ratios):.2f}): {short(a.label())} kept"
            )
        self.trials.append(
            {
                "knob": knob,
                "baseline": a.label(),
                "candidate": b.label(),
                "baseline_examples_per_s": round(statistics.median(rates_a), 1),
                "candidate_examples_per_s": round(statistics.median(rates_b), 1),
                "ratio": round(statistics.median(ratios), 3),
                "spread": [round(min(ratios), 3), round(max(ratios), 3)],
                "rounds": len(ratios),
                "decision": decision,
            }
        )
        self.round_s = (self.clock() - started) / len(ratios)
        return ratios

    def _no_room(self, round_s: float, *, proof: bool) -> bool:
        """Another round of ``round_s`` would leave the budget too little for the proof's rounds
        (forecast at this round's cost) when ``proof``: a close call is then left undecided.
        Outside ``run`` (no budget yet) there is always room."""
        started, budget_s = getattr(self, "started", None), getattr(self, "budget_s", None)
        if started is None or budget_s is None:
            return False
        return self.clock() - started + round_s * (1 + ROUNDS * proof) > budget_s

    def spent(self, what: str) -> bool:
        """Whether the budget would be spent by ``what``'s comparison and the proof that must
        follow it, each forecast at all its rounds, each round costing what the last one did;
        then ``what`` is not tried, and the run says so. A slow step measured in whole calls of
        the default's steps could otherwise take the budget twice over (the conv net of
        bench/tune_bench.py: 43 s of a 20 s budget)."""
        over = self.clock() - self.started + 2 * ROUNDS * self.round_s > self.budget_s
        if over:
            self.notes.append(f"budget of {self.budget_s:.0f} s spent: {what} not tried")
        return over

    def run(self) -> tuple[Config, dict[str, Any], dict[str, float | None]]:
        """The chosen configuration, each knob's choice and its measured gain over the rival."""
        self.started = self.clock()
        self.calibrate()
        knobs = self.options.knobs
        chosen, gains = self.default, {}
        if self._tunes_steps():
            chosen, gains["steps_per_execution"] = self._steps(chosen)
        if "input" in knobs and not self.spent("input"):
            candidate = dataclasses.replace(chosen, input=True)
            ratios = self.compare("input", chosen, candidate)
            chosen, gains["input"] = candidate if decide(ratios) else chosen, statistics.median(ratios)
        if "jit_compile" in knobs and not chosen.jit_compile and not self.spent("XLA"):
            chosen, gains["jit_compile"] = self._xla(chosen)
        if "precision" in knobs and ("precision" in self.refused or not self.spent("mixed precision")):
            chosen, gains["precision"] = self._precision(chosen)
        if "batch_size" in knobs:
            chosen, gains["batch_size"] = self._batch(chosen)
        if "devices" in knobs and self.replicas > 1 and not self.spent("one device"):
            chosen, gains["devices"] = self._devices(chosen)
        if chosen != self.default and not self._proved(chosen):
            chosen = self.default
        return chosen, self.choices_of(chosen, gains), gains

    def choices_of(self, config: Config, knobs: Mapping[str, Any]) -> dict[str, Any]:
        """``config``'s value of each of ``knobs`` (the ones tried), as the run's choices say it."""
        values = {
            "steps_per_execution": config.steps_per_execution,
            "input": config.input,
            "jit_compile": config.jit_compile,
            "precision": config.precision or "float32",
            "batch_size": config.batch or self.batch,
            "devices": config.devices or self.replicas,
        }
        return {knob: values[knob] for knob in knobs}

    def _proved(self, chosen: Config) -> bool:
        """The chosen configuration against the default, all knobs together (each was chosen
        against its rival only): kept when the sequential test takes it, else the default
        is (said). This trial is the run's before and after."""
        ratios = self.compare("together", self.default, chosen)
        if decide(ratios):
            return True
        if self.trials[-1]["decision"] != "not decided":  # that one says so already
            self.notes.append(
                f"{chosen.label()} did not beat the default together ({statistics.median(ratios):.2f}x): default kept"
            )
        return False

    def _steps(self, base: Config) -> tuple[Config, float | None]:
        """Upwards from the run's own steps per call while each rung beats the one below. The
        ladder starts at the default, not at 1: the rungs below it seldom win and each costs a
        comparison of the budget, and a rung below that lost in the noise used to stop the ladder short of the one above the default that wins (the
        default K=100 read 0.86x of K=256 on a small MLP the old ladder left at the default)."""
        # half the data at most: a measurement's untimed call and timed calls from one pass (a
        # rung of a whole epoch timed two passes a measurement, and its round's cost, forecast
        # for the knobs after, spent the budget before them)
        held = self.bench.max_steps(base)
        limit = min(held // 2 if held else max(STEPS), max(1, int(2 * self.examples / self.per_step)))
        candidates = [k for k in STEPS if base.steps_per_execution < k <= limit]
        best, gain = base, None
        for k in candidates:
            if self.spent(f"steps_per_execution={k} and more"):
                break
            candidate = dataclasses.replace(base, steps_per_execution=k)
            ratios = self.compare("steps_per_execution", best, candidate)
            if not decide(ratios):
                break
            best, gain = candidate, statistics.median(ratios) * (gain or 1.0)
        return best, gain

    def _xla(self, base: Config) -> tuple[Config, float | None]:
        if "jit_compile" in self.refused:
            self.notes.append(f"XLA not tried: {self.refused['jit_compile']}")
            return base, None
        candidate = dataclasses.replace(base, jit_compile=True)
        try:
            self.bench.rate(candidate, candidate.steps_per_execution)
        except Exception as exc:  # XLA refuses the model: say which op, keep the step as it is
            self.notes.append(f"XLA cannot compile this step ({_first_line(exc)})")
            return base, None
        return self._checked("jit_compile", base, candidate, rtol=LOSS_RTOL, what="XLA")

    def _precision(self, base: Config) -> tuple[Config, float | None]:
        if "precision" in self.refused:
            self.notes.append(f"mixed precision not tried: {self.refused['precision']}")
            return base, None
        candidate = dataclasses.replace(base, precision=self.policy)
        try:
            self.bench.rate(candidate, candidate.steps_per_execution)
        except Exception as exc:  # a layer the policy cannot build: float32 kept, said
            self.notes.append(f"{self.policy} cannot run this model ({_first_line(exc)})")
            return base, None
        return self._checked("precision", base, candidate, rtol=PRECISION_RTOL, what=self.policy)

    def _checked(
        self, knob: str, base: Config, candidate: Config, *, rtol: float, what: str
    ) -> tuple[Config, float]:
        """``candidate`` when it is faster and its loss agrees with ``base``'s (within ``rtol``)."""
        ratios = self.compare(knob, base, candidate)
        gain = statistics.median(ratios)
        if not decide(ratios):
            return base, gain
        agrees, detail = self._agrees(base, candidate, rtol=rtol, what=what)
        if not agrees:
            self.notes.append(f"{what} faster ({gain:.2f}x) but its loss differs: {detail}")
            return base, gain
        return candidate, gain

    def _batch(self, base: Config) -> tuple[Config, float | None]:
        """The global batch doubled while a doubling fits and gains ``MIN_BATCH_GAIN``."""
        if "batch_size" in self.refused:
            self.notes.append(f"batch size not tuned: {self.refused['batch_size']}")
            return base, None
        best, gain = base, 1.0
        for _ in range(MAX_DOUBLINGS):
            batch = 2 * (best.batch or self.batch)
            if self.spent(f"batch {batch}"):
                break
            candidate = dataclasses.replace(best, batch=batch)
            held = self.bench.max_steps(candidate)
            if held is not None and held < 2 * candidate.steps_per_execution:
                self.notes.append(f"batch {batch} not tried: the data holds {held} batches of it")
                break
            try:
                ratios = self.compare("batch_size", best, candidate, gain=MIN_BATCH_GAIN)
            except DoesNotFit:
                self.notes.append(f"batch {batch} does not fit in device memory")
                break
            if not decide(ratios, gain=MIN_BATCH_GAIN):
                median = statistics.median(ratios)
                why = (
                    f"less than {MIN_BATCH_GAIN - 1:.0%}"
                    if median < MIN_BATCH_GAIN
                    else f"not clearly ({min(ratios):.2f}-{max(ratios):.2f}x over {len(ratios)} rounds)"
                )
                self.notes.append(
                    f"batch {batch} gains {median:.2f}x over {batch // 2}, {why}: {batch // 2} kept"
                )
                break
            best, gain = candidate, gain * statistics.median(ratios)
        return best, (gain if best is not base else None)

    def _devices(self, base: Config) -> tuple[Config, float | None]:
        """All replicas against one device with the same global batch: switched when allowed."""
        candidate = dataclasses.replace(base, devices=1)
        try:
            self.bench.rate(candidate, candidate.steps_per_execution)
        except DoesNotFit:
            self.notes.append("one device not tried: the global batch does not fit on one")
            return base, None
        except Exception as exc:  # Keras cannot copy the model (a subclass without get_config): said
            why = exc.what if isinstance(exc, ConfigError) else _first_line(exc)
            self.notes.append(f"one device not tried: {why[0].lower() + why[1:]}")
            return base, None
        ratios = self.compare("devices", base, candidate)
        one = statistics.median(ratios)
        if not decide(ratios):
            return base, 1 / max(one, 1e-9)
        if self.options.switch_devices:
            return candidate, one
        self.notes.append(
            f"one device is {one:.2f}x faster than {self.replicas}: tune='all' (or a tune naming "
            "'devices') trains on one"
        )
        return base, 1 / max(one, 1e-9)

    def _agrees(self, base: Config, candidate: Config, *, rtol: float, what: str) -> tuple[bool, str]:
        """The loss after the same steps from the same state, with ``base`` and ``candidate``."""
        from tfgpu.train import model as model_setup
        from tfgpu.train import timing

        steps = 4 * base.steps_per_execution
        start = None if self.model is None else self.model.get_weights()
        losses = []
        for config in (base, candidate):
            model = self.bench.model(config) or self.model
            if model is None:  # a bench without a model (the tests' fake): nothing to put back
                losses.append(self.bench.rate(config, steps)[1])
                continue
            with timing.restored(model):
                if model is not self.model and start is not None:  # the copy from this model's state
                    model.set_weights(start)
                    model_setup.copy_optimizer_state(self.model, model)
                model.reset_metrics()
                losses.append(self.bench.rate(config, steps)[1])
        a, b = losses
        ok = abs(a - b) <= rtol * max(abs(a), 1e-12)
        return ok, f"{b:.6g} with {what}, {a:.6g} without"


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

"""The measurement: ``Tuner`` compares configurations in paired rounds, timed through a
``Measures`` (the run: ``tuning.session``), and chooses (the rules: ``tfgpu.train.tuning``'s
docstring)."""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from tfgpu.errors import ConfigError
from tfgpu.train.pieces.options import Config, TuneOptions
from tfgpu.train.pieces.tuned import ROUNDS, Trial, short

STEPS = (1, 4, 16, 64, 256, 1024)
MIN_GAIN = 1.03  # a choice must gain at least this (median of the paired rounds)
MIN_BATCH_GAIN = 1.05  # a doubling of the batch must gain at least this
MAX_DOUBLINGS = 8
MIN_ROUNDS, MAX_ROUNDS = 3, 12  # the sequential test's (``verdict``)
TAKE_CONFIDENCE, DROP_CONFIDENCE = 0.99, 0.8
LOSS_RTOL = 1e-3  # XLA's loss against the step without it, over the same batches
PRECISION_RTOL = 0.05  # mixed precision's loss against float32's, after the same steps
BUDGET_FLOOR_S, BUDGET_CAP_S, BUDGET_SHARE = 20.0, 60.0, 0.05
# tune=True may cost a fit at most this share of its own (estimated) time, whatever the floor: a
# one-epoch fit of a few seconds is not slowed by 20 s of trials it cannot win back (issue 65)
WORTH_SHARE = 0.08
MIN_MEASUREMENT_S = 0.1  # a shorter measurement is noise on these machines: not worth a trial
CALIBRATION_SHARE = 1 / 32  # the calibration's steps, at most this share of the run's


XLA_BOX_SHARE = 0.5  # XLA's first compile may take at most this share of the tuning budget


class DoesNotFit(Exception):
    """A trial configuration ran out of device memory (``Measures.rate`` raises it)."""


class CompileTimeout(Exception):
    """A first call that did not end in its time box (``Measures.first_call_s`` raises it)."""


def boxed(call: Callable[[], Any], box_s: float) -> Any:
    """``call()``'s result, run in a thread given ``box_s`` seconds; ``CompileTimeout`` past
    them. The thread is left to end by itself (a daemon): TensorFlow cannot stop a compile."""
    import threading

    done: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(call())
        except BaseException as error:  # raised again in the caller's thread
            failed.append(error)

    thread = threading.Thread(target=run, name="tfgpu-xla-compile", daemon=True)
    thread.start()
    thread.join(None if math.isinf(box_s) else box_s)
    if thread.is_alive():
        raise CompileTimeout(f"not done in {box_s:.3g} s")
    if failed:
        raise failed[0]
    return done[0]


class Measures(Protocol):
    """What the tuner needs of a run: ``rate(config, steps)`` times ``steps`` steps of
    ``config`` (examples/s and the last call's loss; ``DoesNotFit`` out of device memory),
    ``max_steps(config)`` the steps one pass of its data gives (None: unbounded),
    ``model(config)`` the model it trains (None: the run's), ``first_call_s(config, box_s=...)``
    the seconds its first call spends past a steady one, tracing aside (``CompileTimeout`` past
    ``box_s``; XLA's compile is the candidate's less the default's), and ``examples_per_step`` the last measurement's rows a step (a Dataset's own
    batch; None before one). ``tuning.session`` implements it on the run itself, through
    ``execution.rate``; the tests, on a fake clock."""

    examples_per_step: float | None

    def rate(self, config: Config, steps: int) -> tuple[float, float]: ...

    def first_call_s(self, config: Config, *, box_s: float) -> float: ...

    def max_steps(self, config: Config) -> int | None: ...

    def model(self, config: Config) -> Any:
        """The model ``config`` trains, holding the run's state now (None: no model)."""
        ...


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
        bench: Measures,
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
        self.trials: list[Trial] = []
        self.notes: list[str] = []
        self.examples, self.round_s, self.per_step = float(batch), 0.0, float(batch)
        self.too_short: str | None = None  # why the run is not tuned at all (``calibrate``)
        self.estimated_s: float | None = None  # the run's steps at the default's rate (``calibrate``)
        self.compile_s: float | None = None  # XLA's first compile, when it was tried
        self.default_first_s = 0.0  # the default's first call past a steady one (``calibrate``)

    def calibrate(self) -> None:
        """Examples per measurement: the budget over the measurements to come. The default is
        timed over a few steps (``CALIBRATION_SHARE`` of the run at most, one call): what it
        runs is its compiled execution, the run's own, so its trace is paid once for both."""
        k_default = self.default.steps_per_execution
        probe = k_default
        if self.run_steps:
            probe = max(1, min(k_default, int(self.run_steps * CALIBRATION_SHARE)))
        probed = dataclasses.replace(self.default, steps_per_execution=probe)
        if self._tries_xla():
            # the run's step made ready (graph optimizations, no XLA) as XLA's candidate will
            # be: what that costs past a steady call is not XLA's compile (``_xla``)
            self.default_first_s = self.bench.first_call_s(probed, box_s=math.inf)
        rate, _ = self.bench.rate(probed, probe)
        rate = max(rate, 1e-9)
        # a Dataset's batches are its own (the Trainer's batch is 1 there): steps are sized by
        # the examples a step was measured to take, else a measurement ran 32x too long
        self.per_step = float(self.bench.examples_per_step or self.batch)
        self.estimated_s = self.run_steps * self.per_step / rate if self.run_steps else None
        self.budget_s = budget(self.options, estimated_run_s=self.estimated_s)
        knobs = self.options.knobs
        rungs = sum(k > k_default for k in STEPS) if self._tunes_steps() else 0
        trials = rungs + 3 + ("precision" in knobs) + ("devices" in knobs) + 4 * ("batch_size" in knobs)
        self.examples = max(self.per_step, 0.8 * self.budget_s * rate / (2 * ROUNDS * trials))
        self.too_short = self._too_short(self.estimated_s, rate)

    def _too_short(self, estimated_s: float | None, rate: float) -> str | None:
        """Why no trial can pay for itself, or None: the cheapest choice (one comparison and
        its proof, ``2 * ROUNDS`` rounds of two measurements of ``MIN_MEASUREMENT_S``) must fit
        the budget. A budget the user gave is theirs to spend."""
        if self.options.budget_s is not None or estimated_s is None:
            return None
        cheapest = 2 * ROUNDS * 2 * max(MIN_MEASUREMENT_S, self.per_step / rate)
        if cheapest <= self.budget_s:
            return None
        return (
            f"the fit is too short to win back a trial (about {estimated_s:.1f} s of "
            f"steps; the cheapest choice costs {cheapest:.1f} s)"
        )

    def _tries_xla(self) -> bool:
        """Whether XLA is a candidate here (``_xla`` says why not, where it is refused)."""
        return (
            "jit_compile" in self.options.knobs
            and "jit_compile" not in self.refused
            and not self.default.jit_compile
        )

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
            Trial(
                knob=knob,
                baseline=a.label(),
                candidate=b.label(),
                baseline_examples_per_s=round(statistics.median(rates_a), 1),
                candidate_examples_per_s=round(statistics.median(rates_b), 1),
                ratio=round(statistics.median(ratios), 3),
                spread=(round(min(ratios), 3), round(max(ratios), 3)),
                rounds=len(ratios),
                decision=decision,
            )
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
        if self.too_short:
            self.notes.append(self.too_short)
            return self.default, {}, {}
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
        if self.trials[-1].decision != "not decided":  # that one says so already
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
        """XLA when its steps are faster, its loss agrees and it pays back its compile over the
        run. Its first compile is timed (tracing aside) in a box of ``XLA_BOX_SHARE`` of the
        budget: one that does not end there is dropped and said, as is one the run's steps
        would not win back (a second run with XLA's persistent cache compiles nothing)."""
        if "jit_compile" in self.refused:
            self.notes.append(f"XLA not tried: {self.refused['jit_compile']}")
            return base, None
        candidate = dataclasses.replace(base, jit_compile=True)
        box_s = XLA_BOX_SHARE * self.budget_s
        try:
            first_s = self.bench.first_call_s(candidate, box_s=box_s)
        except CompileTimeout:
            self.notes.append(
                f"XLA dropped: its compile did not end in {box_s:.3g} s, half the tuning budget"
            )
            return base, None
        except DoesNotFit:
            self.notes.append("XLA dropped: its step does not fit in device memory")
            return base, None
        except Exception as exc:  # XLA refuses the model: say which op, keep the step as it is
            self.notes.append(f"XLA cannot compile this step ({first_line(exc)})")
            return base, None
        self.compile_s = max(0.0, first_s - self.default_first_s)
        if self.compile_s > box_s:
            self.notes.append(
                f"XLA dropped: its compile took {self.compile_s:.1f} s, over half the tuning budget"
            )
            return base, None
        chosen, gain = self._checked("jit_compile", base, candidate, rtol=LOSS_RTOL, what="XLA")
        if chosen is candidate and not self._pays_back(gain):
            return base, gain
        return chosen, gain

    def _pays_back(self, gain: float) -> bool:
        """Whether XLA's steps, ``gain`` times faster, win back its compile over the run (its
        length unknown: taken as long enough); said either way."""
        compile_s = self.compile_s or 0.0
        if self.estimated_s is None:
            self.notes.append(f"XLA compiled in {compile_s:.1f} s")
            return True
        saved = self.estimated_s * (1.0 - 1.0 / gain)
        if compile_s >= saved:
            self.notes.append(
                f"XLA dropped: {gain:.2f}x faster, but its compile ({compile_s:.1f} s) is more than "
                f"it saves over this run (about {saved:.1f} s)"
            )
            return False
        self.notes.append(
            f"XLA compiled in {compile_s:.1f} s, won back in the run's first {compile_s / (1 - 1 / gain):.0f} s"
        )
        return True

    def _precision(self, base: Config) -> tuple[Config, float | None]:
        if "precision" in self.refused:
            self.notes.append(f"mixed precision not tried: {self.refused['precision']}")
            return base, None
        candidate = dataclasses.replace(base, precision=self.policy)
        try:
            self.bench.rate(candidate, candidate.steps_per_execution)
        except Exception as exc:  # a layer the policy cannot build: float32 kept, said
            self.notes.append(f"{self.policy} cannot run this model ({first_line(exc)})")
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
            why = exc.what if isinstance(exc, ConfigError) else first_line(exc)
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
        from tfgpu.train.step import execution

        steps = 4 * base.steps_per_execution
        losses = []
        for config in (base, candidate):
            model = self.bench.model(config) or self.model  # a copy holds the run's state
            if model is None:  # a bench without a model (the tests' fake): nothing to put back
                losses.append(self.bench.rate(config, steps)[1])
                continue
            with execution.restored(model):
                model.reset_metrics()
                losses.append(self.bench.rate(config, steps)[1])
        a, b = losses
        ok = abs(a - b) <= rtol * max(abs(a), 1e-12)
        return ok, f"{b:.6g} with {what}, {a:.6g} without"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    for line in text:
        if "XLA" in line or "op" in line.lower():
            return line.strip()[:200]
    return (text[0] if text else type(exc).__name__)[:200]


def budget(options: TuneOptions, *, estimated_run_s: float | None) -> float:
    """The tuning budget: as asked, else the larger of 20 s and 5% of the run, at most 60 s,
    and never more than ``WORTH_SHARE`` of the run when its length is known."""
    if options.budget_s is not None:
        return float(options.budget_s)
    if not estimated_run_s:
        return BUDGET_FLOOR_S
    share = min(BUDGET_CAP_S, max(BUDGET_FLOOR_S, BUDGET_SHARE * estimated_run_s))
    return min(share, WORTH_SHARE * estimated_run_s)

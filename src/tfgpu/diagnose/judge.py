"""The verdict from the measured figures, said with the figures that decide it, from repeated runs.

One run of input and device together is noisy on a shared machine: the same pipeline read
"moderately input-bound" and "host-bound" on two runs. So the together-run is done ``ROUNDS``
times and the median figures decide; when the rounds' own verdicts differ, the verdict is
reported as uncertain, with the spread. Two rules keep the verdict consistent with the other
figures it prints:

- with a prefetch at the end, a pipeline alone more than twice as fast as the device cannot keep
  it waiting: the waits timed are the per-step cost of fetching a batch, host overhead. (Without a
  prefetch, input and device take turns, and the wait is real.)
- with the input attached the device still ran at >= 97% of its own rate: the input kept up,
  whatever waits were timed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tfgpu import verdict as verdicts

ROUNDS = 3
FED = 0.97  # device utilization at which the input counts as keeping up
FAST_PIPELINE = 2.0  # pipeline alone this many times the device's rate: waits are fetch overhead


@dataclass(frozen=True)
class Round:
    """One together-run, judged."""

    wait: float  # input wait share of step time, after the rules above
    overhead: float  # per-step host overhead share
    measured_wait: float  # as timed
    utilization: float  # together rate / device rate
    together_rate: float
    verdict: verdicts.Verdict
    decided_by: str
    run: Any  # the measure.TogetherRun
    in_loop_gain: float | None = None  # K steps per call over one, the input attached, back to back

    @property
    def key(self) -> tuple[str, str]:
        return self.verdict.bottleneck, self.verdict.input_bound


@dataclass(frozen=True)
class Judgement:
    chosen: Round
    rounds: list[Round]
    certain: bool

    def spread(self) -> dict[str, list[float]]:
        def span(values: list[float]) -> list[float]:
            return [round(min(values), 4), round(max(values), 4)]

        gains = [r.in_loop_gain for r in self.rounds if r.in_loop_gain is not None]
        return {
            **({"steps_per_call_gain": span(gains)} if gains else {}),
            "input_wait_fraction": span([r.wait for r in self.rounds]),
            "host_overhead_fraction": span([r.overhead for r in self.rounds]),
            "together_examples_per_s": span([r.together_rate for r in self.rounds]),
        }


def judge_round(
    run: Any,
    *,
    pipeline_rate: float,
    device_rate: float,
    prefetched: bool,
    overhead: float | None = None,
    overhead_why: str = "",
) -> Round:
    """The verdict of one together-run. ``overhead``: the per-step overhead measured on the device
    alone (a real model's StepProfile), said by ``overhead_why``; None: the run's time outside
    the input wait and the device step."""
    measured = run.input_wait_fraction
    step_measured = overhead is not None  # a property of the step: the fetch cost is not added to it
    if overhead is None:
        overhead = run.host_overhead_fraction
        overhead_why = "time outside the input wait and the device step"
    utilization = min(1.0, run.examples_per_s / max(device_rate, 1e-9))
    wait, note = measured, ""
    if prefetched and pipeline_rate >= FAST_PIPELINE * device_rate and measured > 0:
        overhead, wait = overhead if step_measured else min(1.0, overhead + run.fetch_cost), 0.0
        note = (
            f"; the pipeline alone runs {pipeline_rate / device_rate:.1f}x the device's rate, so the "
            f"{measured:.0%} timed waiting is per-step fetch cost ({run.fetch_cost:.0%} a typical step)"
        )
    elif utilization >= FED and measured > 0:
        wait = 0.0
        note = f"; the device ran at {utilization:.0%} of its own rate with the input attached, so the {measured:.0%} timed waiting cost nothing"
    found = verdicts.verdict(input_wait_fraction=wait, host_overhead_fraction=overhead)
    return Round(
        wait,
        overhead,
        measured,
        utilization,
        run.examples_per_s,
        found,
        _why(found, overhead_why) + note,
        run,
    )


def _why(found: verdicts.Verdict, overhead_why: str) -> str:
    wait, overhead = found.input_wait_fraction, found.host_overhead_fraction
    cut = {"highly": verdicts.HIGHLY_INPUT_BOUND, "moderately": verdicts.MODERATELY_INPUT_BOUND}
    if found.input_bound != "no":
        return f"input wait {wait:.0%} of step time (>= {cut[found.input_bound]:.0%}: {found.input_bound} input-bound)"
    if found.bottleneck == "host":
        return f"input wait {wait:.0%} (< 5%); per-step overhead {overhead:.0%} (>= {verdicts.HIGHLY_HOST_BOUND:.0%}): {overhead_why}"
    return f"input wait {wait:.0%} (< 5%) and per-step overhead {overhead:.0%} (< {verdicts.HIGHLY_HOST_BOUND:.0%}): the device sets the pace"


def _noise(rounds: list[Round]) -> float:
    """How far the median figures may be off: half the rounds' spread, at least ``verdict.NOISE``
    (three demo runs on two quiet cores read the same pipeline's wait as 3%, 5% and 6%)."""
    spans = [max(values) - min(values) for values in ([r.wait for r in rounds], [r.overhead for r in rounds])]
    return max(verdicts.NOISE, max(spans) / 2)


def judge(measure_round: Callable[[], Round]) -> Judgement:
    """ROUNDS rounds; the median figures decide. Certain when every round's own verdict agrees."""
    rounds = [measure_round() for _ in range(ROUNDS)]
    wait = statistics.median(r.wait for r in rounds)
    overhead = statistics.median(r.overhead for r in rounds)
    found = verdicts.verdict(input_wait_fraction=wait, host_overhead_fraction=overhead, noise=_noise(rounds))
    closest = min(rounds, key=lambda r: abs(r.wait - wait) + abs(r.overhead - overhead))
    certain = all(r.key == (found.bottleneck, found.input_bound) for r in rounds)
    why = (
        closest.decided_by
        if closest.verdict == replace(found, borderline=None)
        else _why(found, "the median of the runs")
    )
    if not certain:
        spread = (
            f"input wait {min(r.wait for r in rounds):.0%}-{max(r.wait for r in rounds):.0%}, "
            f"overhead {min(r.overhead for r in rounds):.0%}-{max(r.overhead for r in rounds):.0%}"
        )
        why = f"uncertain: the {len(rounds)} runs disagreed ({spread}); their median figures decide: {_why(found, 'the median of the runs')}"
    gains = [r.in_loop_gain for r in rounds if r.in_loop_gain is not None]
    chosen = Round(
        wait,
        overhead,
        statistics.median(r.measured_wait for r in rounds),
        statistics.median(r.utilization for r in rounds),
        statistics.median(r.together_rate for r in rounds),
        found,
        why,
        closest.run,
        statistics.median(gains) if gains else None,
    )
    return Judgement(chosen, rounds, certain=certain)

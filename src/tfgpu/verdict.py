"""The bottleneck verdict, with the TensorFlow profiler's own cut-offs.

The profiler's input-pipeline analyzer (op_stats_to_input_pipeline_analysis.cc) calls a program
moderately input-bound at >= 5% of step time waiting for input and highly at >= 20%; kernel-launch /
host overhead is flagged at 3% and 15%. Training and diagnose both report in these terms.
"""

from __future__ import annotations

from dataclasses import dataclass

NOISE = 0.02  # a share this close to a cut-off is on it: the demo's naive pipeline read 3%, 5% and 6% in three runs
MODERATELY_INPUT_BOUND = 0.05
HIGHLY_INPUT_BOUND = 0.20
MODERATELY_HOST_BOUND = 0.03
HIGHLY_HOST_BOUND = 0.15


@dataclass(frozen=True)
class Verdict:
    bottleneck: str  # input | host | device
    input_bound: str  # no | moderately | highly
    input_wait_fraction: float
    host_overhead_fraction: float
    # the cut-off a figure is within the measurement's noise of, as "5% input wait": the verdict
    # on its other side is as likely, so both are said, the same words on either side of the
    # line, rather than a verdict that flips between runs
    borderline: str | None = None

    def sentence(self) -> str:
        share = f"{self.input_wait_fraction:.0%} of step time waiting for input"
        if self.borderline is not None:
            figure = (
                f"{self.host_overhead_fraction:.0%} of step time is per-step overhead ({share})"
                if "overhead" in self.borderline
                else share
            )
            return f"{_SIDES[self.borderline]} (on the {self.borderline} line, within the noise): {figure}"
        if self.input_bound != "no":
            return f"{self.input_bound.upper()} input-bound: {share}"
        if self.bottleneck == "host":
            return (
                f"host-bound: {self.host_overhead_fraction:.0%} of step time is per-step overhead ({share})"
            )
        return f"device-bound (not input-bound): {share}"


_SIDES = {
    f"{MODERATELY_INPUT_BOUND:.0%} input wait": "device-bound or MODERATELY input-bound",
    f"{HIGHLY_INPUT_BOUND:.0%} input wait": "MODERATELY or HIGHLY input-bound",
    f"{HIGHLY_HOST_BOUND:.0%} per-step overhead": "device-bound or host-bound",
}


def input_bound(fraction: float) -> str:
    if fraction >= HIGHLY_INPUT_BOUND:
        return "highly"
    if fraction >= MODERATELY_INPUT_BOUND:
        return "moderately"
    return "no"


def verdict(
    *, input_wait_fraction: float, host_overhead_fraction: float = 0.0, noise: float = 0.0
) -> Verdict:
    """Input-bound first (as the profiler reports it), then host overhead, else the device.
    ``noise``: how far the figures may be off (``diagnose.judge``: the rounds' spread, at least
    ``NOISE``); a figure that close to the cut-off deciding the verdict marks it ``borderline``."""
    bound = input_bound(input_wait_fraction)
    if bound != "no":
        bottleneck = "input"
    elif host_overhead_fraction >= HIGHLY_HOST_BOUND:
        bottleneck = "host"
    else:
        bottleneck = "device"
    return Verdict(
        bottleneck,
        bound,
        round(input_wait_fraction, 4),
        round(host_overhead_fraction, 4),
        _borderline(input_wait_fraction, host_overhead_fraction, bound, noise),
    )


def _borderline(wait: float, overhead: float, bound: str, noise: float) -> str | None:
    """The cut-off that decided the verdict, when a figure is within ``noise`` of it."""
    if noise <= 0:
        return None
    for cut in (HIGHLY_INPUT_BOUND, MODERATELY_INPUT_BOUND):
        if abs(wait - cut) <= noise + 1e-9:
            return f"{cut:.0%} input wait"
    if bound == "no" and abs(overhead - HIGHLY_HOST_BOUND) <= noise + 1e-9:
        return f"{HIGHLY_HOST_BOUND:.0%} per-step overhead"
    return None

"""The bottleneck verdict, with the TensorFlow profiler's own cut-offs.

The profiler's input-pipeline analyzer (op_stats_to_input_pipeline_analysis.cc) calls a program
moderately input-bound at >= 5% of step time waiting for input and highly at >= 20%; kernel-launch /
host overhead is flagged at 3% and 15%. Training and diagnose both report in these terms.
"""

from __future__ import annotations

from dataclasses import dataclass

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

    def sentence(self) -> str:
        share = f"{self.input_wait_fraction:.0%} of step time waiting for input"
        if self.input_bound != "no":
            return f"{self.input_bound.upper()} input-bound: {share}"
        if self.bottleneck == "host":
            return (
                f"host-bound: {self.host_overhead_fraction:.0%} of step time is per-step overhead ({share})"
            )
        return f"device-bound (not input-bound): {share}"


def input_bound(fraction: float) -> str:
    if fraction >= HIGHLY_INPUT_BOUND:
        return "highly"
    if fraction >= MODERATELY_INPUT_BOUND:
        return "moderately"
    return "no"


def verdict(*, input_wait_fraction: float, host_overhead_fraction: float = 0.0) -> Verdict:
    """Input-bound first (as the profiler reports it), then host overhead, else the device."""
    bound = input_bound(input_wait_fraction)
    if bound != "no":
        bottleneck = "input"
    elif host_overhead_fraction >= HIGHLY_HOST_BOUND:
        bottleneck = "host"
    else:
        bottleneck = "device"
    return Verdict(bottleneck, bound, round(input_wait_fraction, 4), round(host_overhead_fraction, 4))

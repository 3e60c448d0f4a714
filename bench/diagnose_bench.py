"""Diagnose benchmark (issue 4): each workload's verdict, and simulated-device utilization before
and after --apply (parallelize-map, prefetch) or after following the top advice (the workload's
fixed pipeline). Goal: the verdict right on every workload; >= 95% utilization wherever the
machine's cores can supply the rate.

"ceiling" is the utilization of the same simulated device fed from memory (one batch repeated,
prefetched): what the host's own loop reaches at that step time with a free input pipeline. Where
the host itself cannot reach 95% (on a small VM, fetching a ready batch after a sleeping step costs
~0.5 ms: cold caches), the goal is judged against the ceiling: >= 95% of it.

Run: make bench-diagnose   (or .venv/bin/python bench/diagnose_bench.py [--steps 40])
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from _common import save, table

from tfgpu.diagnose import diagnose, measure, workloads
from tfgpu.diagnose.device import SimulatedDevice


def ceiling(w: workloads.Workload, device_rate: float, steps: int) -> float | None:
    """Utilization of the workload's simulated device fed from memory (median of 3 runs)."""
    if w.model is not None:
        return None
    import tensorflow as tf

    free = tf.data.Dataset.from_tensors(next(iter(w.build()))).repeat().prefetch(tf.data.AUTOTUNE)
    batch = measure.batch_examples(next(iter(free)))
    step = batch / device_rate
    runs = [
        measure.together(free, SimulatedDevice(step), steps=max(steps, 100), warmup=10, device_step_s=step)
        for _ in range(3)
    ]
    return statistics.median(r.examples_per_s for r in runs) / device_rate


def goal_met(after: float | None, top: float | None, supplied: bool) -> str:
    if not supplied or after is None:
        return "n/a"
    if after >= 0.95:
        return "yes"
    if top is not None and top < 0.95:
        return "yes (of ceiling)" if after >= 0.95 * top else "NO"
    return "NO"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    rows = []
    for w in workloads.WORKLOADS:
        side = {
            "model": w.model() if w.model else None,
            "step_time_s": w.step_time_s,
            "target_rate": w.target_rate,
        }
        result = diagnose(w.build(), steps=args.steps, apply=True, **side)
        top = result.advice[0]
        right = result.verdict.input_bound in w.expected_input_bound and top.kind in w.expected_advice
        after, how = None, ""
        if top.kind in ("parallelize-map", "prefetch", "parallel-read"):
            after, how = result.applied["device_utilization"], "--apply"
        elif w.fixed is not None:
            after, how = diagnose(w.fixed(), steps=args.steps, **side).device_utilization, "top advice"
        elif top.kind == "none":
            after, how = result.device_utilization, "(nothing to fix)"
        supplied = result.cores_needed <= result.cores and w.model is None
        top_util = ceiling(w, result.device_examples_per_s, args.steps)
        goal = goal_met(after, top_util, supplied)
        rows.append(
            {
                "workload": w.name,
                "verdict": result.verdict.input_bound
                if result.verdict.bottleneck == "input"
                else result.verdict.bottleneck,
                "top advice": top.kind,
                "estimated": f"{top.estimated_speedup:.2f}x",
                "measured": f"{top.measured_speedup:.2f}x" if top.measured_speedup else "",
                "right": "yes" if right else "NO",
                "util before": f"{result.device_utilization:.0%}",
                "util after": "" if after is None else f"{after:.0%}",
                "ceiling": "" if top_util is None else f"{top_util:.0%}",
                "after by": how,
                "cores needed": f"{result.cores_needed:.1f}",
                ">=95% goal": goal,
            }
        )
    columns = [
        "workload",
        "verdict",
        "top advice",
        "estimated",
        "measured",
        "right",
        "util before",
        "util after",
        "ceiling",
        "after by",
        "cores needed",
        ">=95% goal",
    ]
    print(
        table(
            f"tfgpu diagnose on {len(rows)} workloads with a known cause ({args.steps} measured steps each)",
            rows,
            columns,
        )
    )
    print(f"\nwrote {save('diagnose_bench', {'workloads': rows})}")


if __name__ == "__main__":
    main()

"""Plots for reports, each returned as a base64 PNG (matplotlib's Agg backend, no display)."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any


def _figure(width: float = 7.0, height: float = 3.0) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(width, height), dpi=110)
    return figure, axes


def _png(figure: Any) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


def step_split(runs: dict[str, Sequence[dict[str, float]]]) -> str:
    """Time per step split into input wait and compute, one group of bars per run (before / after)."""
    figure, axes = _figure()
    offset = 0
    colors = {"wait": "#d62728", "compute": "#1f77b4"}
    for label, timeline in runs.items():
        xs = [offset + i for i in range(len(timeline))]
        waits = [1000 * p["wait"] for p in timeline]
        computes = [1000 * p["compute"] for p in timeline]
        axes.bar(xs, computes, color=colors["compute"], width=0.9, label="compute" if offset == 0 else None)
        axes.bar(
            xs,
            waits,
            bottom=computes,
            color=colors["wait"],
            width=0.9,
            label="input wait" if offset == 0 else None,
        )
        if xs:
            axes.text(
                xs[0],
                max((c + w for c, w in zip(computes, waits, strict=True)), default=0) * 1.02,
                label,
                fontsize=8,
            )
        offset += len(timeline) + 3
    axes.set_xlabel("step")
    axes.set_ylabel("ms")
    axes.set_title("Time per step: input wait vs compute")
    axes.legend(loc="upper right", fontsize=8)
    return _png(figure)


def stage_rates(stages: Sequence[dict[str, Any]]) -> str:
    figure, axes = _figure(height=0.45 * max(3, len(stages)) + 0.8)
    names = [s["name"] for s in stages]
    rates = [s["examples_per_s"] for s in stages]
    bars = axes.barh(names, rates, color="#2ca02c")
    slowest = min(range(len(rates)), key=rates.__getitem__) if rates else None
    if slowest is not None:
        bars[slowest].set_color("#d62728")
    axes.invert_yaxis()
    axes.set_xscale("log")
    axes.set_xlabel("examples/s through this stage (log scale; red: slowest)")
    axes.set_title("Pipeline rate up to each stage")
    return _png(figure)


def tuning_trials(trials: Sequence[dict[str, Any]]) -> str:
    """Each trial of a tuning: the rival's and the candidate's examples/s (medians), side by side."""
    figure, axes = _figure(height=0.5 * max(3, len(trials)) + 1.0)
    names = [f"{t['knob']}: {t['candidate']}" for t in trials]  # labels as the caller wants them shown
    ys = range(len(trials))
    axes.barh(
        [y - 0.2 for y in ys],
        [t["baseline_examples_per_s"] for t in trials],
        height=0.4,
        color="#999999",
        label="from",
    )
    axes.barh(
        [y + 0.2 for y in ys],
        [t["candidate_examples_per_s"] for t in trials],
        height=0.4,
        color=["#2ca02c" if t["ratio"] >= 1 else "#d62728" for t in trials],
        label="to (green: faster)",
    )
    axes.set_yticks(list(ys), names, fontsize=7)
    axes.invert_yaxis()
    axes.set_xlabel("examples/s (median of paired rounds)")
    axes.set_title("Tuning trials: each candidate against its rival")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(figure)


def utilization(series: dict[str, Sequence[tuple[float, float]]], *, title: str, ylabel: str = "%") -> str:
    """Lines of (t seconds, value) per label."""
    figure, axes = _figure()
    for label, points in series.items():
        if points:
            axes.plot([p[0] for p in points], [p[1] for p in points], label=label)
    axes.set_xlabel("seconds")
    axes.set_ylabel(ylabel)
    axes.set_ylim(bottom=0)
    axes.set_title(title)
    axes.legend(fontsize=8)
    return _png(figure)


def lines(series: dict[str, Sequence[tuple[float, float]]], *, title: str, xlabel: str, ylabel: str) -> str:
    figure, axes = _figure()
    for label, points in series.items():
        axes.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            marker="." if len(points) < 40 else None,
            label=label,
        )
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    if len(series) > 1:
        axes.legend(fontsize=8)
    return _png(figure)


def device_busy(timeline: Sequence[dict[str, float]], window: int = 5) -> list[tuple[float, float]]:
    """Share of time the device computed, over a sliding window of steps (a simulated utilization)."""
    out = []
    for i in range(len(timeline)):
        chunk = timeline[max(0, i - window + 1) : i + 1]
        busy = sum(p["compute"] for p in chunk)
        total = busy + sum(p["wait"] for p in chunk)
        out.append((timeline[i]["t"], 100.0 * busy / total if total else 0.0))
    return out

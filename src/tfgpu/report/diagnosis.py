"""Report sections for a Diagnosis (used by ``tfgpu diagnose --html`` and ``tfgpu report``).

They live with the report, not with diagnose: they read a recorded ``Diagnosis.to_dict()``, so the
report sits above diagnose and diagnose never imports the report.
"""

from __future__ import annotations

from typing import Any

from tfgpu.report import plots
from tfgpu.report.html import Section


def sections(result: dict[str, Any], *, title: str = "Bottleneck") -> list[Section]:
    """From a Diagnosis.to_dict() (so recorded runs render too)."""
    measured = Section(
        title,
        element_id="diagnose",
        verdict=result["verdict"],
        tables=[
            (
                ["measure", "value"],
                [
                    ["device", result["device"]],
                    ["pipeline alone", f"{result['pipeline_examples_per_s']:,.0f} examples/s"],
                    ["device alone", f"{result['device_examples_per_s']:,.0f} examples/s"],
                    [
                        "together",
                        f"{result['together_examples_per_s']:,.0f} examples/s ({result['device_utilization']:.0%} device utilization)",
                    ],
                    ["input wait", f"{result['input_wait_fraction']:.1%} of step time"],
                    ["host overhead", f"{result['host_overhead_fraction']:.1%} of step time"],
                    ["CPU per example", f"{result['cpu_seconds_per_example'] * 1000:.3f} ms"],
                    [
                        "cores",
                        f"{result['cores']} (needed at the device's rate: {result['cores_needed']:.2f})",
                    ],
                ],
            )
        ],
    )
    advice = Section(
        "Advice (ranked by measured gain where measured, else estimated)",
        tables=[
            (
                ["kind", "what to do", "estimated speedup", "measured speedup"],
                [
                    [
                        a["kind"],
                        a["detail"],
                        f"{a['estimated_speedup']:.2f}x",
                        (
                            f"{a['measured_speedup']:.2f}x"
                            + (" (slower: tried, not advised)" if a.get("tried") else "")
                        )
                        if a.get("measured_speedup")
                        else "",
                    ]
                    for a in result["advice"]
                ],
            )
        ],
    )
    runs = {"as given": result["timeline"]}
    busy = {"as given": plots.device_busy(result["timeline"])}
    if result.get("applied"):
        runs["after --apply"] = result["applied"]["timeline"]
        busy["after --apply"] = plots.device_busy(result["applied"]["timeline"])
        advice.paragraphs.append(
            f"--apply changed: {'; '.join(result['applied']['changes'])}; measured "
            f"{result['applied']['examples_per_s']:,.0f} examples/s ({result['applied']['measured_speedup']:.2f}x), "
            f"device utilization {result['applied']['device_utilization']:.0%}."
        )
    measured.images = [
        plots.step_split(runs),
        plots.stage_rates(result["stages"]),
        plots.utilization(busy, title="Device busy (share of step time computing, 5-step window)"),
    ]
    stages = Section(
        "Stages",
        tables=[
            (
                ["stage", "examples/s up to here", "share of pipeline time", "detail"],
                [
                    [s["name"], s["examples_per_s"], f"{s['share']:.0%}", s.get("detail", "")]
                    for s in result["stages"]
                ],
            )
        ],
    )
    out = [measured, advice, stages]
    if result.get("layers"):
        out.append(
            Section(
                "Layers (share of forward time)",
                tables=[
                    (
                        ["layer", "share"],
                        [[layer["name"], f"{layer['share']:.1%}"] for layer in result["layers"]],
                    )
                ],
            )
        )
    return out

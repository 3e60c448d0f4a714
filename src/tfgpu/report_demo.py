"""The demo's one-page report: environment, bottleneck before / after, training, prediction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tfgpu.diagnose.report import sections as diagnose_sections
from tfgpu.report import Section, plots, render, write


def sections_from_run(run: dict[str, Any]) -> list[Section]:
    """Report sections from a demo run's run.json (so a recorded run renders the same)."""
    doctor = run["doctor"]
    out = [
        Section(
            "Environment",
            element_id="environment",
            verdict=doctor["headline"],
            tables=[
                (
                    ["check", "status", "finding"],
                    [[c["name"], c["status"], c["finding"]] for c in doctor["checks"]],
                )
            ],
            paragraphs=[
                "tfgpu chose: "
                + ", ".join(
                    f"{k}={v['value']}" + (f" ({v['reason']})" if v["reason"] else "")
                    for k, v in run["choices"].items()
                )
            ],
        )
    ]
    for name, result in run["diagnose_full"].items():
        out += diagnose_sections(result, title=f"Bottleneck: {name}")[:1]
    training = run["training_full"]
    timeline = training["timeline"]
    curves = [
        plots.lines(
            {"training loss": [(p["step"], p["loss"]) for p in timeline]},
            title="Training loss",
            xlabel="step",
            ylabel="loss",
        )
    ]
    history = training["history"]
    if history and "eval_accuracy" in history[0]:
        curves.append(
            plots.lines(
                {"held-out accuracy": [(h["epoch"], h["eval_accuracy"]) for h in history]},
                title="Held-out accuracy per epoch",
                xlabel="epoch",
                ylabel="accuracy",
            )
        )
    curves.append(
        plots.lines(
            {"examples/s": [(p["t"], p["examples_per_s"]) for p in timeline]},
            title="Training throughput over time",
            xlabel="seconds",
            ylabel="examples/s",
        )
    )
    steps = [{"t": p["t"], "wait": p["input_wait"], "compute": 1 - p["input_wait"]} for p in timeline]
    curves.append(
        plots.utilization(
            {"device busy (share of step not waiting for input)": plots.device_busy(steps)},
            title="Device busy over training",
        )
    )
    if training.get("gpu_utilization"):
        series: dict[str, list[tuple[float, float]]] = {}
        for sample in training["gpu_utilization"]:
            series.setdefault(f"GPU {sample['gpu']}", []).append((sample["t"], sample["utilization"]))
        curves.append(plots.utilization(series, title="GPU utilization (NVML: share of time a kernel ran)"))
    out.append(
        Section(
            "Training",
            element_id="training",
            verdict=training["verdict"],
            images=curves,
            tables=[
                (
                    ["epoch", "loss", "held-out loss", "held-out accuracy"],
                    [
                        [
                            h["epoch"],
                            round(h["loss"], 4),
                            round(h.get("eval_loss", float("nan")), 4),
                            round(h.get("eval_accuracy", float("nan")), 4),
                        ]
                        for h in history
                    ],
                )
            ],
            paragraphs=[
                f"{training['steps']} steps, global batch {training['global_batch']} on {training['replicas']} replicas, "
                f"{training['examples_per_s']:,.0f} examples/s, input wait {training['input_wait_fraction']:.1%} of step time."
            ],
        )
    )
    prediction = run["prediction"]
    out.append(
        Section(
            "Prediction",
            element_id="prediction",
            verdict=f"held-out accuracy {run['accuracy']:.1%} (chance {run['chance']:.0%})",
            paragraphs=[
                f"{prediction['predicted_rows']} rows in {prediction['seconds']:.2f} s: {prediction['rows_per_s']:,.0f} rows/s, "
                f"{prediction['rows_per_s_per_replica']:,.0f} rows/s per replica on {prediction['replicas']} replicas; "
                f"output in input order in {prediction['output']}."
            ],
        )
    )
    return out


def write_report(result: Any, path: str) -> Path:
    run = result.to_dict() | {"diagnose_full": result.diagnose, "training_full": result.training}
    return write(
        path,
        render(
            "tfgpu demo report",
            sections_from_run(run),
            subtitle=f"run in {result.seconds:.0f} s, data in {result.workdir}",
        ),
    ).resolve()

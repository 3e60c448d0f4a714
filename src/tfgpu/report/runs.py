"""Run records (``run.json``) and the report sections each kind of run gets.

``tfgpu train --log-dir D``, ``tfgpu predict ... OUTPUT``, ``tfgpu diagnose --run-dir D`` and
``tfgpu demo`` save a run record; ``tfgpu report RUN_DIR`` renders the same report from it, so a
report can be made again, or later, from any run.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import tfgpu
from tfgpu.errors import InputError
from tfgpu.files import write_json_atomic
from tfgpu.report import plots
from tfgpu.report.diagnosis import sections as diagnose_sections
from tfgpu.report.html import Section, render, write
from tfgpu.text import counted

RUN_FILE = "run.json"
KINDS = ("demo", "train", "predict", "diagnose")


def save_run(directory: str | os.PathLike, kind: str, data: dict[str, Any]) -> Path:
    """Write DIRECTORY/run.json atomically."""
    record = {
        "kind": kind,
        "tfgpu": tfgpu.__version__,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "data": data,
    }
    return write_json_atomic(Path(directory) / RUN_FILE, record, indent=None)


def load_run(directory: str | os.PathLike) -> dict[str, Any]:
    path = Path(directory)
    file = path / RUN_FILE if path.is_dir() else path
    if not file.exists():
        raise InputError(
            f"No tfgpu run record at {file}",
            value=str(directory),
            fix="point at the --log-dir of tfgpu train, the OUTPUT of tfgpu predict, the --run-dir of tfgpu diagnose, or the demo's workdir",
        )
    try:
        record = json.loads(file.read_text())
        assert record["kind"] in KINDS and isinstance(record["data"], dict)
    except (json.JSONDecodeError, KeyError, AssertionError, TypeError):
        raise InputError(
            f"{file} is not a tfgpu run record", value=str(file), fix="re-run the command that wrote it"
        ) from None
    return record


def environment_section(doctor: dict[str, Any], chosen: dict[str, Any]) -> Section:
    chosen_text = ", ".join(
        f"{k}={v['value']}" + (f" ({v['reason']})" if v["reason"] else "") for k, v in chosen.items()
    )
    return Section(
        "Environment",
        element_id="environment",
        verdict=doctor["headline"],
        tables=[
            (
                ["check", "status", "finding"],
                [[c["name"], c["status"], c["finding"]] for c in doctor["checks"]],
            )
        ],
        paragraphs=[f"tfgpu chose: {chosen_text}"] if chosen_text else [],
    )


def training_section(training: dict[str, Any]) -> Section:
    timeline, history = training["timeline"], training["history"]
    images = [
        plots.lines(
            {"training loss": [(p["step"], p["loss"]) for p in timeline]},
            title="Training loss",
            xlabel="step",
            ylabel="loss",
        )
    ]
    if history and "val_accuracy" in history[0]:
        images.append(
            plots.lines(
                {"held-out accuracy": [(h["epoch"], h["val_accuracy"]) for h in history]},
                title="Evaluation accuracy per epoch",
                xlabel="epoch",
                ylabel="accuracy",
            )
        )
    images.append(
        plots.lines(
            {"examples/s": [(p["t"], p["examples_per_s"]) for p in timeline]},
            title="Training throughput over time",
            xlabel="seconds",
            ylabel="examples/s",
        )
    )
    # every window measures the input wait (None only in a record written before it did)
    steps = [
        {"t": p["t"], "wait": p["input_wait"], "compute": 1 - p["input_wait"]}
        for p in timeline
        if p.get("input_wait") is not None
    ]
    images.append(
        plots.utilization(
            {"device busy (share of step not waiting for input)": plots.device_busy(steps)},
            title="Device busy over training",
        )
    )
    if training.get("gpu_utilization"):
        series: dict[str, list[tuple[float, float]]] = {}
        for sample in training["gpu_utilization"]:
            series.setdefault(f"GPU {sample['gpu']}", []).append((sample["t"], sample["utilization"]))
        images.append(plots.utilization(series, title="GPU utilization (NVML: share of time a kernel ran)"))
    rows = [
        [
            h.get("epoch", h.get("step")),
            round(h["loss"], 4),
            round(h.get("val_loss", float("nan")), 4),
            round(h.get("val_accuracy", float("nan")), 4),
        ]
        for h in history
    ]
    return Section(
        "Training",
        element_id="training",
        verdict=training["verdict"],
        images=images,
        tables=[(["epoch", "loss", "eval loss", "eval accuracy"], rows)] if rows else [],
        paragraphs=[_training_figures(training)],
    )


def tuning_section(tuning: dict[str, Any]) -> Section:
    """What ``tune=True`` measured and chose: the default's and the choice's rates, every trial
    (K: steps per call)."""
    from tfgpu.train.tuning import TRIAL_COLUMNS, Trial, short, trial_row

    rows = [trial_row(Trial.from_dict(t)) for t in tuning.get("trials", [])]
    before, after = tuning.get("before_examples_per_s"), tuning.get("after_examples_per_s")
    paragraphs = (
        [f"Before: {before:,.0f} examples/s (the default); after: {after:,.0f} examples/s (the choice)."]
        if before and after
        else ["The default configuration was kept: no candidate beat it beyond the spread of the rounds."]
    )
    return Section(
        "Tuning",
        element_id="tuning",
        verdict=tuning["summary"],
        paragraphs=paragraphs + list(tuning.get("notes", [])),
        tables=[(list(TRIAL_COLUMNS), rows)] if rows else [],
        images=[plots.tuning_trials([{**t, "candidate": short(t["candidate"])} for t in tuning["trials"]])]
        if rows
        else [],
    )


def _training_figures(training: dict[str, Any]) -> str:
    """The steady state's figures, and warm-up on its own (older recorded runs have neither)."""
    said = f"{training['steps']} steps, global batch {training['global_batch']} on {counted(training['replicas'], 'replica')}"
    steady = training.get("steady")
    if steady:
        said += (
            f"; steady state (epochs {steady['epochs'][0]}-{steady['epochs'][-1]}, {steady['steps']} steps): "
            f"{steady['examples_per_s']:,.0f} examples/s, input wait {steady['input_wait_fraction']:.1%} of step time"
        )
    else:
        said += (
            f": {training['examples_per_s']:,.0f} examples/s, input wait {training['input_wait_fraction']:.1%} "
            "of step time" + ("; no steady state: the run was too short" if "steady" in training else "")
        )
    if training.get("warm_up_summary"):
        said += f". Warm-up, not in those figures: {training['warm_up_summary']}"
    if training.get("overall_examples_per_s"):
        said += (
            f". Over the whole run, warm-up included: {training['overall_examples_per_s']:,.0f} examples/s"
        )
    return said + "."


def prediction_section(
    prediction: dict[str, Any], *, accuracy: float | None = None, chance: float | None = None
) -> Section:
    verdict = f"held-out accuracy {accuracy:.1%} (chance {chance:.0%})" if accuracy is not None else None
    return Section(
        "Prediction",
        element_id="prediction",
        verdict=verdict,
        paragraphs=[
            f"{prediction['predicted_rows']} rows in {prediction['seconds']:.2f} s: {prediction['rows_per_s']:,.0f} rows/s, "
            f"{prediction['rows_per_s_per_replica']:,.0f} rows/s per replica on {counted(prediction['replicas'], 'replica')}; "
            f"output in input order in {prediction['output']}."
        ],
    )


def sections_for(record: dict[str, Any]) -> list[Section]:
    kind, data = record["kind"], record["data"]
    tuned = [tuning_section(t) for t in [(data.get("training") or data).get("tuning")] if t]
    if kind == "train":
        return [*tuned, training_section(data)]
    if kind == "predict":
        return [prediction_section(data)]
    if kind == "diagnose":
        return diagnose_sections(data)
    out = [environment_section(data["doctor"], data["choices"])]
    for name, result in data["diagnose"].items():
        out += diagnose_sections(result, title=f"Bottleneck: {name}")[:1]
    return [
        *out,
        *tuned,
        training_section(data["training"]),
        prediction_section(data["prediction"], accuracy=data["accuracy"], chance=data["chance"]),
    ]


def write_report(run_dir: str | os.PathLike, output: str | os.PathLike | None = None) -> Path:
    """Render RUN_DIR's run record to OUTPUT (default RUN_DIR/report.html)."""
    record = load_run(run_dir)
    target = Path(output) if output else Path(run_dir) / "report.html"
    return write(
        target,
        render(f"tfgpu {record['kind']} report", sections_for(record), subtitle=f"run of {record['time']}"),
    ).resolve()

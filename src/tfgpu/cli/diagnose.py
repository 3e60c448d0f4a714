"""``tfgpu diagnose --dataset FILE_OR_MODULE:FUNCTION [--model ... | --step-time 30ms | --target-rate N]``."""

from __future__ import annotations

import argparse
import re
from typing import Any

from rich.table import Table

from tfgpu.cli import _common
from tfgpu.cli._progress import phases
from tfgpu.errors import ConfigError, InputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diagnose", help="is the GPU waiting for input, for the host, or busy? measured, with fixes"
    )
    p.add_argument(
        "--dataset",
        required=True,
        help="FILE_OR_MODULE:FUNCTION returning the batched tf.data.Dataset you train on",
    )
    side = p.add_mutually_exclusive_group(required=True)
    side.add_argument("--model", help="FILE_OR_MODULE:FUNCTION returning a compiled Keras model")
    side.add_argument("--step-time", help="a simulated device busy this long per batch, e.g. 30ms")
    side.add_argument("--target-rate", type=float, help="examples/s the device could consume")
    p.add_argument("--steps", type=int, default=40, help="measured steps (after warm-up), default 40")
    p.add_argument(
        "--apply",
        action="store_true",
        help="apply what changes no result, measure again; exit 1 if still input-bound",
    )
    p.add_argument(
        "--service-workers",
        type=int,
        default=0,
        metavar="N",
        help="with --apply: measure the tuned pipeline through a tf.data service of N local worker processes too",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report with plots")
    p.add_argument("--run-dir", help="save the run record here (tfgpu report RUN_DIR renders it again)")
    p.set_defaults(run=run)


def parse_duration(text: str) -> float:
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(us|µs|ms|s)?\s*", text)
    if not match:
        raise ConfigError(
            "--step-time must be a duration such as 30ms, 1.5ms or 0.2s",
            value=text,
            fix="pass --step-time 30ms",
        )
    if match.group(2) is None:  # "9" was taken as milliseconds, silently
        raise ConfigError(
            "--step-time needs a unit (us, ms or s)",
            value=text,
            fix=f"pass --step-time {match.group(1)}ms (or {match.group(1)}s)",
        )
    value = float(match.group(1)) * {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}[match.group(2)]
    if value <= 0:
        raise ConfigError("--step-time must be above zero", value=text, fix="pass --step-time 30ms")
    return value


def load_dataset(reference: str) -> Any:
    from tfgpu.data import PipelinePlan
    from tfgpu.loader import load_function
    from tfgpu.train.inputs.adapters import is_dataset

    made = load_function(reference)()
    if isinstance(made, PipelinePlan):
        made = made.build()
    if not is_dataset(made):
        raise InputError(
            f"{reference} returned {type(made).__name__}, not a tf.data.Dataset",
            value=reference,
            fix="return the batched dataset you train on",
        )
    return made


def load_model(reference: str) -> Any:
    import keras

    from tfgpu.loader import load_function

    model = load_function(reference)()
    if not isinstance(model, keras.Model):
        raise InputError(
            f"{reference} returned {type(model).__name__}, not a Keras model",
            value=reference,
            fix="return a compiled keras.Model",
        )
    if not getattr(model, "compiled", True) or getattr(model, "optimizer", None) is None:
        raise InputError(
            f"{reference} returned a model that is not compiled",
            value=reference,
            fix="call model.compile(optimizer=..., loss=...) before returning it",
        )
    return model


def _checked(args: argparse.Namespace) -> float | None:
    """The options, and the references' form and files, checked before anything is imported (a
    typo said at once, not after TensorFlow's import); the step time in seconds."""
    from tfgpu.loader import check_references

    if args.steps < 5:
        raise ConfigError("--steps must be at least 5", value=args.steps, fix="pass --steps 40")
    if args.service_workers and not args.apply:
        raise ConfigError(
            "--service-workers measures the tuned pipeline, which --apply builds",
            value=args.service_workers,
            fix=f"pass --apply --service-workers {args.service_workers}",
        )
    if args.service_workers < 0:
        raise ConfigError("--service-workers must be 0 or more", value=args.service_workers, fix="pass 2")
    check_references(args.dataset, args.model)
    return parse_duration(args.step_time) if args.step_time else None


def run(args: argparse.Namespace) -> int:
    step_time_s = _checked(args)  # said before TensorFlow's import
    from tfgpu import runtime
    from tfgpu.diagnose import diagnose

    runtime.configure()
    dataset = load_dataset(args.dataset)
    model = load_model(args.model) if args.model else None
    with phases("diagnose", machine_output=args.json) as progress:  # said as it starts, not at the end
        progress("measure", 0, 0)
        result = diagnose(
            dataset,
            model=model,
            step_time_s=step_time_s,
            target_rate=args.target_rate,
            steps=args.steps,
            apply=args.apply,
            service_workers=args.service_workers,
        )
    data = result.to_dict()
    if args.run_dir:
        from tfgpu.report.runs import save_run

        save_run(args.run_dir, "diagnose", data)
    if args.html:
        from tfgpu.report import render, write
        from tfgpu.report.diagnosis import sections

        write(args.html, render("tfgpu diagnose", sections(data), subtitle=f"dataset {args.dataset}"))
    still_bound = bool(
        args.apply
        and data["applied"]
        and data["applied"]["input_wait_fraction"] >= 0.05
        and data["input_bound"] != "no"
    )
    if args.json:
        _common.print_json(
            {k: v for k, v in data.items() if k != "timeline"} | {"applied": _slim(data["applied"])}
        )
        return 1 if still_bound else 0
    _render(data)
    if args.html:
        _common.out.print(f"report: {args.html}")
    return 1 if still_bound else 0


def _slim(applied: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if applied is None else {k: v for k, v in applied.items() if k != "timeline"}


def _render(data: dict[str, Any]) -> None:
    out = _common.out
    out.print(f"[bold]{data['verdict']}[/]  (bottleneck: {data['bottleneck']})")
    out.print(f"decided by: {data['decided_by']}")
    out.print(
        f"pipeline alone {data['pipeline_examples_per_s']:,.0f} examples/s; device alone {data['device_examples_per_s']:,.0f}; "
        f"together {data['together_examples_per_s']:,.0f} ({data['device_utilization']:.0%} device utilization); "
        f"{data['cpu_seconds_per_example'] * 1000:.3f} ms CPU per example, {data['cores_needed']:.2f} of {data['cores']} cores needed"
    )
    stages = Table(title="stages")
    for column in ("stage", "examples/s up to here", "share", "detail"):
        stages.add_column(column)
    for s in data["stages"]:
        stages.add_row(s["name"], f"{s['examples_per_s']:,.0f}", f"{s['share']:.0%}", s.get("detail", ""))
    out.print(stages)
    if data.get("memory"):
        from tfgpu.train.step import footprint

        out.print("[bold]memory of a training step[/]")
        for line in footprint.lines(data["memory"]):
            out.print(f"  {line}", markup=False)
    advice = Table(title="advice, ranked by measured gain where measured, else estimated")
    for column in ("kind", "what to do", "estimated", "measured"):
        advice.add_column(column)
    for a in data["advice"]:
        advice.add_row(
            a["kind"],
            a["detail"],
            f"{a['estimated_speedup']:.2f}x",
            (f"{a['measured_speedup']:.2f}x" + (" (slower: tried, not advised)" if a.get("tried") else ""))
            if a.get("measured_speedup")
            else "",
        )
    out.print(advice)
    for a in data["advice"]:
        for command in a.get("commands", ()):
            out.print(f"  {a['kind']}: {command}", soft_wrap=True)
    if data["layers"]:
        out.print(
            "layers: " + ", ".join(f"{layer['name']} {layer['share']:.0%}" for layer in data["layers"][:6])
        )
    if data.get("applied"):
        a = data["applied"]
        out.print(
            f"--apply: {'; '.join(a['changes'])} -> {a['examples_per_s']:,.0f} examples/s ({a['measured_speedup']:.2f}x), "
            f"device utilization {a['device_utilization']:.0%}"
        )
        served = a.get("service")
        if served and "skipped" in served:
            out.print(f"--service-workers {served['workers']}: not measured: {served['skipped']}")
        elif served:
            out.print(
                f"--service-workers {served['workers']}: through a local tf.data service -> "
                f"{served['examples_per_s']:,.0f} examples/s ({served['measured_speedup']:.2f}x)"
            )

"""``tfgpu demo [--json]``: run tfgpu end to end on its built-in example workload."""

from __future__ import annotations

import argparse
import json

from tfgpu.cli import _common
from tfgpu.text import counted


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "demo", help="run tfgpu end to end on its built-in example workload, write tfgpu-report.html"
    )
    parser.add_argument(
        "--workdir", default="tfgpu-demo", help="where the example data and outputs go (cached)"
    )
    parser.add_argument("--report", default="tfgpu-report.html", help="the HTML report to write")
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="training epochs (default: enough for a steady state at the rate diagnose measures)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tfgpu import choices
    from tfgpu.cli._progress import phases
    from tfgpu.demo import run_demo

    # each phase as it starts: the run takes a minute or two
    with phases("demo", machine_output=args.json) as progress:
        result = run_demo(workdir=args.workdir, report=args.report, epochs=args.epochs, progress=progress)
    if args.json:
        _common.print_json(result.to_dict())
        return 0 if result.ok else 1
    out = _common.out
    took = {name: f" [dim]({seconds:.1f} s)[/]" for name, seconds in result.phases.items()}
    out.print(
        f"[bold]doctor:[/] {result.doctor.headline} ({len(result.doctor.failed)} failed, "
        f"{len(result.doctor.warnings)} warnings){took.get('doctor', '')}"
    )
    d = result.data
    images = "reused" if not d.get("images_generated") else "generated"
    shards = (
        f"reused all {d['shards']}"
        if d["shards_reused"] == d["shards"]
        else f"wrote {d['shards'] - d['shards_reused']} of {d['shards']}"
    )
    out.print(f"[bold]data:[/] {d['images']} JPEG images {images}; shards: {shards}{took.get('data', '')}")
    out.print(choices.summary_line())
    for name, found in result.diagnose.items():
        top = found["advice"][0]
        how = "measured" if top.get("measured_speedup") is not None else "estimated"
        gain = "" if top["kind"] == "none" else f" ({top['estimated_speedup']:.2f}x, {how})"
        out.print(
            f"[bold]diagnose {name}:[/] {found['verdict']}; {found['together_examples_per_s']:,.0f} examples/s, "
            f"top advice {top['kind']}{gain}"
        )
    steps = {name: f["step"] for name, f in result.diagnose.items() if f.get("step")}
    shared = len({json.dumps(step, sort_keys=True) for step in steps.values()}) == 1
    for name, step in steps.items():
        low, high = step["overhead_spread"]
        out.print(
            f"[bold]diagnose, the model's step{'' if shared else f' ({name})'}:[/] "
            f"{step['one_step_per_call_ms']:.3g} ms one per call, {step['in_loop_ms']:.3g} ms with "
            f"{step['steps_per_call']} per call: per-step overhead {step['overhead']:.0%} "
            f"({low:.0%}-{high:.0%} over {step['rounds']} rounds)"
            + (", measured once, the same step in both diagnoses" if shared and len(steps) > 1 else "")
        )
        if shared:
            break
    out.print(f"[bold]diagnose:[/] both pipelines measured{took.get('diagnose', '')}")
    t = result.training
    if t.get("tuning"):
        out.print(
            f"[bold]tune:[/] {t['tuning']['summary']}{took.get('tune', '')}", markup=True, highlight=False
        )
    rate = (
        f"steady state {t['examples_per_s']:,.0f} examples/s"
        if t.get("steady")
        else f"{t['examples_per_s']:,.0f} examples/s"
    )
    out.print(
        f"[bold]train:[/] {t['steps']} steps ({t['epochs']} epochs) on {counted(t['replicas'], 'replica')}, {rate}; "
        f"{t['verdict']}{took.get('train', '')}"
    )
    if t.get("warm_up_summary"):
        out.print(f"[bold]train warm-up[/] (not in the figures above): {t['warm_up_summary']}")
    out.print(f"[bold]train vs diagnose of tfgpu.data.pipeline:[/] {result.agreement}")
    p = result.prediction
    out.print(
        f"[bold]predict:[/] {p['predicted_rows']} held-out rows, {p['rows_per_s']:,.0f} rows/s on "
        f"{counted(p['replicas'], 'replica')}{took.get('predict', '')}"
    )
    style = "green" if result.ok else "bold red"
    out.print(f"[{style}]held-out accuracy {result.accuracy:.1%}[/] (chance 25%) in {result.seconds:.0f} s")
    out.print(f"report: {result.report}")
    return 0 if result.ok else 1

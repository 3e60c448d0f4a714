"""``tfgpu report RUN_DIR``: render the HTML report of a train, predict, diagnose or demo run."""

from __future__ import annotations

import argparse

from tfgpu.cli import _common


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report", help="render the HTML report of a tfgpu train / predict / diagnose / demo run"
    )
    p.add_argument("run_dir", help="the run's directory (holding run.json)")
    p.add_argument("--output", help="the HTML file (default RUN_DIR/report.html)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tfgpu.report.runs import write_report

    path = write_report(args.run_dir, args.output)
    _common.out.print(f"report: {path}")
    return 0

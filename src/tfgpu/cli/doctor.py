"""``tfgpu doctor [--deep] [--json]``: is TensorFlow using the GPU, and if not, why."""

from __future__ import annotations

import argparse

from rich.markup import escape
from rich.table import Table

from tfgpu import doctor
from tfgpu.cli import _common


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("doctor", help="is TensorFlow using the GPU, and if not, why")
    parser.add_argument(
        "--deep",
        action="store_true",
        help="also run a matmul per device and a 2-replica vs 1-replica training check",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(run=run)


def render(report: doctor.DoctorReport, *, console=None) -> None:
    console = console or _common.out
    from tfgpu import __version__

    table = Table(title=f"tfgpu doctor (tfgpu {__version__})", show_lines=False, expand=False)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("finding (and fix)", overflow="fold")  # a link folds, never cut to "..."
    for check in report.checks:
        style = _common.STATUS_STYLE[check.status]
        text = escape(check.finding) + (f"\n[cyan]fix:[/] {escape(check.fix)}" if check.fix else "")
        table.add_row(escape(check.name), f"[{style}]{check.status}[/]", text)
    console.print(table)
    style = "bold red" if report.failed else "bold"
    console.print(
        f"[{style}]{report.headline}[/]  ({len(report.failed)} failed, {len(report.warnings)} warnings)"
    )


def run(args: argparse.Namespace) -> int:
    report = doctor.run(deep=args.deep)
    if args.json:
        _common.print_json(report.to_dict())
    else:
        render(report)
    return report.exit_code

"""``tfgpu demo [--json]``: run tfgpu end to end on its built-in example workload."""

from __future__ import annotations

import argparse

from tfgpu.cli import _common
from tfgpu.cli.doctor import render


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("demo", help="run tfgpu end to end on its built-in example workload")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tfgpu import choices
    from tfgpu.demo import run_demo

    result = run_demo()
    if args.json:
        _common.print_json(result.to_dict())
        return 0 if result.ok else 1
    console = _common.out
    render(result.doctor)
    console.print(choices.summary_line())
    check = result.replica_check
    if result.ok:
        console.print(
            f"[green]end-to-end check:[/] {check['replicas']} replicas ({', '.join(check['devices'])}) "
            f"trained {len(check['single'])} steps and matched one device "
            f"(loss {check['single'][0]:.4f} -> {check['single'][-1]:.4f})"
        )
        return 0
    console.print(
        f"[bold red]end-to-end check failed:[/] 1 device {check['single']} vs replicas {check['replicated']}"
    )
    return 1

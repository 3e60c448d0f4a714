"""Shared benchmark helpers: median-of-N timing, a printed table, a JSON file of the figures."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def interleaved_rates(
    variants: dict[str, Callable[[], int]], *, rounds: int = 5
) -> dict[str, dict[str, float]]:
    """Median units/s of each variant, measured in interleaved rounds (A, B, C, A, B, C, ...).

    On a shared 2-core machine throughput drifts between runs; interleaving exposes every variant
    to the same drift, so their ratios stay fair. One warm-up pass each is not counted.
    """
    for run in variants.values():
        run()
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            start = time.perf_counter()
            units = run()
            rates[name].append(units / (time.perf_counter() - start))
    return {
        name: {"median": statistics.median(r), "min": min(r), "max": max(r), "runs": len(r), "all": r}
        for name, r in rates.items()
    }


def parent_or_child(
    one_process: Callable[..., Any], *, processes: int, rounds: int
) -> tuple[Any, list[Any]] | None:
    """A bench's command line: ``--processes N --rounds R --pin``. In a child (``--child``), run
    ``one_process(rounds, cpu=...)``, print its figures and return None; in the parent, return
    (args, each child's figures) from ``child_processes``."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=processes)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--pin", action="store_true", help="run each process on one core (alternating)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_process(args.rounds, cpu=args.cpu)))
        return None
    script = sys.modules["__main__"].__file__
    return args, child_processes(script, processes=args.processes, rounds=args.rounds, pin=args.pin)


def child_processes(script: str, *, processes: int, rounds: int, pin: bool) -> list[Any]:
    """Run ``script --child --rounds R [--cpu C]`` in ``processes`` fresh processes, one after
    another (each on one core, alternating, when ``pin``); each prints its figures as the last
    line of JSON. Fresh processes: these CPUs are bimodal per process, so one process's figures
    are one sample."""
    import subprocess

    results = []
    for i in range(processes):
        done = subprocess.run(
            [
                sys.executable,
                script,
                "--child",
                "--rounds",
                str(rounds),
                *(["--cpu", str(i % (os.cpu_count() or 1))] if pin else []),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"process {i + 1}/{processes} done", file=sys.stderr)
    return results


def table(title: str, rows: list[dict[str, Any]], columns: list[str]) -> str:
    """A Markdown table, ready for the closing note and docs/benchmarks.md."""
    widths = [max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in columns]
    lines = [
        f"## {title}",
        "",
        "| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    for row in rows:
        cells = (_fmt(row.get(c)).ljust(w) for c, w in zip(columns, widths, strict=True))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"
    return "" if value is None else str(value)


def save(name: str, data: dict[str, Any]) -> Path:
    """Write the figures (with the machine they were measured on) to bench/results/NAME.json."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    machine = {"cores": os.cpu_count(), "python": sys.version.split()[0]}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    path.write_text(json.dumps({**data, "machine": machine, "time": stamp}, indent=2))
    return path

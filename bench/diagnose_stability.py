"""Does the demo tell one true story, every run? (issues 18 and 25)

``tfgpu demo`` runs ``--repeats`` times in a row, each in its own process, on the same cached data.
For each run and each of its two pipelines this prints the verdict, the top advice with its gain
(measured or estimated), the model step's per-step overhead and its spread, and training's
steady-state verdict with the demo's agreement line. Then the step advice the demo gave
(``increase-batch-size``, ``steps-per-execution``) is applied: the demo's training, with that
pipeline, runs as advised and as the demo ran it, ``--repeats`` interleaved pairs of processes,
and the median ratio of steady-state examples/s is compared with each advised gain.

Goals: the same verdict for each pipeline every run; every measured step gain within 20% of what
applying it measures; training's steady-state verdict agrees with diagnose's for the same pipeline.

Run: make bench-diagnose-stability   (or .venv/bin/python bench/diagnose_stability.py [--repeats 3])
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from _common import save, table

STEP_ADVICE = ("increase-batch-size", "steps-per-execution")
PIPELINES = ("naive pipeline", "tfgpu.data.pipeline")
TRAINED_EXAMPLES = 6000  # per applied run: about 10 epochs of the demo's 600 images


def demo_run(work: Path) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfgpu.cli",
            "demo",
            "--workdir",
            str(work),
            "--report",
            str(work / "r.html"),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"tfgpu demo failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def train(work: Path, pipeline: str, *, per_replica: int, steps_per_execution: int) -> dict[str, Any]:
    """The demo's training of ``pipeline`` in a fresh process; its result's steady-state figures."""
    command = [
        sys.executable,
        __file__,
        "--train",
        pipeline,
        "--workdir",
        str(work),
        "--per-replica",
        str(per_replica),
        "--steps-per-execution",
        str(steps_per_execution),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"training failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _child(args: argparse.Namespace) -> None:
    """--train: the demo's task (the naive pipeline as a data function, if asked), as advised."""
    import dataclasses

    import tfgpu
    from tfgpu import demo, nvml, runtime

    runtime.configure(logical_cpus=None if nvml.probe().gpus else 2, precision="auto", seed=0)
    work = Path(args.workdir)
    task = demo.task(work, batch_size=args.per_replica)
    if args.train == "naive pipeline":
        task = dataclasses.replace(
            task,
            train_data=lambda ctx, per_replica: demo._naive(
                work / "images" / "train", batch_size=per_replica
            ),
        )
    # 0: the Trainer's own choice, as in the demo
    trainer = tfgpu.Trainer(task, log_every=4, steps_per_execution=args.steps_per_execution or None)
    per_epoch = demo.TRAIN_PER_CLASS * len(demo.CLASSES)
    result = trainer.fit(
        epochs=min(60, max(4, math.ceil(TRAINED_EXAMPLES / per_epoch * args.per_replica / 32)))
    )
    print(json.dumps(result.to_dict()))


def applied(work: Path, pipeline: str, kind: str, repeats: int) -> dict[str, Any]:
    """``kind`` applied to the demo's training of ``pipeline``: interleaved pairs, median ratio."""
    from tfgpu import demo

    if kind == "increase-batch-size":  # as the demo trains, then at diagnose's LARGER batch
        base = {"per_replica": demo.BATCH_PER_REPLICA, "steps_per_execution": 0}
        advised = {**base, "per_replica": 4 * demo.BATCH_PER_REPLICA}
    else:  # one step per call, then diagnose's STEPS_PER_CALL
        base = {"per_replica": demo.BATCH_PER_REPLICA, "steps_per_execution": 1}
        advised = {**base, "steps_per_execution": 8}
    ratios, pairs = [], []
    for _ in range(repeats):
        before = train(work, pipeline, **base)["examples_per_s"]
        after = train(work, pipeline, **advised)["examples_per_s"]
        ratios.append(after / before)
        pairs.append((round(before, 1), round(after, 1)))
    return {"ratio": statistics.median(ratios), "ratios": ratios, "pairs": pairs, "as_advised": advised}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", help="the demo's folder (default: a temporary one)")
    parser.add_argument("--train", choices=PIPELINES, help=argparse.SUPPRESS)
    parser.add_argument("--per-replica", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--steps-per-execution", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.train:
        _child(args)
        return
    work = Path(args.workdir or tempfile.mkdtemp(prefix="tfgpu-demo-story-"))
    runs = [demo_run(work) for _ in range(args.repeats)]
    rows, advised = [], {}
    for number, run in enumerate(runs, 1):
        for name in PIPELINES:
            found, top = run["diagnose"][name], run["diagnose"][name]["advice"][0]
            step = found["step"]
            how = "measured" if top.get("measured_speedup") is not None else "estimated"
            rows.append(
                {
                    "run": number,
                    "pipeline": name,
                    "verdict": found["verdict"],
                    "top advice": f"{top['kind']} ({top['estimated_speedup']:.2f}x, {how})",
                    "step overhead": f"{step['overhead']:.0%} ({step['overhead_spread'][0]:.0%}-"
                    f"{step['overhead_spread'][1]:.0%})",
                    "larger batch": f"{step['larger_batch_speedup']:.2f}x",
                }
            )
            for item in found["advice"]:
                if item["kind"] in STEP_ADVICE and item.get("measured_speedup") is not None:
                    advised.setdefault((name, item["kind"]), []).append(item["estimated_speedup"])
    trained = [
        {
            "run": number,
            "epochs": run["training"]["epochs"],
            "training (steady state)": run["training"]["verdict"],
            "examples/s": run["training"]["examples_per_s"],
            "agreement": run["agreement"].split(":")[0],
        }
        for number, run in enumerate(runs, 1)
    ]
    checks = []
    for (name, kind), gains in sorted(advised.items()):
        measured = applied(work, name, kind, args.repeats)
        checks.append(
            {
                "pipeline": name,
                "advice": kind,
                "advised": ", ".join(f"{g:.2f}x" for g in gains),
                "applied (median)": f"{measured['ratio']:.2f}x",
                "applied pairs (ex/s)": "; ".join(f"{a} -> {b}" for a, b in measured["pairs"]),
                "within 20%": "yes" if all(abs(g / measured["ratio"] - 1) <= 0.2 for g in gains) else "NO",
            }
        )
    verdicts = {
        name: {(r["diagnose"][name]["bottleneck"], r["diagnose"][name]["input_bound"]) for r in runs}
        for name in PIPELINES
    }
    goals = [
        *(
            {"goal": f"{name}: the same verdict every run", "met": "yes" if len(v) == 1 else "NO"}
            for name, v in verdicts.items()
        ),
        {
            "goal": "training's steady state agrees with diagnose",
            "met": "yes" if all(t["agreement"] == "agree" for t in trained) else "NO",
        },
        {
            "goal": "advised step gains within 20% of applying them",
            "met": "yes" if all(c["within 20%"] == "yes" for c in checks) else "NO",
        },
    ]
    print(table(f"diagnose in {args.repeats} demo runs", rows, list(rows[0])))
    print()
    print(table("training in the same runs", trained, list(trained[0])))
    if checks:
        print()
        print(table("step advice applied to the demo's training", checks, list(checks[0])))
    print()
    print(table("Goals", goals, ["goal", "met"]))
    print(
        f"\nwrote {save('diagnose_stability', {'diagnose': rows, 'training': trained, 'applied': checks, 'goals': goals})}"
    )


if __name__ == "__main__":
    main()

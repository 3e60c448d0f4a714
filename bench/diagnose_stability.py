"""Does ``tfgpu diagnose`` say the same thing twice? (issue 18)

The demo's two pipelines (a naive JPEG pipeline and ``tfgpu.data.pipeline``, against the demo's
model step) are diagnosed ``--repeats`` times each, as the demo does; each run prints its
verdict, the figures that decided it, whether its own repeated measurements agreed, and the top
advice. Goal: the same verdict every time.

Run: make bench-diagnose-stability   (or .venv/bin/python bench/diagnose_stability.py [--repeats 3])
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from _common import save, table

from tfgpu import data, demo
from tfgpu.diagnose import diagnose


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", help="reuse the demo's data here (default: a temporary folder)")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="tfgpu-diagnose-stability-"))
    demo.make_images(work / "images")
    options = data.ConvertOptions(min_shards=8, resize=(demo.SIZE, demo.SIZE))
    data.convert(work / "images" / "train", work / "train", options=options)
    pipelines = {
        "naive pipeline": lambda: demo._naive(work / "images" / "train"),
        "tfgpu.data.pipeline": lambda: data.pipeline(
            work / "train", batch_size=demo.BATCH_PER_REPLICA, training=True, supervised=True
        ),
    }
    rows, agree = [], {}
    for name, build in pipelines.items():
        verdicts = []
        for attempt in range(args.repeats):
            found = diagnose(build(), model=demo._compiled(), steps=15, warmup=3).to_dict()
            verdicts.append((found["bottleneck"], found["input_bound"]))
            top = found["advice"][0]
            rows.append(
                {
                    "pipeline": name,
                    "run": attempt + 1,
                    "verdict": found["verdict"],
                    "certain": "yes" if found["certain"] else "no",
                    "decided by": found["decided_by"],
                    "top advice": f"{top['kind']} ({top['estimated_speedup']:.2f}x)",
                }
            )
        agree[name] = len(set(verdicts)) == 1
    print(table(f"diagnose, {args.repeats} runs of each of the demo's pipelines", rows, list(rows[0])))
    goals = [
        {"goal": f"{name}: the same verdict every run", "met": "yes" if ok else "NO"}
        for name, ok in agree.items()
    ]
    print()
    print(table("Goals", goals, ["goal", "met"]))
    print(f"\nwrote {save('diagnose_stability', {'runs': rows, 'goals': goals})}")


if __name__ == "__main__":
    main()

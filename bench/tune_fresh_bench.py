"""Does tune=True take a real gain in every fresh run? (issue 46)

Issue 46's MLP (64 -> 128 -> 128 -> 10, 16,384 rows from arrays, batch 32, Adam), where XLA gains
10-20% on one pinned core. Each of N fresh processes (one core each, an empty tuning cache):

- XLA's gain on this model, measured first in the tuner's own paired rounds (``Tuner.compare``
  with no decision, 6 rounds) at the steps per call the tuner will reach;
- ``tfgpu.fit(..., tune=True)`` for one epoch: what it chose, each trial's ratio and rounds, and
  the seconds tuning took of its budget.

Goal: every process that measures a gain of 10% or more takes XLA.

Run: make bench-tune-fresh   (or .venv/bin/python bench/tune_fresh_bench.py [--processes 5])
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROWS, BATCH = 16_384, 32


def child(cpu: int) -> dict:
    os.sched_setaffinity(0, {cpu})
    os.environ["TFGPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="tfgpu-tune-fresh-")
    import keras
    import numpy as np

    import tfgpu
    from tfgpu.train import tuning
    from tfgpu.train.step import execution
    from tfgpu.train.tuning.session import Session

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(ROWS, 64)).astype("float32"), rng.integers(0, 10, ROWS)

    def compiled() -> keras.Model:
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [
                keras.Input((64,)),
                keras.layers.Dense(128, activation="relu"),
                keras.layers.Dense(128, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    sys.path.insert(0, os.path.dirname(__file__))
    from tune_bench import trainer_for

    probe = compiled()
    trainer = trainer_for(probe, (x, y), BATCH)
    bench = Session(trainer.setup, options=trainer.options)  # the tuner's measurements on the run
    measure = tuning.Tuner(
        bench,
        model=None,
        options=tuning.TuneOptions(budget_s=1e9),
        default=tuning.Config(256),
        batch=BATCH,
        run_steps=None,
        fixed_steps=False,
    )
    measure.examples = 4096.0
    with execution.restored(probe):
        base = tuning.Config(256)
        # twice the tuner's planned rounds, with no decision: the gain there is
        xla = [
            r
            for _ in range(2)
            for r in measure.compare("xla", base, tuning.Config(256, False, True), gain=None)
        ]
    history = tfgpu.fit(compiled(), x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False, tune=True)
    tuned = history.train_result.tuning
    return {
        "xla_gain": statistics.median(xla),
        "xla_spread": [min(xla), max(xla)],
        "choices": tuned.choices,
        "summary": tuned.summary,
        "seconds": tuned.seconds,
        "trials": [(t.knob, t.candidate, t.ratio, t.rounds, t.decision) for t in tuned.trials],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child)))
        return
    sys.path.insert(0, os.path.dirname(__file__))
    from _common import save, table

    rows = []
    for i in range(args.processes):
        done = subprocess.run(
            [sys.executable, __file__, "--child", str(i % (os.cpu_count() or 1))],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            sys.exit(f"process failed:\n{done.stderr[-3000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(result), file=sys.stderr)
        rows.append(
            {
                "process": i + 1,
                "XLA gain (paired, 6 rounds)": f"{result['xla_gain']:.2f}x ({result['xla_spread'][0]:.2f}-{result['xla_spread'][1]:.2f})",
                "XLA taken": "yes" if result["choices"].get("jit_compile") else "NO",
                "steps per call": result["choices"].get("steps_per_execution"),
                "tuning s": round(result["seconds"], 1),
                "trials (knob: ratio, rounds, decision)": "; ".join(
                    f"{k}: {r:.2f}x {n} {d}" for k, _, r, n, d in result["trials"]
                ),
            }
        )
    taken = sum(row["XLA taken"] == "yes" for row in rows)
    print(
        table(
            f"tune=True from an empty cache, {args.processes} fresh processes (one core each)",
            rows,
            list(rows[0]),
        )
    )
    print(f"\nXLA taken in {taken} of {len(rows)}")
    print(f"wrote {save('tune_fresh_bench', {'rows': rows})}")


if __name__ == "__main__":
    main()

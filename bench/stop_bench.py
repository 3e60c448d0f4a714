"""What the stop's agreement costs a run that is never stopped, under several workers (issue 76).

Under MultiWorkerMirroredStrategy every training call ends with one scalar all-reduce of the
workers' "asked to stop" flags (``train.pieces.stopping.agreed``), so a signal to any worker stops all of
them after the same call. This times tfgpu's training execution with it (``Extras.stoppable``,
what ``tfgpu.fit`` runs, agreeing about once a second (``stopping.EVERY_S``)) and without it, in the
same two worker processes, interleaved rounds of CALLS calls of K steps each on arrays (the
loop's known-length shape): the difference per call is the agreement's price. ``--every-call``
makes every call agree (the price of one collective a call, what the period saves).

Run: .venv/bin/python bench/stop_bench.py [--k 1,10] [--rounds 5] [--every-call]   (it starts ``tfgpu launch
--nproc 2`` itself; worker 0 prints the table and writes bench/results/stop_bench.json)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

CALLS = 40
BATCH = 64  # global
RESULTS = Path(__file__).parent / "results" / "stop_bench.json"


def worker(ks: list[int], rounds: int, *, every_call: bool) -> None:
    import keras
    import numpy as np
    import tensorflow as tf

    import tfgpu
    from tfgpu.train.model import building
    from tfgpu.train.pieces import stopping
    from tfgpu.train.step import execution

    if every_call:
        stopping.EVERY_S = 0.0  # the chief proposes a period of one step
    strategy = tfgpu.strategy()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH * 64, 256)).astype("float32")
    y = rng.integers(0, 10, size=(BATCH * 64,))
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(BATCH)
    distributed = strategy.experimental_distribute_dataset(dataset)
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((256,)), keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)]
        )
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    building.build(model, strategy, dataset.element_spec)
    variants = {
        "agreed (tfgpu.fit's)": execution.ALL,
        "no agreement": replace(execution.ALL, stoppable=False),
    }
    executions = {
        name: execution.train_execution(strategy, model, jit_compile=False, known=True, extras=extras)
        for name, extras in variants.items()
    }
    iterator = iter(distributed)
    chief = json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0
    stops = {"agreed (tfgpu.fit's)": stopping.Stop(across_workers=True, grace=0.0, is_chief=chief)}
    rows = []
    for k in ks:
        limit = execution.limit(k)
        times: dict[str, list[float]] = {name: [] for name in executions}
        for execute in executions.values():  # traced and warm
            execution.finished(execute(iterator, limit))
        for _ in range(rounds):
            for name, execute in executions.items():
                started = time.perf_counter()
                stop = stops.get(name)  # the host's side of the agreement (none without it)
                for _ in range(CALLS):
                    if stop:
                        stop.before(k)  # as the loop does: a call agrees about once a second
                    out = execute(iterator, limit)
                    if stop:
                        stop.now(out)  # the agreed figures, read in a call that agreed
                execution.finished(out)
                times[name].append((time.perf_counter() - started) / CALLS)
        base = statistics.median(times["no agreement"])
        for name, seconds in times.items():
            median = statistics.median(seconds)
            rows.append(
                {
                    "k": k,
                    "run": name,
                    "ms_per_call": round(1000 * median, 3),
                    "min": round(1000 * min(seconds), 3),
                    "max": round(1000 * max(seconds), 3),
                    "vs_no_agreement": round(median / base, 3),
                }
            )
    if chief:
        print("| K | run | ms per call (median) | min | max | vs no agreement |")
        print("|---|-----|----------------------|-----|-----|-----------------|")
        for r in rows:
            print(
                f"| {r['k']} | {r['run']} | {r['ms_per_call']} | {r['min']} | {r['max']} | {r['vs_no_agreement']} |"
            )
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps({"calls": CALLS, "global_batch": BATCH, "rows": rows}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--k", default="1,10")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--every-call", action="store_true", help="agree in every call (no period)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ks = [int(k) for k in args.k.split(",")]
    if args.worker:
        worker(ks, args.rounds, every_call=args.every_call)
        return
    here = [sys.executable, __file__, "--worker", "--k", args.k, "--rounds", str(args.rounds)]
    here += ["--every-call"] if args.every_call else []
    tfgpu = [sys.executable, "-m", "tfgpu.cli", "launch", "--nproc", "2", "--"]
    sys.exit(subprocess.run(tfgpu + here).returncode)


if __name__ == "__main__":
    main()

"""``tfgpu.predict(model, x)`` against Keras's ``model.predict(x)`` on arrays (issue 46).

Keras's multi-GPU guide MLP (784 -> 256 -> 256 -> 10), 200,000 rows of float32, ``batch_size=1024``.
In each process, twin models (same weights) are predicted in interleaved rounds: Keras's
``predict`` on one, ``tfgpu.predict`` on the other, and Keras again on the first (its twin: the
noise floor). One device, and (``--devices 2``) two logical CPU devices or every GPU, where
tfgpu runs a MirroredStrategy and Keras its own predict under the same strategy; and there, twins
made outside any scope as most code makes them (issue 67): Keras's ``predict`` runs them on one
device, ``tfgpu.predict`` on every one (``placement.place``).

Goals: tfgpu / Keras >= 1.0 on one device, >= 1.1 on two, both for models made in the scope and
for models made outside it; medians over the processes.

``--form pydataset`` (issue 75): the same rows as a ``keras.utils.PyDataset`` of 1024-row
batches, given to both: its batches come through the door every verb takes, Keras's own adapter
behind it. Goal there: tfgpu / Keras >= 0.9 (the Python that makes the batches is the same).

Run: make bench-predict-arrays   (or .venv/bin/python bench/predict_arrays_bench.py
[--processes 3] [--rounds 5] [--rows 200000] [--pin] [--form arrays|pydataset])
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BATCH = 1024


def _py_batches(x: Any) -> Any:
    """x as a ``keras.utils.PyDataset`` of ``BATCH``-row batches, as a user writes one."""
    import keras

    class Batches(keras.utils.PyDataset):
        def __len__(self) -> int:
            return -(-len(x) // BATCH)

        def __getitem__(self, index: int) -> Any:
            return x[index * BATCH : (index + 1) * BATCH]

    return Batches()


def one_process(
    *, rounds: int, rows: int, devices: int, cpu: int | None, form: str = "arrays"
) -> dict[str, list[float]]:
    """rows/s per round of each variant, interleaved, in this process."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    import tfgpu

    if devices > 1 and not _has_gpu():
        tfgpu.configure(logical_cpus=devices)
    import keras
    import numpy as np
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy() if devices > 1 else None
    x = np.random.default_rng(0).normal(size=(rows, 784)).astype("float32")

    def build() -> keras.Model:
        keras.utils.set_random_seed(0)
        return keras.Sequential(
            [
                keras.Input((784,)),
                keras.layers.Dense(256, activation="relu"),
                keras.layers.Dense(256, activation="relu"),
                keras.layers.Dense(10),
            ]
        )

    if strategy is None:
        keras_model, ours = build(), build()
    else:
        with strategy.scope():
            keras_model, ours = build(), build()
    data = x if form == "arrays" else _py_batches(x)
    size = BATCH if form == "arrays" else None
    variants = {
        "keras": lambda: keras_model.predict(data, batch_size=size, verbose=0),
        "tfgpu": lambda: tfgpu.predict(ours, data, batch_size=size, verbose=0),
        "keras twin": lambda: keras_model.predict(data, batch_size=size, verbose=0),
    }
    if (
        strategy is not None and form == "arrays"
    ):  # made outside any scope: Keras predicts on one device, tfgpu on all
        plain_keras, plain_ours = build(), build()
        variants["keras, no scope"] = lambda: plain_keras.predict(x, batch_size=BATCH, verbose=0)
        variants["tfgpu, no scope"] = lambda: tfgpu.predict(plain_ours, x, batch_size=BATCH, verbose=0)
    first = {name: run() for name, run in variants.items()}  # warm-up, and the outputs compared
    np.testing.assert_allclose(first["tfgpu"], first["keras"], rtol=1e-2, atol=1e-2)  # TF32 on a GPU
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            start = time.perf_counter()
            run()
            rates[name].append(rows / (time.perf_counter() - start))
    return rates


def _no_scope(per: list[dict[str, list[float]]]) -> str:
    """tfgpu / Keras for the twins made outside any scope: the median and each process's."""
    if "tfgpu, no scope" not in per[0]:
        return "-"
    ratios = [statistics.median(p["tfgpu, no scope"]) / statistics.median(p["keras, no scope"]) for p in per]
    return f"{statistics.median(ratios):.2f} ({' '.join(f'{r:.2f}' for r in ratios)})"


def _goal(form: str, devices: int) -> float:
    return 0.9 if form != "arrays" else 1.0 if devices == 1 else 1.1


def _has_gpu() -> bool:
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--pin", action="store_true", help="one core per process (alternating); one device only"
    )
    parser.add_argument("--form", choices=("arrays", "pydataset"), default="arrays")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        rates = one_process(
            rounds=args.rounds, rows=args.rows, devices=args.child, cpu=args.cpu, form=args.form
        )
        print(json.dumps(rates))
        return
    sys.path.insert(0, os.path.dirname(__file__))
    from _common import save, table

    rows = []
    for devices in args.devices:
        per = []
        for i in range(args.processes):
            pin = args.pin and devices == 1
            command = [sys.executable, __file__, "--child", str(devices), "--rounds", str(args.rounds)]
            command += ["--form", args.form]
            command += ["--rows", str(args.rows), *(["--cpu", str(i % (os.cpu_count() or 1))] if pin else [])]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode:
                sys.exit(f"process failed (exit status {done.returncode}):\n{done.stderr[-3000:]}")
            per.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"{devices} device(s): process {i + 1}/{args.processes} done", file=sys.stderr)
        ratios = [statistics.median(p["tfgpu"]) / statistics.median(p["keras"]) for p in per]
        twins = [statistics.median(p["keras twin"]) / statistics.median(p["keras"]) for p in per]
        rows.append(
            {
                "devices": devices,
                "keras rows/s": statistics.median(statistics.median(p["keras"]) for p in per),
                "tfgpu rows/s": statistics.median(statistics.median(p["tfgpu"]) for p in per),
                "tfgpu / keras": statistics.median(ratios),
                "per process": " ".join(f"{r:.2f}" for r in ratios),
                "no scope: tfgpu / keras": _no_scope(per),
                "twin / keras": " ".join(f"{r:.2f}" for r in twins),
                "form": args.form,
                "goal": f">= {_goal(args.form, devices)}",
                "met": "yes" if statistics.median(ratios) >= _goal(args.form, devices) else "NO",
            }
        )
    title = (
        f"tfgpu.predict / Keras predict on {args.form} ({args.rows:,} x 784, batch {BATCH}; "
        f"median of {args.processes} processes x {args.rounds} rounds{', pinned' if args.pin else ''})"
    )
    print(table(title, rows, list(rows[0])))
    name = "predict_arrays_bench" if args.form == "arrays" else f"predict_{args.form}_bench"
    print(f"\nwrote {save(name, {'rows': rows})}")


if __name__ == "__main__":
    main()

"""Prediction benchmark (issue 6): tfgpu predict vs Keras model.predict on one device.

- rows/s, median of 5 interleaved rounds, on 1,000,000 rows x 64 features (--rows) (tfgpu also writes the
  Parquet shards; Keras and the bare in-graph loop keep every output in memory);
- peak resident memory predicting 100,000 and 1,000,000 rows, each in a fresh process, sampled
  while predicting.

Run: make bench-predict   (or .venv/bin/python bench/predict_bench.py [--repeats 5])
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BATCH = 1024


def build(root: Path, rows: int) -> tuple[Path, Path]:
    import keras
    import numpy as np

    model_path, data_path = root / "m.keras", root / f"x{rows}.npy"
    if not model_path.exists():
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [
                keras.Input((64,), name="x"),
                keras.layers.Dense(256, activation="relu"),
                keras.layers.Dense(256, activation="relu"),
                keras.layers.Dense(10, activation="softmax"),
            ]
        )
        model.save(model_path)
    if not data_path.exists():
        array = np.lib.format.open_memmap(data_path, mode="w+", dtype="float32", shape=(rows, 64))
        for start in range(0, rows, 100_000):
            stop = min(rows, start + 100_000)
            array[start:stop] = np.random.default_rng(start).normal(size=(stop - start, 64))
        array.flush()
    return model_path, data_path


def run_tfgpu(model_path: Path, data_path: Path, out: Path) -> None:
    """tfgpu predict on the strategy it picks (one device here: the GPU, or the CPU), into a fresh output directory."""
    from tfgpu.predict import PredictOptions, predict

    shutil.rmtree(out, ignore_errors=True)
    predict(str(model_path), str(data_path), str(out), options=PredictOptions(batch_size=BATCH))


class RssSampler:
    """Peak resident memory while a block runs, sampled every 5 ms from /proc/self/statm.

    Why not ru_maxrss: importing TensorFlow peaks higher than a streaming prediction ever gets,
    and on Linux a child started with exec keeps its parent's maximum; both hide any growth.
    """

    def __init__(self) -> None:
        import threading

        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def now() -> int:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.now())

    def __enter__(self) -> RssSampler:
        self.peak = self.now()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.now())


def bare_loop(model: Any, data_path: Path):
    """The leanest loop: batches taken inside one tf.function, outputs kept in a TensorArray."""
    import numpy as np
    import tensorflow as tf

    x = np.load(data_path)  # in memory, as from_tensor_slices needs it
    steps = -(-len(x) // BATCH)
    dataset = tf.data.Dataset.from_tensor_slices(x).batch(BATCH).prefetch(tf.data.AUTOTUNE)

    @tf.function
    def predict_all(iterator: Any) -> Any:
        outputs = tf.TensorArray(tf.float32, size=steps, infer_shape=False)
        for i in tf.range(steps):
            outputs = outputs.write(i, model(next(iterator), training=False))
        return outputs.concat()

    def run() -> int:
        return int(predict_all(iter(dataset)).numpy().shape[0])

    return run


def child(kind: str, root: Path, rows: int) -> None:
    """Predict in this fresh process; print the peak resident memory while predicting (MiB)."""
    import numpy as np

    model_path, data_path = build(root, rows)  # already written by the parent
    import keras
    import tensorflow as tf  # noqa: F401  (imported before measuring, for both)

    with RssSampler() as rss:
        if kind == "tfgpu":
            run_tfgpu(model_path, data_path, root / f"out-{rows}")
        else:
            model = keras.saving.load_model(model_path)
            outputs = model.predict(np.load(data_path, mmap_mode="r"), batch_size=BATCH, verbose=0)
            assert outputs.shape[0] == rows
    print(json.dumps({"peak_mib": rss.peak / 2**20}))


def peak(kind: str, root: Path, rows: int) -> dict[str, float]:
    build(root, rows)
    done = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(root), str(rows)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--rows", type=int, default=1_000_000, help="rows for the speed test (fixed costs weigh more below)"
    )
    parser.add_argument("--child", nargs=3, metavar=("KIND", "ROOT", "ROWS"))
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), int(args.child[2]))
        return
    from _common import interleaved_rates, save, table

    root = Path(tempfile.mkdtemp(prefix="tfgpu-predict-bench-"))
    try:
        import keras
        import numpy as np

        rows = args.rows
        model_path, data_path = build(root, rows)
        model = keras.saving.load_model(model_path)

        def tfgpu_run() -> int:
            run_tfgpu(model_path, data_path, root / "bench-out")
            return rows

        def keras_run() -> int:
            model.predict(np.load(data_path, mmap_mode="r"), batch_size=BATCH, verbose=0)
            return rows

        rates = interleaved_rates(
            {
                "keras model.predict": keras_run,
                "bare in-graph loop (outputs in memory)": bare_loop(model, data_path),
                "tfgpu predict (to Parquet)": tfgpu_run,
            },
            rounds=args.repeats,
        )
        memory = {(kind, n): peak(kind, root, n) for kind in ("tfgpu", "keras") for n in (100_000, 1_000_000)}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    speed = [
        {"run": k, "rows_per_s": v["median"], "min": v["min"], "max": v["max"]} for k, v in rates.items()
    ]
    mem = [{"run": f"{kind} {n:,} rows", "peak_rss_mib": m["peak_mib"]} for (kind, n), m in memory.items()]
    ratio = rates["tfgpu predict (to Parquet)"]["median"] / rates["keras model.predict"]["median"]
    bare = (
        rates["tfgpu predict (to Parquet)"]["median"]
        / rates["bare in-graph loop (outputs in memory)"]["median"]
    )
    goals = [
        {"goal": "tfgpu / keras predict rows/s >= 1.0", "measured": ratio, "target": 1.0},
        {"goal": "tfgpu / bare in-graph loop rows/s >= 0.97", "measured": bare, "target": 0.97},
        {
            "goal": "tfgpu peak RSS 1M / 100k rows <= 1.2",
            "measured": memory[("tfgpu", 1_000_000)]["peak_mib"] / memory[("tfgpu", 100_000)]["peak_mib"],
            "target": 1.2,
        },
        {
            "goal": "(keras peak RSS 1M / 100k rows, for comparison)",
            "measured": memory[("keras", 1_000_000)]["peak_mib"] / memory[("keras", 100_000)]["peak_mib"],
            "target": None,
        },
    ]
    for goal in goals[:3]:
        goal["met"] = (
            "yes"
            if (
                goal["measured"] >= goal["target"]
                if "rows/s" in goal["goal"]
                else goal["measured"] <= goal["target"]
            )
            else "NO"
        )
    print(
        table(
            f"Prediction speed, {args.rows:,} rows x 64 features, MLP 64-256-256-10, batch {BATCH}, one device (median of {args.repeats})",
            speed,
            ["run", "rows_per_s", "min", "max"],
        )
    )
    print()
    print(
        table(
            "Peak resident memory while predicting (fresh process each; TensorFlow imported first)",
            mem,
            ["run", "peak_rss_mib"],
        )
    )
    print()
    print(table("Goals", goals, ["goal", "measured", "target", "met"]))
    print(f"\nwrote {save('predict_bench', {'speed': speed, 'memory': mem, 'goals': goals})}")


if __name__ == "__main__":
    main()

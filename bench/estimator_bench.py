"""Estimator prediction benchmark (issue 8): tfgpu.estimator.predict vs Estimator.predict.

Runs on TensorFlow 2.15 with tensorflow-estimator (the .venv-tf215 lane). One Estimator (a
64-256-256-10 MLP) predicts 200,000 rows from an input_fn. Estimator.predict yields one dict per
row on one device. tfgpu.estimator.predict exports a SavedModel and runs it on every local
replica (here 2 logical CPU devices), writing Parquet shards. The figures are rows/s, the median
of interleaved rounds, and the ratio between the two from the same run.

Run: make bench-estimator   (or .venv-tf215/bin/python bench/estimator_bench.py [--repeats 5])
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).parent))

ROWS, BATCH = 200_000, 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from tfgpu import estimator  # configures before TensorFlow initializes

    root = Path(tempfile.mkdtemp(prefix="tfgpu-est-bench-"))
    config = estimator.run_config(str(root / "model"), logical_cpus=2, seed=0)

    import numpy as np
    import tensorflow as tf
    from _common import interleaved_rates, save, table

    x = np.random.default_rng(0).normal(size=(ROWS, 64)).astype(np.float32)

    def model_fn(features, labels, mode):
        h = tf.compat.v1.layers.dense(features["x"], 256, activation=tf.nn.relu)
        h = tf.compat.v1.layers.dense(h, 256, activation=tf.nn.relu)
        logits = tf.compat.v1.layers.dense(h, 10)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions={"probabilities": tf.nn.softmax(logits)})
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
        step = tf.compat.v1.train.get_global_step()
        return tf.estimator.EstimatorSpec(
            mode, loss=loss, train_op=tf.compat.v1.train.AdamOptimizer().minimize(loss, global_step=step)
        )

    def train_fn():
        y = np.zeros(ROWS, np.int64)
        return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).batch(BATCH // 2)

    def predict_fn():
        return tf.data.Dataset.from_tensor_slices({"x": x}).batch(BATCH)

    model = tf.estimator.Estimator(model_fn, config=config)
    model.train(train_fn, steps=2)

    def baseline() -> int:
        return sum(1 for _ in model.predict(predict_fn, yield_single_examples=True))

    def baseline_batches() -> int:
        return sum(len(b["probabilities"]) for b in model.predict(predict_fn, yield_single_examples=False))

    def tfgpu_predict(strategy=None) -> int:
        out = root / "out"
        shutil.rmtree(out, ignore_errors=True)
        return estimator.predict(
            model, predict_fn, str(out), batch_size=BATCH, strategy=strategy
        ).predicted_rows

    one = tf.distribute.OneDeviceStrategy("/cpu:0")

    rates = interleaved_rates(
        {
            "Estimator.predict (rows)": baseline,
            "Estimator.predict (batches)": baseline_batches,
            "tfgpu.estimator.predict, 1 replica": lambda: tfgpu_predict(one),
            "tfgpu.estimator.predict, 2 replicas": tfgpu_predict,
        },
        rounds=args.repeats,
    )
    base = rates["Estimator.predict (rows)"]["median"]
    rows = [
        {
            "variant": name,
            "rows/s": r["median"],
            "min": r["min"],
            "max": r["max"],
            "vs Estimator.predict": r["median"] / base,
        }
        for name, r in rates.items()
    ]
    print(
        table(
            f"Estimator prediction, {ROWS:,} rows, 2 logical CPU devices, TensorFlow {tf.__version__}",
            rows,
            ["variant", "rows/s", "min", "max", "vs Estimator.predict"],
        )
    )
    print("saved", save("estimator", {"rates": rates, "rows": ROWS, "batch": BATCH}))
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

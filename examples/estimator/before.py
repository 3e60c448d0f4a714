"""BEFORE: an Estimator on TensorFlow 2.15, spread over every GPU by tfgpu.estimator.

    python examples/estimator/before.py MODEL_DIR [--cpus 2]

--cpus N splits the CPU into N devices, to run the multi-device path on a machine with no GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import tensorflow as tf

sys.path.insert(0, str(Path(__file__).parent))
from toy_data import arrays

from tfgpu import estimator

BATCH = 64


def input_fn(mode, params):
    x, y = arrays(seed=0 if mode == tf.estimator.ModeKeys.TRAIN else 1)
    ds = tf.data.Dataset.from_tensor_slices(({"x": x}, y))
    if mode == tf.estimator.ModeKeys.TRAIN:
        ds = ds.shuffle(len(x), seed=0).repeat()
    return ds.batch(params["batch_size"])


def model_fn(features, labels, mode, params):
    hidden = tf.compat.v1.layers.dense(features["x"], 16, activation=tf.nn.relu)
    logits = tf.compat.v1.layers.dense(hidden, 2)
    predictions = {"class": tf.argmax(logits, 1), "probabilities": tf.nn.softmax(logits)}
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions=predictions)
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = tf.compat.v1.train.AdamOptimizer(params["learning_rate"]).minimize(
        loss, global_step=tf.compat.v1.train.get_global_step()
    )
    metrics = {"accuracy": tf.compat.v1.metrics.accuracy(labels, predictions["class"])}
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op, eval_metric_ops=metrics)


def main() -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("--cpus", type=int, default=None)
    args = parser.parse_args()
    config = estimator.run_config(  # was: tf.estimator.RunConfig(model_dir=..., session_config=...)
        args.model_dir, memory_growth=True if args.cpus is None else None, logical_cpus=args.cpus, seed=0
    )
    model = tf.estimator.Estimator(
        model_fn, config=config, params={"batch_size": BATCH, "learning_rate": 0.01}
    )
    model.train(input_fn, steps=200)
    result = model.evaluate(input_fn)
    print(f"accuracy {result['accuracy']:.3f} after {result['global_step']} steps")
    return result


if __name__ == "__main__":
    main()

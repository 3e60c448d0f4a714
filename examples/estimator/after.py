"""AFTER: the same model as before.py, as a tfgpu Task trained by tfgpu.Trainer (TensorFlow >= 2.16).

python examples/estimator/after.py CHECKPOINT_DIR [--cpus 2]
tfgpu launch --nproc 2 -- python examples/estimator/after.py CHECKPOINT_DIR    # two workers
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import tfgpu

sys.path.insert(0, str(Path(__file__).parent))
from toy_data import arrays

BATCH = 64  # the Estimator's batch: one replica's batch here, as under its MirroredStrategy


def train_data(ctx, per_replica_batch):  # was input_fn(mode=TRAIN, params)
    import tensorflow as tf

    x, y = arrays(seed=0)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
    return ds.shuffle(len(x), seed=0).batch(per_replica_batch)


def eval_data(ctx, per_replica_batch):  # was input_fn(mode=EVAL, params)
    import tensorflow as tf

    x, y = arrays(seed=1)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
    return ds.batch(per_replica_batch)


def model():  # was model_fn: the layers; the loss, optimizer and metrics move to the Task
    import keras

    return keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)]
    )


def task() -> tfgpu.Task:
    return tfgpu.Task(
        model=model,
        loss="sparse_categorical_crossentropy",
        from_logits=True,
        optimizer="adam",
        learning_rate=0.01,
        metrics=["accuracy"],
        batch_size=BATCH,
        train_data=train_data,
        eval_data=eval_data,
    )


def main() -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint_dir")
    parser.add_argument("--cpus", type=int, default=None)
    args = parser.parse_args()
    # was RunConfig(session_config=..., tf_random_seed=0, train_distribute=...)
    tfgpu.configure(memory_growth=True if args.cpus is None else None, logical_cpus=args.cpus, seed=0)
    trainer = tfgpu.Trainer(task(), checkpoint_dir=args.checkpoint_dir, checkpoint_every=100)
    trainer.fit(epochs=7)  # 2048 rows / 64 = 32 steps an epoch on one replica
    result = trainer.evaluate()
    print(f"accuracy {result['accuracy']:.3f}")
    return result


if __name__ == "__main__":
    main()

"""Train a small model on every worker with tfgpu.strategy() and a strategy.run loop.

    python examples/train_mwms.py OUT_DIR                                  # one process
    tfgpu launch --nproc 2 -- python examples/train_mwms.py OUT_DIR        # two workers (MWMS)

Every worker takes its slice of the same global batches, so two workers end with exactly the
weights one process gets. Each process saves its final weights to OUT_DIR/<task>.npz.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import tfgpu
from tfgpu import cluster

GLOBAL_BATCH = 32
STEPS = 8


def main(out: Path) -> None:
    tfgpu.configure(seed=0)
    strategy = tfgpu.strategy()  # MultiWorkerMirroredStrategy under `tfgpu launch`

    import keras
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.normal(size=(GLOBAL_BATCH * STEPS, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1))).astype("float32")
    start = [
        rng.normal(scale=0.3, size=(8, 16)).astype("float32"),
        np.zeros(16, "float32"),
        rng.normal(scale=0.3, size=(16, 1)).astype("float32"),
        np.zeros(1, "float32"),
    ]
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
        )
        model.set_weights(start)
        optimizer = keras.optimizers.SGD(0.05)

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        per_replica = ctx.get_per_replica_batch_size(GLOBAL_BATCH)
        first = ctx.input_pipeline_id * per_replica  # this worker's slice of every global batch
        global_batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
        return global_batches.map(
            lambda a, b: (a[first : first + per_replica], b[first : first + per_replica])
        )

    @tf.function
    def step(batch: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        def replica(inputs: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                per_example = tf.reduce_mean(tf.square(model(inputs, training=True) - targets), axis=-1)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica, args=batch), axis=None)

    for batch in strategy.distribute_datasets_from_function(dataset_fn):
        loss = step(batch)
    spec = cluster.from_environ()
    task = f"{spec.task_type}-{spec.task_index}" if spec else "single"
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / f"{task}.npz", *model.get_weights())
    print(f"{task}: final loss {float(loss):.6f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

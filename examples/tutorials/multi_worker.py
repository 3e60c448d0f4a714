"""TensorFlow's "Multi-worker training with Keras" tutorial, run by ``tfgpu.fit``.

tensorflow/docs ``site/en/tutorials/distribute/multi_worker_with_keras.ipynb``, as written, with the
lines a user changes marked ``# tfgpu:``::

    tfgpu launch --nproc 2 -- python examples/tutorials/multi_worker.py OUT

Keras 3's own ``model.fit`` fails here (keras-team/keras#20585). Changed from the tutorial: the
data are synthetic MNIST of the same shapes (no download), the shuffle and the initial weights are
seeded so that runs can be compared, and the model is smaller (a 2-core CI machine runs it). Each
task saves its weights and history to OUT/<task>.npz and OUT/<task>.json.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np


def mnist_dataset(batch_size: int):
    import tensorflow as tf

    rng = np.random.default_rng(0)  # tfgpu: synthetic, for keras.datasets.mnist.load_data()
    x_train = rng.integers(0, 256, (2048, 28, 28)).astype("uint8")
    y_train = (x_train[:, :14].mean((1, 2)) > x_train[:, 14:].mean((1, 2))).astype("int64") * 3
    # The `x` arrays are in uint8 and have values in the [0, 255] range.
    # You need to convert them to float32 with values in the [0, 1] range.
    x_train = x_train / np.float32(255)
    y_train = y_train.astype(np.int64)
    train_dataset = (
        tf.data.Dataset.from_tensor_slices((x_train, y_train))
        .shuffle(2048, seed=0)
        .repeat()
        .batch(batch_size)
    )  # tfgpu: seed=0
    return train_dataset


def build_and_compile_cnn_model():
    import keras

    keras.utils.set_random_seed(0)  # tfgpu: the same initial weights in every process
    model = keras.Sequential(
        [
            keras.Input(shape=(28, 28)),
            keras.layers.Reshape(target_shape=(28, 28, 1)),
            keras.layers.Conv2D(8, 3, activation="relu"),  # tfgpu: 32 filters in the tutorial
            keras.layers.Flatten(),
            keras.layers.Dense(32, activation="relu"),  # tfgpu: 128 units in the tutorial
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=keras.optimizers.SGD(learning_rate=0.001),
        metrics=["accuracy"],
    )
    return model


def main(out: str) -> None:
    import keras
    import tensorflow as tf

    import tfgpu

    per_worker_batch_size = 64
    tf_config = json.loads(os.environ["TF_CONFIG"])
    num_workers = len(tf_config["cluster"]["worker"])

    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    global_batch_size = per_worker_batch_size * num_workers
    multi_worker_dataset = mnist_dataset(global_batch_size)

    with strategy.scope():
        # Model building/compiling need to be within `strategy.scope()`.
        multi_worker_model = build_and_compile_cnn_model()

    task = f"{tf_config['task']['type']}-{tf_config['task']['index']}"
    # the tutorial's fault tolerance: a worker that fails restarts from the last epoch's backup
    callbacks = [keras.callbacks.BackupAndRestore(backup_dir=os.path.join(out, "backup"))]
    history = tfgpu.fit(  # tfgpu: multi_worker_model.fit(
        multi_worker_model, multi_worker_dataset, epochs=3, steps_per_epoch=10, callbacks=callbacks, verbose=0
    )
    np.savez(os.path.join(out, f"{task}.npz"), *multi_worker_model.get_weights())
    with open(os.path.join(out, f"{task}.json"), "w") as handle:
        json.dump(history.history, handle)


if __name__ == "__main__":
    main(sys.argv[1])

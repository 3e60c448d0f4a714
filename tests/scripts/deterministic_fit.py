"""A reproducibility recipe as its authors write it (``keras.utils.set_random_seed`` and
``tf.config.experimental.enable_op_determinism()``), trained with tfgpu.fit under `tfgpu launch
--nproc 2`; each worker saves its weights and the run's verdict. tests/bodies.py takes its
``data()`` and ``model()`` for the same runs in one process.

Usage: deterministic_fit.py OUT
"""

import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf

import tfgpu  # sets the launched task up before TensorFlow starts


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(96, 6)).astype("float32"), rng.integers(0, 3, 96)


def model() -> keras.Model:
    """A classifier with Dropout (random numbers in training), compiled as the recipe does."""
    made = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(3),
        ]
    )
    made.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return made


if __name__ == "__main__":
    keras.utils.set_random_seed(11)
    tf.config.experimental.enable_op_determinism()
    x, y = data()
    trained = model()
    history = tfgpu.fit(trained, x, y, batch_size=24, epochs=2, verbose=0)
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    name = f"{task['type']}-{task['index']}"
    out = sys.argv[1]
    np.savez(os.path.join(out, f"{name}.npz"), *trained.get_weights())
    with open(os.path.join(out, f"{name}.json"), "w") as handle:
        json.dump({"history": history.history, "verdict": history.train_result.sentence()}, handle)

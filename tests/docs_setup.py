"""What the docs' code blocks take as given: the user's photos, model and data, made small.

Imported by the ``<!-- invisible-code-block: python -->`` comments in README.md and docs/, in the
document's own Python and working directory (tests/test_docs_run.py). Each helper makes what a
reader already has when they reach the block, with the shapes the block uses and sizes that train
in seconds on a CPU.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import numpy as np


def write(path: str, text: str) -> None:
    Path(path).write_text(textwrap.dedent(text))


def run(command: str) -> None:
    """A command a reader ran before this block (its output is not the block's)."""
    subprocess.run(["bash", "-c", command], check=True, capture_output=True, text=True)


def photos(root: str, *, classes: tuple[str, ...], per_class: int, size: tuple[int, int]) -> None:
    """photos/<class>/*.jpg, each class a colour a small model learns."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for label, name in enumerate(classes):
        folder = Path(root) / name
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(0, 96, (*size, 3), dtype=np.uint8)
            pixels[..., label % 3] += 128
            Image.fromarray(pixels).save(folder / f"{i:03d}.jpg", quality=90)


def build_model():
    """A binary classifier of 8 features (README's tfgpu.fit block compiles it)."""
    import keras

    return keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )


def arrays(rows: int, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 8)).astype("float32")
    y = (x[:, :4].sum(axis=1) > 0).astype("float32")
    return x, y


def binary_data():
    """train_ds, val_ds, test_ds (batched tf.data) and x_test (an array)."""
    import tensorflow as tf

    def batched(rows: int, seed: int):
        return tf.data.Dataset.from_tensor_slices(arrays(rows, seed=seed)).batch(32)

    x_test, _ = arrays(100, seed=3)
    return batched(512, 0), batched(128, 1), batched(128, 2), x_test


def save_image_model(path: str, *, size: int, classes: int = 2) -> None:
    """A trained-looking .keras image classifier (what `tfgpu train` or `model.save` left)."""
    import keras

    model = keras.Sequential(
        [
            keras.Input((size, size, 3)),
            keras.layers.Rescaling(1 / 255),
            keras.layers.Conv2D(4, 3, strides=4),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(classes),
        ]
    )
    model.save(path)


IMAGE_TASK = """\
import keras
import tfgpu


def build_model():
    return keras.Sequential([
        keras.Input((224, 224, 3)),
        keras.layers.Rescaling(1 / 255),
        keras.layers.Conv2D(8, 3, strides=4, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(2),
    ])


def make_task():
    return tfgpu.Task(model=build_model, loss="sparse_categorical_crossentropy", from_logits=True,
                      train_data="data/", eval_data="val/", metrics=["accuracy"], batch_size=64)
"""

# a map of 800 TensorFlow ops per element, stateful (random jitter) so tf.data runs it one element at
# a time: input-bound at 9 ms steps on any machine until it runs in parallel
SLOW_INPUT = """\
import tensorflow as tf


def augment(i):
    v = tf.fill([512], tf.cast(i, tf.float32) * 1e-3 + tf.random.uniform([], 0.0, 1e-3))
    for _ in range(800):
        v = tf.sin(v) + 1.0
    return v[:16]


def make_dataset():
    return tf.data.Dataset.range(100_000).map(augment).batch(32).prefetch(tf.data.AUTOTUNE)
"""

ARRAY_TASK = """\
import keras
import tfgpu
import docs_setup


def build_model():
    model = docs_setup.build_model()
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    return model


def make_task():
    return tfgpu.Task(model=build_model, train_data=docs_setup.arrays(2048, seed=0),
                      eval_data=docs_setup.arrays(256, seed=1), batch_size=64)
"""


def py_batches():
    """A ``keras.utils.PyDataset`` of x batches, as a reader writes one (README, from-model-fit)."""
    import keras

    class PyBatches(keras.utils.PyDataset):
        def __init__(self, x, batch_size, **kwargs):
            super().__init__(**kwargs)
            self.x, self.batch_size = x, batch_size

        def __len__(self):
            return -(-len(self.x) // self.batch_size)

        def __getitem__(self, index):
            return self.x[index * self.batch_size : (index + 1) * self.batch_size]

    return PyBatches


def __getattr__(name: str):
    if name == "PyBatches":  # made on first use: keras is imported by the block, not before
        return py_batches()
    raise AttributeError(name)

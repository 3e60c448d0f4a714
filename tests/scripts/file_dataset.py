"""A Dataset that reads text files, as keras-io's NER example reads its one file, trained with
tfgpu.fit under `tfgpu launch --nproc 2`; each worker saves its weights and history.

Usage: file_dataset.py OUT FILES ROWS
"""

import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf

import tfgpu  # sets the launched task up before TensorFlow starts


def rows_of(rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows, rounded as the text files hold them (six decimals)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 4)).astype("float32")
    y = x @ np.arange(1, 5, dtype="float32")[:, None]
    return np.round(x, 6), np.round(y, 6)


def model() -> keras.Model:
    keras.utils.set_random_seed(0)
    made = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
    made.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    return made


def write(out: str, files: int, x: np.ndarray, y: np.ndarray) -> list[str]:
    paths = []
    for f in range(files):
        path = os.path.join(out, f"part{f}.txt")
        paths.append(path)
        if not os.path.exists(path):  # both workers write it: the first rename wins, whole
            lines = range(f * len(x) // files, (f + 1) * len(x) // files)
            with open(f"{path}.{os.getpid()}", "w") as handle:
                handle.writelines(",".join(f"{v:.6f}" for v in (*x[i], *y[i])) + "\n" for i in lines)
            os.replace(f"{path}.{os.getpid()}", path)
    return paths


def parse(line):
    values = tf.strings.to_number(tf.strings.split(line, ","))
    return values[:4], values[4:]


def main() -> None:
    out, files, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    x, y = rows_of(rows)
    dataset = tf.data.TextLineDataset(write(out, files, x, y)).map(parse).batch(16)
    trained = model()
    history = tfgpu.fit(trained, dataset, epochs=2, verbose=0)
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    name = f"{task['type']}-{task['index']}"
    np.savez(os.path.join(out, f"{name}.npz"), *trained.get_weights())
    with open(os.path.join(out, f"{name}.json"), "w") as handle:
        json.dump(
            {"history": history.history, "evaluate": tfgpu.evaluate(trained, dataset, verbose=0)}, handle
        )


if __name__ == "__main__":
    main()

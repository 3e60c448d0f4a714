"""The user's clock: a script run as a user runs it, Keras's ``fit`` against ``tfgpu.fit`` (issue 65).

Each run is a fresh process that imports TensorFlow, builds and compiles the model with Keras's
defaults, fits arrays and evaluates, as a script does; the parent times the whole process and the
child reports the fit call's own seconds. Three kinds of the same script:

- ``keras``: ``model.fit(...)`` then ``model.evaluate(...)``;
- ``tfgpu``: ``tfgpu.fit(model, ...)`` then ``tfgpu.evaluate(model, ...)``, tfgpu's defaults;
- ``tune``: the same with ``tune=True`` and an empty tuning cache (a user's first run).

Four workloads from the public guides, their code as written, synthetic data of the same shapes
(the sizes cut so that one epoch takes seconds on a CPU):

- ``mlp``: tensorflow/docs' basic classification (Fashion-MNIST: Flatten, Dense 128, Dense 10,
  Keras's default batch of 32);
- ``convnet``: keras-io's mnist_convnet (two Conv2D, batch 128, ``validation_split=0.1``);
- ``text``: tensorflow/docs' text classification (Embedding 10,000 x 16, global average
  pooling, sequences of 250, batch 32);
- ``custom_step``: keras-io's "Customizing what happens in fit" (a model with its own
  ``train_step`` calling ``compute_loss``, batch 32).

Kinds are interleaved within each round (keras, tfgpu, tune, then the next workload), and each
figure is the median of the rounds; ratios are to Keras's median in the same run.

Run: make bench-e2e  (or .venv/bin/python bench/e2e_bench.py [--rounds 3] [--epochs 1,3]
[--workloads mlp,convnet,text,custom_step] [--pin])
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from _common import save, table

KINDS = ("keras", "tfgpu", "tune")
WORKLOADS = ("mlp", "convnet", "text", "custom_step")


def _mlp() -> tuple[Any, dict[str, Any], dict[str, Any]]:
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    x, y = rng.random((12_000, 28, 28), dtype=np.float32), rng.integers(0, 10, 12_000)
    model = keras.Sequential(
        [
            keras.Input((28, 28)),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model, {"x": x, "y": y}, {"x": x[:2_000], "y": y[:2_000]}


def _convnet() -> tuple[Any, dict[str, Any], dict[str, Any]]:
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.random((6_000, 28, 28, 1), dtype=np.float32)
    y = keras.utils.to_categorical(rng.integers(0, 10, 6_000), 10)
    model = keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            keras.layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
            keras.layers.MaxPooling2D(pool_size=(2, 2)),
            keras.layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
            keras.layers.MaxPooling2D(pool_size=(2, 2)),
            keras.layers.Flatten(),
            keras.layers.Dropout(0.5),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
    fit = {"x": x, "y": y, "batch_size": 128, "validation_split": 0.1}
    return model, fit, {"x": x[:1_000], "y": y[:1_000]}


def _text() -> tuple[Any, dict[str, Any], dict[str, Any]]:
    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    x, y = rng.integers(1, 10_000, (5_000, 250)), rng.integers(0, 2, 5_000).astype("float32")
    model = keras.Sequential(
        [
            keras.Input((250,)),
            keras.layers.Embedding(10_000, 16),
            keras.layers.Dropout(0.2),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(1),
        ]
    )
    model.compile(
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        optimizer="adam",
        metrics=[keras.metrics.BinaryAccuracy(threshold=0.0)],
    )
    return model, {"x": x, "y": y}, {"x": x[:1_000], "y": y[:1_000]}


def _custom_step() -> tuple[Any, dict[str, Any], dict[str, Any]]:
    import keras
    import numpy as np
    import tensorflow as tf

    class CustomModel(keras.Model):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(y=y, y_pred=y_pred)
            gradients = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))  # noqa: B905 (as written)
            for metric in self.metrics:
                if metric.name == "loss":
                    metric.update_state(loss)
                else:
                    metric.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}

    rng = np.random.default_rng(0)
    x, y = rng.random((4_000, 32), dtype=np.float32), rng.random((4_000, 1), dtype=np.float32)
    inputs = keras.Input(shape=(32,))
    model = CustomModel(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    return model, {"x": x, "y": y}, {"x": x[:1_000], "y": y[:1_000]}


BUILDERS = {"mlp": _mlp, "convnet": _convnet, "text": _text, "custom_step": _custom_step}


def child(workload: str, kind: str, epochs: int) -> dict[str, float]:
    """One script run: build, compile, fit, evaluate; the fit's and the evaluation's seconds."""
    import keras

    keras.utils.set_random_seed(0)
    model, fit, evaluate = BUILDERS[workload]()
    started = time.perf_counter()
    if kind == "keras":
        model.fit(**fit, epochs=epochs, verbose=0)
    else:
        import tfgpu

        tfgpu.fit(model, **fit, epochs=epochs, verbose=0, tune=kind == "tune")
    fitted = time.perf_counter()
    if kind == "keras":
        model.evaluate(**evaluate, verbose=0)
    else:
        import tfgpu

        tfgpu.evaluate(model, **evaluate, verbose=0)
    return {"fit_s": fitted - started, "evaluate_s": time.perf_counter() - fitted}


def one_run(workload: str, kind: str, epochs: int, *, cpu: int | None) -> dict[str, float]:
    """A fresh process of ``kind`` on ``workload``: its whole wall and its own figures."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    if kind == "tune":  # a user's first run: nothing kept from an earlier one
        env["TFGPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="tfgpu-e2e-")
    command = [sys.executable, __file__, "--child", workload, kind, str(epochs)]
    if cpu is not None:
        command = ["taskset", "-c", str(cpu), *command]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{workload}/{kind} failed:\n{done.stderr[-3000:]}")
    return {"wall_s": wall, **json.loads(done.stdout.strip().splitlines()[-1])}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", default="1,3")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--pin", action="store_true", help="each process on one core (core 0)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        workload, kind, epochs = args.child
        print(json.dumps(child(workload, kind, int(epochs))))
        return
    workloads, kinds = args.workloads.split(","), args.kinds.split(",")
    epochs_list = [int(e) for e in args.epochs.split(",")]
    runs: dict[tuple[str, int, str], list[dict[str, float]]] = {}
    for r in range(args.rounds):
        for workload in workloads:
            for epochs in epochs_list:
                for kind in kinds:
                    figures = one_run(workload, kind, epochs, cpu=0 if args.pin else None)
                    runs.setdefault((workload, epochs, kind), []).append(figures)
                    print(
                        f"round {r + 1}: {workload} {epochs} epoch(s) {kind}: wall {figures['wall_s']:.2f} s, "
                        f"fit {figures['fit_s']:.2f} s",
                        flush=True,
                    )
    rows = []
    for (workload, epochs, kind), figures in runs.items():
        keras_runs = runs.get((workload, epochs, "keras"))
        wall = statistics.median(f["wall_s"] for f in figures)
        fit = statistics.median(f["fit_s"] for f in figures)
        base_wall = statistics.median(f["wall_s"] for f in keras_runs) if keras_runs else None
        base_fit = statistics.median(f["fit_s"] for f in keras_runs) if keras_runs else None
        rows.append(
            {
                "workload": workload,
                "epochs": epochs,
                "kind": kind,
                "wall_s": round(wall, 2),
                "wall_spread": f"{min(f['wall_s'] for f in figures):.2f}-{max(f['wall_s'] for f in figures):.2f}",
                "wall_vs_keras": round(wall / base_wall, 3) if base_wall else None,
                "fit_s": round(fit, 2),
                "fit_vs_keras": round(fit / base_fit, 3) if base_fit else None,
            }
        )
    title = f"A script as a user runs it, fresh process each (median of {args.rounds} rounds{', pinned' if args.pin else ''})"
    columns = [
        "workload",
        "epochs",
        "kind",
        "wall_s",
        "wall_spread",
        "wall_vs_keras",
        "fit_s",
        "fit_vs_keras",
    ]
    print(table(title, rows, columns))
    print(f"\nwrote {save('e2e_bench', {'pinned': args.pin, 'rounds': args.rounds, 'rows': rows})}")


if __name__ == "__main__":
    main()

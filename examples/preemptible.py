"""A training run a cluster may stop: python examples/preemptible.py OUT_DIR [STEP [WHO]].

Trains a small model with tfgpu.fit and checkpoint_dir=OUT_DIR/checkpoints, 2 steps a call. With
STEP, the worker(s) WHO ("0", "1" or "all"; default "all") send themselves SIGTERM from a batch
callback once the optimizer has taken STEP steps, as a preempted pod or Slurm's signal would;
WHO "launcher": worker 0 sends it to its parent, the launcher, which passes it on.
The finished run writes OUT_DIR/weights-<worker>.npz, its History and its optimizer's iterations
to OUT_DIR/result-<worker>.json. Run under ``tfgpu launch --nproc 2`` or alone.
"""

import json
import os
import signal
import sys
from pathlib import Path

import keras
import numpy as np

import tfgpu


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 6)).astype("float32")
    y = (x[:, :3].sum(axis=1) > 0).astype("float32")
    return x, y


def model():
    keras.utils.set_random_seed(1)
    built = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    built.compile(optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy", metrics=["accuracy"])
    return built


class SignalAt(keras.callbacks.Callback):
    """SIGTERM to this process once the optimizer has taken ``step`` steps (once)."""

    def __init__(self, step, pid):
        super().__init__()
        self.step, self.pid, self.sent = step, pid, False

    def on_train_batch_end(self, batch, logs=None):
        if not self.sent and int(self.model.optimizer.iterations.numpy()) >= self.step:
            self.sent = True
            os.kill(self.pid, signal.SIGTERM)


def main(out, step=None, who="all"):
    out = Path(out)
    worker = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("index", 0)
    x, y = data()
    built = model()
    asked = (step is not None and who in ("all", str(worker))) or (who == "launcher" and worker == 0)
    pid = os.getppid() if who == "launcher" else os.getpid()
    history = tfgpu.fit(
        built,
        x,
        y,
        batch_size=20,
        epochs=3,
        verbose=0,
        steps_per_execution=2,
        checkpoint_dir=str(out / "checkpoints"),
        callbacks=[SignalAt(int(step), pid)] if asked else [],
    )
    np.savez(out / f"weights-{worker}.npz", *built.get_weights())
    result = {"history": history.history, "iterations": int(built.optimizer.iterations.numpy())}
    (out / f"result-{worker}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:])

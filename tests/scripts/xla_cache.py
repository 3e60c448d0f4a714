"""A tuned fit that tries XLA, in a process of its own: what the tuner timed of XLA's compile.

Usage: xla_cache.py LOG_DIR

``tfgpu.configure(xla_cache=True)`` first (XLA's persistent cache, under TFGPU_CACHE_DIR; on by
default only where there are GPUs), then
``tfgpu.fit(tune=("jit_compile",))`` of a small conv net; LOG_DIR keeps the tuning apart, so each
run measures again (a kept choice would measure nothing). Prints one JSON line: the compile's
seconds, and the files in XLA's cache after the run. tests/test_tuning.py runs it twice.
"""

import json
import os
import sys

import tfgpu

tfgpu.configure(xla_cache=True)

import keras  # noqa: E402
import numpy as np  # noqa: E402


def main(log_dir: str) -> None:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((32, 32, 3)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(10),
        ]
    )
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, size=512)
    history = tfgpu.fit(
        model,
        x,
        y,
        batch_size=64,
        epochs=1,
        tune=("jit_compile",),
        tune_budget_s=20,
        log_dir=log_dir,
        verbose=0,
    )
    tuning = history.train_result.tuning
    cache = os.path.join(os.environ["TFGPU_CACHE_DIR"], "xla")
    files = sorted(name for _, _, names in os.walk(cache) for name in names)
    print(json.dumps({"compile_s": tuning.xla_compile_s, "files": files, "notes": tuning.notes}))


if __name__ == "__main__":
    main(sys.argv[1])

"""A real model side by side (issue 54, item 3): ResNet-50 on one device, four ways.

``keras.applications.ResNet50(weights=None)`` on synthetic 224x224x3 images with labels of 1000
classes, batch 256, one GPU:

- ``keras fit default``: Keras ``fit`` as most users call it: no strategy, ``compile``'s
  defaults (Keras 3 resolves ``jit_compile="auto"`` to XLA on a GPU when no tf.distribute
  strategy is set, so this user already gets XLA);
- ``keras fit expert``: ``mixed_bfloat16``, ``jit_compile=True``, ``steps_per_execution=50``;
- ``tfgpu.fit default``: ``tfgpu.fit`` with its defaults;
- ``tfgpu.fit tune=all``: ``tfgpu.fit(tune="all")`` (XLA, bf16, steps per call measured).

Each variant runs in its own process (a bf16 policy is global, and four ResNet-50s do not share
a GPU well): two epochs of ``--steps`` steps on one batch of random images repeated (the same
dataset for all four); the first epoch (tracing, XLA, tuning) is warm-up, the second is timed
by a callback at its begin and end, with NVML's GPU busy sampled every 20 ms over it.

Anchor: NVIDIA's DeepLearningExamples ResNet-50 v1.5 for TensorFlow, one A100 40GB, batch 256:
909 img/s TF32+XLA, 2,375 img/s mixed precision+XLA.

Run: .venv/bin/python bench/resnet_bench.py [--steps 50] [--small] [--variants a,b]
(``--small``: 32x32 images, 10 classes, batch 8, 3 steps, to check the script on a CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

VARIANTS = ("keras fit default", "keras fit expert", "tfgpu.fit default", "tfgpu.fit tune=all")
BARE = "bare fp32 loop"  # ``--model cnn`` only: the in-graph loop of ``_loops.bare_loop``
ANCHOR_BEST = 2375.0  # img/s, A100 40GB, mixed precision + XLA (DeepLearningExamples)


def one_variant(variant: str, *, steps: int, small: bool, model_name: str = "resnet50") -> dict[str, Any]:
    """Images/s and GPU busy of ``variant``'s second epoch, in this process."""
    if model_name == "cnn":
        return cnn_variant(variant, steps=steps, small=small)
    import tfgpu

    tfgpu.configure(memory_growth=True)
    import keras
    import numpy as np
    import tensorflow as tf

    size, classes, batch = (32, 10, 8) if small else (224, 1000, 256)
    if variant == "keras fit expert":
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    keras.utils.set_random_seed(0)
    model = keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classes=classes)
    compile_args: dict[str, Any] = {}
    if variant == "keras fit expert":
        compile_args = {"jit_compile": True, "steps_per_execution": 50}
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy", **compile_args)
    rng = np.random.default_rng(0)
    images = rng.random((batch, size, size, 3), dtype=np.float32)
    labels = rng.integers(0, classes, (batch,)).astype("int64")
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat(steps).prefetch(tf.data.AUTOTUNE)
    gpus = tf.config.list_logical_devices("GPU")
    return {
        **timed_fit(variant, model, dataset, images=steps * batch),
        "device": gpus[0].name if gpus else "cpu",
    }


def timed_fit(variant: str, model: Any, dataset: Any, *, images: int) -> dict[str, Any]:
    """Two epochs of ``variant``'s fit (Keras's or tfgpu's) on ``dataset``: the second's
    images/s and GPU busy, and the first's seconds (warm-up: tracing, XLA, tuning)."""
    import tfgpu
    from tfgpu.monitor import Monitor

    timer = EpochTimer(Monitor(interval_s=0.02))
    started = time.perf_counter()
    if variant.startswith("keras"):
        model.fit(dataset, epochs=2, verbose=0, callbacks=[timer])
    else:
        tune = "all" if variant.endswith("tune=all") else None
        tfgpu.fit(model, dataset, epochs=2, verbose=0, callbacks=[timer], tune=tune)
    return {
        "variant": variant,
        "images_per_s": round(images / timer.seconds, 1),
        "gpu_busy_%": timer.busy,
        "warm_up_s": round(timer.first_end - started, 1),
    }


def cnn_variant(variant: str, *, steps: int, small: bool) -> dict[str, Any]:
    """``gpu_bench``'s CNN (64x64x3, batch 256, Adam, logits) the same ways, plus the bare fp32
    in-graph loop, on one ``tf.data`` input of 8,192 images repeated: issue 54's CNN goals
    (``tune="all"`` >= 1.5x the bare fp32 loop; tfgpu's defaults >= Keras's, XLA on)."""
    import tfgpu

    tfgpu.configure(memory_growth=True)
    import keras
    import tensorflow as tf
    from _loops import bare_loop
    from gpu_bench import arrays, cnn

    from tfgpu.monitor import Monitor

    size, width, batch, rows = (16, 8, 32, 256) if small else (64, 64, 256, 8192)
    build = cnn(size, width)
    x, y = arrays(rows, (size, size, 3))
    keras.utils.set_random_seed(0)
    if variant == BARE:
        epochs = max(1, steps * batch // rows)
        run = bare_loop(build, batch, x, y, epochs=epochs)
        started = time.perf_counter()
        run()
        warm_up = time.perf_counter() - started
        monitor = Monitor(interval_s=0.02)
        monitor.start()
        started = time.perf_counter()
        done = run()
        seconds = time.perf_counter() - started
        monitor.stop()
        return {
            "variant": variant,
            "images_per_s": round(done / seconds, 1),
            "gpu_busy_%": monitor.mean_utilization(),
            "warm_up_s": round(warm_up, 1),
        }
    if variant == "keras fit expert":
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = build()
    compile_args: dict[str, Any] = {}
    if variant == "keras fit expert":
        compile_args = {"jit_compile": True, "steps_per_execution": 50}
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        **compile_args,
    )
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .batch(batch, drop_remainder=True)
        .repeat()
        .take(steps)
        .prefetch(tf.data.AUTOTUNE)
    )
    return timed_fit(variant, model, dataset, images=steps * batch)


class EpochTimer:
    """A Keras callback: the seconds of the second epoch, and the GPU's mean busy % over it."""

    def __new__(cls, monitor: Any) -> Any:
        import keras

        class _Timer(keras.callbacks.Callback):
            def __init__(self) -> None:
                super().__init__()
                self.monitor, self.seconds, self.busy, self.first_end, self._start = (
                    monitor,
                    0.0,
                    None,
                    0.0,
                    0.0,
                )

            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                if epoch == 1:
                    self.monitor.start()
                    self._start = time.perf_counter()

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                if epoch == 0:
                    self.first_end = time.perf_counter()
                if epoch == 1:
                    self.seconds = time.perf_counter() - self._start
                    self.monitor.stop()
                    self.busy = self.monitor.mean_utilization()

        return _Timer()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50, help="steps per epoch (the second is timed)")
    parser.add_argument("--small", action="store_true", help="tiny sizes, to check the script on a CPU")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--timeout", type=int, default=240, help="seconds per variant")
    parser.add_argument(
        "--model",
        choices=("resnet50", "cnn"),
        default="resnet50",
        help="cnn: gpu_bench's, with the bare loop",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if args.child:
        print(json.dumps(one_variant(args.child, steps=args.steps, small=args.small, model_name=args.model)))
        return
    from _common import save, table

    rows = []
    chosen = args.variants.split(",")
    if args.model == "cnn" and BARE not in chosen:
        chosen.insert(0, BARE)  # first: every other row's ratio needs it
    for variant in chosen:
        command = [
            sys.executable,
            __file__,
            "--child",
            variant,
            "--steps",
            str(args.steps),
            "--model",
            args.model,
        ]
        try:
            done = subprocess.run(
                command + (["--small"] if args.small else []),
                capture_output=True,
                text=True,
                timeout=args.timeout,
            )
        except subprocess.TimeoutExpired as late:
            # what the child printed before its time ran out (always bytes here): why it was slow
            said = (late.stderr or b"").decode(errors="replace").strip()
            rows.append({"variant": variant, "images_per_s": None, "note": f"over {args.timeout} s"})
            print(f"{variant}: over {args.timeout} s; its output's end:\n{said[-3000:]}", flush=True)
            continue
        if done.returncode:
            rows.append({"variant": variant, "images_per_s": None, "note": done.stderr.strip()[-300:]})
            print(f"{variant}: exit status {done.returncode}:\n{done.stderr.strip()[-3000:]}", flush=True)
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)  # each as it ends: a run cut short keeps what it had
    rates = {r["variant"]: r.get("images_per_s") for r in rows}
    for row in rows:
        expert, default = rates.get("keras fit expert"), rates.get("keras fit default")
        rate = row.get("images_per_s")
        row["vs_keras_default"] = round(rate / default, 3) if rate and default else None
        row["vs_keras_expert"] = round(rate / expert, 3) if rate and expert else None
        row["vs_a100_anchor"] = round(rate / ANCHOR_BEST, 3) if rate and args.model == "resnet50" else None
        bare = rates.get(BARE)
        row["vs_bare"] = round(rate / bare, 3) if rate and bare else None
    what = "ResNet-50 224x224x3" if args.model == "resnet50" else "CNN 64x64x3"
    title = f"{what} ({'small sizes' if args.small else 'batch 256'}), second epoch of {args.steps} steps"
    columns = ["variant", "images_per_s", "gpu_busy_%", "warm_up_s", "vs_keras_default", "vs_keras_expert"]
    extra = ["vs_a100_anchor"] if args.model == "resnet50" else ["vs_bare"]
    print(table(title, rows, [*columns, *extra]))
    for row in rows:
        if row.get("note"):
            print(f"{row['variant']}: {row['note']}")
    print(
        f"\nwrote {save(f'resnet_bench_{args.model}', {'small': args.small, 'steps': args.steps, 'runs': rows})}"
    )


if __name__ == "__main__":
    main()

"""``tfgpu demo``: the whole tool on a built-in example workload, on any machine.

1. doctor; 2. generate (once, cached) a small JPEG image-classification dataset with a learnable
pattern per class and convert it with ``tfgpu convert``; 3. diagnose a naive pipeline and
``tfgpu.data.pipeline`` against the real model step; 4. tune (``tune=True``: steps per call,
input options, XLA, measured before and after) and train with ``tfgpu.Trainer`` on the strategy
tfgpu picks (2 logical CPU devices on a CPU machine, so the distributed path runs);
5. predict the held-out split with ``tfgpu predict`` and check the accuracy is well above chance;
6. write one HTML report.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tfgpu import choices, doctor, nvml, runtime

log = logging.getLogger(__name__)

CLASSES = ("stripes", "rings", "checks", "dots")
SIZE = 48
TRAIN_PER_CLASS, HELDOUT_PER_CLASS = 150, 40
BATCH_PER_REPLICA = 32
TUNE_S = 8.0  # the demo's tuning budget (tune=True's default is 20-60 s; the demo is a tour)
STEADY_S = 6.0  # seconds of steady-state training the demo asks for (at the rate diagnose measured)
MIN_EPOCHS, MAX_EPOCHS = 4, 40


@dataclass
class DemoResult:
    doctor: doctor.DoctorReport
    workdir: str
    choices: dict[str, dict[str, str]] = field(default_factory=dict)
    diagnose: dict[str, dict[str, Any]] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    prediction: dict[str, Any] = field(default_factory=dict)
    accuracy: float = 0.0
    report: str | None = None
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)  # images, generated or reused; shards
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase
    agreement: str = ""  # training's steady state against diagnose of the same pipeline

    @property
    def ok(self) -> bool:
        return self.accuracy >= 0.6  # chance is 0.25

    def to_dict(self, *, full: bool = False) -> dict[str, Any]:
        """The summary; ``full`` keeps the per-step timelines the report plots."""

        def slim(d: dict[str, Any]) -> dict[str, Any]:
            return d if full else {k: v for k, v in d.items() if k not in ("timeline", "applied")}

        return {
            "ok": self.ok,
            "accuracy": round(self.accuracy, 4),
            "chance": 1 / len(CLASSES),
            "workdir": self.workdir,
            "report": self.report,
            "data": self.data,
            "phases": self.phases,
            "seconds": round(self.seconds, 1),
            "choices": self.choices,
            "diagnose": {k: slim(v) for k, v in self.diagnose.items()},
            "training": slim(self.training),
            "agreement": self.agreement,
            "prediction": self.prediction,
            "doctor": self.doctor.to_dict(),
        }


def _pattern(kind: int, rng: np.random.Generator) -> np.ndarray:
    y, x = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    phase, freq = rng.uniform(0, 2 * np.pi), rng.uniform(0.35, 0.6)
    cx, cy = rng.uniform(12, 36, size=2)
    waves = [
        np.sin(freq * x + phase),
        np.sin(freq * np.hypot(x - cx, y - cy) + phase),
        np.sign(np.sin(freq * x + phase) * np.sin(freq * y + phase)),
        np.cos(freq * 2 * x) * np.cos(freq * 2 * y),
    ]
    base = 127 + 90 * waves[kind]
    color = rng.uniform(0.6, 1.0, size=3)
    image = base[..., None] * color + rng.normal(0, 20, (SIZE, SIZE, 3))
    return np.clip(image, 0, 255).astype(np.uint8)


def make_images(root: Path) -> bool:
    """JPEG files, one folder per class, for a training and a held-out split; False when they were
    already there."""
    from PIL import Image

    if (root / "done").exists():
        return False
    rng = np.random.default_rng(0)
    for split, count in (("train", TRAIN_PER_CLASS), ("heldout", HELDOUT_PER_CLASS)):
        for label, name in enumerate(CLASSES):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                Image.fromarray(_pattern(label, rng)).save(folder / f"{i:04d}.jpg", quality=90)
    (root / "done").write_text("ok")
    return True


def build_model() -> Any:
    import keras

    inputs = keras.Input((SIZE, SIZE, 3), dtype="uint8", name="image")
    x = keras.layers.Rescaling(1 / 255.0)(inputs)
    for width in (16, 32):
        x = keras.layers.Conv2D(width, 3, activation="relu", padding="same")(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(len(CLASSES), dtype="float32")(x)
    return keras.Model(inputs, outputs, name="demo_cnn")


def _naive(source: Path, *, batch_size: int) -> Any:
    """What many first pipelines look like: files listed, decoded one by one, no prefetch."""
    import tensorflow as tf

    files = sorted(str(p) for p in source.rglob("*.jpg"))
    labels = np.array([CLASSES.index(Path(f).parent.name) for f in files], np.int64)  # as the pipeline

    def load(path: Any, label: Any) -> Any:
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        image = tf.image.random_flip_left_right(image)  # random: TensorFlow keeps this map sequential
        return tf.ensure_shape(image, (SIZE, SIZE, 3)), label

    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    return (
        tf.data.Dataset.from_tensor_slices((files, labels)).map(load).batch(batch_size).with_options(options)
    )


def flip(e: dict[str, Any]) -> dict[str, Any]:
    """The demo's augmentation (random, so TensorFlow keeps a map of it sequential)."""
    import tensorflow as tf

    return {**e, "image": tf.image.random_flip_left_right(e["image"])}


def task(work: Path, *, batch_size: int = BATCH_PER_REPLICA, callbacks: tuple[Any, ...] = ()) -> Any:
    """What the demo trains: its CNN on the converted shards, ``batch_size`` per replica."""
    from tfgpu import data
    from tfgpu.train import Task

    return Task(
        callbacks=callbacks,
        model=build_model,
        loss="sparse_categorical_crossentropy",
        from_logits=True,
        train_data=str(work / "train"),
        eval_data=str(work / "heldout"),
        metrics=["accuracy"],
        batch_size=batch_size,
        learning_rate=3e-3,
        pipeline=data.PipelineOptions(augment=flip),
    )


def diagnoses(work: Path, trainer: Any, *, progress: Progress | None = None) -> dict[str, dict[str, Any]]:
    """The naive pipeline and ``tfgpu.data.pipeline`` diagnosed against ``trainer``'s own model,
    strategy and global batch: diagnose times the very step training runs (the model's weights
    are put back afterwards), and the two diagnoses share one measurement of that step."""
    from tfgpu import data
    from tfgpu.diagnose import diagnose

    batch = trainer.global_batch
    pipelines = {
        "naive pipeline": lambda: _naive(work / "images" / "train", batch_size=batch),
        "tfgpu.data.pipeline": lambda: data.pipeline(
            work / "train", batch_size=batch, training=True, augment=flip, supervised=True
        ),
    }
    found = {}
    for i, (name, build) in enumerate(pipelines.items()):
        found[name] = diagnose(build(), model=trainer.model, steps=15, warmup=3).to_dict()
        if progress is not None:
            progress("diagnose", i + 1, len(pipelines))
    return found


def epochs_for(rate: float, *, examples_per_epoch: int) -> tuple[int, str]:
    """Epochs for about STEADY_S seconds of steady state at ``rate`` (examples/s, as diagnose
    measured it), plus the first epoch, which fills the pipeline's cache; and why."""
    steady = math.ceil(STEADY_S * rate / examples_per_epoch)
    epochs = max(MIN_EPOCHS, min(MAX_EPOCHS, 1 + steady))
    return epochs, (
        f"about {STEADY_S:g} s of steady state at the {rate:,.0f} examples/s diagnose measured, "
        f"after epoch 1 fills the cache ({MIN_EPOCHS}-{MAX_EPOCHS})"
    )


def agreement(diagnosed: dict[str, Any], trained: dict[str, Any], *, steps_per_call: int) -> str:
    """Whether training's steady state and diagnose of the same pipeline (the same model, step and
    strategy) tell one story, and if not, what set the two runs apart."""
    if not trained.get("steady"):
        return "training had no steady state to compare with diagnose (too short a run)"
    said = (
        f"diagnose {diagnosed['input_bound']} input-bound ({diagnosed['input_wait_fraction']:.0%} waiting), "
        f"training's steady state {trained['input_bound']} input-bound "
        f"({trained['input_wait_fraction']:.0%} waiting)"
    )
    if (diagnosed["input_bound"] == "no") == (trained["input_bound"] == "no"):
        return f"agree: {said}"
    return (
        f"differ: {said}; diagnose ran one step per compiled call, training {steps_per_call} per call "
        f"over {trained['steady']['steps']} steps"
    )


Progress = Callable[[str, int, int], None]  # (phase, done, total): total 0 while unknown


def run_demo(
    *,
    workdir: str = "tfgpu-demo",
    report: str = "tfgpu-report.html",
    epochs: int | None = None,
    progress: Progress | None = None,
) -> DemoResult:
    """Run every stage; see the module docstring. ``epochs``: None chooses them from the rate
    diagnose measures (``epochs_for``). ``progress(phase, done, total)`` is called as each phase
    starts (0, 0) and as its work advances (rows converted, pipelines diagnosed, epochs trained,
    rows predicted): the demo ran 82-118 s silent on a terminal, then printed everything."""
    started = time.perf_counter()
    report_progress: Progress = progress or (lambda phase, done, total: None)
    has_gpu = bool(nvml.probe().gpus)
    runtime.configure(logical_cpus=None if has_gpu else 2, precision="auto", seed=0)
    if not has_gpu:
        choices.record("devices", "2 logical CPU devices", "no GPU: exercise the distributed path")
    phases: dict[str, float] = {}
    clock = _Clock(phases, report_progress)
    with clock("doctor"):
        report_doctor = doctor.run()
    work = Path(workdir)

    from tfgpu import data
    from tfgpu.predict import PredictOptions, predict, read_output
    from tfgpu.train import Trainer

    with clock("data"):
        generated = make_images(work / "images")
        options = data.ConvertOptions(min_shards=8, resize=(SIZE, SIZE))  # a fixed shape in the manifest
        rows = (TRAIN_PER_CLASS + HELDOUT_PER_CLASS) * len(CLASSES)
        converted = [
            data.convert(
                work / "images" / "train",
                work / "train",
                options=options,
                on_progress=lambda done, total: report_progress("data", done, rows),
            ),
            data.convert(
                work / "images" / "heldout",
                work / "heldout",
                options=data.ConvertOptions(min_shards=4, image_format="raw"),
                on_progress=lambda done, total: report_progress(
                    "data", TRAIN_PER_CLASS * len(CLASSES) + done, rows
                ),
            ),
        ]
    dataset = {
        "images": (TRAIN_PER_CLASS + HELDOUT_PER_CLASS) * len(CLASSES),
        "images_generated": generated,
        "shards": sum(c.shards_written + c.shards_reused for c in converted),
        "shards_reused": sum(c.shards_reused for c in converted),
    }

    clock.start("diagnose")
    from tfgpu.train.tuning import TuneOptions

    # a log point every 4 steps gives the report its curves; the tuning measured afresh each run
    trainer = Trainer(
        task(work, callbacks=(_epoch_progress(report_progress),)),
        log_every=4,
        tune=TuneOptions(budget_s=TUNE_S, keep=False),
    )
    found = diagnoses(work, trainer, progress=report_progress)
    if epochs is None:
        epochs, why = epochs_for(
            found["tfgpu.data.pipeline"]["together_examples_per_s"],
            examples_per_epoch=TRAIN_PER_CLASS * len(CLASSES),
        )
        choices.record("demo.epochs", str(epochs), why)
    clock.start("tune")
    trainer.tune(epochs=epochs)
    clock.start("train")
    trained = trainer.fit(epochs=epochs)
    model_path = work / "model.keras"
    trainer.model.save(model_path)
    clock.start("predict")
    predicted = predict(
        str(model_path),
        str(work / "heldout"),
        output=str(work / "predictions"),
        options=PredictOptions(batch_size=64),
        overwrite=True,  # the model was trained again: its old predictions go
        on_progress=lambda done, total: report_progress("predict", done, total),
    )
    logits = next(v for k, v in read_output(work / "predictions").items() if k != "row_id")
    labels = np.concatenate([b["label"].numpy() for b in data.pipeline(work / "heldout", batch_size=256)])
    accuracy = float(np.mean(np.argmax(logits, axis=-1) == labels))
    clock.start("report")
    result = DemoResult(
        doctor=report_doctor,
        workdir=str(work),
        choices=choices.as_dict(),
        diagnose=found,
        training=trained.to_dict(),
        agreement=agreement(
            found["tfgpu.data.pipeline"], trained.to_dict(), steps_per_call=trainer.options.execution_steps
        ),
        prediction=predicted.to_dict(),
        accuracy=accuracy,
        data=dataset,
        phases=phases,
    )
    from tfgpu.report.runs import save_run, write_report

    save_run(work, "demo", result.to_dict(full=True))
    result.report = str(write_report(work, report))
    clock.stop()
    result.seconds = time.perf_counter() - started
    return result


class _Clock:
    """Seconds per phase: ``with clock(name)`` or ``clock.start(name)`` until the next one; each
    start is reported as progress (0, 0)."""

    def __init__(self, phases: dict[str, float], progress: Progress) -> None:
        self.phases, self.progress = phases, progress
        self._current: tuple[str, float] | None = None

    def start(self, name: str) -> None:
        self.stop()
        self._current = (name, time.perf_counter())
        self.progress(name, 0, 0)

    def stop(self) -> None:
        if self._current is not None:
            name, began = self._current
            self.phases[name] = round(time.perf_counter() - began, 2)
            self._current = None

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.start(name)
        try:
            yield
        finally:
            self.stop()


def _epoch_progress_type() -> type:
    import keras

    class EpochProgress(keras.callbacks.Callback):
        """Training's epochs as progress ("train", epoch, epochs)."""

        def __init__(self, progress: Progress) -> None:
            super().__init__()
            self.report = progress

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.report("train", epoch + 1, int(self.params.get("epochs") or 0))

    return EpochProgress


def _epoch_progress(progress: Progress) -> Any:
    return _epoch_progress_type()(progress)

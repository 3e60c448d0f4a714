"""Input-pipeline benchmark (issue 3): examples/s, median of 5, on workloads generated here.

Image workload: JPEG images, decode + resize to 224x224 + random flip.
  naive        list files, sequential map, batch, no prefetch
  recipe       the common recipe: map(AUTOTUNE), shuffle, batch, prefetch
  tfgpu        tfgpu.data.pipeline on the converted dataset (same JPEGs; decode+resize+flip each epoch)
  limit        the machine's limit: cores / single-thread CPU seconds per example of the same work
               (median over the same interleaved rounds)
  pre-resized  tfgpu.data.pipeline on a dataset converted with --resize 224x224 --image-format raw
  cache        tfgpu.data.pipeline with cache="memory": first epoch vs second epoch
Feature table: 20,000 rows x 100 float features; vectorized parse (tfgpu) vs per-record parse.

Run: make bench-data   (or .venv/bin/python bench/data_bench.py [--images 960] [--repeats 5])
Variants are timed in interleaved rounds, so drift on a shared machine hits them alike.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from _common import interleaved_rates, save, table
from PIL import Image

from tfgpu import data, host

SIZE = (224, 224)
BATCH = 32


def make_images(root: Path, count: int) -> None:
    rng = np.random.default_rng(0)
    for label in range(4):
        (root / f"class{label}").mkdir(parents=True)
    y, x = np.mgrid[0:320, 0:400]
    for i in range(count):
        label = i % 4
        base = (np.sin(x / (8 + 4 * label)) + np.cos(y / (10 + 3 * label))) * 60 + 128
        pixels = np.stack([base, np.roll(base, i, axis=1), base[::-1]], axis=-1)
        pixels = np.clip(pixels + rng.normal(0, 12, pixels.shape), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(root / f"class{label}" / f"{i:05d}.jpg", quality=90)


def decode_resize(path: tf.Tensor) -> tf.Tensor:
    image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
    return tf.cast(tf.image.resize(image, SIZE), tf.uint8)


def flip(image: tf.Tensor) -> tf.Tensor:
    return tf.image.random_flip_left_right(image)


def naive(files: list[str]) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices(files).map(lambda p: flip(decode_resize(p)))
    options = tf.data.Options()
    options.autotune.enabled = False
    options.experimental_optimization.map_parallelization = False
    return ds.batch(BATCH).with_options(options)


def recipe(files: list[str]) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices(files).map(
        lambda p: flip(decode_resize(p)), num_parallel_calls=tf.data.AUTOTUNE
    )
    return ds.shuffle(1024).batch(BATCH).prefetch(tf.data.AUTOTUNE)


def count(ds: tf.data.Dataset) -> int:
    n = 0
    for batch in ds:
        first = batch["image"] if isinstance(batch, dict) else batch
        n += int(first.shape[0])
    return n


def single_thread(files: list[str]) -> tf.data.Dataset:
    """The same work as the recipe on one thread: its CPU seconds per example set the limit."""
    ds = tf.data.Dataset.from_tensor_slices(files).map(lambda p: flip(decode_resize(p)))
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    options.autotune.enabled = False
    return ds.with_options(options).batch(BATCH)


def cpu_timed(make: Callable[[], tf.data.Dataset], seconds: list[float]) -> Callable[[], int]:
    """A variant for interleaved_rates that also records CPU seconds per example of each run."""

    def run() -> int:
        cpu = time.process_time()
        n = count(make())
        seconds.append((time.process_time() - cpu) / n)
        return n

    return run


def image_bench(work: Path, images: int, repeats: int) -> list[dict]:
    source = work / "jpeg"
    make_images(source, images)
    files = sorted(str(p) for p in source.rglob("*.jpg"))
    data.convert(
        source, work / "converted", options=data.ConvertOptions(min_shards=16, workers=os.cpu_count())
    )
    data.convert(
        source,
        work / "resized",
        options=data.ConvertOptions(min_shards=16, resize=SIZE, image_format="raw", workers=os.cpu_count()),
    )

    def augment(e: dict) -> dict:
        return {**e, "image": flip(e["image"])}

    tfgpu_ds = data.pipeline(
        work / "converted", batch_size=BATCH, training=True, image_size=SIZE, augment=augment, cache="off"
    )
    resized_ds = data.pipeline(
        work / "resized", batch_size=BATCH, training=True, augment=augment, cache="off"
    )
    single: list[float] = []
    rates = interleaved_rates(
        {
            "naive": lambda: count(naive(files)),
            "recipe": lambda: count(recipe(files)),
            "tfgpu": lambda: count(tfgpu_ds),
            "pre-resized": lambda: count(resized_ds),
            "single-thread": cpu_timed(lambda: single_thread(files), single),
        },
        rounds=repeats,
    )
    # the limit, like the rates, is a median over the same interleaved rounds (warm-up left out)
    cpu_s = float(np.median(single[-repeats:]))
    limit = host.cores() / cpu_s
    first, second = [], []
    for _ in range(repeats):
        cached = data.pipeline(
            work / "converted",
            batch_size=BATCH,
            training=True,
            image_size=SIZE,
            augment=augment,
            cache="memory",
        )
        for times in (first, second):
            start = time.perf_counter()
            n = count(cached)
            times.append(n / (time.perf_counter() - start))
    rows = [
        {
            "pipeline": "naive (sequential map, no prefetch)",
            "examples_per_s": rates["naive"]["median"],
            "ratio": 1.0,
        },
        {
            "pipeline": "common recipe (AUTOTUNE map, shuffle, batch, prefetch)",
            "examples_per_s": rates["recipe"]["median"],
        },
        {
            "pipeline": "tfgpu.data.pipeline (JPEG, decode+resize each epoch)",
            "examples_per_s": rates["tfgpu"]["median"],
        },
        {
            "pipeline": f"machine limit ({host.cores()} cores / {cpu_s * 1000:.2f} ms CPU per example)",
            "examples_per_s": limit,
        },
        {
            "pipeline": "tfgpu.data.pipeline, converted --resize 224x224 --image-format raw",
            "examples_per_s": rates["pre-resized"]["median"],
        },
        {"pipeline": "tfgpu.data.pipeline cache=memory, epoch 1", "examples_per_s": float(np.median(first))},
        {"pipeline": "tfgpu.data.pipeline cache=memory, epoch 2", "examples_per_s": float(np.median(second))},
    ]
    for row in rows:
        row["ratio"] = row["examples_per_s"] / rates["naive"]["median"]
    goals = [
        ("tfgpu >= 0.9 x machine limit", rates["tfgpu"]["median"] / limit, 0.9),
        ("tfgpu >= 1.0 x common recipe", rates["tfgpu"]["median"] / rates["recipe"]["median"], 1.0),
        (
            "pre-resized >= 3 x naive on raw JPEGs",
            rates["pre-resized"]["median"] / rates["naive"]["median"],
            3.0,
        ),
        ("cache: epoch 2 >= 5 x epoch 1", float(np.median(second)) / float(np.median(first)), 5.0),
    ]
    return rows, goals


def table_bench(work: Path, repeats: int) -> tuple[list[dict], list[tuple]]:
    rng = np.random.default_rng(1)
    columns = {f"f{i:03d}": rng.normal(size=20_000).astype("float32") for i in range(100)}
    np.savez(work / "table.npz", **columns)
    data.convert(work / "table.npz", work / "table", options=data.ConvertOptions(min_shards=8, workers=1))
    manifest = data.load(work / "table")
    spec = {name: tf.io.FixedLenFeature([], tf.float32) for name in columns}
    per_record = (
        tf.data.TFRecordDataset(manifest.files())
        .map(lambda r: tf.io.parse_single_example(r, spec), num_parallel_calls=tf.data.AUTOTUNE)
        .batch(256)
        .prefetch(tf.data.AUTOTUNE)
    )
    vectorized = data.pipeline(work / "table", batch_size=256, cache="off")
    rates = interleaved_rates(
        {
            "per-record": lambda: sum(int(b["f000"].shape[0]) for b in per_record),
            "vectorized": lambda: sum(int(b["f000"].shape[0]) for b in vectorized),
        },
        rounds=repeats,
    )
    rows = [
        {
            "pipeline": "per-record parse_single_example, AUTOTUNE map",
            "examples_per_s": rates["per-record"]["median"],
            "ratio": 1.0,
        },
        {
            "pipeline": "tfgpu.data.pipeline (batch-then-parse)",
            "examples_per_s": rates["vectorized"]["median"],
            "ratio": rates["vectorized"]["median"] / rates["per-record"]["median"],
        },
    ]
    return rows, [("vectorized >= 3 x per-record", rows[1]["ratio"], 3.0)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=3840)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tfgpu-bench-"))
    try:
        image_rows, image_goals = image_bench(work, args.images, args.repeats)
        table_rows, table_goals = table_bench(work, args.repeats)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        table(
            f"Images: {args.images} JPEGs 320x400 -> 224x224 + flip, batch {BATCH} (examples/s, median of {args.repeats})",
            image_rows,
            ["pipeline", "examples_per_s", "ratio"],
        )
    )
    print()
    print(
        table(
            "Feature table: 20,000 rows x 100 float32 features, batch 256",
            table_rows,
            ["pipeline", "examples_per_s", "ratio"],
        )
    )
    print()
    goal_rows = [
        {"goal": g, "measured": m, "target": t, "met": "yes" if m >= t else "NO"}
        for g, m, t in image_goals + table_goals
    ]
    print(table("Goals", goal_rows, ["goal", "measured", "target", "met"]))
    path = save("data_bench", {"images": image_rows, "table": table_rows, "goals": goal_rows})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()

"""Workloads whose bottleneck is known, for tests, ``bench/diagnose_bench.py`` and the docs.

Each builds a batched dataset and names the device side, the verdict it must get and the advice
kind that must come first. CPU work is real (TensorFlow ops that burn CPU), so the measured CPU
seconds per example and the parallel speedups are real too; only the device is simulated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

BATCH = 32


@dataclass(frozen=True)
class Workload:
    name: str
    build: Callable[[], Any]  # -> batched tf.data.Dataset
    expected_input_bound: tuple[str, ...]  # acceptable verdicts
    expected_advice: tuple[str, ...]  # acceptable top advice kinds
    step_time_s: float | None = None
    target_rate: float | None = None
    model: Callable[[], Any] | None = None
    description: str = ""
    fixed: Callable[[], Any] | None = None  # the pipeline after following the top advice


def _burn(x: Any, rounds: int) -> Any:
    import tensorflow as tf

    v = tf.fill([512], tf.cast(x, tf.float32) * 1e-3)
    for _ in range(rounds):
        v = tf.sin(v) + 1.0
    return v[:16]


def _parallel_batches(ds: Any, work: Any, batch: int = BATCH) -> Any:
    """The well-built tail: map in parallel, batch, prefetch."""
    import tensorflow as tf

    return ds.map(work, num_parallel_calls=tf.data.AUTOTUNE).batch(batch).prefetch(tf.data.AUTOTUNE)


def _jpegs() -> list[bytes]:
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    return [tf.io.encode_jpeg(rng.integers(0, 255, (240, 320, 3), dtype=np.uint8)).numpy() for _ in range(64)]


def _decode(data: Any) -> Any:
    import tensorflow as tf

    return tf.cast(tf.image.resize(tf.io.decode_jpeg(data, channels=3), (160, 160)), tf.uint8)


def sequential_map() -> Any:
    import tensorflow as tf

    def work(x: Any) -> Any:  # random jitter makes it stateful: TensorFlow will not parallelize it
        return _burn(tf.cast(x, tf.float32) + tf.random.uniform([], 0.0, 1e-3), 800)

    return tf.data.Dataset.range(100_000).map(work).batch(BATCH).prefetch(tf.data.AUTOTUNE)


def no_prefetch() -> Any:
    """A sequential (stateful) per-batch stage last and no prefetch: input and device take turns."""
    import tensorflow as tf

    def work(x: Any) -> Any:
        return _burn(x, 20)

    def per_batch(v: Any) -> Any:  # random jitter: stateful, so it stays on the consumer's side
        v = tf.tile(v, [1, 32]) + tf.random.uniform([], 0.0, 1e-3)
        for _ in range(500):
            v = tf.sin(v) + 1.0
        return v[:, :16]

    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False  # as with autotuning off, or TF < 2.11
    ds = (
        tf.data.Dataset.range(100_000)
        .map(work, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(BATCH)
        .map(per_batch)
    )
    return ds.with_options(options)


def python_function() -> Any:
    import numpy as np
    import tensorflow as tf

    def numpy_work(x: Any) -> Any:
        total = 0.0
        for i in range(6000):  # pure Python: holds the GIL, so parallel calls cannot help
            total += (i % 7) * 1e-3
        return np.full(16, total + float(x) * 1e-6, dtype=np.float32)

    def work(x: Any) -> Any:
        out = tf.numpy_function(numpy_work, [x], tf.float32)
        return tf.ensure_shape(out, [16])

    return _parallel_batches(tf.data.Dataset.range(100_000), work)


def repeated_decode() -> Any:
    """A small image set decoded and resized every epoch: a cache after the decode pays off."""
    import tensorflow as tf

    return _parallel_batches(tf.data.Dataset.from_tensor_slices(_jpegs()).repeat(1000), _decode)


def tiny_ops() -> Any:
    """Many tiny per-element ops: per-call overhead dominates; vectorizing (batch first) pays."""
    import tensorflow as tf

    def small(x: Any) -> Any:
        v = tf.cast(x, tf.float32)
        return tf.stack([v * 2.0 + 1.0, tf.sqrt(v + 1.0), v * v])

    return (
        tf.data.Dataset.range(10_000_000)
        .map(small, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(256)
        .prefetch(tf.data.AUTOTUNE)
    )


def python_function_fixed() -> Any:
    """The same values from TensorFlow ops: no GIL, so the map runs in parallel."""
    import tensorflow as tf

    total = sum((i % 7) * 1e-3 for i in range(6000))

    def work(x: Any) -> Any:
        return tf.fill([16], tf.cast(total, tf.float32) + tf.cast(x, tf.float32) * 1e-6)

    return _parallel_batches(tf.data.Dataset.range(100_000), work)


def repeated_decode_fixed() -> Any:
    """Decode once, cache, then repeat."""
    import tensorflow as tf

    ds = (
        tf.data.Dataset.from_tensor_slices(_jpegs())
        .map(_decode, num_parallel_calls=tf.data.AUTOTUNE)
        .cache()
        .repeat(1000)
    )
    return ds.batch(BATCH).prefetch(tf.data.AUTOTUNE)


def tiny_ops_fixed() -> Any:
    """Batch first, then the same ops on whole batches."""
    import tensorflow as tf

    def small(x: Any) -> Any:
        v = tf.cast(x, tf.float32)
        return tf.stack([v * 2.0 + 1.0, tf.sqrt(v + 1.0), v * v], axis=-1)

    return (
        tf.data.Dataset.range(10_000_000)
        .batch(256)
        .map(small, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )


def in_memory() -> Any:
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.normal(size=(4096, 8)).astype("float32")
    y = rng.integers(0, 2, 4096)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(8).prefetch(tf.data.AUTOTUNE)


def tiny_model() -> Any:
    import keras

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def fixed_cost_model() -> Any:
    """A step whose time does not grow with the batch and is not host dispatch: a fixed-size
    matrix product in the graph (on a variable, so it is not folded away) that every step pays."""
    import keras
    import tensorflow as tf

    class FixedCost(keras.layers.Layer):
        def build(self, input_shape: Any) -> None:
            self.matrix = self.add_weight(shape=(768, 768), initializer="ones", trainable=False)

        def call(self, x: Any) -> Any:
            product = tf.linalg.matmul(self.matrix, self.matrix)
            product = tf.linalg.matmul(product, self.matrix)
            return x + 0.0 * tf.reduce_mean(product)

    model = keras.Sequential([keras.Input((8,)), FixedCost(), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def needs_more_cores() -> Any:
    """Already parallel, no cacheable work (random per epoch); the device wants more than the cores give."""
    import tensorflow as tf

    def work(x: Any) -> Any:
        noise = tf.random.uniform([], 0.0, 1.0)
        return _burn(tf.cast(x, tf.float32) + noise, 250)

    return _parallel_batches(tf.data.Dataset.range(100_000), work)


def well_tuned() -> Any:
    import tensorflow as tf

    def work(x: Any) -> Any:
        return _burn(x, 20)

    return _parallel_batches(tf.data.Dataset.range(100_000), work)


def unknown_shapes() -> Any:
    """A cheap tf.numpy_function: TensorFlow knows neither the shape nor the rank of its output."""
    import numpy as np
    import tensorflow as tf

    def row(i: Any) -> Any:
        return tf.numpy_function(lambda v: (np.ones(8) * v).astype(np.float32), [i], tf.float32)

    return tf.data.Dataset.range(100_000).map(row).batch(BATCH).prefetch(tf.data.AUTOTUNE)


WORKLOADS: tuple[Workload, ...] = (
    Workload(
        "sequential-map",
        sequential_map,
        ("moderately", "highly"),
        ("parallelize-map",),
        step_time_s=0.009,
        description="800-round CPU map without num_parallel_calls; device 9 ms/batch",
    ),
    Workload(
        "no-prefetch",
        no_prefetch,
        ("moderately", "highly"),
        ("prefetch",),
        step_time_s=0.014,
        description="sequential per-batch stage last, no prefetch; device 14 ms/batch",
    ),
    Workload(
        "python-function",
        python_function,
        ("moderately", "highly"),
        ("replace-python-function",),
        step_time_s=0.0064,
        description="tf.numpy_function stage in pure Python (holds the GIL); device 6.4 ms/batch",
        fixed=python_function_fixed,
    ),
    Workload(
        "repeated-decode",
        repeated_decode,
        ("moderately", "highly"),
        ("cache", "offline-preprocess"),
        step_time_s=0.002,
        description="64 JPEGs decoded + resized every epoch; device 2 ms/batch",
        fixed=repeated_decode_fixed,
    ),
    Workload(
        "tiny-ops",
        tiny_ops,
        ("moderately", "highly"),
        ("vectorize",),
        target_rate=100_000,
        description="3 tiny ops per element, batch 256; device at 100k examples/s",
        fixed=tiny_ops_fixed,
    ),
    Workload(
        "tiny-step",
        in_memory,
        ("no",),
        ("steps-per-execution", "increase-batch-size"),
        model=tiny_model,
        description="in-memory data, batch 8, Dense(2) model: per-step overhead dominates",
    ),
    Workload(
        "fixed-cost-step",
        in_memory,
        ("no",),
        ("increase-batch-size",),
        model=fixed_cost_model,
        description="in-memory data, batch 8, a fixed-size matmul in every step: the step does not grow "
        "with the batch, yet K steps per call save nothing",
    ),
    Workload(
        "needs-more-cores",
        needs_more_cores,
        ("moderately", "highly"),
        ("more-input-workers",),
        target_rate=50_000,
        description="parallel 250-round map with per-epoch randomness; device at 50k examples/s",
    ),
    Workload(
        "unknown-shapes",
        unknown_shapes,
        ("no",),
        ("none",),
        step_time_s=0.030,
        description="cheap tf.numpy_function rows (shape and rank unknown), prefetched; device 30 ms/batch",
    ),
    Workload(
        "well-tuned",
        well_tuned,
        ("no",),
        ("none",),
        step_time_s=0.030,
        description="cheap parallel map with prefetch; device 30 ms/batch",
    ),
)


def by_name(name: str) -> Workload:
    return next(w for w in WORKLOADS if w.name == name)

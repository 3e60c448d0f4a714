"""Training and evaluation input: a data source made into a (distributed) dataset once, iterated each epoch.

Rebuilding the dataset each epoch costs a GPU dearly: from in-memory arrays it copies the arrays
every epoch (measured -44% on an H100 CNN), and it drops whatever a pipeline had cached. So each
source is built once per Trainer and a fresh iterator is taken each epoch:

- arrays in memory, ``(x, y)`` or ``(x, y, sample_weight)`` with x an array or a dict of arrays:
  made into tensors once; batches are gathered by index, as Keras does for arrays. Training
  batches follow a stateless permutation seeded by ``(Task.seed, epoch)``, so a resumed run sees
  the same order as an uninterrupted one; the remainder of a global batch is dropped. One
  dataset runs over all epochs and its iterator is kept (see ``Input``). Evaluation takes every
  row once.
- ``fn(input_context, per_replica_batch)``: called once per worker. A function that also takes an
  ``epoch`` keyword asks to be called again each epoch, with the epoch (for orders it seeds itself).
- a tfgpu dataset directory: ``tfgpu.data.pipeline``, whose shuffles reshuffle on each iteration.

Where the replicas are not the host CPU, the strategy's distributed iterator copies each batch to
its device ahead of the step (fetch-to-device); one replica on the host CPU iterates the dataset
directly, since the distributed iterator's bookkeeping measured about 20% of a small step there.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfgpu import host
from tfgpu.errors import ConfigError, TfgpuError


def is_arrays(source: Any) -> bool:
    """True for ``(x, y)`` / ``(x, y, w)`` given as arrays (not a path, not a function)."""
    return isinstance(source, tuple | list) and len(source) in (2, 3) and all(_has_rows(s) for s in source)


def _has_rows(value: Any) -> bool:
    if isinstance(value, dict):
        return bool(value) and all(_has_rows(v) for v in value.values())
    shape = getattr(value, "shape", None)
    return shape is not None and len(shape) >= 1


def array_rows(source: Any) -> int:
    """The rows of an array source; ConfigError naming each part's rows when they differ."""
    import tensorflow as tf

    names = ("x", "y", "sample_weight")
    counts = {}
    for name, part in zip(names, source, strict=False):
        for i, leaf in enumerate(tf.nest.flatten(part)):
            counts[f"{name}[{i}]" if isinstance(part, dict) else name] = int(leaf.shape[0])
    if len(set(counts.values())) != 1:
        raise ConfigError(
            "The arrays of train_data / eval_data have different numbers of rows",
            value=counts,
            fix="pass x, y (and sample weights) with one row per example each",
        )
    return next(iter(counts.values()))


def takes_epoch(fn: Callable[..., Any]) -> bool:
    try:
        return "epoch" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class Input:
    """One data source for training or evaluation, built once.

    ``iterator(epoch, step)`` gives an iterator and the batches to skip to reach that point. Arrays
    in training have a known number of steps per epoch (``steps_per_epoch``): their dataset runs
    on over the epochs, and the iterator is kept from one epoch (and one ``fit``) to the next, so
    nothing is rebuilt and the prefetch buffers stay full across the epoch boundary. The caller
    says where it stopped with ``stopped_at``.
    """

    def __init__(
        self,
        source: Any,
        *,
        task: Any,
        training: bool,
        global_batch: int,
        strategy: Any,
        direct: bool,
    ) -> None:
        import tensorflow as tf

        self.source, self.task, self.training = source, task, training
        self.global_batch, self.strategy, self.direct = global_batch, strategy, direct
        self.per_epoch = callable(source) and takes_epoch(source)
        self.steps_per_epoch: int | None = None
        self._built: Any = None
        self._live: tuple[Any, int, int] | None = None  # (iterator, epoch, step) it stands at
        self._arrays_given = is_arrays(source)
        if self._arrays_given:
            rows = array_rows(source)
            if training and rows < global_batch:
                raise ConfigError(
                    f"train_data has {rows} rows, fewer than one global batch ({global_batch})",
                    value=rows,
                    fix="lower Task.batch_size, or give more rows",
                )
            with tf.device("/cpu:0"):
                self._tensors = tf.nest.map_structure(tf.convert_to_tensor, tuple(source))
            self._rows = rows
            if training:
                self.steps_per_epoch = rows // global_batch
                with tf.device("/cpu:0"):
                    self._first_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="first_epoch")

    def iterator(self, epoch: int, step: int = 0) -> tuple[Any, int]:
        """An iterator for ``epoch`` and the batches to skip in it to reach ``step``."""
        if self.steps_per_epoch is not None:  # one dataset over all epochs, from ``epoch`` on
            if self._live is not None and self._live[1:] == (epoch, step):
                return self._live[0], 0
            self._live = None  # the old iterator (and its prefetch threads) goes first
            self._first_epoch.assign(epoch)  # read when the iterator starts
            if self._built is None:
                self._built = self._build(epoch)
            return iter(self._built), step
        if self._built is None or self.per_epoch:
            self._built = self._build(epoch)
        return iter(self._built), step

    def stopped_at(self, iterator: Any, epoch: int, step: int) -> None:
        """Where ``iterator`` now stands (the next batch is ``step`` of ``epoch``)."""
        if self.steps_per_epoch is not None:
            if step >= self.steps_per_epoch:
                epoch, step = epoch + 1, 0
            self._live = (iterator, epoch, step)

    def _build(self, epoch: int) -> Any:
        import tensorflow as tf

        make = self._per_worker(epoch)
        if self.direct:
            return make(tf.distribute.InputContext())
        return self.strategy.distribute_datasets_from_function(make)

    def _per_worker(self, epoch: int) -> Callable[[Any], Any]:
        from tfgpu import data

        source, task, training = self.source, self.task, self.training

        def make(ctx: Any) -> Any:
            per_replica = ctx.get_per_replica_batch_size(self.global_batch)
            if self._arrays_given:
                return self._arrays(ctx, per_replica)
            if callable(source):
                return source(ctx, per_replica, epoch=epoch) if self.per_epoch else source(ctx, per_replica)
            options = {"training": training, "supervised": True, "seed": task.seed, **task.pipeline}
            if not training:
                options.update(training=False, cache=task.pipeline.get("cache", "auto"))
            return data.pipeline(source, batch_size=per_replica, input_context=ctx, **options)

        return make

    def _arrays(self, ctx: Any, per_replica: int) -> Any:
        """Index batches of this worker, gathered from the tensors a chunk of batches at a time."""
        import tensorflow as tf

        from tfgpu.data.pipeline import parallel_options

        rows, tensors = self._rows, self._tensors
        local = max(1, ctx.num_replicas_in_sync // ctx.num_input_pipelines)
        if self.training:
            global_batch = per_replica * ctx.num_replicas_in_sync
            steps, offset = rows // global_batch, ctx.input_pipeline_id * per_replica * local
            shuffle, seed = self.task.pipeline.get("shuffle", True), self.task.seed

            def epoch_order(epoch: Any) -> Any:
                # the epoch's permutation, cut into this worker's per-replica slices of each
                # global batch: [steps * local, per_replica]
                order = tf.range(rows, dtype=tf.int64)
                if shuffle:
                    key = tf.stack([tf.constant(seed, tf.int64), epoch])
                    order = tf.random.experimental.stateless_shuffle(order, seed=key)
                mine = tf.reshape(order[: steps * global_batch], [steps, global_batch])
                mine = mine[:, offset : offset + local * per_replica]
                return tf.data.Dataset.from_tensor_slices(tf.reshape(mine, [steps * local, per_replica]))

            # built once: a new iterator starts at the epoch the variable holds then
            start = self._first_epoch
            epochs = tf.data.Dataset.from_tensors(0).flat_map(
                lambda _: tf.data.Dataset.range(start.read_value(), tf.int64.max)
            )
            index = epochs.flat_map(epoch_order)
        else:
            lo = ctx.input_pipeline_id * rows // ctx.num_input_pipelines
            hi = (ctx.input_pipeline_id + 1) * rows // ctx.num_input_pipelines
            index = tf.data.Dataset.range(lo, hi, per_replica).map(
                lambda s: tf.range(s, tf.minimum(s + per_replica, hi))
            )
        return (
            _gather_in_chunks(index, tensors, per_replica=per_replica, training=self.training)
            .prefetch(tf.data.AUTOTUNE)
            .with_options(parallel_options(tf, autotune=False))
        )


CHUNK_BYTES = 8 << 20


def _gather_in_chunks(index: Any, tensors: Any, *, per_replica: int, training: bool) -> Any:
    """Batches gathered several at a time (one map call per chunk: small batches are cheap).

    A chunk holds up to 16 batches and about 8 MiB; evaluation batches can be short, so they
    are gathered one by one.
    """
    import tensorflow as tf

    row_bytes = sum(t.dtype.size * max(1, int(tf.reduce_prod(t.shape[1:]))) for t in tf.nest.flatten(tensors))
    chunk = max(1, min(16, CHUNK_BYTES // max(1, row_bytes * per_replica))) if training else 1

    def gather(i: Any) -> Any:
        return tf.nest.map_structure(lambda t: tf.gather(t, i), tensors)

    if chunk == 1:
        return index.map(gather, num_parallel_calls=host.cores())
    return index.batch(chunk).map(gather, num_parallel_calls=host.cores()).unbatch()


def steps_per_epoch(source: Any, global_batch: int) -> int | None:
    """Training steps in one epoch when the source says (arrays, a dataset directory), else None."""
    if is_arrays(source):
        return array_rows(source) // global_batch
    if callable(source):
        return None
    from tfgpu import data

    try:
        return data.load(Path(source)).total_rows // global_batch
    except TfgpuError:
        return None

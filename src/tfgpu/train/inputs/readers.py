"""Training and evaluation input: an adapter's data made into a (distributed) dataset once, iterated each epoch.

Rebuilding the dataset each epoch costs a GPU dearly: from in-memory arrays it copies the arrays
every epoch (measured -44% on an H100 CNN), and it drops whatever a pipeline had cached. So each
source is built once per Trainer and a fresh iterator is taken each epoch. One ``Input`` class
reads each kind of data (``adapters.Adapter.reader`` names it; ``input_of`` makes it):

- ``ArraysInput``: arrays in memory, batches gathered by index (below);
- ``DatasetInput``: a ``tf.data.Dataset`` of global batches (a PyDataset's and a generator's
  too), distributed with ``experimental_distribute_dataset`` (each replica its slice of each
  global batch, each worker its share), iterated as it is on one host-CPU replica;
- ``FunctionInput``: ``fn(input_context, per_replica_batch)``, called once per worker (again each
  epoch, with the epoch, when it takes an ``epoch`` keyword);
- ``DirectoryInput``: a tfgpu dataset directory, ``tfgpu.data.pipeline``, whose shuffles
  reshuffle on each iteration.

Where the replicas are not the host CPU, the strategy's distributed iterator copies each batch to
its device ahead of the step (fetch-to-device); one replica on the host CPU iterates the dataset
directly, since the distributed iterator's bookkeeping measured about 20% of a small step there.

With ``steps_per_epoch`` (arrays always; other sources when the Task sets it) an epoch is that many
steps and the iterator goes on from one epoch to the next, as Keras does; it starts again when the
data runs out. ``class_weight`` becomes sample weights, in the input pipeline.

Each verb releases its inputs when it ends (``Input.release``): a built dataset's functions hold
the Input that built it (``_per_worker``'s ``make``, each reader's maps), a cycle Python frees
only in a full garbage collection. Until then the open iterator, its prefetch threads and
buffers and the data's tensors stayed alive, and deleting an old tf.data iterator there stalled
the whole process, the GIL held, for up to its autotuner's period (TensorFlow 2.21 misses the
wake-up at random: a collection took 2 to 135 s on a busy 2-core machine). Keras's fit drops its
iterators so too.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tfgpu import distribute, host, letting_go
from tfgpu.errors import ConfigError
from tfgpu.graphs import as_written
from tfgpu.text import counted

if TYPE_CHECKING:
    from tfgpu.train.pieces.task import Task

Adapter = Any  # a ``train.inputs.adapters.Adapter`` (adapters imports this module, not the other way)


def input_of(adapter: Adapter, *, converted: tuple[Any, int] | None = None, **reading: Any) -> Input:
    """The ``Input`` that reads ``adapter``'s data (its ``reader``; ``Input``'s keywords);
    ``converted``: the arrays as another input holds them (``ArraysInput``)."""
    held = {} if converted is None else {"converted": converted}
    return adapter.reader(adapter, **held, **reading)


class Input:
    """One data source for training or evaluation, built once; what every kind shares.

    ``iterator(epoch, step)`` gives an iterator and the batches to skip to reach that point. With a
    known number of steps per epoch (``steps_per_epoch``) one iterator runs on over a verb's epochs
    (``stopped_at`` says where it stands, ``release`` ends it): nothing rebuilt, the prefetch
    buffers full across the epoch boundary. A kind says how its dataset is made (``_made``).
    """

    exact = False  # tfgpu cuts every batch itself: each epoch's batches known, the short one included
    weighs_batches = True  # class weights are applied to each batch (arrays: once, to the arrays)
    per_epoch = False  # the dataset is made again each epoch
    converted: tuple[Any, int] | None = None  # arrays as an ``ArraysInput`` holds them

    def __init__(
        self,
        adapter: Adapter,
        *,
        task: Any,
        training: bool,
        global_batch: int,
        strategy: Any,
        direct: bool,
    ) -> None:
        self.adapter, self.source, self.task, self.training = adapter, adapter.data, task, training
        self.global_batch, self.strategy, self.direct = global_batch, strategy, direct
        self.steps_per_epoch: int | None = task.steps_per_epoch if training else None
        self.element_spec: Any = None  # one worker's dataset's, set when it is built
        # a map of tfgpu's own, traced as written (``tfgpu.graphs``)
        self._weigh = (
            as_written(_class_weights(task.class_weight)) if training and task.class_weight else None
        )
        self._built, self._built_epoch = None, None  # the dataset, and the epoch it was built for
        self.caches = False  # the pipeline has a .cache(): its first epoch fills it (warm-up)
        self._live: tuple[Any, int, int] | None = None  # (iterator, epoch, step) it stands at
        self.tf_options: Any = None  # tf.data options added to the dataset (tune=True's input knob)

    @property
    def replicas(self) -> int:  # in sync (1 with no strategy: one replica read directly)
        return 1 if self.strategy is None else self.strategy.num_replicas_in_sync

    def iterator(self, epoch: int, step: int = 0) -> tuple[Any, int]:
        """An iterator for ``epoch`` and the batches to skip in it to reach ``step``."""
        if self.steps_per_epoch is not None:  # one iterator over the epochs, from ``epoch`` on
            if self._live is not None and self._live[1:] == (epoch, step):
                return self._live[0], 0
            letting_go.let_go_of(self, "_live")  # the old iterator, handed off before a new one is made
            step = self._start(epoch, step)
        return iter(self.built(epoch)), step

    def _start(self, epoch: int, step: int) -> int:
        return step  # the batches a new iterator over the epochs skips to start ``epoch`` at ``step``

    def known_length(self) -> int | None:
        return None  # batches in a pass when known (None: unknown or infinite)

    @property
    def counted(self) -> bool:
        """Every batch of a pass can be taken without asking whether the data has ended (the bare
        loop's shape: ``execution.in_graph_loop``'s ``known``): arrays, or data of a known length
        on one device; several replicas agree on a distributed iterator's short last batch."""
        strategy = self.strategy
        if strategy is not None and (strategy.num_replicas_in_sync > 1 or distribute.spans_workers(strategy)):
            return False
        return self.exact or self.known_length() is not None

    def release(self) -> None:  # the dataset and its open iterator: built again when asked (above)
        letting_go.let_go_of(self, "_built", "_built_epoch", "_live")

    def set_tf_options(self, options: Any) -> None:  # added to the dataset, built anew from here on
        self.tf_options = options
        self.release()

    def trial_iterator(self, options: Any) -> Any:
        """A fresh iterator from the data's start with ``options`` added (None: as it is), the
        run's own left as they are (tune=True's trials)."""
        kept = self.tf_options
        self.tf_options = options
        try:
            return iter(self._build(0))
        finally:
            self.tf_options = kept

    def built(self, epoch: int = 0) -> Any:
        """The (distributed) dataset for ``epoch``: built once (``per_epoch``: each epoch)."""
        if self._built is None or (self.per_epoch and self._built_epoch != epoch):
            self._built, self._built_epoch = self._build(epoch), epoch
        return self._built

    def spec(self) -> Any:
        """One worker's element spec (what the model is built from); builds the dataset if needed."""
        import tensorflow as tf

        if self.element_spec is None:
            if distribute.is_parameter_server(self.strategy):
                # the workers build their own datasets; this one is only looked at
                self.per_worker_factory()(tf.distribute.InputContext())
            else:
                self.built(0)
        return self.element_spec

    def per_worker_factory(self) -> Callable[[Any], Any]:
        """fn(input_context) -> this source's dataset on one worker (ParameterServerStrategy)."""
        return self._per_worker(0)

    def epoch_length(self, epoch: int) -> int | None:
        return self.steps_per_epoch  # steps in ``epoch`` when known

    def stopped_at(self, iterator: Any, epoch: int, step: int, *, exhausted: bool = False) -> None:
        """Where ``iterator`` now stands (the next batch is ``step`` of ``epoch``); ``exhausted``:
        it ran out of data, so the next epoch starts a new one."""
        if self.steps_per_epoch is None:
            return
        if exhausted or self._pass_ended(epoch, step):
            letting_go.let_go_of(self, "_live")
            return
        if step >= self.steps_per_epoch:
            epoch, step = epoch + 1, 0
        self._live = (iterator, epoch, step)

    def _pass_ended(self, epoch: int, step: int) -> bool:
        return False  # the data's pass ends with ``epoch`` at ``step`` (arrays by steps: ``pass_at``)

    def _build(self, epoch: int) -> Any:
        """The dataset as the replicas read it: each worker's own from ``_per_worker``."""
        import tensorflow as tf

        make = self._per_worker(epoch)
        if self.direct:
            return make(tf.distribute.InputContext())
        return self.strategy.distribute_datasets_from_function(make)

    def _per_worker(self, epoch: int) -> Callable[[Any], Any]:
        def make(ctx: Any) -> Any:
            dataset = self._made(ctx, ctx.get_per_replica_batch_size(self.global_batch), epoch)
            if self._weigh is not None and self.weighs_batches:
                dataset = dataset.map(self._weigh)
            return bounded(self._finished(dataset))

        return make

    def _made(self, ctx: Any, per_replica: int, epoch: int) -> Any:
        raise NotImplementedError  # one worker's dataset of its replicas' batches

    def _finished(self, dataset: Any) -> Any:
        """``dataset`` with the tuning's options over its own; its spec and cache noted."""
        if self.tf_options is not None:
            dataset = over(dataset, self.tf_options)
        self.element_spec, self.caches = dataset.element_spec, has_cache(dataset)
        return dataset


class DatasetInput(Input):
    """A ``tf.data.Dataset`` of global batches (a PyDataset's and a generator's too)."""

    def known_length(self) -> int | None:
        return self.adapter.known_batches()

    def _weighed(self) -> Any:
        return self.source.map(self._weigh) if self._weigh is not None else self.source

    def spec(self) -> Any:
        if self.element_spec is None:
            self.element_spec = self._weighed().element_spec
        return self.element_spec

    def per_worker_factory(self) -> Callable[[Any], Any]:
        return _copied_to_each_worker(self._weighed())

    def _build(self, epoch: int) -> Any:
        dataset = self._finished(_sliced_per_batch(self._weighed(), self.strategy, direct=self.direct))
        return dataset if self.direct else self.strategy.experimental_distribute_dataset(bounded(dataset))


class FunctionInput(Input):
    """``fn(input_context[, per_replica_batch][, epoch=])``, called once per worker (each epoch
    when it takes the epoch)."""

    @property
    def per_epoch(self) -> bool:  # type: ignore[override]
        return self.adapter.takes_epoch

    def _made(self, ctx: Any, per_replica: int, epoch: int) -> Any:
        return self.adapter.called(
            ctx, per_replica, epoch=epoch, role="train_data" if self.training else "eval_data"
        )


class DirectoryInput(Input):
    """A tfgpu dataset directory, read by ``tfgpu.data.pipeline``. On one worker its training
    batches are global batches split by the strategy, the short last one trained unless it has
    fewer rows than replicas; across workers each replica reads its own batches from its
    worker's files, in whole steps."""

    def __init__(self, adapter: Adapter, **reading: Any) -> None:
        super().__init__(adapter, **reading)
        self._drop_remainder: bool | None = None  # None: the pipeline's default
        if self.training:
            from tfgpu import data

            rows = data.load(self.source).known_rows
            if not self._split_globally():
                _refuse_fewer_rows_than_a_batch(rows, self.global_batch)
            else:
                if rows >= 0:
                    training_steps(rows, self.global_batch, self.replicas)
                self._drop_remainder = rows < 0 or not trains_short_batch(
                    rows, self.global_batch, self.replicas
                )

    def _split_globally(self) -> bool:
        """Training read on one worker as one pipeline of global batches."""
        return self.training and (self.strategy is None or not distribute.spans_workers(self.strategy))

    def _build(self, epoch: int) -> Any:
        import tensorflow as tf

        if self._split_globally() and not self.direct:  # global batches, split as a Dataset's are
            make = self._per_worker(epoch)
            return self.strategy.experimental_distribute_dataset(make(tf.distribute.InputContext()))
        return super()._build(epoch)

    def _made(self, ctx: Any, per_replica: int, epoch: int) -> Any:
        from tfgpu import data

        options = _pipeline_options(self.task, self.training, drop_remainder=self._drop_remainder)
        return data.pipeline(self.source, batch_size=per_replica, input_context=ctx, options=options)


class ArraysInput(Input):
    """Arrays ``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)``: in training, a known number of
    steps per epoch (``steps_per_epoch``, or one of the Task's own: ``pass_at``)."""

    exact = True
    weighs_batches = False  # class weights become sample weights once, in ``_converted``

    def __init__(self, adapter: Any, *, converted: tuple[Any, int] | None = None, **reading: Any) -> None:
        import tensorflow as tf

        super().__init__(adapter, **reading)
        self._by_steps = False  # a steps_per_epoch of the Task's own (``pass_at``)
        self._tensors, self._rows = converted if converted is not None else self._converted(self.source)
        if self.training:
            self._pass_steps = training_steps(self._rows, self.global_batch, self.replicas)
            self._by_steps = self.task.steps_per_epoch not in (None, self._pass_steps)
            self.steps_per_epoch = self.task.steps_per_epoch if self._by_steps else self._pass_steps
            with tf.device("/cpu:0"):
                self._first_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="first_epoch")

    def _converted(self, source: Any) -> tuple[Any, int]:
        """(the arrays as tensors in host memory, class weights made sample weights; their
        rows): made once a fit, and shared by every variant a tuning tries (``converted``)."""
        import tensorflow as tf

        if self._weigh is not None:
            source = self._weigh(*source)
        with tf.device("/cpu:0"):
            return tf.nest.map_structure(
                tf.convert_to_tensor, _as_keras_packs(tuple(source))
            ), self.adapter.rows

    @property
    def converted(self) -> tuple[Any, int] | None:  # type: ignore[override]
        """The arrays as this input holds them, for another input over the same arrays in
        another batch or strategy (a tuning trial's)."""
        return self._tensors, self._rows

    def known_length(self) -> int | None:
        return self.steps_per_epoch if self.training else -(-self._rows // self.global_batch)

    def _start(self, epoch: int, step: int) -> int:
        first, offset = self._pass_at(epoch)
        self._first_epoch.assign(first)  # read when the iterator starts
        return step + offset

    def epoch_length(self, epoch: int) -> int | None:
        """Steps in ``epoch``: ``steps_per_epoch``, but with one of the Task's own, as many as
        are left in the pass where that is fewer (``pass_at``)."""
        if not self._by_steps:
            return self.steps_per_epoch
        return min(self.steps_per_epoch, self._pass_steps - self._pass_at(epoch)[1])

    def _pass_at(self, epoch: int) -> tuple[int, int]:
        """(pass, batches into it) where ``epoch`` starts (``pass_at``)."""
        if not self._by_steps:
            return epoch, 0
        return pass_at(epoch, per_epoch=self.steps_per_epoch, pass_steps=self._pass_steps)

    def _pass_ended(self, epoch: int, step: int) -> bool:
        return self._by_steps and self._pass_at(epoch)[1] + step >= self._pass_steps

    def _made(self, ctx: Any, per_replica: int, epoch: int) -> Any:
        """Index batches of this worker, gathered from the tensors a chunk of batches at a time;
        in evaluation, this worker's share of the rows in batches, every row once."""
        import tensorflow as tf

        from tfgpu.data.pipeline import in_memory_options

        if self.training:
            return self._training_arrays(ctx, per_replica)
        rows, tensors = self._rows, self._tensors
        lo = ctx.input_pipeline_id * rows // ctx.num_input_pipelines
        hi = (ctx.input_pipeline_id + 1) * rows // ctx.num_input_pipelines
        index = tf.data.Dataset.range(lo, hi, per_replica).map(
            as_written(lambda s: tf.range(s, tf.minimum(s + per_replica, hi)))
        )
        return (
            _gather_in_chunks(index, tensors, per_replica=per_replica, training=False)
            .prefetch(tf.data.AUTOTUNE)
            .with_options(in_memory_options(tf))
        )

    def _epoch_numbers(self) -> Any:
        """The epochs an iterator of the arrays runs (a Dataset built once): a new iterator starts
        at the epoch ``_first_epoch`` holds then; by steps, one pass only, so that it runs out
        where a pass ends, as Keras's iterator does."""
        import tensorflow as tf

        start = self._first_epoch

        def from_start(_: Any) -> Any:
            first = start.read_value()
            return tf.data.Dataset.range(first, first + 1 if self._by_steps else tf.int64.max)

        return tf.data.Dataset.from_tensors(0).flat_map(as_written(from_start))

    def _training_arrays(self, ctx: Any, per_replica: int) -> Any:
        """This worker's training batches over the epochs: in each epoch's permutation, its
        replicas' slices of each whole global batch, then of the short last one (cut evenly:
        replica g of N takes rows ``g * short // N`` to ``(g + 1) * short // N``)."""
        import tensorflow as tf

        from tfgpu.data.pipeline import in_memory_options

        rows, tensors = self._rows, self._tensors
        replicas = ctx.num_replicas_in_sync
        local = max(1, replicas // ctx.num_input_pipelines)
        global_batch = per_replica * replicas
        whole, short = divmod(rows, global_batch)
        first = ctx.input_pipeline_id * local  # this worker's first replica
        offset = first * per_replica
        cuts = [whole * global_batch + g * short // replicas for g in range(first, first + local + 1)]
        tail = trains_short_batch(rows, global_batch, replicas)
        order_of = _permutation(rows, shuffle=self.task.shuffle, seed=self.task.seed)

        def whole_batches(order: Any) -> Any:
            # this worker's per-replica slices of each global batch: [whole * local, per_replica]
            mine = tf.reshape(order[: whole * global_batch], [whole, global_batch])
            mine = mine[:, offset : offset + local * per_replica]
            return tf.data.Dataset.from_tensor_slices(tf.reshape(mine, [whole * local, per_replica]))

        def with_short_batch(epoch: Any) -> Any:
            order = order_of(epoch)
            gathered = _gather_in_chunks(
                whole_batches(order), tensors, per_replica=per_replica, training=True
            )
            last = tf.data.Dataset.from_tensors(order[cuts[0] : cuts[1]])
            for a, b in itertools.pairwise(cuts[1:]):
                last = last.concatenate(tf.data.Dataset.from_tensors(order[a:b]))
            return gathered.concatenate(
                _gather_in_chunks(last, tensors, per_replica=per_replica, training=False)
            )

        epochs = self._epoch_numbers()
        if tail:  # each epoch gathered on its own: its last batch has another shape
            batches = epochs.flat_map(as_written(with_short_batch))
        else:
            index = epochs.flat_map(as_written(lambda epoch: whole_batches(order_of(epoch))))
            batches = _gather_in_chunks(index, tensors, per_replica=per_replica, training=True)
        return batches.prefetch(tf.data.AUTOTUNE).with_options(in_memory_options(tf))


def _permutation(rows: int, *, shuffle: bool, seed: int) -> Callable[[Any], Any]:
    """epoch -> the order of the rows in that epoch: a stateless shuffle seeded by (seed, epoch),
    so a resumed run reads the same batches, or the rows as they are."""
    import tensorflow as tf

    def order_of(epoch: Any) -> Any:
        order = tf.range(rows, dtype=tf.int64)
        if shuffle:
            key = tf.stack([tf.constant(seed, tf.int64), epoch])
            order = tf.random.experimental.stateless_shuffle(order, seed=key)
        return order

    return order_of


def pass_at(epoch: int, *, per_epoch: int, pass_steps: int) -> tuple[int, int]:
    """(the pass over the arrays that ``epoch`` starts in, the batches into it), with Keras's
    ``steps_per_epoch`` on arrays: an epoch takes ``per_epoch`` batches, going on through the
    rows from where the last stopped, and ends early where a pass ends; the next starts a new
    pass (keras-io's callbacks guide: 1000 rows in batches of 64 at 5 an epoch train 5, 5, 5, 1,
    then again). A pure function of the epoch, so a resumed run finds its place."""
    passes, offset = 0, 0
    for _ in range(epoch):
        offset += min(per_epoch, pass_steps - offset)
        if offset >= pass_steps:
            passes, offset = passes + 1, 0
    return passes, offset


def _as_keras_packs(parts: tuple[Any, ...]) -> Any:
    """The batch structure Keras gives ``train_step`` for these arrays: x alone when only x was
    given (``pack_x_y_sample_weight``), not the 1-tuple ``(x,)`` (keras-io's VAE read its images
    as ``data[0]``, and got a batch of one); a tuple of several inputs stays ``(x,)``."""
    if len(parts) == 1 and not isinstance(parts[0], tuple | list):
        return parts[0]
    return parts


CHUNK_BYTES = 8 << 20


def _gather_in_chunks(index: Any, tensors: Any, *, per_replica: int, training: bool) -> Any:
    """Batches gathered several at a time (one map call per chunk: small batches are cheap).

    A chunk holds up to 16 batches and about 8 MiB; evaluation batches can be short, so they
    are gathered one by one.
    """
    import tensorflow as tf

    # static shapes, in Python: under ParameterServerStrategy this runs while a function traces
    row_bytes = sum(t.dtype.size * max(1, math.prod(t.shape[1:])) for t in tf.nest.flatten(tensors))
    chunk = max(1, min(16, CHUNK_BYTES // max(1, row_bytes * per_replica))) if training else 1

    def gather(i: Any) -> Any:
        return tf.nest.map_structure(lambda t: tf.gather(t, i), tensors)

    if chunk == 1:
        return index.map(as_written(gather), num_parallel_calls=host.cores())
    return index.batch(chunk).map(as_written(gather), num_parallel_calls=host.cores()).unbatch()


def trains_short_batch(rows: int, global_batch: int, replicas: int) -> bool:
    """Whether an epoch of ``rows`` ends in a short batch that is trained: one with at least a row
    for each replica (with fewer, a replica would have none, and the rows are dropped)."""
    return rows % global_batch >= replicas


def training_steps(rows: int, global_batch: int, replicas: int) -> int:
    """Steps in an epoch of arrays: the whole global batches and the short last one, unless it has
    fewer rows than replicas (``trains_short_batch``); refused when none."""
    whole, short = divmod(rows, global_batch)
    steps = whole + trains_short_batch(rows, global_batch, replicas)
    if steps == 0:
        raise ConfigError(
            f"train_data has {counted(rows, 'row')}, fewer than one per replica ({replicas} replicas)",
            value=rows,
            fix="give at least one row per replica, or train on fewer replicas (strategy=)",
        )
    if 0 < short < replicas:
        from tfgpu import choices

        choices.record(
            "short last batch",
            f"{counted(short, 'row')} dropped each epoch",
            f"fewer rows than the {replicas} replicas: a replica would have none",
        )
    return steps


def _refuse_fewer_rows_than_a_batch(rows: int, global_batch: int) -> None:
    """Training takes whole global batches: fewer rows than one would train nothing."""
    if 0 <= rows < global_batch:
        raise ConfigError(
            f"train_data has {rows} rows, fewer than one global batch ({global_batch})",
            value=rows,
            fix="lower Task.batch_size, or give more rows",
        )


def _sliced_per_batch(dataset: Any, strategy: Any, *, direct: bool) -> Any:
    """A Dataset of global batches read by several workers, each taking its replicas' slices of
    every global batch (DATA sharding), as the docs promise and one device trains: TensorFlow's
    AUTO policy shards a Dataset that reads files by FILE, so one file failed ("Could not apply
    FILE based sharding") and two trained each worker on its own file (weights 8.9e-3 from one
    device's, keras-io's NER example under tfgpu launch --nproc 2). A policy the user set is kept."""
    import tensorflow as tf

    from tfgpu import distribute

    if direct or strategy is None or not distribute.spans_workers(strategy):
        return dataset
    policy = dataset.options().experimental_distribute.auto_shard_policy
    if policy != tf.data.experimental.AutoShardPolicy.AUTO:
        return dataset
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def over(dataset: Any, options: Any) -> Any:
    """``dataset`` with ``options`` over its own, which they are meant to override (a tuning's
    choice over an arrays pipeline's ``autotune.enabled=False``): without absl's "Changing the
    value of option enabled from False to True." on the user's console, 1 to 13 lines a tuned
    run."""
    import logging

    def overriding(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Changing the value of option")

    absl = logging.getLogger("absl")
    absl.addFilter(overriding)
    try:
        return dataset.with_options(options)
    finally:
        absl.removeFilter(overriding)


def _copied_to_each_worker(dataset: Any) -> Callable[[Any], Any]:
    """fn(input_context) -> ``dataset`` made anew on the worker that calls it, from its graph.

    Each parameter-server worker reads its own copy (its batches are that worker's batches), as
    Keras 2's ``fit`` did and the tutorial's ``dataset_fn`` does. The coordinator's dataset
    itself cannot cross ("Failed copying input tensor ... Unable to parse tensor proto"); its
    serialized graph, a string, can.
    """
    import tensorflow as tf

    graph = dataset._as_serialized_graph(external_state_policy=tf.data.experimental.ExternalStatePolicy.WARN)
    spec = dataset.element_spec

    def copy(ctx: Any) -> Any:
        return tf.data.experimental.from_variant(tf.raw_ops.DatasetFromGraph(graph_def=graph), spec)

    return copy


def _pipeline_options(task: Task, training: bool, *, drop_remainder: bool | None = None) -> Any:
    """The Task's pipeline options as training (or evaluation) reads a dataset directory;
    ``drop_remainder`` where the Task's options leave it unset."""
    from tfgpu.data.options import PipelineOptions

    given = task.pipeline or PipelineOptions()
    return dataclasses.replace(
        given,
        training=training,
        supervised=True,
        seed=task.seed,
        shuffle=task.shuffle and given.shuffle,
        drop_remainder=drop_remainder if given.drop_remainder is None else given.drop_remainder,
    )


def has_cache(dataset: Any) -> bool:
    """Whether a ``cache()`` stage is in the dataset's chain (its first pass fills it)."""
    node = dataset
    while node is not None:
        if "Cache" in type(node).__name__:
            return True
        node = getattr(node, "_input_dataset", None)
    return False


def _class_weights(class_weight: dict[Any, float]) -> Callable[..., Any]:
    """fn(x, y[, sample_weight]) -> (x, y, sample_weight * class_weight[y]), as Keras's fit weighs.

    Labels are class ids, a single column of them (rounded: binary labels), or one-hot rows
    (argmax); a class not in the dict weighs 1.
    """
    import tensorflow as tf

    try:
        ids = {int(k): float(v) for k, v in class_weight.items()}
    except (TypeError, ValueError):
        raise ConfigError(
            "class_weight must map class ids (whole numbers) to weights",
            value=class_weight,
            fix="pass class_weight={0: 1.0, 1: 5.0}",
        ) from None
    if not ids or min(ids) < 0:
        raise ConfigError(
            "class_weight must map class ids from 0 up to weights",
            value=class_weight,
            fix="pass class_weight={0: 1.0, 1: 5.0}",
        )
    table = tf.constant([ids.get(i, 1.0) for i in range(max(ids) + 1)], tf.float32)

    def weigh(*batch: Any) -> Any:
        x, y = batch[0], batch[1]
        if not tf.is_tensor(y) and not hasattr(y, "shape"):
            raise ConfigError(
                "class_weight needs a model with one output, but the labels hold several",
                value=class_weight,
                fix="pass sample_weight per output instead, or drop class_weight",
            )
        y = tf.convert_to_tensor(y)
        if y.shape.rank is not None and y.shape.rank > 1 and y.shape[-1] not in (None, 1):
            ids_ = tf.argmax(y, axis=-1)
        else:
            ids_ = tf.round(tf.reshape(tf.cast(y, tf.float32), [-1]))
        padded = tf.concat([table, [1.0]], 0)  # ids past the table weigh 1
        weights = tf.gather(padded, tf.clip_by_value(tf.cast(ids_, tf.int32), 0, len(padded) - 1))
        if len(batch) > 2 and batch[2] is not None:
            weights = weights * tf.cast(tf.reshape(batch[2], [-1]), tf.float32)
        return x, batch[1], weights

    return weigh


def bounded(dataset: Any) -> Any:
    """``dataset``, never of infinite cardinality, for a distributed iterator.

    A distributed iterator builds ``get_next_as_optional`` without its end-of-data check when its
    dataset is infinite, and its type spec does not say which: a compiled loop traced with an
    infinite dataset's iterator reuses that trace for a finite one and raises OutOfRange at its
    end (``fit`` on ``ds.repeat()``, then on ``ds``). A ``take`` of 2**62 batches keeps one trace
    right for both.
    """
    import tensorflow as tf

    if dataset.cardinality() == tf.data.INFINITE_CARDINALITY:
        return dataset.take(2**62)
    return dataset

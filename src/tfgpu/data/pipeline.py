"""``tfgpu.data.pipeline``: a tf.data pipeline from a manifest, built the way the tf.data guide says.

Stages, in order (each named, so ``tfgpu diagnose`` can time every prefix):

1. ``files``: shard paths in manifest order (shuffled each epoch only when training), sharded per
   worker by file when there are enough files;
2. ``read``: parallel interleaved TFRecord reads, in chunks; each record gets its global row id;
   a corrupt or truncated shard fails naming the file and record number (or is skipped, counted);
3. ``shard``: by record, when there are too few files for the workers;
4. ``parse``: vectorized ``parse_example`` on chunks, then decode (raw bytes, JPEG/PNG) in parallel;
   with no cache, training shuffles the encoded images before the decode;
5. ``cache``: after the expensive deterministic stages, before anything random: in memory when the
   decoded data fits, on disk otherwise, or off;
6. ``shuffle`` / ``augment`` (training only), ``batch`` (static shapes, ``drop_remainder`` when
   training), ``prefetch``; one call per core in every parallel stage (or tf.data's autotuner).

Every choice tfgpu makes is recorded once in :mod:`tfgpu.choices`.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfgpu import choices, host
from tfgpu.data.manifest import Feature, Manifest, Shard, load
from tfgpu.data.options import PipelineOptions
from tfgpu.errors import ConfigError, InputError
from tfgpu.graphs import as_written

CHUNK = 256  # records read and parsed together
BUFFER = 1 << 20  # TFRecord read buffer
ID = "id"
MEMORY_SHARE = 0.25  # share of available RAM a memory cache may take


@dataclass(frozen=True)
class Stage:
    name: str
    apply: Callable[[Any], Any]
    detail: str = ""
    examples: int = 1  # examples in one element of this stage's output (a chunk, a batch)


@dataclass(frozen=True)
class StageTag:
    """Set on the dataset a plan stage ends with, so ``tfgpu diagnose`` times the plan's stages."""

    name: str
    detail: str
    examples: int


@dataclass
class PipelinePlan:
    """The stages of a pipeline; ``build()`` composes them (``upto`` stops after that stage)."""

    stages: list[Stage]
    rows: int  # rows this worker reads (before batching); -1 when unknown
    batch_size: int
    decisions: dict[str, str] = field(default_factory=dict)

    def build(self, upto: str | None = None) -> Any:
        dataset = None
        for stage in self.stages:
            built = stage.apply(dataset)
            if built is not dataset and stage.name != "files":  # a file list is not timed
                built._tfgpu_stage = StageTag(stage.name, stage.detail, stage.examples)
            dataset = built
            if stage.name == upto:
                break
        return dataset

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.stages]


def available_memory() -> int:
    """Bytes of memory free for new allocations now (MemAvailable)."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def _resolve(source: Any, features: dict[str, Feature] | None) -> Manifest:
    if isinstance(source, Manifest):
        return source
    if isinstance(source, (str, os.PathLike)) and (Path(source).is_dir() or str(source).endswith(".json")):
        return load(source)
    if isinstance(source, Sequence) and not isinstance(source, str):
        if not features:
            raise ConfigError(
                "A list of TFRecord files needs a feature spec",
                value=list(source)[:3],
                fix="pass features={'x': tfgpu.data.Feature('float32', (8,), 'float'), ...} or use a manifest",
            )
        shards = [
            Shard(file=str(f), rows=-1, first_row=i << 40, bytes=-1, sha256="") for i, f in enumerate(source)
        ]
        return Manifest(features=features, shards=shards)
    raise InputError(
        "pipeline() needs a dataset directory, a manifest.json, or a list of TFRecord files",
        value=source,
        fix="pass the OUTPUT_DIR of `tfgpu convert`",
    )


def _check_files(manifest: Manifest) -> list[str]:
    files = manifest.files() if manifest.directory else [s.file for s in manifest.shards]
    for path in files:
        if not Path(path).exists():
            raise InputError(
                f"TFRecord file {path} is missing",
                value=path,
                fix="restore it, or re-run `tfgpu convert` into the same directory to rewrite missing shards",
            )
    if not files:
        raise InputError("The dataset has no shards", fix="convert a non-empty source")
    return files


def _parse_spec(tf: Any, features: dict[str, Feature]) -> dict[str, Any]:
    spec = {}
    for name, f in features.items():
        if f.encoding == "int64":
            spec[name] = tf.io.FixedLenFeature(f.shape, tf.int64)
        elif f.encoding == "float":
            spec[name] = tf.io.FixedLenFeature(f.shape, tf.float32)
        else:
            spec[name] = tf.io.FixedLenFeature([], tf.string)
    return spec


def _decoder(tf: Any, name: str, f: Feature, image_size: tuple[int, int] | None) -> Callable[[Any], Any]:
    """A function from a batch of parsed values to a batch of decoded tensors."""

    def same(x: Any) -> Any:
        return x

    def cast(x: Any) -> Any:
        return tf.cast(x, f.dtype)

    if f.encoding == "int64":
        return same if f.dtype == "int64" else cast
    if f.encoding in ("float", "bytes"):
        return same
    if f.encoding == "raw":
        raw_dtype = "uint8" if f.dtype == "bool" else f.dtype

        def raw(x: Any) -> Any:
            values = tf.reshape(tf.io.decode_raw(x, raw_dtype), [-1, *f.shape])
            return tf.cast(values, tf.bool) if f.dtype == "bool" else values

        return raw
    if not f.fixed and image_size is None:
        raise ConfigError(
            f"Images in feature {name!r} have different sizes, so they cannot be batched",
            value=f.shape,
            fix="pass image_size=(height, width) to pipeline(), or convert with --resize HxW",
        )
    shape = (*image_size, 3) if image_size else f.shape
    decode = tf.io.decode_jpeg if f.encoding == "jpeg" else tf.io.decode_png

    def image(data: Any) -> Any:
        """One encoded image (per element: tf.data decodes many in parallel)."""
        pixels = decode(data, channels=3)
        if image_size is not None:
            pixels = tf.cast(tf.image.resize(pixels, image_size), tf.uint8)
        return tf.ensure_shape(pixels, shape)

    return image


END = b"\xfftfgpu-end-of-file"  # appended to each file's records: never a serialized tf.Example


def _reader(tf: Any, compression: str | None, on_corrupt: str) -> Callable[..., Any]:
    """Per file: chunks of (ids, records); checks the record count against the manifest.

    Why a marker record: with ``ignore_errors`` a truncated file just ends early, so the count must
    be checked where the file ends. The marker makes the file's last chunk recognisable inside the
    one per-chunk map (a ``scan`` carrying the count cost 7% of a JPEG pipeline's throughput).
    """

    def read(path: Any, first_row: Any, rows: Any) -> Any:
        records = tf.data.TFRecordDataset(path, compression_type=compression or "", buffer_size=BUFFER)
        marked = records.ignore_errors().concatenate(tf.data.Dataset.from_tensors(tf.constant(END)))

        def checked(k: Any, data: Any) -> Any:
            last = tf.equal(data[-1], END)
            size = tf.size(data, out_type=tf.int64) - tf.cast(last, tf.int64)
            seen = k * CHUNK + size  # records of this file read so far
            ok = tf.logical_or(rows < 0, tf.where(last, tf.equal(seen, rows), seen <= rows))
            with tf.control_dependencies([_count_check(tf, ok, path, seen, rows, on_corrupt)]):
                records = tf.cond(last, lambda: data[:-1], lambda: data)  # no copy of full chunks
                return first_row + k * CHUNK + tf.range(size), records

        return marked.batch(CHUNK).enumerate().map(as_written(checked))

    return read


def _count_check(tf: Any, ok: Any, path: Any, seen: Any, rows: Any, on_corrupt: str) -> Any:
    """Fails naming the file and record number, or (``on_corrupt="skip"``) reports the skipped count."""
    if on_corrupt == "fail":
        return tf.debugging.Assert(
            ok,
            [
                "tfgpu: corrupt or truncated TFRecord file",
                path,
                "- record number",
                seen,
                "(counting from 0) cannot be read; the manifest lists",
                rows,
                "records. Fix: re-run `tfgpu convert`, or pass on_corrupt='skip'",
            ],
            summarize=3,
        )

    def warn() -> Any:
        tf.print(
            "tfgpu: skipped",
            rows - seen,
            "unreadable records of",
            path,
            "from record number",
            seen,
            output_stream=sys.stderr,
        )
        return tf.constant(True)

    return tf.cond(ok, lambda: tf.constant(True), warn)


@dataclass(frozen=True)
class Layout:
    """Which files this input pipeline reads, and how it shares them with the other pipelines."""

    files: list[str]
    firsts: list[int]  # each file's first global row id
    counts: list[int]  # rows per file, -1 unknown
    pipelines: int  # input pipelines side by side (workers)
    pipeline_id: int
    by_file: bool  # sharded by file; else by record (too few files for the pipelines)
    rows: int  # rows this pipeline reads, -1 unknown

    @property
    def sharding(self) -> str | None:
        if self.pipelines == 1:
            return None
        if self.by_file:
            return f"by file ({len(self.files)} files, {self.pipelines} workers)"
        return f"by record ({len(self.files)} files are too few for {self.pipelines} workers)"


def layout(manifest: Manifest, files: list[str], input_context: Any) -> Layout:
    """Shard by file when there are enough files for the pipelines, else by record."""
    pipelines = getattr(input_context, "num_input_pipelines", 1)
    pipeline_id = getattr(input_context, "input_pipeline_id", 0)
    counts = [s.rows for s in manifest.shards]
    by_file = pipelines > 1 and (len(files) >= 2 * pipelines or len(files) % pipelines == 0)
    rows = manifest.known_rows
    if rows >= 0 and pipelines > 1:
        rows = sum(counts[pipeline_id::pipelines]) if by_file else len(range(pipeline_id, rows, pipelines))
    return Layout(
        files, [s.first_row for s in manifest.shards], counts, pipelines, pipeline_id, by_file, rows
    )


class Stages:
    """The builders of a plan's stages, one method each: dataset so far in, next dataset out.

    ``order()`` says which run, in which order, and why: with no cache, training shuffles the
    encoded images before decoding them (the buffer holds a third of the bytes; 12% faster on
    JPEGs, docs/benchmarks.md) and decodes and augments in one map (one parallel stage per
    element instead of two, faster on few cores).
    """

    def __init__(
        self, tf: Any, manifest: Manifest, where: Layout, options: PipelineOptions, *, batch_size: int
    ) -> None:
        self.tf, self.manifest, self.where, self.options = tf, manifest, where, options
        self.batch_size = batch_size
        self.images = {n for n, f in manifest.features.items() if f.encoding in ("jpeg", "png")}
        self.spec = _parse_spec(tf, manifest.features)
        self.decoders = {n: _decoder(tf, n, f, options.image_size) for n, f in manifest.features.items()}
        self.cache_mode, self.cache_why = _choose_cache(
            options.cache, manifest, where.rows, options.image_size
        )
        self.cache_path = (
            _cache_path(options.cache_dir, where.files, where.pipeline_id)
            if self.cache_mode == "disk"
            else None
        )
        rows, least = where.rows, max(1024, 16 * batch_size)
        self.buffer = options.shuffle_buffer or (min(least, rows) if rows > 0 else least)
        self.parallel = tf.data.AUTOTUNE if options.autotune else host.cores()
        self.per_element = options.training or bool(self.images)  # else whole batches, vectorized
        self.fuse_augment = (
            options.training
            and options.augment is not None
            and bool(self.images)
            and self.cache_mode == "off"
        )
        self.early_shuffle = options.shuffles and bool(self.images) and self.cache_mode == "off"
        self._read = _reader(tf, manifest.compression, options.on_corrupt)
        self.augment_fn = example_augment(options.augment, label=manifest.label)

    def decisions(self) -> dict[str, str]:
        options, out = self.options, {}
        if self.where.sharding:
            out["shard"] = self.where.sharding
        out["cache"] = f"{self.cache_mode} ({self.cache_why})"
        if options.shuffles:
            out["shuffle_buffer"] = str(self.buffer)
        elif options.training:
            out["shuffle"] = "off (asked for): the stored order"
        out["parallelism"] = (
            "tf.data autotune"
            if options.autotune
            else f"one call per core ({self.parallel}), tf.data autotune off"
        ) + ("" if options.deterministic else ", non-deterministic order")
        return out

    def order(self) -> list[Stage]:
        options, batch = self.options, self.batch_size
        stages = [
            Stage("files", self.files),
            Stage("read", self.read, f"parallel interleave of TFRecord files, chunks of {CHUNK}", CHUNK),
        ]
        if self.where.pipelines > 1 and not self.where.by_file:
            stages.append(Stage("shard", self.shard, "by record", CHUNK))
        parsed = 1 if self.per_element else batch
        stages.append(Stage("parse", self.parse, "vectorized parse_example", parsed))
        if self.early_shuffle:
            stages.append(Stage("shuffle", self.shuffle, f"{self.buffer} encoded"))
        if self.images:
            kinds = "/".join(sorted({self.manifest.features[n].encoding for n in self.images}))
            detail = f"parallel {kinds} decode" + (" + augment" if self.fuse_augment else "")
            stages.append(Stage("decode", self.decode, detail))
        stages.append(Stage("cache", self.cache, self.cache_mode, parsed if not self.images else 1))
        if options.shuffles and not self.early_shuffle:
            stages.append(Stage("shuffle", self.shuffle, str(self.buffer)))
        if options.training and options.augment is not None and not self.fuse_augment:
            stages.append(Stage("augment", self.augment, getattr(options.augment, "__name__", "augment")))
        if self.per_element:
            stages.append(
                Stage("batch", self.batch, f"{batch}, drop_remainder={options.drops_remainder}", batch)
            )
        return stages

    # -- the stages ------------------------------------------------------------------------------
    def files(self, _: Any) -> Any:
        tf, where = self.tf, self.where
        ds = tf.data.Dataset.from_tensor_slices(
            (where.files, tf.constant(where.firsts, tf.int64), tf.constant(where.counts, tf.int64))
        )
        if where.by_file:
            ds = ds.shard(where.pipelines, where.pipeline_id)
        if self.options.shuffles_files:
            ds = ds.shuffle(len(where.files), seed=self.options.seed, reshuffle_each_iteration=True)
        return ds

    def read(self, ds: Any) -> Any:
        cycle = max(1, min(len(self.where.files), host.cores(), 16))  # wider spreads the same cores thinner
        return ds.interleave(
            as_written(self._read),
            cycle_length=cycle,
            num_parallel_calls=cycle,
            deterministic=self.options.deterministic,
        )

    def shard(self, ds: Any) -> Any:
        return ds.unbatch().shard(self.where.pipelines, self.where.pipeline_id).batch(CHUNK)

    def parse(self, ds: Any) -> Any:
        tf, images, decoders, spec = self.tf, self.images, self.decoders, self.spec
        if not self.per_element:
            ds = ds.rebatch(self.batch_size, drop_remainder=self.options.drops_remainder)

        def parse(ids: Any, data: Any) -> Any:
            parsed = tf.io.parse_example(data, spec)
            out = {n: (v if n in images else decoders[n](v)) for n, v in parsed.items()}
            out[ID] = ids
            return out

        ds = ds.map(
            as_written(parse), num_parallel_calls=self.parallel, deterministic=self.options.deterministic
        )
        return ds.unbatch() if self.per_element else ds

    def decode(self, ds: Any) -> Any:
        images, decoders, augment, fuse = self.images, self.decoders, self.augment_fn, self.fuse_augment

        def decode(element: dict[str, Any]) -> dict[str, Any]:
            out = {n: (decoders[n](v) if n in images else v) for n, v in element.items()}
            return {**augment(out), ID: out[ID]} if fuse else out  # type: ignore[misc]

        # with the user's augment fused in, tf.data converts it as it would the user's own map
        fn = decode if fuse else as_written(decode)
        return ds.map(fn, num_parallel_calls=self.parallel, deterministic=self.options.deterministic)

    def cache(self, ds: Any) -> Any:
        return ds.cache(self.cache_path or "") if self.cache_mode != "off" else ds

    def shuffle(self, ds: Any) -> Any:
        return ds.shuffle(self.buffer, seed=self.options.seed, reshuffle_each_iteration=True)

    def augment(self, ds: Any) -> Any:
        augment = self.augment_fn  # the user's: converted by tf.data as their own map would be
        return ds.map(
            lambda e: {**augment(e), ID: e[ID]},  # type: ignore[misc]
            num_parallel_calls=self.parallel,
            deterministic=self.options.deterministic,
        )

    def batch(self, ds: Any) -> Any:
        return ds.batch(
            self.batch_size,
            drop_remainder=self.options.drops_remainder,
            num_parallel_calls=self.parallel,
            deterministic=self.options.deterministic,
        )

    def whole_steps(self, ds: Any, input_context: Any) -> Any:
        """Training batches in whole steps: this pipeline feeds ``local`` replicas one batch each
        per step, so a count of batches that is not a multiple of ``local`` left the last step
        with empty batches on some replicas, which Conv2D on the CPU turns into a shape error
        (`Matrix size-incompatible: In[0]: [0,3]`, 600 rows at batch 128 on 2 replicas)."""
        if not self.options.drops_remainder or input_context is None:
            return ds
        local = input_context.num_replicas_in_sync // max(1, input_context.num_input_pipelines)
        if local <= 1:
            return ds
        if self.where.rows >= 0:
            return ds.take(self.where.rows // self.batch_size // local * local)
        return ds.batch(local, drop_remainder=True).unbatch()

    def finish(self, ds: Any, *, input_context: Any) -> Any:
        tf, options = self.tf, self.options
        ds = self.whole_steps(ds, input_context)
        ds = ds.map(
            as_written(_output(self.manifest, with_ids=options.with_ids, supervised=options.supervised))
        )
        data_options = parallel_options(tf, autotune=options.autotune)
        data_options.deterministic = options.deterministic
        data_options.experimental_optimization.map_fusion = True
        data_options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.OFF
            if input_context is not None
            else tf.data.experimental.AutoShardPolicy.DATA
        )
        return ds.with_options(data_options).prefetch(tf.data.AUTOTUNE)


def plan(
    source: Any,
    *,
    batch_size: int,
    options: PipelineOptions | None = None,
    input_context: Any = None,
    **overrides: Any,
) -> PipelinePlan:
    """The stages of :func:`pipeline` (same arguments), for building or measuring stage by stage."""
    import tensorflow as tf

    options = PipelineOptions.of(options, **overrides)
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError("batch_size must be at least 1", value=batch_size, fix="pass batch_size=32")
    manifest = _resolve(source, options.features)
    files = _check_files(manifest)
    if options.supervised and not manifest.label:
        raise ConfigError(
            "supervised=True needs a label feature",
            value=list(manifest.features),
            fix="convert with --label COLUMN",
        )
    where = layout(manifest, files, input_context)
    stages = Stages(tf, manifest, where, options, batch_size=batch_size)
    decisions = stages.decisions()
    ordered = stages.order()
    if options.service:  # the service reads, parses, decodes, augments and batches; prefetch stays here
        ordered.append(
            _service_stage(tf, options.service, exactly_once=options.exactly_once_reads, decisions=decisions)
        )
    ordered.append(
        Stage("prefetch", lambda ds: stages.finish(ds, input_context=input_context), "AUTOTUNE", batch_size)
    )
    # an evaluation pipeline's choices are its own: they overwrote training's in the summary
    # (tfgpu train --data-service said "exactly once (static sharding)", evaluation's mode)
    prefix = "data" if options.training else "data.eval"
    for key, value in decisions.items():
        choices.record(f"{prefix}.{key}", value)
    return PipelinePlan(stages=ordered, rows=where.rows, batch_size=batch_size, decisions=decisions)


def pipeline(
    source: Any,
    *,
    batch_size: int,
    options: PipelineOptions | None = None,
    input_context: Any = None,
    **overrides: Any,
) -> Any:
    """A batched tf.data.Dataset from a tfgpu dataset (or TFRecord files with ``features``).

    Args:
        source: a dataset directory written by ``tfgpu convert``, its manifest.json, a Manifest, or
            a list of TFRecord files (then ``features`` gives the schema).
        batch_size: the batch this pipeline yields (per worker under a multi-worker strategy:
            ``input_context.get_per_replica_batch_size(global_batch)``).
        options: a ``PipelineOptions`` (training, shuffle, cache, augment, with_ids, service, ...);
            any of its fields can also be given as a keyword (``training=True, cache="off"``).
        input_context: a ``tf.distribute.InputContext``; the pipeline reads its worker's part.

    Elements are dicts of batched tensors (plus "id" when asked), or (features, label) with
    ``supervised``.
    """
    built = plan(
        source, batch_size=batch_size, options=options, input_context=input_context, **overrides
    ).build()
    choices.announce()
    return built


def _service_stage(tf: Any, service: str, *, exactly_once: bool, decisions: dict[str, str]) -> Stage:
    """Everything before this stage, batching included, runs on the tf.data service's workers.

    Exactly once (evaluation's default): static sharding by file, or by record when files are too
    few (FILE_OR_DATA; the service must know its workers, as `tfgpu data-service` sets up); each
    element once per epoch. Otherwise dynamic sharding (distributed_epoch): workers take splits as
    they are free, the fastest mode, and an element can be lost if a worker dies mid-epoch.
    """
    from tfgpu.data.service import reachable

    reachable(service)
    policy = tf.data.experimental.service.ShardingPolicy
    mode = policy.FILE_OR_DATA if exactly_once else policy.DYNAMIC
    decisions["service"] = (
        f"{service}, {'exactly once (static sharding by file or record)' if exactly_once else 'dynamic sharding (distributed_epoch)'}"
    )

    def distribute(ds: Any) -> Any:
        return ds.apply(tf.data.experimental.service.distribute(processing_mode=mode, service=service))

    return Stage("service", distribute, decisions["service"])


def parallel_options(tf: Any, *, autotune: bool) -> Any:
    """tf.data options for a pipeline whose stages ask for AUTOTUNE parallelism.

    With ``autotune=False`` a stage left at AUTOTUNE runs a fixed min(16, cores) calls (tf.data's
    initial parallelism; tfgpu's own stages pass the core count) and prefetch buffers still grow
    on demand; measured stable where the autotuner's model was bimodal (bench/data_bench.py).
    """
    options = tf.data.Options()
    options.autotune.enabled = autotune
    if autotune:
        options.autotune.min_parallelism = host.cores()
    options.experimental_optimization.map_parallelization = True
    return options


def example_augment(fn: Any, *, label: str | None) -> Any:
    """``augment`` as fn(example dict) -> example dict, from either form users write: that one,
    or tf.data's ``fn(image, label)`` / ``fn(features, label)`` returning the pair (the features
    are the one feature's tensor, or a dict of several). The pair form ended in a 70-line
    TensorFlow traceback ("missing 1 required positional argument: 'label'") from inside tf.data."""
    if fn is None or _positional_count(fn) != 2:
        return fn
    if label is None:
        raise ConfigError(
            "augment takes (features, label), but this dataset has no label column",
            value=getattr(fn, "__name__", type(fn).__name__),
            fix="write augment as fn(example) -> example (a dict of tensors), or convert with --label",
        )

    def on_example(example: dict[str, Any]) -> dict[str, Any]:
        names = [n for n in example if n not in (label, ID)]
        features = example[names[0]] if len(names) == 1 else {n: example[n] for n in names}
        new_features, new_label = fn(features, example[label])
        out = {**example, label: new_label}
        out.update({names[0]: new_features} if len(names) == 1 else new_features)
        return out

    return on_example


def _positional_count(fn: Any) -> int | None:
    """How many positional arguments ``fn`` requires (None: cannot tell, e.g. a builtin)."""
    import inspect

    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in kinds and p.default is inspect.Parameter.empty for p in parameters)


def in_memory_options(tf: Any) -> Any:
    """tf.data options for a pipeline that gathers from tensors held in memory (arrays given to
    fit or predict): no graph rewrites.

    tf.data applies its static optimizations by serializing the dataset's graph, and a captured
    tensor goes into it as a constant: 0.85 s of each ``tfgpu.predict`` call on 200,000 x 784
    float32 rows (627 MB), about half its time, went to making the iterator. Keras's array
    adapter turns them off for the same reason; a fit on such arrays paid it once per call. The
    map stages here already run in parallel.
    """
    options = tf.data.Options()
    options.autotune.enabled = False
    options.experimental_optimization.apply_default_optimizations = False
    return options


def _output(manifest: Manifest, *, with_ids: bool, supervised: bool) -> Callable[[dict[str, Any]], Any]:
    label = manifest.label

    def shape(element: dict[str, Any]) -> Any:
        ids = element[ID]
        features = {k: v for k, v in element.items() if k != ID}
        if supervised:
            y = features.pop(label)
            x = next(iter(features.values())) if len(features) == 1 else features
            return (x, y, ids) if with_ids else (x, y)
        if with_ids:
            features[ID] = ids
        return features

    return shape


def _choose_cache(
    cache: str, manifest: Manifest, rows: int, image_size: tuple[int, int] | None
) -> tuple[str, str]:
    if cache in ("memory", "disk", "off"):
        return cache, "asked for"
    per_row = manifest.decoded_bytes_per_row()
    if per_row is None and image_size is not None:
        per_row = image_size[0] * image_size[1] * 3 + sum(
            f.decoded_bytes() or 0 for f in manifest.features.values() if f.encoding not in ("jpeg", "png")
        )
    if per_row is None or rows < 0:
        return "off", "decoded size unknown"
    need = per_row * rows
    budget = MEMORY_SHARE * available_memory()
    if need <= budget:
        return "memory", f"{need / 2**20:.0f} MiB decoded fits in a quarter of free RAM"
    return "disk", f"{need / 2**20:.0f} MiB decoded is over a quarter of free RAM ({budget / 2**20:.0f} MiB)"


def _cache_path(cache_dir: str | None, files: list[str], pipeline_id: int) -> str:
    key = hashlib.sha1("|".join(files).encode()).hexdigest()[:12]
    base = Path(cache_dir or tempfile.gettempdir()) / f"tfgpu-cache-{key}"
    base.mkdir(parents=True, exist_ok=True)
    return str(base / f"worker-{pipeline_id}")

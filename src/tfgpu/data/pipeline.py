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
from tfgpu.errors import ConfigError, InputError

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


def _available_memory() -> int:
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

        return marked.batch(CHUNK).enumerate().map(checked)

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


def plan(
    source: Any,
    *,
    batch_size: int,
    training: bool = False,
    features: dict[str, Feature] | None = None,
    input_context: Any = None,
    shuffle_buffer: int | None = None,
    augment: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    cache: str = "auto",
    cache_dir: str | None = None,
    deterministic: bool | None = None,
    with_ids: bool = False,
    drop_remainder: bool | None = None,
    on_corrupt: str = "fail",
    image_size: tuple[int, int] | None = None,
    supervised: bool = False,
    seed: int | None = None,
    shuffle_files: bool | None = None,
    autotune: bool = False,
    service: str | None = None,
    exactly_once: bool | None = None,
) -> PipelinePlan:
    """The stages of :func:`pipeline` (same arguments), for building or measuring stage by stage."""
    import tensorflow as tf

    if batch_size < 1:
        raise ConfigError("batch_size must be at least 1", value=batch_size, fix="pass batch_size=32")
    if cache not in ("auto", "memory", "disk", "off"):
        raise ConfigError("cache must be auto, memory, disk or off", value=cache, fix="pass cache='auto'")
    if on_corrupt not in ("fail", "skip"):
        raise ConfigError(
            "on_corrupt must be 'fail' or 'skip'",
            value=on_corrupt,
            fix="pass on_corrupt='skip' to skip and count bad records",
        )
    manifest = _resolve(source, features)
    files = _check_files(manifest)
    if supervised and not manifest.label:
        raise ConfigError(
            "supervised=True needs a label feature",
            value=list(manifest.features),
            fix="convert with --label COLUMN",
        )
    decisions: dict[str, str] = {}
    # Deterministic by default, training too: reproducible, and on a 2-core machine measured faster
    # than deterministic=False (bench/data_bench.py; see docs/benchmarks.md).
    deterministic = True if deterministic is None else deterministic
    drop_remainder = training if drop_remainder is None else drop_remainder
    pipelines = getattr(input_context, "num_input_pipelines", 1)
    pipeline_id = getattr(input_context, "input_pipeline_id", 0)
    firsts = [s.first_row for s in manifest.shards]
    counts = [s.rows for s in manifest.shards]
    by_file = pipelines > 1 and (len(files) >= 2 * pipelines or len(files) % pipelines == 0)
    if pipelines > 1:
        decisions["shard"] = (
            f"by file ({len(files)} files, {pipelines} workers)"
            if by_file
            else f"by record ({len(files)} files are too few for {pipelines} workers)"
        )
    known = all(c >= 0 for c in counts)
    rows = sum(counts) if known else -1
    if known and pipelines > 1:
        rows = (
            sum(counts[pipeline_id::pipelines])
            if by_file
            else len(range(pipeline_id, sum(counts), pipelines))
        )
    spec = _parse_spec(tf, manifest.features)
    decoders = {n: _decoder(tf, n, f, image_size) for n, f in manifest.features.items()}
    cache_mode, cache_why = _choose_cache(cache, manifest, rows, image_size)
    decisions["cache"] = f"{cache_mode} ({cache_why})"
    buffer = shuffle_buffer or (
        min(max(1024, 16 * batch_size), rows) if rows > 0 else max(1024, 16 * batch_size)
    )
    if training:
        decisions["shuffle_buffer"] = str(buffer)
    parallel = tf.data.AUTOTUNE if autotune else host.cores()
    decisions["parallelism"] = (
        "tf.data autotune" if autotune else f"one call per core ({parallel}), tf.data autotune off"
    ) + ("" if deterministic else ", non-deterministic order")
    cache_path = _cache_path(cache_dir, files, pipeline_id) if cache_mode == "disk" else None
    read = _reader(tf, manifest.compression, on_corrupt)

    def files_stage(_: Any) -> Any:
        ds = tf.data.Dataset.from_tensor_slices(
            (files, tf.constant(firsts, tf.int64), tf.constant(counts, tf.int64))
        )
        if by_file:
            ds = ds.shard(pipelines, pipeline_id)
        if training if shuffle_files is None else shuffle_files:
            ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        return ds

    def read_stage(ds: Any) -> Any:
        cycle = max(1, min(len(files), host.cores(), 16))  # wider only spreads the same cores thinner
        return ds.interleave(read, cycle_length=cycle, num_parallel_calls=cycle, deterministic=deterministic)

    def shard_stage(ds: Any) -> Any:
        return ds.unbatch().shard(pipelines, pipeline_id).batch(CHUNK)

    images = {n for n, f in manifest.features.items() if f.encoding in ("jpeg", "png")}
    per_element = training or bool(images)  # else parse whole output batches, vectorized

    def parse_stage(ds: Any) -> Any:
        if not per_element:
            ds = ds.rebatch(batch_size, drop_remainder=drop_remainder)

        def parse(ids: Any, data: Any) -> Any:
            parsed = tf.io.parse_example(data, spec)
            out = {n: (v if n in images else decoders[n](v)) for n, v in parsed.items()}
            out[ID] = ids
            return out

        ds = ds.map(parse, num_parallel_calls=parallel, deterministic=deterministic)
        return ds.unbatch() if per_element else ds

    # Without a cache between them, decode and augment run as one map: one parallel stage per
    # element instead of two (measured faster on few cores); augmenting before the shuffle is
    # equivalent since both are random per epoch.
    fuse_augment = training and augment is not None and bool(images) and cache_mode == "off"

    def decode_stage(ds: Any) -> Any:
        def decode(element: dict[str, Any]) -> dict[str, Any]:
            out = {n: (decoders[n](v) if n in images else v) for n, v in element.items()}
            return {**augment(out), ID: out[ID]} if fuse_augment else out  # type: ignore[misc]

        return ds.map(decode, num_parallel_calls=parallel, deterministic=deterministic)

    def cache_stage(ds: Any) -> Any:
        return ds.cache(cache_path or "") if cache_mode != "off" else ds

    def shuffle_stage(ds: Any) -> Any:
        return ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)

    def augment_stage(ds: Any) -> Any:
        return ds.map(
            lambda e: {**augment(e), ID: e[ID]},
            num_parallel_calls=parallel,
            deterministic=deterministic,
        )  # type: ignore[misc]

    def batch_stage(ds: Any) -> Any:
        return ds.batch(
            batch_size,
            drop_remainder=drop_remainder,
            num_parallel_calls=parallel,
            deterministic=deterministic,
        )

    def finish_stage(ds: Any) -> Any:
        ds = ds.map(_output(manifest, with_ids=with_ids, supervised=supervised))
        options = parallel_options(tf, autotune=autotune)
        options.deterministic = deterministic
        options.experimental_optimization.map_fusion = True
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.OFF
            if input_context is not None
            else tf.data.experimental.AutoShardPolicy.DATA
        )
        return ds.with_options(options).prefetch(tf.data.AUTOTUNE)

    stages = [
        Stage("files", files_stage),
        Stage("read", read_stage, f"parallel interleave of TFRecord files, chunks of {CHUNK}", CHUNK),
    ]
    if pipelines > 1 and not by_file:
        stages.append(Stage("shard", shard_stage, "by record", CHUNK))
    parsed = 1 if per_element else batch_size
    stages.append(Stage("parse", parse_stage, "vectorized parse_example", parsed))
    # With nothing cached, shuffle the encoded images before decoding them: the buffer holds a
    # third of the bytes, and decoding after the shuffle is the same distribution (decode is
    # deterministic per element). Measured 12% faster on JPEGs (docs/benchmarks.md).
    early_shuffle = training and bool(images) and cache_mode == "off"
    if early_shuffle:
        stages.append(Stage("shuffle", shuffle_stage, f"{buffer} encoded"))
    if images:
        kinds = "/".join(sorted({manifest.features[n].encoding for n in images}))
        detail = f"parallel {kinds} decode" + (" + augment" if fuse_augment else "")
        stages.append(Stage("decode", decode_stage, detail))
    stages.append(Stage("cache", cache_stage, cache_mode, parsed if not images else 1))
    if training and not early_shuffle:
        stages.append(Stage("shuffle", shuffle_stage, str(buffer)))
        if augment is not None and not fuse_augment:
            stages.append(Stage("augment", augment_stage, getattr(augment, "__name__", "augment")))
    if per_element:
        stages.append(
            Stage("batch", batch_stage, f"{batch_size}, drop_remainder={drop_remainder}", batch_size)
        )
    if service:  # the service reads, parses, decodes, augments and batches; prefetch stays here
        once = not training if exactly_once is None else exactly_once
        stages.append(_service_stage(tf, service, exactly_once=once, decisions=decisions))
    stages.append(Stage("prefetch", finish_stage, "AUTOTUNE", batch_size))
    for key, value in decisions.items():
        choices.record(f"data.{key}", value)
    return PipelinePlan(stages=stages, rows=rows, batch_size=batch_size, decisions=decisions)


def pipeline(source: Any, *, batch_size: int, **options: Any) -> Any:
    """A batched tf.data.Dataset from a tfgpu dataset (or TFRecord files with ``features``).

    Args:
        source: a dataset directory written by ``tfgpu convert``, its manifest.json, a Manifest, or
            a list of TFRecord files (then ``features`` gives the schema).
        batch_size: the batch this pipeline yields (per worker under a multi-worker strategy:
            ``input_context.get_per_replica_batch_size(global_batch)``).
        training: shuffle files and examples each epoch, apply ``augment``, drop the remainder.
        input_context: a ``tf.distribute.InputContext``; the pipeline reads its worker's part.
        cache: "auto" (memory if the decoded data fits in a quarter of free RAM, disk otherwise),
            "memory", "disk" (under ``cache_dir``) or "off".
        with_ids: add each example's global row id (key "id"), used to keep prediction order.
        supervised: yield (features, label) instead of one dict.
        on_corrupt: "fail" (naming the file and record) or "skip" (skip and report them).
        image_size: decode and resize images to (height, width) when they were stored unresized.
        autotune: let tf.data's autotuner set parallelism and buffers. Off by default: every
            parallel stage runs one call per core, because on a 2-core machine the autotuner
            settled on one core's worth in about half the runs (docs/benchmarks.md).
        service: a tf.data service address (``tfgpu data-service`` prints it): reading, parsing,
            decoding, augmenting and batching (to this ``batch_size``) run on its workers,
            prefetch here. Batches, not examples, cross the network: one request per example
            cost the trainer's core more than the work it moved (bench/service_bench.py).
        exactly_once: with ``service``, every example once per epoch (static sharding; the
            default when not training) rather than dynamic sharding (the default for training).

    Elements are dicts of batched tensors (plus "id" when asked).
    """
    built = plan(source, batch_size=batch_size, **options).build()
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
    budget = MEMORY_SHARE * _available_memory()
    if need <= budget:
        return "memory", f"{need / 2**20:.0f} MiB decoded fits in a quarter of free RAM"
    return "disk", f"{need / 2**20:.0f} MiB decoded is over a quarter of free RAM ({budget / 2**20:.0f} MiB)"


def _cache_path(cache_dir: str | None, files: list[str], pipeline_id: int) -> str:
    key = hashlib.sha1("|".join(files).encode()).hexdigest()[:12]
    base = Path(cache_dir or tempfile.gettempdir()) / f"tfgpu-cache-{key}"
    base.mkdir(parents=True, exist_ok=True)
    return str(base / f"worker-{pipeline_id}")

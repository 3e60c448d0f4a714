"""``tfgpu convert``: a source (images, table, arrays) to TFRecord shards with a manifest.

Shards are planned from a size estimate (about ``target_shard_mb`` each, never fewer than
``min_shards`` so every worker of a cluster gets several), converted in parallel worker processes
where they pay (the first shard here, timed: ``_run_jobs``), written under temporary names and renamed when complete. Each completed shard leaves a sidecar
(rows, checksum, statistics) in ``.tfgpu/``; a re-run with the same settings verifies and skips
those, so an interrupted conversion resumes. The manifest is written last.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import tfgpu
from tfgpu import host
from tfgpu.data import records
from tfgpu.data.manifest import MANIFEST_NAME, Feature, Manifest, Shard
from tfgpu.data.sources import BadRow, ImageOptions, SourceSpec
from tfgpu.errors import ConfigError, InputError
from tfgpu.files import (
    LISTING_KEPT,
    changed,
    check_output_directory,
    dig,
    file_listing,
    fingerprint,
    listing_changes,
    write_json_atomic,
)
from tfgpu.workers import run_jobs

STATE_DIR = ".tfgpu"
SAMPLE_ROWS = 16


@dataclass(frozen=True)
class ConvertOptions:
    """How to convert; validated here, once."""

    target_shard_mb: float = 128.0
    min_shards: int = 16
    compression: str | None = None  # None or "GZIP"
    resize: tuple[int, int] | None = None
    image_format: str = "jpeg"
    jpeg_quality: int = 95
    label: str | None = None
    columns: tuple[str, ...] | None = None
    image_column: str | None = None
    skip_bad: bool = False
    keep_order: bool = False  # image folders: keep the class-by-class listing order (else shuffled)
    workers: int | None = None

    def __post_init__(self) -> None:
        if self.target_shard_mb <= 0:
            raise ConfigError(
                "target_shard_mb must be above 0", value=self.target_shard_mb, fix="pass e.g. 128"
            )
        if self.min_shards < 1:
            raise ConfigError("min_shards must be at least 1", value=self.min_shards, fix="pass e.g. 16")
        if self.compression not in (None, "GZIP"):
            raise ConfigError(
                "compression must be GZIP or none", value=self.compression, fix="pass --gzip or leave it out"
            )
        if self.image_format not in ("jpeg", "raw"):
            raise ConfigError(
                "image format must be jpeg or raw", value=self.image_format, fix="pass --image-format jpeg"
            )
        if self.resize and (len(self.resize) != 2 or min(self.resize) < 1):
            raise ConfigError(
                "resize must be HEIGHTxWIDTH with both at least 1",
                value=self.resize,
                fix="pass --resize 224x224",
            )
        if not 1 <= self.jpeg_quality <= 100:
            raise ConfigError("jpeg quality must be from 1 to 100", value=self.jpeg_quality, fix="pass 95")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(
                "workers must be at least 1", value=self.workers, fix="leave it out to use every core"
            )

    def identity(self) -> dict[str, Any]:
        """The settings that decide the bytes written; a resume requires them unchanged."""
        data = dataclasses.asdict(self)
        data.pop("workers")
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in data.items()}

    def source_spec(self, source: str | os.PathLike) -> SourceSpec:
        image = ImageOptions(resize=self.resize, image_format=self.image_format, quality=self.jpeg_quality)
        return SourceSpec(
            path=str(source),
            columns=self.columns,
            label=self.label,
            image_column=self.image_column,
            image=image,
            keep_order=self.keep_order,
        )


@dataclass
class ConvertResult:
    manifest: Manifest
    output: Path
    seconds: float
    shards_written: int
    shards_reused: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "output": str(self.output),
            "rows": self.manifest.total_rows,
            "shards": len(self.manifest.shards),
            "shards_written": self.shards_written,
            "shards_reused": self.shards_reused,
            "skipped": len(self.manifest.skipped),
            "bytes": sum(s.bytes for s in self.manifest.shards),
            "seconds": round(self.seconds, 2),
            "manifest": str(self.output / MANIFEST_NAME),
        }


def _estimate_row_bytes(source: Any, features: dict[str, Feature]) -> float:
    """Average stored bytes per row, from a sample (Example overhead about 16 bytes per feature)."""
    sizes = []
    for _, row in source.read(0, min(len(source), SAMPLE_ROWS)):
        if isinstance(row, BadRow):
            continue
        total = 0
        for name, feature in features.items():
            value = row[name]
            if isinstance(value, bytes):
                total += len(value)
            else:
                total += np.asarray(value).size * (
                    4
                    if feature.encoding == "float"
                    else 8
                    if feature.encoding == "int64"
                    else np.asarray(value).itemsize
                )
            total += 16 + len(name)
        sizes.append(total)
    return float(np.mean(sizes)) if sizes else 1024.0


def plan_shards(rows: int, row_bytes: float, options: ConvertOptions) -> list[tuple[int, int]]:
    """Contiguous row ranges, about target_shard_mb each, at least min(min_shards, rows) of them."""
    if rows == 0:
        return []
    by_size = math.ceil(rows * row_bytes / (options.target_shard_mb * 1024 * 1024))
    count = max(1, min(rows, max(by_size, options.min_shards)))
    bounds = np.linspace(0, rows, count + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds) if b > a]


def shard_name(index: int, count: int, compression: str | None) -> str:
    return f"part-{index:05d}-of-{count:05d}.tfrecord" + (".gz" if compression else "")


@dataclass(frozen=True)
class _ShardJob:
    index: int
    start: int
    stop: int
    path: str
    sidecar: str
    spec: SourceSpec
    compression: str | None
    skip_bad: bool


def _convert_shard(job: _ShardJob) -> dict[str, Any]:
    """Worker: read rows [start, stop), write the shard, commit it, write its sidecar."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    source = job.spec.open()
    features = source.features()
    writer = records.ShardWriter(Path(job.path), compression=job.compression)
    skipped: list[dict[str, Any]] = []
    channel_sum = np.zeros(3)
    channel_sq = np.zeros(3)
    pixels = 0
    try:
        for _row, data in source.read(job.start, job.stop):
            if isinstance(data, BadRow):
                if not job.skip_bad:
                    raise InputError(
                        f"Bad input in {data.file}: {data.reason}",
                        fix="fix or remove it, or pass --skip-bad to skip and count bad rows",
                    )
                skipped.append(dataclasses.asdict(data))
                continue
            image = data.pop("_pixels", None)
            if image is not None:
                flat = image.reshape(-1, image.shape[-1]).astype(np.float64)
                channel_sum += flat.sum(axis=0)
                channel_sq += (flat**2).sum(axis=0)
                pixels += flat.shape[0]
            writer.write(records.example_bytes(data, features))
    except BaseException:
        writer.abort()
        raise
    size, digest = writer.commit()
    result = {
        "index": job.index,
        "file": Path(job.path).name,
        "rows": writer.rows,
        "bytes": size,
        "sha256": digest,
        "skipped": skipped,
        "pixel_sum": channel_sum.tolist(),
        "pixel_sq": channel_sq.tolist(),
        "pixels": pixels,
    }
    write_json_atomic(job.sidecar, result)
    return result


def _reusable(job: _ShardJob) -> dict[str, Any] | None:
    """A completed shard from an earlier run, if its file still matches its recorded checksum."""
    import json

    sidecar, path = Path(job.sidecar), Path(job.path)
    if not (sidecar.exists() and path.exists()):
        return None
    try:
        done = json.loads(sidecar.read_text())
    except json.JSONDecodeError:
        return None
    if done.get("bytes") != path.stat().st_size or done.get("sha256") != records.sha256_of(path):
        return None
    return done


def _remove_stale(out: Path) -> None:
    """Delete temporary files left by a conversion that was killed (its process is gone)."""
    for tmp in [*out.glob("*.tmp-*"), *(out / STATE_DIR).glob("*.tmp-*")]:
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            tmp.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _check_foreign(out: Path, *, state: Path, source: str | os.PathLike) -> None:
    """Refuse an output directory that holds files no tfgpu conversion wrote there (no
    ``.tfgpu`` record of one): ``tfgpu convert x.npy userdir/`` replaced the user's own
    ``userdir/manifest.json`` without a word. The source itself may lie inside it."""
    if not out.is_dir() or state.is_dir():
        return
    inside = Path(source).resolve()
    foreign = sorted(
        p.name for p in out.iterdir() if p.resolve() != inside and not inside.is_relative_to(p.resolve())
    )
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise InputError(
            f"The output directory {out} holds files tfgpu convert did not write ({shown})",
            value=str(out),
            fix="convert into an empty or new directory, or pass --overwrite to write there "
            "(tfgpu's shards and manifest.json replace files of those names)",
        )


def _check_resume(state: Path, identity: dict[str, Any], source: str, *, overwrite: bool) -> None:
    """Resume only the conversion that made OUTPUT: the same source (what it holds: its files,
    sizes and modification times) and options; ``overwrite`` deletes what is there instead."""
    import json

    out = state.parent
    plan_file = state / "settings.json"
    wanted = {
        "source": str(Path(source).resolve()),
        "content": fingerprint(source, exclude=out),
        "options": identity,
    }
    listing = file_listing(source, exclude=out)
    made = [*out.glob("part-*-of-*.tfrecord*"), *[p for p in [out / MANIFEST_NAME] if p.exists()]]
    if overwrite:
        shutil.rmtree(state, ignore_errors=True)
        for item in made:
            item.unlink()
        state.mkdir(parents=True)
    elif plan_file.exists():
        # a conversion by a tfgpu that did not record the content is judged on what it recorded
        earlier = {"content": wanted["content"], **json.loads(plan_file.read_text())}
        before = earlier.pop("listing", None)
        different = changed(earlier, wanted)
        if different:
            names = {"content": "the source's files", "source": "the source path", "options": "the options"}
            parts = sorted({names[k.split(".")[0]] for k in different})
            files = listing_changes(before, listing) if before is not None else ""
            raise InputError(
                f"{out} holds a conversion made from other input: {' and '.join(parts)} changed since"
                + (f" ({files})" if files else ""),
                value={k: {"then": dig(earlier, k), "now": dig(wanted, k)} for k in different},
                fix="convert into a new directory, or pass --overwrite to delete that conversion and start over",
            )
    kept = {"listing": listing} if len(listing) <= LISTING_KEPT else {}  # names what changed, next time
    write_json_atomic(plan_file, {**wanted, **kept})


# a worker process's start: it imports TensorFlow (3.7-4.3 s here beside a test run, 2.5 s alone)
WORKER_START_S = 3.0


def _run_jobs(
    jobs: list[_ShardJob], workers: int, on_shard: Callable[[dict[str, Any]], None], *, measured: bool
) -> list[dict[str, Any]]:
    """Convert ``jobs``, here or in ``workers`` processes; ``measured`` (no worker count asked):
    the first shard is converted here and timed, and the rest go to worker processes only when
    converting them here would take longer than starting the workers and converting them there.
    A few hundred small images convert here in about a second, where 16 workers each importing
    TensorFlow cost the demo 40 s on the H100 host (issue 54)."""
    results: list[dict[str, Any]] = []
    rest = jobs
    if measured and workers > 1 and len(jobs) > 1:
        import tensorflow  # noqa: F401  (here as in each worker: a start, not the shard's time)

        started = time.perf_counter()
        results.append(_convert_shard(jobs[0]))
        on_shard(results[0])
        per_shard, rest = time.perf_counter() - started, jobs[1:]
        if per_shard * len(rest) <= WORKER_START_S + per_shard * len(rest) / workers:
            workers = 1
    if workers <= 1 or len(rest) <= 1:
        done = (_convert_shard(job) for job in rest)
    else:
        done = run_jobs(_convert_shard, rest, workers=min(workers, len(rest)))
    try:
        for result in done:
            results.append(result)
            on_shard(result)
    finally:
        # an exception from on_shard (or Ctrl-C) leaves the generator suspended, its pool still
        # converting; closing it stops the pool now, so the caller's cleanup sees dead workers
        done.close()
    return results


def _stats(results: list[dict[str, Any]]) -> dict[str, Any]:
    pixels = sum(r["pixels"] for r in results)
    if not pixels:
        return {}
    total = np.sum([r["pixel_sum"] for r in results], axis=0)
    squares = np.sum([r["pixel_sq"] for r in results], axis=0)
    mean = total / pixels
    std = np.sqrt(np.maximum(squares / pixels - mean**2, 0.0))
    return {
        "image_mean": [round(float(v), 4) for v in mean],
        "image_std": [round(float(v), 4) for v in std],
        "pixels": int(pixels),
    }


def convert(
    source: str | os.PathLike,
    output: str | os.PathLike,
    *,
    options: ConvertOptions | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    overwrite: bool = False,
) -> ConvertResult:
    """Convert ``source`` into TFRecord shards and a manifest under ``output``.

    ``on_progress(rows_done, rows_total)`` is called as shards complete. A re-run resumes the
    same conversion; another source content or options is an InputError unless ``overwrite``.
    """
    options = options or ConvertOptions()
    out = check_output_directory(output, command="tfgpu convert")
    started = time.perf_counter()
    spec = options.source_spec(source)
    opened = spec.open()
    features = opened.features()
    rows = len(opened)
    state = out / STATE_DIR
    if not overwrite:
        _check_foreign(out, state=state, source=source)
    state.mkdir(parents=True, exist_ok=True)
    _check_resume(state, options.identity(), str(source), overwrite=overwrite)
    _remove_stale(out)
    ranges = plan_shards(rows, _estimate_row_bytes(opened, features), options)
    jobs = [
        _ShardJob(
            i,
            a,
            b,
            str(out / shard_name(i, len(ranges), options.compression)),
            str(state / f"part-{i:05d}.json"),
            spec,
            options.compression,
            options.skip_bad,
        )
        for i, (a, b) in enumerate(ranges)
    ]
    reused = {job.index: found for job in jobs if (found := _reusable(job)) is not None}
    done_rows = sum(b - a for i, (a, b) in enumerate(ranges) if i in reused)

    def progressed(result: dict[str, Any]) -> None:
        nonlocal done_rows
        done_rows += jobs[result["index"]].stop - jobs[result["index"]].start
        if on_progress:
            on_progress(done_rows, rows)

    if on_progress:
        on_progress(done_rows, rows)
    todo = [job for job in jobs if job.index not in reused]
    workers = min(options.workers or host.cores(), max(1, len(todo)))
    try:
        fresh = {
            r["index"]: r for r in _run_jobs(todo, workers, progressed, measured=options.workers is None)
        }
    except BaseException:
        # a bad row (or Ctrl-C) stops the pool, killing workers mid-shard: their temporary files
        # go too, so the directory holds only complete shards (resumable) and nothing half-written
        _remove_stale(out)
        raise
    results = [reused.get(i) or fresh[i] for i in range(len(jobs))]
    manifest = _manifest(results, features, opened, options, str(source), out)
    manifest.save(out)
    return ConvertResult(manifest, out, time.perf_counter() - started, len(fresh), len(reused))


def _row_order(opened: Any) -> str:
    if getattr(opened, "shuffled", False):
        return "shuffled once at conversion (sorted by a hash of each file's path); --keep-order keeps the listing"
    return "source order"


def _manifest(
    results: list[dict[str, Any]],
    features: dict[str, Feature],
    opened: Any,
    options: ConvertOptions,
    source: str,
    out: Path,
) -> Manifest:
    shards, first = [], 0
    for r in results:
        shards.append(
            Shard(file=r["file"], rows=r["rows"], first_row=first, bytes=r["bytes"], sha256=r["sha256"])
        )
        first += r["rows"]
    return Manifest(
        features=features,
        shards=shards,
        compression=options.compression,
        class_names=list(opened.class_names) if hasattr(opened, "class_names") else [],
        label=opened.label if opened.label else None,
        stats=_stats(results),
        skipped=[s for r in results for s in r["skipped"]],
        created_by={
            "tool": "tfgpu convert",
            "version": tfgpu.__version__,
            "source": str(Path(source).resolve()),
            "source_kind": opened.kind,
            "row_order": _row_order(opened),
            "options": options.identity(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        directory=out,
    )

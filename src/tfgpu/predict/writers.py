"""Prediction output: shards in input order, each covering a fixed row range, written safely.

Batches may arrive out of order (parallel non-deterministic reads, bucketing, several replicas);
``OrderedShards`` keeps a reorder buffer and writes a shard as soon as all of its rows are there,
so memory holds one shard's rows plus the rows that arrived early. A shard is written under a
temporary name and renamed when complete; its name is its row range, so a resumed run knows which
rows are done and a reader in name order reads the input order.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tfgpu.errors import InputError

log = logging.getLogger(__name__)

FORMATS = {"parquet": ".parquet", "npy": ".npz", "tfrecord": ".tfrecord"}
SHARD_RE = re.compile(r"^part-(\d{12})-(\d{12})\.(parquet|npz|tfrecord)$")
ID = "row_id"


@dataclass(frozen=True)
class ShardInfo:
    file: str
    first_row: int
    rows: int


def completed_shards(directory: Path, fmt: str) -> list[ShardInfo]:
    found = []
    for path in directory.glob(f"part-*{FORMATS[fmt]}"):
        match = SHARD_RE.match(path.name)
        if match:
            first, stop = int(match.group(1)), int(match.group(2))
            found.append(ShardInfo(path.name, first, stop - first))
    return sorted(found, key=lambda s: s.first_row)


def resume_row(directory: Path, fmt: str, start: int, stop: int) -> int:
    """The first row of [start, stop) not covered by completed shards (they form a prefix)."""
    row = start
    for shard in completed_shards(directory, fmt):
        if shard.first_row == row and row < stop:
            row += shard.rows
    return row


def _write(path: Path, fmt: str, ids: np.ndarray, outputs: dict[str, np.ndarray]) -> None:
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    if fmt == "npy":
        with tmp.open("wb") as handle:
            np.savez(handle, **{ID: ids}, **outputs)
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns = {ID: pa.array(ids)}
        for name, values in outputs.items():
            flat = values.reshape(len(values), -1) if values.ndim > 1 else values
            if flat.ndim == 2:
                columns[name] = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])
            else:
                columns[name] = pa.array(flat)
        pq.write_table(pa.table(columns), tmp, use_dictionary=False)  # unique ids, float outputs
    else:
        import tensorflow as tf

        with tf.io.TFRecordWriter(str(tmp)) as writer:
            for k, row_id in enumerate(ids):
                feature = {ID: tf.train.Feature(int64_list=tf.train.Int64List(value=[int(row_id)]))}
                for name, values in outputs.items():
                    value = np.ravel(values[k])
                    if value.dtype.kind in "iub":
                        feature[name] = tf.train.Feature(
                            int64_list=tf.train.Int64List(value=value.astype(np.int64))
                        )
                    elif value.dtype.kind in "SOU":
                        feature[name] = tf.train.Feature(
                            bytes_list=tf.train.BytesList(value=[bytes(v) for v in value])
                        )
                    else:
                        feature[name] = tf.train.Feature(
                            float_list=tf.train.FloatList(value=value.astype(np.float32))
                        )
                writer.write(
                    tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
                )
    os.replace(tmp, path)


class Background:
    """Run ``work(*item)`` for each item put, in order, on one background thread.

    ``put`` blocks while ``depth`` items wait, which bounds memory. The first error stops the
    work and is raised again in the caller, at the next ``put`` or when the block ends.
    """

    def __init__(self, work: Callable[..., None], *, depth: int) -> None:
        self._work = work
        self._queue: queue.Queue[tuple[Any, ...] | None] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="tfgpu-predict-writer", daemon=True)

    def __enter__(self) -> Background:
        self._thread.start()
        return self

    def put(self, *item: Any) -> None:
        self._raise()
        self._queue.put(item)

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        self._queue.put(None)
        self._thread.join()
        if kind is None:
            self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._work(*item)
                except BaseException as exc:  # handed to the caller's thread
                    self._error = exc


class OrderedShards:
    """Collect (ids, outputs) batches in any order; write shards of ``rows_per_shard`` in order."""

    def __init__(self, directory: Path, *, fmt: str, start: int, stop: int, rows_per_shard: int) -> None:
        self.directory, self.fmt, self.stop, self.rows_per_shard = directory, fmt, stop, rows_per_shard
        self.next_row = start
        self.shard_first = start
        self.ready_ids: list[np.ndarray] = []
        self.ready: list[dict[str, np.ndarray]] = []
        self.pending_ids = np.zeros(0, np.int64)
        self.pending: dict[str, np.ndarray] | None = None
        self.written: list[ShardInfo] = []
        self.columns: dict[str, dict[str, Any]] = {}

    def add(self, ids: np.ndarray, outputs: dict[str, np.ndarray]) -> None:
        if len(ids) and ids.min() < 0:  # padding rows carry id -1 (last batch only: no copy before)
            keep = ids >= 0
            ids = ids[keep]
            outputs = {k: v[keep] for k, v in outputs.items()}
        if not self.columns:
            self.columns = {
                k: {"dtype": v.dtype.name, "shape": list(v.shape[1:])} for k, v in outputs.items()
            }
        if self.pending is None:
            self.pending = {k: v[:0] for k, v in outputs.items()}
        if not len(self.pending_ids) and len(ids) and ids[0] == self.next_row and np.all(np.diff(ids) == 1):
            self._ready(ids, outputs)  # the usual case: rows arrive in order
            return
        self.pending_ids = np.concatenate([self.pending_ids, ids])
        self.pending = {k: np.concatenate([self.pending[k], outputs[k]]) for k in outputs}
        order = np.argsort(self.pending_ids, kind="stable")
        self.pending_ids = self.pending_ids[order]
        self.pending = {k: v[order] for k, v in self.pending.items()}
        expected = self.next_row + np.arange(len(self.pending_ids))
        run = (
            int(np.argmin(self.pending_ids == expected))
            if not np.all(self.pending_ids == expected)
            else len(expected)
        )
        if run:
            self._ready(self.pending_ids[:run], {k: v[:run] for k, v in self.pending.items()})
            self.pending_ids = self.pending_ids[run:]
            self.pending = {k: v[run:] for k, v in self.pending.items()}

    def _ready(self, ids: np.ndarray, outputs: dict[str, np.ndarray]) -> None:
        while len(ids):
            room = self.shard_first + self.rows_per_shard - self.next_row
            take = min(room, len(ids))
            self.ready_ids.append(ids[:take])
            self.ready.append({k: v[:take] for k, v in outputs.items()})
            self.next_row += take
            ids, outputs = ids[take:], {k: v[take:] for k, v in outputs.items()}
            if self.next_row - self.shard_first == self.rows_per_shard or self.next_row == self.stop:
                self._flush()

    def _flush(self) -> None:
        if not self.ready_ids:
            return
        ids = np.concatenate(self.ready_ids)
        outputs = {k: np.concatenate([r[k] for r in self.ready]) for k in self.ready[0]}
        name = f"part-{self.shard_first:012d}-{self.next_row:012d}{FORMATS[self.fmt]}"
        _write(self.directory / name, self.fmt, ids, outputs)
        log.info("wrote shard %s (rows %d to %d)", name, self.shard_first, self.next_row - 1)
        self.written.append(ShardInfo(name, self.shard_first, len(ids)))
        self.shard_first = self.next_row
        self.ready_ids, self.ready = [], []

    def finish(self) -> None:
        if len(self.pending_ids) or self.next_row != self.stop:
            raise InputError(
                f"Prediction ended at row {self.next_row} of {self.stop} with {len(self.pending_ids)} rows out of order",
                value={"next_row": self.next_row, "stop": self.stop},
                fix="the input changed while predicting, or rows were dropped: re-run into a new directory",
            )
        self._flush()


def read_output(directory: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every prediction, in input order, from an output directory (a convenience for checks)."""
    directory = Path(directory)
    manifest = json.loads((directory / "manifest.json").read_text())
    fmt = manifest["format"]
    parts: dict[str, list[np.ndarray]] = {}
    for shard in manifest["shards"]:
        path = directory / shard["file"]
        if fmt == "npy":
            with np.load(path) as data:
                columns = {k: data[k] for k in data.files}
        elif fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pq.read_table(path)
            columns = {}
            for name in table.column_names:
                column = table.column(name).combine_chunks()
                if pa.types.is_fixed_size_list(column.type):
                    shape = manifest["columns"].get(name, {}).get("shape") or [-1]
                    columns[name] = (
                        column.flatten().to_numpy(zero_copy_only=False).reshape(len(column), *shape)
                    )
                else:
                    columns[name] = column.to_numpy(zero_copy_only=False)
        else:
            import tensorflow as tf

            rows: dict[str, list] = {}
            for record in tf.data.TFRecordDataset(str(path)):
                example = tf.train.Example.FromString(record.numpy())
                for name, feature in example.features.feature.items():
                    kind = feature.WhichOneof("kind")
                    rows.setdefault(name, []).append(list(getattr(feature, kind).value))
            columns = {
                k: np.asarray(v).squeeze(-1) if np.asarray(v).shape[-1] == 1 else np.asarray(v)
                for k, v in rows.items()
            }
        for name, values in columns.items():
            parts.setdefault(name, []).append(values)
    return {k: np.concatenate(v) for k, v in parts.items()}

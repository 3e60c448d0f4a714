"""Rows to tf.train.Example bytes, and TFRecord shard files written safely.

Runs in the converter's worker processes. A shard is written under a temporary name and renamed
only when complete, with a sidecar recording its rows and checksum, so an interrupted conversion
leaves only complete shards and can resume.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from tfgpu.data.manifest import Feature


def example_bytes(row: dict[str, Any], features: dict[str, Feature]) -> bytes:
    """Serialize one row as a tf.train.Example, each feature by its manifest encoding."""
    import tensorflow as tf

    out = {}
    for name, feature in features.items():
        value = row[name]
        if feature.encoding == "int64":
            out[name] = tf.train.Feature(
                int64_list=tf.train.Int64List(value=np.ravel(value).astype(np.int64))
            )
        elif feature.encoding == "float":
            out[name] = tf.train.Feature(
                float_list=tf.train.FloatList(value=np.ravel(value).astype(np.float32))
            )
        elif feature.encoding == "raw":
            data = np.ascontiguousarray(value, dtype=feature.dtype).tobytes()
            out[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[data]))
        else:  # bytes, jpeg, png
            data = value if isinstance(value, bytes) else str(value).encode()
            out[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[data]))
    return tf.train.Example(features=tf.train.Features(feature=out)).SerializeToString()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class ShardWriter:
    """Writes one shard to ``<name>.tmp-<pid>``; ``commit`` renames it into place."""

    def __init__(self, path: Path, *, compression: str | None) -> None:
        import tensorflow as tf

        self.path = path
        self.tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
        options = tf.io.TFRecordOptions(compression_type=compression or "")
        self._writer = tf.io.TFRecordWriter(str(self.tmp), options)
        self.rows = 0

    def write(self, record: bytes) -> None:
        self._writer.write(record)
        self.rows += 1

    def commit(self) -> tuple[int, str]:
        """Close, rename into place; returns (bytes, sha256)."""
        self._writer.close()
        digest = sha256_of(self.tmp)
        size = self.tmp.stat().st_size
        os.replace(self.tmp, self.path)
        return size, digest

    def abort(self) -> None:
        self._writer.close()
        self.tmp.unlink(missing_ok=True)

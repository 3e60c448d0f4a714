"""Check every shard of a dataset against its manifest: size, checksum, record count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tfgpu.data.manifest import Manifest, load
from tfgpu.data.records import sha256_of


def verify(source: str | Manifest, *, checksums: bool = True) -> list[dict[str, Any]]:
    """Problems found, one dict per bad shard ({file, problem, readable_records}); [] when all is well.

    Each shard must hold the rows the manifest claims: its row range follows the one before (row
    ids are computed from these ranges), its record count, size and checksum match.
    """
    import tensorflow as tf

    manifest = source if isinstance(source, Manifest) else load(source)
    problems = []
    expected = 0
    for shard, path in zip(manifest.shards, manifest.files(), strict=True):
        if shard.first_row != expected:  # row ids come from these ranges: a gap or an overlap
            problems.append(
                {
                    "file": path,
                    "problem": f"starts at row {shard.first_row}, but the shards before it end at row {expected}",
                    "readable_records": None,
                }
            )
        expected = shard.first_row + shard.rows
        file = Path(path)
        if not file.exists():
            problems.append({"file": path, "problem": "missing", "readable_records": 0})
            continue
        if checksums and (file.stat().st_size != shard.bytes or sha256_of(file) != shard.sha256):
            problem = "checksum differs from the manifest"
        else:
            problem = None
        readable = 0
        try:
            for _ in tf.data.TFRecordDataset(path, compression_type=manifest.compression or ""):
                readable += 1
        except tf.errors.DataLossError:
            problem = f"record number {readable} cannot be read (corrupt or truncated)"
        if readable != shard.rows and problem is None:
            problem = f"{readable} records, the manifest lists {shard.rows}"
        if problem:
            problems.append({"file": path, "problem": problem, "readable_records": readable})
    return problems

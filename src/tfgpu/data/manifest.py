"""``manifest.json``: the schema and inventory of a tfgpu TFRecord dataset.

Readers need no hand-written parse function: every feature's dtype, shape and encoding is here,
with the shards (file, rows, first row id, bytes, sha256), class names, per-channel statistics and
how the dataset was made.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfgpu.errors import InputError
from tfgpu.files import write_json_atomic

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1
# Encodings: "int64" / "float" (tf.train.Feature lists), "bytes" (strings), "raw" (a fixed-shape array
# stored as its bytes, exact for any dtype), "jpeg" / "png" (an encoded image, decoded to uint8).
ENCODINGS = ("int64", "float", "bytes", "raw", "jpeg", "png")
DTYPE_SIZE = {
    "uint8": 1,
    "int8": 1,
    "bool": 1,
    "float16": 2,
    "int16": 2,
    "uint16": 2,
    "float32": 4,
    "int32": 4,
    "uint32": 4,
    "float64": 8,
    "int64": 8,
    "uint64": 8,
}


@dataclass(frozen=True)
class Feature:
    """One feature: its dtype and shape after decoding, and how it is stored."""

    dtype: str
    shape: tuple[int | None, ...]
    encoding: str

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ValueError(f"unknown encoding {self.encoding!r}")
        object.__setattr__(self, "shape", tuple(self.shape))

    @property
    def fixed(self) -> bool:
        return all(d is not None for d in self.shape)

    def decoded_bytes(self) -> int | None:
        """Bytes per example once decoded (None when the shape varies); cache sizing uses it."""
        if self.dtype == "string":
            return 64
        if not self.fixed:
            return None
        return math.prod(self.shape) * DTYPE_SIZE.get(self.dtype, 8)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Shard:
    file: str  # relative to the dataset directory
    rows: int
    first_row: int
    bytes: int
    sha256: str


@dataclass
class Manifest:
    features: dict[str, Feature]
    shards: list[Shard]
    compression: str | None = None  # None or "GZIP"
    class_names: list[str] = field(default_factory=list)
    label: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    created_by: dict[str, Any] = field(default_factory=dict)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    version: int = FORMAT_VERSION
    directory: Path | None = None  # where it was loaded from; not stored

    @property
    def total_rows(self) -> int:
        return sum(s.rows for s in self.shards)

    @property
    def known_rows(self) -> int:
        """The rows, or -1 when a shard's count is unknown."""
        return self.total_rows if all(s.rows >= 0 for s in self.shards) else -1

    def files(self) -> list[str]:
        base = self.directory or Path(".")
        return [str(base / s.file) for s in self.shards]

    def decoded_bytes_per_row(self) -> int | None:
        sizes = [f.decoded_bytes() for f in self.features.values()]
        return None if any(s is None for s in sizes) else sum(sizes)  # type: ignore[misc]

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "total_rows": self.total_rows,
            "compression": self.compression,
            "label": self.label,
            "class_names": self.class_names,
            "features": {
                k: {"dtype": f.dtype, "shape": list(f.shape), "encoding": f.encoding}
                for k, f in self.features.items()
            },
            "shards": [dataclasses.asdict(s) for s in self.shards],
            "stats": self.stats,
            "skipped": self.skipped,
            "created_by": self.created_by,
        }

    def save(self, directory: str | os.PathLike) -> Path:
        """Write manifest.json atomically (temporary name, then rename)."""
        return write_json_atomic(Path(directory) / MANIFEST_NAME, self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, directory: Path | None = None) -> Manifest:
        features = {
            k: Feature(v["dtype"], tuple(v["shape"]), v["encoding"]) for k, v in data["features"].items()
        }
        return cls(
            features=features,
            shards=[Shard(**s) for s in data["shards"]],
            compression=data.get("compression"),
            class_names=list(data.get("class_names") or []),
            label=data.get("label"),
            stats=data.get("stats") or {},
            created_by=data.get("created_by") or {},
            skipped=data.get("skipped") or [],
            version=int(data.get("version", FORMAT_VERSION)),
            directory=directory,
        )


def load(path: str | os.PathLike) -> Manifest:
    """Load a manifest from a dataset directory or the manifest.json file itself."""
    path = Path(path)
    file = path / MANIFEST_NAME if path.is_dir() else path
    if not file.exists():
        raise InputError(
            f"No tfgpu manifest at {file}",
            value=str(path),
            fix="point at a directory written by `tfgpu convert`, or convert your data first",
        )
    try:
        data = json.loads(file.read_text())
        manifest = Manifest.from_dict(data, directory=file.parent)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise InputError(
            f"{file} is not a valid tfgpu manifest ({exc})",
            fix="re-run `tfgpu convert` into a new directory",
        ) from None
    if manifest.version > FORMAT_VERSION:
        raise InputError(
            f"{file} was written by a newer tfgpu (format {manifest.version})",
            value=manifest.version,
            fix="upgrade tfgpu",
        )
    return manifest

"""Sources ``tfgpu convert`` reads: an image folder (one subfolder per class), CSV / Parquet tables,
NumPy ``.npy`` / ``.npz`` arrays.

A source is cheap to open, knows its row count and feature schema, and reads any row range, so
shards can be converted in parallel processes that each open the source themselves. Rows come out
as dicts of NumPy values / bytes, already preprocessed (images resized and encoded). Bad input
raises InputError naming the file and row; with ``skip_bad`` the row is reported instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tfgpu.data.manifest import Feature
from tfgpu.errors import InputError

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp"}
TABLE_SUFFIXES = {".csv", ".parquet", ".pq"}
ARRAY_SUFFIXES = {".npy", ".npz"}
SMALL = 256  # per-row element count up to which numbers go in int64/float lists


@dataclass(frozen=True)
class ImageOptions:
    resize: tuple[int, int] | None = None  # (height, width)
    image_format: str = "jpeg"  # "jpeg" (re-encoded when resized) or "raw" (decoded uint8)
    quality: int = 95


@dataclass(frozen=True)
class BadRow:
    """A row that could not be read, reported when skipping bad input."""

    row: int
    file: str
    reason: str


class _ImageEncoder:
    def __init__(self, options: ImageOptions) -> None:
        self.options = options

    def feature(self, first_size: tuple[int, int] | None, *, all_same: bool = False) -> Feature:
        """The stored feature: a fixed shape when resized, stored raw, or when every image has the
        same size (``all_same``), so the pipeline batches them without ``image_size``."""
        size = self.options.resize or first_size
        if self.options.image_format == "raw":
            return Feature("uint8", (size[0], size[1], 3), "raw")  # type: ignore[index]
        fixed = self.options.resize or all_same
        shape = (size[0], size[1], 3) if fixed else (None, None, 3)  # type: ignore[index]
        return Feature("uint8", shape, "jpeg")

    def encode(self, path: Path, expected: Feature) -> tuple[bytes | np.ndarray, np.ndarray]:
        """(stored value, decoded pixels) for one image file; raises on unreadable input."""
        from PIL import Image, UnidentifiedImageError

        try:
            raw = path.read_bytes()
            with Image.open(io.BytesIO(raw)) as image:
                image.load()
                original_format = image.format
                rgb = image.convert("RGB")
        except UnidentifiedImageError:
            raise ValueError("not an image file Pillow can read") from None
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read image: {exc}") from None
        if self.options.resize:
            height, width = self.options.resize
            if rgb.size != (width, height):
                rgb = rgb.resize((width, height), Image.BILINEAR)
        pixels = np.asarray(rgb, dtype=np.uint8)
        if expected.fixed and pixels.shape != expected.shape:
            raise ValueError(
                f"image is {pixels.shape[0]}x{pixels.shape[1]}, the others {expected.shape[0]}x{expected.shape[1]}: pass --resize HxW"
            )
        if expected.encoding == "raw":
            return pixels, pixels
        if original_format == "JPEG" and not self.options.resize:
            return raw, pixels  # keep the original bytes: no second lossy encode
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, format="JPEG", quality=self.options.quality)
        return out.getvalue(), pixels


def _image_size(path: Path) -> tuple[int, int] | None:
    """(height, width) from the file's header, None when unreadable (the row's worker names it,
    or skips it under --skip-bad). About 65 us a file here (warm cache): a minute for a million."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            return image.size[1], image.size[0]
    except (OSError, ValueError):
        return None


def _first_image_size(path: Path) -> tuple[int, int]:
    from PIL import Image

    try:
        with Image.open(path) as image:
            return image.size[1], image.size[0]
    except OSError as exc:
        raise InputError(
            f"Cannot read image {path}: {exc}", fix="remove or replace the file, or pass --skip-bad"
        ) from None


def _path_hash(relative: Path) -> bytes:
    return hashlib.blake2b(relative.as_posix().encode(), digest_size=8).digest()


class ImageFolderSource:
    """root/<class name>/<image files>: label = index of the class name in sorted order.

    Rows are shuffled by default (``shuffled=True``). A listing is class by class, so shards written
    in that order each hold one or two classes, and a reader that interleaves a few files into a
    bounded shuffle buffer yields batches of one or two classes (measured: 2.5-3.5 classes of 4 per
    batch). As TensorFlow's own build_image_data.py and TFDS do, the rows are shuffled once, here:
    sorted by a hash of each file's path under the root, which is the same on every run, in every
    worker process and on every NumPy version, so a resumed conversion writes the same shards.
    """

    kind = "images"

    def __init__(self, root: Path, *, image: ImageOptions, shuffled: bool = True) -> None:
        self.root = root
        self.shuffled = shuffled
        self.class_names = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not self.class_names:
            raise InputError(
                f"{root} has no class subfolders",
                value=str(root),
                fix="put the images in one subfolder per class, e.g. root/cat/1.jpg, root/dog/2.jpg",
            )
        self.items: list[tuple[Path, int]] = []
        for label, name in enumerate(self.class_names):
            files = sorted(
                p for p in (root / name).rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()
            )
            self.items += [(p, label) for p in files]
        if shuffled:
            self.items.sort(key=lambda item: _path_hash(item[0].relative_to(root)))
        if not self.items:
            raise InputError(
                f"No images under {root}",
                value=str(root),
                fix=f"add files ending in {', '.join(sorted(IMAGE_SUFFIXES))}",
            )
        self.encoder = _ImageEncoder(image)
        sizes = set() if image.resize else {_image_size(p) for p, _ in self.items} - {None}
        first = None if image.resize else _first_image_size(self.items[0][0])
        image_feature = self.encoder.feature(first, all_same=len(sizes) == 1)
        self._features = {"image": image_feature, "label": Feature("int64", (), "int64")}

    def __len__(self) -> int:
        return len(self.items)

    def features(self) -> dict[str, Feature]:
        return self._features

    label = "label"

    def read(self, start: int, stop: int) -> Iterator[tuple[int, dict[str, Any] | BadRow]]:
        feature = self._features["image"]
        for row in range(start, stop):
            path, label = self.items[row]
            try:
                stored, pixels = self.encoder.encode(path, feature)
            except ValueError as exc:
                yield row, BadRow(row, str(path), str(exc))
                continue
            yield row, {"image": stored, "label": np.int64(label), "_pixels": pixels}


def numpy_dtype(arrow_type: Any) -> np.dtype:
    """The NumPy dtype of an Arrow type's values, without pandas: pyarrow < 26's
    ``to_pandas_dtype`` imports it, and tfgpu does not install it (a CSV failed to convert)."""
    import pyarrow as pa

    return pa.array([], type=arrow_type).to_numpy(zero_copy_only=False).dtype


def _arrow_feature(name: str, arrow_type: Any) -> Feature:
    import pyarrow as pa

    if pa.types.is_boolean(arrow_type):
        return Feature("bool", (), "int64")
    if pa.types.is_integer(arrow_type):
        dtype = numpy_dtype(arrow_type).name
        return Feature(dtype, (), "raw" if dtype == "uint64" else "int64")
    if pa.types.is_float32(arrow_type):
        return Feature("float32", (), "float")
    if pa.types.is_floating(arrow_type):
        return Feature(str(numpy_dtype(arrow_type)), (), "raw")
    if (
        pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
        or pa.types.is_binary(arrow_type)
    ):
        return Feature("string", (), "bytes")
    raise InputError(
        f"Column {name!r} has type {arrow_type}, which tfgpu cannot store",
        fix="cast it to a number or string column",
    )


def _malformed_row(path: Path) -> Any:
    """The first row of a CSV file with the wrong number of fields (its line number included), or
    None. A second, single-threaded read: only it numbers the lines, and only errors pay for it."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    found: list[Any] = []

    def stop_at(row: Any) -> str:
        found.append(row)
        return "error"

    with contextlib.suppress(pa.ArrowInvalid, OSError):  # the row is what this read is for
        pcsv.read_csv(
            path,
            read_options=pcsv.ReadOptions(use_threads=False),
            parse_options=pcsv.ParseOptions(invalid_row_handler=stop_at),
        )
    return found[0] if found and found[0].number is not None else None


class TableSource:
    """CSV or Parquet: each column a feature; ``image_column`` holds image paths (relative to the file)."""

    kind = "table"

    def __init__(
        self,
        path: Path,
        *,
        columns: list[str] | None,
        label: str | None,
        image_column: str | None,
        image: ImageOptions,
    ) -> None:
        self.path = path
        self.table = self._read(path)
        available = list(self.table.column_names)
        wanted = list(columns) if columns else list(available)
        for extra in (label, image_column):
            if extra and extra not in wanted:
                wanted.append(extra)
        missing = [c for c in wanted if c not in available]
        if missing:
            raise InputError(
                f"{path} has no column {missing[0]!r}",
                value=missing,
                fix=f"use one of its columns: {', '.join(available)}",
            )
        self.table = self.table.select(wanted)
        self.label = label
        self.image_column = image_column
        self.encoder = _ImageEncoder(image)
        self._features = {}
        for name in wanted:
            if name == image_column:
                first = None if image.resize else _first_image_size(self._image_path(0))
                self._features[name] = self.encoder.feature(first)
            else:
                self._features[name] = _arrow_feature(name, self.table.schema.field(name).type)
        self.class_names: list[str] = []
        if label and self._features[label].dtype == "string":
            self.class_names = sorted({v for v in self.table.column(label).to_pylist() if v is not None})
            self._features[label] = Feature("int64", (), "int64")

    @staticmethod
    def _read(path: Path) -> Any:
        import pyarrow as pa

        try:
            if path.suffix.lower() == ".csv":
                import pyarrow.csv as pcsv

                return pcsv.read_csv(path)
            import pyarrow.parquet as pq

            return pq.read_table(path)
        except (pa.ArrowInvalid, OSError) as exc:
            bad = _malformed_row(path) if path.suffix.lower() == ".csv" else None
            where = f"{path}, line {bad.number}" if bad is not None else str(path)
            detail = (
                f" (that line has {bad.actual_columns} fields, the header {bad.expected_columns})"
                if bad
                else ""
            )
            raise InputError(
                f"Cannot read table {where}: {str(exc).splitlines()[0]}",
                fix=f"check the file is complete and well-formed{detail}",
            ) from None

    def _image_path(self, row: int) -> Path:
        value = self.table.column(self.image_column)[row].as_py()
        path = Path(str(value))
        return path if path.is_absolute() else self.path.parent / path

    def __len__(self) -> int:
        return self.table.num_rows

    def features(self) -> dict[str, Feature]:
        return self._features

    def read(self, start: int, stop: int) -> Iterator[tuple[int, dict[str, Any] | BadRow]]:
        columns = {
            name: self.table.column(name).slice(start, stop - start).to_pylist() for name in self._features
        }
        for offset in range(stop - start):
            row = start + offset
            out: dict[str, Any] = {}
            bad = None
            for name, feature in self._features.items():
                value = columns[name][offset]
                if value is None:
                    bad = BadRow(row, str(self.path), f"row {row + 1} has no value in column {name!r}")
                    break
                if name == self.image_column:
                    try:
                        out[name], out["_pixels"] = self.encoder.encode(self._image_path(row), feature)
                    except (ValueError, OSError) as exc:
                        bad = BadRow(row, str(self._image_path(row)), f"row {row + 1}: {exc}")
                        break
                elif name == self.label and self.class_names:
                    out[name] = np.int64(self.class_names.index(value))
                else:
                    out[name] = (
                        value.encode() if isinstance(value, str) else np.asarray(value, dtype=feature.dtype)
                    )
            yield row, bad if bad else out


def _array_feature(name: str, array: np.ndarray) -> Feature:
    dtype = str(array.dtype)
    shape = tuple(int(d) for d in array.shape[1:])
    size = int(np.prod(shape)) if shape else 1
    if dtype == "float32" and size <= SMALL:
        return Feature(dtype, shape, "float")
    if dtype in ("int8", "int16", "int32", "int64", "uint16", "uint32", "bool") and size <= SMALL:
        return Feature(dtype, shape, "int64")
    if dtype in DTYPES_RAW:
        return Feature(dtype, shape, "raw")
    raise InputError(
        f"Array {name!r} has dtype {dtype}, which tfgpu cannot store", fix="convert it to a numeric dtype"
    )


DTYPES_RAW = {
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "bool",
}


class ArraySource:
    """``.npy`` (one array, named after the file) or ``.npz`` (each array a feature); axis 0 = rows."""

    kind = "arrays"

    def __init__(self, path: Path, *, label: str | None) -> None:
        self.path = path
        self.arrays = self._load(path)
        lengths = {name: a.shape[0] if a.ndim else None for name, a in self.arrays.items()}
        if any(v is None for v in lengths.values()) or len(set(lengths.values())) > 1:
            raise InputError(
                f"Arrays in {path} are ragged: their first dimensions (rows) differ",
                value=lengths,
                fix="give every array the same number of rows along axis 0",
            )
        if label and label not in self.arrays:
            raise InputError(
                f"{path} has no array {label!r}", value=label, fix=f"use one of: {', '.join(self.arrays)}"
            )
        self.label = label
        self.class_names: list[str] = []
        self._features = {name: _array_feature(name, a) for name, a in self.arrays.items()}

    @staticmethod
    def _load(path: Path) -> dict[str, np.ndarray]:
        try:
            if path.suffix.lower() == ".npy":
                arrays = {path.stem: np.load(path, mmap_mode="r", allow_pickle=False)}
            else:
                with np.load(path, allow_pickle=False) as data:
                    arrays = {name: data[name] for name in data.files}
        except ValueError as exc:
            if any(m in str(exc) for m in ("allow_pickle", "Object arrays", "Python objects")):
                raise InputError(
                    f"{path} holds an object (ragged) array", fix="store rows of equal shape, or pad them"
                ) from None
            raise InputError(
                f"Cannot read {path}: {exc}", fix="check the file is a complete NumPy file"
            ) from None
        except (OSError, EOFError) as exc:
            raise InputError(
                f"Cannot read {path}: {exc}", fix="check the file is a complete NumPy file"
            ) from None
        if not arrays:
            raise InputError(f"{path} holds no arrays", fix="save at least one array")
        return arrays

    def __len__(self) -> int:
        return int(next(iter(self.arrays.values())).shape[0])

    def features(self) -> dict[str, Feature]:
        return self._features

    def read(self, start: int, stop: int) -> Iterator[tuple[int, dict[str, Any] | BadRow]]:
        chunk = {name: np.asarray(a[start:stop]) for name, a in self.arrays.items()}
        for offset in range(stop - start):
            yield start + offset, {name: a[offset] for name, a in chunk.items()}


@dataclass(frozen=True)
class SourceSpec:
    """How to open a source; picklable, so each worker process opens its own."""

    path: str
    columns: tuple[str, ...] | None = None
    label: str | None = None
    image_column: str | None = None
    image: ImageOptions = ImageOptions()
    keep_order: bool = False  # image folders: rows in listing order (class by class), not shuffled

    def open(self) -> ImageFolderSource | TableSource | ArraySource:
        path = Path(self.path)
        if not path.exists():
            raise InputError(f"Source {path} does not exist", value=self.path, fix="check the path")
        if path.is_dir():
            return ImageFolderSource(path, image=self.image, shuffled=not self.keep_order)
        suffix = path.suffix.lower()
        if suffix in TABLE_SUFFIXES:
            return TableSource(
                path,
                columns=list(self.columns) if self.columns else None,
                label=self.label,
                image_column=self.image_column,
                image=self.image,
            )
        if suffix in ARRAY_SUFFIXES:
            return ArraySource(path, label=self.label)
        raise InputError(
            f"tfgpu convert cannot read {path.name}",
            value=self.path,
            fix="pass a folder of images (one subfolder per class), a .csv / .parquet table, or a .npy / .npz file",
        )

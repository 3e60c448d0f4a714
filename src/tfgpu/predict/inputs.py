"""Prediction inputs, streamed: a tfgpu TFRecord dataset (manifest), Parquet or CSV, ``.npy``.

Each yields a tf.data.Dataset of (ids, features) for a row range, so several workers can take
disjoint ranges and a resumed run can start where the completed shards end. Memory stays bounded:
tables are read a record batch at a time, arrays are memory-mapped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tfgpu import host
from tfgpu.errors import InputError

READ_ROWS = 8192  # rows per read from a table


@dataclass
class Column:
    dtype: str  # numpy / tf dtype name, "string" for text and bytes
    shape: tuple[int | None, ...]  # per row; None marks a variable length


class InputSource:
    rows: int
    columns: dict[str, Column]
    description: str

    def dataset(
        self, start: int, stop: int, *, examples: bool, deterministic: bool, batch: int | None
    ) -> Any:
        """(ids, features) for rows [start, stop): batches of ``batch`` rows (the last may be short),
        or one row per element when ``batch`` is None; features is a dict, or serialized Examples."""
        raise NotImplementedError


def _tf_dtype(dtype: str) -> Any:
    import tensorflow as tf

    return tf.string if dtype == "string" else tf.as_dtype(dtype)


class ManifestInput(InputSource):
    def __init__(self, path: Path) -> None:
        from tfgpu import data

        self.manifest = data.load(path)
        self.rows = self.manifest.total_rows
        self.columns = {n: Column(f.dtype, f.shape) for n, f in self.manifest.features.items()}
        self.description = f"tfgpu dataset {path} ({self.rows} rows, {len(self.manifest.shards)} shards)"

    def dataset(
        self, start: int, stop: int, *, examples: bool, deterministic: bool, batch: int | None
    ) -> Any:
        import tensorflow as tf

        from tfgpu import data

        shards = [s for s in self.manifest.shards if s.first_row < stop and s.first_row + s.rows > start]
        subset = data.Manifest(
            features=self.manifest.features,
            shards=shards,
            compression=self.manifest.compression,
            label=self.manifest.label,
            directory=self.manifest.directory,
        )
        plan = data.plan(
            subset,
            batch_size=256,
            with_ids=True,
            cache="off",
            deterministic=deterministic,
            shuffle_files=not deterministic,
        )
        if examples:
            ds = plan.build(upto="read").unbatch()  # (id, serialized record)
        else:
            ds = plan.build().unbatch().map(lambda e: (e.pop("id"), e))
        ds = ds.filter(lambda i, _: tf.logical_and(i >= start, i < stop))
        return ds if batch is None else ds.batch(batch)


class TableInput(InputSource):
    def __init__(self, path: Path) -> None:
        import pyarrow as pa

        self.path = path
        try:
            if path.suffix.lower() == ".csv":
                import pyarrow.csv as pcsv

                with pcsv.open_csv(path) as reader:
                    schema = reader.schema
                with path.open("rb") as handle:
                    self.rows = max(0, sum(1 for _ in handle) - 1)
            else:
                import pyarrow.parquet as pq

                meta = pq.ParquetFile(path)
                schema = meta.schema_arrow
                self.rows = meta.metadata.num_rows
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(
                f"Cannot read table {path}: {str(exc).splitlines()[0]}", fix="check the file is complete"
            ) from None
        self.columns = {f.name: self._column(f) for f in schema}
        self.description = f"table {path} ({self.rows} rows)"

    @staticmethod
    def _column(field: Any) -> Column:
        import pyarrow as pa

        from tfgpu.data.sources import numpy_dtype

        kind = field.type
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            return Column(numpy_dtype(kind.value_type).name, (None,))
        if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind):
            return Column("string", ())
        return Column(numpy_dtype(kind).name, ())

    def _batches(self) -> Iterator[Any]:
        if self.path.suffix.lower() == ".csv":
            import pyarrow.csv as pcsv

            with pcsv.open_csv(self.path, read_options=pcsv.ReadOptions(block_size=1 << 20)) as reader:
                yield from reader
        else:
            import pyarrow.parquet as pq

            yield from pq.ParquetFile(self.path).iter_batches(batch_size=READ_ROWS)

    def _rows(self, start: int, stop: int) -> Iterator[tuple[np.ndarray, dict[str, Any]]]:
        seen = 0
        for batch in self._batches():
            first, last = seen, seen + batch.num_rows
            seen = last
            if last <= start:
                continue
            if first >= stop:
                return
            piece = batch.slice(max(0, start - first), min(stop, last) - max(start, first))
            ids = np.arange(max(start, first), min(stop, last), dtype=np.int64)
            yield ids, {name: self._values(piece.column(name), name) for name in self.columns}

    def _values(self, array: Any, name: str) -> Any:
        column = self.columns[name]
        if array.null_count:
            raise InputError(
                f"{self.path}: column {name!r} has empty values",
                value=name,
                fix="fill or drop them before predicting",
            )
        if column.shape == (None,):
            return [np.asarray(v, dtype=column.dtype) for v in array.to_pylist()]
        if column.dtype == "string":
            return np.asarray(
                [v.encode() if isinstance(v, str) else v for v in array.to_pylist()], dtype=object
            )
        return array.to_numpy(zero_copy_only=False)

    def dataset(
        self, start: int, stop: int, *, examples: bool, deterministic: bool, batch: int | None
    ) -> Any:
        import tensorflow as tf

        ragged = [n for n, c in self.columns.items() if c.shape == (None,)]
        if examples:
            signature = (tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.string))

            def rows() -> Iterator[Any]:
                for ids, values in self._rows(start, stop):
                    for k, row_id in enumerate(ids):
                        yield row_id, _example({n: v[k] for n, v in values.items()}, self.columns)

            return tf.data.Dataset.from_generator(rows, output_signature=signature)
        spec = {
            n: tf.TensorSpec([None] if n in ragged else [], _tf_dtype(c.dtype))
            for n, c in self.columns.items()
        }

        def each() -> Iterator[Any]:
            for ids, values in self._rows(start, stop):
                for k, row_id in enumerate(ids):
                    yield row_id, {n: v[k] for n, v in values.items()}

        ds = tf.data.Dataset.from_generator(each, output_signature=(tf.TensorSpec([], tf.int64), spec))
        return ds if batch is None else ds.batch(batch)


def _example(row: dict[str, Any], columns: dict[str, Column]) -> bytes:
    import tensorflow as tf

    feature = {}
    for name, value in row.items():
        array = np.ravel(np.asarray(value))
        if columns[name].dtype == "string":
            feature[name] = tf.train.Feature(
                bytes_list=tf.train.BytesList(
                    value=[v if isinstance(v, bytes) else str(v).encode() for v in array]
                )
            )
        elif array.dtype.kind in "iub":
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=array.astype(np.int64)))
        else:
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=array.astype(np.float32)))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


class ArrayInput(InputSource):
    """A ``.npy`` array, memory-mapped. A plain numeric array in C order is read by TensorFlow
    itself, in fixed-length records of one batch each, so no Python runs per batch. Any other
    array (Fortran order, another byte order, a dtype TensorFlow cannot decode) is read through a
    generator of slices."""

    def __init__(self, path: Path) -> None:
        try:
            self.array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise InputError(
                f"Cannot read {path}: {exc}", fix="pass a complete .npy file of numbers"
            ) from None
        self.path = path
        self.name = path.stem
        self.rows = int(self.array.shape[0])
        self.columns = {self.name: Column(self.array.dtype.name, tuple(int(d) for d in self.array.shape[1:]))}
        self.description = f"array {path} {tuple(self.array.shape)} {self.array.dtype}"

    def dataset(
        self, start: int, stop: int, *, examples: bool, deterministic: bool, batch: int | None
    ) -> Any:
        import tensorflow as tf

        if examples:
            ds = self._slices(start, stop, READ_ROWS).unbatch()

            def serialize(values: Any) -> Any:
                record = tf.py_function(
                    lambda v: _example({self.name: v.numpy()}, self.columns), [values], tf.string
                )
                return tf.ensure_shape(record, [])

            ds = ds.map(lambda i, f: (i, serialize(f[self.name])))
            return ds if batch is None else ds.batch(batch)
        step = batch or READ_ROWS
        ds = self._records(start, stop, step) if self._fixed_length() else self._slices(start, stop, step)
        return ds if batch is not None else ds.unbatch()

    @property
    def _row_bytes(self) -> int:
        return self.array.dtype.itemsize * int(np.prod(self.array.shape[1:], dtype=np.int64))

    def _fixed_length(self) -> bool:
        """Whether TensorFlow can read the rows straight from the file."""
        array = self.array
        return (
            isinstance(array, np.memmap)
            and array.flags["C_CONTIGUOUS"]
            and array.dtype.isnative
            and array.dtype.name in _DECODABLE
            and self._row_bytes > 0
        )

    def _records(self, start: int, stop: int, batch: int) -> Any:
        """(ids, features) in batches of ``batch`` rows (the last shorter), decoded by TensorFlow."""
        import tensorflow as tf

        array = self.array
        shape = array.shape[1:]
        row_bytes = self._row_bytes
        full, rest = divmod(stop - start, batch)
        pieces = []
        for first, rows, count in ((start, batch, full), (start + full * batch, rest, 1 if rest else 0)):
            if count:
                pieces.append(
                    tf.data.FixedLengthRecordDataset(
                        str(self.path),
                        record_bytes=rows * row_bytes,
                        header_bytes=array.offset + first * row_bytes,
                        footer_bytes=(self.rows - first - rows * count) * row_bytes,
                        buffer_size=max(1 << 20, 2 * rows * row_bytes),
                    )
                )
        records = pieces[0] if len(pieces) == 1 else pieces[0].concatenate(pieces[1])
        dtype = tf.as_dtype(array.dtype)
        values = records.map(
            lambda r: {self.name: tf.reshape(tf.io.decode_raw(r, dtype), [-1, *shape])},
            num_parallel_calls=host.cores(),
        )
        ids = tf.data.Dataset.range(start, stop).batch(batch)
        return tf.data.Dataset.zip(ids, values)

    def _slices(self, start: int, stop: int, step: int) -> Any:
        import tensorflow as tf

        column = self.columns[self.name]

        def chunks() -> Iterator[Any]:
            for first in range(start, stop, step):
                last = min(stop, first + step)
                yield np.arange(first, last, dtype=np.int64), {self.name: np.asarray(self.array[first:last])}

        spec = (
            tf.TensorSpec([None], tf.int64),
            {self.name: tf.TensorSpec([None, *column.shape], tf.as_dtype(column.dtype))},
        )
        return tf.data.Dataset.from_generator(chunks, output_signature=spec)


# dtypes tf.io.decode_raw reads
_DECODABLE = {
    "float16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "complex64", "complex128", "bool",
}  # fmt: skip


class DatasetInput(InputSource):
    """The rows of a tf.data.Dataset of batched features made by ``make`` (an Estimator input_fn).

    Elements may be features or (features, labels); labels are dropped. ``make`` is called again
    for each pass, so the rows are counted once and then streamed; ``single_tensor`` tells that
    the features are one tensor rather than a dict (it is named ``features`` here).
    """

    NAME = "features"

    def __init__(self, make: Callable[[], Any], *, description: str) -> None:
        import tensorflow as tf

        self._make = make
        self.description = description
        ds = self._features()
        if ds.cardinality() == tf.data.INFINITE_CARDINALITY:
            raise InputError(
                f"{description} repeats forever, so prediction would never end",
                value=description,
                fix="drop .repeat() from the input function used for prediction",
            )
        specs = ds.element_spec
        if any(s.shape.rank in (None, 0) for s in specs.values()):
            raise InputError(
                f"{description} must return batched features of known rank, as Estimator.predict needs",
                value={n: str(s.shape) for n, s in specs.items()},
                fix="end the input function with .batch(n)",
            )
        self.columns = {
            n: Column("string" if s.dtype == tf.string else s.dtype.name, tuple(s.shape[1:]))
            for n, s in specs.items()
        }
        first = next(iter(specs))
        self.rows = int(ds.reduce(tf.constant(0, tf.int64), lambda n, f: n + tf.shape(f[first], tf.int64)[0]))
        self.description = f"{description} ({self.rows} rows)"

    def _features(self) -> Any:

        from tfgpu.train.inputs.adapters import is_dataset

        ds = self._make()
        if not is_dataset(ds):
            raise InputError(
                "The input function must return a tf.data.Dataset",
                value=type(ds).__name__,
                fix="return tf.data.Dataset.from_tensor_slices(features).batch(n) or similar",
            )
        if isinstance(ds.element_spec, tuple):
            ds = ds.map(lambda *element: element[0])
        self.single_tensor = not isinstance(ds.element_spec, dict)
        return ds.map(lambda f: {self.NAME: f}) if self.single_tensor else ds

    def dataset(
        self, start: int, stop: int, *, examples: bool, deterministic: bool, batch: int | None
    ) -> Any:
        if examples:
            raise InputError(
                "A model that takes serialized tf.Example strings needs a tfgpu dataset, not an input_fn",
                value=self.description,
                fix="leave serving_input_receiver_fn out, or pass the TFRecord dataset directory",
            )
        ds = self._features().unbatch().enumerate().skip(start).take(stop - start)
        return ds if batch is None else ds.batch(batch)


def open_input(path: str) -> InputSource:
    source = Path(path)
    if not source.exists():
        raise InputError(f"Input {path} does not exist", value=path, fix="check the path")
    if source.is_dir() or source.name == "manifest.json":
        return ManifestInput(source)
    suffix = source.suffix.lower()
    if suffix in (".parquet", ".pq", ".csv"):
        return TableInput(source)
    if suffix == ".npy":
        return ArrayInput(source)
    raise InputError(
        f"tfgpu predict cannot read {source.name}",
        value=path,
        fix="pass a tfgpu dataset directory (tfgpu convert), a .parquet or .csv table, or a .npy array",
    )

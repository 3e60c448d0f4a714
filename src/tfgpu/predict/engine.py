"""``tfgpu.predict``: batch prediction on every local replica, in input order, streamed, resumable.

Every row carries its input row id from the reader to the writer, so the output is in input order
whatever the replicas, workers, read order or bucketing. Each global batch is split evenly across
the replicas; the last one is padded (rows with id -1) and the padding dropped. Under
``tfgpu launch`` each worker predicts a contiguous part of the input and writes its own shards;
the chief writes the final manifest once every part is complete.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import tfgpu
from tfgpu import choices, cluster, distribute, host, letting_go
from tfgpu.data.pipeline import parallel_options
from tfgpu.errors import ConfigError, InputError
from tfgpu.files import (
    changed,
    check_output_directory,
    dig,
    fingerprint,
    remove_leftover_temporaries,
    write_json_atomic,
)
from tfgpu.predict import writers
from tfgpu.predict.inputs import InputSource, open_input
from tfgpu.predict.models import Predictor, load_predictor

log = logging.getLogger(__name__)

PARTS = "_parts"
ROWS_PER_CALL = 32_768  # the automatic steps_per_execution: a few ms of work per call on a GPU


@dataclass(frozen=True)
class PredictOptions:
    """batch_size is the global batch (rounded up to a multiple of the replicas)."""

    batch_size: int = 256
    fmt: str = "parquet"
    signature: str | None = None
    bucket_by: str | None = None
    buckets: int = 8
    rows_per_shard: int = 100_000
    deterministic: bool = True  # False: parallel reads in any order (ids keep the output ordered)
    wait_for_parts_s: float = 3600.0
    steps_per_execution: int | None = None  # batches per compiled call; None: about 32k rows a call
    devices_per_replica: int | None = None  # a .keras model's layers split over K devices (train.split)

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.rows_per_shard < 1 or (self.steps_per_execution or 1) < 1:
            raise ConfigError(
                "batch_size, rows_per_shard and steps_per_execution must be at least 1",
                value=(self.batch_size, self.rows_per_shard, self.steps_per_execution),
                fix="pass e.g. --batch-size 256",
            )
        if self.devices_per_replica is not None and (
            not isinstance(self.devices_per_replica, int) or self.devices_per_replica < 1
        ):
            raise ConfigError(
                "devices_per_replica must be a whole number of at least 1",
                value=self.devices_per_replica,
                fix="pass e.g. --devices-per-replica 2",
            )
        if self.fmt not in writers.FORMATS:
            raise ConfigError(
                "Unknown output format", value=self.fmt, fix=f"use one of {', '.join(writers.FORMATS)}"
            )

    def batches_per_call(self, batch: int) -> int:
        return self.steps_per_execution or max(1, min(32, ROWS_PER_CALL // batch))


@dataclass
class PredictResult:
    rows: int
    predicted_rows: int
    seconds: float
    replicas: int
    worker: int
    workers: int
    shards: int
    output: str
    resumed_from_row: int | None

    @property
    def rows_per_s(self) -> float:
        return self.predicted_rows / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "predicted_rows": self.predicted_rows,
            "seconds": round(self.seconds, 3),
            "rows_per_s": round(self.rows_per_s, 1),
            "rows_per_s_per_replica": round(self.rows_per_s / self.replicas, 1),
            "replicas": self.replicas,
            "worker": self.worker,
            "workers": self.workers,
            "shards": self.shards,
            "output": self.output,
            "resumed_from_row": self.resumed_from_row,
        }


def _worker_part(environ: Any = None) -> tuple[int, int]:
    """(this worker, workers): predicting tasks are the chief and the workers, chief first."""
    spec = cluster.from_environ(environ)
    if spec is None:
        return 0, 1
    order = [("chief", i) for i in range(len(spec.cluster.get("chief", ())))] + [
        ("worker", i) for i in range(len(spec.cluster.get("worker", ())))
    ]
    if (spec.task_type, spec.task_index) not in order:
        raise ConfigError(
            f"A {spec.task_type} task does not predict",
            value=spec.task_type,
            fix="run tfgpu predict on chief and worker tasks only",
        )
    return order.index((spec.task_type, spec.task_index)), len(order)


def _match_inputs(predictor: Predictor, source: InputSource, label: str | None) -> dict[str, str]:
    """Model input name -> input column; InputError naming what does not match."""
    if predictor.takes_examples:
        return {}
    columns = {k: v for k, v in source.columns.items() if k != label}
    names = [i.name for i in predictor.inputs]
    if all(n in source.columns for n in names):
        mapping = {n: n for n in names}
    elif len(names) == 1 and len(columns) == 1:
        mapping = {names[0]: next(iter(columns))}
    else:
        raise InputError(
            f"The model's inputs {names} are not columns of the input",
            value=sorted(source.columns),
            fix="rename the columns to the model's input names, or feed a dataset with one feature",
        )
    for spec in predictor.inputs:
        column = source.columns[mapping[spec.name]]
        if (column.dtype == "string") != (spec.dtype == "string"):
            raise InputError(
                f"Column {mapping[spec.name]!r} holds {column.dtype} but model input {spec.name!r} takes {spec.dtype}",
                value={mapping[spec.name]: column.dtype},
                fix="convert the column, or choose another --signature",
            )
        known = [
            (a, b) for a, b in zip(column.shape, spec.shape, strict=False) if a is not None and b is not None
        ]
        if len(column.shape) != len(spec.shape) or any(a != b for a, b in known):
            raise InputError(
                f"Column {mapping[spec.name]!r} has shape {column.shape} per row but model input {spec.name!r} takes {spec.shape}",
                value={mapping[spec.name]: list(column.shape)},
                fix="reshape the data to the model's input shape",
            )
    return mapping


def _dataset(
    source: InputSource,
    predictor: Predictor,
    mapping: dict[str, str],
    *,
    start: int,
    stop: int,
    batch: int,
    options: PredictOptions,
) -> Any:
    import tensorflow as tf

    per_row = options.bucket_by is not None
    ds = source.dataset(
        start,
        stop,
        examples=predictor.takes_examples,
        deterministic=options.deterministic,
        batch=None if per_row else batch,
    )
    dtypes = {i.name: i.dtype for i in predictor.inputs}
    if predictor.takes_examples:
        name = predictor.inputs[0].name
        ds = ds.map(lambda i, record: (i, {name: record}))
    else:

        def select(i: Any, f: Any) -> Any:
            # only cast what differs: a same-dtype cast still costs an op per batch
            return i, {
                n: f[c] if dtypes[n] in ("string", f[c].dtype.name) else tf.cast(f[c], dtypes[n])
                for n, c in mapping.items()
            }

        ds = ds.map(select)
    if options.bucket_by:
        inverse = {c: n for n, c in mapping.items()}
        key = inverse.get(options.bucket_by)
        if key is None or source.columns[options.bucket_by].shape != (None,):
            raise InputError(
                f"--bucket-by needs a variable-length input column, got {options.bucket_by!r}",
                value=options.bucket_by,
                fix=f"use one of: {', '.join(n for n, c in source.columns.items() if c.shape == (None,)) or '(none)'}",
            )
        bounds = _bucket_bounds(source, options)
        ds = ds.bucket_by_sequence_length(
            lambda i, f: tf.shape(f[key])[0], bounds, [batch] * (len(bounds) + 1)
        )
        choices.record(
            "predict.buckets", f"{len(bounds) + 1} by {options.bucket_by}", f"length boundaries {bounds}"
        )

    def pad(ids: Any, features: Any) -> Any:
        """Fill a short batch up to ``batch`` rows (ids -1) so every replica gets an equal share."""
        missing = batch - tf.shape(ids)[0]
        ids = tf.concat([ids, tf.fill([missing], tf.constant(-1, tf.int64))], 0)
        features = {k: tf.concat([v, tf.repeat(v[:1], missing, axis=0)], 0) for k, v in features.items()}
        return ids, features

    def full(ids: Any, features: Any) -> Any:
        # full batches (all but the last) pass without a copy
        ids, features = tf.cond(tf.shape(ids)[0] < batch, lambda: pad(ids, features), lambda: (ids, features))
        return tf.ensure_shape(ids, [batch]), {
            k: tf.ensure_shape(v, [batch, *v.shape[1:]]) for k, v in features.items()
        }

    ds = ds.map(full, num_parallel_calls=host.cores()).prefetch(tf.data.AUTOTUNE)
    options = parallel_options(tf, autotune=False)  # as tfgpu.data.pipeline: fixed, not bimodal
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return ds.with_options(options)


def _bucket_bounds(source: InputSource, options: PredictOptions) -> list[int]:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    path = getattr(source, "path", None)
    if path is None or path.suffix.lower() not in (".parquet", ".pq"):
        raise InputError(
            "--bucket-by works on Parquet inputs with a list column",
            value=str(path),
            fix="store sequences as a Parquet list column",
        )
    lengths = pc.list_value_length(pq.read_table(path, columns=[options.bucket_by]).column(0)).to_numpy()
    cuts = np.unique(np.quantile(lengths, np.linspace(0, 1, options.buckets + 1)[1:-1]).astype(int) + 1)
    return [int(c) for c in cuts if c > 1] or [int(lengths.max()) + 1]


def split_predictor(model: str, options: PredictOptions, *, strategy: Any) -> tuple[Any, Predictor]:
    """(strategy, predictor) of the .keras file ``model`` split over ``devices_per_replica``
    devices per replica (``train.model.split``: the layers placed by memory, the batch in micro-batches)."""
    from tfgpu.predict.models import keras_predictor, load_keras_model
    from tfgpu.train.model import placement
    from tfgpu.train.pieces.options import Placement

    path = Path(model)
    if path.suffix != ".keras":
        raise ConfigError(
            "devices_per_replica splits a Keras model's layers, and needs a .keras file",
            value=model,
            fix="save the model with model.save('model.keras'), or leave --devices-per-replica out",
        )
    loaded = load_keras_model(path)
    asked = Placement(devices_per_replica=options.devices_per_replica)
    placed = placement.place(loaded, strategy, split_as=asked, global_batch=options.batch_size)
    return placed.strategy, keras_predictor(placed.model, name=path.name)


def predict(
    model: str,
    input: str | InputSource,
    output: str,
    *,
    options: PredictOptions | None = None,
    strategy: Any = None,
    on_progress: Callable[[int, int], None] | None = None,
    model_description: str | None = None,
    overwrite: bool = False,
) -> PredictResult:
    """Predict MODEL on INPUT into the OUTPUT directory; see the module docstring.

    INPUT is a path ``open_input`` reads, or an InputSource (``tfgpu.estimator`` passes the rows
    of an input_fn). ``model_description`` replaces the model path in the output manifest and in
    the resume identity. A re-run resumes only the same run: OUTPUT keeps what model, input and
    options made it, and another run there is an InputError unless ``overwrite`` (which deletes
    the predictions there first).
    """

    out = check_output_directory(output, command="tfgpu predict")
    options = options or PredictOptions()
    if options.devices_per_replica not in (None, 1):
        strategy, predictor = split_predictor(model, options, strategy=strategy)
    else:
        strategy = strategy or distribute.local_strategy(record_as="predict.strategy")
        with strategy.scope():
            predictor = load_predictor(model, signature=options.signature)
    replicas = int(strategy.num_replicas_in_sync)
    batch = -(-options.batch_size // replicas) * replicas
    if batch != options.batch_size:
        choices.record("predict.batch", batch, f"rounded up to a multiple of {replicas} replicas")
    source = input if isinstance(input, InputSource) else open_input(input)
    label = getattr(getattr(source, "manifest", None), "label", None)
    mapping = _match_inputs(predictor, source, label)
    worker, workers = _worker_part()
    start, stop = worker * source.rows // workers, (worker + 1) * source.rows // workers
    out.mkdir(parents=True, exist_ok=True)
    identity = {
        "model": model_description or {"path": str(Path(model).resolve()), **fingerprint(model)},
        "input": {"path": str(Path(input).resolve()), **fingerprint(input)}
        if isinstance(input, str)
        else source.description,
        "options": {
            "signature": options.signature,
            "format": options.fmt,
            "rows_per_shard": options.rows_per_shard,
            "workers": workers,
        },
    }
    _check_identity(out, identity, overwrite=overwrite)
    for leftover in remove_leftover_temporaries(out):  # a killed run's half-written shard
        log.info("removed %s, left by a run that was stopped while writing it", leftover.name)
    first = writers.resume_row(out, options.fmt, start, stop)
    sink = writers.OrderedShards(
        out, fmt=options.fmt, start=first, stop=stop, rows_per_shard=options.rows_per_shard
    )
    choices.announce()

    started = time.perf_counter()
    if first < stop:
        ds = _dataset(source, predictor, mapping, start=first, stop=stop, batch=batch, options=options)
        specs = _output_specs(predictor, ds.element_spec[1])
        per_call, why = options.batches_per_call(batch), "asked for"
        if not options.steps_per_execution:
            why = f"about {ROWS_PER_CALL:,} rows per compiled call"
        if any(None in v.shape[1:] for v in specs.values()):  # batches' outputs cannot be joined
            per_call, why = 1, "outputs of variable shape"
        choices.record("predict.steps_per_execution", per_call, why)
        feed = distribute.input_strategy(strategy)
        # the iterator, dropped off this thread when the rows are written (tfgpu.letting_go)
        held = [iter(ds if feed is None else feed.experimental_distribute_dataset(ds))]
        _run(
            strategy,
            predictor,
            held[0],
            sink,
            lambda: on_progress(sink.next_row - start, stop - start) if on_progress else None,
            per_call=per_call,
            outputs=specs,
        )
        letting_go.let_go(held)
    sink.finish()
    seconds = time.perf_counter() - started
    done = writers.completed_shards(out, options.fmt)
    part = {
        "worker": worker,
        "start": start,
        "stop": stop,
        "columns": sink.columns or _columns_from(out, options),
        "shards": [s.__dict__ for s in done if start <= s.first_row < stop],
    }
    (out / PARTS).mkdir(exist_ok=True)
    write_json_atomic(out / PARTS / f"worker-{worker:05d}-of-{workers:05d}.json", part)
    if worker == 0:
        _write_final(
            out,
            workers,
            options,
            model=model_description or str(Path(model).resolve()),
            input=str(Path(input).resolve()) if isinstance(input, str) else source.description,
            predictor=predictor,
            total=source.rows,
        )
    return PredictResult(
        rows=stop - start,
        predicted_rows=stop - first,
        seconds=seconds,
        replicas=replicas,
        worker=worker,
        workers=workers,
        shards=len(part["shards"]),
        output=str(out),
        resumed_from_row=first if first > start else None,
    )


IDENTITY = "identity.json"  # under PARTS: what made the predictions in OUTPUT


def _check_identity(out: Path, identity: dict[str, Any], *, overwrite: bool) -> None:
    """Refuse to resume (or to add to) predictions that another model, input or option made."""
    path = out / PARTS / IDENTITY
    # every worker writes the identity before its first shard: shards without one are older
    made = [*out.glob("part-*"), *[p for p in [out / "manifest.json"] if p.exists()]]
    if overwrite:
        if identity["options"]["workers"] > 1:
            raise ConfigError(
                "--overwrite deletes the output, which other workers are writing to",
                value=str(out),
                fix="delete the output directory before the launch, or write to a new one",
            )
        shutil.rmtree(out / PARTS, ignore_errors=True)
        for item in made:
            item.unlink()
    elif path.exists():
        earlier = json.loads(path.read_text())
        different = changed(earlier, identity)
        if different:
            parts = sorted({k.split(".")[0] for k in different})
            raise InputError(
                f"{out} holds predictions of another run: the {' and '.join(parts)} changed since",
                value={k: {"then": dig(earlier, k), "now": dig(identity, k)} for k in different},
                fix="write to a new output directory, or pass --overwrite to delete those predictions and start over",
            )
    elif made:
        raise InputError(
            f"{out} holds predictions that do not say what made them",
            value=sorted(p.name for p in made)[:5],
            fix="write to a new output directory, or pass --overwrite to delete them and start over",
        )
    write_json_atomic(path, identity)


def _output_specs(predictor: Predictor, features: Any) -> dict[str, Any]:
    """name -> TensorSpec of each output, from a trace of the model on the input's spec."""
    import tensorflow as tf

    traced = tf.function(predictor.call, autograph=False).get_concrete_function(features)
    return dict(traced.structured_outputs)


def _run(
    strategy: Any,
    predictor: Predictor,
    iterator: Any,
    sink: writers.OrderedShards,
    progress: Callable[[], None],
    *,
    per_call: int,
    outputs: dict[str, Any],
) -> None:
    """Predict every batch of ``iterator`` into ``sink``.

    Each compiled call takes up to ``per_call`` batches from the iterator inside the graph
    (``train.step.execution.in_graph_loop``) and returns their ids and outputs concatenated, still on the
    device. The host does not read them: a background thread moves them to host memory, reorders
    them and writes the shards while the devices compute the next call. The queue between the two
    holds a few calls, so memory stays bounded.
    """
    import tensorflow as tf

    from tfgpu.train.step.execution import growing_array, in_graph_loop, local_rows

    def body(batch: Any, arrays: Any, index: Any) -> Any:
        ids, features = batch
        out_ids, out = strategy.run(lambda i, f: (i, predictor.call(f)), args=(ids, features))
        ids_array, out_arrays = arrays
        return ids_array.write(index, local_rows(strategy, out_ids)), {
            k: a.write(index, local_rows(strategy, out[k])) for k, a in out_arrays.items()
        }

    @tf.function(autograph=False)
    def call() -> Any:  # the iterator is captured: no per-call argument matching
        arrays = (
            growing_array(tf.int64, [None]),
            {k: growing_array(v.dtype, v.shape) for k, v in outputs.items()},
        )
        out = in_graph_loop(iterator, per_call, body, arrays)
        ids_array, out_arrays = out.state
        return out.steps, ids_array.concat(), {k: a.concat() for k, a in out_arrays.items()}

    def to_host(ids: Any, values: Any) -> None:
        sink.add(ids.numpy(), {k: v.numpy() for k, v in values.items()})
        progress()

    with writers.Background(to_host, depth=4) as background:
        while True:
            taken, ids, values = call()
            if int(taken):  # a host-side counter: reading it does not wait for the device
                background.put(ids, values)
            if int(taken) < per_call:
                break


def _columns_from(out: Path, options: PredictOptions) -> dict[str, Any]:
    earlier = out / "manifest.json"
    return json.loads(earlier.read_text())["columns"] if earlier.exists() else {}


def _write_final(
    out: Path,
    workers: int,
    options: PredictOptions,
    *,
    model: str,
    input: str,
    predictor: Predictor,
    total: int,
) -> None:
    deadline = time.monotonic() + options.wait_for_parts_s
    paths = [out / PARTS / f"worker-{w:05d}-of-{workers:05d}.json" for w in range(workers)]
    while not all(p.exists() for p in paths):
        if time.monotonic() > deadline:
            missing = [p.name for p in paths if not p.exists()]
            raise InputError(
                "Not every worker finished its part of the prediction",
                value=missing,
                fix="re-run the missing workers (completed shards are kept), then the chief",
            )
        time.sleep(0.2)
    parts = [json.loads(p.read_text()) for p in paths]
    shards = sorted((s for p in parts for s in p["shards"]), key=lambda s: s["first_row"])
    columns = next((p["columns"] for p in parts if p["columns"]), {})
    write_json_atomic(
        out / "manifest.json",
        {
            "format": options.fmt,
            "total_rows": total,
            "columns": {writers.ID: {"dtype": "int64", "shape": []}, **columns},
            "shards": shards,
            "model": model,
            "model_kind": predictor.description,
            "input": input,
            "workers": workers,
            "created_by": {
                "tool": "tfgpu predict",
                "version": tfgpu.__version__,
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
        },
    )

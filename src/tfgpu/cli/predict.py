"""``tfgpu predict MODEL INPUT OUTPUT``: predict on every replica and worker, in input order."""

from __future__ import annotations

import argparse

from tfgpu.cli import _common
from tfgpu.cli._progress import progress
from tfgpu.text import counted


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict", help="batch prediction on every GPU and worker, in input order, streamed and resumable"
    )
    p.add_argument(
        "model", help="a .keras file, a TensorFlow 2 SavedModel, or an Estimator-exported SavedModel"
    )
    p.add_argument("input", help="a tfgpu dataset directory, a .parquet/.csv table, or a .npy array")
    p.add_argument("output", help="directory for the output shards and manifest.json (re-running resumes)")
    p.add_argument(
        "--batch-size", type=int, default=256, help="global batch, split evenly across replicas (default 256)"
    )
    p.add_argument(
        "--format", choices=("parquet", "npy", "tfrecord"), default="parquet", help="output shard format"
    )
    p.add_argument("--signature", help="SavedModel signature (default serving_default)")
    p.add_argument(
        "--bucket-by",
        metavar="FEATURE",
        help="batch variable-length rows of similar length (Parquet list column)",
    )
    p.add_argument(
        "--rows-per-shard", type=int, default=100_000, help="rows per output shard (default 100000)"
    )
    p.add_argument(
        "--any-order",
        action="store_true",
        help="read input files in parallel in any order (output stays in input order)",
    )
    p.add_argument(
        "--steps-per-execution",
        type=int,
        help="batches per compiled call, taken from the iterator inside the graph (default: about 32k rows)",
    )
    p.add_argument(
        "--devices-per-replica",
        type=int,
        help="split a .keras model's layers over K devices per replica (a model too big for one GPU)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="delete the predictions already in OUTPUT and start over (a re-run otherwise resumes the same run only)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tfgpu import choices, runtime
    from tfgpu.predict import PredictOptions, predict

    runtime.configure()
    options = PredictOptions(
        batch_size=args.batch_size,
        fmt=args.format,
        signature=args.signature,
        bucket_by=args.bucket_by,
        rows_per_shard=args.rows_per_shard,
        deterministic=not args.any_order,
        steps_per_execution=args.steps_per_execution,
        devices_per_replica=args.devices_per_replica,
    )
    with progress("predict") as update:
        result = predict(
            args.model, args.input, args.output, options=options, on_progress=update, overwrite=args.overwrite
        )
    summary = {**result.to_dict(), "choices": choices.as_dict()}
    if result.worker == 0:
        from tfgpu.report.runs import save_run

        save_run(args.output, "predict", summary)
    if args.json:
        _common.print_json(summary)
        return 0
    out = _common.out
    out.print(choices.summary_line())
    resumed = f" (resumed at row {result.resumed_from_row})" if result.resumed_from_row is not None else ""
    out.print(
        f"predicted {result.predicted_rows} rows{resumed} in {result.seconds:.1f} s: {result.rows_per_s:,.0f} rows/s, "
        f"{result.rows_per_s / result.replicas:,.0f} rows/s per replica on {counted(result.replicas, 'replica')}"
    )
    out.print(f"output: {result.output}/manifest.json ({result.shards} shards)")
    return 0

"""``tfgpu train FILE_OR_MODULE:FUNCTION``: train the Task that FUNCTION returns, on every replica."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any

from tfgpu import quiet
from tfgpu.cli import _common
from tfgpu.data.options import PipelineOptions
from tfgpu.errors import ConfigError, InputError
from tfgpu.train.pieces.options import DEFAULT_LOG_EVERY, REMAT_MODES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a Task on every GPU and worker (works under tfgpu launch)")
    p.add_argument("task", help="FILE_OR_MODULE:FUNCTION returning a tfgpu.Task")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=int, help="passes over the training data (default 1)")
    length.add_argument("--steps", type=int, help="training steps in all")
    p.add_argument(
        "--batch-size",
        type=batch_size_arg,
        help="per-replica batch (overrides the Task's); auto: doubled while it fits and gains 5%%",
    )
    p.add_argument(
        "--precision", choices=("auto", "fp32", "bf16", "fp16"), help="mixed precision (auto: by GPU)"
    )
    p.add_argument("--xla", action="store_true", help="compile the training step with XLA")
    p.add_argument(
        "--no-prove",
        dest="prove",
        action="store_false",
        help="skip the check that the replicas' first step equals one device's (on by default)",
    )
    p.add_argument(
        "--steps-per-execution",
        type=int,
        help="steps per compiled call, taken from the iterator inside the graph (default: --log-every)",
    )
    p.add_argument(
        "--log-every",
        type=int,
        default=DEFAULT_LOG_EVERY,
        help=f"read loss, input wait and the NaN check from the device every N steps (default {DEFAULT_LOG_EVERY})",
    )
    p.add_argument(
        "--tune",
        nargs="?",
        const=True,
        type=tune_arg,
        metavar="KNOBS",
        help="measure and train with the fastest steps per call, input options and XLA before the first "
        "epoch (one device against all: said), kept for the next run (KNOBS: 'all' adds mixed precision "
        "and may switch to one device, or comma-separated knob names)",
    )
    p.add_argument(
        "--tune-budget", type=float, metavar="S", help="seconds the tuning may take (default 20-60)"
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="train with the configuration tfgpu tune measured and wrote to FILE, without measuring",
    )
    p.add_argument(
        "--remat",
        nargs="?",
        const="full",
        choices=REMAT_MODES,
        help="recompute activations in the backward pass instead of keeping them (full: every layer, "
        "the default; activations: each activation function; largest: the layers with the largest outputs)",
    )
    p.add_argument(
        "--devices-per-replica",
        type=int,
        metavar="K",
        help="split each replica's layers over K of this process's devices (by their memory); "
        "the groups of K train data parallel",
    )
    p.add_argument(
        "--micro-batches",
        type=int,
        metavar="N",
        help="run a split replica's batch in N pieces so its devices work at once (default 2K)",
    )
    p.add_argument("--checkpoint-dir", help="save and resume checkpoints here")
    p.add_argument("--checkpoint-every", type=int, help="checkpoint every N steps (and at the end)")
    p.add_argument(
        "--keep-checkpoints", type=int, metavar="K", help="keep the last K checkpoints (default 3)"
    )
    p.add_argument("--log-dir", help="TensorBoard scalars and the run record (tfgpu report LOG_DIR)")
    p.add_argument(
        "--data-service",
        metavar="ADDRESS",
        help="read the Task's dataset directories through this tf.data service (tfgpu data-service prints it)",
    )
    p.add_argument(
        "--data-service-timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="stop with an error when the tf.data service has not answered for S seconds (default 60)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    p.set_defaults(run=run)


def _watch_service(address: str, *, timeout_s: float, checkpoint_dir: str | None) -> None:
    """TensorFlow's reader waits for a lost dispatcher for ever; this stops the run with one message
    (exit 2) instead. The reader is blocked inside TensorFlow, so the process exits from here."""
    from tfgpu.data.service import watch

    resume = (
        "training resumes from the last checkpoint" if checkpoint_dir else "pass --checkpoint-dir to resume"
    )

    def lost(message: str) -> None:
        error = InputError(
            message,
            value=address,
            fix=f"restart it (tfgpu data-service --work-dir keeps its addresses) and run this command again; {resume}",
        )
        _common.err.print(f"[bold red]error:[/] {error.message}", soft_wrap=True)
        quiet.exit_now(2)

    watch(address, timeout_s=timeout_s, on_lost=lost)


def _progress_printer(json_mode: bool):
    from tfgpu import env

    mode = env.progress_mode() or ("bar" if quiet.stderr_is_terminal() else "lines")
    last = [0.0]

    def show(p) -> None:
        if mode == "off":
            return
        now = time.monotonic()
        if now - last[0] < (0.5 if mode == "bar" else 5.0):
            return
        last[0] = now
        total = f"/{p.total_steps}" if p.total_steps else ""
        line = (
            f"tfgpu train: step {p.step}{total} epoch {p.epoch + 1} loss {p.loss:.4f} "
            f"{p.examples_per_s:,.0f} examples/s input wait {p.input_wait_fraction:.0%}"
        )
        if mode == "bar":
            _common.err.print(line, end="\r")
        else:
            print(line, file=sys.stderr, flush=True)

    return show


def batch_size_arg(text: str) -> int | str:
    """``--batch-size``: a whole number, or ``auto`` (tuned)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or auto, got {text!r}") from None


def tune_arg(text: str) -> str | tuple[str, ...]:
    """``--tune`` / ``--knobs``: ``all``, or comma-separated knob names (``tuning.TuneOptions``)."""
    return text if text == "all" else tuple(text.split(","))


def load_task(reference: str, *, batch_size: int | str | None = None) -> Any:
    """The Task that FILE_OR_MODULE:FUNCTION returns, with ``--batch-size`` applied (``auto``:
    the Task's own, the start of the tuning's doubling)."""
    from tfgpu.loader import load_function
    from tfgpu.train import Task

    task = load_function(reference)()
    if not isinstance(task, Task):
        raise InputError(
            f"{reference} returned {type(task).__name__}, not a tfgpu.Task",
            value=reference,
            fix="return tfgpu.Task(model=..., loss=..., train_data=...)",
        )
    return dataclasses.replace(task, batch_size=batch_size) if isinstance(batch_size, int) else task


def _options(args: argparse.Namespace) -> Any:
    """The run's TrainOptions, checked (a file given as --checkpoint-dir, a count below 1)."""
    from tfgpu.train import TrainOptions

    return TrainOptions.of(
        tune=args.tune,
        tune_budget_s=args.tune_budget,
        auto_batch=args.batch_size == "auto",
        tuning_file=args.config,
        steps_per_execution=args.steps_per_execution,
        log_every=args.log_every,
        jit_compile=args.xla,
        checkpoint_dir=args.checkpoint_dir,
        checkpoint_every=args.checkpoint_every,
        keep_checkpoints=args.keep_checkpoints,
        log_dir=args.log_dir,
        prove=args.prove,
        remat=args.remat,
        devices_per_replica=args.devices_per_replica,
        micro_batches=args.micro_batches,
    )


def _through_service(task: Any, args: argparse.Namespace) -> Any:
    """``task`` reading its directory through the tf.data service at ``--data-service``."""
    from tfgpu.train.inputs.adapters import Directory, of_task

    if not isinstance(of_task(task.train_data, role="train_data"), Directory):
        raise InputError(
            "--data-service reads tfgpu dataset directories, but the Task's train_data is not one",
            value=type(task.train_data).__name__,
            fix="convert the data with tfgpu convert and set train_data to the directory",
        )
    task = dataclasses.replace(task, pipeline=PipelineOptions.of(task.pipeline, service=args.data_service))
    if args.data_service_timeout <= 0:
        raise ConfigError(
            "--data-service-timeout must be more than 0 seconds",
            value=args.data_service_timeout,
            fix="pass --data-service-timeout 60",
        )
    _watch_service(args.data_service, timeout_s=args.data_service_timeout, checkpoint_dir=args.checkpoint_dir)
    return task


def run(args: argparse.Namespace) -> int:
    from tfgpu import choices, runtime
    from tfgpu.loader import check_references
    from tfgpu.train import Trainer
    from tfgpu.train.loop.training import check_length

    check_references(args.task)  # these mistakes are said before TensorFlow's import
    epochs = None if args.steps is not None else (1 if args.epochs is None else args.epochs)
    check_length(epochs=epochs, steps=args.steps, initial_epoch=0)
    options = _options(args)
    runtime.configure(precision=args.precision)
    task = load_task(args.task, batch_size=args.batch_size)
    if args.data_service:
        task = _through_service(task, args)
    trainer = Trainer(task, options=options, on_progress=_progress_printer(args.json))
    result = trainer.fit(epochs=epochs, steps=args.steps)
    summary = {**result.to_dict(), "choices": choices.as_dict()}
    if not trainer.is_chief:
        return 0
    if args.log_dir:
        from tfgpu.report.runs import save_run

        save_run(args.log_dir, "train", summary)
    if args.json:
        _common.print_json(summary)
        return 0
    out = _common.out
    out.print(choices.summary_line())
    if result.tuning:
        out.print(result.tuning.summary, markup=False)
    for entry in result.history:
        fields = [f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in entry.items()]
        for line in _common.packed(fields, width=out.width):
            out.print(line, soft_wrap=True, markup=False)
    rate = "steady-state examples/s" if result.steady else "examples/s"
    out.print(
        f"trained {result.steps} steps x {result.global_batch} examples in {result.seconds:.1f} s: "
        f"{result.examples_per_s:,.0f} {rate}; {result.sentence()}"
    )
    if result.warm_up_sentence():
        out.print(f"warm-up, not in the figures above: {result.warm_up_sentence()}")
    if result.final_checkpoint:
        out.print(f"checkpoint: {result.final_checkpoint}")
    return 0

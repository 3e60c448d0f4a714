"""``tfgpu tune TASK``: measure the fastest configuration of a run, show every trial, write it for
``tfgpu train --config``. The same measurement ``tune=True`` makes before a run's first epoch."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from tfgpu.cli import _common
from tfgpu.cli._progress import phases
from tfgpu.cli.train import batch_size_arg, tune_arg
from tfgpu.errors import ConfigError, InputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tune",
        help="measure the fastest steps per call, input options, XLA (and with --knobs all: mixed precision, "
        "one device against all) for a run; write them for tfgpu train --config",
    )
    p.add_argument("task", nargs="?", help="FILE_OR_MODULE:FUNCTION returning a tfgpu.Task")
    p.add_argument(
        "--model", help="FILE_OR_MODULE:FUNCTION returning a compiled Keras model (with --dataset)"
    )
    p.add_argument(
        "--dataset", help="FILE_OR_MODULE:FUNCTION returning the batched tf.data.Dataset you train on"
    )
    p.add_argument(
        "--knobs",
        type=tune_arg,
        default=True,
        metavar="KNOBS",
        help="comma-separated knobs to tune, or all (default: steps_per_execution, input, jit_compile, devices)",
    )
    p.add_argument("--budget", type=float, metavar="S", help="seconds the tuning may take (default 20-60)")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=int, help="the run to come, in epochs (sets the default budget)")
    length.add_argument("--steps", type=int, help="the run to come, in steps (sets the default budget)")
    p.add_argument(
        "--batch-size",
        type=batch_size_arg,
        help="per-replica batch (overrides the Task's); auto: doubled while it fits and gains 5%%",
    )
    p.add_argument(
        "--out",
        default="tfgpu-tuning.json",
        help="write the choice here (default tfgpu-tuning.json; replaced whole on a re-run)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def _task(args: argparse.Namespace) -> Any:
    from tfgpu.cli.diagnose import load_dataset, load_model
    from tfgpu.cli.train import load_task
    from tfgpu.train import Task

    if args.task and not (args.model or args.dataset):
        return load_task(args.task, batch_size=args.batch_size)
    if args.model and args.dataset and not args.task:
        dataset = load_dataset(args.dataset)
        return Task(model=lambda: load_model(args.model), train_data=dataset)
    raise InputError(
        "tfgpu tune takes a Task, or a model and a dataset",
        value=" ".join(filter(None, (args.task, args.model and "--model", args.dataset and "--dataset"))),
        fix="pass tfgpu tune task.py:make_task, or tfgpu tune --model m.py:make_model --dataset d.py:make_dataset",
    )


def run(args: argparse.Namespace) -> int:
    from tfgpu.loader import check_references

    check_references(args.task, args.model, args.dataset)  # said before TensorFlow's import
    from tfgpu.train import Trainer, TrainOptions, tuning

    out = Path(args.out)
    if out.is_dir():  # refused before measuring, not after
        raise ConfigError(
            "--out must name a file, and this is a directory",
            value=str(out),
            fix=f"pass --out {out / tuning.FILE}",
        )
    asked = tuning.TuneOptions.from_arg(args.knobs, args.budget, auto_batch=args.batch_size == "auto")
    options = TrainOptions.of(tune=dataclasses.replace(asked, keep=False))  # the file is its record
    task = _task(args)
    epochs = None if args.steps is not None else (1 if args.epochs is None else args.epochs)
    with phases("tune", machine_output=args.json) as progress:  # said as it starts, not at the end
        progress("tune", 0, 0)
        trainer = Trainer(task, options=options)
        found = trainer.tune(epochs=epochs, steps=args.steps)
    if trainer.is_chief:
        tuning.save(out, found.parts, found)
    if args.json:
        _common.print_json({**found.to_dict(), "written": str(out)})
        return 0
    _render(found, out=out, task=args.task)
    return 0


def _render(found: Any, *, out: Path, task: str | None) -> None:
    from rich.table import Table

    from tfgpu.train import tuning

    table = Table(
        title="trials: examples/s, medians of paired rounds (K: steps per call)", title_justify="left"
    )
    for column in tuning.TRIAL_COLUMNS:
        table.add_column(column, justify="left" if column in ("knob", "from", "to") else "right")
    for trial in found.trials:
        table.add_row(*tuning.trial_row(trial))
    console = _common.out
    if found.trials:
        console.print(table)
    console.print(found.line(), markup=False)  # wrapped between words, not by the terminal mid-word
    console.print(f"written: {out}; train with it:", markup=False)
    # the command on a line of its own, never broken by rich: copied whole even when it is long
    console.print(f"  tfgpu train {task or 'TASK'} --config {out}", markup=False, soft_wrap=True)

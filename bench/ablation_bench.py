"""Where tfgpu's training step spends its time beyond the model's own step (issue 54, item 1).

Times tfgpu's compiled execution (``train.step.execution.train_execution``, the function the loop
calls) with each per-step extra switched off (``execution.Extras``), one at a time and all
together, against the bare in-graph loop, in one process on one device, interleaved rounds:

- ``bare in-graph loop``: ``_loops.bare_loop``, the twenty lines an expert writes;
- ``bare + Keras's metrics``: the same loop updating the loss's running mean and the accuracy
  each step, as Keras's ``train_step`` does for ``compile(metrics=["accuracy"])``: the part of
  tfgpu's step that is Keras's contract;
- the ladder (issue 65), one difference a rung: ``+ Keras's train_step`` (the bare loop's
  shape around the compiled model's own step, no strategy), ``+ tfgpu's strategy and its
  iterator`` (the step in ``OneDeviceStrategy.run``), ``+ the end-of-data path`` (the optional
  and the branch a dataset of unknown length needs), then ``tfgpu execution: known length``
  (what ``tfgpu.fit`` runs on arrays or a dataset of known length on one device, every extra on)
  and ``unknown length`` (the same with the end-of-data path);
- ``tfgpu execution: ...`` rows below: the unknown-length execution, called directly on the same
  ``tf.data`` input (one call per epoch, nothing read back until its end), with
- ``... no wait``: without the input-wait timestamps and their control dependencies on the
  step's stateful ops and state; ``no finite``, ``no rows``, ``no step_logs``, ``no sharing``,
  ``fetch at top``: the other extras (``execution.Extras``); ``none``: all of them off;
- ``... not stoppable``: without the stop cap the condition reads each step (``train.pieces.stopping``);
- ``... stop on device``: the loop's condition as it was before (a bool op a GPU computes and
  the loop copies back each step; ``execution.in_graph_loop``'s ``host_stop``);
- ``tfgpu.fit arrays`` / ``tfgpu.fit tf.data``: the whole fit (its Python, its windows and its
  input: the gather by index from arrays on the device, or the same ``tf.data`` input).

Each row: examples/s (median, min, max of the rounds), GPU busy (NVML, 20 ms samples, median of
the rounds after the warm-up; empty on the CPU) and the step graph's node count (the function
and every function it calls), with the ratio to the bare loop.

Models as ``gpu_bench.py``: CNN 64x64x3 batch 256, MLP 256-2048-2048-10 batch 1024. ``--small``
shrinks them to check the script on a CPU, the default there (``--full`` for full sizes).

Run: make bench-ablation  (or .venv/bin/python bench/ablation_bench.py [--repeats 3] [--small |
--full] [--models cnn,mlp] [--pin])
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from dataclasses import replace
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf
from _common import interleaved_rates, save, table
from _loops import bare_loop, compiled
from gpu_bench import EPOCHS, bench_models, with_busy

import tfgpu
from tfgpu import distribute
from tfgpu.train.model import building
from tfgpu.train.step import execution

OFF = {
    "no wait": {"wait": False},
    "no finite": {"finite": False},
    "no rows": {"rows": False},
    "no step_logs": {"step_logs": False},
    "no sharing": {"sharing": False},
    "fetch at top": {"fetch_ahead": False},
    "stop on device": {"host_stop": False},  # the loop's condition before (execution.in_graph_loop)
    "not stoppable": {"stoppable": False},  # no stop cap read in the condition (train.stopping)
    "none": {
        "wait": False,
        "finite": False,
        "rows": False,
        "step_logs": False,
        "sharing": False,
        "fetch_ahead": False,
        "stoppable": False,
    },
}


def nodes(function: Any, *args: Any) -> int:
    """The nodes of ``function``'s graph for ``args`` and of every function it calls."""
    graph = function.get_concrete_function(*args).graph.as_graph_def()
    return len(graph.node) + sum(len(f.node_def) for f in graph.library.function)


def execution_run(
    strategy: Any,
    build: Callable[[], Any],
    dataset: Any,
    *,
    steps: int,
    batch: int,
    extras: execution.Extras,
    known: bool = False,
) -> tuple[Callable[[], int], int]:
    """``run() -> examples``: ``EPOCHS`` calls of ``extras``' execution, one per epoch, read once
    each at its end (as the loop reads a window); and its graph's node count. ``known``: the
    loop's shape where the step count is known (what ``tfgpu.fit`` runs on arrays on one device)."""
    model = compiled(strategy, build)
    building.build(model, strategy, dataset.element_spec)  # as the loop does before its first call
    execute = execution.train_execution(strategy, model, jit_compile=False, known=known, extras=extras)
    # one device: the dataset itself, as tfgpu's input reads it there (``distribute.input_strategy``)
    feed = distribute.input_strategy(strategy, in_cluster=False)
    distributed = dataset if feed is None else feed.experimental_distribute_dataset(dataset)
    limit = execution.limit(steps)

    def run() -> int:
        for _ in range(EPOCHS):  # read as the loop reads a window: its device tensors
            execution.finished(execute(iter(distributed), limit))
        return EPOCHS * steps * batch

    return run, nodes(execute, iter(distributed), limit)


def ladder_run(
    strategy: Any, build: Callable[[], Any], dataset: Any, *, steps: int, batch: int, rung: str
) -> tuple[Callable[[], int], int]:
    """``run() -> examples`` of one rung of the ladder (issue 65), each one difference above the
    one below it, all through ``execution.in_graph_loop`` with no extras:

    - ``train_step``: the bare loop's shape (``get_next`` at the top, ``done < limit``) around
      the compiled model's own ``train_step``, called as Keras calls it, with no strategy;
    - ``strategy``: the same step in ``strategy.run`` (tfgpu's one-device strategy), fed the
      iterator tfgpu feeds it there (``distribute.input_strategy``: the dataset's own on one device);
    - ``end of data``: the loop that asks whether the data has ended (the optional, the branch on
      it): what a dataset of unknown length needs.
    """
    import tensorflow as tf

    model = compiled(strategy, build)
    building.build(model, strategy, dataset.element_spec)
    feed = distribute.input_strategy(strategy, in_cluster=False)
    distributed = (
        dataset if feed is None or rung == "train_step" else feed.experimental_distribute_dataset(dataset)
    )

    def body(data: Any, state: Any, index: Any) -> Any:
        if rung == "train_step":
            logs = model.train_step(data)
        else:
            logs = strategy.run(model.train_step, args=(data,))
        with tf.control_dependencies(tf.nest.flatten(strategy.experimental_local_results(logs))):
            return state + 1.0

    @tf.function(autograph=False)
    def epoch(iterator: Any, limit: Any) -> Any:
        out = execution.in_graph_loop(iterator, limit, body, tf.constant(0.0), known=rung != "end of data")
        return out.state

    limit = execution.limit(steps)

    def run() -> int:
        for _ in range(EPOCHS):
            float(epoch(iter(distributed), limit))
        return EPOCHS * steps * batch

    return run, nodes(epoch, iter(distributed), limit)


LADDER = {
    "+ Keras's train_step": "train_step",
    "+ tfgpu's strategy and its iterator": "strategy",
    "+ the end-of-data path": "end of data",
}


def fit_run(
    strategy: Any, build: Callable[[], Any], data: Any, *, rows: int, batch: int
) -> Callable[[], int]:
    """``run() -> examples``: ``tfgpu.fit`` for ``EPOCHS`` epochs on arrays ``(x, y)`` or a dataset."""
    model = compiled(strategy, build)
    arrays_given = isinstance(data, tuple)

    def run() -> int:
        if arrays_given:
            tfgpu.fit(model, *data, batch_size=batch, epochs=EPOCHS, verbose=0, shuffle=False)
        else:
            tfgpu.fit(model, data, epochs=EPOCHS, verbose=0)
        return EPOCHS * rows

    return run


def variants(
    name: str, build: Callable[[], Any], batch: int, x: Any, y: Any, strategy: Any
) -> tuple[dict, dict]:
    """Every row's ``run`` and graph node count for one model."""
    steps = len(x) // batch
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .batch(batch, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )
    runs: dict[str, Callable[[], int]] = {
        f"{name}: bare in-graph loop": bare_loop(build, batch, x, y, epochs=EPOCHS),
        f"{name}: bare + Keras's metrics": bare_loop(build, batch, x, y, epochs=EPOCHS, metrics=True),
    }
    counts: dict[str, int | None] = dict.fromkeys(runs)
    for label, rung in LADDER.items():
        run, count = ladder_run(strategy, build, dataset, steps=steps, batch=batch, rung=rung)
        runs[f"{name}: {label}"], counts[f"{name}: {label}"] = run, count
    for label, (known, off) in {
        "tfgpu execution: known length": (True, {}),
        "tfgpu execution: unknown length": (False, {}),
        **{f"tfgpu execution: {label}": (False, off) for label, off in OFF.items()},
    }.items():
        extras = replace(execution.ALL, **off)
        run, count = execution_run(
            strategy, build, dataset, steps=steps, batch=batch, extras=extras, known=known
        )
        runs[f"{name}: {label}"], counts[f"{name}: {label}"] = run, count
    rows = steps * batch
    runs[f"{name}: tfgpu.fit arrays"] = fit_run(strategy, build, (x[:rows], y[:rows]), rows=rows, batch=batch)
    runs[f"{name}: tfgpu.fit tf.data"] = fit_run(strategy, build, dataset, rows=rows, batch=batch)
    return runs, counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="tiny sizes (the default without a GPU)")
    parser.add_argument("--full", action="store_true", help="full sizes without a GPU too (slow on a CPU)")
    parser.add_argument("--models", default="cnn,mlp")
    parser.add_argument("--pin", action="store_true", help="run on one core (this VM's noise is lower there)")
    args = parser.parse_args()
    if args.pin:
        os.sched_setaffinity(0, {0})
    gpus = tf.config.list_logical_devices("GPU")
    device = gpus[0].name if gpus else "/cpu:0"
    strategy = tf.distribute.OneDeviceStrategy(device)
    small = args.small or (not gpus and not args.full)
    models = bench_models(small=small)
    runs: dict[str, Callable[[], int]] = {}
    counts: dict[str, int | None] = {}
    for name in args.models.split(","):
        build, batch, (x, y) = models[name]
        more_runs, more_counts = variants(name, build, batch, x, y, strategy)
        runs.update(more_runs)
        counts.update(more_counts)
    busy: dict[str, list[float]] = {name: [] for name in runs}
    rates = interleaved_rates(
        {name: with_busy(run, busy[name]) for name, run in runs.items()}, rounds=args.repeats
    )
    rows = []
    for name, r in rates.items():
        bare = rates[f"{name.split(':')[0]}: bare in-graph loop"]["median"]
        rows.append(
            {
                "run": name,
                "examples_per_s": r["median"],
                "min": r["min"],
                "max": r["max"],
                "vs_bare": round(r["median"] / bare, 3),
                "gpu_busy_%": statistics.median(busy[name][1:]) if len(busy[name]) > 1 else None,
                "graph_nodes": counts.get(name),
            }
        )
    title = f"Ablation on {device} ({'small sizes' if small else 'CNN 64x64x3 b256, MLP 256-2048-2048-10 b1024'}); median of {args.repeats}"
    print(table(title, rows, ["run", "examples_per_s", "min", "max", "vs_bare", "gpu_busy_%", "graph_nodes"]))
    print(f"\nwrote {save('ablation_bench', {'device': device, 'small': small, 'runs': rows})}")


if __name__ == "__main__":
    main()

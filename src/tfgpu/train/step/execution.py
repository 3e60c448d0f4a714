"""The compiled loops: up to K training steps, or a whole evaluation, inside one ``tf.function``.

Each step is the model's own ``train_step`` (or ``test_step``) run by ``strategy.run``, so the
compiled loss, metrics, optimizer and any override behave as under ``Model.fit``. The iterator goes
into the function and the loop takes each batch itself, the shape of orbit's in-graph loop and of
Keras ``fit`` at ``steps_per_execution`` > 1: no Python runs between steps and nothing is read back
to the host, so dispatch stays asynchronous and a GPU never waits for the host. An execution
returns, as device tensors the host reads once per log window:

- ``logs``: the model's metric results after the execution (``get_metrics_result`` read outside
  the replicas: exact over every replica and worker, as Keras's metric variables are ON_READ/SUM);
  under MultiWorkerMirroredStrategy this is one all-reduce per execution;
- ``first_bad``: the index (within the execution) of the first step after which this worker's
  replicas reported a non-finite loss, or -1; checked on the replicas' local results (the running
  loss, which stays non-finite once it is), so the check costs no communication and no
  device-to-host copy per step;
- ``wait`` / ``first_wait``: seconds a step waited for its batch (host timestamps taken in the
  graph, ``in_graph_loop``), all of them and the first one, which at the start of an epoch
  is start-up cost;
- ``examples``: the rows this worker's replicas trained on (batch shapes, no device work).

The in-graph loop itself (``in_graph_loop``, at the end) is shared with evaluation and
prediction: the iterator goes into the ``tf.function`` and a ``tf.while_loop`` takes up to
``limit`` batches from it, the shape of orbit's in-graph loop and of Keras at
``steps_per_execution`` > 1, because a step per Python call costs a GPU (the host spends the call's
overhead while the device waits, and reading a result each step syncs the two).

It is also the one way tfgpu times a training configuration (``tfgpu diagnose``'s step profile
and advice, ``tune=True``): ``timed`` makes calls of ``per_call`` steps, as the loop does, reads
nothing back until the end, and returns the seconds; ``restored`` puts the model's weights,
optimizer state and metrics back afterwards, so timing never changes what the user trains.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from tfgpu import graphs
from tfgpu.train.pieces import accumulation, losses, model_cache, stopping


class Executed(NamedTuple):
    """What a training execution returns, as device tensors (see the module docstring)."""

    steps: Any  # the steps taken (int32; host memory: reading it does not wait for the device)
    wait: Any  # seconds the steps waited for their batches (0 when unmeasured: ``Extras.wait``)
    first_wait: Any  # the first fetch's share of it
    examples: Any  # rows this worker's replicas trained on
    first_bad: Any  # the index of the first step with a non-finite loss, or -1
    logs: Any  # the model's metric results (or the step's own outputs: ``StepLogs``)
    stop: Any = None  # several workers: how many were asked to stop (``stopping.agreed``); else 0


class Evaluated(NamedTuple):
    """What an evaluation execution returns, as device tensors."""

    examples: Any
    steps: Any
    logs: Any


def _rows(strategy: Any, batch: Any) -> Any:
    """The rows of this worker's part of a (distributed) batch: shapes only."""
    import tensorflow as tf

    parts = strategy.experimental_local_results(tf.nest.flatten(batch)[0])
    return tf.shape(parts[0])[0] if len(parts) == 1 else tf.add_n([tf.shape(p)[0] for p in parts])


def rows_of(strategy: Any, batch: Any) -> int:
    """The rows of a (distributed) batch on this worker's replicas, read now."""
    return int(_rows(strategy, batch))


def _finite(strategy: Any, outputs: Any) -> Any:
    """1.0 when every local replica's "loss" output is finite, else 0.0 (1.0 when there is none)."""
    import tensorflow as tf

    loss = outputs.get("loss") if isinstance(outputs, dict) else None
    if loss is None:
        return tf.constant(1.0)
    parts = strategy.experimental_local_results(loss)
    ok = tf.math.is_finite(parts[0]) if len(parts) == 1 else tf.reduce_all(tf.math.is_finite(tf.stack(parts)))
    return tf.cast(ok, tf.float32)


def _flat_keys(outputs: dict[str, Any]) -> set[str]:
    """A step's output names with a nested dict's names in its place: ``{m.name: m.result() for m
    in self.metrics}`` (keras-io's own ``test_step``) gives ``{"loss": ..., "compile_metrics":
    {"mae": ...}}``, the model's metric results under other nesting. Read in a replica, each
    figure was that replica's rows only (mae 0.372 against one device's 0.385 on 2 replicas)."""
    keys: set[str] = set()
    for name, value in outputs.items():
        keys |= set(value) if isinstance(value, dict) else {name}
    return keys


class StepLogs:
    """What a step returned, as Keras reports it: the last step's outputs (the mean over this
    worker's replicas, ``reduce_per_replica(..., "auto")``) unless their keys are the model's
    metric names (``_get_metrics_result_or_logs``; a nested dict's names counted in its place,
    ``_flat_keys``), when the metric results are reported instead, read across the replicas.

    A custom ``train_step`` returning ``{"loss": ..., "grad_norm": ...}`` gets both in Keras's
    History; reading only the metric results dropped ``grad_norm``. The decision is made while
    tracing; only when the keys differ is anything carried through the loop (an Optional whose
    spec is set as the body is traced, as Keras's own multi-step loop does), so the usual step
    costs nothing more.
    """

    def __init__(self, strategy: Any, model: Any) -> None:
        import tensorflow as tf

        self.strategy, self.model = strategy, model
        self.empty = tf.experimental.Optional.empty(None)
        self.carried = False
        self._names: set[str] | None = None

    def _metric_names(self) -> set[str]:
        if self._names is None:
            self._names = set(self.model.get_metrics_result())
        return self._names

    def start(self) -> Any:
        """Call in the function's graph before the loop: the loop's initial value."""
        self._metric_names()
        return self.empty

    def update(self, outputs: Any, previous: Any, *, ran: Any = None) -> Any:
        """In the loop body: the step's outputs carried on, or ``previous`` when not needed.
        ``ran``: per local replica, whether it stepped (an evaluation's last batch can leave a
        replica without rows: its zeros are no figure, and halved the mean of two)."""
        import tensorflow as tf

        if isinstance(outputs, dict) and self._metric_names() in (set(outputs), _flat_keys(outputs)):
            return previous
        self.carried = True
        mean = tf.nest.map_structure(lambda value: self._local_mean(value, ran), outputs)
        value = tf.experimental.Optional.from_value(mean)
        self.empty._element_spec = value.element_spec
        return value

    def _local_mean(self, value: Any, ran: Any) -> Any:
        import tensorflow as tf

        parts = self.strategy.experimental_local_results(value)
        if len(parts) == 1:
            return parts[0]
        if ran is None:
            return tf.reduce_mean(tf.stack(parts), axis=0)
        weights = tf.cast(tf.stack(ran), parts[0].dtype)
        weights = tf.reshape(weights, [-1] + [1] * parts[0].shape.rank)
        return tf.math.divide_no_nan(tf.reduce_sum(tf.stack(parts) * weights, axis=0), tf.reduce_sum(weights))

    def result(self, final: Any) -> Any:
        """After the loop: the logs to report (the metric results when nothing was carried)."""
        import tensorflow as tf

        metrics = self.model.get_metrics_result()
        if not self.carried:
            return metrics
        final._element_spec = self.empty.element_spec
        spec = self.empty.element_spec
        # no step taken (the data had ended): zeros of the logs' structure, never read
        logs = tf.cond(
            final.has_value(),
            final.get_value,
            lambda: tf.nest.map_structure(lambda s: tf.zeros([d or 0 for d in s.shape], s.dtype), spec),
        )
        return self._across_workers(logs)

    def _across_workers(self, logs: Any) -> Any:
        """Under several workers, every worker reports the same figures (the mean of each
        worker's), so callbacks such as EarlyStopping decide alike everywhere: one all-reduce
        per execution, only for carried logs."""
        import tensorflow as tf

        from tfgpu import distribute

        if not distribute.collective_workers(self.strategy):
            return logs

        def mean(value: Any) -> Any:
            return distribute.mean_over_replicas(self.strategy, value) if value.dtype.is_floating else value

        return tf.nest.map_structure(mean, logs)


@dataclass(frozen=True)
class Extras:
    """What a training execution does on each step besides the model's own step. The loop runs
    them all (``ALL``), in one traced execution: a second, lean variant without the wait
    timestamps cost a second trace and bought nothing measurable on an H200 (0.71x / 0.44x of
    the bare loop with them, 0.70x / 0.44x without; issue 65). ``bench/ablation_bench.py``
    switches each off to price it on the device (issue 54), so what it measures is this
    function, not a copy of it.

    - ``wait``: the input-wait timestamps and the control dependencies they add on the step's
      stateful ops and state (``in_graph_loop``'s ``measure``);
    - ``finite``: the count of steps with a finite loss (``first_bad``);
    - ``rows``: the rows counted from the batch shapes (``examples``);
    - ``step_logs``: a step's own outputs carried when they are not the metric results;
    - ``sharing``: each replica's loss scaled by its share of the rows (``train.pieces.losses``);
    - ``fetch_ahead``: the next batch fetched in a ``tf.cond`` at the end of the body (off: at
      the top of the next iteration);
    - ``host_stop``: the loop's condition an int32 comparison kept in host memory (off: the
      bool op it was before, which a GPU computes and the loop copies back each step;
      ``in_graph_loop``). Not an extra but the loop's shape: on in every execution,
      off only in the ablation bench's row.
    - ``stoppable``: a run asked to stop ends the call after its step (``train.pieces.stopping``: in
      one process the loop's condition reads the stop cap each step; under several workers the
      call ends with the all-reduce that makes them agree).
    """

    wait: bool = True
    finite: bool = True
    rows: bool = True
    step_logs: bool = True
    sharing: bool = True
    fetch_ahead: bool = True
    host_stop: bool = True
    stoppable: bool = True


ALL = Extras()


def compiled(
    model: Any,
    strategy: Any,
    name: str = "train",
    *,
    jit_compile: bool = False,
    known: bool = False,
    extras: Extras = ALL,
) -> Any:
    """``model``'s compiled "train" execution (with or without XLA; ``known``: every call takes
    its whole limit, see ``in_graph_loop``), "skip" or "metrics" function under ``strategy``,
    made once per model, strategy and compiled state (``train.pieces.model_cache``): the loop calls it
    as it is, the tuner times it through ``rate``, and diagnose profiles it. The key holds the
    strategy object (a freed one's id is reused)."""

    def make() -> Any:
        if name == "skip":
            return skip_batches()
        if name == "metrics":
            return metrics_reader(model)
        return train_execution(strategy, model, jit_compile=jit_compile, known=known, extras=extras)

    key = (name, strategy, jit_compile, known, extras, graphs.eager(model))
    return model_cache.function(model, key, make)


def train_execution(
    strategy: Any, model: Any, *, jit_compile: bool, known: bool = False, extras: Extras = ALL
) -> Callable[[Any, Any], Executed]:
    """fn(iterator, limit) -> accumulators of up to ``limit`` steps (see the module docstring);
    ``known``: exactly ``limit`` (``in_graph_loop``). Traced without AutoGraph, as Keras traces
    its own step functions: the model's ``train_step`` is called as ``Model.fit`` calls it."""
    import tensorflow as tf

    if model.optimizer is not None and _replicated(strategy):
        accumulation.enable(model.optimizer)  # Keras's own fails there (keras-team/keras#20582)
    # each replica's losses scaled by its share of the rows
    step = losses.sharing(model.train_step) if extras.sharing else model.train_step
    if jit_compile and not graphs.eager(model):  # Keras's compile turns XLA off when run eagerly
        step = tf.function(step, jit_compile=True, autograph=False)
    step_logs = StepLogs(strategy, model)
    one = tf.constant(1.0)
    # several workers agree at the call's end; one process cuts the loop itself (``stopping``)
    agree = extras.stoppable and _collective_workers(strategy)

    def body(batch: Any, state: Any, index: Any) -> Any:
        finite_steps, examples, last = state
        with losses.scaled_as_one_device():  # a 0-d loss, an uneven split: as on one device
            outputs = (
                losses.run(strategy, step, batch) if extras.sharing else strategy.run(step, args=(batch,))
            )
        # the logged loss is the epoch's running mean: non-finite from the first bad step on, so
        # the count of finite steps is that step's index (two scalar ops a step, no comparison)
        return (
            finite_steps + (_finite(strategy, outputs) if extras.finite else one),
            examples + (tf.cast(_rows(strategy, batch), tf.float32) if extras.rows else 0.0),
            step_logs.update(outputs, last) if extras.step_logs else last,
        )

    def execute(iterator: Any, limit: Any) -> Executed:
        start = (tf.constant(0.0), tf.constant(0.0), step_logs.start())
        out = in_graph_loop(
            iterator,
            limit,
            body,
            start,
            measure=extras.wait,
            known=known,
            fetch_ahead=extras.fetch_ahead,
            host_stop=extras.host_stop,
            stoppable=extras.stoppable and not _spans_workers(strategy),
        )
        finite_steps, examples, last = out.state
        done = tf.cast(out.steps, tf.float32)
        first_bad = tf.where(finite_steps < done, finite_steps, tf.constant(-1.0))
        stop = stopping.agreed(strategy, out.steps) if agree else tf.constant(0.0)
        logs = step_logs.result(last)
        return Executed(out.steps, out.wait, out.first_wait, examples, first_bad, logs, stop)

    return graphs.traced(execute, model=model)


def _spans_workers(strategy: Any) -> bool:
    """Replicas in several processes: no worker may cut its loop alone (``stopping``)."""
    from tfgpu import distribute

    return distribute.spans_workers(strategy)


def _collective_workers(strategy: Any) -> bool:
    """Several workers in one collective group: a stop is agreed in the call (``stopping``)."""
    from tfgpu import distribute

    return distribute.collective_workers(strategy)


def _replicated(strategy: Any) -> bool:
    """Several replicas or workers, or parameter servers: where Keras's accumulating optimizer fails."""
    from tfgpu import distribute

    return (
        distribute.is_parameter_server(strategy)
        or strategy.num_replicas_in_sync > 1
        or distribute.spans_workers(strategy)
    )


def skip_batches() -> Callable[[Any, Any], Any]:
    """fn(iterator, n): take n batches without training (resuming mid-epoch); returns how many."""
    import tensorflow as tf

    @tf.function(autograph=False)
    def skip(iterator: Any, n: Any) -> Any:
        return in_graph_loop(iterator, n, lambda batch, state, index: state, tf.constant(0)).steps

    return skip


def example_counter(strategy: Any) -> Any:
    """A row counter summed over replicas and workers when read (ON_READ / SUM, as Keras's metrics)."""
    import tensorflow as tf

    with strategy.scope():
        return tf.Variable(
            0.0,
            trainable=False,
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.SUM,
            name="examples_seen",
        )


def eval_execution(strategy: Any, model: Any, counter: Any) -> Callable[[Any, Any], Evaluated]:
    """fn(iterator, limit) -> the logs Keras's ``evaluate`` reports (``StepLogs``) and the exact
    example count (``counter``, from ``example_counter``) over up to ``limit`` batches, in one
    call. Reset both first."""
    import tensorflow as tf

    step_logs = StepLogs(strategy, model)
    shapes: list[Any] = []  # the test step's outputs, seen when tracing the branch that runs it

    def replica(batch: Any) -> Any:
        rows = tf.shape(tf.nest.flatten(batch)[0])[0]

        def run() -> Any:
            with losses.unscaled():  # in the replica's thread: its loss its own mean, as one device's
                # tensors: Keras < 3.14 returns Python floats from a step run eagerly (run_eagerly)
                outputs = tf.nest.map_structure(tf.convert_to_tensor, model.test_step(batch))
            shapes[:] = [tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), outputs)]
            with tf.control_dependencies(tf.nest.flatten(outputs)):
                return counter.assign_add(tf.cast(rows, tf.float32)), outputs

        def skip() -> Any:
            empty = tf.nest.map_structure(lambda s: tf.zeros([d or 0 for d in s.shape], s.dtype), shapes[0])
            return tf.constant(0.0), empty

        # the last batch can leave a replica with zero examples: its mean loss would be 0/0, and
        # some kernels (oneDNN Conv2D) reject an empty batch; it adds nothing to the metrics anyway
        return tf.cond(rows > 0, run, skip)[1]

    def body(batch: Any, state: Any, index: Any) -> Any:
        with losses.scaled_as_one_device():  # a 0-d loss reported as on one device
            outputs = strategy.run(replica, args=(batch,))
        parts = strategy.experimental_local_results(tf.nest.flatten(batch)[0])
        return step_logs.update(outputs, state, ran=[tf.shape(p)[0] > 0 for p in parts])

    def evaluate(iterator: Any, limit: Any) -> Evaluated:
        out = in_graph_loop(iterator, limit, body, step_logs.start())
        return Evaluated(counter.read_value(), out.steps, step_logs.result(out.state))

    return graphs.traced(evaluate, model=model)


def metrics_reader(model: Any) -> Callable[[], dict[str, Any]]:
    """fn() -> the model's metric results, read outside the replicas in one compiled call."""
    return graphs.traced(model.get_metrics_result, model=model)


# -- timing: the loop's own calls, timed (diagnose and tune=True) ------------------------------
_LIMITS: dict[int, Any] = {}


def limit(steps: int) -> Any:
    """``steps`` as a constant tensor, made once per value: a Python int would retrace the call."""
    import tensorflow as tf

    if steps not in _LIMITS:
        _LIMITS[steps] = tf.constant(steps, tf.int32)
    return _LIMITS[steps]


def timed(
    execute: Callable[[Any, Any], Executed], iterator: Any, *, steps: int, per_call: int
) -> tuple[float, list[float], list[Executed]]:
    """``steps`` steps from ``iterator``, ``per_call`` per compiled call (``execute``, a
    ``train.step.execution`` function), nothing read back until the end: the seconds they took, when
    each call was made (from the start), and each call's outputs."""
    outputs, starts = [], []
    per = limit(per_call)
    start = time.perf_counter()
    for _ in range(max(1, steps // per_call)):
        starts.append(time.perf_counter() - start)
        outputs.append(execute(iterator, per))
    finished(outputs[-1])  # the calls run in order: the last one's device outputs wait for all
    return time.perf_counter() - start, starts, outputs


def traced(execute: Any, iterator: Any, *, per_call: int) -> None:
    """Trace ``execute`` (a ``train.step.execution`` function) for ``iterator`` without running it:
    what its first call then costs past a steady one is the compile (``tuning``'s XLA). An
    execution run eagerly (``graphs.traced``) has nothing to trace."""
    if hasattr(execute, "get_concrete_function"):
        execute.get_concrete_function(iterator, limit(per_call))


def finished(outputs: Executed) -> None:
    """Return once the device has run the execution that gave ``outputs`` (and every one before
    it): read its device tensors (the logs, the row and finite counts). Not ``steps``: it is
    host memory, computed by the loop's host-side control, so it can be ready while the device
    still runs the steps (``in_graph_loop``)."""
    import tensorflow as tf

    for value in [outputs.examples, outputs.first_bad, *tf.nest.flatten(outputs.logs)]:
        if hasattr(value, "numpy"):
            value.numpy()


def rate(
    execute: Callable[[Any, Any], Executed],
    fresh: Callable[[], Any],
    *,
    per_call: int,
    steps: int,
    max_steps: int | None,
) -> tuple[float, float, float]:
    """(examples/s, the last call's loss, examples a step) of ``steps`` steps (whole calls of
    ``per_call``, never more than ``max_steps`` less one call) from ``fresh()``'s iterator,
    after one untimed call (tracing, the pipeline's first fill): how tuning times a
    configuration, the loop's own calls."""
    k = per_call
    steps = max(k, steps // k * k)
    if max_steps is not None:
        steps = max(k, min(steps, (max_steps - k) // k * k))
    # the iterators are deleted here, not on tfgpu.letting_go's thread: a deletion there ran
    # beside the next measurement and slowed it (the tuner's calibration read a dispatch-bound
    # model's rate low enough that its ladder stopped at 4 steps a call, not 16)
    iterator = fresh()
    timed(execute, iterator, steps=k, per_call=k)
    seconds, _, outputs = timed(execute, iterator, steps=steps, per_call=k)
    if not examples(outputs):  # the data ended in the untimed call: time a fresh pass
        seconds, _, outputs = timed(execute, fresh(), steps=steps, per_call=k)
    logs = outputs[-1].logs
    loss = float(logs["loss"]) if isinstance(logs, dict) and "loss" in logs else float("nan")
    rows = examples(outputs)
    return rows / max(seconds, 1e-9), loss, rows / (len(outputs) * k)


def examples(outputs: list[Executed]) -> float:
    """The rows the calls trained on (this worker's replicas)."""
    return float(sum(float(o.examples) for o in outputs))


@contextlib.contextmanager
def restored(model: Any) -> Iterator[None]:
    """Put the model's weights, optimizer state and metrics back as they were on leaving: timing
    a step trains the model, which must not change the user's model."""
    optimizer = getattr(model, "optimizer", None)
    variables = list(model.weights) + (list(optimizer.variables) if optimizer is not None else [])
    saved = [v.numpy() for v in variables]
    try:
        yield
    finally:
        for variable, value in zip(variables, saved, strict=True):
            variable.assign(value)
        model.reset_metrics()


# -- the in-graph loop (training, evaluation and prediction) ---------------------------------------


class Looped(NamedTuple):
    """What ``in_graph_loop`` returns, as tensors: the batches taken, the input wait (seconds,
    0 unmeasured), the first fetch's wait, and the body's final state."""

    steps: Any
    wait: Any
    first_wait: Any
    state: Any


def in_graph_loop(
    iterator: Any,
    limit: Any,
    body: Callable[[Any, Any, Any], Any],
    state: Any,
    *,
    measure: bool = False,
    known: bool = False,
    fetch_ahead: bool = True,
    host_stop: bool = True,
    stoppable: bool = False,
) -> Looped:
    """Run ``state = body(batch, state, index)`` for up to ``limit`` batches of ``iterator``, in the graph.

    Each next batch is fetched as an optional at the end of the previous step (never past
    ``limit``, so no batch is lost between executions), and the loop stops when the iterator is
    exhausted: under a multi-worker strategy the distributed iterator agrees on that across
    workers. Returns the batches taken, the input wait and the final state.

    The loop's condition is one int32 comparison, ``done < end``: ``end`` is ``limit`` while
    batches come and ``done`` once the data has ended, chosen by a ``tf.cond`` on the optional's
    ``has_value`` (a GPU kernel writes it to host memory). TensorFlow keeps int32 loop control in
    host memory on a GPU, as in a ``for _ in tf.range(n)`` loop. This loop's condition before
    was ``logical_and(done < limit, has_value)``: ``LogicalAnd``'s GPU kernel writes device
    memory, so the loop would copy its condition back to the host each step, behind every kernel
    queued before it, and the host could not dispatch step i+1 before the device ran step i.
    That is a hypothesis from the kernel registrations, not yet measured: on an H200 tfgpu's
    execution ran at 0.67x (CNN) and 0.41x (MLP) of the bare loop with every per-step extra off
    (issue 54), and ``host_stop=False`` keeps the old condition for the ablation bench's row.

    ``measure`` (training's executions): the input wait, the time the step could not
    start for want of its batch: host timestamps around each fetch, counted only from the moment
    the step before it finished (a timestamp after that step's stateful ops and its state). A
    fetch runs alongside the step before it, and a distributed iterator's ``get_next`` can take
    a long time while the replicas compute (on logical CPU devices, 27% of the demo's step time)
    without the replicas ever waiting. That timestamp ties the host to the step's ops every
    step; an H200 priced it at nothing measurable (issue 65), so training takes it in every
    execution, and evaluation and prediction, which need no wait, leave it out: ``wait`` is then
    0, and the first fetch's wait (``first_wait``, before any step: no tie) is still timed.

    ``known``: the caller knows ``limit`` batches are there (arrays, a dataset whose length
    tf.data knows, on one device: ``loop.EpochLoop``), so the loop is the bare one
    (``_known_length``): ``get_next`` at the top of each step, no optional, no end-of-data
    branch.

    ``fetch_ahead=False`` (the ablation bench's row only): fetch at the top of each iteration
    and run the body in a ``tf.cond`` on its presence, the other shape of this loop.

    ``stoppable`` (training, in one process): the condition also reads the stop cap, so a run
    asked to stop ends the call after the step it is in (``train.pieces.stopping``).
    """
    import tensorflow as tf

    zero = tf.constant(0.0, tf.float64)
    clock = graphs.clock_readable()
    measure = measure and clock
    if known:
        return _known_length(iterator, limit, body, state, measure=measure, stoppable=stoppable)

    def end_of(optional: Any, done: Any) -> Any:
        return tf.cond(optional.has_value(), lambda: tf.cast(limit, tf.int32), lambda: done)

    if not fetch_ahead:
        return _fetch_at_top(iterator, limit, body, state, zero)
    first, first_wait = _timed_fetch(iterator) if clock else (iterator.get_next_as_optional(), zero)

    def more(done: Any, end: Any, optional: Any, wait: Any, state: Any) -> Any:
        if host_stop:
            return done < (stopping.capped(end) if stoppable else end)
        return tf.logical_and(done < limit, optional.has_value())

    def step(done: Any, end: Any, optional: Any, wait: Any, state: Any) -> Any:
        known = len(tf.compat.v1.get_default_graph().get_operations())
        state = body(optional.get_value(), state, done)
        done += 1
        if not measure:

            def ahead_lean() -> Any:
                fetched = iterator.get_next_as_optional()
                return fetched, end_of(fetched, done)

            optional, end = tf.cond(done < limit, ahead_lean, lambda: (optional, done))
            return done, end, optional, wait, state
        stepped = _stepped(known, state)

        def ahead() -> Any:
            fetched, waited = _timed_fetch(iterator, stepped)
            return fetched, waited, end_of(fetched, done)

        optional, waited, end = tf.cond(done < limit, ahead, lambda: (optional, zero, done))
        return done, end, optional, wait + waited, state

    begin = tf.constant(0, tf.int32)
    done, _, _, wait, state = tf.while_loop(
        more, step, (begin, end_of(first, begin), first, first_wait, state)
    )
    return Looped(done, wait if measure else zero, first_wait, state)


def _known_length(
    iterator: Any,
    limit: Any,
    body: Callable[[Any, Any, Any], Any],
    state: Any,
    *,
    measure: bool,
    stoppable: bool = False,
) -> Looped:
    """Exactly ``limit`` batches, in the shape of the leanest loop an expert writes (``for _ in
    tf.range(n): step(next(iterator))``): the condition ``done < limit`` (int32, host memory),
    ``get_next`` at the top of each step, and nothing that asks whether the data has ended.
    ``measure``: the input wait timed as ``in_graph_loop`` times it, each fetch counted from the
    end of the step before it (a loop variable), the first one whole."""
    import tensorflow as tf

    zero = tf.constant(0.0, tf.float64)
    end = tf.cast(limit, tf.int32)
    begin = tf.constant(0, tf.int32)

    def more(done: Any, *_: Any) -> Any:
        return done < (stopping.capped(end) if stoppable else end)

    if not measure:

        def lean(done: Any, state: Any) -> Any:
            return done + 1, body(iterator.get_next(), state, done)

        done, state = tf.while_loop(more, lean, (begin, state))
        return Looped(done, zero, zero, state)

    def step(done: Any, stepped: Any, wait: Any, first_wait: Any, state: Any) -> Any:
        known = len(tf.compat.v1.get_default_graph().get_operations())
        before = tf.timestamp()
        with tf.control_dependencies([before]):
            batch = iterator.get_next()
        with tf.control_dependencies(tf.nest.flatten(batch, expand_composites=True)):
            ready = tf.timestamp()
        waited = tf.maximum(ready - tf.maximum(before, stepped), 0.0)
        state = body(batch, state, done)
        first = tf.where(done == 0, waited, zero)
        return done + 1, _stepped(known, state), wait + waited, first_wait + first, state

    done, _, wait, first_wait, state = tf.while_loop(more, step, (begin, zero, zero, zero, state))
    return Looped(done, wait, first_wait, state)


def _timed_fetch(iterator: Any, stepped: Any = None) -> tuple[Any, Any]:
    """The next batch as an optional, and the seconds the step waited for it: all of the fetch
    before the first step; after one, only the part after that step ended (``stepped``), since the
    fetch overlaps the step before it and only that part idles the device."""
    import tensorflow as tf

    before = tf.timestamp()
    with tf.control_dependencies([before]):
        optional = iterator.get_next_as_optional()
        has = optional.has_value()
    with tf.control_dependencies([has]):
        ready = tf.timestamp()
    if stepped is None:
        return optional, ready - before
    return optional, tf.maximum(ready - tf.maximum(before, stepped), 0.0)


def _stepped(known: int, state: Any) -> Any:
    """A timestamp after the step: after the stateful ops made since the graph had ``known`` ops,
    and after its state."""
    import tensorflow as tf

    graph = tf.compat.v1.get_default_graph()
    effects = [op for op in graph.get_operations()[known:] if op.op_def.is_stateful]
    with tf.control_dependencies(effects + tf.nest.flatten(state, expand_composites=True)):
        return tf.timestamp()


def _fetch_at_top(
    iterator: Any, limit: Any, body: Callable[[Any, Any, Any], Any], state: Any, zero: Any
) -> Any:
    import tensorflow as tf

    def more(done: Any, end: Any, state: Any) -> Any:
        return done < end  # int32 in host memory (``in_graph_loop``)

    def step(done: Any, end: Any, state: Any) -> Any:
        optional = iterator.get_next_as_optional()
        return tf.cond(
            optional.has_value(),
            lambda: (done + 1, end, body(optional.get_value(), state, done)),
            lambda: (done, done, state),
        )

    begin = tf.constant(0, tf.int32)
    done, _, state = tf.while_loop(more, step, (begin, tf.cast(limit, tf.int32), state))
    return Looped(done, zero, zero, state)


def local_rows(strategy: Any, value: Any) -> Any:
    """Every local replica's rows of one (distributed) value in one tensor, in replica order:
    each replica's slice of a global batch is contiguous, so this keeps the input order."""
    import tensorflow as tf

    parts = strategy.experimental_local_results(value)
    return parts[0] if len(parts) == 1 else tf.concat(parts, 0)


def growing_array(dtype: Any, shape: Any) -> Any:
    """A TensorArray collecting batches of ``shape`` (first dimension free), concatenated at the end."""
    import tensorflow as tf

    return tf.TensorArray(dtype, size=0, dynamic_size=True, element_shape=tf.TensorShape([None, *shape[1:]]))

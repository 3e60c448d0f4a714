"""The compiled execution with its per-step extras switched off (``execution.Extras``), as the
ablation bench (``bench/ablation_bench.py``, issue 54) times it: every such execution trains the
model Keras's own ``fit`` trains on one device, takes every batch once across calls, and stops
at the data's end, so the bench compares like with like."""

from __future__ import annotations

from dataclasses import fields, replace

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from fit_models import linear_data
from support.parity import same
from tfgpu.train.model import building
from tfgpu.train.step import execution

NAMES = [f.name for f in fields(execution.Extras)]


def compiled() -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    return model


@pytest.mark.heavy
@settings(max_examples=6, deadline=None)
@given(off=st.sets(st.sampled_from(NAMES)))
def test_an_execution_without_some_extras_trains_as_keras_and_takes_each_batch_once(off):
    x, y = linear_data(80)  # 10 batches of 8
    expected = compiled()
    history = expected.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0).history

    model = compiled()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    strategy = tf.distribute.get_strategy()
    building.build(model, strategy, dataset.element_spec)
    extras = replace(execution.ALL, **dict.fromkeys(off, False))
    execute = execution.train_execution(strategy, model, jit_compile=False, extras=extras)
    iterator = iter(dataset)
    outputs = [execute(iterator, execution.limit(4)) for _ in range(4)]

    assert [int(o.steps) for o in outputs] == [4, 4, 2, 0]  # the end of the data stops the loop
    same(model.get_weights(), expected.get_weights())
    assert int(model.optimizer.iterations.numpy()) == 10
    examples = [float(o.examples) for o in outputs]
    assert examples == ([32.0, 32.0, 16.0, 0.0] if "rows" not in off else [0.0] * 4)
    waits = [float(o.wait) for o in outputs[:3]]
    if "wait" in off or "fetch_ahead" in off:
        assert waits == [0.0] * 3  # nothing measured
    else:
        assert sum(waits) > 0  # host timestamps around each fetch
    if "finite" not in off:
        assert [float(o.first_bad) for o in outputs[:3]] == [-1.0] * 3
    # the metrics run over the calls, as over Keras's epoch
    np.testing.assert_allclose(float(outputs[2].logs["loss"]), history["loss"][0], rtol=1e-5)
    np.testing.assert_allclose(float(outputs[2].logs["mae"]), history["mae"][0], rtol=1e-5)


END_OF_DATA = ("IteratorGetNextAsOptional", "OptionalHasValue", "OptionalGetValue", "If", "StatelessIf")


def graph_ops(function, *args) -> list[str]:
    """The ops of ``function``'s graph for ``args`` and of every function it calls."""
    graph = function.get_concrete_function(*args).graph.as_graph_def()
    return [n.op for n in graph.node] + [n.op for f in graph.library.function for n in f.node_def]


@pytest.mark.heavy
@settings(max_examples=4, deadline=None)
@given(measure=st.booleans(), per_call=st.integers(1, 5))
def test_a_known_length_execution_is_the_bare_loop_and_trains_as_keras(measure, per_call):
    """Issue 65: where the step count is known (arrays, a dataset whose length tf.data knows, on
    one device), the execution's loop and per-step graph hold no end-of-data op (no optional, no
    branch on it): ``get_next`` and the step, as the bare loop an expert writes; it trains the
    weights and reports the figures Keras's own ``fit`` does."""
    x, y = linear_data(80)  # 10 batches of 8
    expected = compiled()
    history = expected.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0).history
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    strategy = tf.distribute.get_strategy()
    model = compiled()
    building.build(model, strategy, dataset.element_spec)
    extras = replace(execution.ALL, wait=measure)
    execute = execution.train_execution(strategy, model, jit_compile=False, known=True, extras=extras)
    ops = graph_ops(execute, iter(dataset), execution.limit(per_call))
    assert not [op for op in ops if op in END_OF_DATA], ops
    assert "IteratorGetNext" in ops
    iterator, counts, outputs = iter(dataset), [], []
    while sum(counts) < 10:
        outputs.append(execute(iterator, execution.limit(min(per_call, 10 - sum(counts)))))
        counts.append(int(outputs[-1].steps))
    assert counts == [per_call] * (10 // per_call) + ([10 % per_call] if 10 % per_call else [])
    same(model.get_weights(), expected.get_weights())
    np.testing.assert_allclose(float(outputs[-1].logs["loss"]), history["loss"][0], rtol=1e-5)
    assert sum(float(o.examples) for o in outputs) == 80.0
    assert (sum(float(o.wait) for o in outputs) > 0) == measure  # host timestamps around each fetch
    assert all(float(o.first_bad) == -1.0 for o in outputs)


@pytest.mark.model
def test_the_unknown_length_execution_keeps_its_end_of_data_path():
    """The other shape (a dataset whose length is unknown, several replicas): the optional and
    the branch on it, so the loop stops where the data ends."""
    x, y = linear_data(16)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    strategy = tf.distribute.get_strategy()
    model = compiled()
    building.build(model, strategy, dataset.element_spec)
    execute = execution.train_execution(strategy, model, jit_compile=False)
    ops = graph_ops(execute, iter(dataset), execution.limit(2))
    assert "IteratorGetNextAsOptional" in ops and "OptionalHasValue" in ops


def loop_conditions(function, *args) -> list[list[tuple[str, int]]]:
    """Each ``tf.while_loop`` condition in ``function``'s graph: its ops and their dtype attrs."""
    graph = function.get_concrete_function(*args).graph.as_graph_def()
    library = {f.signature.name: f for f in graph.library.function}
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    conditions = [library[n.attr["cond"].func.name] for n in nodes if n.op in ("While", "StatelessWhile")]
    return [[(n.op, n.attr["T"].type) for n in f.node_def] for f in conditions]


@settings(max_examples=12, deadline=None)
@given(
    rows=st.integers(0, 11),
    per_call=st.integers(1, 4),
    measure=st.booleans(),
    fetch_ahead=st.booleans(),
    host_stop=st.booleans(),
)
def test_the_in_graph_loop_takes_each_batch_once_and_stops_at_the_end(
    rows, per_call, measure, fetch_ahead, host_stop
):
    """Every shape of the loop (the ablation bench's rows too) takes the batches in order, each
    once across calls, up to ``per_call`` a call, and stops at the data's end."""
    from tfgpu.train.step.execution import in_graph_loop

    dataset = tf.data.Dataset.range(rows)

    @tf.function
    def call(iterator, limit):
        out = in_graph_loop(
            iterator,
            limit,
            lambda batch, seen, index: seen.write(index, batch),
            tf.TensorArray(tf.int64, size=0, dynamic_size=True),
            measure=measure,
            fetch_ahead=fetch_ahead,
            host_stop=host_stop,
        )
        return out.steps, out.state.stack()

    iterator, taken, counts = iter(dataset), [], []
    for _ in range(rows // per_call + 2):
        steps, seen = call(iterator, execution.limit(per_call))
        counts.append(int(steps))
        taken += seen.numpy().tolist()
    assert taken == list(range(rows))
    full, rest = divmod(rows, per_call)
    assert counts == [per_call] * full + ([rest] if rest else []) + [0] * (len(counts) - full - bool(rest))


@pytest.mark.model
def test_the_loop_s_condition_is_one_int32_comparison():
    """Issue 54: the loop's condition stays in host memory on a GPU (an int32 comparison, as a
    ``for _ in tf.range(n)`` loop's), so the host never waits for the device to run a step
    before it dispatches the next. A bool op there (``LogicalAnd``, the condition before) has a
    GPU kernel that writes device memory. Checked for every execution a run calls: training's
    (the data's length unknown or known), evaluation and the skip of resumed batches. Training's
    also reads the stop cap (issue 76): an int32 host variable, and its ``Minimum`` with the end."""
    x, y = linear_data(16)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    strategy = tf.distribute.get_strategy()
    model = compiled()
    building.build(model, strategy, dataset.element_spec)
    limit = execution.limit(2)
    functions = [
        execution.train_execution(strategy, model, jit_compile=False, extras=execution.ALL),
        execution.train_execution(strategy, model, jit_compile=False, known=True),
        execution.eval_execution(strategy, model, execution.example_counter(strategy)),
        execution.skip_batches(),
    ]
    for function in functions:
        conditions = loop_conditions(function, iter(dataset), limit)
        assert conditions, function
        for ops in conditions:
            kept = [(op, dtype) for op, dtype in ops if op not in ("Identity", "NoOp", "ReadVariableOp")]
            assert [op for op, _ in kept] in (["Less"], ["Minimum", "Less"]), ops
            assert all(dtype == tf.int32.as_datatype_enum for _, dtype in kept), ops
        stoppable = function in functions[:2]
        assert all(("ReadVariableOp" in [op for op, _ in ops]) == stoppable for ops in conditions)

    old = execution.train_execution(
        strategy, model, jit_compile=False, extras=replace(execution.ALL, host_stop=False)
    )
    assert any("LogicalAnd" in [op for op, _ in ops] for ops in loop_conditions(old, iter(dataset), limit))


class Recorded:
    """A device value that records each read of it (``float`` or ``numpy``), by name."""

    def __init__(self, value, reads, name=None):
        self.value, self.reads, self.name = value, reads, name

    def __float__(self):
        self.reads.append(self.name if self.name is not None else self.value)
        return float(self.value)

    def numpy(self):
        return float(self)


def test_a_window_reads_nothing_from_the_device_until_it_closes():
    """The window's one read (``windows.read``) is the only host-device sync of a window: adding
    an execution, the epoch's first among them, reads none of its outputs (a read mid-window
    makes the host wait for the device before it dispatches the next execution)."""
    from tfgpu.train.loop.windows import Window, read

    reads = []

    def stats(first_wait):
        values = [4, 0.0, first_wait, 32.0, -1.0]
        return execution.Executed(*[Recorded(v, reads) for v in values], {"loss": Recorded(0.5, reads)})

    window = Window(0, 0)
    window.add(stats(0.25), taken=4, epoch_start=True)
    window.add(stats(0.0), taken=4)
    assert reads == []
    figures = read(window)
    assert reads and figures.examples == 64.0 and window.startup_wait == 0.25


def test_timing_waits_for_the_device_not_for_the_host_side_step_count():
    """``execution.timed`` (the tuner's and diagnose's clock) stops once the device has run the
    calls: it reads the last call's device tensors. ``steps`` comes from the loop's host-side
    control (int32 in host memory), ready while a GPU may still run the steps."""
    read = []

    def execute(iterator, limit):
        names = ["wait", "first_wait", "examples", "first_bad"]
        devices = [Recorded(0.0, read, name) for name in names]
        return execution.Executed(4, *devices, {"loss": Recorded(0.0, read, "loss")})

    seconds, starts, outputs = execution.timed(execute, None, steps=8, per_call=4)
    assert len(outputs) == 2 and len(starts) == 2 and seconds >= 0
    assert {"examples", "first_bad", "loss"} <= set(read)


def test_a_window_leaves_a_first_execution_out_of_its_wall_once():
    """A first (tracing) execution's seconds already hold its own input wait: the steady wall
    loses those seconds once, the wait loses that wait (not the wall twice)."""
    import time

    from tfgpu.train.loop.windows import Window, read

    def stats(wait):
        return execution.Executed(4, wait, 0.0, 32.0, -1.0, {"loss": 0.5})

    window = Window(0, 0, started=time.perf_counter() - 3.0)
    window.add(stats(0.4), taken=4, warm_up=1.0)
    window.add(stats(0.1), taken=4)
    figures = read(window)
    assert figures.timed_steps == 4 and figures.timed_examples == 32.0
    assert 2.0 <= figures.wall < 2.3  # 3 s less the first call's 1 s (its 0.4 s of wait inside it)
    assert abs(figures.wait - 0.1) < 1e-9

"""The in-graph loop shared by training, evaluation and prediction.

A step per Python call costs a GPU: the host spends the call's overhead while the device waits,
and reading a result each step syncs the two. Here the iterator goes into the ``tf.function`` and
a ``tf.while_loop`` takes up to ``limit`` batches from it, the shape of orbit's in-graph loop and
of Keras at ``steps_per_execution`` > 1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


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
    fetch_ahead: bool = True,
    host_stop: bool = True,
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

    ``measure`` (training's measured windows only): the input wait, the time the step could not
    start for want of its batch: host timestamps around each fetch, counted only from the moment
    the step before it finished (a timestamp after that step's stateful ops and its state). A
    fetch runs alongside the step before it, and a distributed iterator's ``get_next`` can take
    a long time while the replicas compute (on logical CPU devices, 27% of the demo's step time)
    without the replicas ever waiting. That timestamp ties the host to the step's ops every
    step, which a GPU may pay (issue 54), so evaluation, prediction and training's other windows
    leave it out: ``wait`` is then 0, and the first fetch's wait (``first_wait``, before any
    step: no tie) is still timed.

    ``fetch_ahead=False`` (the ablation bench's row only): fetch at the top of each iteration
    and run the body in a ``tf.cond`` on its presence, the other shape of this loop.
    """
    import tensorflow as tf

    zero = tf.constant(0.0, tf.float64)

    def fetch(stepped: Any = None) -> tuple[Any, Any]:
        before = tf.timestamp()
        with tf.control_dependencies([before]):
            optional = iterator.get_next_as_optional()
            has = optional.has_value()
        with tf.control_dependencies([has]):
            ready = tf.timestamp()
        # the fetch overlaps the step before it: only the part after that step ends idles the device
        return optional, ready - before if stepped is None else tf.maximum(
            ready - tf.maximum(before, stepped), 0.0
        )

    def end_of(optional: Any, done: Any) -> Any:
        return tf.cond(optional.has_value(), lambda: tf.cast(limit, tf.int32), lambda: done)

    if not fetch_ahead:
        return _fetch_at_top(iterator, limit, body, state, zero)
    first, first_wait = fetch()

    def more(done: Any, end: Any, optional: Any, wait: Any, state: Any) -> Any:
        if host_stop:
            return done < end
        return tf.logical_and(done < limit, optional.has_value())

    def step(done: Any, end: Any, optional: Any, wait: Any, state: Any) -> Any:
        graph = tf.compat.v1.get_default_graph()
        known = len(graph.get_operations())
        state = body(optional.get_value(), state, done)
        done += 1
        if not measure:

            def ahead_lean() -> Any:
                fetched = iterator.get_next_as_optional()
                return fetched, end_of(fetched, done)

            optional, end = tf.cond(done < limit, ahead_lean, lambda: (optional, done))
            return done, end, optional, wait, state
        effects = [op for op in graph.get_operations()[known:] if op.op_def.is_stateful]
        with tf.control_dependencies(effects + tf.nest.flatten(state, expand_composites=True)):
            stepped = tf.timestamp()

        def ahead() -> Any:
            fetched, waited = fetch(stepped)
            return fetched, waited, end_of(fetched, done)

        optional, waited, end = tf.cond(done < limit, ahead, lambda: (optional, zero, done))
        return done, end, optional, wait + waited, state

    begin = tf.constant(0, tf.int32)
    done, _, _, wait, state = tf.while_loop(
        more, step, (begin, end_of(first, begin), first, first_wait, state)
    )
    return Looped(done, wait if measure else zero, first_wait, state)


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


def bounded(dataset: Any) -> Any:
    """``dataset``, never of infinite cardinality, for a distributed iterator.

    A distributed iterator builds ``get_next_as_optional`` without its end-of-data check when its
    dataset is infinite, and its type spec does not say which: a compiled loop traced with an
    infinite dataset's iterator reuses that trace for a finite one and raises OutOfRange at its
    end (``fit`` on ``ds.repeat()``, then on ``ds``). A ``take`` of 2**62 batches keeps one trace
    right for both.
    """
    import tensorflow as tf

    if dataset.cardinality() == tf.data.INFINITE_CARDINALITY:
        return dataset.take(2**62)
    return dataset


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

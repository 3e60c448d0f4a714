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
    measure: bool = True,
    fetch_ahead: bool = True,
) -> Looped:
    """Run ``state = body(batch, state, index)`` for up to ``limit`` batches of ``iterator``, in the graph.

    Each next batch is fetched as an optional at the end of the previous step (never past
    ``limit``, so no batch is lost between executions), and the loop stops when the iterator is
    exhausted: under a multi-worker strategy the distributed iterator agrees on that across
    workers. Returns the batches taken, the input wait and the final state.

    ``measure``: the input wait, the time the step could not start for want of its batch: host
    timestamps around each fetch, counted only from the moment the step before it finished (a
    timestamp after that step's stateful ops and its state). A fetch runs alongside the step
    before it, and a distributed iterator's ``get_next`` can take a long time while the replicas
    compute (on logical CPU devices, 27% of the demo's step time) without the replicas ever
    waiting. That timestamp ties the host to the step's ops every step, which a GPU may pay
    (issue 54): ``measure=False`` (``bench/ablation_bench.py``) leaves it out; ``wait`` is then
    0 and the first fetch's wait (``first_wait``, before any step: no tie) is still timed.

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

    if not fetch_ahead:
        return _fetch_at_top(iterator, limit, body, state, zero)
    first, first_wait = fetch()

    def more(done: Any, optional: Any, wait: Any, state: Any) -> Any:
        return tf.logical_and(done < limit, optional.has_value())

    def step(done: Any, optional: Any, wait: Any, state: Any) -> Any:
        graph = tf.compat.v1.get_default_graph()
        known = len(graph.get_operations())
        state = body(optional.get_value(), state, done)
        done += 1
        if not measure:
            optional = tf.cond(done < limit, iterator.get_next_as_optional, lambda: optional)
            return done, optional, wait, state
        effects = [op for op in graph.get_operations()[known:] if op.op_def.is_stateful]
        with tf.control_dependencies(effects + tf.nest.flatten(state, expand_composites=True)):
            stepped = tf.timestamp()
        optional, waited = tf.cond(done < limit, lambda: fetch(stepped), lambda: (optional, zero))
        return done, optional, wait + waited, state

    done, _, wait, state = tf.while_loop(more, step, (tf.constant(0, tf.int32), first, first_wait, state))
    return Looped(done, wait if measure else zero, first_wait, state)


def _fetch_at_top(
    iterator: Any, limit: Any, body: Callable[[Any, Any, Any], Any], state: Any, zero: Any
) -> Any:
    import tensorflow as tf

    def more(done: Any, ended: Any, state: Any) -> Any:
        return tf.logical_and(done < limit, tf.logical_not(ended))

    def step(done: Any, ended: Any, state: Any) -> Any:
        optional = iterator.get_next_as_optional()
        has = optional.has_value()
        state = tf.cond(has, lambda: body(optional.get_value(), state, done), lambda: state)
        return done + tf.cast(has, tf.int32), tf.logical_not(has), state

    done, _, state = tf.while_loop(more, step, (tf.constant(0, tf.int32), tf.constant(False), state))
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

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
  graph, ``ingraph.in_graph_loop``), all of them and the first one, which at the start of an epoch
  is start-up cost;
- ``examples``: the rows this worker's replicas trained on (batch shapes, no device work).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from tfgpu.ingraph import in_graph_loop

_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def cached(model: Any, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    """The compiled function ``key`` of ``model``, made once (as Keras keeps ``train_function``).

    A new ``tf.function`` traces again: seconds per ``fit`` call on a GPU. The functions take the
    iterator as an argument, so a new dataset of the same structure reuses the trace. ``key``
    holds the strategy (by identity) and the options the function closes over.
    """
    functions = _COMPILED.setdefault(model, {})
    if key not in functions:
        functions[key] = make()
    return functions[key]


def _rows(strategy: Any, batch: Any) -> Any:
    """The rows of this worker's part of a (distributed) batch: shapes only."""
    import tensorflow as tf

    parts = strategy.experimental_local_results(tf.nest.flatten(batch)[0])
    return tf.shape(parts[0])[0] if len(parts) == 1 else tf.add_n([tf.shape(p)[0] for p in parts])


def _finite(strategy: Any, outputs: Any) -> Any:
    """1.0 when every local replica's "loss" output is finite, else 0.0 (1.0 when there is none)."""
    import tensorflow as tf

    loss = outputs.get("loss") if isinstance(outputs, dict) else None
    if loss is None:
        return tf.constant(1.0)
    parts = strategy.experimental_local_results(loss)
    ok = tf.math.is_finite(parts[0]) if len(parts) == 1 else tf.reduce_all(tf.math.is_finite(tf.stack(parts)))
    return tf.cast(ok, tf.float32)


def train_execution(strategy: Any, model: Any, *, jit_compile: bool) -> Callable[[Any, Any], dict[str, Any]]:
    """fn(iterator, limit) -> accumulators of up to ``limit`` steps (see the module docstring)."""
    import tensorflow as tf

    step = tf.function(model.train_step, jit_compile=True) if jit_compile else model.train_step

    def body(batch: Any, state: Any, index: Any) -> Any:
        finite_steps, examples = state
        outputs = strategy.run(step, args=(batch,))
        # the logged loss is the epoch's running mean: non-finite from the first bad step on, so
        # the count of finite steps is that step's index (two scalar ops a step, no comparison)
        return finite_steps + _finite(strategy, outputs), examples + tf.cast(
            _rows(strategy, batch), tf.float32
        )

    @tf.function
    def execute(iterator: Any, limit: Any) -> dict[str, Any]:
        out = in_graph_loop(iterator, limit, body, (tf.constant(0.0), tf.constant(0.0)))
        finite_steps, examples = out.pop("state")
        done = tf.cast(out["steps"], tf.float32)
        first_bad = tf.where(finite_steps < done, finite_steps, tf.constant(-1.0))
        return {**out, "examples": examples, "first_bad": first_bad, "logs": model.get_metrics_result()}

    return execute


def skip_batches() -> Callable[[Any, Any], Any]:
    """fn(iterator, n): take n batches without training (resuming mid-epoch); returns how many."""
    import tensorflow as tf

    @tf.function
    def skip(iterator: Any, n: Any) -> Any:
        return in_graph_loop(iterator, n, lambda batch, state, index: state, tf.constant(0))["steps"]

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


def eval_execution(strategy: Any, model: Any, counter: Any) -> Callable[[Any, Any], dict[str, Any]]:
    """fn(iterator, limit) -> the model's metric results and the exact example count (``counter``,
    from ``example_counter``) over up to ``limit`` batches, in one call. Reset both first."""
    import tensorflow as tf

    def replica(batch: Any) -> Any:
        rows = tf.shape(tf.nest.flatten(batch)[0])[0]

        def run() -> Any:
            with tf.control_dependencies(tf.nest.flatten(model.test_step(batch))):
                return counter.assign_add(tf.cast(rows, tf.float32))

        # the last batch can leave a replica with zero examples: its mean loss would be 0/0, and
        # some kernels (oneDNN Conv2D) reject an empty batch; it adds nothing to the metrics anyway
        return tf.cond(rows > 0, run, lambda: tf.constant(0.0))

    def body(batch: Any, state: Any, index: Any) -> Any:
        strategy.run(replica, args=(batch,))
        return state

    @tf.function
    def evaluate(iterator: Any, limit: Any) -> dict[str, Any]:
        out = in_graph_loop(iterator, limit, body, tf.constant(0))
        return {"examples": counter.read_value(), "steps": out["steps"], "logs": model.get_metrics_result()}

    return evaluate


def metrics_reader(model: Any) -> Callable[[], dict[str, Any]]:
    """fn() -> the model's metric results, read outside the replicas in one compiled call."""
    import tensorflow as tf

    return tf.function(model.get_metrics_result)

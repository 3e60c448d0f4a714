"""The compiled loops: up to K training steps, or a whole evaluation, inside one ``tf.function``.

The iterator goes into the function and the loop takes each batch itself, the shape of orbit's
in-graph loop and of Keras ``fit`` at ``steps_per_execution`` > 1: no Python runs between steps
and nothing is read back to the host, so dispatch stays asynchronous and a GPU never waits for
the host. What the host needs (loss, a NaN check, the input wait) is accumulated on the device and
read once per log window:

- ``loss``: the sum of the step losses of the execution;
- ``first_bad``: the index (within the execution) of the first non-finite loss, or -1, counted
  in float arithmetic on the device so the check costs no device-to-host copy per step;
- ``wait`` / ``first_wait``: seconds spent in ``get_next`` (host timestamps taken in the graph
  around it), all of them and the first one, which at the start of an epoch is start-up cost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tfgpu.ingraph import in_graph_loop

EVAL_KEYS = ("count", "loss")


def replica_train_step(
    *,
    model: Any,
    optimizer: Any,
    loss_fn: Callable[[Any, Any], Any],
    global_batch: int,
    replicas: int,
    jit_compile: bool,
) -> Callable[..., Any]:
    """One replica's step: the loss scaled by the global batch, regularization by the replicas."""
    import tensorflow as tf

    scales = hasattr(optimizer, "scale_loss") and type(optimizer).__name__ == "LossScaleOptimizer"

    def step(*batch: Any) -> Any:
        x, y = batch[0], batch[1]
        with tf.GradientTape() as tape:
            per_example = loss_fn(y, model(x, training=True))
            if len(batch) > 2:
                per_example = per_example * tf.cast(tf.reshape(batch[2], [-1]), tf.float32)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            if model.losses:
                loss += tf.add_n([tf.cast(v, tf.float32) for v in model.losses]) / replicas
            scaled = optimizer.scale_loss(loss) if scales else loss
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return tf.function(step, jit_compile=True) if jit_compile else step


def train_execution(strategy: Any, replica_step: Callable[..., Any]) -> Callable[[Any, Any], dict[str, Any]]:
    """fn(iterator, limit) -> accumulators of up to ``limit`` steps (see the module docstring)."""
    import tensorflow as tf

    def body(batch: Any, state: Any, index: Any) -> Any:
        total, finite = state
        per_replica = strategy.run(replica_step, args=tuple(batch))
        total += tf.cast(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None), tf.float32)
        # the running sum stays non-finite from the first non-finite loss on: counting the steps
        # it was finite names that step
        return total, finite + tf.cast(tf.math.is_finite(total), tf.float32)

    @tf.function
    def execute(iterator: Any, limit: Any) -> dict[str, Any]:
        out = in_graph_loop(iterator, limit, body, (tf.constant(0.0), tf.constant(0.0)))
        total, finite = out.pop("state")
        first_bad = tf.where(tf.math.is_finite(total), tf.constant(-1.0), finite)
        return {**out, "loss": total, "first_bad": first_bad}

    return execute


def skip_batches() -> Callable[[Any, Any], Any]:
    """fn(iterator, n): take n batches without training (resuming mid-epoch); returns how many."""
    import tensorflow as tf

    @tf.function
    def skip(iterator: Any, n: Any) -> Any:
        return in_graph_loop(iterator, n, lambda batch, state, index: state, tf.constant(0))["steps"]

    return skip


def eval_execution(
    strategy: Any, *, model: Any, loss_fn: Callable[[Any, Any], Any], metric_fns: dict[str, Any]
) -> Callable[[Any], dict[str, Any]]:
    """fn(iterator) -> sums of count, loss and each metric over every example, in one call."""
    import tensorflow as tf

    keys = [*EVAL_KEYS, *metric_fns]

    def replica(*batch: Any) -> dict[str, Any]:
        x, y = batch[0], batch[1]

        def compute() -> dict[str, Any]:
            predictions = model(x, training=False)
            out = {
                "count": tf.cast(tf.shape(predictions)[0], tf.float32),
                "loss": tf.reduce_sum(loss_fn(y, predictions)),
            }
            for name, fn in metric_fns.items():
                out[name] = tf.reduce_sum(tf.cast(fn(y, predictions), tf.float32))
            return out

        # the last batch can leave a replica with zero examples; some kernels (oneDNN Conv2D)
        # reject an empty batch, and it adds nothing to the sums anyway
        rows = tf.shape(tf.nest.flatten(x)[0])[0]
        return tf.cond(rows > 0, compute, lambda: {k: tf.constant(0.0) for k in keys})

    def body(batch: Any, sums: Any, index: Any) -> Any:
        per_replica = strategy.run(replica, args=tuple(batch))
        # one reduce per value: MultiWorkerMirroredStrategy does not reduce a dict at once
        return {
            k: sums[k] + strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica[k], axis=None) for k in keys
        }

    @tf.function
    def evaluate(iterator: Any) -> dict[str, Any]:
        start = {k: tf.constant(0.0) for k in keys}
        return in_graph_loop(iterator, tf.int32.max, body, start)["state"]

    return evaluate

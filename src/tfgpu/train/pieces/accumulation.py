"""Keras's ``gradient_accumulation_steps`` under a tf.distribute strategy.

Keras applies an accumulating optimizer's step as ``cond(update, apply, accumulate)`` in the
replica context, with a ``merge_call`` inside each branch; tf.distribute refuses a merge_call in a
branch (keras-team/keras#20582: "Exception encountered when calling Cond.call()"), so Keras's own
``fit`` cannot train such a model on more than one device. The same arithmetic, rearranged: the
gradients are summed over the replicas first (Keras sums them too, the loss being scaled by
1/replicas), then one merge_call makes the choice in the cross-replica context, where each branch
updates every variable on every device with ``extended.update``: the accumulators add the
gradient; every N-th step the optimizer's own ``update_step`` takes (gradient + accumulated) / N,
clipped and with weight decay as Keras does, and the accumulators are zeroed. One device (no
replica context) keeps Keras's own code. Under ParameterServerStrategy (where Keras's cond fails
the same way) the accumulators live on the parameter servers: one worker gives Keras's
one-device weights; several share the accumulators, every N-th step of any worker applying them.
"""

from __future__ import annotations

import types
from typing import Any

from tfgpu.errors import ConfigError

_MARK = "_tfgpu_accumulates_across_replicas"


def enable(optimizer: Any) -> None:
    """Let ``optimizer`` accumulate gradients under a strategy (once; a no-op without
    accumulation)."""
    if not getattr(optimizer, "gradient_accumulation_steps", None) or getattr(optimizer, _MARK, False):
        return
    if getattr(optimizer, "global_clipnorm", None) or getattr(optimizer, "use_ema", False):
        raise ConfigError(
            "gradient_accumulation_steps with global_clipnorm or use_ema is not supported across replicas",
            value={"global_clipnorm": optimizer.global_clipnorm, "use_ema": optimizer.use_ema},
            fix="use clipnorm or clipvalue, and no EMA, with gradient accumulation on several devices",
        )
    optimizer._backend_apply_gradients = types.MethodType(_apply, optimizer)
    setattr(optimizer, _MARK, True)


def _apply(self: Any, grads: list[Any], trainable_variables: list[Any]) -> None:
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if context is None or not tf.distribute.has_strategy():
        return type(self)._backend_apply_gradients(self, grads, trainable_variables)
    pairs = [(g, v) for g, v in zip(grads, trainable_variables, strict=True) if g is not None]
    summed = context.all_reduce(tf.distribute.ReduceOp.SUM, [g for g, _ in pairs])
    variables = [_tf_variable(v) for _, v in pairs]
    accumulators = [_tf_variable(self._accumulated_gradients[self._get_variable_index(v)]) for _, v in pairs]
    context.merge_call(_step, args=(self, summed, variables, accumulators))
    return None


def _tf_variable(variable: Any) -> Any:
    from keras.src import backend

    return variable.value if isinstance(variable, backend.Variable) else variable


def _step(distribution: Any, optimizer: Any, grads: list[Any], variables: list[Any], accumulators: list[Any]):
    import tensorflow as tf

    steps = optimizer.gradient_accumulation_steps
    learning_rate = optimizer.learning_rate

    def update(var: Any, grad: Any, accumulated: Any) -> None:
        mean = (grad + accumulated) / steps
        (mean,) = optimizer._clip_gradients([mean])
        if optimizer.weight_decay is not None and optimizer._use_weight_decay(var):
            lr = tf.cast(learning_rate, var.dtype)
            var.assign_sub(var * tf.cast(optimizer.weight_decay, var.dtype) * lr)
        optimizer.update_step(mean, var, learning_rate)
        accumulated.assign(tf.zeros_like(accumulated))

    def apply() -> None:
        for grad, var, acc in zip(grads, variables, accumulators, strict=True):
            distribution.extended.update(var, update, args=(grad, acc), group=False)

    def accumulate() -> None:
        for grad, acc in zip(grads, accumulators, strict=True):
            distribution.extended.update(acc, lambda a, g: a.assign_add(g), args=(grad,), group=False)

    tf.cond((optimizer._iterations + 1) % steps == 0, apply, accumulate)

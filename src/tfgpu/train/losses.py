"""A loss that returns one number (a 0-d mean over the batch) scaled for the replicas like any other.

Keras 3 scales a loss reduced over the batch by 1/replicas (``scale_loss_for_distribution``) so that
the replicas' gradients, summed, are one device's. Its ``reduce_values`` returns a value that is
already 0-d before that step (``keras/src/losses/loss.py``: ``tuple(values.shape) == ()`` returns
early), so a loss function ending in ``ops.mean(...)`` (keras-io's contrastive loss, countless user
losses) trains N times too far on N replicas and reports N times the loss, silently, in Keras's own
``fit`` as well. Measured: Dense(4) -> Dense(1), SGD(0.1), batch 32, 2 epochs: one device's losses
[1.27, 1.08], 2 replicas [2.45, 2.19], weights 0.09 apart.

While tfgpu traces a step (``scaled_scalar_losses``), a 0-d value reduced as a mean
(``sum_over_batch_size``, ``mean``, ``mean_with_sample_weight``) is scaled as a per-example loss
of the same mean would be: on one replica nothing changes, on N it equals one device. Only the
trace sees it: Keras's own ``fit`` and anything traced elsewhere are left as Keras makes them.
``check_keras`` fails loudly if a Keras release moves what this relies on.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from tfgpu import choices

_MEANS = ("sum_over_batch_size", "mean", "mean_with_sample_weight")
_lock = threading.Lock()
_depth = 0
_original: Any = None


def check_keras() -> Any:
    """Keras's loss module, after checking that it still reduces through ``reduce_values``
    (the one function this module wraps); a clear error names what moved."""
    from keras.src.losses import loss as keras_loss

    if not callable(getattr(keras_loss, "reduce_values", None)) or not callable(
        getattr(keras_loss, "scale_loss_for_distribution", None)
    ):
        raise RuntimeError(
            "keras.src.losses.loss no longer has reduce_values / scale_loss_for_distribution: "
            "tfgpu's scaling of 0-d losses (tfgpu/train/losses.py) needs updating for this Keras"
        )
    return keras_loss


def _scaled(original: Any, keras_loss: Any) -> Any:
    def reduce_values(values: Any, sample_weight: Any = None, reduction: str = "sum_over_batch_size") -> Any:
        if reduction in _MEANS and tuple(values.shape) == ():
            import tensorflow as tf

            if tf.distribute.get_strategy().num_replicas_in_sync > 1:
                choices.record(
                    "0-d loss",
                    "scaled for the replicas",
                    "a loss returned one number for the batch; Keras leaves it unscaled on several "
                    "replicas (N times the gradient); tfgpu scales it as one device trains",
                )
            return keras_loss.scale_loss_for_distribution(values)
        return original(values, sample_weight, reduction)

    return reduce_values


@contextlib.contextmanager
def scaled_scalar_losses() -> Iterator[None]:
    """Inside, Keras scales a 0-d loss for the replicas (see the module docstring). Re-entrant and
    safe across the replica threads MirroredStrategy traces in: the wrapper stays in place while
    any caller is inside."""
    global _depth, _original
    keras_loss = check_keras()
    with _lock:
        if _depth == 0:
            _original = keras_loss.reduce_values
            keras_loss.reduce_values = _scaled(_original, keras_loss)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                keras_loss.reduce_values = _original
                _original = None

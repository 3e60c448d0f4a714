"""Losses scaled for the replicas as one device trains: a 0-d loss, and a batch split unevenly.

Keras 3 scales a loss reduced over the batch by 1/replicas (``scale_loss_for_distribution``) so that
the replicas' gradients, summed, are one device's. Two cases break that, silently, in Keras's own
``fit`` as well:

- A 0-d loss. Keras's ``reduce_values`` returns a value that is already 0-d before that step
  (``keras/src/losses/loss.py``: ``tuple(values.shape) == ()`` returns early), so a loss function
  ending in ``ops.mean(...)`` (keras-io's contrastive loss, countless user losses) trains N times
  too far on N replicas and reports N times the loss. Measured: Dense(4) -> Dense(1), SGD(0.1),
  batch 32, 2 epochs: one device's losses [1.27, 1.08], 2 replicas [2.45, 2.19], weights 0.09 apart.
- A batch split unevenly: 1/N is right only when every replica holds 1/N of the rows. A short last
  batch (21 rows on 2 replicas: 11 and 10), or a global batch the replicas do not divide (32 on 3:
  11, 11, 10, every step) gives each replica's mean the same weight, not its share of the rows
  (keras-io's weather example, 1000 rows, batch 256 on 2 replicas: weights 5e-3 off one device's
  after 2 epochs).

While tfgpu traces a step (``scaled_as_one_device``), a 0-d value reduced as a mean
(``sum_over_batch_size``, ``mean``, ``mean_with_sample_weight``) is scaled as a per-example loss of
the same mean would be; and inside ``run`` each replica's mean losses are scaled by its share of
the step's rows (r_i / r, its rows over all replicas' rows), the loss tracker's figure unscaled
by r / r_i, so the replicas' summed gradients and the tracker's epoch mean equal one device's on
any split. r is summed from the local replicas' shapes on one worker; across workers it takes one
scalar all-reduce a step. Only the trace sees it: Keras's own ``fit`` and anything traced elsewhere
are left as Keras makes them. ``check_keras`` fails loudly if a Keras release moves what this
relies on.
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
_originals: dict[str, Any] = {}
_share = threading.local()  # .ratios: (rows / all replicas' rows, the inverse) in a step ``run`` traces
_UNSCALED = object()  # .ratios in an evaluation step: no scaling at all (``unscaled``)


def check_keras() -> Any:
    """Keras's loss module, after checking that it still reduces through ``reduce_values``
    (the one function this module wraps); a clear error names what moved."""
    from keras.src.losses import loss as keras_loss

    names = ("reduce_values", "scale_loss_for_distribution", "unscale_loss_for_distribution")
    if not all(callable(getattr(keras_loss, name, None)) for name in names):
        raise RuntimeError(
            f"keras.src.losses.loss no longer has {' / '.join(names)}: tfgpu's scaling of losses "
            "for the replicas (tfgpu/train/pieces/losses.py) needs updating for this Keras"
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


def _by_share(original: Any, *, unscale: bool) -> Any:
    """Keras's (un)scaling, by this replica's share of the step's rows where ``share`` set it."""

    def scaled(value: Any) -> Any:
        ratios = getattr(_share, "ratios", None)
        if ratios is None:
            return original(value)
        if ratios is _UNSCALED:
            return value
        import tensorflow as tf

        # 0 for an empty replica (a last batch with fewer rows than replicas), even where its
        # mean over no rows is NaN (a 0-d ops.mean): it adds nothing, and its tracker figure
        # weighs 0 rows
        return tf.math.multiply_no_nan(value, tf.cast(ratios[1 if unscale else 0], value.dtype))

    return scaled


@contextlib.contextmanager
def scaled_as_one_device() -> Iterator[None]:
    """Inside, Keras scales a 0-d loss for the replicas, and a replica's losses by its share of the
    rows under ``run`` (see the module docstring). Re-entrant and safe across the replica threads
    MirroredStrategy traces in: the wrappers stay in place while any caller is inside."""
    global _depth
    keras_loss = check_keras()
    with _lock:
        if _depth == 0:
            reduce = keras_loss.reduce_values
            scale = keras_loss.scale_loss_for_distribution
            unscale = keras_loss.unscale_loss_for_distribution
            _originals.update(
                reduce_values=reduce, scale_loss_for_distribution=scale, unscale_loss_for_distribution=unscale
            )  # put back by name at the last exit
            keras_loss.scale_loss_for_distribution = _by_share(scale, unscale=False)
            keras_loss.unscale_loss_for_distribution = _by_share(unscale, unscale=True)
            keras_loss.reduce_values = _scaled(reduce, keras_loss)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for name, original in _originals.items():
                    setattr(keras_loss, name, original)
                _originals.clear()


@contextlib.contextmanager
def share(mine: Any, whole: Any) -> Iterator[None]:
    """Inside (on this thread), losses scale by ``mine / whole`` (this replica's rows over the
    step's) and the tracker's figure by ``whole / mine``; ``mine`` None: as Keras scales. Enter
    it in the function that calls ``train_step`` (an XLA-compiled step takes both as arguments).
    The two ratios are computed once a step: each loss then costs one multiply."""
    import tensorflow as tf

    kept = getattr(_share, "ratios", None)
    if mine is None:
        _share.ratios = None
    else:
        mine, whole = tf.cast(mine, tf.float32), tf.cast(whole, tf.float32)
        _share.ratios = (tf.math.divide_no_nan(mine, whole), tf.math.divide_no_nan(whole, mine))
    try:
        yield
    finally:
        _share.ratios = kept


@contextlib.contextmanager
def unscaled() -> Iterator[None]:
    """Inside (on this thread, under ``scaled_as_one_device``), no loss is scaled for the
    replicas, and none unscaled: an evaluation step sums no gradient over them, so each
    replica's loss stays its own mean. Keras's own ``test_step`` (which unscales before its
    tracker) reads the same either way; a custom ``test_step`` that feeds ``compute_loss``'s
    value to a tracker (keras-io's "providing your own evaluation step") read 1/N of one
    device's loss on N replicas (0.058 against 0.116 on 2)."""
    kept = getattr(_share, "ratios", None)
    _share.ratios = _UNSCALED
    try:
        yield
    finally:
        _share.ratios = kept


def first_rows(batch: Any) -> Any:
    """The rows of a (replica's) batch, as Keras's loss tracker counts them: its first leaf's
    (a Python int where the shape is static)."""
    import tensorflow as tf

    leaf = tf.nest.flatten(batch)[0]
    static = leaf.shape[0] if leaf.shape.rank else None
    return static if static is not None else tf.shape(leaf)[0]


def run(strategy: Any, step: Any, batch: Any) -> Any:
    """``strategy.run(step, (batch, mine, whole))``: each replica's step is given its rows and the
    step's rows over all replicas, for ``share`` (None for both where Keras's 1/replicas is exact:
    one replica, or on one worker a split the static shapes show even). Call inside
    ``scaled_as_one_device``."""
    import tensorflow as tf

    from tfgpu import distribute

    if strategy.num_replicas_in_sync == 1:
        return strategy.run(step, args=(batch, None, None))
    local = [first_rows(part) for part in strategy.experimental_local_results(tf.nest.flatten(batch)[0])]
    across_workers = distribute.collective_workers(strategy)
    rows = None if across_workers else _local_rows(local)
    if isinstance(rows, int) and len(set(local)) == 1:  # one worker, a split its shapes show even
        return strategy.run(step, args=(batch, None, None))

    def replica(batch: Any) -> Any:
        mine = first_rows(batch)
        whole = rows
        if whole is None:  # several workers: one scalar all-reduce
            whole = tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, tf.convert_to_tensor(mine)
            )
        return step(batch, mine, whole)

    return strategy.run(replica, args=(batch,))


def _local_rows(local: list[Any]) -> Any:
    """The step's rows on this worker's replicas: a Python int where every shape is static (32 rows
    on 3 replicas: constants), else one ``add_n``. (No annotated local rebound in ``run``: AutoGraph
    cannot convert a closure over one and warns to the user's console.)"""
    import tensorflow as tf

    if all(isinstance(n, int) for n in local):
        return sum(local)
    return tf.add_n([tf.convert_to_tensor(n) for n in local])


def sharing(train_step: Any) -> Any:
    """fn(batch, mine, whole) -> ``train_step(batch)`` with its losses scaled by ``mine / whole``."""

    def step(batch: Any, mine: Any, whole: Any) -> Any:
        with share(mine, whole):
            return train_step(batch)

    return step

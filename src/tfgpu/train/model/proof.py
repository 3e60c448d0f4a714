"""Before the first epoch: the user's own step on the run's replicas equals it on one device.

A loss that returns one number, a custom ``train_step`` that divides by its local batch, a loss
scaled twice: each trains silently wrong on N replicas, and users learn of it from curves that look
wrong weeks later (issue 43: Keras's own ``fit`` trained keras-io's ``contrastive_loss`` 2.3x too
far on 2 replicas). ``selfcheck`` compares replicas on a built-in model; this compares on the
user's model, their compiled step and their first batch.

How, without a copy of the model (cloning cannot re-create custom layers, Lambdas, subclassed
models): every variable the step touches is read; the step runs once on the run's replicas on a
slice of the first global batch; the variables are put back; then the model's variables are lent
to a one-device strategy (each Keras variable given a one-device ``tf.Variable`` holding the same
value, as ``rehoming.rehome`` does), the same step runs once on the same rows (eagerly: one
step's ops cost less than a second trace of the model), and the original
variables are given back untouched. The updates (after - before) and the logged figures are
compared. What cannot agree exactly is said and not checked: random numbers drawn in training
(Dropout's masks), BatchNormalization's per-replica statistics, several workers.

The batch is the run's own first one, taken from its iterator by the loop (``loop.EpochLoop``),
which then trains on it here (``then_train``): the data is read once, as the run reads it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from tfgpu import graphs
from tfgpu.train.model import placement
from tfgpu.train.pieces import model_cache

log = logging.getLogger(__name__)

ROWS_PER_REPLICA = 8  # the rows each replica steps on: enough to sum, little to hold twice
UPDATE_TOLERANCE = 1e-3  # of a variable's update (L2): float32 sums taken in another order
LOGGED_TOLERANCE = 1e-4


@dataclasses.dataclass(frozen=True)
class Proof:
    """What the comparison found: ``status`` is "agree", "differ" or "not checked"."""

    status: str
    sentence: str
    replicas: int = 0
    worst_update_error: float | None = None
    update_ratio: float | None = None  # size of the replicas' update / one device's
    logged: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)  # name -> (N, 1)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def proved(model: Any, strategy: Any) -> bool:
    """Whether ``model`` was compared on ``strategy`` in its compiled state already (a script
    calling ``fit`` once per epoch pays for the comparison once)."""
    return model_cache.proved(model, strategy)


def prove(model: Any, strategy: Any, batch: Any, *, then_train: bool = False) -> Proof:
    """Compare one step of ``model`` on ``strategy``'s replicas and on one device, from the same
    state, on the first rows of ``batch`` (the run's own first distributed batch, whatever the
    data: arrays, a dataset, a PyDataset, a generator); leaves every variable as it was. With
    ``then_train`` the model then takes its step on the whole batch on the replicas, as the loop
    would have: the loop hands its first batch over, so none is lost or repeated (before, a
    dataset was compared on a batch of zeros, to leave it unread: a loss with a square root was
    NaN there, and a step that doubled its gradient went unsaid). The replicas' step is traced
    once for both (its batch dimension left free)."""
    step = _replicas_step(strategy, model, batch)
    found = _proved(model, strategy, batch, step)  # every variable put back, whatever it found
    if then_train:
        step(batch)
    return found


def unchecked(model: Any, strategy: Any) -> Proof | None:
    """The proof's answer when the comparison cannot run for this model and strategy (several
    workers, random numbers drawn in training...), said without reading any data; else None."""
    reason = _not_checkable(model, strategy)
    return (
        None
        if reason is None
        else Proof("not checked", f"not checked: {reason}", strategy.num_replicas_in_sync)
    )


def _proved(model: Any, strategy: Any, batch: Any, step: Callable[[Any], None]) -> Proof:
    import tensorflow as tf

    replicas = strategy.num_replicas_in_sync
    found = unchecked(model, strategy)
    if found is not None:
        return found
    variables = placement.step_variables(model)
    before = [np.array(tf.convert_to_tensor(v._value)) for v in variables]
    try:
        local, whole = _rows(strategy, batch)
        logged_n = _logged(model, step, local)
        after_n = [np.array(tf.convert_to_tensor(v._value)) for v in variables]
        _assign(variables, before)
        one = tf.distribute.OneDeviceStrategy(_first_device(strategy))
        with placement.lent(model, variables, one, values=before):
            # eagerly (as run_eagerly=True runs it): one step's ops, not a second trace of the
            # model (0.06 s of CPU on a small Dense model, 0.20 s traced)
            logged_1 = _logged(model, _eager_step(one, model), whole)
            after_1 = [np.array(tf.convert_to_tensor(v._value)) for v in variables]
    except tf.errors.ResourceExhaustedError:
        _assign(variables, before)
        return Proof(
            "not checked",
            "not checked: one device could not hold the step with a second copy of the model's "
            "variables (out of memory)",
            replicas,
        )
    except Exception as error:  # the check must never stop a run that would train: said, and skipped
        _assign(variables, before)
        from tfgpu import usercode

        said = usercode.one_line(error)[:300]  # a TensorFlow error's cause, not "Graph execution error:"
        log.warning("tfgpu could not compare the replicas' first step with one device's: %s", said)
        return Proof("not checked", f"not checked: the comparison failed ({said})", replicas)
    finally:
        for metric in model.metrics:
            metric.reset_state()
    _assign(variables, before)
    model_cache.mark_proved(model, strategy)
    trained = [i for i, v in enumerate(variables) if v.trainable]
    from tfgpu.train.model.user_model import looked_up

    return _compare(
        variables, trained, before, after_n, after_1, logged_n, logged_1, replicas, looked_up(model)
    )


SPARSE_CAUSE = (
    "sparse gradients: a row looked up once per batch (a position embedding's "
    "Embedding(arange(maxlen))) gets one gradient slice per replica, and Keras's optimizers square "
    "each slice before duplicates are summed (Adam, RMSprop; Keras's own fit alike), so on several "
    "replicas those rows step otherwise than on one device (SGD agrees). Look the rows up once per "
    "example (broadcast the positions to the batch before the lookup) or slice the weight densely "
    "(layer.embeddings[:maxlen]) to train as one device"
)


def _not_checkable(model: Any, strategy: Any) -> str | None:
    from tfgpu import distribute

    if distribute.is_parameter_server(strategy) or distribute.spans_workers(strategy):
        return "several workers (the comparison runs within one process)"
    if getattr(model, "optimizer", None) is None:
        return "the model has no optimizer"
    if any("seed_generator" in v.path for v in model.variables):
        return "the model draws random numbers in training (Dropout's masks differ per replica)"
    batch_norm = [
        layer.name
        for layer in model._flatten_layers()
        if type(layer).__name__ == "BatchNormalization" and not getattr(layer, "synchronized", False)
    ]
    if batch_norm:
        return f"BatchNormalization ({batch_norm[0]}) takes its statistics per replica"
    return None


def _first_device(strategy: Any) -> str:
    return strategy.extended.worker_devices[0]


def _rows(strategy: Any, batch: Any) -> tuple[Any, Any]:
    """(each replica's first rows, as a distributed value; the same rows in one batch)."""
    import tensorflow as tf

    def first(leaf: Any, replica: int) -> Any:
        return None if leaf is None else strategy.experimental_local_results(leaf)[replica][:ROWS_PER_REPLICA]

    local = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.nest.map_structure(lambda leaf: first(leaf, ctx.replica_id_in_sync_group), batch)
    )
    replicas = len(strategy.extended.worker_devices)
    whole = tf.nest.map_structure(
        lambda leaf: None if leaf is None else tf.concat([first(leaf, r) for r in range(replicas)], 0), batch
    )
    return local, whole


def _replicas_step(strategy: Any, model: Any, batch: Any) -> Callable[[Any], None]:
    """fn(batch): the model's ``train_step`` run once on ``strategy``, as the loop runs it, for
    any rows of ``batch``'s structure (one trace: its batch dimension is left free where every
    part is a plain tensor)."""
    step = _eager_step(strategy, model)
    if graphs.eager(model):  # as the loop runs it
        return step
    import tensorflow as tf

    # traced, as the loop runs it: eagerly, an LSTM's step on 3 replicas took a minute (op by op in
    # each replica's thread); TensorFlow's warning of a tf.function made per call is for a loop
    signature = _free_rows(batch)
    traced = tf.function(step, autograph=False, input_signature=None if signature is None else [signature])

    def quietly(batch: Any) -> None:
        tf_log = logging.getLogger("tensorflow")
        level = tf_log.level
        tf_log.setLevel(logging.ERROR)
        try:
            traced(batch)
        finally:
            tf_log.setLevel(level)

    return quietly


def _eager_step(strategy: Any, model: Any) -> Callable[[Any], None]:
    """fn(batch): the model's ``train_step`` run once on ``strategy``, eagerly."""
    from tfgpu.train.pieces import losses

    def step(batch: Any) -> None:
        with losses.scaled_as_one_device():
            losses.run(strategy, losses.sharing(model.train_step), batch)

    return step


def _free_rows(batch: Any) -> Any:
    """``batch``'s type, its first dimension free (a batch of any rows takes one trace); None
    where a part is not a plain tensor (ragged, sparse, absent): traced per shape then."""
    import tensorflow as tf
    from tensorflow.python.distribute import values

    def free(spec: Any) -> Any:
        if not isinstance(spec, tf.TensorSpec) or spec.shape.rank in (None, 0):
            raise TypeError(spec)
        return tf.TensorSpec([None, *spec.shape[1:]], spec.dtype)

    def part(value: Any) -> Any:
        if isinstance(value, values.PerReplica):
            return values.PerReplicaSpec(*[free(s) for s in value._type_spec._value_specs])
        if isinstance(value, tf.Tensor):
            return free(tf.TensorSpec.from_tensor(value))
        raise TypeError(value)

    try:
        return tf.nest.map_structure(part, batch)
    except TypeError:
        return None


def _logged(model: Any, step: Callable[[Any], None], batch: Any) -> dict[str, float]:
    """``step(batch)`` from fresh metrics; the metrics' results after."""
    for metric in model.metrics:
        metric.reset_state()
    step(batch)
    logged = {}
    for metric in model.metrics:
        result = metric.result()
        results = result if isinstance(result, dict) else {metric.name: result}
        for name, value in results.items():
            array = np.asarray(value)
            if array.size == 1:
                logged[name] = float(array)
    return logged


def _assign(variables: list[Any], values: list[np.ndarray]) -> None:
    for variable, value in zip(variables, values, strict=True):
        variable._value.assign(value)


def _compare(
    variables: list[Any],
    trained: list[int],
    before: list[np.ndarray],
    after_n: list[np.ndarray],
    after_1: list[np.ndarray],
    logged_n: dict[str, float],
    logged_1: dict[str, float],
    replicas: int,
    looked_up: set[str] = frozenset(),
) -> Proof:
    if not all(np.isfinite(after_1[i]).all() and np.isfinite(after_n[i]).all() for i in trained):
        return Proof(
            "not checked",
            "not checked: the step's update is not finite on the first batch (a loss that divides "
            "by a count of its own rows, as keras-io's NER loss divides by the non-padding tokens, "
            "is 0/0 on a batch without them)",
            replicas,
        )
    errors, norm_n, norm_1 = {}, 0.0, 0.0
    for i in trained:
        update_n, update_1 = after_n[i] - before[i], after_1[i] - before[i]
        errors[variables[i].path] = _relative(update_n, update_1)
        norm_n += float(np.sum(np.square(update_n, dtype=np.float64)))
        norm_1 += float(np.sum(np.square(update_1, dtype=np.float64)))
    worst = max(errors.values(), default=0.0)
    ratio = float(np.sqrt(norm_n / norm_1)) if norm_1 > 0 else None
    logged = {k: (logged_n[k], logged_1[k]) for k in logged_n if k in logged_1}
    off = {k: v for k, v in logged.items() if abs(v[0] - v[1]) > LOGGED_TOLERANCE * max(abs(v[1]), 1e-6)}
    if worst <= UPDATE_TOLERANCE and not off:
        return Proof(
            "agree",
            f"{replicas} replicas = 1 device on the first batch (updates within {worst:.1e} of their "
            f"size, {len(logged)} logged figures equal)",
            replicas,
            worst,
            ratio,
            logged,
        )
    return Proof("differ", _why(errors, ratio, off, replicas, looked_up), replicas, worst, ratio, logged)


def _relative(update_n: np.ndarray, update_1: np.ndarray) -> float:
    """How far a variable's update on the replicas is from one device's, in the L2 norm of the
    larger. Not element by element: under Adam an element whose gradient sums to about epsilon
    turns a float32 rounding of its sum into a visible change of its update (the demo's conv
    kernel differed by 1e-3 of its largest element in one of this stop's two full test runs), while a
    wrong step (a loss scaled by the local batch, a loss over the batch's pairs) moves most of
    them."""
    diff = np.sqrt(np.sum(np.square(update_n - update_1, dtype=np.float64)))
    size = max(
        np.sqrt(np.sum(np.square(update_1, dtype=np.float64))),
        np.sqrt(np.sum(np.square(update_n, dtype=np.float64))),
    )
    return float(diff / max(size, 1e-12))


def _is_scaled(on_replicas: float, on_one: float, replicas: int) -> bool:
    """True when a figure on the replicas is one device's divided by their number."""
    return abs(on_replicas * replicas - on_one) <= LOGGED_TOLERANCE * max(abs(on_one), 1e-6) * replicas


def _why(
    errors: dict[str, float],
    ratio: float | None,
    off: dict[str, tuple[float, float]],
    replicas: int,
    looked_up: set[str] = frozenset(),
) -> str:
    """The disagreement, its figures and its likely cause, in one message."""
    worst = max(errors, key=errors.get) if errors else None
    updates_off = worst is not None and errors[worst] > UPDATE_TOLERANCE
    figures = []
    if ratio is not None:
        figures.append(f"the replicas' update is {ratio:.3g}x one device's")
    if updates_off:
        figures.append(f"{worst} differs by {errors[worst]:.2g} of its update")
    figures += [
        f"logged {k} {n:.6g} on {replicas} replicas, {o:.6g} on one device" for k, (n, o) in off.items()
    ]
    if updates_off and worst in looked_up:  # issue 57 item 7
        cause = SPARSE_CAUSE
    elif ratio is not None and abs(ratio - replicas) < 0.1 * replicas:
        cause = (
            f"the gradients were summed over the {replicas} replicas instead of averaged: a loss "
            "computed in your own train_step that is a mean over the replica's rows (divide the "
            "per-example losses by the global batch, e.g. tf.nn.compute_average_loss, or use "
            "model.compute_loss, which Keras scales)"
        )
    elif not updates_off and off and all(_is_scaled(n, o, replicas) for n, o in off.values()):
        cause = (
            f"a metric in your own step fed the loss as Keras scales it for the replicas (1/{replicas}, "
            f"so that their summed gradients are one device's): the weights train as one device, the "
            f"figure reads 1/{replicas} of it (update the metric with the loss times "
            "self.distribute_strategy.num_replicas_in_sync, or with the unscaled per-example losses)"
        )
    elif ratio is not None and abs(ratio * replicas - 1) < 0.1:
        cause = f"the loss was divided by the {replicas} replicas twice (scaled by you and by Keras)"
    else:
        cause = (
            "a loss or metric over the rows of the whole batch together (pairs, a contrastive or "
            "ranking loss: each replica sees only its part), random numbers drawn in your "
            "train_step, or a loss scaled by the local batch"
        )
    return (
        f"{replicas} replicas do not train as one device on the first batch: {'; '.join(figures)}. "
        f"Likely cause: {cause}. Pass prove=False (tfgpu train --no-prove) to skip this check"
    )

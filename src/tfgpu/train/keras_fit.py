"""``tfgpu.fit`` and ``tfgpu.evaluate``: Keras's ``Model.fit`` / ``Model.evaluate`` contract on tfgpu's loop.

A user's compiled Keras model goes in as it is: its loss, metrics, optimizer and callbacks are
Keras's, and the result is Keras's ``History`` (``history.history["val_loss"]``). What changes is
the loop under it (``tfgpu.Trainer``): it works under MultiWorkerMirroredStrategy and
ParameterServerStrategy, where Keras 3's ``fit`` fails; it runs K steps per compiled call with the
input fetched to the device; it measures input wait as it runs; ``checkpoint_dir`` resumes a killed
run to the weights of an uninterrupted one. This module only turns Keras's arguments into a
``Task`` and ``TrainOptions``; the Trainer does the work.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from tfgpu import distribute
from tfgpu.train import keras_args
from tfgpu.train.inputs import adapters
from tfgpu.train.model import placement, split
from tfgpu.train.model import user_model as model_setup
from tfgpu.train.pieces import callbacks as callback_setup
from tfgpu.train.pieces.options import DEFAULT_LOG_EVERY, TrainOptions
from tfgpu.train.pieces.task import Task

log = logging.getLogger(__name__)


def _handed_back(verb: Callable[..., Any]) -> Callable[..., Any]:
    """``verb(model, ...)`` in ``placement.handed_back(model)``: the user's model is a one-device
    Keras model again after ``tfgpu.fit`` and ``tfgpu.evaluate``, as its user made it."""

    @functools.wraps(verb)
    def run(model: Any, *args: Any, **kwargs: Any) -> Any:
        with placement.handed_back(model):
            return verb(model, *args, **kwargs)

    return run


@_handed_back
def fit(
    model: Any,
    x: Any = None,
    y: Any = None,
    *,
    batch_size: int | str | None = None,
    epochs: int = 1,
    verbose: Any = "auto",
    callbacks: Sequence[Any] | None = None,
    validation_split: float = 0.0,
    validation_data: Any = None,
    shuffle: bool = True,
    class_weight: dict[Any, float] | None = None,
    sample_weight: Any = None,
    initial_epoch: int = 0,
    steps_per_epoch: int | None = None,
    validation_steps: int | None = None,
    validation_freq: int | Sequence[int] = 1,
    strategy: Any = None,
    steps_per_execution: int | None = None,
    log_every: int = DEFAULT_LOG_EVERY,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: int | None = None,
    keep_checkpoints: int = 3,
    checkpoint_epochs: bool = False,
    log_dir: str | os.PathLike | None = None,
    jit_compile: bool | None = None,
    remat: bool | str | None = None,
    devices_per_replica: int | None = None,
    micro_batches: int | None = None,
    tune: bool | str | Sequence[str] | None = None,
    tune_budget_s: float | None = None,
    seed: int | None = None,
    prove: bool = True,
) -> Any:
    """Train a compiled Keras model as ``model.fit`` would, on tfgpu's loop; returns Keras's History.

    The arguments up to ``validation_freq`` are ``Model.fit``'s. ``x`` is what ``fit`` takes
    (arrays or dicts of arrays with ``y``, or a ``tf.data.Dataset`` of global batches), or a tfgpu
    dataset directory, or fn(input_context, per_replica_batch) -> dataset. tfgpu's additions:

    - ``strategy``: default the strategy the model was created under, else ``tfgpu.strategy()``
      (a model created outside a multi-replica strategy's scope is moved into it in place,
      ``train.model.rehoming.rehome``, and trains itself);
    - ``steps_per_execution``: steps per compiled call (default: the model's own when it was
      compiled with more than 1, else one call per ``log_every`` steps); batch callbacks are
      called once per call, as Keras's ``fit`` calls them;
    - ``checkpoint_dir`` / ``checkpoint_every``: save every N steps and at the end; a killed run
      started again resumes there, mid-epoch included, to the same weights; ``keep_checkpoints``
      the last K kept, ``checkpoint_epochs`` a save at each epoch's end too;
    - ``log_dir``: TensorBoard scalars (the logs, examples/s, input wait), chief only;
    - ``jit_compile``: XLA for the training step (default: as the model was compiled, said
      where XLA cannot compile the step); ``seed``: the shuffle order of arrays (default: the
      seed given to ``keras.utils.set_random_seed``, as Keras's ``fit`` follows it, else 0);
    - ``remat``: recompute activations in the backward pass instead of keeping them, for this run
      (True or ``"full"``: every layer; ``"activations"``: each activation function;
      ``"largest"``: the layers with the largest outputs); a model built in
      ``keras.RematScope`` trains as built. The weights equal those trained without remat;
    - ``devices_per_replica``: each replica's layers split over K of this process's devices (by
      their memory), its batch run in ``micro_batches`` (default 2K) so the devices work at the
      same time; several groups of K train data parallel. The weights equal one device's;
    - ``tune``: before the first epoch, measure steps per call, tf.data's result-preserving
      optimizations and XLA on this model and data (and one device against all: said), train with
      the fastest, and keep the choice for the next run (``train.tuning``); ``tune="all"`` adds
      mixed precision (GPUs with Tensor Cores) and may train on one device; ``tune_budget_s``
      bounds the measurement. The weights are those of the untuned run;
      ``history.train_result.tuning`` says what was chosen and why;
    - ``prove``: on several replicas, before the first step, the model's own step on them and on
      one device from the same state and rows are compared, and a disagreement is said with its
      likely cause (a loss summed over replicas, a custom ``train_step`` dividing by its local
      batch); ``history.train_result.proof`` holds the figures (``train.model.proof``);
    - ``batch_size="auto"``: the global batch doubled from Keras's default while a doubling fits
      in memory and gains 5% (the learning rate stays yours; the chosen batch is said loudly).

    The returned History carries tfgpu's measurements as ``history.train_result``
    (examples/s, input wait, verdict, timeline).
    """
    from tfgpu.train.run.trainer import Trainer

    model_setup.accepted(model, call="tfgpu.fit")
    acting, per_batch = keras_args.acting(model, steps_per_execution, callbacks)
    options = TrainOptions.of(
        tune=tune,
        tune_budget_s=tune_budget_s,
        auto_batch=batch_size == "auto",
        steps_per_execution=steps_per_execution or keras_args.compiled_steps(model) or per_batch,
        log_every=log_every,
        jit_compile=jit_compile,
        checkpoint_dir=checkpoint_dir,
        checkpoint_every=checkpoint_every,
        keep_checkpoints=keep_checkpoints,
        checkpoint_epochs=checkpoint_epochs,
        log_dir=log_dir,
        prove=bool(prove),
        remat=remat,
        devices_per_replica=devices_per_replica,
        micro_batches=micro_batches,
    )
    steps = (steps_per_epoch, validation_steps)
    train, validation, batch = _through_door(
        model, (x, y, sample_weight, validation_data), shuffle, batch_size, steps
    )
    placed = _placed(model, train, strategy, options, lambda replicas: train.per_replica(batch, replicas))
    task = Task(
        model=lambda: placed.model,
        train_data=train,
        eval_data=validation,
        batch_size=train.per_replica(batch, int(placed.strategy.num_replicas_in_sync)),
        steps_per_epoch=steps_per_epoch,
        seed=keras_args.shuffle_seed(seed),
        shuffle=bool(shuffle),
        callbacks=(*(callbacks or ()), *train.epoch_hooks()),
        class_weight=class_weight,
        validation_split=validation_split,
    )
    keras_args.check_arguments(placed.model, class_weight=class_weight, validation_freq=validation_freq)
    trainer = Trainer(task, placed=placed, options=options)
    keras_args.say_per_batch(acting, per_batch, placed.model)
    return _fitted(
        model,
        trainer,
        epochs=epochs,
        verbose=verbose if trainer.is_chief else 0,
        initial_epoch=initial_epoch,
        validation_freq=validation_freq,
        validation_steps=validation_steps,
    )


def _through_door(
    model: Any, data: tuple[Any, Any, Any, Any], shuffle: Any, batch_size: Any, steps: tuple[Any, Any]
) -> tuple[adapters.Adapter, adapters.Adapter | None, int | None]:
    """The door (``adapters``): (training data, validation data, the global batch: None for
    "auto") of ``(x, y, sample_weight, validation_data)``, each kind decided once; data that
    never ends refused without its ``steps`` (``steps_per_epoch``, ``validation_steps``)."""
    *given, validation_data = data
    train = adapters.of(*given, role="x", model=model, shuffle=bool(shuffle))
    validation = None if validation_data is None else adapters.validation(validation_data, model=model)
    keras_args.check_auto_batch(batch_size, train)
    train.check_steps(steps[0], argument="steps_per_epoch")
    if validation is not None:
        validation.check_steps(steps[1], argument="validation_steps")
    return train, validation, None if batch_size == "auto" else batch_size


def _placed(
    model: Any,
    data: adapters.Adapter,
    strategy: Any,
    options: TrainOptions,
    per_replica: Callable[[int], int],
) -> placement.Placement:
    """Where the model trains (``placement.place``, once: the Trainer takes the decision as it
    is), built for ``x`` first as Keras's fit builds it; a split's stages weighed at the run's
    global batch (``per_replica(replicas)`` examples a replica)."""
    asked, global_batch = options.placement, 0
    if asked.splits:
        replicas = split.replicas(asked, strategy=strategy)
        global_batch = per_replica(replicas) * replicas
    return placement.place(
        model,
        strategy,
        choose=distribute.strategy,
        split_as=asked,
        global_batch=global_batch,
        x_shape=data.x_shape(),
    )


def _fitted(model: Any, trainer: Any, **fit: Any) -> Any:
    """``trainer.fit(**fit)``'s Keras History, carrying ``train_result``; when a copy trained (a
    split, tuning's switch, the cloning fallback), its state given back to the user's model. The
    model that trained is read after the fit: tuning may switch the run to a copy."""
    result = trainer.fit(**fit)
    trained = trainer.model
    history = trained.history
    history.train_result = result
    if trained is not model:
        placement.give_back(model, trained)
        model.history = history
    return history


@_handed_back
def evaluate(
    model: Any,
    x: Any = None,
    y: Any = None,
    batch_size: int | None = None,
    verbose: Any = "auto",
    sample_weight: Any = None,
    steps: int | None = None,
    callbacks: Sequence[Any] | None = None,
    return_dict: bool = False,
    *,
    strategy: Any = None,
) -> Any:
    """``Model.evaluate`` on tfgpu's loop: the same arguments, defaults and result.

    The result is Keras's: the loss alone (a float) for a model compiled without metrics, else a
    list in Keras's order (``test_loss, test_acc = tfgpu.evaluate(...)``, as the guides write),
    or a dict with ``return_dict=True``. What a custom ``test_step`` returns is what is reported.
    Exact for any dataset size on every replica and worker; ``x`` takes what ``tfgpu.fit``
    takes. ``verbose`` shows Keras's progress bar (on the chief only).
    """
    from tfgpu.train.loop import evaluation

    if model_setup.override(model, "evaluate"):  # the user's own evaluate: its result, as theirs
        return model_setup.called(
            model,
            "evaluate",
            *((x,) if y is None else (x, y)),
            batch_size=batch_size,
            verbose=verbose,
            sample_weight=sample_weight,
            steps=steps,
            callbacks=callbacks,
            return_dict=return_dict,
        )
    model_setup.accepted(model, call="tfgpu.evaluate")
    data = adapters.of(x, y, sample_weight, role="x", model=model)
    data.check_steps(steps, argument="steps")
    where = placement.place(model, strategy, choose=distribute.strategy, x_shape=data.x_shape())
    strategy, placed = where.strategy, where.model
    per_replica = data.per_replica(batch_size, int(strategy.num_replicas_in_sync))
    task = Task(model=lambda: placed, train_data=data, batch_size=per_replica)
    spec = distribute.cluster_of(strategy)
    is_chief = spec is None or spec.is_chief
    feed = distribute.input_strategy(strategy, in_cluster=spec is not None)  # the coordinator's own under PS
    source = evaluation.input_for(
        data, task, strategy, feed=feed, global_batch=per_replica * int(strategy.num_replicas_in_sync)
    )
    shown = keras_args.verbose_of(verbose) if is_chief else 0
    listed = None
    if callbacks or shown:
        listed = callback_setup.callback_list(
            callbacks,
            model=placed,
            is_chief=is_chief,
            verbose=shown,
            epochs=1,
            steps=steps or source.known_length(),  # arrays: Keras's bar shows "3/8", not "3/Unknown"
            history=False,
        )
    try:
        logs = evaluation.evaluator_for(strategy, placed)(source, limit=steps, callbacks=listed).logs
    finally:
        source.release()  # its iterator goes now (``Input.release``)
    if return_dict:
        return logs
    return placed._flatten_metrics_in_order(logs)  # Keras's own order, and a float for one figure


# -- arguments -------------------------------------------------------------------------------------

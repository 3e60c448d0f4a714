"""``tfgpu.Trainer``: a training loop correct under every tf.distribute strategy, and fast on a GPU.

Three parts, each its own module: a ``Setup`` (the model as it trains, the strategy, the inputs
and the compiled functions: ``train.loop.setup``), a loop over it (``train.loop.training``; under
ParameterServerStrategy ``train.loop.ps_loop``), and, with ``tune``, a tuning session
(``train.tuning.session``) that measures configurations and hands back the one to train in. The
Trainer joins them: it builds the setup and the loop, runs the tuning and the proof
(``train.model.proof``) before the first step, and moves to the setup a tuning chose.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from tfgpu import choices, distribute
from tfgpu.errors import ConfigError
from tfgpu.train.inputs import adapters
from tfgpu.train.loop.ps_loop import ParameterServerLoop
from tfgpu.train.loop.result import Progress, TrainResult
from tfgpu.train.loop.setup import Setup
from tfgpu.train.loop.training import Counters, EpochLoop, Loop, OutOfMemoryError, Validation, check_length
from tfgpu.train.model import placement, proof
from tfgpu.train.pieces import callbacks as callback_setup
from tfgpu.train.pieces import remat
from tfgpu.train.pieces import tuned as tuning_result
from tfgpu.train.pieces.options import Config, TrainOptions
from tfgpu.train.pieces.task import Task
from tfgpu.train.pieces.tuned import Tuning, input_options
from tfgpu.train.tuning.session import Session

log = logging.getLogger(__name__)

__all__ = ["OutOfMemoryError", "Progress", "TrainOptions", "TrainResult", "Trainer"]


class Trainer:
    """Train ``task`` under ``strategy`` (default: ``tfgpu.strategy()``).

    ``options`` (a ``TrainOptions``) says how; any of its fields can also be given as a keyword,
    the placement's included (``Trainer(task, steps_per_execution=8, checkpoint_dir="ck",
    remat=True, devices_per_replica=2)``). ``on_progress`` is called with a ``Progress`` once per
    log window, on the chief only. ``placed``: a model placed already (``placement.place``, as
    ``tfgpu.fit`` places the user's model) trains as it is, under its strategy; ``Task.model``
    is then not called.
    """

    def __init__(
        self,
        task: Task,
        *,
        strategy: Any = None,
        placed: placement.Placement | None = None,
        options: TrainOptions | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        **overrides: Any,
    ) -> None:
        options = TrainOptions.of(options, what="Trainer option", **overrides)
        task = _through_door(task)
        saved = (
            tuning_result.read(options.tuning_file) if options.tuning_file else None
        )  # before anything is built
        self.backup, others = callback_setup.split_backup(task.callbacks)
        if self.backup is not None:
            options = callback_setup.backup_options(options, self.backup)
        self.task = task
        self.on_progress = on_progress
        self.setup = Setup.build(task, strategy=strategy, placement=options.placement, placed=placed)
        if options.jit_compile is None:
            options = dataclasses.replace(options, jit_compile=self._compiled_xla())
        if options.jit_compile and self.setup.xla_refused():
            raise ConfigError(
                "XLA cannot compile a step replicated over logical CPU devices (they share one XLA CPU device)",
                value=list(distribute.replica_devices(self.setup.strategy)[0]),
                fix="use jit_compile with GPUs or a single device, or leave it off on the CPU",
            )
        self._callbacks = others
        self._record_steps(options)
        self.loop: Loop = self._loop(options)
        self.tuning: Tuning | None = None  # what tune=True (or a saved tuning) chose
        self.proof: proof.Proof | None = None  # the replicas' first step against one device's
        if saved is not None:
            session = Session(self.setup, options=options)
            found, config = session.saved(saved)
            self._apply(session, found, config, why=f"from {options.tuning_file}")

    @property
    def options(self) -> TrainOptions:
        """What the run trains with: one frozen object, held by the loop alone and replaced whole
        when tuning chooses (it was kept here and in the loop, synced by hand)."""
        return self.loop.options

    def _loop(self, options: TrainOptions) -> Loop:
        kind = ParameterServerLoop if self.setup.parameter_server else EpochLoop
        return kind(
            self.setup,
            options=options,
            callbacks=self._callbacks,
            backup=self.backup,
            on_progress=self.on_progress,
        )

    def _compiled_xla(self) -> bool:
        """XLA as the model's ``compile`` asked (``jit_compile=True``, or Keras's "auto" that
        resolved to it on a GPU): keras-io's image classification example asks for it there, and
        ``tfgpu.fit`` dropped it without a word. Where XLA cannot compile the step, said."""
        import tensorflow as tf

        if getattr(self.setup.model, "_jit_compile", None) is not True:
            return False
        refused = self.setup.xla_refused()
        if (
            refused is None
            and self.setup.strategy.num_replicas_in_sync > 1
            and tf.config.list_physical_devices("GPU")
        ):
            # Keras's "auto" reads True too on a GPU machine (for a model compiled outside any
            # scope), and turns itself off under a strategy: on several GPUs only an explicit ask
            refused = "on several GPUs XLA is taken only from tfgpu.fit(jit_compile=True)"
        choices.record(
            "jit_compile",
            refused is None,
            "the model was compiled with jit_compile=True"
            + (f"; not taken: {refused}" if refused else " (XLA for the training step)"),
        )
        return refused is None

    @staticmethod
    def _record_steps(options: TrainOptions) -> None:
        k = options.execution_steps
        choices.record(
            "steps_per_execution",
            k,
            "asked for" if options.steps_per_execution else f"one compiled call per log window of {k} steps",
        )

    # -- what it trains ------------------------------------------------------------------------
    @property
    def model(self) -> Any:
        return self.setup.model

    @property
    def optimizer(self) -> Any:
        return self.setup.model.optimizer

    @property
    def strategy(self) -> Any:
        return self.setup.strategy

    @property
    def global_batch(self) -> int:
        return self.setup.global_batch

    @property
    def replicas(self) -> int:
        return self.setup.replicas

    @property
    def is_chief(self) -> bool:
        return self.setup.is_chief

    @property
    def resumed_from(self) -> str | None:
        return self.loop.resumed_from

    def reset_epochs(self) -> None:
        """Start counting epochs and steps from zero again (the weights stay)."""
        self.loop.counters = Counters()

    # -- tune=True -------------------------------------------------------------------------------
    def tune(self, *, epochs: int | None = None, steps: int | None = None) -> Tuning:
        """Measure the candidate configurations (``train.tuning``) and train with the fastest from
        here on; returns the ``Tuning``. ``fit`` calls it first when ``tune`` is set;
        ``tfgpu tune`` calls it alone. ``epochs``/``steps``: the run to come (sets the budget)."""
        if self.tuning is None:
            session = Session(self.setup, options=self.options)
            found, config = session.measure(epochs=epochs, steps=steps)
            self._apply(
                session, found, config, why=f"kept from {found.reused}" if found.reused else "measured"
            )
        return self.tuning

    def _apply(self, session: Session, found: Tuning, config: Config, *, why: str) -> None:
        """Train with ``config`` (what ``found`` chose, in ``session``) from here on; the choices
        say so, and why."""
        if session.needs_own_setup(config):
            session.model(config)  # the copy takes this model's state now
            self._switch(session.setup_for(config), why=why)
        k = config.steps_per_execution
        if k != self.options.execution_steps:
            choices.record("steps_per_execution", k, f"tuned ({why})")
        self.loop.options = self.options.tuned(steps_per_execution=k, jit_compile=config.jit_compile)
        if config.input:
            self.setup.train.set_tf_options(input_options())
        chosen = ", ".join(f"{knob}={value}" for knob, value in found.choices.items())
        choices.record("tuning", chosen or "as configured", why)
        self.tuning = found

    def _switch(self, trial: Setup, *, why: str) -> None:
        """Train in ``trial``'s batch, on one device or in mixed precision from here on: a setup
        (and loop) around the trial's model, which holds this model's state now (the untuned
        run's: trials are restored; ``Session.model`` carried it). Said loudly: the batch is the user's to know (the learning
        rate stays as given)."""
        model = trial.model
        if model is not self.model:
            model.reset_metrics()  # its trials' figures (a resumed run restores its own below)
        before = (self.global_batch, self.replicas, self.model.dtype_policy.name)
        self.setup = self.setup.variant(
            model=model, strategy=trial.strategy, batch=trial.global_batch, record=True
        )
        options = self.options
        self._record_steps(options)
        self.loop = self._loop(options)
        after = (self.global_batch, self.replicas, self.model.dtype_policy.name)
        for name, old, new in zip(("global_batch", "devices", "precision"), before, after, strict=True):
            if old != new:
                choices.record(name, new, f"tuned from {old} ({why})")
                log.warning(
                    "tfgpu tuning changed the %s from %s to %s (%s)", name.replace("_", " "), old, new, why
                )

    # -- fit and evaluate ----------------------------------------------------------------------
    def _remat(self) -> contextlib.AbstractContextManager[None]:
        """The run's remat mode on the model's layers for the run (none asked: nothing to do)."""
        mode = self.options.placement.remat
        return contextlib.nullcontext() if mode is None else remat.for_run(self.model, mode)

    def fit(
        self,
        *,
        epochs: int | None = None,
        steps: int | None = None,
        initial_epoch: int = 0,
        verbose: Any = 0,
        validation_freq: int | Any = 1,
        validation_steps: int | None = None,
    ) -> TrainResult:
        """Train for ``epochs`` passes over the data (counting from ``initial_epoch``), or ``steps``
        steps in all (resuming counts), calling the Task's Keras callbacks as ``Model.fit`` does.

        ``verbose`` shows Keras's progress bar (0: none; tfgpu train prints its own lines).
        Validation runs on ``eval_data`` after epochs that ``validation_freq`` names, up to
        ``validation_steps`` batches; its figures are logged with a ``val_`` prefix.
        """
        check_length(epochs=epochs, steps=steps, initial_epoch=initial_epoch)
        try:
            return self._fit(
                epochs=epochs,
                steps=steps,
                initial_epoch=initial_epoch,
                verbose=verbose,
                validation=Validation(validation_freq, validation_steps),
            )
        finally:  # the run's iterators go now, not at Python's next full collection
            self.setup.release_inputs()

    def _fit(
        self,
        *,
        epochs: int | None,
        steps: int | None,
        initial_epoch: int,
        verbose: Any,
        validation: Validation,
    ) -> TrainResult:
        with self._remat():  # tuning measures it as it trains
            if self.options.tune is not None and self.tuning is None:
                self.tune(epochs=epochs, steps=steps)  # first: it may move the run to another setup
                if verbose and self.is_chief:
                    print(self.tuning.line())  # before the progress bars, as Keras prints its own
            loop = self.loop
            if self.proof is None and self.options.prove and self._proves():
                if self.setup.parameter_server:  # the comparison runs within one process
                    self.proof = proof.unchecked(self.setup.model, self.setup.strategy)
                else:
                    loop.prove_first = True
            if initial_epoch and not loop.resumed_from and loop.counters.at_start:
                loop.counters.epoch = initial_epoch
            result = loop.fit(
                epochs=epochs,
                steps=steps,
                callbacks=loop.callback_list(verbose=verbose, epochs=epochs),
                validation=validation,
            )
        self.proof = self.proof or loop.proof
        result.tuning, result.proof = self.tuning, self.proof
        return result

    def evaluate(
        self, data: Any = None, *, limit: int | None = None, callbacks: Any = None
    ) -> dict[str, float]:
        """The model's loss and metrics over every example of ``data`` (default: the task's eval
        data), exact whatever the replicas and workers, with ``examples`` counted; up to ``limit``
        batches."""
        try:
            found = self.loop.evaluate(data, limit=limit, callbacks=callbacks)
        finally:
            self.setup.release_inputs()
        return {"examples": found.examples, **found.logs}

    def _proves(self) -> bool:
        """Whether the loop compares the replicas' step with one device's on the run's first
        batch before it trains on it (``train.model.proof``): on several replicas, at a run's start,
        once per model and compiled state."""
        setup = self.setup
        if setup.replicas < 2 or self.loop.counters.step or self.resumed_from or setup.direct:
            return False
        return not proof.proved(setup.model, setup.strategy)


def _through_door(task: Task) -> Task:
    """``task`` with its data as adapters (``adapters.through_door``): what the data is,
    decided here once for the run and every setup made from it."""
    train, held, hooks = adapters.through_door(task)
    return dataclasses.replace(task, train_data=train, eval_data=held, callbacks=(*task.callbacks, *hooks))

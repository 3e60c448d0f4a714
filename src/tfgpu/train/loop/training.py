"""The training loop over a ``Setup``: epochs, steps, validation, checkpoints and the callbacks.

Keras 3's ``model.fit`` fails under MultiWorkerMirroredStrategy (keras-team/keras#20585) and under
ParameterServerStrategy, so tfgpu owns the loop and tests it against Keras on a single device. What
runs each step is Keras's: the model's own ``train_step`` (its compiled loss, metrics, optimizer,
regularization, loss scaling, or the user's override; see ``tfgpu.train.model.user_model``). The loop's shape
is orbit's: one compiled function runs an execution (up to K steps, each taking its batch from the
iterator inside the graph, see ``execution``) and returns device-side accumulators; the host
dispatches executions without reading them and, once per log window, reads them and runs the hooks
(``windows``). Keras callbacks are called as ``Model.fit`` calls them at the same
``steps_per_execution``: batch hooks once per execution (with the logs as device tensors, turned
into numbers off the main thread by Keras's ``CallbackList`` when no callback needs them at once),
epoch hooks with the epoch's logs and validation.

``Loop`` holds what every loop shares (counters, checkpoints, epoch ends, validation, the run's
record); ``EpochLoop`` runs epochs in this process (one device, Mirrored, MultiWorkerMirrored);
``ps_loop.ParameterServerLoop`` schedules the same execution on parameter-server workers.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tfgpu import choices, distribute, letting_go
from tfgpu.errors import RESUMABLE, ConfigError, StoppedOnRequest, TfgpuError
from tfgpu.train.loop.evaluation import Evaluation, evaluator_for
from tfgpu.train.loop.result import Progress, TrainResult
from tfgpu.train.loop.setup import Setup
from tfgpu.train.loop.windows import RunLog, Window
from tfgpu.train.model import proof
from tfgpu.train.pieces import callbacks as callback_setup
from tfgpu.train.pieces import stopping
from tfgpu.train.pieces.callbacks import pythonify
from tfgpu.train.pieces.checkpoints import Checkpoints, KeptEpoch, RunShape
from tfgpu.train.pieces.options import TrainOptions
from tfgpu.train.step import execution

log = logging.getLogger(__name__)


class OutOfMemoryError(TfgpuError):
    """A training step ran out of device memory."""


def out_of_memory(model: Any, strategy: Any, *, batch: int, global_batch: int) -> OutOfMemoryError:
    """The error for a step of ``batch`` per replica that ran out of device memory: the step's
    fixed and per-example bytes (``tfgpu.memory``) and the fixes with their numbers."""
    from tfgpu.train.step import footprint

    what = f"Out of device memory in a training step at {batch} examples per replica (global batch {global_batch})"
    try:
        found = footprint.memory(model, batch_size=batch, measure=False)
    except Exception as exc:  # the figures are a help: the error is said without them
        log.debug("no memory figures for the out-of-memory message: %s", exc)
        return OutOfMemoryError(
            what, value=batch, fix="lower the batch size (tfgpu.find_batch_size finds the largest that fits)"
        )
    device = distribute.replica_devices(strategy)[0][0].split("device:")[-1]
    capacity = next((d.total_bytes for d in found.devices if device.endswith(d.name)), None)
    has = f"; the device has {footprint.size(capacity)}" if capacity else ""
    return OutOfMemoryError(
        f"{what}: the step needs {footprint.size(found.fixed_bytes)} fixed and "
        f"{footprint.size(found.per_example_bytes)} per example ({found.source}), "
        f"{footprint.size(found.step_bytes())} in all{has}",
        value=batch,
        fix="one of: "
        + "; ".join(footprint.out_of_memory_advice(found, batch=batch, capacity=capacity))
        + " (tfgpu.find_batch_size measures the largest batch that fits)",
    )


@dataclass
class Counters:
    """Where the run is: steps in all, finished epochs, steps into the current epoch. Python ints:
    reading or assigning mirrored variables every step costs device ops; variables hold them only
    for checkpoints."""

    step: int = 0
    epoch: int = 0
    epoch_step: int = 0

    def advance(self, taken: int) -> None:
        self.step += taken
        self.epoch_step += taken

    def next_epoch(self) -> None:
        self.epoch += 1
        self.epoch_step = 0

    @property
    def at_start(self) -> bool:
        return self == Counters()


@dataclass(frozen=True)
class Validation:
    """Keras's ``validation_freq`` and ``validation_steps``."""

    freq: int | Sequence[int] = 1
    steps: int | None = None

    def names(self, epoch: int) -> bool:
        """Whether this epoch (0-based) is validated: every N epochs, or the epochs (1-based) a
        list names."""
        if isinstance(self.freq, int):
            return (epoch + 1) % self.freq == 0
        return epoch + 1 in self.freq


class Loop:
    """What every loop shares over a ``setup``: the counters and their checkpoints (the latest
    restored when built), epoch ends with validation, evaluation and the run's record."""

    def __init__(
        self,
        setup: Setup,
        *,
        options: TrainOptions,
        callbacks: Sequence[Any] = (),
        backup: Any = None,
        on_progress: Callable[[Progress], None] | None = None,
    ) -> None:
        self.setup, self.options, self.callbacks = setup, options, tuple(callbacks)
        self.backup, self.on_progress = backup, on_progress
        self.counters = Counters()
        self.checkpoints: Checkpoints | None = None
        self.resumed_from: str | None = None
        self.epochs_kept: list[KeptEpoch] = []  # each finished epoch's logs (Checkpoints.save_history)
        # the compiled functions called once (traced and instantiated): each pays that on its
        # first call, which is warm-up
        self.warmed: set[Any] = set()
        self.last: execution.Executed | None = None  # the last execution's accumulators
        # the replica proof, on the run's own first batch (set by the Trainer; ``EpochLoop``)
        self.prove_first = False
        self.proof: proof.Proof | None = None
        self._call_begun = False  # the proof stepped first, and the first call ends its group of K
        self.stop = stopping.Stop(across_workers=False, grace=0.0)  # ``fit``'s, while it watches
        self._saved_at: int | None = None  # the step of the last checkpoint written
        if options.checkpoint_dir:
            self._checkpointed()

    @property
    def model(self) -> Any:
        return self.setup.model

    def _checkpointed(self) -> None:
        """Checkpoints of model, optimizer and counters; restore the latest one there is."""
        import tensorflow as tf

        with self.setup.strategy.scope():
            self._variables = {
                name: tf.Variable(0, dtype=tf.int64, trainable=False, name=name)
                for name in asdict(Counters())
            }
        self.checkpoints = Checkpoints(
            self.options.checkpoint_dir,
            objects={
                "model": self.model,
                "optimizer": self.model.optimizer,
                **self._variables,
                **self._metrics(),
            },
            keep=self.options.keep_checkpoints,
            is_chief=self.setup.is_chief,
            worker=self.setup.worker_name,
        )
        self.resumed_from = self.checkpoints.restore_latest()
        self.counters = Counters(**{n: int(v.read_value()) for n, v in self._variables.items()})
        # the finished epochs' logs as of the checkpoint (a courtesy for a finished run started again)
        self.epochs_kept = (
            [e for e in self.checkpoints.history_kept() if e.epoch < self.counters.epoch]
            if self.resumed_from
            else []
        )
        if self.resumed_from and self.setup.is_chief:
            self._say_resumed(self.checkpoints.shape_kept())

    def _metrics(self) -> dict[str, Any]:
        """The metrics' state (the epoch's running sums so far), kept with the checkpoint: a
        run resumed inside an epoch reports that epoch's figures as the run that never
        stopped does, not the figures of its second part alone."""
        variables = list(self.model.metrics_variables)
        return {"metrics": variables} if variables else {}

    @property
    def shape(self) -> RunShape:
        """The run's shape, kept beside its checkpoints."""
        return RunShape(
            global_batch=None if self.setup.batched else self.setup.global_batch,
            replicas=self.setup.replicas,
        )

    def _say_resumed(self, saved: RunShape | None) -> None:
        moved, warning = ("", None) if saved is None else saved.resumed_as(self.shape)
        log.info("resumed from %s at step %d%s", self.resumed_from, self.counters.step, moved)
        if warning:
            log.warning("%s", warning)

    def save(self, step: int, logs: dict[str, Any] | None = None) -> str | None:
        """A checkpoint at ``step`` (every worker joins; the chief's path returned), told to a
        backup callback that asks (``callbacks``: ``saved``) with ``logs``, the figures so far,
        and the epoch (1-based) the step ends or falls in."""
        if self.checkpoints is None:
            return None
        for name, value in asdict(self.counters).items():
            self._variables[name].assign(value)
        path = self.checkpoints.save(step)
        self._saved_at = step
        self.checkpoints.save_history(self.epochs_kept, self.shape)
        saved = getattr(self.backup, "saved", None)
        if saved is not None:
            epoch = self.counters.epoch + (1 if self.counters.epoch_step else 0)
            saved(path, step=step, epoch=epoch, logs=pythonify(dict(logs or {})))
        return path

    # -- where executions end ------------------------------------------------------------------
    def to_boundary(self, steps: int | None, per_epoch: int | None) -> int:
        """Steps until the next log point or checkpoint, the epoch's end (when known) or ``steps``."""
        step = self.counters.step
        left = [every - step % every for every in self.options.boundaries()]
        if steps is not None:
            left.append(steps - step)
        if self.stop.longest_call:  # several workers: a call no longer than the stop's grace allows
            left.append(self.stop.longest_call)
        if per_epoch is not None:
            left.append(per_epoch - self.counters.epoch_step)
        if self._one_step_a_call:
            left.append(1)
        elif self._last_step_alone:  # per epoch, or a Dataset's length when tf.data knows it
            length = per_epoch or self.setup.train.known_length()
            if length is not None and length - self.counters.epoch_step > 1:
                left.append(length - 1 - self.counters.epoch_step)
        return min(left)

    @functools.cached_property
    def _last_step_alone(self) -> bool:
        """Whether an epoch's last step runs in a call of its own: on several replicas, for a
        model with sparse gradients (an ``Embedding``'s IndexedSlices), whose all-gather inside
        the in-graph loop aborted when a short last batch changed its shape mid-call ("Collective
        ops is aborted by: Shape mismatch ... expected shape [40,4] but another member ...
        [80,4]"; Keras's own fit with steps_per_execution=4 aborts alike). In a call of its own
        it trains as Keras's one step a call does; the cost is one call more an epoch."""
        from tfgpu.train.model.user_model import looked_up

        return self.setup.strategy.num_replicas_in_sync > 1 and bool(looked_up(self.model))

    @functools.cached_property
    def _one_step_a_call(self) -> bool:
        """Whether every step runs in a call of its own: where the last step cannot be run alone
        (``_last_step_alone``) because a step's shape may change at any step (a padded batch's
        length, keras-io's NER example: "expected shape [544,8] but another member in the group
        expected shape [576,8]" under tfgpu launch --nproc 2), or the epoch's end is not known
        before the data runs out (a file's lines). One step a call is Keras's own default; the
        choice is said (``steps_per_execution``)."""
        if not self._last_step_alone or self.setup.train.exact:
            return False
        why = None
        if _shape_may_change(self.setup.train.spec()):
            why = "a batch's shape may change from step to step"
        elif self.setup.train.steps_per_epoch is None and self.setup.train.known_length() is None:
            why = "the data's length is unknown, so its short last batch cannot be run alone"
        if why is None:
            return False
        choices.record(
            "steps_per_execution",
            1,
            f"sparse gradients (an Embedding) on {self.setup.strategy.num_replicas_in_sync} replicas "
            f"and {why}: their all-gather aborts when a shape changes inside a call",
        )
        return True

    def at_boundary(self) -> bool:
        return any(self.counters.step % every == 0 for every in self.options.boundaries())

    # -- a run ---------------------------------------------------------------------------------
    def callback_list(self, *, verbose: Any, epochs: int | None) -> Any:
        return callback_setup.callback_list(
            self.callbacks,
            model=self.model,
            is_chief=self.setup.is_chief,
            verbose=verbose,
            epochs=epochs if epochs is not None else 1,
            steps=self.setup.train.steps_per_epoch,
        )

    def run_log(self, steps: int | None, callbacks: Any) -> RunLog:
        import keras

        run = RunLog(
            options=self.options,
            global_batch=None if self.setup.batched else self.setup.global_batch,
            is_chief=self.setup.is_chief,
            total_steps=steps,
            on_progress=self.on_progress,
            save=self.save,
            workers=self.setup.pipelines,
            monitor=self.setup.on_gpus,
        )
        # with TerminateOnNaN the user asked for Keras's way: stop, do not raise
        run.nan_raises = not any(isinstance(c, keras.callbacks.TerminateOnNaN) for c in callbacks.callbacks)
        return run

    def finish(self, run: RunLog) -> TrainResult:
        final = None if self.backup is not None else self.save(self.counters.step)
        self._drop_backup()
        return run.result(
            steps=self.counters.step,
            epochs=self.counters.epoch,
            replicas=self.setup.replicas,
            final=final,
            resumed=self.resumed_from,
        )

    @contextlib.contextmanager
    def stoppable(self) -> Iterator[None]:
        """While the loop trains: the stop signals ask it to stop (``train.pieces.stopping``); at the
        call where it stops (``stopping.Asked``) it saves and raises ``StoppedOnRequest``."""
        across = distribute.collective_workers(self.setup.strategy)  # agreed in the calls' graphs
        with stopping.watching(across_workers=across, is_chief=self.setup.is_chief) as self.stop:
            try:
                yield
            except stopping.Asked:
                raise self._stopped() from None

    def _stopped(self) -> StoppedOnRequest:
        """The run stopped on request at the counters' step: one checkpoint there (every worker
        joins the save), one line from the chief, and the exception that exits resumable."""
        step, counters = self.counters.step, self.counters
        saved = self._saved_at == step and self.checkpoints is not None
        path = self.checkpoints.latest() if saved else self.save(step)  # type: ignore[union-attr]
        where = f"step {step} (epoch {counters.epoch + 1}, {counters.epoch_step} steps into it)"
        if self.checkpoints is None:
            message = (
                f"{self.stop.signal_name}: stopped at {where}; nothing was kept: pass "
                "checkpoint_dir= to save at the signal and resume there"
            )
        else:
            message = (
                f"{self.stop.signal_name}: stopped at {where}, saved {path}; run the same "
                f"command again to resume there (exit status {RESUMABLE})"
            )
        if self.setup.is_chief:
            log.warning("%s", message)
        return StoppedOnRequest(message, checkpoint=path, step=step)

    def _drop_backup(self) -> None:
        """Training ended: a BackupAndRestore's backup goes, as Keras's ``on_train_end`` does
        (unless ``delete_checkpoint=False``), so the next run starts afresh."""
        import shutil

        if self.backup is None or not self.backup.delete_checkpoint:
            return
        distribute.barrier(self.setup.strategy)  # every worker has written (and removed) its scratch copy
        if self.setup.is_chief or getattr(self.backup, "per_worker", False):
            shutil.rmtree(self.backup.backup_dir, ignore_errors=True)

    def begin_epoch(self, callbacks: Any) -> None:
        """At an epoch's first step (not when resuming inside it): fresh metrics, the callbacks told."""
        if self.counters.epoch_step == 0:
            self.model.reset_metrics()
            callbacks.on_epoch_begin(self.counters.epoch)

    def end_epoch(self, run: RunLog, callbacks: Any, *, validation: Validation | None) -> None:
        """The epoch's logs (and validation, when ``validation`` names this epoch) into the
        history and the callbacks; the counters move to the next epoch."""
        epoch = self.counters.epoch
        logs = pythonify(
            self.last.logs
            if self.last is not None
            else execution.compiled(self.model, self.setup.strategy, "metrics")()
        )
        if validation is not None and self.setup.eval_source is not None and validation.names(epoch):
            val = self.evaluate(limit=validation.steps, callbacks=callbacks).logs
            logs.update({f"val_{k}": v for k, v in val.items()})
        run.end_epoch(epoch, logs)
        if self.checkpoints is not None:  # kept beside them (``save``)
            self.epochs_kept.append(KeptEpoch(epoch, dict(logs)))
        callbacks.on_epoch_end(epoch, logs)
        self.last = None
        self.counters.next_epoch()
        if self.options.checkpoint_epochs:
            self.save(self.counters.step, logs)

    def evaluate(self, data: Any = None, *, limit: int | None = None, callbacks: Any = None) -> Evaluation:
        """The model's loss and metrics over every example of ``data`` (default: the eval data)."""
        if data is None:  # the eval data's input, kept for each epoch's validation
            return self._evaluator()(self.setup.eval_input(), limit=limit, callbacks=callbacks)
        source = self.setup.input(data, training=False)
        try:
            return self._evaluator()(source, limit=limit, callbacks=callbacks)
        finally:
            source.release()  # ``Input.release``

    def _evaluator(self) -> Any:
        return evaluator_for(self.setup.strategy, self.model)

    def finished_before(self, callbacks: Any, *, epochs: int | None) -> None:
        """The checkpoint holds a run that had already finished: nothing is trained. Said, and the
        History is that run's epochs (kept beside the checkpoints), not an empty one that a
        script reading ``history.history["val_auc"]`` fails on. Keras's BackupAndRestore deletes
        its backup at the end, so Keras trains afresh; a tfgpu checkpoint_dir is the run's
        record and stays (docs/from-model-fit.md)."""
        log.warning(
            "%s holds a finished run (epoch %d of %s): nothing trained; the History is that run's. "
            "Pass a new checkpoint_dir (or remove this one) to train again.",
            self.options.checkpoint_dir,
            self.counters.epoch,
            epochs if epochs is not None else "its steps",
        )
        if self.backup is not None:  # a checkpoint_dir's run gave them at its start (``resumed``)
            self.replay_kept(callbacks)

    def resumed(self, callbacks: Any) -> None:
        """At ``on_train_begin``: a run resumed from its checkpoint_dir gives its History the
        epochs it had finished (kept beside the checkpoints) before the ones it trains now, so a
        run stopped on request and run again ends with the History of the run that never
        stopped. Under a Keras ``BackupAndRestore`` the History holds only the epochs this
        call trains, as in Keras."""
        if self.resumed_from and self.backup is None:
            self.replay_kept(callbacks)

    def replay_kept(self, callbacks: Any) -> None:
        import keras

        histories = [c for c in callbacks.callbacks if isinstance(c, keras.callbacks.History)]
        for history in histories:
            for entry in self.epochs_kept:
                history.on_epoch_end(entry.epoch, dict(entry.logs))


class EpochLoop(Loop):
    """Epochs in this process: one device, MirroredStrategy, MultiWorkerMirroredStrategy."""

    def fit(
        self, *, epochs: int | None, steps: int | None, callbacks: Any, validation: Validation
    ) -> TrainResult:
        if self.setup.is_chief:  # one summary for the run, not one per worker
            choices.announce()
        self.model.stop_training = False
        callbacks.on_train_begin()
        self.resumed(callbacks)
        with self.stoppable(), self.run_log(steps, callbacks) as run:
            while self.counters.epoch < (epochs if epochs is not None else float("inf")):
                if steps is not None and self.counters.step >= steps:
                    break
                self.begin_epoch(callbacks)
                if not self._train_epoch(run, steps, callbacks):
                    break
                self.end_epoch(run, callbacks, validation=validation)
                if self.model.stop_training:
                    break
        if not run.history and self.resumed_from:
            self.finished_before(callbacks, epochs=epochs)
        callbacks.on_train_end(run.last_logs)
        return self.finish(run)

    def _train_epoch(self, run: RunLog, steps: int | None, callbacks: Any) -> bool:
        """Train until the epoch's end (True) or ``steps`` is reached (False)."""
        epoch = self.counters.epoch
        source = self.setup.train
        iterator, skip = source.iterator(epoch, self.counters.epoch_step)
        if source.caches and not run.trained_any:  # this pass reads the source and fills the cache
            run.warm_epoch(epoch, "filled the cache")
        if skip:  # resuming mid-epoch: the batches already trained on, taken in the graph
            execution.compiled(self.model, self.setup.strategy, "skip")(iterator, execution.limit(skip))
        ended = False
        per_epoch = source.epoch_length(epoch)
        counted = self._counted(per_epoch)  # every call takes its limit: the bare loop's shape
        # looked up once an epoch, not each call (the lookup checks the model's compiled state:
        # its layers and variables); before the proof, which steps as the execution's step does
        execute = self._execution(known=counted is not None and source.counted)
        try:
            if self.prove_first and not skip and self.counters.epoch_step == 0:
                self._prove(iterator, callbacks, run)
            ended = self._train_steps(
                run,
                iterator,
                steps,
                per_epoch=per_epoch,
                counted=counted,
                execute=execute,
                callbacks=callbacks,
            )
            return ended
        finally:
            exhausted = ended and (per_epoch is None or self.counters.epoch_step < per_epoch)
            source.stopped_at(iterator, epoch, self.counters.epoch_step, exhausted=exhausted)
            held = [iterator]  # the epoch's iterator is dropped off this thread (tfgpu.letting_go)
            del iterator
            letting_go.let_go(held)

    def _prove(self, iterator: Any, callbacks: Any, run: RunLog) -> None:
        """``train.model.proof`` on the run's own first batch, taken from the epoch's iterator and
        trained on there as the loop's first step: the data is read once, as the run reads it
        (a dataset's shuffle, a generator), whatever its kind. Once a run. The step counts in
        the epoch's steps and the run's warm-up; with K steps a call, the first call then takes
        K - 1, so batch callbacks see the batches Keras's ``fit`` shows them (3, 7, ... at K=4)."""
        self.prove_first = False
        strategy = self.setup.strategy
        found = proof.unchecked(self.model, strategy)
        if found is None:
            try:
                batch = next(iterator)
            except StopIteration:  # no batch: the loop says so
                return
            hooks = callback_setup.has_batch_hooks(callbacks)
            if hooks:
                callbacks.on_train_batch_begin(0)
            started = time.perf_counter()
            found = proof.prove(self.model, strategy, batch, then_train=True)
            run.stepped_alone(
                examples=execution.rows_of(strategy, batch), seconds=time.perf_counter() - started
            )
            self.counters.advance(1)
            self._call_begun = self.options.execution_steps > 1
            if hooks and not self._call_begun:  # one step a call: this one's call is over
                logs = execution.compiled(self.model, strategy, "metrics")()
                callbacks.on_train_batch_end(0, pythonify(logs))
        self.proof = found
        if self.setup.is_chief:  # the same sentence on every worker (Ray prints each worker's lines)
            (log.warning if found.status == "differ" else log.info)("%s", found.sentence)

    def _train_steps(
        self,
        run: RunLog,
        iterator: Any,
        steps: int | None,
        *,
        per_epoch: int | None,
        counted: int | None,
        execute: Any,
        callbacks: Any,
    ) -> bool:
        counters, epoch = self.counters, self.counters.epoch
        length = counted if counted is not None else per_epoch
        window = Window(epoch, counters.step)
        epoch_start = True
        batch_hooks = callback_setup.has_batch_hooks(callbacks)
        while True:
            limit = min(self.options.execution_steps, self.to_boundary(steps, per_epoch))
            if length is not None:
                limit = min(limit, length - counters.epoch_step)
            if limit <= 0:  # ``steps`` reached, or resumed at the very end of an epoch
                run.close(window)
                return length is not None and counters.epoch_step >= length
            begin = counters.epoch_step
            if self._call_begun:  # the proof took this call's first step (``_prove``)
                limit = max(1, min(limit, self.options.execution_steps - begin))
            elif batch_hooks:
                callbacks.on_train_batch_begin(begin)
            self._call_begun = False
            called = time.perf_counter()
            stats = self._dispatch(execute, iterator, limit, last=length == begin + limit)
            taken, cut = self._taken(stats, limit, counted=counted)
            warm_up = None
            if execute not in self.warmed:  # its steps too, not only its tracing: left out whole
                execution.finished(stats)
                warm_up = time.perf_counter() - called
            if taken:
                window.add(stats, taken=taken, epoch_start=epoch_start, warm_up=warm_up)
                self.last = stats
                if batch_hooks:
                    callbacks.on_train_batch_end(begin + taken - 1, stats.logs)
            epoch_start = False
            self.warmed.add(execute)
            counters.advance(taken)
            if cut or self.stop.now(stats):  # asked during the call or its callbacks
                run.close(window)
                raise stopping.Asked
            ended = taken < limit or counters.epoch_step == length
            if ended or self.at_boundary() or counters.step == steps or self.model.stop_training:
                run.close(window)
                window = Window(epoch, counters.step)
            if ended:
                if counters.epoch_step == 0:
                    raise ConfigError(
                        f"train_data gave no batch in epoch {epoch + 1}",
                        value=self.setup.source.describe(),
                        fix="check that the data is not empty (a data function must return a dataset batched by the per-replica batch)",
                    )
                return True
            if self.model.stop_training:  # a batch callback asked: the epoch ends here, as in fit
                return True

    def _taken(self, stats: execution.Executed, limit: int, *, counted: int | None) -> tuple[int, bool]:
        """The steps a call took, and whether the run was asked to stop in it (the call may then
        have ended early: ``stopping``). With the batches counted every execution takes its
        limit; otherwise the count is read, a host-side int32 that does not wait for the device."""
        cut = self.stop.now(stats)
        return (limit if counted is not None and not cut else int(stats.steps)), cut

    def _counted(self, per_epoch: int | None) -> int | None:
        """The epoch's batches when every call can take its whole limit: arrays (tfgpu batches
        them itself, on any strategy), and a dataset whose length tf.data knows where the loop
        runs without an end-of-data path (``Input.counted``). A ``steps_per_epoch`` given with a
        dataset ends its epochs, but the data may run out first: not counted."""
        source = self.setup.train
        if source.exact:
            return per_epoch
        if per_epoch is None and source.counted:
            return source.known_length()
        return None

    def _execution(self, *, known: bool) -> Any:
        """The compiled training execution: one per model, strategy, XLA setting and loop shape
        (``known``: ``_counted``), traced once."""
        return execution.compiled(
            self.model, self.setup.strategy, jit_compile=self.options.jit_compile, known=known
        )

    def _dispatch(self, execute: Any, iterator: Any, limit: int, *, last: bool = False) -> execution.Executed:
        """One call of up to ``limit`` steps (``last``: it ends the epoch, where several workers
        agree on a stop: ``stopping.Stop.before``)."""
        import tensorflow as tf

        self.stop.before(limit, ends_epoch=last)
        try:
            return execute(iterator, execution.limit(limit))
        except tf.errors.ResourceExhaustedError:
            raise out_of_memory(
                self.model,
                self.setup.strategy,
                batch=self.setup.task.batch_size,
                global_batch=self.setup.global_batch,
            ) from None


def _shape_may_change(spec: Any) -> bool:
    """Whether a batch of ``spec`` may take another shape than the last beyond its rows (a
    dimension past the first unknown, or a ragged or sparse part)."""
    import tensorflow as tf

    for part in tf.nest.flatten(spec):
        if not isinstance(part, tf.TensorSpec):
            return True
        if part.shape.rank is None or None in part.shape.as_list()[1:]:
            return True
    return False


def check_length(*, epochs: int | None, steps: int | None, initial_epoch: int) -> None:
    if (epochs is None) == (steps is None):
        raise ConfigError(
            "Pass exactly one of epochs or steps",
            value={"epochs": epochs, "steps": steps},
            fix="e.g. fit(epochs=3)",
        )
    for name, value in (("epochs", epochs), ("steps", steps)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ConfigError(
                f"{name} must be a whole number of at least 1", value=value, fix=f"pass {name}=1 or more"
            )
    if (
        not isinstance(initial_epoch, int)
        or initial_epoch < 0
        or (epochs is not None and initial_epoch >= epochs)
    ):
        raise ConfigError(
            "initial_epoch must be a whole number from 0 up to (not including) epochs",
            value=initial_epoch,
            fix="pass initial_epoch=0, or more epochs",
        )

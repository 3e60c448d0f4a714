"""The parameter-server loop: the coordinator schedules the same execution as ``EpochLoop``'s on
the workers, a log window at a time, and shares the epoch ends, validation and checkpoints of
``Loop``."""

from __future__ import annotations

from typing import Any

from tfgpu import choices
from tfgpu.errors import ConfigError
from tfgpu.train.loop.result import TrainResult
from tfgpu.train.loop.training import Loop, Validation
from tfgpu.train.loop.windows import Window
from tfgpu.train.pieces import stopping
from tfgpu.train.step import execution


class ParameterServerLoop(Loop):
    """Under ParameterServerStrategy: the run is counted in steps (each worker's iterator repeats
    its data), in executions of K steps scheduled on whichever worker is free."""

    def fit(
        self, *, epochs: int | None, steps: int | None, callbacks: Any, validation: Validation
    ) -> TrainResult:
        import tensorflow as tf

        setup = self.setup
        per_epoch = setup.task.steps_per_epoch or setup.source.steps_per_epoch(
            setup.global_batch, setup.strategy.num_replicas_in_sync
        )
        steps = self._steps(epochs=epochs, steps=steps, per_epoch=per_epoch)
        coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(setup.strategy)
        make = setup.train.per_worker_factory()
        strategy = setup.strategy

        def per_worker() -> Any:  # the pattern of TensorFlow's parameter-server tutorial
            return strategy.distribute_datasets_from_function(lambda ctx: make(ctx).repeat())

        iterators = iter(coordinator.create_per_worker_dataset(per_worker))
        _atomic_counters(self.model)  # executions run side by side on the workers
        execute = execution.compiled(setup.model, setup.strategy, jit_compile=self.options.jit_compile)
        workers = len(setup.cluster.cluster.get("worker", ())) if setup.cluster else 1
        choices.announce()
        self.model.stop_training = False
        callbacks.on_train_begin()
        self.resumed(callbacks)
        k = self.options.execution_steps
        with self.stoppable(), self.run_log(steps, callbacks) as run:
            while self.counters.step < steps and not self.model.stop_training:
                self.begin_epoch(callbacks)
                window = Window(self.counters.epoch, self.counters.step, workers=workers)
                todo = self.to_boundary(steps, per_epoch or None)  # one window, in executions of K
                chunks = [min(k, todo - i) for i in range(0, todo, k)]
                remotes = [(n, coordinator.schedule(execute, args=(iterators, n))) for n in chunks]
                coordinator.join()
                for n, remote in remotes:
                    window.add(remote.fetch(), taken=n)
                self.last = window.executions[-1][1]
                self.counters.advance(todo)
                run.close(window)
                if self.stop.now():  # the coordinator decides, between its windows
                    raise stopping.Asked
                if per_epoch and self.counters.epoch_step >= per_epoch:
                    self.end_epoch(run, callbacks, validation=validation)
        callbacks.on_train_end(run.last_logs)
        return self.finish(run)

    @staticmethod
    def _steps(*, epochs: int | None, steps: int | None, per_epoch: int | None) -> int:
        if steps is not None:
            return steps
        if not per_epoch:
            raise ConfigError(
                "ParameterServerStrategy needs the number of steps",
                value=None,
                fix="pass steps=N, or set Task.steps_per_epoch",
            )
        return per_epoch * int(epochs or 1)


def _atomic_counters(model: Any) -> int:
    """Make the model's metric variables and the optimizer's step counter add atomically.

    Keras adds with a read then an assign (``KerasVariable.assign_add``); under
    ParameterServerStrategy, steps scheduled side by side on several workers then lose updates
    (measured: 50 ``optimizer.iterations`` for 60 steps on 2 workers, and metric counts short the
    same way). TensorFlow's own ``assign_add`` is one op on the parameter server, so these
    variables get it instead. Returns how many were changed.
    """
    import tensorflow as tf

    variables = [*model.metrics_variables]
    if model.optimizer is not None:
        variables.append(model.optimizer.iterations)
    for variable in variables:
        inner = getattr(variable, "_value", None)
        if inner is None:  # not a Keras TF-backend variable: leave it
            continue

        def add(value: Any, inner: Any = inner) -> Any:
            return inner.assign_add(tf.cast(value, inner.dtype))

        def sub(value: Any, inner: Any = inner) -> Any:
            return inner.assign_sub(tf.cast(value, inner.dtype))

        object.__setattr__(variable, "assign_add", add)
        object.__setattr__(variable, "assign_sub", sub)
    return len(variables)

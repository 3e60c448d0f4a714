"""``tfgpu.Trainer``: a training loop correct under every tf.distribute strategy, and fast on a GPU.

Keras 3's ``model.fit`` fails under MultiWorkerMirroredStrategy (keras-team/keras#20585) and has
shipped NaN-loss regressions under MirroredStrategy, so tfgpu owns the loop and tests it against a
single device. Its shape is orbit's: one compiled function runs an execution (up to K steps, each
taking its batch from the iterator inside the graph, see ``execution``) and returns device-side
accumulators; the host dispatches executions without reading them and, once per log window,
reads them and runs the hooks (``windows``). The parameter-server loop schedules the same
execution on its workers and shares the hooks. What each step does:

- per-example losses scaled by the global batch (``compute_average_loss``), regularization scaled
  by the replicas, gradients all-reduced by the optimizer; fp16 uses loss scaling;
- XLA on request;
- the wait for each batch is timed in the graph, so input-boundness is measured as it runs;
- evaluation sums per-example values across replicas and workers: exact for any dataset size.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from tfgpu import choices, cluster, distribute
from tfgpu.errors import ConfigError, TfgpuError
from tfgpu.train import execution, inputs
from tfgpu.train.checkpoints import Checkpoints
from tfgpu.train.options import Progress, TrainOptions, TrainResult
from tfgpu.train.task import Task, make_optimizer, metric_functions, per_example_loss
from tfgpu.train.windows import RunLog, Window

log = logging.getLogger(__name__)

__all__ = ["OutOfMemoryError", "Progress", "TrainOptions", "TrainResult", "Trainer"]


class OutOfMemoryError(TfgpuError):
    """A training step ran out of device memory."""


def _is_ps(strategy: Any) -> bool:
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.ParameterServerStrategy)


class Trainer:
    """Train ``task`` under ``strategy`` (default: ``tfgpu.strategy()``).

    ``options`` (a ``TrainOptions``) says how; any of its fields can also be given as a keyword
    (``Trainer(task, steps_per_execution=8, checkpoint_dir="ck")``). ``on_progress`` is called
    with a ``Progress`` once per log window, on the chief only.
    """

    def __init__(
        self,
        task: Task,
        *,
        strategy: Any = None,
        options: TrainOptions | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        **overrides: Any,
    ) -> None:
        unknown = sorted(set(overrides) - TrainOptions.names())
        if unknown:
            raise ConfigError(
                "Unknown Trainer option",
                value=unknown,
                fix=f"use one of {', '.join(sorted(TrainOptions.names()))}",
            )
        self.options = dataclasses.replace(options or TrainOptions(), **overrides)
        self.task = task
        self.on_progress = on_progress
        import tfgpu

        self.strategy = strategy if strategy is not None else tfgpu.strategy()
        self.replicas = int(self.strategy.num_replicas_in_sync)
        devices, _ = distribute.replica_devices(self.strategy)
        on_cpu = distribute.on_host_cpu(devices)
        if self.options.jit_compile and len(devices) > 1 and on_cpu:
            raise ConfigError(
                "XLA cannot compile a step replicated over logical CPU devices (they share one XLA CPU device)",
                value=list(devices),
                fix="use jit_compile with GPUs or a single device, or leave it off on the CPU",
            )
        self.global_batch = task.batch_size * self.replicas
        spec = cluster.from_environ()
        feed = distribute.input_strategy(self.strategy, in_cluster=spec is not None)
        self._direct = feed is None
        self._input_strategy = feed or self.strategy
        self.is_chief = spec is None or spec.is_chief
        self.worker_name = f"{spec.task_type}-{spec.task_index}" if spec else "local"
        choices.record(
            "global_batch",
            f"{self.global_batch}",
            f"{task.batch_size} per replica x {self.replicas} replicas",
        )
        k = self.options.execution_steps
        choices.record(
            "steps_per_execution",
            k,
            "asked for"
            if self.options.steps_per_execution
            else f"one compiled call per log window of {k} steps",
        )
        self._build()

    # -- state ---------------------------------------------------------------------------------
    def _build(self) -> None:
        import keras
        import tensorflow as tf

        with self.strategy.scope():
            self.model = self.task.model()
            optimizer = make_optimizer(self.task)
            if keras.mixed_precision.dtype_policy().name == "mixed_float16" and not isinstance(
                optimizer, keras.optimizers.LossScaleOptimizer
            ):
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
                choices.record("loss_scaling", "dynamic", "fp16 needs it")
            self.optimizer = optimizer
            self.optimizer.build(self.model.trainable_variables)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
            self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
            self.epoch_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch_step")
        self.loss_fn = per_example_loss(self.task)
        self.metric_fns = metric_functions(self.task)
        self.checkpoints = Checkpoints(
            self.options.checkpoint_dir,
            objects={
                "model": self.model,
                "optimizer": self.optimizer,
                "step": self.step,
                "epoch": self.epoch,
                "epoch_step": self.epoch_step,
            },
            keep=self.options.keep_checkpoints,
            is_chief=self.is_chief,
            worker=self.worker_name,
        )
        self.resumed_from = self.checkpoints.restore_latest()
        # Python counters: reading or assigning mirrored variables every step costs device ops
        self._counters = {
            n: int(v.read_value())
            for n, v in (("step", self.step), ("epoch", self.epoch), ("epoch_step", self.epoch_step))
        }
        self._functions: dict[str, Any] = {}
        self._inputs: dict[str, inputs.Input] = {}
        self._limits: dict[int, Any] = {}
        self._warm = False  # the training function has run once (traced and instantiated)
        if self.resumed_from:
            log.info("resumed from %s at step %d", self.resumed_from, self._counters["step"])

    def _input(self, source: Any, *, training: bool) -> inputs.Input:
        return inputs.Input(
            source,
            task=self.task,
            training=training,
            global_batch=self.global_batch,
            strategy=self._input_strategy,
            direct=self._direct,
        )

    def _function(self, name: str) -> Any:
        """The compiled functions, built once per Trainer (a new tf.function would retrace)."""
        if name not in self._functions:
            self._functions[name] = self._make_function(name)
        return self._functions[name]

    def _make_function(self, name: str) -> Any:
        if name == "eval":
            return execution.eval_execution(
                self.strategy, model=self.model, loss_fn=self.loss_fn, metric_fns=self.metric_fns
            )
        if name == "skip":
            return execution.skip_batches()
        return self._execution()

    def _execution(self) -> Callable[[Any, Any], dict[str, Any]]:
        step = execution.replica_train_step(
            model=self.model,
            optimizer=self.optimizer,
            loss_fn=self.loss_fn,
            global_batch=self.global_batch,
            replicas=self.replicas,
            jit_compile=self.options.jit_compile,
        )
        return execution.train_execution(self.strategy, step)

    def _save(self, step: int) -> str | None:
        for name, variable in (("step", self.step), ("epoch", self.epoch), ("epoch_step", self.epoch_step)):
            variable.assign(self._counters[name])
        return self.checkpoints.save(step)

    def reset_epochs(self) -> None:
        """Start counting epochs and steps from zero again (the weights stay)."""
        self._counters = {"step": 0, "epoch": 0, "epoch_step": 0}

    def _to_boundary(self, steps: int | None, per_epoch: int | None) -> int:
        """Steps until the next log point or checkpoint, the epoch's end (when known) or ``steps``."""
        step = self._counters["step"]
        left = [every - step % every for every in self.options.boundaries()]
        if steps is not None:
            left.append(steps - step)
        if per_epoch is not None:
            left.append(per_epoch - self._counters["epoch_step"])
        return min(left)

    def _constant(self, value: int) -> Any:
        import tensorflow as tf

        if value not in self._limits:  # a Python int argument would retrace per value
            self._limits[value] = tf.constant(value, tf.int32)
        return self._limits[value]

    def _at_boundary(self) -> bool:
        step = self._counters["step"]
        return any(step % every == 0 for every in self.options.boundaries())

    def _advance(self, taken: int) -> None:
        self._counters["step"] += taken
        self._counters["epoch_step"] += taken

    def _run_log(self, steps: int | None) -> RunLog:
        return RunLog(
            options=self.options,
            global_batch=self.global_batch,
            is_chief=self.is_chief,
            total_steps=steps,
            on_progress=self.on_progress,
            save=self._save,
        )

    def _finish(self, run: RunLog) -> TrainResult:
        final = self._save(self._counters["step"]) if self.checkpoints.enabled else None
        return run.result(
            steps=self._counters["step"],
            epochs=self._counters["epoch"],
            replicas=self.replicas,
            final=final,
            resumed=self.resumed_from,
        )

    # -- fit -----------------------------------------------------------------------------------
    def fit(self, *, epochs: int | None = None, steps: int | None = None) -> TrainResult:
        """Train for ``epochs`` passes over the data, or ``steps`` steps in all (resuming counts)."""
        if (epochs is None) == (steps is None):
            raise ConfigError(
                "Pass exactly one of epochs or steps",
                value={"epochs": epochs, "steps": steps},
                fix="e.g. fit(epochs=3)",
            )
        if _is_ps(self.strategy):
            return self._fit_parameter_server(epochs=epochs, steps=steps)
        choices.announce()
        with self._run_log(steps) as run:
            while self._counters["epoch"] < (epochs if epochs is not None else float("inf")):
                if steps is not None and self._counters["step"] >= steps:
                    break
                if not self._train_epoch(run, steps):
                    break
                self._end_epoch(run)
        return self._finish(run)

    def _train_epoch(self, run: RunLog, steps: int | None) -> bool:
        """Train until the epoch's data runs out (True) or ``steps`` is reached (False)."""
        epoch = self._counters["epoch"]
        if "train" not in self._inputs:
            self._inputs["train"] = self._input(self.task.train_data, training=True)
        source = self._inputs["train"]
        iterator, skip = source.iterator(epoch, self._counters["epoch_step"])
        if skip:  # resuming mid-epoch: the batches already trained on, taken in the graph
            self._function("skip")(iterator, self._constant(skip))
        try:
            return self._train_steps(run, iterator, steps, per_epoch=source.steps_per_epoch)
        finally:
            source.stopped_at(iterator, epoch, self._counters["epoch_step"])

    def _train_steps(self, run: RunLog, iterator: Any, steps: int | None, *, per_epoch: int | None) -> bool:
        epoch = self._counters["epoch"]
        execute = self._function("train")
        window = Window(epoch, self._counters["step"])
        epoch_start = True
        while True:
            limit = min(self.options.execution_steps, self._to_boundary(steps, per_epoch))
            if limit <= 0:  # ``steps`` reached, or resumed at the very end of an epoch
                run.close(window)
                return per_epoch is not None and self._counters["epoch_step"] >= per_epoch
            called = time.perf_counter()
            stats = self._dispatch(execute, iterator, limit)
            # with the epoch's length known (arrays) every execution takes its limit; otherwise
            # read the count, a host-side int32 that does not wait for the device
            taken = limit if per_epoch is not None else int(stats["steps"])
            warm_up = None if self._warm else time.perf_counter() - called
            window.add(stats, taken=taken, epoch_start=epoch_start, warm_up=warm_up)
            epoch_start, self._warm = False, True
            self._advance(taken)
            ended = taken < limit or self._counters["epoch_step"] == per_epoch
            if ended or self._at_boundary() or self._counters["step"] == steps:
                run.close(window)
                window = Window(epoch, self._counters["step"])
            if ended:
                if self._counters["epoch_step"] == 0:
                    raise ConfigError(
                        f"train_data gave no batch in epoch {epoch + 1}",
                        value=self.task.train_data,
                        fix="check that the data function returns a non-empty dataset batched by the per-replica batch",
                    )
                return True

    def _dispatch(self, execute: Any, iterator: Any, limit: int) -> dict[str, Any]:
        import tensorflow as tf

        try:
            return execute(iterator, self._constant(limit))
        except tf.errors.ResourceExhaustedError:
            raise OutOfMemoryError(
                f"Out of device memory in a training step at {self.task.batch_size} examples per replica "
                f"(global batch {self.global_batch})",
                value=self.task.batch_size,
                fix="lower the batch size (tfgpu.find_batch_size(task) finds the largest that fits), or use precision='auto'",
            ) from None

    def _end_epoch(self, run: RunLog) -> None:
        extra = {}
        if self.task.eval_data is not None:
            extra = {f"eval_{k}": v for k, v in self.evaluate().items()}
        run.end_epoch(self._counters["epoch"], extra)
        self._counters["epoch"] += 1
        self._counters["epoch_step"] = 0

    # -- evaluate ------------------------------------------------------------------------------
    def evaluate(self, data: Any = None) -> dict[str, float]:
        """Loss and metrics over every example of ``data`` (default: the task's eval data), exactly."""
        if data is None and self.task.eval_data is None:
            raise ConfigError("No evaluation data", fix="set Task.eval_data or pass data=")
        if data is None:
            if "eval" not in self._inputs:
                self._inputs["eval"] = self._input(self.task.eval_data, training=False)
            source = self._inputs["eval"]
        else:
            source = self._input(data, training=False)
        iterator, _ = source.iterator(0)
        sums = {k: float(v) for k, v in self._function("eval")(iterator).items()}
        count = sums.pop("count", 0.0)
        return {"examples": count, **{k: v / count for k, v in sums.items()}} if count else {"examples": 0.0}

    # -- parameter server ------------------------------------------------------------------------
    def _fit_parameter_server(self, *, epochs: int | None, steps: int | None) -> TrainResult:
        """The coordinator schedules the same execution on the workers; the hooks are shared."""
        import tensorflow as tf

        per_epoch = self.task.steps_per_epoch or inputs.steps_per_epoch(
            self.task.train_data, self.global_batch
        )
        if steps is None:
            if not per_epoch:
                raise ConfigError(
                    "ParameterServerStrategy needs the number of steps",
                    value=None,
                    fix="pass steps=N, or set Task.steps_per_epoch",
                )
            steps = per_epoch * int(epochs or 1)
        coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(self.strategy)
        make = self._input(self.task.train_data, training=True)._per_worker(0)
        strategy = self.strategy

        def per_worker() -> Any:  # the pattern of TensorFlow's parameter-server tutorial
            return strategy.distribute_datasets_from_function(lambda ctx: make(ctx).repeat())

        iterators = iter(coordinator.create_per_worker_dataset(per_worker))
        execute = self._function("train")
        workers = len(cluster.from_environ().cluster.get("worker", ())) or 1
        choices.announce()
        with self._run_log(steps) as run:
            while self._counters["step"] < steps:
                window = Window(self._counters["epoch"], self._counters["step"], workers=workers)
                todo = self._to_boundary(steps, per_epoch or None)  # one window, in executions of K
                chunks = [
                    min(self.options.execution_steps, todo - i)
                    for i in range(0, todo, self.options.execution_steps)
                ]
                remotes = [(n, coordinator.schedule(execute, args=(iterators, n))) for n in chunks]
                coordinator.join()
                for n, remote in remotes:
                    window.add(remote.fetch(), taken=n)
                self._advance(todo)
                run.close(window)
                if per_epoch and self._counters["epoch_step"] >= per_epoch:
                    run.end_epoch(self._counters["epoch"], {})
                    self._counters["epoch"] += 1
                    self._counters["epoch_step"] = 0
        return self._finish(run)

"""``tfgpu.Trainer``: a training loop correct under every tf.distribute strategy, and fast on a GPU.

Keras 3's ``model.fit`` fails under MultiWorkerMirroredStrategy (keras-team/keras#20585) and under
ParameterServerStrategy, so tfgpu owns the loop and tests it against Keras on a single device. What
runs each step is Keras's: the model's own ``train_step`` (its compiled loss, metrics, optimizer,
regularization, loss scaling, or the user's override; see ``tfgpu.train.model``). The loop's shape
is orbit's: one compiled function runs an execution (up to K steps, each taking its batch from the
iterator inside the graph, see ``execution``) and returns device-side accumulators; the host
dispatches executions without reading them and, once per log window, reads them and runs the hooks
(``windows``). Keras callbacks are called as ``Model.fit`` calls them at the same
``steps_per_execution``: batch hooks once per execution (with the logs as device tensors, turned
into numbers off the main thread by Keras's ``CallbackList`` when no callback needs them at once),
epoch hooks with the epoch's logs and validation. The parameter-server loop schedules the same
execution on its workers and shares the hooks.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from tfgpu import choices, distribute
from tfgpu.errors import ConfigError, TfgpuError, refuse_unknown
from tfgpu.train import callbacks as callback_setup
from tfgpu.train import execution, inputs, proof, timing, tuning
from tfgpu.train import model as model_setup
from tfgpu.train.checkpoints import Checkpoints
from tfgpu.train.evaluation import evaluation_strategy, evaluator_for
from tfgpu.train.options import Progress, TrainOptions, TrainResult
from tfgpu.train.task import Task
from tfgpu.train.windows import RunLog, Window, pythonify

log = logging.getLogger(__name__)

__all__ = ["OutOfMemoryError", "Progress", "TrainOptions", "TrainResult", "Trainer"]


class OutOfMemoryError(TfgpuError):
    """A training step ran out of device memory."""


def out_of_memory(model: Any, strategy: Any, *, batch: int, global_batch: int) -> OutOfMemoryError:
    """The error for a step of ``batch`` per replica that ran out of device memory: the step's
    fixed and per-example bytes (``tfgpu.memory``) and the fixes with their numbers."""
    from tfgpu import distribute
    from tfgpu.train import footprint

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
        refuse_unknown(overrides, TrainOptions.names(), what="Trainer option")
        self.options = dataclasses.replace(options or TrainOptions(), **overrides)
        self.backup, others = callback_setup.split_backup(task.callbacks)
        if self.backup is not None:
            self.options = callback_setup.backup_options(self.options, self.backup)
            task = dataclasses.replace(task, callbacks=others)
        self.task = task
        self.on_progress = on_progress
        self.strategy = strategy if strategy is not None else distribute.strategy()
        self.replicas = int(self.strategy.num_replicas_in_sync)
        if self.options.jit_compile and self._xla_refused():
            raise ConfigError(
                "XLA cannot compile a step replicated over logical CPU devices (they share one XLA CPU device)",
                value=list(distribute.replica_devices(self.strategy)[0]),
                fix="use jit_compile with GPUs or a single device, or leave it off on the CPU",
            )
        self.global_batch = task.batch_size * self.replicas
        # a tf.data.Dataset brings its own global batches (the Trainer's batch is 1 there)
        self._batched = isinstance(task.train_data, _dataset_type())
        spec = distribute.cluster_of(self.strategy)
        feed = distribute.input_strategy(self.strategy, in_cluster=spec is not None)
        self._direct = feed is None
        self._input_strategy = feed or self.strategy
        self._cluster = spec
        self.is_chief = spec is None or spec.is_chief
        self.worker_name = f"{spec.task_type}-{spec.task_index}" if spec else "local"
        # input pipelines training side by side (MultiWorkerMirrored: one per worker)
        self._pipelines = (
            sum(len(spec.cluster.get(r, ())) for r in ("chief", "worker"))
            if spec is not None and not distribute.is_parameter_server(self.strategy)
            else 1
        )
        choices.record(
            "global_batch",
            "from the dataset" if self._batched else f"{self.global_batch}",
            "its batches are global batches, split over the replicas"
            if self._batched
            else f"{task.batch_size} per replica x {self.replicas} replicas",
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
        if self.options.tuning_file is not None:
            self._use_saved(self.options.tuning_file)

    # -- state ---------------------------------------------------------------------------------
    def _build(self) -> None:
        import keras
        import tensorflow as tf

        with self.strategy.scope():
            self.model = model_setup.from_task(self.task)
        if not model_setup.fits_strategy(self.model, self.strategy):
            raise ConfigError(
                f"The model was created under another strategy than the {type(self.strategy).__name__} "
                "it is to train under",
                value=type(model_setup.owner(self.model) or tf.distribute.get_strategy()).__name__,
                fix="create and compile the model inside `with strategy.scope():` of the strategy you train with",
            )
        self.optimizer = self.model.optimizer
        if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
            choices.record("loss_scaling", "dynamic", "fp16 needs it (Keras's LossScaleOptimizer)")
        train_data, eval_data = _split(self.task)
        self._eval_source = eval_data
        self._inputs: dict[str, inputs.Input] = {"train": self._input(train_data, training=True)}
        model_setup.build(self.model, self.strategy, self._inputs["train"].spec())
        # Python counters: reading or assigning mirrored variables every step costs device ops;
        # variables hold them only for checkpoints (made only then: each costs ms per fit call)
        self._counters = {"step": 0, "epoch": 0, "epoch_step": 0}
        self.checkpoints: Checkpoints | None = None
        self.resumed_from: str | None = None
        self._epochs_kept: list[dict[str, Any]] = []  # each finished epoch's logs (Checkpoints.save_history)
        if self.options.checkpoint_dir:
            self._checkpointed()
        self._warm = False  # the training function has run once (traced and instantiated)
        self._last: dict[str, Any] | None = None  # the last execution's accumulators
        self._tuning: Any = None  # what tune=True chose (tuning.Tuning), once per Trainer
        self._trials: dict[tuple[Any, ...], Any] = {}  # tuning's other setups and model copies
        self._proof: Any = None  # train.proof's finding, once per Trainer

    def _checkpointed(self) -> None:
        """Checkpoints of model, optimizer and counters; restore the latest one there is."""
        import tensorflow as tf

        with self.strategy.scope():
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
            self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
            self.epoch_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch_step")
        self._counter_variables = {"step": self.step, "epoch": self.epoch, "epoch_step": self.epoch_step}
        self.checkpoints = Checkpoints(
            self.options.checkpoint_dir,
            objects={"model": self.model, "optimizer": self.optimizer, **self._counter_variables},
            keep=self.options.keep_checkpoints,
            is_chief=self.is_chief,
            worker=self.worker_name,
        )
        self.resumed_from = self.checkpoints.restore_latest()
        self._counters = {n: int(v.read_value()) for n, v in self._counter_variables.items()}
        # the finished epochs' logs as of the checkpoint (a courtesy for a finished run started again)
        self._epochs_kept = (
            [e for e in self.checkpoints.history_kept() if e.get("epoch", 1e9) < self._counters["epoch"]]
            if self.resumed_from
            else []
        )
        if self.resumed_from:
            log.info("resumed from %s at step %d", self.resumed_from, self._counters["step"])

    def _input(self, source: Any, *, training: bool) -> inputs.Input:
        # under ParameterServerStrategy the coordinator evaluates, reading the data itself
        local = not training and distribute.is_parameter_server(self.strategy)
        return inputs.Input(
            source,
            task=self.task,
            training=training,
            global_batch=self.global_batch,
            strategy=evaluation_strategy(self.strategy) if local else self._input_strategy,
            direct=self._direct or local,
        )

    def _function(self, name: str, *, jit_compile: bool | None = None) -> Any:
        """The compiled functions, built once per model, strategy and compiled state (a new
        tf.function would retrace; a re-compiled model needs a new one, see ``execution.cached``).
        ``jit_compile``: the training step with or without XLA (default: the run's option; tuning
        tries the other)."""
        jit = self.options.jit_compile if jit_compile is None else jit_compile
        key = (name, self.strategy, jit)  # the object: a freed one's id is reused
        return execution.cached(self.model, key, lambda: self._make_function(name, jit))

    def _make_function(self, name: str, jit_compile: bool) -> Any:
        if name == "skip":
            return execution.skip_batches()
        if name == "metrics":
            return execution.metrics_reader(self.model)
        return self._execution(jit_compile)

    def _execution(self, jit_compile: bool) -> Callable[[Any, Any], dict[str, Any]]:
        return execution.train_execution(self.strategy, self.model, jit_compile=jit_compile)

    def _save(self, step: int) -> str | None:
        if self.checkpoints is None:
            return None
        for name, variable in self._counter_variables.items():
            variable.assign(self._counters[name])
        path = self.checkpoints.save(step)
        self.checkpoints.save_history(self._epochs_kept)
        return path

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

    def _at_boundary(self) -> bool:
        step = self._counters["step"]
        return any(step % every == 0 for every in self.options.boundaries())

    def _advance(self, taken: int) -> None:
        self._counters["step"] += taken
        self._counters["epoch_step"] += taken

    def _run_log(self, steps: int | None, callbacks: Any) -> RunLog:
        import keras

        run = RunLog(
            options=self.options,
            global_batch=None if self._batched else self.global_batch,
            is_chief=self.is_chief,
            total_steps=steps,
            on_progress=self.on_progress,
            save=self._save,
            workers=self._pipelines,
        )
        # with TerminateOnNaN the user asked for Keras's way: stop, do not raise
        run.nan_raises = not any(isinstance(c, keras.callbacks.TerminateOnNaN) for c in callbacks.callbacks)
        return run

    def _finish(self, run: RunLog) -> TrainResult:
        final = None if self.backup is not None else self._save(self._counters["step"])
        self._drop_backup()
        result = run.result(
            steps=self._counters["step"],
            epochs=self._counters["epoch"],
            replicas=self.replicas,
            final=final,
            resumed=self.resumed_from,
        )
        result.tuning = None if self._tuning is None else self._tuning.to_dict()
        result.proof = None if self._proof is None else self._proof.to_dict()
        return result

    # -- tune=True -------------------------------------------------------------------------------
    def tune(self, *, epochs: int | None = None, steps: int | None = None) -> Any:
        """Measure the candidate configurations (``train.tuning``) and train with the fastest from
        here on; returns the ``tuning.Tuning``. ``fit`` calls it first when ``tune`` is set;
        ``tfgpu tune`` calls it alone. ``epochs``/``steps``: the run to come (sets the budget)."""
        if self._tuning is None:
            if self.options.tune is None:
                self.options = dataclasses.replace(self.options, tune=tuning.TuneOptions())
            self._tuning = self._tune(epochs=epochs, steps=steps)
        return self._tuning

    def _tune(self, *, epochs: int | None, steps: int | None) -> Any:
        """Measure, choose and keep the fastest configuration (``train.tuning``), then train with it."""
        options = self.options.tune
        source = self._inputs["train"]
        if self._several_workers():
            note = "not tuned: under several workers each would choose from its own timings"
            found = tuning.Tuning(seconds=0.0, choices={}, gains={}, notes=[note])
            choices.record("tuning", "none", note)
            return found
        parts = self._key_parts(options.keyed)
        key = tuning.key_of(parts)
        path = tuning.kept_path(
            checkpoint_dir=self.options.checkpoint_dir, log_dir=self.options.log_dir, key=key
        )
        found, why = tuning.load(path, parts) if options.keep else (None, "")
        if found is None:
            per_epoch = source.steps_per_epoch or source.known_length()
            bench = tuning.Bench(
                iterator=lambda c: (
                    self._trial(c)
                    ._inputs["train"]
                    .trial_iterator(tuning.input_options() if c.input else None)
                ),
                execution=lambda c: self._trial(c)._function("train", jit_compile=c.jit_compile),
                max_steps=self._trial_steps,
                model=lambda c: self._trial(c).model,
            )
            policy, precision_refused = self._precision_for()
            refused = {
                "jit_compile": self._xla_refused(),
                "precision": precision_refused,
                "batch_size": self._batch_refused(),
            }
            tuner = tuning.Tuner(
                bench,
                model=self.model,
                options=options,
                default=self._untuned(),
                batch=self.global_batch,
                run_steps=steps if steps is not None else (epochs or 1) * per_epoch if per_epoch else None,
                fixed_steps=self.options.steps_per_execution is not None,
                refused={k: why for k, why in refused.items() if why},
                policy=policy,
                replicas=self.replicas,
            )
            started = time.perf_counter()
            with timing.restored(self.model):
                _, chosen, gains = tuner.run()
            notes = ([why] if why else []) + tuner.notes
            found = tuning.Tuning(
                time.perf_counter() - started, chosen, gains, tuner.trials, notes, key=key, parts=parts
            )
            if options.keep and self.is_chief:
                tuning.save(path, parts, found)
        config = tuning.config_of(found, self._untuned())
        self._apply_tuning(found, config, why=f"kept from {found.reused}" if found.reused else "measured")
        self._trials = {}  # the trial copies are not needed again
        log.info("%s", found.line())
        return found

    def _trial(self, config: tuning.Config) -> Trainer:
        """The Trainer that runs ``config``'s trials: this one, or (made once, kept while tuning)
        one for another global batch, on one device, or on a copy of the model in mixed precision.
        Its setup records no choice of this run's."""
        key = self._setup_of(config)
        if key == self._setup_of(self._untuned()):
            return self
        if key not in self._trials:
            batch, devices, policy = key
            model, strategy = self._trial_model(devices, policy)
            with choices.unchanged():
                task = dataclasses.replace(
                    self.task,
                    model=lambda: model,
                    loss=None,
                    metrics=(),
                    batch_size=batch // int(strategy.num_replicas_in_sync),
                    callbacks=(),
                )
                self._trials[key] = Trainer(
                    task, strategy=strategy, options=TrainOptions(monitor_gpus=False, prove=False)
                )
        return self._trials[key]

    def _trial_model(self, devices: int, policy: str | None) -> tuple[Any, Any]:
        """(model, strategy) of trials on ``devices`` in ``policy``: this run's, or a copy (made
        once; one Keras cannot make: ``model.copy_in``'s ConfigError)."""
        if devices == self.replicas and policy is None:
            return self.model, self.strategy
        key = ("model", devices, policy)
        if key not in self._trials:
            strategy = self.strategy
            if devices != self.replicas:
                import tensorflow as tf

                strategy = tf.distribute.OneDeviceStrategy(distribute.replica_devices(self.strategy)[0][0])
            with choices.unchanged():
                self._trials[key] = model_setup.copy_in(self.model, strategy, policy=policy), strategy
        return self._trials[key]

    def _setup_of(self, config: tuning.Config) -> tuple[int, int, str | None]:
        """What ``config`` trains in that needs a Trainer of its own: (global batch, replicas, policy)."""
        return (config.batch or self.global_batch, config.devices or self.replicas, config.precision)

    def _trial_steps(self, config: tuning.Config) -> int | None:
        """The steps one pass over the data gives in ``config``'s batch (0: not one batch)."""
        _, devices, policy = self._setup_of(config)
        self._trial_model(devices, policy)  # not a copy Keras can make: its ConfigError, for the tuner
        try:
            source = self._trial(config)._inputs["train"]
        except ConfigError:  # fewer rows than one batch of it
            return 0
        return source.steps_per_epoch or source.known_length()

    def _precision_for(self) -> tuple[str, str | None]:
        """(the mixed policy to try, why it cannot be tried here: None when it can): bf16 on GPUs
        with Tensor Cores that take it (compute capability 8.0+), fp16 on 7.x, none elsewhere."""
        import tensorflow as tf

        built = self.model.dtype_policy.name
        if built != "float32":
            return built, f"the model is built in {built} already"
        devices, _ = distribute.replica_devices(self.strategy)
        if distribute.on_host_cpu(devices):
            return "mixed_bfloat16", "no GPU with Tensor Cores here (mixed precision is slower on CPUs)"
        gpus = tf.config.list_physical_devices("GPU")
        capability = min(
            (
                tuple(tf.config.experimental.get_device_details(g).get("compute_capability", (0, 0)))
                for g in gpus
            ),
            default=(0, 0),
        )
        if capability >= (8, 0):
            return "mixed_bfloat16", None
        if capability >= (7, 0):
            return "mixed_float16", None
        return (
            "mixed_float16",
            f"GPU compute capability {capability[0]}.{capability[1]}: no Tensor Cores (7.0+)",
        )

    def _use_saved(self, path: str) -> None:
        """Train with a saved tuning's choice (``tfgpu train --config``); say what differs from
        the run it was measured on (it is used all the same: the user asked for it)."""
        found = dataclasses.replace(tuning.read(path), notes=[])  # its own notes were its measurement's
        changed = tuning.differences(found.parts, self._key_parts(tuple(found.choices)))
        if changed:
            found.notes.append(f"measured for another run: {', '.join(changed)} differ")
        config = self._usable(tuning.config_of(found, self._untuned()), notes=found.notes)
        self._apply_tuning(found, config, why=f"from {path}")
        self._tuning = found

    def _usable(self, config: tuning.Config, *, notes: list[str]) -> tuning.Config:
        """``config`` less what this run cannot train with (a tuning measured for another run):
        each dropped choice said in ``notes``."""
        if config.batch == self.global_batch:
            config = dataclasses.replace(config, batch=None)
        refused = {
            "jit_compile": config.jit_compile and self._xla_refused(),
            "precision": config.precision and self._precision_for()[1],
            "batch": config.batch and self._batch_refused(),
        }
        if self._several_workers():
            why = "under several workers only steps, input and XLA are"
            refused.update(
                precision=config.precision and why, batch=config.batch and why, devices=config.devices and why
            )
        untuned = self._untuned()
        named = {"jit_compile": "XLA", "precision": config.precision, "batch": f"batch {config.batch}"}
        for field, why in refused.items():
            if why:
                notes.append(f"{named.get(field, 'one device')} not used: {why}")
                config = dataclasses.replace(config, **{field: getattr(untuned, field)})
        return config

    def _key_parts(self, knobs: tuple[str, ...]) -> dict[str, str]:
        """What a tuning of this run depends on (``tuning.key_parts``)."""
        devices, _ = distribute.replica_devices(self.strategy)
        return tuning.key_parts(
            model=self.model,
            spec=self._inputs["train"].spec(),
            strategy=self.strategy,
            devices=devices,
            knobs=knobs,
            batch=self.global_batch,
        )

    def _untuned(self) -> tuning.Config:
        """The run's configuration as asked for, before any tuning."""
        return tuning.Config(self.options.execution_steps, False, self.options.jit_compile)

    def _several_workers(self) -> bool:
        return distribute.spans_workers(self.strategy) or distribute.is_parameter_server(self.strategy)

    def _batch_refused(self) -> str | None:
        """Why tuning cannot change the batch (None: it can): data that comes batched."""
        data = self.task.train_data
        if self._batched:
            return "the tf.data.Dataset is batched already"
        if callable(data) and not inputs.takes_batch(data):
            return "the data function batches its data itself (it takes no batch size)"
        return None

    def _xla_refused(self) -> str | None:
        """Why XLA cannot compile this run's step (None: it can)."""
        devices, _ = distribute.replica_devices(self.strategy)
        if len(devices) > 1 and distribute.on_host_cpu(devices):
            return "replicas on logical CPU devices share one XLA device"
        return None

    def _apply_tuning(self, found: tuning.Tuning, config: tuning.Config, *, why: str) -> None:
        """Train with ``config`` (what ``found`` chose) from here on; the choices say so, and why."""
        if self._setup_of(config) != self._setup_of(self._untuned()):
            self._switch(config, why=why)
        k = config.steps_per_execution
        if k != self.options.execution_steps:
            choices.record("steps_per_execution", k, f"tuned ({why})")
        self.options = dataclasses.replace(
            self.options,
            steps_per_execution=k,
            log_every=max(self.options.log_every, k),
            jit_compile=config.jit_compile,
        )
        if config.input:
            self._inputs["train"].set_tf_options(tuning.input_options())
        chosen = ", ".join(f"{knob}={value}" for knob, value in found.choices.items())
        choices.record("tuning", chosen or "as configured", why)

    def _switch(self, config: tuning.Config, *, why: str) -> None:
        """Train in ``config``'s batch, on one device or in mixed precision from here on: this
        Trainer set up again around the trial's model (a copy made from this model's state now,
        which is the untuned run's: trials are restored) and strategy. Said loudly: the batch is
        the user's to know (the learning rate stays as given)."""
        trial = self._trial(config)
        model = trial.model
        if model is not self.model:
            model.set_weights(self.model.get_weights())
            model_setup.copy_optimizer_state(self.model, model, strategy=trial.strategy)
            model.reset_metrics()  # its trials' figures (a resumed run restores its own below)
        before = (self.global_batch, self.replicas, self.model.dtype_policy.name)
        task = dataclasses.replace(
            self.task, model=lambda: model, loss=None, metrics=(), batch_size=trial.task.batch_size
        )
        options, tuned, backup = self.options, self._tuning, self.backup
        self.__init__(
            task,
            strategy=trial.strategy,
            options=dataclasses.replace(options, tuning_file=None),
            on_progress=self.on_progress,
        )
        self.options, self._tuning, self.backup = options, tuned, backup
        after = (self.global_batch, self.replicas, self.model.dtype_policy.name)
        for name, old, new in zip(("global_batch", "devices", "precision"), before, after, strict=True):
            if old != new:
                choices.record(name, new, f"tuned from {old} ({why})")
                log.warning(
                    "tfgpu tuning changed the %s from %s to %s (%s)", name.replace("_", " "), old, new, why
                )

    # -- fit -----------------------------------------------------------------------------------
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
        _check_length(epochs=epochs, steps=steps, initial_epoch=initial_epoch)
        if self.options.tune is not None and self._tuning is None:
            self.tune(epochs=epochs, steps=steps)  # first: it may set this Trainer up again
            if verbose and self.is_chief:
                print(self._tuning.line())  # before the progress bars, as Keras prints its own
        if self._proof is None and self.options.prove:
            self._proof = self._prove()
        if (
            initial_epoch
            and not self.resumed_from
            and self._counters == {"step": 0, "epoch": 0, "epoch_step": 0}
        ):
            self._counters["epoch"] = initial_epoch
        callbacks = callback_setup.callback_list(
            self.task.callbacks,
            model=self.model,
            is_chief=self.is_chief,
            verbose=verbose,
            epochs=epochs if epochs is not None else 1,
            steps=self._inputs["train"].steps_per_epoch,
        )
        if distribute.is_parameter_server(self.strategy):
            return self._fit_parameter_server(
                epochs=epochs,
                steps=steps,
                callbacks=callbacks,
                validation=(validation_freq, validation_steps),
            )
        choices.announce()
        self.model.stop_training = False
        callbacks.on_train_begin()
        with self._run_log(steps, callbacks) as run:
            while self._counters["epoch"] < (epochs if epochs is not None else float("inf")):
                if steps is not None and self._counters["step"] >= steps:
                    break
                self._begin_epoch(callbacks)
                if not self._train_epoch(run, steps, callbacks):
                    break
                self._end_epoch(run, callbacks, validation=(validation_freq, validation_steps))
                if self.model.stop_training:
                    break
        if not run.history and self.resumed_from:
            self._finished_before(callbacks, epochs=epochs)
        callbacks.on_train_end(run.history[-1] if run.history else None)
        return self._finish(run)

    def _prove(self) -> Any:
        """``train.proof`` before the first step: the replicas' step against one device's, on
        the first batch; said once per model and compiled state."""
        if self.replicas < 2 or self._counters["step"] or self.resumed_from or self._direct:
            return None
        if proof.proved(self.model, self.strategy):
            return None
        source = self._inputs["train"]
        if source.arrays_given:  # tfgpu's own pipeline over tensors in memory: read again from its start
            found = proof.prove(self.model, self.strategy, lambda: next(source.trial_iterator(None)))
        else:  # reading the user's data again would move a shuffle, consume a generator, call a data
            # function once more or read files: zeros of its shape test the scaling as well
            found = proof.prove(
                self.model,
                self.strategy,
                lambda: proof.zeros(self.strategy, source.spec()),
                rows="a batch of zeros shaped like the data's",
            )
        (log.warning if found.status == "differ" else log.info)("%s", found.sentence)
        return found

    def _finished_before(self, callbacks: Any, *, epochs: int | None) -> None:
        """The checkpoint holds a run that had already finished: nothing is trained. Said, and the
        History is that run's epochs (kept beside the checkpoints), not an empty one that a
        script reading ``history.history["val_auc"]`` fails on. Keras's BackupAndRestore deletes
        its backup at the end, so Keras trains afresh; a tfgpu checkpoint_dir is the run's
        record and stays (docs/from-model-fit.md)."""
        import keras

        directory = self.options.checkpoint_dir
        log.warning(
            "%s holds a finished run (epoch %d of %s): nothing trained; the History is that run's. "
            "Pass a new checkpoint_dir (or remove this one) to train again.",
            directory,
            self._counters["epoch"],
            epochs if epochs is not None else "its steps",
        )
        histories = [c for c in callbacks.callbacks if isinstance(c, keras.callbacks.History)]
        for history in histories:
            for entry in self._epochs_kept:
                history.on_epoch_end(int(entry["epoch"]), {k: v for k, v in entry.items() if k != "epoch"})

    def _drop_backup(self) -> None:
        """Training ended: a BackupAndRestore's backup goes, as Keras's ``on_train_end`` does
        (unless ``delete_checkpoint=False``), so the next run starts afresh."""
        import shutil

        if self.backup is None or not self.backup.delete_checkpoint:
            return
        distribute.barrier(self.strategy)  # every worker has written (and removed) its scratch copy
        if self.is_chief:
            shutil.rmtree(self.backup.backup_dir, ignore_errors=True)

    def _train_epoch(self, run: RunLog, steps: int | None, callbacks: Any) -> bool:
        """Train until the epoch's end (True) or ``steps`` is reached (False)."""
        epoch = self._counters["epoch"]
        source = self._inputs["train"]
        iterator, skip = source.iterator(epoch, self._counters["epoch_step"])
        if source.caches and not run.trained_any:  # this pass reads the source and fills the cache
            run.warm_epoch(epoch, "filled the cache")
        if skip:  # resuming mid-epoch: the batches already trained on, taken in the graph
            self._function("skip")(iterator, timing.limit(skip))
        ended = False
        try:
            ended = self._train_steps(
                run, iterator, steps, per_epoch=source.steps_per_epoch, callbacks=callbacks
            )
            return ended
        finally:
            per_epoch = source.steps_per_epoch
            exhausted = ended and (per_epoch is None or self._counters["epoch_step"] < per_epoch)
            source.stopped_at(iterator, epoch, self._counters["epoch_step"], exhausted=exhausted)

    def _train_steps(
        self, run: RunLog, iterator: Any, steps: int | None, *, per_epoch: int | None, callbacks: Any
    ) -> bool:
        epoch = self._counters["epoch"]
        execute = self._function("train")
        window = Window(epoch, self._counters["step"])
        epoch_start = True
        batch_hooks = callback_setup.has_batch_hooks(callbacks)
        while True:
            limit = min(self.options.execution_steps, self._to_boundary(steps, per_epoch))
            if limit <= 0:  # ``steps`` reached, or resumed at the very end of an epoch
                run.close(window)
                return per_epoch is not None and self._counters["epoch_step"] >= per_epoch
            begin = self._counters["epoch_step"]
            if batch_hooks:
                callbacks.on_train_batch_begin(begin)
            called = time.perf_counter()
            stats = self._dispatch(execute, iterator, limit)
            # with the epoch's length known (arrays) every execution takes its limit; otherwise
            # read the count, a host-side int32 that does not wait for the device
            taken = limit if self._inputs["train"].arrays_given else int(stats["steps"])
            warm_up = None if self._warm else time.perf_counter() - called
            if taken:
                window.add(stats, taken=taken, epoch_start=epoch_start, warm_up=warm_up)
                self._last = stats
                if batch_hooks:
                    callbacks.on_train_batch_end(begin + taken - 1, stats["logs"])
            epoch_start, self._warm = False, True
            self._advance(taken)
            ended = taken < limit or self._counters["epoch_step"] == per_epoch
            if ended or self._at_boundary() or self._counters["step"] == steps or self.model.stop_training:
                run.close(window)
                window = Window(epoch, self._counters["step"])
            if ended:
                if self._counters["epoch_step"] == 0:
                    raise ConfigError(
                        f"train_data gave no batch in epoch {epoch + 1}",
                        value=_describe(self.task.train_data),
                        fix="check that the data is not empty (a data function must return a dataset batched by the per-replica batch)",
                    )
                return True
            if self.model.stop_training:  # a batch callback asked: the epoch ends here, as in fit
                return True

    def _dispatch(self, execute: Any, iterator: Any, limit: int) -> dict[str, Any]:
        import tensorflow as tf

        try:
            return execute(iterator, timing.limit(limit))
        except tf.errors.ResourceExhaustedError:
            raise out_of_memory(
                self.model, self.strategy, batch=self.task.batch_size, global_batch=self.global_batch
            ) from None

    def _begin_epoch(self, callbacks: Any) -> None:
        """At an epoch's first step (not when resuming inside it): fresh metrics, the callbacks told."""
        if self._counters["epoch_step"] == 0:
            self.model.reset_metrics()
            callbacks.on_epoch_begin(self._counters["epoch"])

    def _epoch_logs(self) -> dict[str, Any]:
        if self._last is not None:
            return pythonify(self._last["logs"])
        return pythonify(self._function("metrics")())

    def _end_epoch(self, run: RunLog, callbacks: Any, *, validation: tuple[Any, int | None] | None) -> None:
        """The epoch's logs (and validation, when ``validation`` = (freq, steps) names this epoch)
        into the history and the callbacks; the counters move to the next epoch."""
        epoch = self._counters["epoch"]
        logs = self._epoch_logs()
        freq, limit = validation or (None, None)
        if validation is not None and self._eval_source is not None and _should_validate(epoch, freq):
            val = self.evaluate(limit=limit, callbacks=callbacks)
            val.pop("examples", None)
            logs.update({f"val_{k}": v for k, v in val.items()})
        run.end_epoch(epoch, logs)
        self._epochs_kept.append({"epoch": epoch, **logs})
        callbacks.on_epoch_end(epoch, logs)
        self._last = None
        self._counters["epoch"] += 1
        self._counters["epoch_step"] = 0
        if self.options.checkpoint_epochs:
            self._save(self._counters["step"])

    # -- evaluate ------------------------------------------------------------------------------
    def evaluate(
        self, data: Any = None, *, limit: int | None = None, callbacks: Any = None
    ) -> dict[str, float]:
        """The model's loss and metrics over every example of ``data`` (default: the task's eval
        data), exact whatever the replicas and workers, with ``examples`` counted; up to ``limit``
        batches."""
        if data is None and self._eval_source is None:
            raise ConfigError("No evaluation data", fix="set Task.eval_data or pass data=")
        if data is None:
            if "eval" not in self._inputs:
                self._inputs["eval"] = self._input(self._eval_source, training=False)
            source = self._inputs["eval"]
        else:
            source = self._input(data, training=False)
        return evaluator_for(self.strategy, self.model)(source, limit=limit, callbacks=callbacks)

    # -- parameter server ------------------------------------------------------------------------
    def _fit_parameter_server(
        self, *, epochs: int | None, steps: int | None, callbacks: Any, validation: tuple[Any, int | None]
    ) -> TrainResult:
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
        make = self._inputs["train"].per_worker_factory()
        strategy = self.strategy

        def per_worker() -> Any:  # the pattern of TensorFlow's parameter-server tutorial
            return strategy.distribute_datasets_from_function(lambda ctx: make(ctx).repeat())

        iterators = iter(coordinator.create_per_worker_dataset(per_worker))
        model_setup.atomic_counters(self.model)  # executions run side by side on the workers
        execute = self._function("train")
        workers = len(self._cluster.cluster.get("worker", ())) if self._cluster else 1
        choices.announce()
        self.model.stop_training = False
        callbacks.on_train_begin()
        with self._run_log(steps, callbacks) as run:
            while self._counters["step"] < steps and not self.model.stop_training:
                self._begin_epoch(callbacks)
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
                self._last = window.executions[-1][1]
                self._advance(todo)
                run.close(window)
                if per_epoch and self._counters["epoch_step"] >= per_epoch:
                    self._end_epoch(run, callbacks, validation=validation)
        callbacks.on_train_end(run.history[-1] if run.history else None)
        return self._finish(run)


def _dataset_type() -> type:
    import tensorflow as tf

    return tf.data.Dataset


def _describe(source: Any) -> str:
    if inputs.is_arrays(source):
        return f"arrays of {inputs.array_rows(source)} rows"
    return getattr(source, "__qualname__", None) or type(source).__name__


def _check_length(*, epochs: int | None, steps: int | None, initial_epoch: int) -> None:
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


def _should_validate(epoch: int, freq: Any) -> bool:
    """Keras's ``validation_freq``: every N epochs, or the epochs (1-based) a list names."""
    if isinstance(freq, int):
        return (epoch + 1) % freq == 0
    return epoch + 1 in freq


def _split(task: Task) -> tuple[Any, Any]:
    """(train, eval) data: the last ``validation_split`` of arrays held out, as Keras's fit does."""
    if not task.validation_split:
        return task.train_data, task.eval_data
    if not inputs.is_arrays(task.train_data):
        raise ConfigError(
            "validation_split needs arrays in memory; the training data is a " + _describe(task.train_data),
            value=task.validation_split,
            fix="pass validation_data (a dataset, arrays or a directory) instead of validation_split",
        )
    if task.eval_data is not None:
        raise ConfigError(
            "validation_split and eval_data (validation_data) are both set: one would be ignored",
            value=task.validation_split,
            fix="pass one of them",
        )
    import tensorflow as tf

    rows = inputs.array_rows(task.train_data)
    cut = int(rows * (1.0 - task.validation_split))
    if cut < 1 or cut == rows:
        raise ConfigError(
            f"validation_split {task.validation_split} of {rows} rows leaves no training or no validation rows",
            value=task.validation_split,
            fix="pass a fraction that leaves rows on both sides, e.g. 0.2",
        )
    head = tuple(tf.nest.map_structure(lambda a: a[:cut], part) for part in task.train_data)
    tail = tuple(tf.nest.map_structure(lambda a: a[cut:], part) for part in task.train_data)
    return head, tail

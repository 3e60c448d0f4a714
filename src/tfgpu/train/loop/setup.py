"""A run's setup: the model as it trains, the strategy, the inputs and the global batch, built
once from a Task and where its model runs: a ``placement.Placement`` decided already
(``tfgpu.fit``'s, a tuning variant's), or the Task's model made in the strategy's scope, or a split
(``options.Placement``). The compiled step is ``execution.compiled``'s.

The loop (``train.loop.training``) runs over a setup and the tuning session (``train.tuning.session``)
measures setups of other configurations (``Setup.variant``); neither builds a model or an input
itself. Keras's base trainer / backend trainer split is the shape: what a model and strategy are
(here) apart from how steps are run (``loop``).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from tfgpu import choices, distribute
from tfgpu.errors import ConfigError
from tfgpu.train.inputs import adapters
from tfgpu.train.inputs import readers as inputs
from tfgpu.train.loop.evaluation import input_for
from tfgpu.train.model import building, split
from tfgpu.train.model import user_model as model_setup
from tfgpu.train.model.placement import Placement as Placed
from tfgpu.train.model.placement import copy_in, place
from tfgpu.train.pieces.options import Placement
from tfgpu.train.pieces.task import Task


@dataclass(frozen=True)
class Setup:
    """What a run trains with; ``Setup.build`` makes one. The model is the one that trains: the
    Task's (made in the strategy's scope), a split copy, or a tuning variant's copy."""

    task: Task
    strategy: Any
    model: Any
    train: inputs.Input
    source: adapters.Adapter  # the training data, through the door once
    eval_source: (
        adapters.Adapter | None
    )  # the evaluation data (Task.eval_data, or the held-out validation_split)
    global_batch: int
    cluster: Any  # the cluster spec under several workers, else None

    @classmethod
    def build(
        cls,
        task: Task,
        *,
        strategy: Any = None,
        placement: Placement | None = None,
        placed: Placed | None = None,
        record: bool = True,
        converted: tuple[Any, int] | None = None,
    ) -> Setup:
        """The setup of ``task`` under ``strategy`` (default ``tfgpu.strategy()``); a split
        ``placement`` chooses the strategy itself; ``placed``: the model and its strategy decided
        already (``placement.place``: checked there, not again; ``Task.model`` is not called).
        ``record``: say the run's global batch first, before its inputs say theirs (a tuning
        trial's setup says none); ``converted``: the training arrays as another setup holds them
        (``Input.converted``), not converted again."""
        strategy, model = (placed.strategy, placed.model) if placed else _placed(task, strategy, placement)
        spec = distribute.cluster_of(strategy)
        feed = distribute.input_strategy(strategy, in_cluster=spec is not None)
        global_batch = task.batch_size * int(strategy.num_replicas_in_sync)
        train_data, eval_data = adapters.for_task(task)
        if record:
            _record(
                task,
                model,
                train_data,
                global_batch=global_batch,
                replicas=int(strategy.num_replicas_in_sync),
            )
        train = inputs.input_of(
            train_data,
            task=task,
            training=True,
            global_batch=global_batch,
            strategy=feed or strategy,
            direct=feed is None,
            converted=converted,
        )
        setup = cls(
            task=task,
            strategy=strategy,
            model=model,
            train=train,
            source=train_data,
            eval_source=eval_data,
            global_batch=global_batch,
            cluster=spec,
        )
        building.build(model, strategy, train.spec())
        return setup

    # -- what it is ----------------------------------------------------------------------------
    @property
    def batched(self) -> bool:
        """The data brings its own global batches (the per-replica batch is 1)."""
        return self.source.batched

    @property
    def direct(self) -> bool:
        """The input is fed without distributing it (a strategy of one local device)."""
        return self.train.direct

    @property
    def input_strategy(self) -> Any:
        return self.train.strategy

    @property
    def replicas(self) -> int:
        return int(self.strategy.num_replicas_in_sync)

    @property
    def is_chief(self) -> bool:
        return self.cluster is None or self.cluster.is_chief

    @property
    def worker_name(self) -> str:
        return f"{self.cluster.task_type}-{self.cluster.task_index}" if self.cluster else "local"

    @property
    def pipelines(self) -> int:
        """Input pipelines training side by side (MultiWorkerMirrored: one per worker)."""
        if self.cluster is None or distribute.is_parameter_server(self.strategy):
            return 1
        return sum(len(self.cluster.cluster.get(r, ())) for r in ("chief", "worker"))

    @property
    def on_gpus(self) -> bool:
        """Whether the replicas may run on GPUs (False only when every one is on a CPU: a run
        there has no GPU to sample); a strategy whose devices cannot be listed counts as True."""
        try:
            return not distribute.on_host_cpu(distribute.replica_devices(self.strategy)[0])
        except Exception:  # a strategy kind without worker devices: sample as before
            return True

    @property
    def parameter_server(self) -> bool:
        return distribute.is_parameter_server(self.strategy)

    def several_workers(self) -> bool:
        return distribute.spans_workers(self.strategy) or self.parameter_server

    def xla_refused(self) -> str | None:
        """Why XLA cannot compile this setup's step (None: it can)."""
        devices, _ = distribute.replica_devices(self.strategy)
        if len(devices) > 1 and distribute.on_host_cpu(devices):
            return "replicas on logical CPU devices share one XLA device"
        return None

    def batch_refused(self) -> str | None:
        """Why tuning cannot change the batch (None: it can): data that comes batched."""
        return self.source.batch_refused()

    # -- inputs and functions ------------------------------------------------------------------
    def input(self, data: Any, *, training: bool) -> inputs.Input:
        """``data`` (an Adapter, or a Task's data: ``Trainer.evaluate``'s) as an input of this
        setup (under ParameterServerStrategy the coordinator evaluates, reading the data itself)."""
        feed = None if self.direct else self.input_strategy
        return input_for(
            adapters.of_task(data, role="data"),
            self.task,
            self.strategy,
            feed=feed,
            global_batch=self.global_batch,
            training=training,
        )

    def eval_input(self) -> inputs.Input:
        """The evaluation data's input, made once."""
        if self.eval_source is None:
            raise ConfigError("No evaluation data", fix="set Task.eval_data or pass data=")
        return self._eval_input

    def release_inputs(self) -> None:
        """Let go of the datasets and iterators of this setup's inputs (``Input.release``): at the
        end of a verb (fit, evaluate); the next builds them again."""
        self.train.release()
        if "_eval_input" in self.__dict__:  # made only when asked (``eval_input``)
            self._eval_input.release()

    @functools.cached_property
    def _eval_input(self) -> inputs.Input:
        return self.input(self.eval_source, training=False)

    # -- other configurations ------------------------------------------------------------------
    def copy_for(self, *, devices: int, policy: str | None) -> tuple[Any, Any]:
        """(model, strategy) for ``devices`` (1: this setup's first device) in a mixed ``policy``:
        this setup's own, or a copy of its model made from its state now (one Keras cannot make:
        ``placement.copy_in``'s ConfigError)."""
        if devices == self.replicas and policy is None:
            return self.model, self.strategy
        strategy = self.strategy
        if devices != self.replicas:
            import tensorflow as tf

            strategy = tf.distribute.OneDeviceStrategy(distribute.replica_devices(self.strategy)[0][0])
        with choices.unchanged():
            return copy_in(self.model, strategy, policy=policy), strategy

    def variant(self, *, model: Any, strategy: Any, batch: int, record: bool = False) -> Setup:
        """This run's setup over ``model`` (this one's, or a ``copy_for``) under ``strategy`` in the
        global ``batch``; ``record``: say its choices (the setup a tuning switched the run to),
        else it records none (a trial's)."""
        task = dataclasses.replace(
            self.task,
            model=lambda: model,
            loss=None,
            metrics=(),
            batch_size=batch // int(strategy.num_replicas_in_sync),
        )
        placed = Placed(strategy, model)  # this run's model or a copy_for: placed already
        converted = self.train.converted  # the arrays stay converted once a fit
        if record:
            return Setup.build(task, placed=placed, converted=converted)
        with choices.unchanged():
            return Setup.build(task, placed=placed, record=False, converted=converted)

    def precision_for(self) -> tuple[str, str | None]:
        """(the mixed policy to try, why it cannot be tried here: None when it can): bf16 on GPUs
        with Tensor Cores that take it (compute capability 8.0+), fp16 on 7.x, none elsewhere."""
        import tensorflow as tf

        built = self.model.dtype_policy.name
        if built != "float32":
            return built, f"the model is built in {built} already"
        devices, _ = distribute.replica_devices(self.strategy)
        if distribute.on_host_cpu(devices):
            return "mixed_bfloat16", "no GPU with Tensor Cores here (mixed precision is slower on CPUs)"
        capability = min(
            (
                tuple(tf.config.experimental.get_device_details(g).get("compute_capability", (0, 0)))
                for g in tf.config.list_physical_devices("GPU")
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


def _record(task: Task, model: Any, data: adapters.Adapter, *, global_batch: int, replicas: int) -> None:
    import keras

    batched = data.batched
    choices.record(
        "global_batch",
        "from the dataset" if batched else f"{global_batch}",
        "its batches are global batches, split over the replicas"
        if batched
        else f"{task.batch_size} per replica x {replicas} replicas",
    )
    if isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer):
        choices.record("loss_scaling", "dynamic", "fp16 needs it (Keras's LossScaleOptimizer)")


def _placed(task: Task, strategy: Any, asked: Placement | None) -> tuple[Any, Any]:
    """(strategy, model) for a Task whose model no one placed, by ``placement.place``'s rule: the
    Task's model made in the scope of ``strategy`` (default ``tfgpu.strategy()``), or made
    outside any scope and split over the devices ``asked`` names (built for the data first)."""
    asked = asked or Placement()
    shape, global_batch = None, 0
    if asked.splits:
        model = model_setup.from_task(task)
        shape = adapters.of_task(task.train_data, role="train_data").x_shape()
        global_batch = task.batch_size * split.replicas(asked, strategy=strategy)
    else:
        strategy = strategy if strategy is not None else distribute.strategy()
        with strategy.scope():
            model = model_setup.from_task(task)
    placed = place(model, strategy, split_as=asked, global_batch=global_batch, x_shape=shape)
    return placed.strategy, placed.model

"""Evaluation with the model's own ``test_step``, exact for any dataset size, in one compiled call.

Shared by ``Trainer.evaluate`` (validation each epoch) and ``tfgpu.evaluate``. The metrics are the
model's compiled ones (Keras's ON_READ / SUM variables: read outside the replicas they are the sum
over every replica and worker), the example count is a variable of the same kind, and a replica
left without rows by the last batch skips its step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from tfgpu import distribute, letting_go
from tfgpu.train.inputs import readers as inputs
from tfgpu.train.model import building
from tfgpu.train.pieces import callbacks as callback_setup
from tfgpu.train.pieces import model_cache
from tfgpu.train.pieces.callbacks import pythonify
from tfgpu.train.step import execution

if TYPE_CHECKING:
    from tfgpu.train.inputs.adapters import Adapter
    from tfgpu.train.pieces.task import Task

ALL = 2**31 - 1


class Evaluation(NamedTuple):
    """What an evaluation found: the examples it counted, and the model's logs (Keras's names:
    ``loss``, ``accuracy``, ...). ``Trainer.evaluate`` gives them as one dict, its edge."""

    examples: float
    logs: dict[str, Any]


def evaluation_strategy(strategy: Any) -> Any:
    """The strategy evaluation runs under: ``strategy``, except under ParameterServerStrategy,
    where the coordinator evaluates itself (the parameter-server tutorial's inline evaluation):
    one process, so every example counts once, the variables read from the parameter servers.
    Scheduled on the workers instead, each would need its own exact share of the data."""
    from tensorflow.python.distribute import distribute_lib  # the default strategy, not the scope's

    from tfgpu import distribute

    return distribute_lib._get_default_strategy() if distribute.is_parameter_server(strategy) else strategy


class Evaluator:
    """Evaluates ``model`` under ``strategy`` (see ``evaluation_strategy``); its compiled
    function is built once. The model's state is built under the strategy that owns it."""

    def __init__(self, strategy: Any, model: Any) -> None:
        self.owner = strategy
        strategy = evaluation_strategy(strategy)
        self.strategy, self.model = strategy, model
        self._rows = execution.example_counter(strategy)
        self._run = execution.eval_execution(strategy, model, self._rows)

    def __call__(self, source: Any, *, limit: int | None = None, callbacks: Any = None) -> Evaluation:
        """The examples and the model's logs over up to ``limit`` batches of ``source`` (an Input).

        The whole evaluation is one compiled call, unless a callback acts on every test batch:
        then one batch a call, each with its ``on_test_batch_begin`` / ``end`` and the running
        logs, as Keras's ``evaluate`` calls them at its default of one step per call (said once).
        """
        building.build(self.model, self.owner, source.spec())
        if callbacks is not None:
            callbacks.on_test_begin()
        self.model.reset_metrics()
        self._rows.assign(0.0)
        acting = callbacks is not None and callback_setup.acting_per_batch(callbacks, kind="test")
        with source.adapter.epoch(reset=True):  # a PyDataset's hooks, as Keras's evaluate calls them
            iterator, _ = source.iterator(0)
            if acting:
                # a batch's hooks only where there is one (arrays: Keras calls none past the last)
                out = self._batch_by_batch(iterator, limit or source.known_length() or ALL, callbacks, acting)
            else:
                out = self._run(iterator, execution.limit(limit or ALL))
            held = [iterator]  # dropped off this thread (tfgpu.letting_go)
            del iterator
            letting_go.let_go(held)
        logs = pythonify(out.logs)
        if not acting:
            steps = int(out.steps)
            if callbacks is not None and steps and callback_setup.has_batch_hooks(callbacks, kind="test"):
                callbacks.on_test_batch_begin(0)
                callbacks.on_test_batch_end(steps - 1, logs)
        if callbacks is not None:
            callbacks.on_test_end(logs)
        return Evaluation(examples=float(out.examples), logs=logs)

    def _batch_by_batch(
        self, iterator: Any, limit: int, callbacks: Any, acting: list[str]
    ) -> execution.Evaluated:
        from tfgpu import choices

        choices.record(
            "evaluation steps per call",
            1,
            f"{', '.join(sorted(set(acting)))} acts on every test batch, as under Keras's evaluate",
        )
        one = execution.limit(1)
        out = None
        for step in range(limit):
            callbacks.on_test_batch_begin(step)
            ran = self._run(iterator, one)
            if not int(ran.steps):
                break
            out = ran
            callbacks.on_test_batch_end(step, pythonify(ran.logs))
        return ran if out is None else out  # no batch at all: an empty evaluation's, as one call gives


def evaluator_for(strategy: Any, model: Any) -> Evaluator:
    """One Evaluator per model and strategy: a new compiled function would trace again."""
    return model_cache.function(model, ("evaluator", strategy), lambda: Evaluator(strategy, model))


def input_for(
    data: Adapter, task: Task, strategy: Any, *, feed: Any, global_batch: int, training: bool = False
) -> inputs.Input:
    """``data`` as ``strategy``'s replicas read it, fed by ``feed`` (``distribute.input_strategy``;
    None: iterated as it is). Under ParameterServerStrategy the coordinator evaluates, reading
    the data itself (``evaluation_strategy``). The one recipe of ``Setup.input`` and
    ``tfgpu.evaluate``."""
    local = not training and distribute.is_parameter_server(strategy)
    return inputs.input_of(
        data,
        task=task,
        training=training,
        global_batch=global_batch,
        strategy=evaluation_strategy(strategy) if local else feed or strategy,
        direct=feed is None or local,
    )

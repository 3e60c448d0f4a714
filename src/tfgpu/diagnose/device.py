"""The device side of a diagnosis: a real Keras model step, a simulated device, or a target rate.

The simulated device is busy for a fixed time per batch and leaves the CPU free (it sleeps, which
releases the GIL), standing in for a GPU on a machine without one: "can this pipeline feed a GPU
that does a step in 30 ms?"
"""

from __future__ import annotations

import collections
import contextlib
import functools
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np


def median_seconds(step: Callable[[Any], Any], batch: Any, *, repeats: int, warmup: int = 0) -> float:
    """Median wall time of ``step(batch)`` over ``repeats`` calls, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        step(batch)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step(batch)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


class SimulatedDevice:
    """Busy ``step_time_s`` per batch, on average, without using the CPU.

    A sleep overshoots by a fairly constant 0.1-0.2 ms (timer slack and wake-up), a fifth of a
    0.64 ms step (a 50,000 examples/s device in batches of 32). The device learns its overshoot and
    sleeps that much less, so it runs at the rate asked for; its step is still measured alone, as a
    model's is, so what remains is not charged to the input. The overshoot learned is the median of
    the last ``OVERSHOOTS`` sleeps: on a loaded host one late wake-up (a millisecond and more)
    moved a running mean enough that a 4 ms device ran 26% fast, and the typical overshoot there
    can be half a 0.64 ms step (capped at half a step, such a device ran 11% slow).
    """

    OVERSHOOTS = 9

    kind = "simulated"

    def __init__(self, step_time_s: float) -> None:
        self.step_time_s = step_time_s
        self.description = f"simulated device, {step_time_s * 1000:g} ms per batch"
        self._overshoots: collections.deque[float] = collections.deque(maxlen=self.OVERSHOOTS)

    def step(self, batch: Any) -> None:
        learned = float(np.median(self._overshoots)) if self._overshoots else 0.0
        asked = max(0.0, self.step_time_s - learned)
        start = time.perf_counter()
        time.sleep(asked)
        self._overshoots.append(time.perf_counter() - start - asked)

    def step_seconds(self, element_spec: Any, batch_size: int, *, repeats: int = 10) -> float:
        return median_seconds(self.step, None, repeats=repeats, warmup=10)

    def session(self, element_spec: Any) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


class RateDevice(SimulatedDevice):
    kind = "target-rate"

    def __init__(self, examples_per_s: float, batch_size: int) -> None:
        super().__init__(batch_size / examples_per_s)
        self.description = f"a device consuming {examples_per_s:,.0f} examples/s ({self.step_time_s * 1000:.2f} ms per batch of {batch_size})"


def synthetic(element_spec: Any, batch_size: int) -> Any:
    """A batch of ``batch_size`` rows of the dataset's spec, filled with random values, already on
    the device. The first dimension is the batch's even where the spec fixes it (a batched dataset
    that drops its remainder): the larger-batch figure needs a larger batch of the same rows."""
    import tensorflow as tf

    rng = np.random.default_rng(0)

    def make(spec: Any) -> Any:
        dims = spec.shape.as_list()
        shape = [batch_size, *(batch_size if d is None else d for d in dims[1:])] if dims else []
        if spec.dtype == tf.string:
            return tf.constant(np.full(shape, b""))
        if spec.dtype.is_integer:
            return tf.constant(rng.integers(0, 2, size=shape), dtype=spec.dtype)
        if spec.dtype == tf.bool:
            return tf.constant(rng.integers(0, 2, size=shape).astype(bool))
        return tf.constant(rng.random(size=shape), dtype=spec.dtype)

    return tf.nest.map_structure(make, element_spec)


@dataclass(frozen=True)
class StepProfile:
    """The real training step on the device alone, measured once per model, batch and device.

    Timed through the Trainer's own execution (``train.step.execution``): ``per_call_s`` one step per
    compiled call, ``in_loop_s`` a step when ``steps_per_call`` of them run inside one call. The
    per-step overhead is what running K steps per call removes, ``1 - in_loop_s / per_call_s``:
    host dispatch and whatever else a call costs once, not work in the graph (a fixed-cost op
    costs the same in the loop). ``ROUNDS`` alternating rounds; the medians decide, the spread is
    their range.
    """

    batch_size: int
    steps_per_call: int
    per_call_s: float
    in_loop_s: float
    overhead: float
    overhead_spread: tuple[float, float]
    rounds: int
    larger_batch: int | None = None  # the batch the larger-batch figure was measured at
    larger_batch_speedup: float | None = None  # its examples/s over the batch's (one step per call)
    larger_batch_failed: str = ""  # why it was not measured (out of memory)

    @property
    def steps_per_call_speedup(self) -> float:
        """On the device alone, from the median overhead (one minus it: the loop's share)."""
        return 1 / max(1 - self.overhead, 1e-9)

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "steps_per_call": self.steps_per_call,
            "one_step_per_call_ms": round(self.per_call_s * 1000, 4),
            "in_loop_ms": round(self.in_loop_s * 1000, 4),
            "overhead": round(self.overhead, 4),
            "overhead_spread": [round(v, 4) for v in self.overhead_spread],
            "steps_per_call_speedup": round(self.steps_per_call_speedup, 3),
            "rounds": self.rounds,
            "larger_batch": self.larger_batch,
            "larger_batch_speedup": None
            if self.larger_batch_speedup is None
            else round(self.larger_batch_speedup, 3),
            "larger_batch_failed": self.larger_batch_failed,
        }


ROUNDS = 5
ROUND_S = 0.3  # seconds per timed round: long enough that timer and scheduling noise stay small
STEPS_PER_CALL = 8  # what the steps-per-execution advice proposes
LARGER = 4  # the larger batch the increase-batch-size advice proposes, as a multiple
_PROFILES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class ModelDevice:
    """A compiled Keras model run as the Trainer runs it: its ``train_step`` inside the Trainer's
    compiled execution, under the strategy it was created in (the default one if none).

    Diagnose trains the model on synthetic and real batches; its weights, optimizer state and
    metrics are put back afterwards (``restored``).
    """

    kind = "model"

    def __init__(self, model: Any) -> None:
        from tfgpu.train.model import placement

        placed = placement.place(model)  # its own strategy, or the default one: trained as it is
        self.model, self.strategy = placed.model, placed.strategy
        self.description = (
            f"Keras model {getattr(model, 'name', 'model')} ({model.count_params():,} parameters)"
        )

    @staticmethod
    def _split(batch: Any) -> tuple[Any, Any]:
        if isinstance(batch, (tuple, list)) and len(batch) >= 2:
            return batch[0], batch[1]
        if isinstance(batch, dict):
            features = {k: v for k, v in batch.items() if k not in ("label", "y", "id")}
            label = batch.get("label", batch.get("y"))
            return (next(iter(features.values())) if len(features) == 1 else features), label
        return batch, None

    def step(self, batch: Any) -> None:
        """One training step on ``batch`` (``tfgpu profile`` traces these)."""
        x, y = self._split(batch)
        self.model.train_on_batch(x, y)

    # -- the Trainer's execution ---------------------------------------------------------------
    def _execution(self) -> Any:
        """The Trainer's own compiled execution (``execution.compiled``), the end-of-data path
        kept: diagnose's iterators are distributed ones, a real pipeline's of any length."""
        from tfgpu.train.step import execution

        return execution.compiled(self.model, self.strategy)

    def _as_steps_take_them(self, dataset: Any) -> Any:
        return dataset.map(self._split) if isinstance(dataset.element_spec, dict) else dataset

    @contextlib.contextmanager
    def session(self, element_spec: Any) -> Iterator[None]:
        """Build the model (and its optimizer) for batches of ``element_spec``, then train on them
        freely: the weights, optimizer state and metrics are put back on leaving."""
        import tensorflow as tf

        from tfgpu.train.model.building import build
        from tfgpu.train.step.execution import restored

        spec = self._as_steps_take_them(tf.data.Dataset.from_tensors(synthetic(element_spec, 1))).element_spec
        build(self.model, self.strategy, spec if isinstance(spec, tuple) else (spec,))
        with restored(self.model):
            yield

    def iterator(self, dataset: Any) -> Any:
        """An iterator of ``dataset``'s batches as the model's step takes them, distributed over
        the strategy's replicas (inside ``session``)."""
        import tensorflow as tf

        from tfgpu.train.inputs.readers import bounded

        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        dataset = bounded(self._as_steps_take_them(dataset).with_options(options))
        return iter(self.strategy.experimental_distribute_dataset(dataset))

    def run(self, iterator: Any, *, steps: int, per_call: int) -> tuple[float, list[float], list[Any]]:
        """``steps`` steps, ``per_call`` per compiled call, nothing read back until the end (as the
        Trainer runs): the seconds they took, when each call was made (from the start) and each
        call's outputs."""
        from tfgpu.train.step import execution

        return execution.timed(self._execution(), iterator, steps=steps, per_call=per_call)

    def _seconds_per_step(self, iterator: Any, *, per_call: int, steps: int) -> float:
        seconds, _, _ = self.run(iterator, steps=steps, per_call=per_call)
        return seconds / (max(1, steps // per_call) * per_call)

    def _steps_for(self, iterator: Any, *, per_call: int) -> int:
        """Steps that take about ROUND_S (from one timed call after an untimed one)."""
        self.run(iterator, steps=per_call, per_call=per_call)  # traces the first time
        once = self._seconds_per_step(iterator, per_call=per_call, steps=per_call)
        calls = int(min(400, max(1, ROUND_S / max(once * per_call, 1e-6))))
        return calls * per_call

    def repeating(self, batch: Any) -> Any:
        """An iterator giving ``batch`` (a global batch, as the dataset's) over and over: the step
        without any input pipeline."""
        import tensorflow as tf

        return self.iterator(tf.data.Dataset.from_tensors(batch).repeat())

    def profile(self, element_spec: Any, batch_size: int, *, sample: Any = None) -> StepProfile:
        """The step on the device alone (see StepProfile), measured once per model, spec and batch
        (inside ``session``), on ``sample`` (a real batch: strings and sequence lengths as the
        data has them) or, without one, a synthetic batch of the spec."""
        import tensorflow as tf

        batch = sample if sample is not None else synthetic(element_spec, batch_size)
        # what the step takes: two pipelines of the same rows share one profile
        key = (
            batch_size,
            tuple((t.dtype.name, tuple(t.shape[1:])) for t in tf.nest.flatten(self._split(batch))),
        )
        known = _PROFILES.setdefault(self.model, {})
        if key not in known:
            known[key] = self._measure(batch, batch_size)
        return known[key]

    def _measure(self, batch: Any, batch_size: int) -> StepProfile:
        """ROUNDS rounds, each timing the three configurations back to back, so a slow spell of
        the machine hits a round's figures together; each round's ratios, then their medians.
        The larger batch is ``batch`` LARGER times over."""
        import tensorflow as tf

        k, bigger = STEPS_PER_CALL, batch_size * LARGER
        iterator = self.repeating(batch)
        one_steps, loop_steps = self._steps_for(iterator, per_call=1), self._steps_for(iterator, per_call=k)
        try:
            large = self.repeating(tf.nest.map_structure(lambda t: tf.concat([t] * LARGER, 0), batch))
            large_steps, failed = self._steps_for(large, per_call=1), ""
        except tf.errors.ResourceExhaustedError:
            large, failed = None, f"a batch of {bigger} does not fit in device memory"
        ones, loops, larger = [], [], []
        for _ in range(ROUNDS):
            ones.append(self._seconds_per_step(iterator, per_call=1, steps=one_steps))
            loops.append(self._seconds_per_step(iterator, per_call=k, steps=loop_steps))
            if large is not None:
                big = self._seconds_per_step(large, per_call=1, steps=large_steps)
                larger.append((bigger / big) / (batch_size / ones[-1]))
        shares = sorted(max(0.0, 1 - loop / one) for one, loop in zip(ones, loops, strict=True))
        return StepProfile(
            batch_size,
            k,
            float(np.median(ones)),
            float(np.median(loops)),
            float(np.median(shares)),
            (shares[0], shares[-1]),
            ROUNDS,
            bigger,
            float(np.median(larger)) if larger else None,
            failed,
        )

    def step_seconds(self, element_spec: Any, batch_size: int) -> float:
        """Median step time on a synthetic batch, one step per call (no input pipeline involved)."""
        return self.profile(element_spec, batch_size).per_call_s

    def layer_shares(self, element_spec: Any, batch_size: int, *, repeats: int = 5) -> list[dict[str, Any]]:
        """Each layer's share of the forward time: prefix models timed, differences taken."""
        import keras

        model = self.model
        if not getattr(model, "inputs", None):
            return []  # subclassed models have no layer graph to cut
        x, _ = self._split(synthetic(element_spec, batch_size))
        cumulative, names = [], []
        for layer in model.layers:
            if isinstance(layer, keras.layers.InputLayer):
                continue
            try:
                prefix = keras.Model(model.inputs, layer.output)
            except Exception:
                continue
            forward = functools.partial(prefix, training=False)
            cumulative.append(median_seconds(forward, x, repeats=repeats, warmup=1))
            names.append(layer.name)
        own = [max(0.0, t - (cumulative[i - 1] if i else 0.0)) for i, t in enumerate(cumulative)]
        total = sum(own) or 1.0
        return sorted(
            ({"name": n, "share": round(o / total, 4)} for n, o in zip(names, own, strict=True)),
            key=lambda d: -d["share"],
        )

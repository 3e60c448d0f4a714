"""``tfgpu diagnose``: is the GPU waiting for input, for the host, or is the device the limit?

Measures, after warm-up: the pipeline alone; the device alone (a simulated device, a target rate,
or a compiled Keras model's real step, run as the Trainer runs it: its own execution, under the
strategy the model was made in, on a real batch repeated, one step per call, K steps per call and
at 4x the batch, in paired rounds whose medians decide and whose range is the spread; measured
once per model and step input, ``device.StepProfile``); both together with the wait for input timed
every step (three runs, the median deciding, see ``judge``; a model runs inside the Trainer's
compiled loop and the wait is read from the graph); the CPU seconds per example; and every stage's
rate. Gives the TensorFlow profiler's verdict with the figures that decide it, and advice ranked by
its gain: measured where diagnose can run the change (steps per call and a larger batch with a
model; ``apply=True`` for what does not change results: tf.data options, prefetch), otherwise
estimated from the measured rates and marked so, never above what the device alone reaches.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tfgpu import host
from tfgpu import verdict as verdicts
from tfgpu.callable_module import make_callable
from tfgpu.diagnose import advice as advice_mod
from tfgpu.diagnose import chain, judge, measure
from tfgpu.diagnose.apply import tuned
from tfgpu.diagnose.device import ModelDevice, RateDevice, SimulatedDevice
from tfgpu.errors import ConfigError

__all__ = ["Diagnosis", "ModelDevice", "RateDevice", "SimulatedDevice", "diagnose", "tuned"]


def __getattr__(name: str) -> Any:
    """``tfgpu.diagnose.workloads`` without importing it first, as the README writes it."""
    if name == "workloads":
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class Diagnosis:
    verdict: verdicts.Verdict
    pipeline_examples_per_s: float
    device_examples_per_s: float
    together_examples_per_s: float
    cpu_seconds_per_example: float
    cores: int
    batch_size: int
    device: str
    stages: list[dict[str, Any]]
    advice: list[advice_mod.Advice]
    layers: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, float]] = field(default_factory=list)
    applied: dict[str, Any] | None = None
    decided_by: str = ""  # the figures and cut-offs the verdict follows from
    certain: bool = True  # False: repeated runs disagreed, the median figures decided
    spread: dict[str, list[float]] = field(default_factory=dict)  # [min, max] over the runs
    step: dict[str, Any] | None = None  # a real model's StepProfile: the step on the device alone
    memory: Any = None  # a real model's step in device memory (train.footprint.Footprint)

    @property
    def cores_needed(self) -> float:
        return self.cpu_seconds_per_example * self.device_examples_per_s

    @property
    def device_utilization(self) -> float:
        return min(1.0, self.together_examples_per_s / max(self.device_examples_per_s, 1e-9))

    def to_dict(self) -> dict[str, Any]:
        return {
            "bottleneck": self.verdict.bottleneck,
            "input_bound": self.verdict.input_bound,
            "verdict": self.verdict.sentence(),
            "borderline": self.verdict.borderline,
            "decided_by": self.decided_by,
            "certain": self.certain,
            "spread": self.spread,
            "input_wait_fraction": self.verdict.input_wait_fraction,
            "host_overhead_fraction": self.verdict.host_overhead_fraction,
            "pipeline_examples_per_s": round(self.pipeline_examples_per_s, 1),
            "device_examples_per_s": round(self.device_examples_per_s, 1),
            "together_examples_per_s": round(self.together_examples_per_s, 1),
            "device_utilization": round(self.device_utilization, 4),
            "cpu_seconds_per_example": self.cpu_seconds_per_example,
            "cores": self.cores,
            "cores_needed": round(self.cores_needed, 2),
            "batch_size": self.batch_size,
            "device": self.device,
            "stages": [
                {k: v for k, v in s.items() if k in ("name", "kind", "examples_per_s", "share", "detail")}
                for s in self.stages
            ],
            "step": self.step,
            "memory": None if self.memory is None else self.memory.to_dict(),
            "layers": self.layers,
            "advice": [a.to_dict() for a in self.advice],
            "applied": self.applied,
            "timeline": self.timeline,
        }


def _stage_table(stages: list[chain.Stage], *, elements: int, warmup: int) -> list[dict[str, Any]]:
    rows, previous, previous_cpu = [], 0.0, 0.0
    for index, stage in enumerate(stages):
        per_element = chain.examples_per_element(stages, index)
        timed, scale = (stage.dataset, per_element) if per_element > 1 else (stage.dataset.batch(256), 256)
        # unbatched prefixes are timed in batches, or Python's per-element cost would dominate
        rate, cpu = measure.element_rate(
            timed, elements=max(4, elements // scale), warmup=warmup if per_element > 1 else 2
        )
        rate, cumulative_cpu = rate * scale, cpu / scale
        cumulative = 1.0 / rate
        rows.append(
            {
                "name": stage.name,
                "kind": stage.kind,
                "parallel": stage.parallel,
                "python": stage.python,
                "random": stage.random,
                "detail": stage.detail,
                "examples_per_s": round(rate, 1),
                "cumulative_s": cumulative,
                "own_s": max(0.0, cumulative - previous),
                "cpu_per_example_s": max(0.0, cumulative_cpu - previous_cpu),
                "batched": per_element > 1,
            }
        )
        previous, previous_cpu = max(previous, cumulative), max(previous_cpu, cumulative_cpu)
    total = sum(r["own_s"] for r in rows) or 1.0
    for row in rows:
        row["share"] = round(row["own_s"] / total, 4)
        row["per_example_s"] = row["own_s"]
    return rows


def _deterministic_prefix_share(rows: list[dict[str, Any]]) -> float:
    """Share of pipeline time in deterministic stages before anything random, when that includes
    expensive work (>= 100 µs per example): what a cache would save from the second epoch on."""
    share, expensive = 0.0, False
    for row in rows:
        if row["kind"] in ("shuffle", "cache") or row["python"] or row["random"]:
            break
        share += row["share"]
        expensive = expensive or row["per_example_s"] >= advice_mod.TINY_ELEMENT_S
    return share if expensive else 0.0


def element_spec(dataset: Any) -> Any:
    """The dataset's element spec with every shape known but the batch dimension.

    ``tf.numpy_function`` and ``tf.py_function`` leave shapes unknown (even their rank); the
    shapes of one real element stand in for them, so synthetic batches and size estimates work.
    """
    import tensorflow as tf

    spec = dataset.element_spec
    if all(s.shape.rank is not None and None not in s.shape[1:] for s in tf.nest.flatten(spec)):
        return spec
    first = next(iter(dataset.take(1)))
    return tf.nest.map_structure(lambda t: tf.TensorSpec([None, *t.shape[1:]], t.dtype), first)


def _shaped(dataset: Any) -> Any:
    """``dataset`` with the shapes ``element_spec`` found, where TensorFlow did not know them: a
    compiled step needs at least their rank."""
    import tensorflow as tf

    spec = element_spec(dataset)
    if spec == dataset.element_spec:
        return dataset

    def fix(*element: Any) -> Any:
        return tf.nest.map_structure(
            lambda t, s: tf.ensure_shape(t, s.shape), element[0] if len(element) == 1 else element, spec
        )

    return dataset.map(fix)


def _fits_in_memory(dataset: Any, spec: Any, batch: int) -> bool:
    """Whether the (finite) dataset's elements fit in a quarter of the available memory."""
    import numpy as np
    import tensorflow as tf

    from tfgpu.data.pipeline import MEMORY_SHARE, available_memory

    count = int(dataset.cardinality())
    if count < 0:
        return False  # infinite or unknown
    per_element = 0
    for part in tf.nest.flatten(spec):
        dims = [batch if d is None else d for d in part.shape.as_list()]
        per_element += int(np.prod(dims)) * (part.dtype.size if part.dtype != tf.string else 64)
    return count * per_element <= MEMORY_SHARE * available_memory()


def diagnose(
    dataset: Any,
    *,
    model: Any = None,
    step_time_s: float | None = None,
    target_rate: float | None = None,
    steps: int = 40,
    warmup: int = 5,
    apply: bool = False,
    service_workers: int = 0,
) -> Diagnosis:
    """Measure ``dataset`` (a batched tf.data.Dataset) against one device side (exactly one of
    ``model`` — a compiled Keras model —, ``step_time_s`` or ``target_rate`` in examples/s).
    With ``apply``, the tuned pipeline is measured again; with ``service_workers`` too, through a
    tf.data service of that many worker processes started on this host."""
    if sum(v is not None for v in (model, step_time_s, target_rate)) != 1:
        raise ConfigError(
            "Give exactly one device side: model, step_time_s or target_rate",
            value={"model": model is not None, "step_time_s": step_time_s, "target_rate": target_rate},
            fix="e.g. --step-time 30ms to ask whether the pipeline can feed a GPU doing 30 ms steps",
        )
    run = measure.pipeline_alone(dataset, steps=steps, warmup=warmup)
    batch = run.batch_size
    device = (
        ModelDevice(model)
        if model is not None
        else SimulatedDevice(step_time_s)
        if step_time_s
        else RateDevice(target_rate, batch)
    )
    spec = element_spec(dataset)
    with device.session(spec):
        result = _measured(dataset, device, run, spec, steps=steps, warmup=warmup)
        if apply:
            _apply(result, dataset, device, run, steps=steps, warmup=warmup, service_workers=service_workers)
    if model is not None:
        from tfgpu.train.step import footprint

        result.memory = footprint.memory(model, batch_size=batch)
    return result


def _together(
    dataset: Any, device: Any, *, steps: int, warmup: int, device_step: float, per_call: int = 1
) -> Any:
    """Input and device together: a model as the Trainer runs it, a simulated device in a loop."""
    if isinstance(device, ModelDevice):
        return measure.together_in_graph(
            _shaped(dataset), device, steps=steps, warmup=warmup, per_call=per_call
        )
    return measure.together(dataset, device, steps=steps, warmup=warmup, device_step_s=device_step)


def _measured(dataset: Any, device: Any, run: Any, spec: Any, *, steps: int, warmup: int) -> Diagnosis:
    batch = run.batch_size
    step = device.profile(spec, batch, sample=run.sample) if isinstance(device, ModelDevice) else None
    device_step = step.per_call_s if step else device.step_seconds(spec, batch)
    device_rate = batch / device_step
    prefetched = chain.prefetch_at_end(chain.walk(dataset))
    # K steps per call with the input attached, run right after each one-per-call run
    loop = step is not None and step.steps_per_call_speedup >= advice_mod.MIN_GAIN

    def measure_round() -> judge.Round:
        together = _together(dataset, device, steps=steps, warmup=warmup, device_step=device_step)
        found = judge.judge_round(
            together,
            pipeline_rate=run.examples_per_s,
            device_rate=device_rate,
            prefetched=prefetched,
            overhead=None if step is None else step.overhead,
            overhead_why="" if step is None else _overhead_why(step),
        )
        if not loop:
            return found
        k = step.steps_per_call
        looped = _together(
            dataset, device, steps=max(steps, 3 * k), warmup=warmup, device_step=device_step, per_call=k
        )
        return dataclasses.replace(found, in_loop_gain=looped.examples_per_s / together.examples_per_s)

    judgement = judge.judge(measure_round)
    chosen = judgement.chosen
    stages = _stage_table(chain.walk(dataset), elements=steps * batch, warmup=warmup)
    facts = advice_mod.Facts(
        pipeline_rate=run.examples_per_s,
        device_rate=device_rate,
        together_rate=chosen.together_rate,
        cores=host.cores(),
        cpu_s_per_example=run.cpu_s_per_example,
        stages=stages,
        prefetch_at_end=prefetched,
        input_bound=chosen.verdict.input_bound,
        host_overhead=chosen.overhead,
        deterministic_prefix_share=_deterministic_prefix_share(stages),
        fits_in_memory=_fits_in_memory(dataset, spec, batch),
        gpu_model=isinstance(device, ModelDevice) and _on_gpu(),
        step=step,
        steps_per_call_gain=chosen.in_loop_gain,
    )
    return Diagnosis(
        verdict=chosen.verdict,
        pipeline_examples_per_s=run.examples_per_s,
        device_examples_per_s=device_rate,
        together_examples_per_s=chosen.together_rate,
        cpu_seconds_per_example=run.cpu_s_per_example,
        cores=facts.cores,
        batch_size=batch,
        device=device.description,
        stages=stages,
        advice=advice_mod.advise(facts),
        layers=device.layer_shares(spec, batch) if isinstance(device, ModelDevice) else [],
        timeline=chosen.run.steps,
        decided_by=chosen.decided_by,
        certain=judgement.certain,
        spread=judgement.spread(),
        step=None if step is None else step.to_dict(),
    )


def _overhead_why(step: Any) -> str:
    low, high = step.overhead_spread
    return (
        f"the step took {step.per_call_s * 1000:.3g} ms one per call and {step.in_loop_s * 1000:.3g} ms "
        f"with {step.steps_per_call} per call (median of {step.rounds} rounds; overhead {low:.0%}-{high:.0%})"
    )


def _apply(
    result: Diagnosis, dataset: Any, device: Any, run: Any, *, steps: int, warmup: int, service_workers: int
) -> None:
    """Measure the tuned pipeline again (and through a local tf.data service); record the gains."""
    device_step = result.batch_size / result.device_examples_per_s
    tuned_dataset, changes = tuned(dataset)
    again = _together(tuned_dataset, device, steps=steps, warmup=warmup, device_step=device_step)
    gain = again.examples_per_s / max(result.together_examples_per_s, 1e-9)
    for item in result.advice:
        if item.kind in ("parallelize-map", "prefetch", "parallel-read"):
            item.measured_speedup = gain
    result.applied = {
        "changes": changes,
        "examples_per_s": round(again.examples_per_s, 1),
        "input_wait_fraction": round(again.input_wait_fraction, 4),
        "measured_speedup": round(gain, 3),
        "device_utilization": round(min(1.0, again.examples_per_s / result.device_examples_per_s), 4),
        "timeline": again.steps,
    }
    if service_workers:
        result.applied["service"] = _through_service(
            tuned_dataset, result.stages, device, result.advice, workers=service_workers, steps=steps,
            warmup=warmup, device_step=device_step, baseline=result.together_examples_per_s,
        )  # fmt: skip
    result.advice = advice_mod.ranked_by_measurement(result.advice)


def _through_service(
    dataset: Any,
    stages: list[dict[str, Any]],
    device: Any,
    items: list[Any],
    *,
    workers: int,
    steps: int,
    warmup: int,
    device_step: float,
    baseline: float,
) -> dict[str, Any]:
    """The tuned pipeline run on a local tf.data service, measured together with the device.

    Every worker runs the whole pipeline (no sharding): what is measured is the rate at which
    the service delivers batches, not which elements; a dynamic split per element (a range or
    from_tensor_slices source) would measure the dispatcher's requests instead."""
    import tensorflow as tf

    from tfgpu.data.service import DataService, ServiceOptions

    python = [s["name"] for s in stages if s["python"]]
    if python:
        return {
            "workers": workers,
            "skipped": f"stage {python[0]} calls Python (py_function / numpy_function), which a tf.data "
            "service worker cannot run: replace it with TensorFlow ops first",
        }
    with DataService(ServiceOptions(workers=workers)) as service:
        served = dataset.apply(
            tf.data.experimental.service.distribute(
                processing_mode=tf.data.experimental.service.ShardingPolicy.OFF,
                service=service.address,
                compression=None,
            )
        ).prefetch(tf.data.AUTOTUNE)
        run = _together(served, device, steps=steps, warmup=warmup, device_step=device_step)
    gain = run.examples_per_s / max(baseline, 1e-9)
    for item in items:
        if item.kind == "more-input-workers":
            item.measured_speedup = gain
    return {
        "workers": workers,
        "examples_per_s": round(run.examples_per_s, 1),
        "input_wait_fraction": round(run.input_wait_fraction, 4),
        "measured_speedup": round(gain, 3),
    }


def _on_gpu() -> bool:
    import tensorflow as tf

    return bool(tf.config.list_logical_devices("GPU"))


make_callable(__name__, diagnose)  # tfgpu.diagnose(...) whatever was imported first (see callable_module)

"""Advice from measurements: each item a ``kind`` and a gain estimated from what was measured.

Estimates use the measured rates: P the pipeline alone (examples/s), D the device alone, R both
together, C the cores, c the CPU seconds per example, and each stage's share of the pipeline's time.
A fix that speeds the pipeline to P' gives min(P', D) together (with prefetch, the slower side sets
the pace), so its estimated speedup is min(P', D) / R; with no prefetch at the end, 1 / (1/P' + 1/D)
over R, since input and device still take turns.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

KINDS = (
    "prefetch",
    "parallelize-map",
    "parallel-read",
    "vectorize",
    "cache",
    "offline-preprocess",
    "replace-python-function",
    "steps-per-execution",
    "increase-batch-size",
    "mixed-precision",
    "more-input-workers",
    "none",
)  # cheapest fix first
MIN_GAIN = 1.05  # a fix estimated to gain less is not offered: "1.00x" is not advice
SIGNIFICANT = 0.2  # a stage that takes at least this share of the pipeline's time matters
TINY_ELEMENT_S = 100e-6  # per-element work this small is dominated by per-call overhead


@dataclass
class Advice:
    kind: str
    detail: str
    estimated_speedup: float
    measured_speedup: float | None = None
    commands: tuple[str, ...] = ()  # command lines that carry the advice out, where there are some

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["estimated_speedup"] = round(self.estimated_speedup, 2)
        out["commands"] = list(self.commands)
        if self.measured_speedup is not None:
            out["measured_speedup"] = round(self.measured_speedup, 2)
        out["tried"] = self.tried
        return out

    @property
    def tried(self) -> bool:
        """Measured, and slower: reported as tried, not advised."""
        return self.measured_speedup is not None and self.measured_speedup < 1.0


def ranked_by_measurement(items: list[Advice]) -> list[Advice]:
    """``items`` after ``--apply`` measured some: ordered by the measured gain where there is one
    (the estimate elsewhere), and a fix measured slower last, as tried (diagnose put prefetch,
    estimated 1.09x and measured 0.87x, first)."""

    def gain(a: Advice) -> float:
        return a.measured_speedup if a.measured_speedup is not None else a.estimated_speedup

    return sorted(items, key=lambda a: (a.tried, a.kind == "more-input-workers", -round(gain(a), 2)))


@dataclass
class Facts:
    pipeline_rate: float  # P
    device_rate: float  # D
    together_rate: float  # R
    cores: int
    cpu_s_per_example: float
    stages: list[dict[str, Any]]  # name, kind, parallel, python, share, per_example_s
    prefetch_at_end: bool
    input_bound: str
    host_overhead: float
    deterministic_prefix_share: float  # share of pipeline time before the first random stage
    fits_in_memory: bool
    gpu_model: bool  # a real model on a GPU with fast fp16 / bf16
    step: Any = None  # a real model's device.StepProfile (None: a simulated device or a rate)
    steps_per_call_gain: float | None = None  # K steps per call over one, the input attached, measured


def service_hosts(cores_needed: float, cores: int) -> int:
    """Hosts of ``cores`` cores that supply what this one cannot (one worker process per core)."""
    return max(1, math.ceil((cores_needed - cores) / max(cores, 1)))


def service_commands(hosts: int) -> tuple[str, ...]:
    """Start a service over ``hosts`` hosts (hosts.txt lists them, this one first) and train through it."""
    from tfgpu.data.service import DEFAULT_CLUSTER_PORT as port

    return (
        f"tfgpu data-service --workers 1 --port {port} --hosts hosts.txt --node-rank R"
        f"   # on each of the {hosts} hosts in hosts.txt, R its line from 0",
        f"tfgpu train TASK --data-service grpc://HOST0:{port}   # HOST0: the first line of hosts.txt",
    )


def _gain(f: Facts, new_pipeline_rate: float) -> float:
    """Speedup of a faster pipeline. With a prefetch at the end the slower side sets the pace; without
    one, input and device still take turns (1/P' + 1/D per example), so a faster stage alone gains
    less than the prefetch that is missing, and the prefetch ranks first."""
    if f.prefetch_at_end:
        together = min(new_pipeline_rate, f.device_rate)
    else:
        together = 1.0 / (1.0 / max(new_pipeline_rate, 1e-9) + 1.0 / max(f.device_rate, 1e-9))
    return max(1.0, together / max(f.together_rate, 1e-9))


def _speed_stage(f: Facts, share: float, factor: float) -> float:
    """Pipeline rate once a stage taking ``share`` of the pipeline's time runs ``factor`` times faster."""
    return f.pipeline_rate / max(1e-9, 1 - share + share / factor)


def _measured_step_advice(f: Facts) -> list[Advice]:
    """steps-per-execution and increase-batch-size from the model's own step, measured: K steps
    per call with the pipeline attached over one per call, and a LARGER x batch on the device
    alone (no faster than the pipeline alone)."""
    step, items = f.step, []
    if f.steps_per_call_gain is not None:
        gain = f.steps_per_call_gain
        items.append(
            Advice(
                "steps-per-execution",
                f"{step.overhead:.0%} of a one-step call is per-call overhead (measured: "
                f"{step.per_call_s * 1000:.3g} ms a step one per call, {step.in_loop_s * 1000:.3g} ms with "
                f"{step.steps_per_call} per call); with the input attached, {step.steps_per_call} steps per call "
                f"ran {gain:.2f}x the examples/s of one (median of paired runs): "
                f"steps_per_execution={step.steps_per_call}",
                gain,
                measured_speedup=gain,
            )
        )
    if step.larger_batch_speedup is not None:
        # the input is no faster than the best it was measured to deliver
        supplied = max(f.pipeline_rate, f.together_rate * (f.steps_per_call_gain or 1.0))
        # the device alone's ratio, or less where the input could not keep up with it
        limit = supplied / max(f.together_rate, 1e-9)
        gain = min(step.larger_batch_speedup, limit)
        capped = f" (the input, measured at {supplied:,.0f} examples/s, limits it)" if gain == limit else ""
        items.append(
            Advice(
                "increase-batch-size",
                f"a batch of {step.larger_batch} ran {step.larger_batch_speedup:.2f}x the examples/s of "
                f"{step.batch_size} on the device alone{capped}; scale the learning rate with the batch",
                gain,
                measured_speedup=gain,
            )
        )
    return items


def _estimated_step_advice(f: Facts) -> list[Advice]:
    """Without a model the per-step overhead is the loop's time outside the wait and the device
    step; the gains are estimates, and none above what the device alone reaches."""
    if f.host_overhead < 0.15:
        return []
    ceiling = max(1.0, f.device_rate / max(f.together_rate, 1e-9))
    removed = [1 / max(1e-9, 1 - f.host_overhead + f.host_overhead / k) for k in (8, 4)]
    what = f"{f.host_overhead:.0%} of each step is per-step overhead (estimated, not measured)"
    return [
        Advice(
            "steps-per-execution",
            f"{what}: run 8 steps per call (steps_per_execution=8)",
            min(removed[0], ceiling),
        ),
        Advice(
            "increase-batch-size",
            f"{what}: a 4x larger batch spreads it over 4x the examples",
            min(removed[1], ceiling),
        ),
    ]


def advise(f: Facts) -> list[Advice]:
    items: list[Advice] = []
    input_bound = f.input_bound != "no"
    if input_bound and not f.prefetch_at_end and f.device_rate > 0:
        overlapped = min(f.pipeline_rate, f.device_rate)
        items.append(
            Advice(
                "prefetch",
                "no prefetch at the end: input and device steps run one after the other; "
                "add .prefetch(tf.data.AUTOTUNE)",
                max(1.0, overlapped / max(f.together_rate, 1e-9)),
            )
        )
    for stage in f.stages:
        share = stage["share"]
        if share < SIGNIFICANT or not input_bound:
            continue
        if stage["python"]:
            items.append(
                Advice(
                    "replace-python-function",
                    f"{stage['name']} runs a Python function ({share:.0%} of pipeline time): "
                    "it holds the GIL, so it cannot run in parallel; rewrite it with TensorFlow ops",
                    _gain(f, _speed_stage(f, share, f.cores)),
                )
            )
        elif stage["kind"] == "map" and not stage["parallel"]:
            items.append(
                Advice(
                    "parallelize-map",
                    f"{stage['name']} runs sequentially ({share:.0%} of pipeline time): "
                    "map(..., num_parallel_calls=tf.data.AUTOTUNE)",
                    _gain(f, _speed_stage(f, share, f.cores)),
                )
            )
        elif (
            stage["kind"] in ("interleave", "source")
            and not stage["parallel"]
            and "TFRecord" in stage["name"] + stage.get("detail", "")
        ):
            items.append(
                Advice(
                    "parallel-read",
                    f"{stage['name']} reads files one at a time ({share:.0%}): "
                    "interleave(..., num_parallel_calls=tf.data.AUTOTUNE) over the shards",
                    _gain(f, _speed_stage(f, share, f.cores)),
                )
            )
        if (
            stage["kind"] == "map"
            and not stage["batched"]
            and 0 < stage["cpu_per_example_s"] < TINY_ELEMENT_S
            and share >= SIGNIFICANT
        ):
            work = stage["cpu_per_example_s"]
            items.append(
                Advice(
                    "vectorize",
                    f"{stage['name']} does {work * 1e6:.0f} µs of CPU work per element: "
                    "per-call overhead dominates; batch first, then map over whole batches",
                    _gain(f, f.pipeline_rate / max(1e-9, 1 - share + share / 4.0)),
                )
            )  # the overhead is the CPU cost saved
    if input_bound and f.deterministic_prefix_share >= SIGNIFICANT:
        after = _speed_stage(f, f.deterministic_prefix_share, 1e6)
        if f.fits_in_memory:
            items.append(
                Advice(
                    "cache",
                    f"{f.deterministic_prefix_share:.0%} of pipeline time is deterministic work repeated every epoch: "
                    ".cache() after it (from the second epoch)",
                    _gain(f, after),
                )
            )
        else:
            items.append(
                Advice(
                    "offline-preprocess",
                    f"{f.deterministic_prefix_share:.0%} of pipeline time is deterministic work repeated every "
                    "epoch and too big to cache: do it once, e.g. tfgpu convert --resize HxW",
                    _gain(f, after),
                )
            )
    needed = f.cpu_s_per_example * f.device_rate
    prerequisite = None  # a fix that more-input-workers needs done first is offered with it
    best_local = max([f.together_rate] + [a.estimated_speedup * f.together_rate for a in items])
    if input_bound and needed > 1.5 * f.cores and best_local < 0.95 * f.device_rate:
        more = service_hosts(needed, f.cores)
        need = (
            f"feeding {f.device_rate:,.0f} examples/s needs {needed:.1f} cores at "
            f"{f.cpu_s_per_example * 1000:.2f} ms CPU per example; this machine has {f.cores}: "
        )
        workers = f"{more + 1} tf.data service workers on hosts like this one (one per host: this one and {more} more host(s))"
        python = [stage["name"] for stage in f.stages if stage["python"]]
        if python:  # a service worker cannot run a Python stage: no command that would fail
            detail = (
                f"{need}first replace stage {python[0]}, which calls Python (py_function / numpy_function) "
                f"and so cannot run on a tf.data service worker, with TensorFlow ops; then {workers} "
                "would supply it (docs/data-service.md), or preprocess offline"
            )
            commands: tuple[str, ...] = ()
            prerequisite = "replace-python-function"
        else:
            detail = f"{need}{workers} would supply it (docs/data-service.md), or preprocess offline"
            commands = service_commands(more + 1)
        items.append(
            Advice("more-input-workers", detail, max(1.0, f.device_rate / best_local), commands=commands)
        )
    if not input_bound:
        items += _measured_step_advice(f) if f.step is not None else _estimated_step_advice(f)
    if not input_bound and f.gpu_model:
        items.append(
            Advice(
                "mixed-precision",
                "device-bound on a GPU with Tensor Cores: precision='auto' (bf16 / fp16); "
                "TensorFlow's guide reports up to 3x on modern GPUs",
                1.5,
            )
        )
    offered = [a for a in items if a.estimated_speedup >= MIN_GAIN]
    if any(a.kind == "more-input-workers" for a in offered):
        # its own gain may read small (this machine's cores stay busy), but it comes first
        offered += [a for a in items if a.kind == prerequisite and a not in offered]
    if not offered:
        detail = (
            "the input keeps up and per-step overhead is small: nothing to change on the input side"
            if not items
            else f"no fix found is estimated to gain {MIN_GAIN - 1:.0%} or more "
            f"(considered: {', '.join(sorted({a.kind for a in items}))})"
        )
        return [Advice("none", detail, 1.0)]
    items = offered
    # Ranked by gain, gains within 0.1x counting as equal (then the cheaper fix first, the order of
    # KINDS). more-input-workers comes after every fix this machine can make: it needs more machines,
    # and its gain is measured on top of those fixes.
    return sorted(
        items,
        key=lambda a: (a.kind == "more-input-workers", -round(a.estimated_speedup, 1), KINDS.index(a.kind)),
    )

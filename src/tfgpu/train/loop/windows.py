"""Log windows: what the host reads from the device once per window, and the hooks run then.

Both training loops (the in-graph loop and the parameter-server coordinator) dispatch executions
without reading anything back and hand each execution's accumulators to a ``Window``. At the end
of a window (every ``log_every`` steps, at a checkpoint, at an epoch's end) ``RunLog.close`` reads
them (the one host-device sync of the window) and runs the same hooks for both loops: the NaN
check, a timeline point, TensorBoard scalars, progress, and the checkpoint.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tfgpu import graphs, verdict
from tfgpu.errors import ConfigError, TfgpuError
from tfgpu.monitor import Monitor
from tfgpu.train.loop.result import Progress, Steady, TrainResult, WarmEpoch, WarmUp
from tfgpu.train.pieces.callbacks import pythonify
from tfgpu.train.pieces.options import TrainOptions
from tfgpu.train.step.execution import Executed


@dataclass
class Window:
    """The executions dispatched since the last read, with the step each one started at."""

    epoch: int
    first_step: int
    started: float = field(default_factory=time.perf_counter)
    executions: list[tuple[int, Executed]] = field(default_factory=list)
    steps: int = 0
    startup: Executed | None = None  # the epoch's first execution: its first fetch built buffers
    workers: int = 1  # executions running side by side (parameter-server workers)
    warm_up: tuple[float, int, Executed] | None = None

    def add(
        self, stats: Executed, *, taken: int, epoch_start: bool = False, warm_up: float | None = None
    ) -> None:
        """One execution's accumulators.

        ``epoch_start``: its first fetch built the epoch's iterator buffers, a start-up cost left
        out of the steady-state figures. ``warm_up``: the seconds of a first call, which traced
        and instantiated the function; that execution is left out of them whole when the window
        has others.
        """
        self.executions.append((self.first_step + self.steps, stats))
        self.steps += taken
        if warm_up is not None:
            self.warm_up = (warm_up, taken, stats)
        elif epoch_start:  # read with the rest in ``read``: reading here would sync mid-window
            self.startup = stats

    @property
    def startup_wait(self) -> float:
        """The first fetch of an epoch: building buffers, not steady state (0 when none)."""
        return 0.0 if self.startup is None else float(self.startup.first_wait)

    @property
    def last_step(self) -> int:
        return self.first_step + self.steps


@dataclass(frozen=True)
class WindowFigures:
    logs: dict[str, Any]  # the model's metric results at the window's end (running over the epoch)
    steps: int
    examples: float  # rows trained on in the window, all workers
    wall: float  # seconds of the window, less the start-up costs (see Window.add)
    wait: float  # seconds waiting for input, less the same
    timed_steps: int  # the steps those seconds cover
    timed_examples: float
    raw_wall: float
    raw_wait: float
    startup_wait: float = 0.0  # the epoch's first fetch, read here with the rest (Window.startup)

    @property
    def loss(self) -> float:
        return float(self.logs.get("loss", float("nan")))


def read(window: Window, *, workers: int = 1, nan_raises: bool = True) -> WindowFigures:
    """Read the window's accumulators (this syncs with the device); raise on a non-finite loss
    unless ``nan_raises`` is off (a TerminateOnNaN callback stops the run instead, as in Keras).

    ``workers``: the input pipelines training side by side (each execution counts its own rows).
    """
    wait, examples = 0.0, 0.0
    for first, stats in window.executions:
        bad = int(float(stats.first_bad))
        if bad >= 0 and nan_raises:
            _non_finite(window, at=first + bad + 1, logs=pythonify(stats.logs))
        wait += float(stats.wait)
        examples += float(stats.examples) * workers
    logs = pythonify(window.executions[-1][1].logs)
    if nan_raises and not all(math.isfinite(v) for v in logs.values() if isinstance(v, float)):
        _non_finite(window, at=None, logs=logs)
    # side-by-side executions wait in parallel: the share is of all workers' time
    wait /= window.workers
    raw_wall = time.perf_counter() - window.started
    startup_wait = wall_out = wait_out = window.startup_wait
    timed, timed_examples = window.steps, examples
    if window.warm_up is not None:  # its seconds hold its own input wait: the wall loses them once
        seconds, taken, stats = window.warm_up
        wall_out, wait_out, timed = seconds, float(stats.wait), timed - taken
        timed_examples -= float(stats.examples) * workers
    return WindowFigures(
        logs,
        window.steps,
        examples,
        max(0.0, raw_wall - wall_out),
        max(0.0, wait - wait_out),
        timed,
        timed_examples,
        raw_wall,
        wait,
        startup_wait,
    )


def _non_finite(window: Window, *, at: int | None, logs: dict[str, Any]) -> None:
    where = f"at step {at} " if at is not None else ""
    bad = {k: v for k, v in logs.items() if isinstance(v, float) and not math.isfinite(v)}
    raise TfgpuError(
        f"The loss became non-finite {where}(found when reading steps {window.first_step + 1}-{window.last_step})",
        value=bad or logs,
        fix="lower the learning rate, check the data for NaN/inf, or use precision='fp32'",
    )


def _share(wait: float, wall: float) -> float:
    return min(1.0, wait / wall) if wall > 0 else 0.0


class RunLog:
    """One fit's record: history, timeline, totals, TensorBoard and progress; builds the result."""

    def __init__(
        self,
        *,
        options: TrainOptions,
        global_batch: int | None,
        is_chief: bool,
        total_steps: int | None,
        on_progress: Callable[[Progress], None] | None,
        save: Callable[[int, dict[str, Any]], Any],
        workers: int = 1,
        monitor: bool = True,
    ) -> None:
        self.options, self.global_batch, self.is_chief = options, global_batch, is_chief
        self.workers = workers
        self.nan_raises = True
        self.total_steps, self.on_progress, self._save = total_steps, on_progress, save
        self.history: list[dict[str, Any]] = []
        self.timeline: list[dict[str, float]] = []
        self.examples = 0
        self.steps_run = 0  # this run's (a resumed run's counter starts past 0)
        # the windows' seconds and input wait, start-up costs included
        self.raw_wait = self.raw_wall = 0.0
        self.windows = 0  # windows closed
        self.epoch_steps = 0
        self.last_logs: dict[str, Any] | None = None  # the last epoch's, as on_train_end takes them
        self.logs: dict[str, Any] = {}  # the last window's
        self.started = time.perf_counter()
        self.writer = _summary_writer(options.log_dir) if is_chief else None
        # GPU utilization sampled (NVML) when asked and the replicas run on GPUs
        self.monitor = Monitor() if options.monitor_gpus and monitor else None
        # warm-up, apart from the steady state: the first call (tracing), each epoch's first fetch,
        # and epochs marked warm (one that fills a cache)
        self.tracing_s = 0.0
        self.first_fetches: list[float] = []
        self.warm_epochs: dict[int, str] = {}
        self.epochs: dict[int, Span] = {}  # timed figures per epoch

    def __enter__(self) -> RunLog:
        if self.monitor:
            self.monitor.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.monitor:
            self.monitor.stop()
        if self.writer is not None:
            self.writer.flush()

    def close(self, window: Window) -> None:
        """The end of a window: read it, then the hooks (timeline, TensorBoard, progress, checkpoint)."""
        if not window.steps:
            return
        figures = read(window, workers=self.workers, nan_raises=self.nan_raises)
        self.examples += figures.examples
        self.steps_run += window.steps
        self.raw_wait += figures.raw_wait
        self.raw_wall += figures.raw_wall
        self.windows += 1
        if window.warm_up is not None:
            self.tracing_s += window.warm_up[0]
        if window.startup is not None:
            self.first_fetches.append(figures.startup_wait)
        if figures.timed_steps:
            steps, examples, wall, wait = (
                figures.timed_steps,
                figures.timed_examples,
                figures.wall,
                figures.wait,
            )
        else:  # a window that was all start-up: its point shows it as it was
            steps, examples, wall, wait = figures.steps, figures.examples, figures.raw_wall, figures.raw_wait
        if figures.timed_steps or window.epoch in self.warm_epochs:  # steady state: timed steps only
            self.epochs.setdefault(window.epoch, Span()).add(steps, examples, wall, wait)
        self.epoch_steps += figures.steps
        self.logs = figures.logs
        step = window.last_step
        rate = examples / max(wall, 1e-9)
        share = round(_share(wait, wall), 4)
        self._point(window, figures, rate=rate, share=share)
        self._summaries(step, figures.logs, rate=rate, wait=share)
        if self.on_progress and self.is_chief:
            self.on_progress(
                Progress(step, window.epoch, figures.loss, rate, self.wait_fraction, self.total_steps)
            )
        every = self.options.checkpoint_every
        if every and step // every > window.first_step // every:
            self._save(step, figures.logs)

    def _point(self, window: Window, figures: WindowFigures, *, rate: float, share: float) -> None:
        """The window's point on the timeline."""
        self.timeline.append(
            {
                "t": round(time.perf_counter() - self.started, 4),
                "step": window.last_step,
                "loss": figures.loss,
                "examples_per_s": round(rate, 2),
                "input_wait": share,
                "warm_up": window.epoch in self.warm_epochs or not figures.timed_steps,
            }
        )

    def _summaries(self, step: int, logs: dict[str, Any], *, rate: float, wait: float) -> None:
        """A window's TensorBoard scalars (the chief's writer, when ``log_dir`` was given)."""
        if self.writer is None:
            return
        import tensorflow as tf

        with self.writer.as_default(step=step):
            for name, value in logs.items():
                if isinstance(value, float):
                    tf.summary.scalar(name, value)
            tf.summary.scalar("examples_per_s", rate)
            tf.summary.scalar("input_wait_fraction", wait)

    def stepped_alone(self, *, examples: float, seconds: float) -> None:
        """One step run outside any execution (the replica proof's, which trains the run's first
        batch): counted in the run's steps, rows and warm-up seconds and in its epoch's steps,
        never in a window's steady figures (its seconds hold the comparison's two traces)."""
        self.examples += examples
        self.steps_run += 1
        self.epoch_steps += 1
        self.tracing_s += seconds

    def end_epoch(self, epoch: int, logs: dict[str, Any]) -> None:
        """One history entry: the epoch's logs as Keras's History keeps them, and its steps."""
        self.history.append({"epoch": epoch + 1, "steps": self.epoch_steps, **logs})
        self.last_logs = dict(logs)  # as Keras gives them to on_train_end: no epoch or steps
        self.epoch_steps = 0

    def warm_epoch(self, epoch: int, why: str) -> None:
        """Count ``epoch`` as warm-up, not steady state (``why``: e.g. "filled the cache")."""
        self.warm_epochs[epoch] = why

    @property
    def trained_any(self) -> bool:
        return bool(self.epochs) or bool(self.history)

    def steady(self) -> Span:
        """The steady state: every epoch not marked warm, start-up costs left out."""
        total = Span()
        for epoch, span in self.epochs.items():
            if epoch not in self.warm_epochs:
                total.merge(span)
        return total

    @property
    def wait_fraction(self) -> float:
        """Input wait over the steady state so far; over everything while there is none."""
        steady = self.steady()
        return steady.wait_fraction if steady.wall > 0 else _share(self.raw_wait, self.raw_wall)

    def warm_up(self) -> WarmUp:
        return WarmUp(
            tracing_s=self.tracing_s,
            first_fetches=len(self.first_fetches),
            first_fetch_s=sum(self.first_fetches),
            epochs=tuple(
                self.epochs[epoch].warm(epoch + 1, why)
                for epoch, why in sorted(self.warm_epochs.items())
                if epoch in self.epochs
            ),
        )

    def _examples_per_step(self) -> int:
        """A Dataset's global batch, as trained: its batches are its own (the Trainer's batch
        is 1 there), so the result says what a step took (a partial last batch lowers it)."""
        return round(self.examples / self.steps_run) if self.steps_run else 0

    def result(
        self, *, steps: int, epochs: int, replicas: int, final: str | None, resumed: str | None
    ) -> TrainResult:
        elapsed = time.perf_counter() - self.started
        steady = self.steady()
        has_steady = steady.steps >= MIN_STEADY_STEPS
        measured = has_steady and steady.wall > 0
        share = steady.wait_fraction if measured else _share(self.raw_wait, self.raw_wall)
        overall = self.examples / max(elapsed, 1e-9)
        return TrainResult(
            steps=steps,
            epochs=epochs,
            global_batch=self.global_batch or self._examples_per_step(),
            replicas=replicas,
            seconds=elapsed,
            examples_per_s=steady.examples_per_s if has_steady else overall,
            input_wait_fraction=share,
            verdict=verdict.verdict(input_wait_fraction=share),
            history=self.history,
            timeline=self.timeline,
            gpu_utilization=self.monitor.to_list() if self.monitor else [],
            final_checkpoint=final,
            resumed_from=resumed,
            overall_examples_per_s=overall,
            steady=steady.steady(tuple(sorted(e + 1 for e in self.epochs if e not in self.warm_epochs)))
            if has_steady
            else None,
            warm_up=self.warm_up(),
            input_wait_measured=graphs.clock_readable(),
        )


MIN_STEADY_STEPS = 8  # fewer timed steps outside warm-up are not called a steady state


@dataclass
class Span:
    """Timed steps, examples, seconds and input-wait seconds (start-up costs left out)."""

    steps: int = 0
    examples: float = 0.0
    wall: float = 0.0
    wait: float = 0.0

    def add(self, steps: int, examples: float, wall: float, wait: float) -> None:
        self.steps += steps
        self.examples += examples
        self.wall += wall
        self.wait += wait

    def merge(self, other: Span) -> None:
        self.add(other.steps, other.examples, other.wall, other.wait)

    @property
    def wait_fraction(self) -> float:
        return _share(self.wait, self.wall)

    @property
    def examples_per_s(self) -> float:
        return self.examples / max(self.wall, 1e-9)

    def steady(self, epochs: tuple[int, ...]) -> Steady:
        return Steady(epochs, self.steps, self.wall, self.examples_per_s, self.wait_fraction)

    def warm(self, epoch: int, why: str) -> WarmEpoch:
        return WarmEpoch(epoch, why, self.steps, self.wall, self.examples_per_s, self.wait_fraction)


def _summary_writer(log_dir: str | None) -> Any:
    if not log_dir:
        return None
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        raise ConfigError(
            "log_dir needs TensorBoard, which TensorFlow 2.21 no longer installs",
            value=log_dir,
            fix="pip install tensorboard",
        ) from None
    import tensorflow as tf

    return tf.summary.create_file_writer(log_dir)

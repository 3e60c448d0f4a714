"""GPU utilization and memory over time, sampled through NVML in a background thread.

NVML's "utilization" is the share of time at least one kernel ran (what nvidia-smi calls GPU-Util),
not how busy the SMs were; reports say so. Without a GPU the monitor records nothing.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tfgpu import nvml


@dataclass
class Sample:
    t: float  # seconds since start
    gpu: int
    utilization: int
    memory_used_mb: float


@dataclass
class Monitor:
    interval_s: float = 0.5
    nvml_module: Any = None
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml = self.nvml_module if self.nvml_module is not None else nvml.load_nvml()

    def __enter__(self) -> Monitor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if self._nvml is None:
            return
        try:
            self._nvml.nvmlInit()
            self._handles = [
                self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(self._nvml.nvmlDeviceGetCount())
            ]
        except Exception:  # no driver: nothing to sample
            self._handles = []
            return
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """Sample at once, then every ``interval_s``: a run shorter than one interval has a sample."""
        while True:
            self._sample()
            if self._stop.wait(self.interval_s):
                return

    def _sample(self) -> None:
        now = time.monotonic() - self._start
        for index, handle in enumerate(self._handles):
            try:
                util = self._nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception:
                continue
            self.samples.append(Sample(round(now, 3), index, int(util.gpu), round(memory.used / nvml.MIB, 1)))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()

    def mean_utilization(self) -> float | None:
        return (
            round(sum(s.utilization for s in self.samples) / len(self.samples), 1) if self.samples else None
        )

    def to_list(self) -> list[dict[str, Any]]:
        return [s.__dict__ for s in self.samples]

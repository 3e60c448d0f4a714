"""GPU facts through NVML (nvidia-ml-py), without touching TensorFlow.

Doctor, ``configure(memory_fraction=..., precision="auto")`` and the utilization monitor read the
hardware here. NVML talks to the driver directly, so asking it never initializes TensorFlow's GPU
runtime and can happen before ``tfgpu.configure``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    used_mb: float | None


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    uuid: str
    compute_capability: tuple[int, int]
    memory_total_mb: float
    memory_used_mb: float
    mig_enabled: bool | None  # None: the GPU does not support MIG
    processes: tuple[GpuProcess, ...] = ()
    utilization_percent: int | None = None

    @property
    def cc_text(self) -> str:
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"


@dataclass(frozen=True)
class NvmlReport:
    """What NVML says. ``available`` is False when there is no driver (``error_kind`` says why)."""

    available: bool
    error: str | None = None
    error_kind: str | None = None  # not-installed | library-not-found | driver-not-loaded | ...
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # highest CUDA version the driver supports, "12.4"
    gpus: tuple[GpuInfo, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_nvml() -> ModuleType | None:
    """The pynvml module (from nvidia-ml-py), or None when it is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _error_kind(nvml: Any, exc: Exception) -> str:
    code = getattr(exc, "value", None)
    kinds = {
        getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", -1): "library-not-found",
        getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", -1): "driver-not-loaded",
        getattr(nvml, "NVML_ERROR_NO_PERMISSION", -1): "no-permission",
        getattr(nvml, "NVML_ERROR_LIB_RM_VERSION_MISMATCH", -1): "driver-library-mismatch",
    }
    return kinds.get(code, "nvml-error")


def _cuda_version_text(code: int) -> str:
    return f"{code // 1000}.{(code % 1000) // 10}"


@contextlib.contextmanager
def _session(nvml: Any) -> Iterator[None]:
    nvml.nvmlInit()
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _optional(call: Any, *args: Any) -> Any:
    """NVML calls a GPU may not support (MIG, utilization, process names) return None instead."""
    try:
        return call(*args)
    except Exception:  # NVMLError_NotSupported, NoPermission, ...
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _processes(nvml: Any, handle: Any) -> tuple[GpuProcess, ...]:
    found = _optional(nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
    out = []
    for proc in found:
        used = getattr(proc, "usedGpuMemory", None)
        name = _optional(nvml.nvmlSystemGetProcessName, proc.pid)
        out.append(
            GpuProcess(
                pid=int(proc.pid),
                name=_text(name) if name is not None else "?",
                used_mb=None if used is None else round(used / MIB, 1),
            )
        )
    return tuple(out)


def _gpu(nvml: Any, index: int) -> GpuInfo:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    mig = _optional(nvml.nvmlDeviceGetMigMode, handle)
    util = _optional(nvml.nvmlDeviceGetUtilizationRates, handle)
    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    return GpuInfo(
        index=index,
        name=_text(nvml.nvmlDeviceGetName(handle)),
        uuid=_text(_optional(nvml.nvmlDeviceGetUUID, handle) or "?"),
        compute_capability=(int(major), int(minor)),
        memory_total_mb=round(memory.total / MIB, 1),
        memory_used_mb=round(memory.used / MIB, 1),
        mig_enabled=None if mig is None else bool(mig[0]),
        processes=_processes(nvml, handle),
        utilization_percent=None if util is None else int(util.gpu),
    )


def probe(nvml: Any | None = None) -> NvmlReport:
    """Read the driver and every GPU. ``nvml`` defaults to pynvml; tests pass a fake."""
    nvml = nvml if nvml is not None else load_nvml()
    if nvml is None:
        return NvmlReport(available=False, error="nvidia-ml-py is not installed", error_kind="not-installed")
    try:
        with _session(nvml):
            cuda = _optional(nvml.nvmlSystemGetCudaDriverVersion)
            return NvmlReport(
                available=True,
                driver_version=_text(nvml.nvmlSystemGetDriverVersion()),
                cuda_driver_version=None if cuda is None else _cuda_version_text(int(cuda)),
                gpus=tuple(_gpu(nvml, i) for i in range(nvml.nvmlDeviceGetCount())),
            )
    except Exception as exc:  # NVMLError and its subclasses
        kind = _error_kind(nvml, exc)
        log.debug("NVML unavailable: %s (%s)", exc, kind)
        return NvmlReport(available=False, error=str(exc), error_kind=kind)


def visible(report: NvmlReport, cuda_visible_devices: str | None) -> tuple[GpuInfo, ...]:
    """The GPUs a CUDA program sees under CUDA_VISIBLE_DEVICES (indices or GPU-/MIG- UUIDs).

    CUDA stops at the first entry it cannot match, so this does too.
    """
    if cuda_visible_devices is None:
        return report.gpus
    out: list[GpuInfo] = []
    for entry in (e.strip() for e in cuda_visible_devices.split(",")):
        match = None
        if entry.isdigit():
            match = next((g for g in report.gpus if g.index == int(entry)), None)
        elif entry:
            match = next((g for g in report.gpus if g.uuid.startswith(entry)), None)
        if match is None or match in out:
            break
        out.append(match)
    return tuple(out)

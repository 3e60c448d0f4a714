"""A stand-in for pynvml whose answers copy real GPUs', for testing GPU paths without a GPU.

It offers the pynvml functions :mod:`tfgpu.nvml` calls, and raises pynvml's own error classes
(``pynvml.NVMLError(code)`` builds the same subclasses the real library raises). Profiles hold the
values real NVML returns for those GPUs and drivers: names, compute capabilities and memory totals
as nvidia-smi shows them, the CUDA version encoded as NVML encodes it (12040 for 12.4).
``tests/test_fake_nvml.py`` checks the fake against the real pynvml's signatures, and against a real
GPU when one is present.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pynvml

MIB = 1024 * 1024

# name, compute capability, total memory in MiB (nvidia-smi's figure), MIG capable
GPU_MODELS: dict[str, tuple[str, tuple[int, int], int, bool]] = {
    "h100": ("NVIDIA H100 80GB HBM3", (9, 0), 81559, True),
    "h200": ("NVIDIA H200", (9, 0), 143771, True),
    "a100": ("NVIDIA A100-SXM4-40GB", (8, 0), 40960, True),
    "l4": ("NVIDIA L4", (8, 9), 23034, False),
    "v100": ("Tesla V100-SXM2-16GB", (7, 0), 16384, False),
    "t4": ("Tesla T4", (7, 5), 15360, False),
    "p100": ("Tesla P100-PCIE-16GB", (6, 0), 16384, False),
    "k80": ("Tesla K80", (3, 7), 11441, False),
    # Blackwell: 12.0 (RTX 50xx, RTX PRO 6000 Blackwell) and 10.0 (B200, GB200), newer than TF 2.21's build
    "rtx5090": ("NVIDIA GeForce RTX 5090", (12, 0), 32607, False),
    "b200": ("NVIDIA B200", (10, 0), 183359, True),
}


@dataclass
class FakeGpu:
    model: str
    used_mib: int = 0
    mig: bool | None = None  # None: take the model's capability (False when capable)
    processes: tuple[tuple[int, str, int], ...] = ()  # (pid, name, MiB)
    utilization: int = 0


class FakeNvml:
    """pynvml's interface over a fixed set of GPUs.

    Args:
        gpus: the GPUs, in NVML index order.
        driver: driver version string as nvmlSystemGetDriverVersion returns it.
        cuda: CUDA version encoded as nvmlSystemGetCudaDriverVersion returns it (12040 = 12.4).
        init_error: an NVML error code that nvmlInit raises (e.g. NVML_ERROR_LIBRARY_NOT_FOUND).
    """

    NVMLError = pynvml.NVMLError
    NVML_ERROR_LIBRARY_NOT_FOUND = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_DRIVER_NOT_LOADED = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    NVML_ERROR_NO_PERMISSION = pynvml.NVML_ERROR_NO_PERMISSION
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        driver: str = "550.54.15",
        cuda: int = 12040,
        init_error: int | None = None,
    ) -> None:
        self.gpus = copy.deepcopy(gpus or [])
        self.driver = driver
        self.cuda = cuda
        self.init_error = init_error
        self.initialized = 0
        self.calls: list[str] = []

    # -- session ---------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._require_init()
        self.initialized -= 1

    def _require_init(self) -> None:
        if self.initialized <= 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: Any) -> FakeGpu:
        self._require_init()
        return self.gpus[handle.index]

    # -- system ----------------------------------------------------------------------------
    def nvmlSystemGetDriverVersion(self) -> str:
        self._require_init()
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._require_init()
        return self.cuda

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        self._require_init()
        for gpu in self.gpus:
            for p_pid, name, _ in gpu.processes:
                if p_pid == pid:
                    return name
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    # -- devices ---------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        self._require_init()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._require_init()
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return SimpleNamespace(index=index)

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return GPU_MODELS[self._gpu(handle).model][0]

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        self._gpu(handle)
        return f"GPU-{handle.index:08x}-1c2d-3e4f-5a6b-7c8d9e0f1a2b"

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        return GPU_MODELS[self._gpu(handle).model][1]

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any:
        gpu = self._gpu(handle)
        total = GPU_MODELS[gpu.model][2] * MIB
        used = gpu.used_mib * MIB
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        gpu = self._gpu(handle)
        if not GPU_MODELS[gpu.model][3]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        on = 1 if gpu.mig else 0
        return [on, on]

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        gpu = self._gpu(handle)
        return SimpleNamespace(gpu=gpu.utilization, memory=0)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        gpu = self._gpu(handle)
        return [SimpleNamespace(pid=pid, usedGpuMemory=mib * MIB) for pid, _, mib in gpu.processes]


def profile(name: str) -> FakeNvml:
    """Ready-made machines for tests: 'h100x2', 'a100', 't4', 'v100', 'p100', 'k80', 'rtx5090',
    'b200x2', 'old-driver', 'no-driver', 'driver-not-loaded', 'mig', 'busy'.

    Blackwell machines carry R570+ drivers (the first branch that runs Blackwell, CUDA 12.8)."""
    profiles = {
        "h100x2": lambda: FakeNvml([FakeGpu("h100"), FakeGpu("h100")], driver="550.54.15", cuda=12040),
        "a100": lambda: FakeNvml([FakeGpu("a100", used_mib=4)], driver="535.183.01", cuda=12020),
        "t4": lambda: FakeNvml([FakeGpu("t4")], driver="535.183.01", cuda=12020),
        "v100": lambda: FakeNvml([FakeGpu("v100")], driver="535.183.01", cuda=12020),
        "p100": lambda: FakeNvml([FakeGpu("p100")], driver="535.183.01", cuda=12020),
        "k80": lambda: FakeNvml([FakeGpu("k80")], driver="470.256.02", cuda=11040),
        "rtx5090": lambda: FakeNvml([FakeGpu("rtx5090")], driver="575.57.08", cuda=12090),
        "b200x2": lambda: FakeNvml([FakeGpu("b200"), FakeGpu("b200")], driver="570.124.06", cuda=12080),
        "old-driver": lambda: FakeNvml([FakeGpu("a100")], driver="470.256.02", cuda=11040),
        "mig": lambda: FakeNvml([FakeGpu("a100", mig=True)], driver="535.183.01", cuda=12020),
        "busy": lambda: FakeNvml(
            [FakeGpu("t4", used_mib=14000, processes=((4242, "python3", 13990),), utilization=97)],
            driver="535.183.01",
            cuda=12020,
        ),
        "no-driver": lambda: FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND),
        "driver-not-loaded": lambda: FakeNvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED),
    }
    return profiles[name]()

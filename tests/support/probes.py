"""A TensorFlow probe result shaped like ``tfgpu.doctor.tfprobe``'s on TF 2.21, for the doctor's
checks on fake machines (``tfgpu.testing.fake_nvml``)."""

from __future__ import annotations

import copy

BUILD = {
    "cuda_compute_capabilities": ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"],
    "cuda_version": "12.5.1",
    "cudnn_version": "9",
    "is_cuda_build": True,
}


def probe(gpus: int = 0, cc: tuple[int, int] = (8, 0), **overrides) -> dict:
    """A TensorFlow probe result shaped like tfprobe's on TF 2.21."""
    result = {
        "ok": True,
        "tensorflow": "2.21.0",
        "keras": "3.15.1",
        "legacy_keras": False,
        "cuda_build": True,
        "build": copy.deepcopy(BUILD),
        "estimator": False,
        "estimator_package": False,
        "gpus": [
            {"name": f"/physical_device:GPU:{i}", "device_name": "GPU", "compute_capability": list(cc)}
            for i in range(gpus)
        ],
        "log_lines": [],
    }
    result.update(overrides)
    return result

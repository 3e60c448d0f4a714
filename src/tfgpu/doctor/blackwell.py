"""Blackwell GPUs (compute capability 10.x: B200, GB200; 12.x: RTX 50xx, RTX PRO 6000 Blackwell)
on TensorFlow builds that predate them: what works, what does not, and how to tell from the logs.

The facts, with their sources:

- CUDA 12.8 is the first CUDA that knows Blackwell (sm_100, sm_120); a program without Blackwell
  machine code runs there only through the driver's JIT of the PTX it ships (NVIDIA, "Software
  Migration Guide for NVIDIA Blackwell RTX GPUs", MIGRATION_GUIDE below).
- TensorFlow 2.21's wheel is built with CUDA 12.5 for sm_60, sm_70, sm_80, sm_89 and compute_90
  (``tf.sysconfig.get_build_info()``). On a Blackwell GPU TensorFlow logs "not built with CUDA kernel
  binaries compatible with compute capability 12.0" and JIT-compiles the compute_90 PTX: the first
  start is slow, and kernels that the driver's JIT refuses fail with CUDA_ERROR_INVALID_PTX, even
  plain ops such as tf.matmul (tensorflow/tensorflow#89272, #97387, #101746).
- XLA (``jit_compile=True``) fails outright: the LLVM in TensorFlow's XLA emits PTX 8.5, which does
  not know sm_120 ("PTX version 8.5 does not support target 'sm_120' ... Minimum required PTX version
  is 8.7", tensorflow/tensorflow#111958, also on tf-nightly 2.22.0.dev20260309).
- Users report NVIDIA's NGC TensorFlow container working on RTX 50xx (tensorflow/tensorflow#97387,
  #99592), and TensorFlow built from source with CUDA 12.8 for compute capability 12.0 (#95705).
"""

from __future__ import annotations

import re

from tfgpu import versions

MIGRATION_GUIDE = (
    "https://forums.developer.nvidia.com/t/software-migration-guide-for-nvidia-blackwell-rtx-gpus-"
    "a-guide-to-cuda-12-8-pytorch-tensorrt-and-llama-cpp/321330"
)
ISSUES = "tensorflow/tensorflow#89272, #97387, #101746, #111958"
FIRST_CUDA = (12, 8)  # the first CUDA with sm_100 / sm_120 (MIGRATION_GUIDE)
FIRST_CAPABILITY = (10, 0)

# TensorFlow's own words on a Blackwell GPU it was not built for -> the cause they show.
LOG_SIGNS: tuple[tuple[str, str], ...] = (
    (
        r"not built with CUDA kernel binaries compatible with compute capability",
        "TensorFlow has no machine code for this GPU and JIT-compiles its older PTX (slow first start; "
        f"some kernels fail, {ISSUES})",
    ),
    (
        r"CUDA_ERROR_INVALID_PTX",
        "the driver refused to JIT-compile TensorFlow's PTX for this GPU: the build predates it "
        "(tensorflow/tensorflow#101746)",
    ),
    (
        r"PTX version [\d.]+ does not support (?:target )?'?sm_\d+",
        "XLA emits a PTX version too old for this GPU (sm_120 needs PTX 8.7, CUDA 12.8): jit_compile "
        "cannot work with this TensorFlow (tensorflow/tensorflow#111958)",
    ),
)

FIX = (
    "run with XLA off (jit_compile=False, no --tf_xla_auto_jit in TF_XLA_FLAGS), check plain ops with "
    "`tfgpu doctor --deep`, and keep the JIT cache: export CUDA_CACHE_MAXSIZE=4294967296. For full "
    "support use a TensorFlow whose build info lists sm_120 (or compute_120) and CUDA >= 12.8: NVIDIA's "
    "NGC TensorFlow container, a source build, or a tf-nightly once its build info shows them "
    f"(doctor reads it). Sources: {ISSUES}; {MIGRATION_GUIDE}"
)


def is_blackwell(cc: tuple[int, int]) -> bool:
    return tuple(cc) >= FIRST_CAPABILITY


def _target(entry: str) -> tuple[int, int]:
    digits = entry.split("_")[-1]
    return int(digits[:-1]), int(digits[-1])


def built_for(cc: tuple[int, int], compiled: list[str], cuda_version: str) -> bool:
    """Whether a build runs this Blackwell GPU properly: its own machine code, or Blackwell PTX,
    from a CUDA that knows Blackwell (so XLA's compiler knows it too)."""
    if cuda_version and versions.parse_version(cuda_version)[:2] < FIRST_CUDA:
        return False
    support, entry = versions.capability_support(cc, compiled)
    return support == "native" or (entry is not None and _target(entry) >= FIRST_CAPABILITY)


def cause_in(messages: list[str]) -> tuple[str, str] | None:
    """(the cause, the line that shows it) for the first Blackwell sign in TensorFlow's messages."""
    for pattern, cause in LOG_SIGNS:
        line = next((m for m in messages if re.search(pattern, m)), None)
        if line:
            return cause, line
    return None

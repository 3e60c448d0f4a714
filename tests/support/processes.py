"""The tfgpu command as a user runs it, and the environment a child process gets."""

from __future__ import annotations

import os
import subprocess
import sys

# what CUDA_VISIBLE_DEVICES was before conftest hid the GPU (it sets this)
GPU_VISIBLE: str | None = None


def gpu_environ() -> dict[str, str]:
    """The variables that give a child process the GPUs this test run was given (for ``env=``)."""
    from tfgpu import nvml

    if GPU_VISIBLE is not None:
        return {"CUDA_VISIBLE_DEVICES": GPU_VISIBLE}
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(nvml.probe().gpus)))}


def has_gpu() -> bool:
    from tfgpu import nvml

    return bool(nvml.probe().gpus)


def cli_environ(env: dict[str, str] | None = None, *, drop: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment for a tfgpu command, without its TFGPU_* settings (and ``drop``),
    with ``env`` on top."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("TFGPU_") and k not in drop}
    return {**kept, **(env or {})}


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300, cwd: str | None = None
) -> subprocess.CompletedProcess:
    """Run the tfgpu command as a user would, in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "tfgpu.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_environ(env),
        check=False,
        cwd=cwd,
    )

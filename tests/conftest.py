"""Shared test setup.

The pytest process itself runs on 3 logical CPU devices, configured once before anything touches
TensorFlow, so multi-device tests share one TensorFlow import. Anything that needs a fresh
TensorFlow (configure before initialization, several workers) runs in a child process through
:mod:`tfgpu.testing`; the functions those children run live in ``bodies.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
LOGICAL_CPUS = 3


def pytest_sessionstart(session: pytest.Session) -> None:
    import tfgpu

    tfgpu.configure(logical_cpus=LOGICAL_CPUS)


@pytest.fixture
def clean_choices():
    from tfgpu import choices

    choices.clear()
    yield
    choices.clear()


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300, cwd: str | None = None
) -> subprocess.CompletedProcess:
    """Run the tfgpu command as a user would, in a fresh process."""
    full_env = {**os.environ, **(env or {})}
    for name in list(full_env):
        if name.startswith("TFGPU_") and name not in (env or {}):
            del full_env[name]
    return subprocess.run(
        [sys.executable, "-m", "tfgpu.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        check=False,
        cwd=cwd,
    )

"""Test helpers other projects (and tfgpu's own tests) can use.

- :func:`run_on_logical_cpus`: run a function in a fresh process whose CPU is split into N logical
  devices, and get its return value back.
- :func:`run_cluster`: start K processes on localhost with a TF_CONFIG each (free ports; worker,
  chief and ps roles), run a function in each, and collect the results; the first failure stops
  the rest and raises with that process's last lines.
- :mod:`tfgpu.testing.fake_nvml`: NVML answers recorded from real GPUs, for GPU code paths on a
  machine without one.

Functions are named as ``"module:function"`` and must be importable in the child (tests put their
bodies in a module on ``sys.path``); arguments and results travel by pickle.
"""

import importlib
from typing import Any

from tfgpu.ports import free_ports
from tfgpu.testing.processes import ProcessFailed, run_cluster, run_on_logical_cpus

__all__ = ["ProcessFailed", "free_ports", "run_cluster", "run_on_logical_cpus"]


def __getattr__(name: str) -> Any:
    """``tfgpu.testing.fake_nvml`` after ``import tfgpu.testing``, as the README writes it: the
    submodule is imported on first use (it imports pynvml, which the other helpers do not need)."""
    if name == "fake_nvml":
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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
import tempfile

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Ray's local clusters (test_ray, docs/ray.md's blocks) send no usage report: nothing leaves this machine
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
# tune=True keeps its choices in tfgpu's cache and reuses them: each test run gets its own, in this
# process and the processes it starts, so no run reuses what another (or the user's own) kept
os.environ["TFGPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="tfgpu-test-cache-")
LOGICAL_CPUS = 3
# Tests that do not test GPU code hide the GPU, here and in every process they start: on a GPU
# host each test process would otherwise initialize the GPU (seconds each, and its memory). Tests
# marked ``gpu`` give it back to the processes they start (``gpu_environ``), and are skipped
# where there is no GPU.
GPU_VISIBLE = os.environ.get("CUDA_VISIBLE_DEVICES")
os.environ["CUDA_VISIBLE_DEVICES"] = ""


def gpu_environ() -> dict[str, str]:
    """The variables that give a child process the GPUs this test run was given (for ``env=``)."""
    from tfgpu import nvml

    if GPU_VISIBLE is not None:
        return {"CUDA_VISIBLE_DEVICES": GPU_VISIBLE}
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(nvml.probe().gpus)))}


def has_gpu() -> bool:
    from tfgpu import nvml

    return bool(nvml.probe().gpus)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:  # "slow": starts several TensorFlow processes, so it starts a process
        if "slow" in item.keywords and item.get_closest_marker("process") is None:
            item.add_marker(pytest.mark.process)
    if any("gpu" in item.keywords for item in items) and not has_gpu():
        skip = pytest.mark.skip(reason="no NVIDIA GPU on this machine (NVML finds none)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


def pytest_sessionstart(session: pytest.Session) -> None:
    import tfgpu

    tfgpu.configure(logical_cpus=LOGICAL_CPUS)


def local_strategy(replicas: int):
    """OneDevice on CPU:0, or Mirrored over the first N logical CPUs of this test process."""
    import tensorflow as tf

    if replicas == 1:
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    # Several MirroredStrategies over different device sets in one process collide on collective
    # group keys ("joining a group with size 3, but that group has size 2"): reduce via one device.
    devices = [f"/cpu:{i}" for i in range(replicas)]
    return tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())


@pytest.fixture
def clean_choices():
    from tfgpu import choices

    choices.clear()
    yield
    choices.clear()


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


# -- the fast lane ---------------------------------------------------------------------------------
# `make test-fast` runs the tests that start no process and read no clock: -m "not process and not
# timing". A test that starts a process must say so (@pytest.mark.process), or the lane would
# quietly grow slow: starting one without the marker fails the test. TFGPU_RECORD_PROCESSES=FILE
# lists such tests in FILE instead of failing them (to mark a suite at once).
RECORD_PROCESSES = os.environ.get("TFGPU_RECORD_PROCESSES")


@pytest.fixture(autouse=True)
def _processes_carry_their_marker(request, monkeypatch):
    if request.node.get_closest_marker("process") is not None:
        yield
        return
    real = subprocess.Popen.__init__

    def guarded(self, *args, **kwargs):
        if RECORD_PROCESSES:
            with open(RECORD_PROCESSES, "a") as out:
                out.write(request.node.nodeid + "\n")
            return real(self, *args, **kwargs)
        raise AssertionError(
            f"{request.node.nodeid} starts a process ({args[0] if args else kwargs.get('args')!r}) "
            "without @pytest.mark.process: mark it, so `make test-fast` leaves it out"
        )

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)
    yield


# -- the end of the run ------------------------------------------------------------------------------
# pytest's unraisable-exception plugin collects garbage several times at the very end
# (gc_collect_harder); a tf.data iterator freed there can wait for ever for its thread pool's
# threads (UnboundedThreadPool::LogicalThreadWrapper's destructor under EagerTensor_dealloc, the
# GIL held): the whole suite had passed and the process hung (py-spy, 2026-11-26). The results are
# written by then, so the process leaves with pytest's exit status instead.
_FINISHED: dict[str, int] = {}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _FINISHED["status"] = int(exitstatus)


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if "status" in _FINISHED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_FINISHED["status"])

"""The test run's setup: hooks and fixtures only (what tests share to import is in ``support/``).

The pytest process runs on 3 logical CPU devices when it imports TensorFlow, configured before
TensorFlow initializes them, so multi-device tests share one TensorFlow import. Anything that needs
a fresh TensorFlow (configure before initialization, several workers) runs in a child process
through :mod:`tfgpu.testing`; the functions those children run live in ``bodies.py``.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import platform
import subprocess
import sys
import tempfile

import numpy.testing  # noqa: F401  (NumPy 1.26 runs lscpu when it is first imported: see below)
import pytest

from support import examples, processes, replicas

# What libraries start a process for once, lazily, is started here (numpy.testing's import above,
# and platform.processor(), which runs uname -p once: Ray and Keras ask), not in the first test
# that reaches it, which would fail for starting a process without its marker.
platform.processor()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Ray's local clusters (test_ray, docs/ray.md's blocks) send no usage report: nothing leaves this machine
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
# and each test process's clusters keep their files, and the address a later ray.init() joins, in a
# folder of their own: ray.init(num_cpus=2) in a document's block joined test_ray's cluster, running
# beside it, and failed ("When connecting to an existing cluster, num_cpus ... must not be provided")
os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths
# tune=True keeps its choices in tfgpu's cache and reuses them: each test run gets its own, in this
# process and the processes it starts, so no run reuses what another (or the user's own) kept
os.environ["TFGPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="tfgpu-test-cache-")
# Tests that do not test GPU code hide the GPU, here and in every process they start: on a GPU
# host each test process would otherwise initialize the GPU (seconds each, and its memory). Tests
# marked ``gpu`` give it back to the processes they start (``processes.gpu_environ``), and are
# skipped where there is no GPU.
processes.GPU_VISIBLE = os.environ.get("CUDA_VISIBLE_DEVICES")
os.environ["CUDA_VISIBLE_DEVICES"] = ""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--exercising",
        action="append",
        default=[],
        metavar="TAG",
        help="run only the examples that exercise TAG (or a family: loss:); tests/support/examples.py",
    )


def pytest_configure(config: pytest.Config) -> None:
    if unknown := examples.unknown(config.getoption("exercising")):
        raise pytest.UsageError(
            f"--exercising {', '.join(unknown)}: no such tag; the tags are tests/support/examples.py's TAGS"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _select_exercising(config, items)
    for item in items:  # "slow": starts several TensorFlow processes, so it starts a process
        if "slow" in item.keywords and item.get_closest_marker("process") is None:
            item.add_marker(pytest.mark.process)
        if "heavy" in item.keywords and item.get_closest_marker("model") is None:  # trains one
            item.add_marker(pytest.mark.model)
    if any("gpu" in item.keywords for item in items) and not processes.has_gpu():
        skip = pytest.mark.skip(reason="no NVIDIA GPU on this machine (NVML finds none)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


def _select_exercising(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--exercising TAG: the examples carrying TAG; the rest deselected (as -k does)."""
    asked = config.getoption("exercising")
    if not asked:
        return
    kept, dropped = [], []
    for item in items:
        marker = item.get_closest_marker("exercises")
        (kept if marker is not None and examples.exercises(marker.args, asked) else dropped).append(item)
    config.hook.pytest_deselected(items=dropped)
    items[:] = kept


# -- the logical CPU devices -----------------------------------------------------------------------
# The pytest process runs on 3 logical CPU devices, configured the moment TensorFlow is imported
# (before anything can initialize its devices: a module may build a dataset at import), and only
# in a process that imports it: the tests that build no model (make test-unit) never pay for it.
class _ConfigureOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _logical_cpus()

        spec.loader.exec_module = exec_module
        return spec


def _logical_cpus() -> None:
    import tfgpu

    tfgpu.configure(logical_cpus=replicas.LOGICAL_CPUS)


if "tensorflow" in sys.modules:  # a plugin imported it before this file
    _logical_cpus()
else:
    sys.meta_path.insert(0, _ConfigureOnImport())


@pytest.fixture
def clean_choices():
    from tfgpu import choices

    choices.clear()
    yield
    choices.clear()


# -- the lanes ----------------------------------------------------------------------------------------
# `make test-fast` runs the tests that start no process, read no clock and train for no seconds:
# -m "not process and not timing and not heavy"; `make test-unit` also leaves out every test that
# builds a Keras model (-m "... and not model"), and imports TensorFlow only for the tests that
# need it. A test that starts a process or builds a model must say so (@pytest.mark.process,
# @pytest.mark.model; ``heavy`` implies ``model``), or a lane would quietly grow slow: doing it
# without the marker fails the test. TFGPU_RECORD_MARKERS=FILE lists such tests in FILE instead
# ("process NODEID", "model NODEID"), to mark a suite at once. A model is seen where Keras is
# imported before the test starts (a test module that imports it at its top).
RECORD_MARKERS = os.environ.get("TFGPU_RECORD_MARKERS")


def _unmarked(request, marker: str, did: str):
    """What a test that ``did`` something without ``marker`` meets: a failure, or a line in the
    record."""
    if RECORD_MARKERS:
        with open(RECORD_MARKERS, "a") as out:
            out.write(f"{marker} {request.node.nodeid}\n")
        return
    lane = "test-unit" if marker == "model" else "test-fast"
    raise AssertionError(
        f"{request.node.nodeid} {did} without @pytest.mark.{marker}: mark it, so `make {lane}` leaves it out"
    )


def _guard(request, monkeypatch, marker: str, owner: type, did) -> None:
    """``owner(...)`` in a test without ``marker`` fails it (or is recorded); ``did(args, kwargs)``
    says what the test did."""
    real = owner.__init__

    def guarded(self, *args, **kwargs):
        _unmarked(request, marker, did(self, args, kwargs))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(owner, "__init__", guarded)


@pytest.fixture(autouse=True)
def _processes_carry_their_marker(request, monkeypatch):
    if request.node.get_closest_marker("process") is None:
        _guard(
            request,
            monkeypatch,
            "process",
            subprocess.Popen,
            lambda _, args, kwargs: f"starts a process ({args[0] if args else kwargs.get('args')!r})",
        )
    yield


@pytest.fixture(autouse=True)
def _models_carry_their_marker(request, monkeypatch):
    # tests the unit lane leaves out already (processes, clocks; heavy ones carry model) need not say it
    elsewhere = any(request.node.get_closest_marker(m) for m in ("model", "process", "timing"))
    if not elsewhere and "keras" in sys.modules:
        # every Model (functional, Sequential, subclassed) starts in Trainer.__init__
        from keras.src.trainers import trainer

        _guard(
            request,
            monkeypatch,
            "model",
            trainer.Trainer,
            lambda model, *_: f"builds a Keras model ({type(model).__name__})",
        )
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

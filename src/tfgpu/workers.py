"""A pool of long-lived worker processes that never re-import the caller's ``__main__``.

multiprocessing's spawn start method re-runs the caller's main module in every worker, which breaks
scripts without an ``if __name__ == "__main__"`` guard (and stdin), and fork is unsafe once
TensorFlow or Arrow started threads. These workers are plain ``python -m tfgpu.workers`` processes:
each imports what it needs once, then runs jobs sent as length-prefixed pickles over its stdin and
answers on its stdout. The first job that raises stops the pool and re-raises in the caller.
"""

from __future__ import annotations

import importlib
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

_HEADER = struct.Struct("!Q")


def _send(stream: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    (size,) = _HEADER.unpack(header)
    return pickle.loads(stream.read(size))


def host_only_env(**extra: str) -> dict[str, str]:
    """The environment of a child process that does host work only (convert's workers, tf.data
    service workers): GPUs hidden, so it neither initializes one nor takes its memory; on a GPU
    host each TensorFlow process that sees the GPUs would. Nor does it join the parent's cluster:
    TF_CONFIG is dropped, or ``import tfgpu`` would set it up as the parent's task."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", **extra}
    env.pop("TF_CONFIG", None)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


class _Worker:
    def __init__(self, target: str) -> None:
        env = host_only_env(PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tfgpu.workers", target],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )

    def run(self, job: Any) -> tuple[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        _send(self.process.stdin, job)
        try:
            return _receive(self.process.stdout)
        except EOFError:
            code = self.process.wait()
            return "error", RuntimeError(f"a tfgpu worker process died (exit status {code})")

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.close()
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


def run_jobs(target: Callable[[Any], Any] | str, jobs: Iterable[Any], *, workers: int) -> Iterator[Any]:
    """Yield ``target(job)`` for every job, in completion order, from ``workers`` processes.

    ``target`` must be a module-level function (or "module:function"); jobs and results are pickled.
    """
    name = target if isinstance(target, str) else f"{target.__module__}:{target.__qualname__}"
    pending: queue.Queue = queue.Queue()
    for job in jobs:
        pending.put(job)
    total = pending.qsize()
    results: queue.Queue = queue.Queue()
    stop = threading.Event()
    pool = [_Worker(name) for _ in range(max(1, min(workers, total)))]

    def drive(worker: _Worker) -> None:
        while not stop.is_set():
            try:
                job = pending.get_nowait()
            except queue.Empty:
                return
            results.put(worker.run(job))

    threads = [threading.Thread(target=drive, args=(w,), daemon=True) for w in pool]
    for thread in threads:
        thread.start()
    try:
        for _ in range(total):
            kind, value = results.get()
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()
        for worker in pool:
            if worker.process.poll() is None and any(t.is_alive() for t in threads):
                worker.process.kill()
        for thread in threads:
            thread.join(timeout=30)
        for worker in pool:
            worker.close()


def _serve(target: str) -> int:
    module, _, function = target.partition(":")
    call = getattr(importlib.import_module(module), function)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # anything the job prints must not corrupt the result stream
    while True:
        try:
            job = _receive(stdin)
        except EOFError:
            return 0
        try:
            answer = ("ok", call(job))
        except BaseException as exc:  # sent back and re-raised in the caller
            answer = ("error", exc)
        _send(stdout, answer)


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1]))

"""Run a function in child Python processes: on N logical CPU devices, or as a cluster."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfgpu.ports import free_ports


class ProcessFailed(RuntimeError):
    """A child process exited with an error; the message holds its last output lines."""


@dataclass
class _Child:
    label: str
    process: subprocess.Popen
    result_path: Path
    log_path: Path
    required: bool  # the run waits for it; others (ps, PS-workers) are stopped at the end

    def tail(self, lines: int = 15) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def result(self) -> Any:
        with self.result_path.open("rb") as handle:
            return pickle.load(handle)


def _python_path() -> str:
    """The parent's sys.path, so the child imports the same test modules and package."""
    return os.pathsep.join(p for p in sys.path if p)


def _start(
    label: str, target: str, args: Sequence[Any], env: Mapping[str, str], workdir: Path, required: bool
) -> _Child:
    args_path = workdir / f"{label}.args.pkl"
    result_path = workdir / f"{label}.result.pkl"
    log_path = workdir / f"{label}.log"
    args_path.write_bytes(pickle.dumps(tuple(args)))
    child_env = {**os.environ, "PYTHONPATH": _python_path(), **env}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tfgpu.testing.child", target, str(args_path), str(result_path)],
            env=child_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return _Child(label, process, result_path, log_path, required)


def _stop(children: Sequence[_Child], grace: float = 5.0) -> None:
    for child in children:
        if child.process.poll() is None:
            child.process.terminate()
    deadline = time.monotonic() + grace
    for child in children:
        try:
            child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait()


def _wait(children: list[_Child], timeout: float) -> list[Any]:
    deadline = time.monotonic() + timeout
    try:
        while True:
            for child in children:
                code = child.process.poll()
                if code not in (None, 0):
                    raise ProcessFailed(
                        f"{child.label} exited with status {code}; last lines:\n{child.tail()}"
                    )
            if all(c.process.poll() == 0 for c in children if c.required):
                return [c.result() for c in children if c.required]
            if time.monotonic() > deadline:
                stuck = [c.label for c in children if c.required and c.process.poll() is None]
                raise ProcessFailed(
                    f"{', '.join(stuck)} did not finish in {timeout:.0f} s; last lines of {stuck[0]}:\n"
                    + next(c for c in children if c.label == stuck[0]).tail()
                )
            time.sleep(0.05)
    finally:
        _stop(children)


def run_on_logical_cpus(
    target: str, devices: int, *args: Any, timeout: float = 300.0, env: Mapping[str, str] | None = None
) -> Any:
    """Run ``target(*args)`` in a new process with ``devices`` logical CPU devices; return its result."""
    with tempfile.TemporaryDirectory(prefix="tfgpu-test-") as tmp:
        child_env = {"TFGPU_LOGICAL_CPUS": str(devices), **(env or {})}
        child = _start("process", target, args, child_env, Path(tmp), required=True)
        return _wait([child], timeout)[0]


def run_cluster(
    target: str,
    *,
    workers: int,
    chief: bool = False,
    ps: int = 0,
    args: Sequence[Any] = (),
    timeout: float = 300.0,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Start a localhost cluster, run ``target(*args)`` in every task, return results by task.

    Keys are "worker:0", "chief:0", ... With ``ps`` > 0 (parameter-server training) only the
    chief's result is awaited; ps and worker tasks serve until the chief is done and are stopped.
    """
    roles = [("chief", 1 if chief else 0), ("worker", workers), ("ps", ps)]
    ports = iter(free_ports(sum(n for _, n in roles)))
    cluster = {role: [f"localhost:{next(ports)}" for _ in range(n)] for role, n in roles if n}
    with tempfile.TemporaryDirectory(prefix="tfgpu-cluster-") as tmp:
        children = []
        for role, count in roles:
            for index in range(count):
                tf_config = json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})
                required = role == "chief" if ps else role in ("chief", "worker")
                children.append(
                    _start(
                        f"{role}:{index}",
                        target,
                        args,
                        {**(env or {}), "TF_CONFIG": tf_config},
                        Path(tmp),
                        required,
                    )
                )
        results = _wait(children, timeout)
        labels = [c.label for c in children if c.required]
        return dict(zip(labels, results, strict=True))

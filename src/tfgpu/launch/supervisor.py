"""Run a launch plan's local processes and supervise them.

- Output of every process is streamed line by line with a ``[worker 1]`` prefix; one reader thread
  per process drains its pipe, so a process that writes a lot never blocks on a full pipe.
- The first process that fails stops the others (terminate, then kill after a grace period); the
  result carries its exit status and its last lines.
- With ``max_restarts`` every process is restarted with the same cluster; each sees
  TFGPU_LAUNCH_ATTEMPT (0, 1, ...).
- SIGTERM or Ctrl-C (SIGINT) to the launcher is passed on to every process, as a request: a
  training run saves where it is and exits ``errors.RESUMABLE`` (``train.pieces.stopping``). The launcher
  waits for them up to TFGPU_STOP_GRACE plus its own grace, then kills what is left; a second
  signal kills at once. A run that stopped on request, whether the launcher or one of its
  processes was signalled, is not a failure: it is not restarted, and the launcher exits
  ``RESUMABLE`` too, so Slurm's requeue or a pod failure policy can run it again.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from tfgpu import env, quiet
from tfgpu.errors import RESUMABLE
from tfgpu.launch import peers
from tfgpu.launch.plan import LaunchPlan, ProcessPlan

TAIL_LINES = 20
POLL_S = 0.05


@dataclass
class LaunchResult:
    exit_code: int
    attempts: int
    failed: str | None = None  # label of the process that failed first
    failed_status: int | None = None
    tail: list[str] = field(default_factory=list)
    interrupted: bool = False
    stopped: bool = False  # every process stopped on request and saved (exit_code RESUMABLE)


class _Running:
    def __init__(self, plan: ProcessPlan, attempt: int, sink: Callable[[str, bytes], None]) -> None:
        self.plan = plan
        environ = {**os.environ, "PYTHONUNBUFFERED": "1", env.ATTEMPT_VARIABLE: str(attempt), **plan.env}
        self.process = subprocess.Popen(
            list(plan.command),
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.reader = threading.Thread(target=self._pump, args=(self.process.stdout, sink), daemon=True)
        self.reader.start()

    def _pump(self, stream: IO[bytes], sink: Callable[[str, bytes], None]) -> None:
        filtering = quiet.active()  # the children's TensorFlow log lines, as the CLI's own
        for line in iter(stream.readline, b""):
            text = line.decode(errors="replace").rstrip("\n")
            if filtering and quiet.is_noise(text):
                continue
            self.tail.append(text)
            sink(self.plan.label, line)
        stream.close()

    def signal_group(self, sig: int) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)


def exit_status(returncode: int) -> int:
    """A child's exit status as a shell reports it (killed by signal N -> 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def default_sink(lock: threading.Lock | None = None) -> Callable[[str, bytes], None]:
    import sys

    lock = lock or threading.Lock()
    out = sys.stdout.buffer

    def sink(label: str, line: bytes) -> None:
        with lock:
            out.write(f"[{label}] ".encode() + (line if line.endswith(b"\n") else line + b"\n"))
            out.flush()

    return sink


class _ChiefWatch:
    """A parameter-server chief on another node: seen answering, then not (a few checks in a row,
    a second apart), it has ended, and the servers here have nothing left to serve."""

    MISSES = 3
    EVERY_S = 1.0

    def __init__(self, address: str) -> None:
        self.address = address
        self.seen = False
        self.misses = 0
        self.next_check = 0.0

    def gone(self) -> bool:
        now = time.monotonic()
        if now < self.next_check:
            return False
        self.next_check = now + self.EVERY_S
        if peers.answers(self.address):
            self.seen, self.misses = True, 0
        elif self.seen:
            self.misses += 1
        return self.misses >= self.MISSES


class Supervisor:
    def __init__(
        self,
        plan: LaunchPlan,
        *,
        max_restarts: int = 0,
        grace_s: float = 10.0,
        sink: Callable[[str, bytes], None] | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.plan = plan
        self.max_restarts = max_restarts
        self.grace_s = grace_s
        self.sink = sink or default_sink()
        self.notify = notify or (lambda message: None)
        self._stop = threading.Event()
        self._signal = signal.SIGTERM  # the signal passed on (the one the launcher got)
        self._hurry = threading.Event()  # a second signal: kill, do not wait
        # with ps tasks, workers and ps serve until the chief is done; a node without the chief
        # watches the chief's address, and stops its servers once the chief has gone
        self._required = {p.label for p in plan.local if not plan.cluster.get("ps") or p.role == "chief"}
        remote_chief = plan.cluster.get("ps") and not any(p.role == "chief" for p in plan.local)
        self._chief_address = plan.cluster["chief"][0] if remote_chief and plan.cluster.get("chief") else None

    def request_stop(self, signum: int = signal.SIGTERM, *_: object) -> None:
        if self._stop.is_set():
            self._hurry.set()
        self._signal = signal.Signals(signum)
        self._stop.set()

    def run(self) -> LaunchResult:
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                handlers[sig] = signal.signal(sig, self.request_stop)
        try:
            attempt = 0
            while True:
                result = self._attempt(attempt)
                done = result.exit_code == 0 or result.interrupted or result.stopped
                if done or attempt >= self.max_restarts:
                    result.attempts = attempt + 1
                    return result
                attempt += 1
                self.notify(
                    f"{result.failed} failed (exit status {result.failed_status}); restarting all "
                    f"{len(self.plan.local)} processes, attempt {attempt + 1} of {self.max_restarts + 1}"
                )
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)

    def _attempt(self, attempt: int) -> LaunchResult:
        running = [_Running(p, self.plan.first_attempt + attempt, self.sink) for p in self.plan.local]
        # a fresh watch each attempt: the chief seen before a restart is not the one to wait for
        chief = _ChiefWatch(self._chief_address) if self._chief_address else None
        try:
            while True:
                if self._stop.is_set():
                    return self._passed_on(running, attempt)
                for proc in running:
                    code = proc.process.poll()
                    if code == RESUMABLE:  # one was asked (a pod preempted): its peers stop with it
                        return self._stopping(running, attempt)
                    if code not in (None, 0):
                        self._stop_all(running)
                        proc.reader.join(timeout=5)
                        return LaunchResult(
                            exit_code=exit_status(code),
                            attempts=attempt + 1,
                            failed=proc.plan.label,
                            failed_status=exit_status(code),
                            tail=list(proc.tail),
                        )
                if chief is not None and chief.gone():
                    self.notify(f"the chief at {chief.address} has ended; stopping this node's servers")
                    self._stop_all(running)
                    return LaunchResult(exit_code=0, attempts=attempt + 1)
                required = [p for p in running if p.plan.label in self._required] or running
                if all(p.process.poll() == 0 for p in required):
                    self._stop_all(running)
                    return LaunchResult(exit_code=0, attempts=attempt + 1)
                time.sleep(POLL_S)
        finally:
            self._stop_all(running)
            for proc in running:
                proc.reader.join(timeout=5)

    def _passed_on(self, running: list[_Running], attempt: int) -> LaunchResult:
        """The launcher was signalled: the signal goes to every process, as a request."""
        for proc in running:
            proc.signal_group(self._signal)
        result = self._stopping(running, attempt)
        if result.stopped:
            return result
        return LaunchResult(exit_code=128 + int(self._signal), attempts=attempt + 1, interrupted=True)

    def _stopping(self, running: list[_Running], attempt: int) -> LaunchResult:
        """Processes stopping on request: wait for the ones that run the training (TFGPU_STOP_GRACE
        and this launcher's grace), then stop the rest. Stopped (``RESUMABLE``) when each
        exited 0 or RESUMABLE and one of them RESUMABLE."""
        required = [p for p in running if p.plan.label in self._required] or running
        deadline = time.monotonic() + env.stop_grace() + self.grace_s
        while time.monotonic() < deadline and not self._hurry.is_set():
            if all(p.process.poll() is not None for p in required):
                break
            time.sleep(POLL_S)
        codes = [p.process.poll() for p in required]
        self._stop_all(running, grace_s=0.0 if self._hurry.is_set() else self.grace_s)
        if RESUMABLE in codes and all(code in (0, RESUMABLE) for code in codes):
            self.notify(
                f"stopped on request; every process saved and exited {RESUMABLE}: run the same "
                "command again to resume"
            )
            return LaunchResult(exit_code=RESUMABLE, attempts=attempt + 1, stopped=True)
        failed = next(
            (p for p, code in zip(required, codes, strict=True) if code not in (0, RESUMABLE)), required[0]
        )
        status = exit_status(failed.process.returncode or 0)
        return LaunchResult(
            exit_code=status or 1,
            attempts=attempt + 1,
            failed=failed.plan.label,
            failed_status=status,
            tail=list(failed.tail),
        )

    def _stop_all(self, running: list[_Running], *, grace_s: float | None = None) -> None:
        alive = [p for p in running if p.process.poll() is None]
        for proc in alive:
            proc.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + (self.grace_s if grace_s is None else grace_s)
        for proc in alive:
            try:
                proc.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.signal_group(signal.SIGKILL)
                proc.process.wait()

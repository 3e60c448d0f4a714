"""A training run asked to stop: the signal is a request, not a death.

Clusters say before they stop a job: Slurm sends SIGTERM at preemption and at the time limit (or
the signal ``--signal`` names), Kubernetes sends SIGTERM and waits ``terminationGracePeriodSeconds``
(30 s by default), spot machines give about 30 s. While a training loop runs, the signals in
TFGPU_STOP_SIGNALS (default SIGTERM) ask it to stop: the loop finishes the call in flight, saves
one checkpoint with the step, the epoch and the place in the epoch, says so in one line and raises
``errors.StoppedOnRequest`` (exit status ``errors.RESUMABLE``). A second signal, or the run still
going after TFGPU_STOP_GRACE seconds, exits at once.

How the request reaches a call already running. Python runs a signal's handler only between
bytecodes, and the main thread sits inside one TensorFlow call for the whole of a call of K steps.
The C-level handler writes the signal's number to a wakeup socket at once
(``signal.set_wakeup_fd``); a thread here reads it and sets the process's stop cap, an int32
variable in host memory that the in-graph loop's condition reads each step (``cap``; one read
and one ``Minimum`` a step, beside the loop's own comparison): the call ends after the step it is
in. In one process (one device, MirroredStrategy) that is the whole of it.

Under several workers, every worker must stop after the same call, or the ones going on wait in
a collective for the ones that stopped. A local cut in the graph would split them, so there the
loop's condition does not read the cap; instead each call ends with one scalar all-reduce of
every worker's "asked" flag (``agreed``), and all of them read the same sum: a signal to one
worker (one pod preempted) or to all (Slurm) stops every worker after the same call, and the
collective save that follows finds them all. The cost is one scalar collective a call, in the
call's own graph (no extra dispatch); ``bench/stop_bench.py`` prices it. Under parameter servers
the coordinator alone runs the loop and decides, between its windows.

Handlers can only be set in the main thread: a fit run in another thread (Ray Train's workers)
keeps the process's own handling, and says so once at debug level.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any

from tfgpu import env

log = logging.getLogger(__name__)

OPEN = 2**31 - 1  # the cap while no stop is asked: no loop reaches it
_cap: Any = None


class Asked(Exception):
    """Raised inside the loop at the call boundary where the run stops: the loop saves and
    raises ``StoppedOnRequest`` (never seen by a user)."""


def cap() -> Any:
    """The process's stop cap: an int32 variable on this host's CPU, ``OPEN`` until a stop is
    asked, then 0. Made once, outside any strategy (a ``ResourceVariable`` made directly skips
    the variable creators a strategy's scope installs: a mirrored cap would be per replica)."""
    global _cap
    if _cap is None:
        import tensorflow as tf
        from tensorflow.python.ops.resource_variable_ops import ResourceVariable

        with tf.init_scope(), tf.device("/CPU:0"):
            _cap = ResourceVariable(OPEN, dtype=tf.int32, trainable=False, name="tfgpu_stop_cap")
    return _cap


def capped(end: Any) -> Any:
    """In a loop's condition: ``end``, or 0 once a stop is asked (read each step)."""
    import tensorflow as tf

    return tf.minimum(end, cap().read_value())


def asked_here() -> Any:
    """In a call's graph, after its loop: 1.0 where this process was asked to stop, else 0.0."""
    import tensorflow as tf

    return tf.cast(cap().read_value() < OPEN, tf.float32)


def agreed(strategy: Any, after: Any) -> Any:
    """In a multi-worker call's graph: how many workers were asked to stop, summed over every
    replica (every worker reads the same number), read once ``after`` is computed (the loop's
    end: a request made during the call counts in this call)."""
    import tensorflow as tf

    with tf.control_dependencies([after]):
        local = asked_here()
    per_replica = strategy.run(lambda: tf.identity(local))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


class Stop:
    """One run's stop: whether it was asked, by which signal; ``now`` answers at a call's end."""

    def __init__(self, *, across_workers: bool, grace: float) -> None:
        self.across_workers = across_workers
        self.grace = grace
        self.asked = threading.Event()
        self.signum: int | None = None
        self._deliveries = 0
        self._lock = threading.Lock()
        self._deadline: threading.Timer | None = None

    def now(self, executed: Any = None) -> bool:
        """Whether the run stops after the call that returned ``executed``: this process asked
        (one process), or the call's all-reduce counted a worker asked (several workers: every
        worker reads the same count, so all stop at this call)."""
        if not self.across_workers:
            return self.asked.is_set()
        stop = getattr(executed, "stop", None)
        return stop is not None and float(stop) > 0

    def note(self, signum: int) -> None:
        """The Python-level handler (the main thread, between bytecodes): marks the request,
        without touching TensorFlow (it may be in the middle of tracing)."""
        self._mark(signum)

    def delivered(self, signum: int) -> None:
        """The wakeup thread, as the signal lands: the cap set at once (a call running ends
        after its step), and a second delivery exits without waiting."""
        with self._lock:
            self._deliveries += 1
            again = self._deliveries > 1
        if again:
            _exit_now(signum, "a second signal")
        self._mark(signum)
        cap().assign(0)

    def _mark(self, signum: int) -> None:
        with self._lock:
            if self.asked.is_set():
                return
            self.signum = signum
            self.asked.set()
            self._deadline = threading.Timer(self.grace, _exit_now, args=(signum, f"{self.grace:g} s"))
            self._deadline.daemon = True
            self._deadline.start()

    def cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()

    @property
    def signal_name(self) -> str:
        if self.signum:
            return signal.Signals(self.signum).name
        return "another worker's stop request" if self.across_workers else "a stop request"


def _exit_now(signum: int, why: str) -> None:
    """The stop took too long (the grace) or was asked again: exit now, as the signal would."""
    sys.stderr.write(
        f"tfgpu: {signal.Signals(signum).name}: stopped without saving after {why}; the run resumes "
        "from its last checkpoint (set TFGPU_STOP_GRACE for more time)\n"
    )
    sys.stderr.flush()
    os._exit(128 + signum)


@contextlib.contextmanager
def watching(*, across_workers: bool) -> Iterator[Stop]:
    """While the loop runs: the stop signals ask ``Stop``; the process's own handling after."""
    stop = Stop(across_workers=across_workers, grace=env.stop_grace())
    signals = env.stop_signals()
    if not signals or threading.current_thread() is not threading.main_thread():
        if signals:
            log.debug("training outside the main thread: stop signals keep the process's handling")
        yield stop
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    previous = {s: signal.signal(s, lambda signum, _frame: stop.note(signum)) for s in signals}
    old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    watcher = threading.Thread(target=_watch, args=(reader, stop, set(signals)), daemon=True)
    watcher.start()
    try:
        yield stop
    finally:
        signal.set_wakeup_fd(old_fd)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        writer.close()
        reader.shutdown(socket.SHUT_RDWR)
        watcher.join(timeout=5)
        reader.close()
        stop.cancel()
        if _cap is not None:
            _cap.assign(OPEN)


def _watch(reader: socket.socket, stop: Stop, signals: set[int]) -> None:
    """The wakeup socket's reader: one byte per signal delivered, as it lands."""
    while True:
        try:
            data = reader.recv(64)
        except OSError:
            return
        if not data:
            return
        for signum in data:
            if signum in signals:
                stop.delivered(signum)

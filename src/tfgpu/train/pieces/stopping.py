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
loop's condition does not read the cap; instead a call ends with one scalar all-reduce of every
worker's "asked" flag (``agreed``), and all of them read the same sum: a signal to one worker
(one pod preempted) or to all (Slurm) stops every worker after the same call, and the collective
save that follows finds them all. A collective costs about a millisecond (2.7 ms a call on one
host's gRPC, +23% at one step a call: ``bench/stop_bench.py --every-call``), so a call agrees
only once the steps the workers last agreed on have run since the last call that did: each host
counts the steps it dispatched, the same on every worker, and tells its graph through a local
variable (``Stop.before``), which branches around the collective. The chief proposes the next
period in the same all-reduce (the steps it ran in about ``EVERY_S`` seconds), so every worker
reads the same one; the call that ends an epoch agrees too. A stop waits at most about a second,
one call or the epoch's end, and a run that is never stopped pays one collective a second. A
call there cannot end early, so the chief also proposes the most steps a call may take (those of
a quarter of TFGPU_STOP_GRACE): a tuned call of many steps does not hold a stop past the grace. Under parameter servers the coordinator alone
runs the loop and decides, between its windows.

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
import time
from collections.abc import Iterator
from typing import Any

from tfgpu import env

log = logging.getLogger(__name__)

OPEN = 2**31 - 1  # the cap while no stop is asked: no loop reaches it
EVERY_S = 1.0  # seconds between two calls that agree under several workers (about)
_host: dict[str, Any] = {}  # this host's variables for its graphs (``_host_variable``)


class Asked(Exception):
    """Raised inside the loop at the call boundary where the run stops: the loop saves and
    raises ``StoppedOnRequest`` (never seen by a user)."""


def _host_variable(name: str, value: Any, dtype: str) -> Any:
    """A variable on this host's CPU, made once, outside any strategy (a ``ResourceVariable``
    made directly skips the variable creators a strategy's scope installs: a mirrored one would
    be per replica, and under several workers one for all)."""
    if name not in _host:
        import tensorflow as tf
        from tensorflow.python.ops.resource_variable_ops import ResourceVariable

        with tf.init_scope(), tf.device("/CPU:0"):
            _host[name] = ResourceVariable(value, dtype=dtype, trainable=False, name=f"tfgpu_stop_{name}")
    return _host[name]


def cap() -> Any:
    """The process's stop cap: int32, ``OPEN`` until a stop is asked, then 0."""
    return _host_variable("cap", OPEN, "int32")


def _agreeing() -> Any:
    """Whether the call being dispatched agrees (several workers; ``Stop.before``)."""
    return _host_variable("agreeing", True, "bool")


def _proposal() -> Any:
    """The chief's proposal (``proposals``: the next period and the most steps a call; zeros on
    the other workers)."""
    return _host_variable("proposal", [0.0, 0.0], "float32")


def proposals(steps: int, seconds: float, *, grace: float) -> tuple[float, float]:
    """The chief's proposal from the ``steps`` it ran in ``seconds`` since the last agreement:
    the steps of about ``EVERY_S`` until the next one, and the most steps a call may take, those
    of a quarter of the grace (a tuned call of many steps must not hold a stop past it: under
    several workers a call cannot end early)."""
    rate = steps / max(seconds, 1e-6)
    return (
        float(min(max(1, round(rate * EVERY_S)), 1 << 20)),
        float(min(max(1, int(rate * grace / 4)), 1 << 20)),
    )


def capped(end: Any) -> Any:
    """In a loop's condition: ``end``, or 0 once a stop is asked (read each step)."""
    import tensorflow as tf

    return tf.minimum(end, cap().read_value())


def asked_here() -> Any:
    """In a call's graph, after its loop: 1.0 where this process was asked to stop, else 0.0."""
    import tensorflow as tf

    return tf.cast(cap().read_value() < OPEN, tf.float32)


def agreed(strategy: Any, after: Any) -> Any:
    """In a multi-worker call's graph: [workers asked to stop, the next period in steps], each
    summed over every replica (every worker reads the same two numbers), read once ``after``
    is computed (the loop's end: a request made during the call counts in this call); zeros
    without a collective in the calls that do not agree (``Stop.before``)."""
    import tensorflow as tf

    with tf.control_dependencies([after]):
        local = tf.concat([[asked_here()], _proposal().read_value()], 0)
        now = _agreeing().read_value()
    # each of this worker's replicas carries its share, so the sum is over workers
    share = local / float(len(strategy.extended.worker_devices))

    def across() -> Any:
        per_replica = strategy.run(lambda: tf.identity(share))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    return tf.cond(now, across, lambda: tf.zeros([3]))


class Stop:
    """One run's stop: whether it was asked, by which signal; ``now`` answers at a call's end."""

    def __init__(self, *, across_workers: bool, grace: float, is_chief: bool = True) -> None:
        self.across_workers = across_workers
        self.is_chief = is_chief  # several workers: the one that proposes the period (``proposals``)
        self.grace = grace
        self.asked = threading.Event()
        self.signum: int | None = None
        self._deliveries = 0
        self._lock = threading.Lock()
        self._deadline: threading.Timer | None = None
        self._since = 0  # steps dispatched since the last call that agreed (several workers)
        self._period = 1  # steps between agreeing calls, as last agreed (the first call agrees)
        self._agrees = True  # the value the host's flag holds
        self._agreed_at = time.perf_counter()
        self._last = False  # what the last agreeing call said
        self.longest_call: int | None = None  # several workers: the most steps a call, as agreed

    def before(self, limit: int, *, ends_epoch: bool = False) -> None:
        """Before a call of up to ``limit`` steps (several workers): whether it agrees, from the
        steps dispatched, which every worker counts alike, and at each epoch's end; the flag is
        written only when it changes."""
        if not self.across_workers:
            return
        self._since += limit
        agrees = self._since >= self._period or ends_epoch
        if agrees != self._agrees:
            _agreeing().assign(agrees)
            self._agrees = agrees

    def _agreed(self, values: Any) -> bool:
        """A call that agreed: the period and the longest call all workers read, and the chief's
        next proposal (``proposals``)."""
        asked, period, longest = (float(v) for v in values.numpy())
        now = time.perf_counter()
        if self.is_chief:
            _proposal().assign(proposals(self._since, now - self._agreed_at, grace=self.grace))
        self._period, self._since, self._agreed_at = max(1, int(period)), 0, now
        self.longest_call = int(longest) or None
        return asked > 0

    def now(self, executed: Any = None) -> bool:
        """Whether the run stops after the call that returned ``executed``: this process asked
        (one process), or the call's all-reduce counted a worker asked (several workers: every
        worker reads the same count, so all stop at this call; read only in a call that agreed,
        so the others do not wait for the device)."""
        if not self.across_workers:
            return self.asked.is_set()
        if not self._agrees or self._since == 0:  # not this call's to say, or already read
            return self._agrees and self._last
        self._last = self._agreed(executed.stop)
        return self._last

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
def watching(*, across_workers: bool, is_chief: bool = True) -> Iterator[Stop]:
    """While the loop runs: the stop signals ask ``Stop``; the process's own handling after."""
    stop = Stop(across_workers=across_workers, grace=env.stop_grace(), is_chief=is_chief)
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
        for sig, handler in previous.items():  # None: set outside Python (TensorFlow's own)
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        writer.close()
        reader.shutdown(socket.SHUT_RDWR)
        watcher.join(timeout=5)
        reader.close()
        stop.cancel()
        for name, value in (("cap", OPEN), ("agreeing", True), ("proposal", [0.0, 0.0])):
            if name in _host:  # as before the run: a call outside one (the tuner's) agrees
                _host[name].assign(value)


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

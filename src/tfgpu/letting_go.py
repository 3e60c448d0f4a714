"""Dropping a tf.data iterator without waiting on TensorFlow's autotuner.

Deleting an iterator cancels its autotuning thread and joins it. In TensorFlow 2.21 that thread
misses the wake-up at random (``Model::OptimizeLoop`` is notified by the cancellation callback
before ``IsCancelled()`` turns true, and sleeps out its period, which doubles up to 60 s while the
iterator lives), so a deletion takes as long as the period at random: here 3 deletions of 8 took
1.3-1.4 s after an iterator read for 2.6 s beside two busy cores, and a tfgpu fit of 3 epochs over
a dataset took 178 s where its CPU time was 18 s (tests/test_fit.py, 2026-12-08). Keras's ``fit``
drops its iterators where it stands and waits the same.

tfgpu hands the iterators it is done with (an epoch's, an evaluation's, a run's at its end) to one
background thread, which drops them: the join then waits there, with the GIL released, and the
next epoch starts at once. A process that ends waits for what the thread still holds (an
``atexit`` hook): Python's finalization ends a daemon thread inside TensorFlow's C++ with a forced
unwind, and the process died ("terminate called ... FATAL: exception not rethrown", SIGABRT; or
SIGSEGV) in 2 of about 300 processes of the full suite. The caller gives up every reference of its
own: it passes a list holding the only ones, which ``let_go`` empties (a reference left in the
caller's frame would make the caller's ``return`` the deletion again).
"""

from __future__ import annotations

import atexit
import queue
import threading
from typing import Any

_QUEUE: queue.Queue[list[Any]] = queue.Queue()
_STARTED = threading.Lock()
_thread: threading.Thread | None = None


def let_go(held: list[Any]) -> None:
    """Drop the objects in ``held`` (None skipped) on the background thread; ``held`` is emptied
    here."""
    global _thread
    handed = [thing for thing in held if thing is not None]
    held.clear()
    if not handed:
        return
    with _STARTED:
        if _thread is None or not _thread.is_alive():
            if _thread is None:  # a process ends after the drops it asked for, not inside one
                atexit.register(_QUEUE.join)
            _thread = threading.Thread(target=_drop_forever, name="tfgpu-let-go", daemon=True)
            _thread.start()
    _QUEUE.put(handed)


def let_go_of(owner: Any, *names: str) -> None:
    """Each of ``owner``'s attributes ``names`` set to None, what they held dropped on the
    background thread."""
    held = [getattr(owner, name) for name in names]
    for name in names:
        setattr(owner, name, None)
    let_go(held)


def _drop_forever() -> None:
    while True:
        handed = _QUEUE.get()
        handed.clear()  # the last references: each deletion (and its join) runs here
        del handed
        _QUEUE.task_done()


def wait(timeout: float) -> bool:
    """Whether every object handed over was dropped within ``timeout`` seconds (tests, benches)."""
    done = threading.Event()

    def join() -> None:
        _QUEUE.join()
        done.set()

    threading.Thread(target=join, daemon=True).start()
    return done.wait(timeout)

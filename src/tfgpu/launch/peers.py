"""Pods wait for each other before TensorFlow does: names resolve and ports answer, with a ceiling.

Kubernetes starts a Job's pods when it can: one may run minutes before another is scheduled, its
image pulled, its DNS record published. TensorFlow's collectives then fail or hang with a message
that names no pod. So each pod's launcher answers on its first port and waits until every peer's
name resolves and its first port answers (the peer's launcher, or already its TensorFlow server),
then closes that port and starts its processes; a peer still waiting sees the port answer again
once TensorFlow binds it. A pod that never comes is named after the ceiling.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Sequence

from tfgpu.errors import ClusterError

POLL_S = 0.5


class _Answer:
    """Accepts connections on a port until closed; the peer closes first (no TIME_WAIT here, so
    TensorFlow binds the port right after)."""

    def __init__(self, port: int) -> None:
        # every address, IPv6 too where the host has it (TensorFlow binds [::])
        family = socket.AF_INET6 if socket.has_dualstack_ipv6() else socket.AF_INET
        self.sock = socket.create_server(
            ("", port), family=family, backlog=64, reuse_port=False, dualstack_ipv6=family == socket.AF_INET6
        )
        self.sock.settimeout(POLL_S)
        self._done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self._done.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            conn.settimeout(5)
            with contextlib.suppress(OSError), conn:
                conn.recv(1)  # returns when the peer closes

    def close(self) -> None:
        self._done.set()
        self.thread.join()
        self.sock.close()


def answers(address: str) -> bool:
    """Whether something listens at ``host:port``."""
    return _missing(address) is None


def _missing(address: str) -> str | None:
    """None when ``host:port`` answers; else why not, in words."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2) as sock:
            if sock.getsockname() == sock.getpeername():  # a port of this host, connected to itself
                return f"port {port} does not answer"
            return None
    except socket.gaierror:
        return f"{host} does not resolve"
    except OSError:
        return f"port {port} does not answer"


def wait_for_peers(
    own: str,
    peers: Sequence[tuple[str, str]],
    *,
    timeout_s: float,
    notify: Callable[[str], None] | None = None,
) -> None:
    """Answer on ``own``'s port until every ``(name, host:port)`` peer answers, or raise after
    ``timeout_s`` naming the pods still missing and why."""
    answer = _Answer(int(own.rpartition(":")[2]))
    try:
        deadline = time.monotonic() + timeout_s
        waiting = dict(peers)
        told = False
        while True:
            why = {name: _missing(address) for name, address in waiting.items()}
            waiting = {name: waiting[name] for name, reason in why.items() if reason}
            if not waiting:
                return
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f"{len(waiting)} of {len(peers)} peer pod(s) did not answer within {timeout_s:.0f} s: "
                    + "; ".join(f"{name} ({why[name]})" for name in waiting),
                    fix="check that those pods are running (kubectl get pods) and that the headless "
                    "Service / subdomain selects them, or raise --peer-timeout",
                )
            if notify is not None and not told:
                notify(f"waiting for {len(waiting)} peer pod(s) to answer: {', '.join(waiting)}")
                told = True
            time.sleep(POLL_S)
    finally:
        answer.close()

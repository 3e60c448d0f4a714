"""tf.data service on this host in one call: a dispatcher and N worker processes (issue 19).

When one host's cores cannot feed the GPUs (``tfgpu diagnose`` says "more-input-workers"), the
tf.data service runs the pipeline's expensive part on other processes and the trainer reads
finished elements over gRPC. ``DataService`` starts the dispatcher in this process and each
worker in a process of its own (each runs its part of the pipeline on its own core), on free or
given ports; the worker addresses are fixed up front, so static sharding (every element exactly
once) works. With ``work_dir`` the dispatcher journals its state there (fault-tolerant mode): a
dispatcher restarted on the same directory and port lets consumers continue.

Consumers use the address with ``tf.data.experimental.service.distribute``. Worker processes
start with ``python -m tfgpu.data.service worker DISPATCHER PORT``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from tfgpu.errors import ConfigError, InputError

STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class ServiceOptions:
    """workers: worker processes on this host; port: the dispatcher's (0: a free one);
    work_dir: where the dispatcher keeps its state (fault-tolerant mode); host: the name
    consumers reach this host by."""

    workers: int = 2
    port: int = 0
    work_dir: str | None = None
    host: str = "localhost"

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ConfigError("--workers must be at least 1", value=self.workers, fix="pass --workers 2")
        if not 0 <= self.port <= 65535:
            raise ConfigError("--port must be from 0 to 65535", value=self.port, fix="pass 0 for a free port")


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _check_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            raise ConfigError(
                f"Port {port} is already in use on {host}",
                value=port,
                fix="stop what holds it, or pass another --port (0 picks a free one)",
            ) from None


class DataService:
    """A dispatcher (in this process) and its worker processes; a context manager."""

    def __init__(self, options: ServiceOptions | None = None) -> None:
        self.options = options or ServiceOptions()
        self.port = 0
        self.worker_ports: list[int] = []
        self._dispatcher: Any = None
        self._workers: list[subprocess.Popen] = []

    @property
    def address(self) -> str:
        return f"grpc://{self.options.host}:{self.port}"

    def start(self) -> DataService:
        import tensorflow as tf

        host = self.options.host
        self.port = self.options.port or _free_port(host)
        _check_free(host, self.port)
        self.worker_ports = [_free_port(host) for _ in range(self.options.workers)]
        service = tf.data.experimental.service
        config = service.DispatcherConfig(
            port=self.port,
            work_dir=self.options.work_dir,
            fault_tolerant_mode=self.options.work_dir is not None,
            worker_addresses=[f"{host}:{p}" for p in self.worker_ports],
        )
        self._dispatcher = service.DispatchServer(config)
        for port in self.worker_ports:
            self._workers.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tfgpu.data.service", "worker", f"{host}:{self.port}", str(port)],
                    stdin=subprocess.DEVNULL,
                )
            )
        return self

    def failed_worker(self) -> tuple[int, int] | None:
        """(index, exit status) of a worker process that exited, if any."""
        for index, worker in enumerate(self._workers):
            if worker.poll() is not None:
                return index, worker.returncode
        return None

    def wait(self, *, poll_s: float = 0.5) -> int:
        """Serve until SIGINT / SIGTERM (0) or until a worker exits (its status, or 1)."""
        stop = {"signal": False}

        def asked(*_: Any) -> None:
            stop["signal"] = True

        previous = {s: signal.signal(s, asked) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            while not stop["signal"]:
                failed = self.failed_worker()
                if failed is not None:
                    return failed[1] if failed[1] > 0 else 1  # killed by a signal: 1
                time.sleep(poll_s)
            return 0
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def stop(self) -> None:
        """Stop the workers (terminate, then kill after a grace period) and the dispatcher."""
        for worker in self._workers:
            if worker.poll() is None:
                worker.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for worker in self._workers:
            try:
                worker.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        if self._dispatcher is not None:
            self._dispatcher._stop()  # the public API has no stop; the server is in this process
            self._dispatcher = None

    def __enter__(self) -> DataService:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def reachable(address: str, *, timeout_s: float = 5.0) -> None:
    """InputError unless something answers at a ``grpc://host:port`` address within the timeout."""
    target = address.removeprefix("grpc://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(
            "A data service address is grpc://HOST:PORT",
            value=address,
            fix="pass the address tfgpu data-service printed",
        )
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return
    except OSError as exc:
        raise InputError(
            f"No tf.data service dispatcher answers at {address} ({exc.strerror or exc})",
            value=address,
            fix="start one with `tfgpu data-service --workers N`, or check the host and port",
        ) from None


def _worker(dispatcher: str, port: int) -> int:
    """A worker process: serve the dispatcher until terminated."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    host = dispatcher.rpartition(":")[0]
    config = tf.data.experimental.service.WorkerConfig(
        dispatcher_address=dispatcher, worker_address=f"{host}:{port}", port=port
    )
    server = tf.data.experimental.service.WorkerServer(config)
    for sig in (signal.SIGTERM, signal.SIGINT):  # a Ctrl-C reaches the whole process group
        signal.signal(sig, lambda *_: os._exit(0))  # the server has no clean stop either
    server.join()
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "worker":
        sys.exit(_worker(sys.argv[2], int(sys.argv[3])))
    sys.exit("usage: python -m tfgpu.data.service worker DISPATCHER_HOST:PORT PORT")

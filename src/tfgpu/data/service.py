"""tf.data service on this host in one call: a dispatcher and N worker processes (issue 19).

When one host's cores cannot feed the GPUs (``tfgpu diagnose`` says "more-input-workers"), the
tf.data service runs the pipeline's expensive part on other processes and the trainer reads
finished elements over gRPC. ``DataService`` starts the dispatcher in this process and each
worker in a process of its own (each runs its part of the pipeline on its own core), on free or
given ports; the worker addresses are fixed up front, so static sharding (every element exactly
once) works. With ``work_dir`` the dispatcher journals its state there (fault-tolerant mode) and
the ports are kept in ``service.json``: a service restarted on the same directory comes back on
the same addresses, and consumers continue.

Failures, as TensorFlow handles them: a consumer retries a lost worker or dispatcher forever, and
a worker restarted on its address is taken back. So ``wait`` restarts a worker that dies (up to
``max_restarts`` times each); under dynamic sharding the epoch then completes (at most once: the
elements of the split the worker held are skipped), under static sharding the restarted worker
begins its shard again. ``watch`` is the consumer's side: it reports a dispatcher that stopped
answering, so a trainer fails in bounded time instead of waiting forever.

Consumers use the address with ``tf.data.experimental.service.distribute``. Worker processes
start with ``python -m tfgpu.data.service worker DISPATCHER_HOST:PORT WORKER_HOST:PORT PARENT_PID``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfgpu import ports
from tfgpu.errors import ConfigError, InputError
from tfgpu.workers import host_only_env

STOP_GRACE_S = 5.0
DEFAULT_CLUSTER_PORT = 5050  # the dispatcher's port when several hosts must agree on it
# TensorFlow's defaults (a 30 s heartbeat, a worker declared lost after 10 minutes) leave a
# consumer waiting ten minutes on a dead worker; these notice it in seconds.
HEARTBEAT_MS = 1000
WORKER_TIMEOUT_MS = 10_000


@dataclass(frozen=True)
class ServiceOptions:
    """workers: worker processes on this host; port: the dispatcher's (0: a free one);
    work_dir: where the dispatcher keeps its state (fault-tolerant mode); host: the name
    consumers reach this host by; max_restarts: how often each worker is restarted after it
    dies before the service stops (0: a lost worker stops it, for exactly-once readers);
    hosts / node_rank: one service over several hosts (each runs one DataService; the first host
    runs the dispatcher, node r's workers listen on port + 1 + r * workers + i);
    ready_timeout_s: how long node 0 waits for every host's workers to register."""

    workers: int = 2
    port: int = 0
    work_dir: str | None = None
    host: str = "localhost"
    max_restarts: int = 3
    hosts: tuple[str, ...] | None = None
    node_rank: int = 0
    ready_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.ready_timeout_s <= 0:
            raise ConfigError(
                "--ready-timeout must be above 0 seconds", value=self.ready_timeout_s, fix="pass 120"
            )
        if self.hosts is not None and not 0 <= self.node_rank < len(self.hosts):
            raise ConfigError(
                f"--node-rank must be from 0 to {len(self.hosts) - 1} for {len(self.hosts)} hosts",
                value=self.node_rank,
                fix="pass this host's line number in the hosts file, from 0",
            )
        if self.hosts is not None and self.work_dir is not None and self.node_rank > 0:
            raise ConfigError(
                "--work-dir keeps the dispatcher's state, which only node 0 runs",
                value=self.work_dir,
                fix="pass --work-dir on node 0 only",
            )
        if self.workers < 1:
            raise ConfigError("--workers must be at least 1", value=self.workers, fix="pass --workers 2")
        if not 0 <= self.port <= 65535:
            raise ConfigError("--port must be from 0 to 65535", value=self.port, fix="pass 0 for a free port")
        if self.max_restarts < 0:
            raise ConfigError(
                "--max-restarts must be 0 or more", value=self.max_restarts, fix="pass --max-restarts 3"
            )


def _node_worker_ports(port: int, workers: int, rank: int) -> list[int]:
    """Node ``rank``'s worker ports in a cluster: after the dispatcher's, node by node."""
    return [port + 1 + rank * workers + i for i in range(workers)]


class DataService:
    """A dispatcher (in this process) and its worker processes; a context manager."""

    def __init__(self, options: ServiceOptions | None = None) -> None:
        self.options = options or ServiceOptions()
        self.port = 0
        self.worker_ports: list[int] = []
        self.restarts: list[int] = []
        self._dispatcher: Any = None
        self._workers: list[subprocess.Popen] = []
        self._asked: list[bool] | None = None  # set by stop_on_signals: [True] once asked to stop

    @property
    def host(self) -> str:
        """The name this node's workers are reached by."""
        hosts = self.options.hosts
        return hosts[self.options.node_rank] if hosts else self.options.host

    @property
    def address(self) -> str:
        """The dispatcher's address, for readers (``grpc://host:port``)."""
        return f"grpc://{self.options.hosts[0] if self.options.hosts else self.options.host}:{self.port}"

    @property
    def runs_dispatcher(self) -> bool:
        return self.options.node_rank == 0

    def start(self) -> DataService:
        import tensorflow as tf

        self.port, self.worker_ports = self._cluster_ports() if self.options.hosts else self._ports()
        for port in ((self.port,) if self.runs_dispatcher else ()) + tuple(self.worker_ports):
            if ports.in_use(port):
                raise ConfigError(
                    f"Port {port} is already in use on this host",
                    value=port,
                    fix="stop what holds it, or pass another --port (0 picks a free one)",
                )
        if self.options.work_dir:
            _save_ports(self.options.work_dir, self.port, self.worker_ports)
        if self.runs_dispatcher:
            service = tf.data.experimental.service
            config = service.DispatcherConfig(
                port=self.port,
                work_dir=self.options.work_dir,
                fault_tolerant_mode=self.options.work_dir is not None,
                worker_addresses=self.all_worker_addresses(),
                worker_timeout_ms=WORKER_TIMEOUT_MS,
            )
            self._dispatcher = service.DispatchServer(config)
        self._workers = [self._spawn(port) for port in self.worker_ports]
        self.restarts = [0] * len(self._workers)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, *, poll_s: float = 0.2) -> None:
        """Return once every worker, every host's, has registered with the dispatcher. A reader
        that starts earlier silently misses the late workers' shards under static sharding
        (measured: half the rows with one of two workers late)."""
        if not self.runs_dispatcher:
            return
        wanted = len(self.all_worker_addresses())
        deadline = time.monotonic() + self.options.ready_timeout_s
        while (joined := self._dispatcher._num_workers()) < wanted:
            if self.supervise() is not None or time.monotonic() > deadline:
                raise InputError(
                    f"{joined} of {wanted} tf.data service workers registered with the dispatcher at "
                    f"{self.address} within {self.options.ready_timeout_s:g} s",
                    value=self.all_worker_addresses(),
                    fix="start tfgpu data-service --hosts FILE --node-rank R on every host of the hosts file"
                    if self.options.hosts
                    else "see the workers' errors above (run with --verbose)",
                )
            time.sleep(poll_s)

    def _ports(self) -> tuple[int, list[int]]:
        """The dispatcher's and the workers' ports: given, kept in the work directory, or free."""
        host, wanted = self.options.host, self.options.workers
        kept = _load_ports(self.options.work_dir) if self.options.work_dir else None
        if kept is not None and len(kept[1]) != wanted:
            raise ConfigError(
                f"The work directory {self.options.work_dir} holds a service of {len(kept[1])} workers",
                value=wanted,
                fix=f"pass --workers {len(kept[1])} to restart it, or another --work-dir for a new service",
            )
        if kept:
            return self.options.port or kept[0], kept[1]
        free = ports.free_ports(1 + wanted, host)
        return self.options.port or free[0], free[1:]

    def _cluster_ports(self) -> tuple[int, list[int]]:
        port = self.options.port or DEFAULT_CLUSTER_PORT
        return port, _node_worker_ports(port, self.options.workers, self.options.node_rank)

    def all_worker_addresses(self) -> list[str]:
        """Every worker's address, all hosts' (static sharding needs them up front)."""
        if not self.options.hosts:
            return [f"{self.host}:{p}" for p in self.worker_ports]
        n = self.options.workers
        return [
            f"{h}:{p}" for r, h in enumerate(self.options.hosts) for p in _node_worker_ports(self.port, n, r)
        ]

    def _spawn(self, port: int) -> subprocess.Popen:
        dispatcher = self.address.removeprefix("grpc://")
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tfgpu.data.service",
                "worker",
                dispatcher,
                f"{self.host}:{port}",
                str(os.getpid()),
            ],
            stdin=subprocess.DEVNULL,
            env=host_only_env(),
        )

    def supervise(
        self, *, on_restart: Callable[[int, int, int], None] | None = None
    ) -> tuple[int, int] | None:
        """Restart each worker that died on its port; ``on_restart(index, status, restarts)`` is
        told. None while serving; (index, exit status) of a worker that died past ``max_restarts``
        (a negative status: killed by that signal)."""
        for index, worker in enumerate(self._workers):
            status = worker.poll()
            if status is None:
                continue
            if self.restarts[index] >= self.options.max_restarts:
                return index, status
            self.restarts[index] += 1
            self._workers[index] = self._spawn(self.worker_ports[index])
            if on_restart is not None:
                on_restart(index, status, self.restarts[index])
        return None

    @contextlib.contextmanager
    def stop_on_signals(self) -> Iterator[None]:
        """From here on, SIGINT / SIGTERM ask ``wait`` to stop instead of raising: enter it before
        saying the service serves, so a Ctrl-C right after that line stops it cleanly (exit 0),
        not with a KeyboardInterrupt before ``wait`` began. The old handlers come back after."""
        asked: list[bool] = []
        previous = {
            s: signal.signal(s, lambda *_: asked.append(True)) for s in (signal.SIGINT, signal.SIGTERM)
        }
        self._asked = asked
        try:
            yield
        finally:
            self._asked = None
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def wait(
        self, *, poll_s: float = 0.5, on_restart: Callable[[int, int, int], None] | None = None
    ) -> tuple[int, int] | None:
        """Serve and supervise until SIGINT / SIGTERM (None) or until a worker dies once more than
        ``max_restarts`` times ((index, exit status), as ``supervise`` says)."""
        with contextlib.nullcontext() if self._asked is not None else self.stop_on_signals():
            while not self._asked:
                lost = self.supervise(on_restart=on_restart)
                if lost is not None:
                    return lost
                time.sleep(poll_s)
        return None

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


def watch(
    address: str, *, timeout_s: float, on_lost: Callable[[str], None], poll_s: float = 2.0
) -> threading.Event:
    """Call ``on_lost(message)`` once when the dispatcher at ``address`` has not answered for
    ``timeout_s`` seconds. TensorFlow's consumers retry a lost dispatcher forever (a restarted
    one is taken back), so without this a trainer whose service went away waits for ever.
    Set the returned event to stop watching."""
    done = threading.Event()

    def run() -> None:
        last = time.monotonic()
        while not done.wait(poll_s):
            try:
                reachable(address, timeout_s=poll_s)
                last = time.monotonic()
            except InputError:
                if time.monotonic() - last >= timeout_s:
                    on_lost(
                        f"The tf.data service at {address} stopped answering {timeout_s:g} s ago, mid-run "
                        "(its dispatcher, or a worker it could not restart, is gone; tfgpu data-service's "
                        "output names it)"
                    )
                    return

    threading.Thread(target=run, name="tfgpu-service-watch", daemon=True).start()
    return done


def _load_ports(work_dir: str) -> tuple[int, list[int]] | None:
    path = Path(work_dir) / "service.json"
    if not path.exists():
        return None
    try:
        kept = json.loads(path.read_text())
        return int(kept["port"]), [int(p) for p in kept["worker_ports"]]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(
            f"{path} cannot be read",
            value=path.read_text()[:200],
            fix="delete it, or pass another --work-dir",
        ) from None


def _save_ports(work_dir: str, port: int, worker_ports: list[int]) -> None:
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    (Path(work_dir) / "service.json").write_text(json.dumps({"port": port, "worker_ports": worker_ports}))


def _worker(dispatcher: str, address: str, parent: int) -> int:
    """A worker process: serve the dispatcher until terminated or until its parent is gone.

    The main thread sleeps in Python rather than in ``server.join()``: signal handlers only run
    between Python bytecodes, so a joined worker ignores SIGTERM, and an orphan would serve on.
    """
    import tensorflow as tf

    config = tf.data.experimental.service.WorkerConfig(
        dispatcher_address=dispatcher,
        worker_address=address,
        port=int(address.rpartition(":")[2]),
        heartbeat_interval_ms=HEARTBEAT_MS,
    )
    server = tf.data.experimental.service.WorkerServer(config)  # serves while referenced
    for sig in (signal.SIGTERM, signal.SIGINT):  # a Ctrl-C reaches the whole process group
        signal.signal(sig, lambda *_: os._exit(0))  # the server has no clean stop
    while parent in (0, os.getppid()):
        time.sleep(0.5)
    del server
    os._exit(0)


if __name__ == "__main__":
    if len(sys.argv) in (4, 5) and sys.argv[1] == "worker":
        sys.exit(_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) == 5 else 0))
    sys.exit("usage: python -m tfgpu.data.service worker DISPATCHER_HOST:PORT WORKER_HOST:PORT [PARENT_PID]")

"""``tfgpu data-service --workers N``: a tf.data service dispatcher and N workers on this host."""

from __future__ import annotations

import argparse
import sys

from tfgpu.cli import _common


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "data-service",
        help="run a tf.data service (dispatcher and workers) on this host, for pipelines one process cannot feed",
    )
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--port", type=int, default=0, help="the dispatcher's port (default: a free one)")
    p.add_argument("--work-dir", help="keep the dispatcher's state here: restarted on it, consumers continue")
    p.add_argument("--host", default="localhost", help="the name consumers reach this host by")
    p.add_argument(
        "--max-restarts",
        type=int,
        default=3,
        help="restart a worker that dies up to this many times (default 3; 0: a lost worker stops the "
        "service, for exactly-once readers, whose shard a restarted worker would read again)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object once serving")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tfgpu.data.service import DataService, ServiceOptions

    options = ServiceOptions(
        workers=args.workers,
        port=args.port,
        work_dir=args.work_dir,
        host=args.host,
        max_restarts=args.max_restarts,
    )
    with DataService(options) as service:
        if args.json:
            _common.print_json(
                {"address": service.address, "workers": options.workers, "worker_ports": service.worker_ports}
            )
        else:
            _common.out.print(
                f"tf.data service at {service.address} with {options.workers} workers; Ctrl-C stops it"
            )
            _common.out.print(
                "use it: dataset.apply(tf.data.experimental.service.distribute("
                f'"distributed_epoch", "{service.address}"))'
            )
        sys.stdout.flush()
        status = service.wait(on_restart=lambda *a: _restarted(service, *a))
        failed = service.failed_worker()
    if status and failed is not None:
        _common.err.print(
            f"[bold red]error:[/] data-service worker {failed[0]} (port {service.worker_ports[failed[0]]}) "
            f"exited with status {failed[1]} after {service.restarts[failed[0]]} restarts; stopped the service"
        )
    return status


def _restarted(service, index: int, status: int, restarts: int) -> None:
    _common.err.print(
        f"[yellow]warning:[/] data-service worker {index} (port {service.worker_ports[index]}) exited with "
        f"status {status}; restarted it ({restarts} of {service.options.max_restarts})"
    )

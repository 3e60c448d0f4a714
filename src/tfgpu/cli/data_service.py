"""``tfgpu data-service --workers N``: a tf.data service dispatcher and N workers on this host."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from tfgpu.cli import _common
from tfgpu.errors import ConfigError


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
        "--hosts",
        help="one service over several hosts: a file with one host per line, the first runs the dispatcher "
        "(under Slurm: read from srun's variables)",
    )
    p.add_argument("--node-rank", type=int, default=0, help="this host's line in --hosts, from 0")
    p.add_argument(
        "--nnodes",
        type=int,
        help="on a pod of a Kubernetes Indexed Job: the Job's pods (pod 0 runs the dispatcher; a "
        "JobSet's pods are read from their labels)",
    )
    p.add_argument("--subdomain", help="Kubernetes: the headless Service the pods reach each other by")
    p.add_argument(
        "--ready-timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="node 0 waits this long for every host's workers to register (default 120)",
    )
    p.add_argument(
        "--max-restarts",
        type=int,
        default=3,
        help="restart a worker that dies up to this many times (default 3; 0: a lost worker stops the "
        "service, for exactly-once readers, whose shard a restarted worker would read again)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object once serving")
    p.set_defaults(run=run)


def options_from(args: argparse.Namespace, environ=os.environ):
    """ServiceOptions from the command line; the cluster layout from --hosts, Slurm, or the
    Kubernetes Indexed Job or JobSet the pod is in."""
    from tfgpu.data.service import ServiceOptions
    from tfgpu.launch import kubernetes
    from tfgpu.launch.plan import read_hosts_file, slurm_layout

    hosts, rank = read_hosts_file(args.hosts), args.node_rank
    slurm = slurm_layout(environ) if hosts is None else None
    several = slurm is not None and len(slurm[0]) > 1
    pod = None
    if hosts is None and not several:
        pod = kubernetes.detect(environ, nnodes=args.nnodes, subdomain=args.subdomain)
    if several:
        hosts, rank = tuple(slurm[0]), slurm[1]
    elif pod is not None:
        if pod.role != "worker":
            raise ConfigError(
                f"tfgpu data-service runs on a JobSet's worker pods; this is {pod.role} pod {pod.index}",
                value=pod.name,
                fix="run it in a replicated job named worker (every pod serves, pod 0 dispatches)",
            )
        hosts, rank = pod.workers, pod.index
    return ServiceOptions(
        workers=args.workers,
        port=args.port,
        work_dir=args.work_dir,
        host=args.host,
        max_restarts=args.max_restarts,
        hosts=hosts,
        node_rank=rank,
        ready_timeout_s=args.ready_timeout,
    )


def run(args: argparse.Namespace) -> int:
    from tfgpu.data.service import DataService

    options = options_from(args)
    if options.hosts and options.node_rank == 0:
        _common.err.print(
            f"waiting for the tf.data service workers of {len(options.hosts)} hosts to register"
        )
    with DataService(options) as service, service.stop_on_signals():
        summary = {
            "address": service.address,
            "workers": options.workers,
            "worker_ports": service.worker_ports,
            "node_rank": options.node_rank,
            "dispatcher": service.runs_dispatcher,
        }
        from tfgpu import exposure

        ports = [*service.worker_ports]
        if service.runs_dispatcher:
            ports.append(int(service.address.rpartition(":")[2]))
        exposed = exposure.warning(ports)
        if exposed:
            _common.err.print(f"warning: {exposed}", markup=False, highlight=False)
        if args.json:
            _common.print_json(summary)
        elif not service.runs_dispatcher:
            _common.out.print(
                f"{options.workers} tf.data service workers on {service.host} (ports "
                f"{', '.join(map(str, service.worker_ports))}) serve the dispatcher at {service.address}; "
                "Ctrl-C stops them"
            )
        else:
            _common.out.print(
                f"tf.data service at {service.address} with "
                f"{len(service.all_worker_addresses())} worker(s); Ctrl-C stops it"
            )
            _common.out.print(
                f"use it: tfgpu train TASK --data-service {service.address}, or "
                f'tfgpu.data.pipeline(..., service="{service.address}")'
            )
        sys.stdout.flush()
        lost = service.wait(on_restart=lambda *a: _restarted(service, *a))
    if lost is None:
        return 0
    index, status = lost
    _common.err.print(
        f"[bold red]error:[/] data-service worker {index} (port {service.worker_ports[index]}) "
        f"{_ended(status)} after {service.restarts[index]} restart(s); stopped the service"
    )
    return status if status > 0 else 1  # killed by a signal: 1


def _restarted(service, index: int, status: int, restarts: int) -> None:
    _common.err.print(
        f"[yellow]warning:[/] data-service worker {index} (port {service.worker_ports[index]}) {_ended(status)}; "
        f"restarted it ({restarts} of {service.options.max_restarts})"
    )


def _ended(status: int) -> str:
    if status < 0:
        return f"was killed by {signal.Signals(-status).name}"
    return f"exited with status {status}"

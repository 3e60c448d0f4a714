"""``tfgpu launch [options] -- COMMAND [ARGS...]``: run COMMAND as a TensorFlow cluster."""

from __future__ import annotations

import argparse

from rich.table import Table

from tfgpu import choices
from tfgpu.cli import _common
from tfgpu.errors import ConfigError
from tfgpu.launch.manifest import KINDS
from tfgpu.launch.plan import read_hosts_file
from tfgpu.launch.spec import DEFAULT_PORT


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "launch",
        help="run a command as several processes with TF_CONFIG and GPUs assigned",
        usage="tfgpu launch [options] -- COMMAND [ARGS...]",
    )
    p.add_argument("--nproc", type=int, help="worker processes per node (default: one per GPU, or 1)")
    p.add_argument("--gpus", help="GPUs to use: 'all' or indices such as 0,1 (default all visible)")
    share = p.add_mutually_exclusive_group()
    share.add_argument("--gpus-per-proc", type=int, help="GPUs each worker gets")
    share.add_argument("--procs-per-gpu", type=int, help="workers sharing each GPU, each with a memory cap")
    p.add_argument(
        "--memory-per-proc", type=int, metavar="MB", help="memory cap per process when sharing a GPU"
    )
    p.add_argument("--ps", type=int, default=0, help="parameter-server processes (adds a chief)")
    p.add_argument("--chief", action="store_true", help="add a chief process")
    p.add_argument(
        "--max-restarts", type=int, default=0, help="restart all processes up to R times after a failure"
    )
    p.add_argument(
        "--nnodes", type=int, help="nodes in the cluster (with --hosts; on Kubernetes: the Job's pods)"
    )
    p.add_argument("--node-rank", type=int, default=0, help="this node's index in the hosts file")
    p.add_argument("--hosts", help="file with one host per line, one per node")
    p.add_argument(
        "--port",
        type=int,
        help=f"first port on each node or pod (default {DEFAULT_PORT}; one node picks free ports)",
    )
    p.add_argument(
        "--subdomain",
        help="Kubernetes: the headless Service the Job's pods reach each other by (default: from the "
        "pod's name; a JobSet's name)",
    )
    p.add_argument(
        "--peer-timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="Kubernetes: how long a pod waits for its peers to answer (default 600)",
    )
    k8s = p.add_argument_group("print a Kubernetes manifest that runs the command (--emit)")
    k8s.add_argument(
        "--emit",
        choices=KINDS,
        help="kubernetes: a JobSet; kubernetes-job: an Indexed Job and a headless Service",
    )
    k8s.add_argument("--nodes", type=int, help="worker pods (default 1)")
    k8s.add_argument("--gpus-per-node", type=int, default=1, help="GPUs per worker pod (default 1)")
    k8s.add_argument("--image", help="the container image with tfgpu, TensorFlow and your program")
    k8s.add_argument("--name", default="tfgpu-train", help="the JobSet's or Job's name (default tfgpu-train)")
    k8s.add_argument(
        "--no-network-policy",
        action="store_true",
        help="leave out the NetworkPolicy that lets only the job's pods reach its TensorFlow ports",
    )
    k8s.add_argument(
        "--checkpoint-claim",
        default="tfgpu-checkpoints",
        help="a PersistentVolumeClaim mounted at /checkpoints on every pod ('none': no volume)",
    )
    p.add_argument(
        "--grace", type=float, default=10.0, help="seconds between terminate and kill when stopping"
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan and start nothing")
    p.add_argument(
        "--private-network",
        action="store_true",
        help="single host: run the processes in a network namespace of their own (loopback only), so "
        "no other machine can reach their TensorFlow ports; they reach no network either",
    )
    p.add_argument("--private-network-inside", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="with --dry-run: print the plan as JSON")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    p.set_defaults(run=run)


def _command(args: argparse.Namespace) -> tuple[str, ...]:
    """The command after ``--``."""
    command = list(args.command)
    return tuple(command[1:] if command and command[0] == "--" else command)


def config_from(args: argparse.Namespace):
    from tfgpu.env import parse_gpu_list
    from tfgpu.launch import LaunchConfig

    command = _command(args)
    hosts = read_hosts_file(args.hosts)
    return LaunchConfig(
        command=command,
        nproc=args.nproc,
        gpus=parse_gpu_list(args.gpus) if args.gpus else None,
        gpus_per_proc=args.gpus_per_proc,
        procs_per_gpu=args.procs_per_gpu,
        memory_per_proc_mb=args.memory_per_proc,
        ps=args.ps,
        chief=args.chief,
        max_restarts=args.max_restarts,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        hosts=hosts,
        port=args.port,
        grace_s=args.grace,
        subdomain=args.subdomain,
        peer_timeout_s=args.peer_timeout,
    )


def manifest_from(args: argparse.Namespace):
    from tfgpu.launch.manifest import ManifestOptions

    command = _command(args)
    ignored = {
        "--nproc": args.nproc,
        "--gpus": args.gpus,
        "--procs-per-gpu": args.procs_per_gpu,
        "--chief": args.chief or None,
        "--hosts": args.hosts,
        "--dry-run": args.dry_run or None,
    }
    given = [flag for flag, value in ignored.items() if value is not None]
    if given:
        raise ConfigError(
            f"--emit writes a manifest; {', '.join(given)} would be ignored",
            value=given,
            fix="use --nodes, --gpus-per-node, --gpus-per-proc and --ps to shape the cluster",
        )
    if args.nodes is not None and args.nnodes is not None and args.nodes != args.nnodes:
        raise ConfigError("--nodes and --nnodes disagree", value=(args.nodes, args.nnodes), fix="pass one")
    nodes = next((n for n in (args.nodes, args.nnodes) if n is not None), 1)
    if nodes < 1:  # 0 was read as "not given" and emitted one node
        raise ConfigError("--nodes must be at least 1", value=nodes, fix="pass --nodes 2 for two worker pods")
    return ManifestOptions(
        command=command,
        image=args.image or "",
        nodes=nodes,
        gpus_per_node=args.gpus_per_node,
        ps=args.ps,
        gpus_per_proc=args.gpus_per_proc,
        kind=args.emit,
        name=args.name,
        port=DEFAULT_PORT if args.port is None else args.port,
        checkpoint_claim=None if args.checkpoint_claim.lower() == "none" else args.checkpoint_claim,
        max_restarts=args.max_restarts,
        network_policy=not args.no_network_policy,
    )


def _render(plan) -> None:
    table = Table(title=f"tfgpu launch plan ({plan.source})")
    for column in ("process", "here", "address", "GPUs", "memory cap", "environment"):
        table.add_column(column)
    for p in plan.processes:
        address = plan.cluster[p.role][p.index]
        shown = {k: v for k, v in p.env.items() if k != "TF_CONFIG"}
        table.add_row(
            p.label,
            "yes" if p.local else "",
            address,
            ",".join(map(str, p.gpus)) or "-",
            f"{p.memory_mb} MB" if p.memory_mb else "-",
            " ".join(f"{k}={v}" for k, v in shown.items()),
        )
    _common.out.print(table)
    _common.out.print("command: " + " ".join(plan.processes[0].command))
    from tfgpu.launch import exposure_warning, local_ports

    listening = ", ".join(map(str, local_ports(plan))) or "none"
    _common.out.print(
        f"listening here: TensorFlow's gRPC servers on ports {listening}, every interface, "
        "unauthenticated (docs/multi-node.md, Security)",
        markup=False,
        highlight=False,
    )
    exposed = exposure_warning(plan)
    if exposed:
        _common.out.print(f"warning: {exposed}", markup=False, highlight=False)
    for p in plan.local:
        _common.out.print(
            f"TF_CONFIG of {p.label}: {p.env['TF_CONFIG']}", markup=False, highlight=False, soft_wrap=True
        )


def _in_private_network(args: argparse.Namespace) -> int:
    """This same ``tfgpu launch`` again, in a new network namespace (``tfgpu.launch.private``)."""
    import subprocess
    import sys

    from tfgpu.cli import Parser
    from tfgpu.launch import private

    private.check_single_host(hosts=args.hosts, nnodes=args.nnodes)
    argv = list(Parser.argv)
    end = argv.index("--") if "--" in argv else len(argv)
    ours = [a for a in argv[:end] if a != "--private-network"]
    at = ours.index("launch") + 1
    command = [*ours[:at], private.INSIDE, *ours[at:], *argv[end:]]
    return subprocess.call([*private.wrapper(), sys.executable, "-m", "tfgpu.cli", *command])


def run(args: argparse.Namespace) -> int:
    from tfgpu.launch import check_ports, launch, plan_launch

    if args.emit:
        from tfgpu.launch.manifest import documents, to_yaml

        _common.out.file.write(to_yaml(documents(manifest_from(args))))
        return 0
    if args.private_network and not args.private_network_inside:
        return _in_private_network(args)
    if args.private_network_inside:
        from tfgpu.launch import private

        private.bring_loopback_up()
    config = config_from(args)
    if args.dry_run:
        plan = plan_launch(config)
        check_ports(plan)
        if args.json:
            _common.print_json({**plan.to_dict(), "choices": choices.as_dict()})
        else:
            _render(plan)
            if choices.all_choices():
                _common.out.print(choices.summary_line())
        return 0

    def notify(message: str) -> None:
        _common.err.print(f"[yellow]tfgpu launch:[/] {message}")

    result = launch(config, notify=notify)
    if choices.all_choices():
        _common.err.print(choices.summary_line())
    if result.stopped:
        pass  # said by notify: stopped on request, resumable
    elif result.interrupted:
        _common.err.print("tfgpu launch: interrupted; stopped every process")
    elif result.failed:
        _common.err.print(
            f"[bold red]tfgpu launch: {result.failed} failed with exit status {result.failed_status}[/]; "
            f"stopped the other processes. Last lines of {result.failed}:"
        )
        for line in result.tail[-10:]:
            _common.err.print(f"  {line}", markup=False, highlight=False)
        if not result.tail:
            _common.err.print(f"  ({result.failed} printed nothing before it failed)")
    return result.exit_code

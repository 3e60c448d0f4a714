"""The launch plan, computed without side effects: every process's role, TF_CONFIG, GPUs and env.

``make_plan`` takes the GPU inventory, the environment and a port picker as arguments, so every
rule (GPU assignment, memory shares, chief / ps roles, Slurm, hosts files, TF_CONFIG given by a
scheduler) is testable on a machine without GPUs, and ``--dry-run`` prints exactly what would run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tfgpu import choices, cluster, env
from tfgpu.errors import ConfigError, InputError
from tfgpu.launch import kubernetes
from tfgpu.launch.spec import DEFAULT_PORT, LaunchConfig
from tfgpu.nvml import GpuInfo

MEMORY_SHARE = 0.9  # of a GPU's memory, split between the processes sharing it


@dataclass(frozen=True)
class ProcessPlan:
    role: str
    index: int
    label: str  # "worker 1"
    command: tuple[str, ...]
    env: dict[str, str]  # what tfgpu sets on top of the launcher's environment
    gpus: tuple[int, ...]
    memory_mb: int | None
    local: bool  # runs on this node

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LaunchPlan:
    processes: tuple[ProcessPlan, ...]
    cluster: dict[str, list[str]]
    source: str  # local | hosts | slurm | tf_config | indexed-job | jobset
    notes: tuple[str, ...] = field(default_factory=tuple)
    first_attempt: int = 0  # TFGPU_LAUNCH_ATTEMPT of the first start (a JobSet's restart attempt)
    rendezvous: str | None = None  # a pod's first address: it answers there until its peers do
    peers: tuple[tuple[str, str], ...] = ()  # the other pods: (name, first address)

    @property
    def local(self) -> tuple[ProcessPlan, ...]:
        return tuple(p for p in self.processes if p.local)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "cluster": self.cluster,
            "notes": list(self.notes),
            "attempt": self.first_attempt,
            "processes": [p.to_dict() for p in self.processes],
        }


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compact host lists: 'gpu[01-03,07],cpu5' -> gpu01 gpu02 gpu03 gpu07 cpu5."""
    hosts: list[str] = []
    for match in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?([^,]*)", text):
        prefix, ranges, suffix = match.group(1), match.group(2), match.group(3)
        if not prefix and not ranges:
            continue
        if ranges is None:
            hosts.append(prefix + suffix)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            width = len(low)
            for number in range(int(low), int(high or low) + 1):
                hosts.append(f"{prefix}{number:0{width}d}{suffix}")
    return hosts


def read_hosts_file(path: str | None) -> tuple[str, ...] | None:
    """The hosts of a hosts file (one per line, first word; # comments), or None without one."""
    if path is None:
        return None
    file = Path(path)
    if not file.exists():
        raise InputError(f"Hosts file {path} does not exist", value=path, fix="write one host name per line")
    hosts = tuple(
        line.split()[0] for line in file.read_text().splitlines() if line.strip() and not line.startswith("#")
    )
    if not hosts:
        raise InputError(f"Hosts file {path} lists no host", value=path, fix="write one host name per line")
    return hosts


def slurm_layout(environ: Mapping[str, str]) -> tuple[list[str], int] | None:
    """(hosts, this node's rank) from SLURM_* variables, or None when not under Slurm."""
    if "SLURM_JOB_ID" not in environ:
        return None
    nodelist = (
        environ.get("SLURM_STEP_NODELIST")
        or environ.get("SLURM_JOB_NODELIST")
        or environ.get("SLURM_NODELIST")
    )
    if not nodelist:
        raise ConfigError(
            "Under Slurm, but SLURM_JOB_NODELIST is not set", fix="run tfgpu launch through srun"
        )
    hosts = expand_hostlist(nodelist)
    rank = int(environ.get("SLURM_NODEID", environ.get("SLURM_PROCID", "0")))
    tasks = int(environ.get("SLURM_STEP_NUM_TASKS", environ.get("SLURM_NTASKS", str(len(hosts)))))
    if tasks != len(hosts):
        raise ConfigError(
            f"srun started {tasks} tfgpu launch tasks on {len(hosts)} nodes; tfgpu launch wants one per node",
            value={"tasks": tasks, "nodes": hosts},
            fix="run srun --ntasks-per-node=1 tfgpu launch --nproc N ... (tfgpu starts the N processes)",
        )
    return hosts, rank


def _assign_gpus(
    config: LaunchConfig, inventory: Sequence[GpuInfo], workers: int | None
) -> tuple[int, list[tuple[tuple[int, ...], int | None]]]:
    """(workers per node, [(gpus, memory cap MB)] per worker)."""
    present = {g.index: g for g in inventory}
    if config.gpus is not None:
        missing = [i for i in config.gpus if i not in present]
        if missing:
            raise ConfigError(
                f"--gpus names GPU {missing[0]}, which does not exist",
                value=list(config.gpus),
                fix=f"use GPUs {sorted(present)} (see `tfgpu doctor`)"
                if present
                else "this machine has no visible GPU: leave --gpus out",
            )
        gpus = list(config.gpus)
    else:
        gpus = sorted(present)
    if not gpus:
        if config.gpus_per_proc or config.procs_per_gpu:
            raise ConfigError(
                "GPU options were given, but there is no visible GPU",
                value=config.gpus_per_proc or config.procs_per_gpu,
                fix="leave out --gpus-per-proc / --procs-per-gpu, or run on a GPU machine",
            )
        return workers or 1, [((), None)] * (workers or 1)
    if config.procs_per_gpu:
        per = config.procs_per_gpu
        workers = workers or len(gpus) * per
        if workers > len(gpus) * per:
            raise ConfigError(
                f"{workers} processes do not fit {len(gpus)} GPU(s) x {per} per GPU",
                value=workers,
                fix=f"use --nproc {len(gpus) * per} or fewer, or raise --procs-per-gpu",
            )
        smallest = min(present[g].memory_total_mb for g in gpus)
        memory = config.memory_per_proc_mb or int(smallest * MEMORY_SHARE / per)
        if memory * per > smallest:
            raise ConfigError(
                f"{per} processes x {memory} MB do not fit a GPU with {smallest:.0f} MB",
                value={"procs_per_gpu": per, "memory_per_proc_mb": memory},
                fix=f"use --memory-per-proc {int(smallest * MEMORY_SHARE / per)} or fewer, or fewer --procs-per-gpu",
            )
        if not config.memory_per_proc_mb:
            choices.record(
                "launch.memory_per_proc",
                f"{memory} MB",
                f"{MEMORY_SHARE:.0%} of {smallest:.0f} MB split {per} ways",
            )
        return workers, [((gpus[i // per],), memory) for i in range(workers)]
    per = config.gpus_per_proc or 1
    workers = workers or max(1, len(gpus) // per)
    if workers * per > len(gpus):
        raise ConfigError(
            f"{workers} processes x {per} GPU(s) each need {workers * per} GPUs; {len(gpus)} available",
            value={"nproc": workers, "gpus_per_proc": per},
            fix="lower --nproc or --gpus-per-proc, or share GPUs with --procs-per-gpu",
        )
    return workers, [(tuple(gpus[i * per : (i + 1) * per]), None) for i in range(workers)]


def _env(
    tf_config: dict[str, Any], gpus: tuple[int, ...], memory: int | None, *, hide_gpus: bool
) -> dict[str, str]:
    env = {"TF_CONFIG": json.dumps(tf_config)}
    if gpus or hide_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
    if memory:
        env["TFGPU_MEMORY_LIMIT_MB"] = str(memory)
    return env


def make_plan(
    config: LaunchConfig,
    *,
    inventory: Sequence[GpuInfo],
    environ: Mapping[str, str],
    free_ports: Callable[[int], list[int]],
    pod: kubernetes.PodLayout | None = None,
) -> LaunchPlan:
    """Plan every process of this launch (see the module docstring); ``pod``: this pod's place in
    a Kubernetes Indexed Job or JobSet (:func:`tfgpu.launch.kubernetes.detect`)."""
    given = cluster.from_environ(environ)
    if given is not None and pod is None and "SLURM_JOB_ID" not in environ:
        return _plan_given(config, given, inventory)
    nodes = _nodes(config, environ, pod)
    if nodes.ps_hosts and config.nproc is None:
        raise ConfigError(
            "A JobSet with ps pods needs --nproc on every pod: a ps pod cannot see the workers' GPUs",
            value=list(nodes.ps_hosts),
            fix="pass the same --nproc N (workers per worker pod) to every pod's tfgpu launch",
        )
    if nodes.rank is None:  # a ps pod: the workers run elsewhere
        workers, assignment = config.nproc or 1, [((), None)] * (config.nproc or 1)
    else:
        workers, assignment = _assign_gpus(config, inventory, config.nproc)
    n_ps = len(nodes.ps_hosts) or config.ps
    chief = config.chief or n_ps > 0
    if n_ps and not config.chief:
        choices.record("launch.chief", "added", "ParameterServerStrategy needs a chief to coordinate")
    # --nproc counts trainers per node. An MWMS chief is a trainer (node 0's first slot); a
    # parameter-server chief only coordinates, so it (and the ps tasks, unless they have pods of
    # their own) are extra, GPU-less, on node 0.
    coordinator = n_ps > 0
    extra = (1 if coordinator else 0) + (0 if nodes.ps_hosts else n_ps)
    address = _addresses(
        config,
        environ,
        nodes,
        [workers + (extra if n == 0 else 0) for n in range(len(nodes.hosts))],
        free_ports,
    )
    slots = {h: iter(a) for h, a in address.items()}
    roles: list[tuple[str, int, int | None, int | None]] = []  # (role, index, node, trainer slot)
    if coordinator:
        roles.append(("chief", 0, 0, None))
    for node in range(len(nodes.hosts)):
        for slot in range(workers):
            if chief and not coordinator and node == 0 and slot == 0:
                roles.append(("chief", 0, 0, 0))
            else:
                index = node * workers + slot - (1 if chief and not coordinator else 0)
                roles.append(("worker", index, node, slot))
    roles += [("ps", i, None if nodes.ps_hosts else 0, None) for i in range(n_ps)]
    cluster_spec: dict[str, list[str]] = {}
    for role, index, node, _ in roles:
        where = address[nodes.ps_hosts[index]][0] if node is None else next(slots[nodes.hosts[node]])
        cluster_spec.setdefault(role, []).append(where)
    processes = []
    for role, index, node, slot in roles:
        tf_config = {"cluster": cluster_spec, "task": {"type": role, "index": index}}
        gpus, memory = assignment[slot] if slot is not None else ((), None)
        here = node == nodes.rank if node is not None else nodes.ps_rank == index
        processes.append(
            ProcessPlan(
                role=role,
                index=index,
                label=f"{role} {index}",
                command=config.command,
                env=_env(tf_config, gpus, memory, hide_gpus=bool(inventory)),
                gpus=gpus,
                memory_mb=memory,
                local=here,
            )
        )
    cluster.parse_tf_config(
        json.dumps({"cluster": cluster_spec, "task": {"type": roles[0][0], "index": roles[0][1]}})
    )  # checks it
    plan = LaunchPlan(
        processes=tuple(processes),
        cluster=cluster_spec,
        source=nodes.source,
        first_attempt=pod.attempt if pod is not None else 0,
        **_rendezvous(nodes, address, pod),
    )
    return plan if given is None or pod is None else _agree(plan, given)


@dataclass(frozen=True)
class _Nodes:
    hosts: tuple[str, ...]  # the nodes (pods) that run workers
    rank: int | None  # this node among them; None on a ps pod
    source: str
    ps_hosts: tuple[str, ...] = ()  # ps pods of their own (a JobSet); () : ps tasks on node 0
    ps_rank: int | None = None  # this ps pod's index


def _nodes(config: LaunchConfig, environ: Mapping[str, str], pod: kubernetes.PodLayout | None) -> _Nodes:
    if pod is not None:
        worker = pod.role == "worker"
        return _Nodes(
            hosts=pod.workers,
            rank=pod.index if worker else None,
            source=pod.source,
            ps_hosts=pod.ps,
            ps_rank=None if worker else pod.index,
        )
    slurm = slurm_layout(environ)
    if slurm is not None:
        return _Nodes(hosts=tuple(slurm[0]), rank=slurm[1], source="slurm")
    if config.hosts is not None:
        return _Nodes(hosts=config.hosts, rank=config.node_rank, source="hosts")
    if config.nnodes is not None:
        raise ConfigError(
            "--nnodes needs --hosts, srun, or a pod of a Kubernetes Indexed Job or JobSet",
            value=config.nnodes,
            fix="pass --hosts FILE, or leave --nnodes out on one machine",
        )
    if config.port is not None:
        raise ConfigError(
            "--port sets the ports of a multi-node cluster; on one machine tfgpu picks free ports itself",
            value=config.port,
            fix="leave --port out, or pass --hosts FILE",
        )
    return _Nodes(hosts=("localhost",), rank=0, source="local")


def _addresses(
    config: LaunchConfig,
    environ: Mapping[str, str],
    nodes: _Nodes,
    counts: list[int],
    free_ports: Callable[[int], list[int]],
) -> dict[str, list[str]]:
    """Every node's (and ps pod's) addresses: free ports on one machine; else --port, --port+1, ...
    on each host, or where TFGPU_HOST_MAP puts a host name (tests of a multi-node cluster)."""
    if nodes.source == "local":
        ports = iter(free_ports(counts[0]))
        return {"localhost": [f"localhost:{next(ports)}" for _ in range(counts[0])]}
    mapped = env.host_map(environ)

    def at(host: str, count: int) -> list[str]:
        name, port = mapped.get(host, (host, config.port or DEFAULT_PORT))
        return [f"{name}:{port + i}" for i in range(count)]

    address = {h: at(h, count) for h, count in zip(nodes.hosts, counts, strict=True)}
    address.update({h: at(h, 1) for h in nodes.ps_hosts})
    return address


def _rendezvous(
    nodes: _Nodes, address: Mapping[str, list[str]], pod: kubernetes.PodLayout | None
) -> dict[str, Any]:
    """A pod's first address, where it answers its peers before starting, and its peers' ones."""
    if pod is None:
        return {}
    first = {h: address[h][0] for h in (*nodes.hosts, *nodes.ps_hosts)}
    return {
        "rendezvous": first[pod.name],
        "peers": tuple((h, a) for h, a in first.items() if h != pod.name),
    }


def _agree(plan: LaunchPlan, given: cluster.ClusterSpec) -> LaunchPlan:
    """TF_CONFIG set on a pod of a Job tfgpu reads: used when it is the cluster tfgpu would build
    for this pod's one process; else the two disagree and the pod cannot know which is right."""
    mine = [json.loads(p.env["TF_CONFIG"]) for p in plan.local]
    if len(mine) == 1 and mine[0] == given.to_tf_config():
        return plan
    raise ConfigError(
        f"TF_CONFIG is set, and disagrees with the {plan.source} this pod is in",
        value={"TF_CONFIG": given.to_tf_config(), plan.source: mine},
        fix="unset TF_CONFIG in the pod template (tfgpu launch builds it from the job), or run the "
        "program without tfgpu launch",
    )


def _plan_given(config: LaunchConfig, spec: cluster.ClusterSpec, inventory: Sequence[GpuInfo]) -> LaunchPlan:
    """A scheduler (Kubernetes, Vertex AI, ...) set TF_CONFIG: run this one task with it as given."""
    if config.nproc not in (None, 1) or config.ps or config.chief or config.hosts:
        raise ConfigError(
            "TF_CONFIG is already set (by a scheduler), so the cluster is given: each process is launched by the scheduler",
            value={"nproc": config.nproc, "ps": config.ps, "chief": config.chief},
            fix="drop --nproc/--ps/--chief/--hosts, or unset TF_CONFIG to let tfgpu plan the cluster",
        )
    _workers, assignment = _assign_gpus(config, inventory, 1)
    gpus, memory = assignment[0]
    tf_config = spec.to_tf_config()
    process = ProcessPlan(
        role=spec.task_type,
        index=spec.task_index,
        label=f"{spec.task_type} {spec.task_index}",
        command=config.command,
        env=_env(tf_config, gpus, memory, hide_gpus=False) if gpus else {"TF_CONFIG": json.dumps(tf_config)},
        gpus=gpus,
        memory_mb=memory,
        local=True,
    )
    return LaunchPlan(
        processes=(process,),
        cluster={k: list(v) for k, v in spec.cluster.items()},
        source="tf_config",
        notes=("TF_CONFIG given by the environment is used as is",),
    )

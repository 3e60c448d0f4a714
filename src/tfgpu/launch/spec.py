"""LaunchConfig: what ``tfgpu launch`` was asked to run, validated once."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from tfgpu.errors import ConfigError

DEFAULT_PORT = 23456  # the first port of each node of a multi-node cluster


@dataclass(frozen=True)
class LaunchConfig:
    """Args:
    command: the program and its arguments, run once per process.
    nproc: worker processes per node (default: one per assigned GPU, else 1).
    gpus: GPU indices to use (None: every visible GPU).
    gpus_per_proc: GPUs each worker gets.
    procs_per_gpu: workers sharing each GPU (each capped at ``memory_per_proc_mb``).
    memory_per_proc_mb: memory cap per process when sharing (default: 90% of the GPU / procs).
    ps: parameter-server processes (implies a chief: ParameterServerStrategy needs one).
    chief: add a chief process besides the workers.
    max_restarts: restart every process (same cluster) up to this many times after a failure.
    nnodes / node_rank / hosts: a cluster over several machines (hosts file: one host per line);
        on a pod of a Kubernetes Indexed Job, nnodes is the Job's completions.
    subdomain: the DNS suffix a Kubernetes Job's pods reach each other by (default: read from the
        pod's FQDN; a JobSet's name).
    peer_timeout_s: on Kubernetes, how long a pod waits for its peers to answer before starting.
    port: first port of a multi-node cluster (each node uses port, port+1, ...; default
        DEFAULT_PORT); local clusters take free ports.
    grace_s: seconds between terminate and kill when stopping processes.
    """

    command: tuple[str, ...]
    nproc: int | None = None
    gpus: tuple[int, ...] | None = None
    gpus_per_proc: int | None = None
    procs_per_gpu: int | None = None
    memory_per_proc_mb: int | None = None
    ps: int = 0
    chief: bool = False
    max_restarts: int = 0
    nnodes: int | None = None
    node_rank: int = 0
    hosts: tuple[str, ...] | None = None
    port: int | None = None
    grace_s: float = 10.0
    subdomain: str | None = None
    peer_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if not self.command:
            raise ConfigError(
                "No command to launch", fix="put it after --, e.g. tfgpu launch --nproc 2 -- python train.py"
            )
        program = self.command[0]
        if shutil.which(program) is None and not Path(program).exists():
            raise ConfigError(
                f"Unknown command {program!r}: not on PATH and not a file",
                value=program,
                fix="check the spelling, or give the full path",
            )
        for name in ("nproc", "gpus_per_proc", "procs_per_gpu", "memory_per_proc_mb"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(
                    f"--{name.replace('_', '-')} must be at least 1", value=value, fix="pass 1 or more"
                )
        if self.gpus_per_proc and self.procs_per_gpu:
            raise ConfigError(
                "--gpus-per-proc and --procs-per-gpu exclude each other",
                value=(self.gpus_per_proc, self.procs_per_gpu),
                fix="pass one of them",
            )
        if self.memory_per_proc_mb and not self.procs_per_gpu:
            raise ConfigError(
                "--memory-per-proc applies when processes share a GPU",
                value=self.memory_per_proc_mb,
                fix="add --procs-per-gpu M",
            )
        if self.ps < 0 or self.max_restarts < 0:
            raise ConfigError(
                "--ps and --max-restarts cannot be negative",
                value=(self.ps, self.max_restarts),
                fix="pass 0 or more",
            )
        nnodes = self.nnodes if self.nnodes is not None else len(self.hosts or ()) or 1
        if nnodes < 1 or not 0 <= self.node_rank < nnodes:
            raise ConfigError(
                f"--node-rank must be from 0 to {nnodes - 1}",
                value=self.node_rank,
                fix="number the nodes 0, 1, ...",
            )
        if self.hosts is not None and self.nnodes is not None and len(self.hosts) != self.nnodes:
            raise ConfigError(
                f"the hosts file lists {len(self.hosts)} hosts but --nnodes is {self.nnodes}",
                value=list(self.hosts),
                fix="list one host per node, or drop --nnodes",
            )
        if self.peer_timeout_s <= 0:
            raise ConfigError(
                "--peer-timeout must be more than 0 seconds", value=self.peer_timeout_s, fix="pass e.g. 600"
            )
        if self.port is not None and not 0 < self.port < 65536:
            raise ConfigError("--port must be from 1 to 65535", value=self.port, fix="pass e.g. 23456")

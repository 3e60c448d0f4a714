"""``tfgpu launch``: several processes with TF_CONFIG, GPUs assigned or shared, failures handled.

``plan_launch`` computes the plan (pure, printed by ``--dry-run``); ``launch`` checks it can start
(ports free) and runs it under the :class:`~tfgpu.launch.supervisor.Supervisor`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from tfgpu import cluster, exposure, nvml, ports
from tfgpu.errors import ConfigError
from tfgpu.launch import kubernetes, peers
from tfgpu.launch.plan import LaunchPlan, ProcessPlan, expand_hostlist, make_plan
from tfgpu.launch.spec import LaunchConfig
from tfgpu.launch.supervisor import LaunchResult, Supervisor

__all__ = [
    "LaunchConfig",
    "LaunchPlan",
    "LaunchResult",
    "ProcessPlan",
    "expand_hostlist",
    "launch",
    "plan_launch",
]


def plan_launch(
    config: LaunchConfig, *, environ: Mapping[str, str] | None = None, nvml_module: Any = None
) -> LaunchPlan:
    """The plan for this node: GPUs from NVML (under CUDA_VISIBLE_DEVICES), free local ports."""
    environ = os.environ if environ is None else environ
    report = nvml.probe(nvml_module)
    inventory = nvml.visible(report, environ.get("CUDA_VISIBLE_DEVICES"))
    pod = None
    if config.hosts is None:  # a hosts file says where the cluster is, even on a pod
        given = cluster.from_environ(environ) is not None
        pod = kubernetes.detect(
            environ, nnodes=config.nnodes, ps=config.ps, subdomain=config.subdomain, strict=not given
        )
    return make_plan(config, inventory=inventory, environ=environ, free_ports=ports.free_ports, pod=pod)


def check_ports(plan: LaunchPlan) -> None:
    """Fail before starting anything when a local process's port is already taken."""
    if plan.source in ("local", "tf_config"):
        return  # local ports were just found free; a scheduler owns its ports
    for process in plan.local:
        address = plan.cluster[process.role][process.index]
        port = _port(address)
        if ports.in_use(port):
            raise ConfigError(
                f"Port {port} for {process.label} is already in use on this node",
                value=address,
                fix="stop what holds it, or pass another --port",
            )


def local_ports(plan: LaunchPlan) -> list[int]:
    """The ports this node's processes will serve TensorFlow's gRPC on (every interface)."""
    return sorted(_port(plan.cluster[p.role][p.index]) for p in plan.local)


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def exposure_warning(plan: LaunchPlan, interfaces: Mapping[str, Any] | None = None) -> str | None:
    """One line when this host has a public address its processes' servers will listen on
    (``tfgpu.exposure``); None on a private network."""
    return exposure.warning(local_ports(plan), interfaces)


def launch(
    config: LaunchConfig,
    *,
    sink: Callable[[str, bytes], None] | None = None,
    notify: Callable[[str], None] | None = None,
    environ: Mapping[str, str] | None = None,
) -> LaunchResult:
    """Plan, check and run every local process; returns how it ended."""
    plan = plan_launch(config, environ=environ)
    check_ports(plan)
    exposed = exposure_warning(plan)
    if exposed and notify is not None:
        notify(exposed)
    if plan.rendezvous is not None:
        peers.wait_for_peers(plan.rendezvous, plan.peers, timeout_s=config.peer_timeout_s, notify=notify)
    return Supervisor(
        plan, max_restarts=config.max_restarts, grace_s=config.grace_s, sink=sink, notify=notify
    ).run()

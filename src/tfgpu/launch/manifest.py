"""``tfgpu launch --emit kubernetes``: a JobSet (or an Indexed Job and its headless Service) that runs
the user's command as a TensorFlow cluster, every pod starting ``tfgpu launch`` itself.

The manifest is what :mod:`tfgpu.launch.kubernetes` reads back: replicated jobs ``worker`` and
``ps`` of one pod per Job, the pod's labels shown by the Downward API in ``/etc/podinfo/labels``,
the GPUs as ``nvidia.com/gpu`` limits, the ports declared, restarts by the JobSet's failure policy
(every pod restarts with ``jobset.sigs.k8s.io/restart-attempt`` + 1, which tfgpu passes to the
program as TFGPU_LAUNCH_ATTEMPT, so it resumes from its checkpoints) and a shared volume for them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tfgpu.errors import RESUMABLE, ConfigError
from tfgpu.launch.spec import DEFAULT_PORT

GRACE_S = 45  # the pod's terminationGracePeriodSeconds: the stop's grace, the launcher's, a margin

KINDS = ("kubernetes", "kubernetes-job")  # a JobSet; an Indexed Job and a headless Service
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
PODINFO = "/etc/podinfo"
_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # an RFC 1035 label: pod host names are built on it
_NAME_MAX = 40  # <name>-worker-<i>-0 must stay a 63-character host name


@dataclass(frozen=True)
class ManifestOptions:
    """Args:
    command: the program and its arguments, as given to ``tfgpu launch``.
    image: the container image (with tfgpu, TensorFlow and the program).
    nodes: worker pods; gpus_per_node: GPUs each worker pod asks for.
    ps: parameter-server pods (ParameterServerStrategy; the chief runs on worker pod 0).
    gpus_per_proc: GPUs per worker process (default: one process per GPU).
    kind: ``kubernetes`` (a JobSet) or ``kubernetes-job`` (an Indexed Job and a headless Service,
        for clusters without the JobSet controller).
    checkpoint_claim: a PersistentVolumeClaim mounted at ``checkpoint_path`` on every pod (None: none).
    max_restarts: the JobSet restarts every pod up to this many times after a failure.
    network_policy: also a NetworkPolicy that lets only the job's own pods reach its TensorFlow
        ports (``network_policy``): TensorFlow's gRPC servers run whatever graph they are sent,
        without authentication (its SECURITY.md), and listen on every interface.
    """

    command: tuple[str, ...]
    image: str
    nodes: int = 1
    gpus_per_node: int = 1
    ps: int = 0
    gpus_per_proc: int | None = None
    kind: str = "kubernetes"
    name: str = "tfgpu-train"
    port: int = DEFAULT_PORT
    checkpoint_claim: str | None = "tfgpu-checkpoints"
    checkpoint_path: str = "/checkpoints"
    max_restarts: int = 0
    network_policy: bool = True

    def __post_init__(self) -> None:
        if not self.command:
            raise ConfigError("No command to run", fix="put it after --, e.g. -- python train.py")
        if not self.image:
            raise ConfigError(
                "A manifest needs the container image that holds tfgpu and your program",
                fix="pass --image REGISTRY/IMAGE:TAG",
            )
        if self.kind not in KINDS:
            raise ConfigError("Unknown --emit", value=self.kind, fix=f"use one of {', '.join(KINDS)}")
        if not _NAME.match(self.name) or len(self.name) > _NAME_MAX:
            raise ConfigError(
                "--name must be lower-case letters, digits and '-', start with a letter, at most "
                f"{_NAME_MAX} characters (pod host names are built on it)",
                value=self.name,
                fix="pass e.g. --name resnet-train",
            )
        for flag, value, least in (
            ("--nodes", self.nodes, 1),
            ("--gpus-per-node", self.gpus_per_node, 0),
            ("--ps", self.ps, 0),
            ("--max-restarts", self.max_restarts, 0),
        ):
            if value < least:
                raise ConfigError(
                    f"{flag} must be at least {least}", value=value, fix=f"pass {least} or more"
                )
        if self.ps and self.kind == "kubernetes-job":
            raise ConfigError(
                "An Indexed Job completes only when every pod does, and with --ps the workers and ps "
                "tasks serve until stopped: the Job would never end",
                value=self.ps,
                fix="use --emit kubernetes (a JobSet, which ends with the chief's pod)",
            )
        per = self.gpus_per_proc or 1
        if self.gpus_per_node and self.gpus_per_node % per:
            raise ConfigError(
                f"--gpus-per-proc {per} does not divide --gpus-per-node {self.gpus_per_node}",
                value=(self.gpus_per_node, per),
                fix="pick GPUs per process that divide the GPUs per node",
            )

    @property
    def procs_per_node(self) -> int:
        return self.gpus_per_node // (self.gpus_per_proc or 1) if self.gpus_per_node else 1


def launch_command(options: ManifestOptions) -> list[str]:
    """The ``tfgpu launch`` each pod runs: the same on every pod, so they build one cluster."""
    command = ["tfgpu", "launch", "--nnodes", str(options.nodes), "--nproc", str(options.procs_per_node)]
    if options.gpus_per_proc:
        command += ["--gpus-per-proc", str(options.gpus_per_proc)]
    if options.ps:
        command += ["--ps", str(options.ps)]
    command += ["--port", str(options.port)]
    if options.kind == "kubernetes-job":
        command += ["--subdomain", options.name]
    return [*command, "--", *options.command]


def _container(options: ManifestOptions, *, gpus: int, ports: int) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "tensorflow",
        "image": options.image,
        "command": launch_command(options),
        "ports": [{"name": f"tf-{i}", "containerPort": options.port + i} for i in range(ports)],
        "env": [{"name": "TFGPU_PROGRESS", "value": "lines"}],  # logs are not a terminal
        "volumeMounts": [{"name": "podinfo", "mountPath": PODINFO, "readOnly": True}],
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    if options.checkpoint_claim:
        container["volumeMounts"].append({"name": "checkpoints", "mountPath": options.checkpoint_path})
    return container


def _pod(options: ManifestOptions, *, gpus: int, ports: int) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [
        {
            "name": "podinfo",
            "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]},
        }
    ]
    if options.checkpoint_claim:
        volumes.append(
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": options.checkpoint_claim}}
        )
    spec: dict[str, Any] = {
        "restartPolicy": "Never",  # a failed pod fails its Job; the JobSet restarts them all
        # SIGTERM asks the run to stop and save (TFGPU_STOP_GRACE, 20 s, then the launcher's 10 s)
        "terminationGracePeriodSeconds": GRACE_S,
        "containers": [_container(options, gpus=gpus, ports=ports)],
        "volumes": volumes,
    }
    if options.kind == "kubernetes-job":
        spec["subdomain"] = options.name
    return {"metadata": {"labels": {"app.kubernetes.io/name": options.name}}, "spec": spec}


def _one_pod_jobs(
    options: ManifestOptions, name: str, replicas: int, *, gpus: int, ports: int
) -> dict[str, Any]:
    job = {
        "parallelism": 1,
        "completions": 1,
        "backoffLimit": 0,
        "podFailurePolicy": stopped_on_request(),
        "template": _pod(options, gpus=gpus, ports=ports),
    }
    return {"name": name, "replicas": replicas, "template": {"spec": job}}


def stopped_on_request() -> dict[str, Any]:
    """A pod that a preemption or a drain stopped (SIGTERM: the run saved and exited
    ``RESUMABLE``), or that Kubernetes disrupted, is not a failure: the Job makes it again
    without counting it against ``backoffLimit``, and it resumes from the checkpoint."""
    return {
        "rules": [
            {
                "action": "Ignore",
                "onExitCodes": {"containerName": "tensorflow", "operator": "In", "values": [RESUMABLE]},
            },
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        ]
    }


def jobset(options: ManifestOptions) -> dict[str, Any]:
    """The JobSet: ``worker`` pods (with the chief on worker 0 when there are ps) and ``ps`` pods."""
    extra = 1 if options.ps else 0  # the coordinator's port on worker pod 0
    replicated = [
        _one_pod_jobs(
            options, "worker", options.nodes, gpus=options.gpus_per_node, ports=options.procs_per_node + extra
        )
    ]
    spec: dict[str, Any] = {
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        "failurePolicy": {"maxRestarts": options.max_restarts},
        "replicatedJobs": replicated,
    }
    if options.ps:
        replicated.append(_one_pod_jobs(options, "ps", options.ps, gpus=0, ports=1))
        # ps and workers serve until the chief (on worker pod 0) is done: its Job's end is the end
        spec["successPolicy"] = {"operator": "Any", "targetReplicatedJobs": ["worker"]}
    return {"apiVersion": JOBSET_API, "kind": "JobSet", "metadata": {"name": options.name}, "spec": spec}


def indexed_job(options: ManifestOptions) -> list[dict[str, Any]]:
    """A headless Service (the pods' subdomain) and an Indexed Job of ``nodes`` pods (workers
    only: parameter servers need a JobSet)."""
    ports = options.procs_per_node
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": options.name},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"batch.kubernetes.io/job-name": options.name},
        },
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": options.name},
        "spec": {
            "completionMode": "Indexed",
            "completions": options.nodes,
            "parallelism": options.nodes,
            "backoffLimit": 0,  # one pod lost breaks the cluster: fail, and resubmit to resume
            "podFailurePolicy": stopped_on_request(),
            "template": _pod(options, gpus=options.gpus_per_node, ports=ports),
        },
    }
    return [service, job]


def pod_labels(options: ManifestOptions) -> dict[str, str]:
    """The label the controller gives every pod of this job and no other: the JobSet's name
    (``jobset.sigs.k8s.io/jobset-name``) or the Job's (``batch.kubernetes.io/job-name``)."""
    if options.kind == "kubernetes":
        return {"jobset.sigs.k8s.io/jobset-name": options.name}
    return {"batch.kubernetes.io/job-name": options.name}


def tensorflow_ports(options: ManifestOptions) -> list[int]:
    """Every port a pod of this job serves TensorFlow's gRPC on (the most any pod declares)."""
    extra = 1 if options.ps and options.kind == "kubernetes" else 0
    return [options.port + i for i in range(max(1, options.procs_per_node + extra))]


def network_policy(options: ManifestOptions) -> dict[str, Any]:
    """Ingress to the job's pods only from the job's own pods, on its TensorFlow ports: any other
    pod of the cluster could otherwise send those servers a graph to run (TensorFlow's
    SECURITY.md, "Running a TensorFlow server"). Enforced where the cluster's network plugin
    enforces NetworkPolicies (Calico, Cilium, ...); elsewhere it is accepted and does nothing."""
    job_pods = {"matchLabels": pod_labels(options)}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{options.name}-tensorflow"},
        "spec": {
            "podSelector": job_pods,
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": job_pods}],
                    "ports": [{"protocol": "TCP", "port": port} for port in tensorflow_ports(options)],
                }
            ],
        },
    }


def documents(options: ManifestOptions) -> list[dict[str, Any]]:
    made = [jobset(options)] if options.kind == "kubernetes" else indexed_job(options)
    return [*made, network_policy(options)] if options.network_policy else made


def to_yaml(documents: list[dict[str, Any]]) -> str:
    """YAML documents separated by ``---``: block style, strings quoted where YAML would read them
    as something else."""
    return "---\n".join(_block(doc, 0) for doc in documents)


_PLAIN = re.compile(r"^[A-Za-z/][A-Za-z0-9_./-]*$")
_SPECIAL = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    text = str(value)
    return text if _PLAIN.match(text) and text.lower() not in _SPECIAL else json.dumps(text)


def _block(value: Any, indent: int) -> str:
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, dict | list) and item:
                lines.append(f"{pad}{_scalar(key)}:\n{_block(item, indent + 2)}")
            else:
                lines.append(
                    f"{pad}{_scalar(key)}: {_empty(item) if isinstance(item, dict | list) else _scalar(item)}\n"
                )
        return "".join(lines)
    for item in value:
        if isinstance(item, dict | list) and item:
            inner = _block(item, indent + 2)
            lines.append(f"{pad}- {inner[indent + 2 :]}")
        else:
            lines.append(f"{pad}- {_empty(item) if isinstance(item, dict | list) else _scalar(item)}\n")
    return "".join(lines)


def _empty(value: dict | list) -> str:
    return "{}" if isinstance(value, dict) else "[]"

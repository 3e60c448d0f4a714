"""The cluster of a Kubernetes Indexed Job or JobSet, read from the pod's own environment.

Kubeflow's TFJob wrote TF_CONFIG for every pod; Kubeflow Trainer v2 dropped TensorFlow and its
plain runtime sets nothing, so what a pod has today is what Kubernetes and JobSet give it:

- an **Indexed Job** (``completionMode: Indexed``) sets ``JOB_COMPLETION_INDEX`` and names each pod
  ``<job>-<index>``; with ``spec.template.spec.subdomain`` naming a headless Service, the pods
  reach each other as ``<job>-<index>.<subdomain>``. The pod is not told how many pods the Job has,
  so ``tfgpu launch --nnodes N`` says it (``--emit kubernetes-job`` writes it).
- a **JobSet** labels each pod with ``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name``,
  ``replicatedjob-replicas``, ``job-index``, ``global-replicas`` and ``restart-attempt``
  (kubernetes-sigs/jobset ``api/jobset/v1alpha2/jobset_types.go``), which the Downward API shows
  as the file ``/etc/podinfo/labels`` (``key="value"`` lines). Pods are named
  ``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>`` under the subdomain, by default the JobSet's
  name. tfgpu reads a JobSet whose replicated jobs are ``worker`` and ``ps`` (TF_CONFIG's roles)
  with one pod per Job (``replicas`` = pods), as ``--emit kubernetes`` writes it.

Everything here is a pure function of the environment, the labels and the pod's DNS name, so
every layout is tested without a cluster; :func:`detect` reads the three from the pod.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tfgpu import choices, env
from tfgpu.errors import ConfigError

INDEX_VARIABLE = "JOB_COMPLETION_INDEX"  # the Job controller's, in Indexed completion mode
JOBSET = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
GLOBAL_REPLICAS = "jobset.sigs.k8s.io/global-replicas"  # the sum of every replicated job's replicas
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
ROLES = {"worker": "worker", "ps": "ps"}  # replicated job name -> TF_CONFIG role
SOURCES = ("indexed-job", "jobset")
_MANIFEST_FIX = "tfgpu launch --emit kubernetes writes a JobSet tfgpu reads"


@dataclass(frozen=True)
class PodLayout:
    """Where this pod stands: every worker pod's and ps pod's DNS name, and its own role and index.

    ``ps`` is empty when the parameter servers run on worker pod 0 beside the workers (an Indexed
    Job, whose pods are all alike, as with a hosts file).
    """

    source: str  # indexed-job | jobset
    workers: tuple[str, ...]
    ps: tuple[str, ...]
    role: str  # this pod's: worker | ps
    index: int
    attempt: int = 0  # the JobSet's restart attempt: checkpoints resume from it

    @property
    def name(self) -> str:
        return (self.workers if self.role == "worker" else self.ps)[self.index]


def read_labels(text: str) -> dict[str, str]:
    """A Downward API labels file: one ``key="value"`` line per label, the value Go-quoted."""
    labels = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        try:
            labels[key.strip()] = str(json.loads(value))
        except json.JSONDecodeError:
            labels[key.strip()] = value.strip().strip('"')
    return labels


def _int(what: str, raw: str | None) -> int:
    try:
        return int(str(raw))
    except ValueError:
        raise ConfigError(f"{what} is not a whole number", value=raw, fix=_MANIFEST_FIX) from None


def _domain(hostname: str, fqdn: str, subdomain: str | None, default: str | None) -> str:
    """The DNS suffix the pods share: --subdomain, else what follows the pod's name in its FQDN."""
    if subdomain:
        return subdomain
    if fqdn.startswith(hostname + ".") and len(fqdn) > len(hostname) + 1:
        return fqdn[len(hostname) + 1 :]
    if default:
        return default
    raise ConfigError(
        f"Pod {hostname} has no subdomain, so the other pods cannot reach it by name",
        value=fqdn,
        fix="set the pod template's spec.subdomain to a headless Service selecting the Job's pods "
        "(tfgpu launch --emit kubernetes-job writes both), or pass --subdomain SERVICE",
    )


def _indexed_job(
    environ: Mapping[str, str], fqdn: str, *, nnodes: int | None, subdomain: str | None
) -> PodLayout:
    index = _int(INDEX_VARIABLE, environ[INDEX_VARIABLE])
    hostname = environ.get("HOSTNAME") or socket.gethostname()
    job, sep, suffix = hostname.rpartition("-")
    if not sep or suffix != str(index):
        raise ConfigError(
            f"Pod {hostname} of an Indexed Job should be named <job>-{index}",
            value=hostname,
            fix="leave the pod template's spec.hostname unset: the Job controller names each pod",
        )
    if nnodes is None:
        raise ConfigError(
            "In an Indexed Job the pod is not told how many pods the Job has",
            value={INDEX_VARIABLE: index},
            fix="pass --nnodes N, N the Job's completions (tfgpu launch --emit kubernetes-job writes it)",
        )
    if not 0 <= index < nnodes:
        raise ConfigError(
            f"{INDEX_VARIABLE}={index} is outside the job's size (--nnodes {nnodes})",
            value=index,
            fix=f"pass --nnodes equal to the Job's completions (more than {index})",
        )
    domain = _domain(hostname, fqdn, subdomain, None)
    workers = tuple(f"{job}-{i}.{domain}" for i in range(nnodes))
    return PodLayout(source="indexed-job", workers=workers, ps=(), role="worker", index=index)


def _jobset(
    environ: Mapping[str, str],
    labels: Mapping[str, str],
    fqdn: str,
    *,
    nnodes: int | None,
    ps: int,
    subdomain: str | None,
    strict: bool,
) -> PodLayout | None:
    name, replicated = labels[JOBSET], labels.get(REPLICATED_JOB, "")
    role = ROLES.get(replicated)
    if role is None:
        if not strict:
            return None  # a JobSet of another layout, with TF_CONFIG set by its author: used as given
        raise ConfigError(
            f"JobSet {name}'s replicated job {replicated!r} is not one tfgpu reads",
            value=replicated,
            fix=f"name the replicated jobs {' and '.join(ROLES)} ({_MANIFEST_FIX})",
        )
    pod = _int(INDEX_VARIABLE, environ.get(INDEX_VARIABLE, "0"))
    if pod != 0:
        raise ConfigError(
            f"tfgpu reads a JobSet whose Jobs hold one pod each; this pod is pod {pod} of its Job",
            value=pod,
            fix="set the replicated job's replicas to the number of pods, and parallelism and "
            f"completions to 1 ({_MANIFEST_FIX})",
        )
    index, replicas = _int(JOB_INDEX, labels.get(JOB_INDEX)), _int(REPLICAS, labels.get(REPLICAS))
    total = _int(GLOBAL_REPLICAS, labels[GLOBAL_REPLICAS]) if GLOBAL_REPLICAS in labels else None
    counts = _role_counts(role, replicas, total, nnodes=nnodes, ps=ps)
    if not 0 <= index < counts[role]:
        raise ConfigError(
            f"{JOB_INDEX}={index} is outside replicated job {replicated!r}'s {counts[role]} replicas",
            value=index,
            fix="check the labels the Downward API shows in /etc/podinfo/labels",
        )
    hostname = environ.get("HOSTNAME") or f"{name}-{replicated}-{index}-0"
    domain = _domain(hostname, fqdn, subdomain, name)
    hosts = {r: tuple(f"{name}-{r}-{i}-0.{domain}" for i in range(counts[r])) for r in ROLES}
    attempt = _int(RESTART_ATTEMPT, labels.get(RESTART_ATTEMPT, "0"))
    return PodLayout(
        source="jobset", workers=hosts["worker"], ps=hosts["ps"], role=role, index=index, attempt=attempt
    )


def _role_counts(
    role: str, replicas: int, total: int | None, *, nnodes: int | None, ps: int
) -> dict[str, int]:
    """Worker and ps pods: this pod's own replicated job from its labels; the other from the flags
    when given (a JobSet with more replicated jobs needs them), else the JobSet's global count less
    this one (worker and ps only). Flags that disagree with the labels are refused, since each pod
    would build a different cluster."""
    other = "ps" if role == "worker" else "worker"
    given = {"worker": nnodes, "ps": ps if ps else None}
    if given[role] is not None and given[role] != replicas:
        flag = "--nnodes" if role == "worker" else "--ps"
        raise ConfigError(
            f"{flag} {given[role]} disagrees with the JobSet, which has {replicas} {role} pod(s)",
            value={"flag": given[role], "jobset": replicas},
            fix=f"pass {flag} {replicas}, or leave it out",
        )
    counts = {role: replicas}
    if given[other] is not None:
        counts[other] = given[other]
    elif total is not None:
        counts[other] = total - replicas
    elif role == "ps":
        raise ConfigError(
            "This ps pod cannot tell how many worker pods the JobSet has (it sets no global-replicas label)",
            fix="pass --nnodes N (worker pods) and --ps P to every pod",
        )
    else:
        counts[other] = 0  # an older JobSet without global-replicas: --ps P says there are ps pods
    if total is not None and counts["worker"] + counts["ps"] > total:
        raise ConfigError(
            f"The flags ask for {counts['worker']} worker and {counts['ps']} ps pod(s); the JobSet has {total}",
            value=counts,
            fix="pass the JobSet's own counts to --nnodes and --ps, or leave them out",
        )
    if counts["worker"] < 1:
        raise ConfigError(
            "The JobSet has no worker pod", value=counts, fix="add a replicated job named worker"
        )
    return counts


def pod_layout(
    environ: Mapping[str, str],
    labels: Mapping[str, str] | None,
    fqdn: str,
    *,
    nnodes: int | None = None,
    ps: int = 0,
    subdomain: str | None = None,
    strict: bool = True,
) -> PodLayout | None:
    """This pod's place in its Indexed Job or JobSet, or None when it is in neither, or in one it
    does not form a cluster over: an Indexed Job without ``nnodes`` (a sweep: each pod trains
    alone), or, when not ``strict`` (TF_CONFIG is set), a JobSet of another layout. ``labels``:
    the pod's labels, None when no Downward API file shows them."""
    if labels and JOBSET in labels:
        return _jobset(environ, labels, fqdn, nnodes=nnodes, ps=ps, subdomain=subdomain, strict=strict)
    if INDEX_VARIABLE not in environ:
        return None
    if nnodes is None:
        choices.record(
            "launch.kubernetes",
            "this pod alone",
            f"an Indexed Job pod ({INDEX_VARIABLE}={environ[INDEX_VARIABLE]}) without --nnodes; "
            "pass --nnodes N for one cluster over the Job's N pods",
        )
        return None
    hostname = environ.get("HOSTNAME") or socket.gethostname()
    if labels is None and re.search(r"-\d+-\d+$", hostname):
        raise ConfigError(
            f"Pod {hostname} may belong to a JobSet (<jobset>-<job>-<index>-<pod>), whose labels this pod cannot read",
            value=hostname,
            fix=f"mount the pod's labels at /etc/podinfo (a Downward API volume; {_MANIFEST_FIX}) so "
            "tfgpu can tell a JobSet from an Indexed Job",
        )
    return _indexed_job(environ, fqdn, nnodes=nnodes, subdomain=subdomain)


def labels_here(environ: Mapping[str, str]) -> dict[str, str] | None:
    """The pod's labels from the Downward API file, or None without one."""
    path = Path(env.podinfo_dir(environ)) / "labels"
    try:
        return read_labels(path.read_text())
    except OSError:
        return None


def detect(
    environ: Mapping[str, str] | None = None,
    *,
    nnodes: int | None = None,
    ps: int = 0,
    subdomain: str | None = None,
    strict: bool = True,
) -> PodLayout | None:
    """:func:`pod_layout` from this pod's environment, labels file and DNS name."""
    environ = os.environ if environ is None else environ
    labels = labels_here(environ)
    if not (labels and JOBSET in labels) and INDEX_VARIABLE not in environ:
        return None
    return pod_layout(
        environ, labels, socket.getfqdn(), nnodes=nnodes, ps=ps, subdomain=subdomain, strict=strict
    )

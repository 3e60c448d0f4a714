"""TF_CONFIG: parse and check it, or build it for a planned cluster.

TensorFlow reads TF_CONFIG when a multi-worker strategy is created and fails late, often with a hang,
when it is wrong. tfgpu checks it up front and names the problem.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfgpu.errors import ClusterError

ROLES = ("chief", "worker", "ps", "evaluator")
_FIX = 'set TF_CONFIG to JSON like {"cluster": {"worker": ["host1:2222", "host2:2222"]}, "task": {"type": "worker", "index": 0}}'


@dataclass(frozen=True)
class ClusterSpec:
    """A parsed TF_CONFIG: every role's addresses, and this process's task."""

    cluster: dict[str, tuple[str, ...]]
    task_type: str
    task_index: int

    @property
    def num_tasks(self) -> int:
        return sum(len(v) for k, v in self.cluster.items() if k != "evaluator")

    @property
    def has_ps(self) -> bool:
        return bool(self.cluster.get("ps"))

    @property
    def is_chief(self) -> bool:
        """The chief, or worker 0 when the cluster has no chief (TensorFlow's convention)."""
        if self.task_type == "chief":
            return True
        return "chief" not in self.cluster and self.task_type == "worker" and self.task_index == 0

    def to_tf_config(self) -> dict[str, Any]:
        return {
            "cluster": {k: list(v) for k, v in self.cluster.items()},
            "task": {"type": self.task_type, "index": self.task_index},
        }


def _fail(what: str, value: object) -> ClusterError:
    return ClusterError(f"TF_CONFIG is malformed: {what}", value=value, fix=_FIX)


def _check_address(role: str, i: int, address: object) -> str:
    if not isinstance(address, str) or ":" not in address:
        raise _fail(f"cluster.{role}[{i}] must be a 'host:port' string", address)
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise _fail(f"cluster.{role}[{i}] needs a host and a port from 1 to 65535", address)
    return address


def _parse_cluster(raw: object) -> dict[str, tuple[str, ...]]:
    if not isinstance(raw, Mapping) or not raw:
        raise _fail("'cluster' must be a non-empty object of role -> list of addresses", raw)
    cluster: dict[str, tuple[str, ...]] = {}
    for role, addresses in raw.items():
        if role not in ROLES:
            raise _fail(f"unknown role {role!r} in cluster (roles are {', '.join(ROLES)})", role)
        if not isinstance(addresses, list) or not addresses:
            raise _fail(f"cluster.{role} must be a non-empty list of 'host:port'", addresses)
        cluster[role] = tuple(_check_address(role, i, a) for i, a in enumerate(addresses))
    for role in ("chief", "evaluator"):
        if len(cluster.get(role, ())) > 1:
            raise _fail(f"a cluster has at most one {role}", list(cluster[role]))
    everything = [a for role, v in cluster.items() if role != "evaluator" for a in v]
    duplicates = sorted({a for a in everything if everything.count(a) > 1})
    if duplicates:
        raise _fail("two tasks share an address", duplicates)
    if "ps" in cluster and "worker" not in cluster:
        raise _fail("a cluster with 'ps' tasks needs 'worker' tasks too", list(cluster))
    return cluster


def parse_tf_config(text: str) -> ClusterSpec:
    """Parse and check a TF_CONFIG string."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(f"not valid JSON ({exc.msg} at character {exc.pos})", text[:200]) from None
    if not isinstance(data, Mapping):
        raise _fail("it must be a JSON object", data)
    cluster = _parse_cluster(data.get("cluster"))
    task = data.get("task")
    if not isinstance(task, Mapping):
        raise _fail("'task' must be an object with 'type' and 'index'", task)
    task_type, index = task.get("type"), task.get("index", 0)
    if task_type not in cluster:
        raise _fail(f"task.type must be one of the cluster's roles {sorted(cluster)}", task_type)
    if isinstance(index, bool) or not isinstance(index, int):
        raise _fail("task.index must be a whole number", index)
    if not 0 <= index < len(cluster[task_type]):
        raise _fail(
            f"task.index must be from 0 to {len(cluster[task_type]) - 1} for role {task_type!r}",
            index,
        )
    return ClusterSpec(cluster=cluster, task_type=task_type, task_index=index)


def from_environ(environ: Mapping[str, str] | None = None) -> ClusterSpec | None:
    """The cluster from TF_CONFIG, or None when TF_CONFIG is unset or describes no cluster."""
    environ = os.environ if environ is None else environ
    text = environ.get("TF_CONFIG", "").strip()
    if not text:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, Mapping) and not data.get("cluster"):
        return None  # TF_CONFIG='{}' is common and means "no cluster"
    return parse_tf_config(text)


def build_cluster(*, hosts: Mapping[str, list[str]], task_type: str, task_index: int) -> ClusterSpec:
    """A checked ClusterSpec for a planned cluster (used by the launcher and the test harness)."""
    text = json.dumps({"cluster": hosts, "task": {"type": task_type, "index": task_index}})
    return parse_tf_config(text)

"""TF_CONFIG parsing: good configs parse, each malformed one gets a message naming the problem."""

from __future__ import annotations

import json

import pytest

from tfgpu import cluster
from tfgpu.errors import ClusterError

GOOD = {
    "cluster": {"chief": ["a:1"], "worker": ["b:2", "c:3"], "ps": ["d:4"]},
    "task": {"type": "worker", "index": 1},
}


def test_good_tf_config_parses():
    spec = cluster.parse_tf_config(json.dumps(GOOD))
    assert spec.task_type == "worker" and spec.task_index == 1
    assert spec.num_tasks == 4 and spec.has_ps and not spec.is_chief
    assert spec.to_tf_config() == GOOD


def test_worker_zero_is_chief_without_a_chief_role():
    spec = cluster.build_cluster(hosts={"worker": ["a:1", "b:2"]}, task_type="worker", task_index=0)
    assert spec.is_chief


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}}', "non-empty list"),
        (
            '{"cluster": {"workers": ["a:1"]}, "task": {"type": "worker", "index": 0}}',
            "unknown role 'workers'",
        ),
        ('{"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}}', "'host:port'"),
        (
            '{"cluster": {"worker": ["a:99999"]}, "task": {"type": "worker", "index": 0}}',
            "port from 1 to 65535",
        ),
        (
            '{"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 0}}',
            "share an address",
        ),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}', "task.type"),
        (
            '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 2}}',
            "task.index must be from 0 to 0",
        ),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "0"}}', "whole number"),
        ('{"cluster": {"worker": ["a:1"]}}', "'task' must be an object"),
        (
            '{"cluster": {"ps": ["a:1"], "chief": ["b:2"]}, "task": {"type": "ps", "index": 0}}',
            "needs 'worker'",
        ),
        (
            '{"cluster": {"chief": ["a:1", "b:2"]}, "task": {"type": "chief", "index": 0}}',
            "at most one chief",
        ),
    ],
)
def test_malformed_tf_config_is_named(text, needle):
    with pytest.raises(ClusterError) as info:
        cluster.parse_tf_config(text)
    assert needle in str(info.value)
    assert "TF_CONFIG is malformed" in str(info.value)
    assert "Fix:" in str(info.value)


def test_empty_tf_config_means_no_cluster():
    assert cluster.from_environ({}) is None
    assert cluster.from_environ({"TF_CONFIG": "{}"}) is None
    assert cluster.from_environ({"TF_CONFIG": '{"cluster": {}, "task": {}}'}) is None
    with pytest.raises(ClusterError):
        cluster.from_environ({"TF_CONFIG": "nonsense"})

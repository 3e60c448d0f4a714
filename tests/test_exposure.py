"""Issue 47: TensorFlow's servers listen on every interface, unauthenticated; tfgpu says so where
the host has a public address (launch, doctor), and stays silent on private networks."""

from __future__ import annotations

import json

import pytest

from support.probes import probe
from tfgpu import doctor, exposure
from tfgpu.launch import LaunchConfig, exposure_warning
from tfgpu.launch.plan import make_plan
from tfgpu.testing.fake_nvml import profile

PRIVATE = {
    "lo": ["127.0.0.1", "::1"],
    "eth0": ["10.1.2.3", "fe80::1"],
    "wg0": ["192.168.7.1", "fd12:3456::1"],
    "cni0": ["172.20.0.1", "100.64.1.1"],  # RFC 1918, and shared (CGNAT) address space
}
PUBLIC = {**PRIVATE, "ens5": ["203.0.113.9", "2001:4860::8888", "8.8.4.4"]}


def test_private_networks_are_not_exposed_and_public_addresses_are():
    assert exposure.public_addresses(PRIVATE) == []
    assert exposure.public_addresses({"x": ["not an address", "169.254.1.1"]}) == []
    assert exposure.warning([2222], PRIVATE) is None
    assert exposure.public_addresses(PUBLIC) == [("ens5", "2001:4860::8888"), ("ens5", "8.8.4.4")]
    line = exposure.warning([2223, 2222], PUBLIC)
    assert "2001:4860::8888 (ens5)" in line and "ports 2222, 2223" in line and exposure.DOCS in line
    assert "\n" not in line


def test_this_hosts_addresses_are_read_without_tensorflow():
    found = exposure.host_addresses()
    assert any("127.0.0.1" in addresses for addresses in found.values())


def test_launch_warns_of_the_ports_its_processes_open_on_a_public_host():
    config = LaunchConfig(command=("python", "t.py"), nproc=2)
    plan = make_plan(
        config,
        inventory=(),
        environ={},
        free_ports=lambda n: list(range(31000, 31000 + n)),
        pod=None,
    )
    assert exposure_warning(plan, PRIVATE) is None
    assert "ports 31000, 31001" in exposure_warning(plan, PUBLIC)


def test_doctor_names_the_cluster_and_whether_the_host_is_exposed():
    tf_config = json.dumps(
        {"cluster": {"worker": ["10.0.0.5:2222", "10.0.0.6:2222"]}, "task": {"type": "worker", "index": 0}}
    )
    for interfaces, status in ((PRIVATE, "ok"), (PUBLIC, "warn")):
        facts = doctor.gather_facts(
            nvml_module=profile("no-driver"),
            tf_probe=probe(),
            environ={"TF_CONFIG": tf_config},
            interfaces=interfaces,
        )
        (check,) = [c for c in doctor.run_checks(facts) if c.name == "network"]
        assert check.status == status and "10.0.0.5:2222, 10.0.0.6:2222" in check.finding
        if status == "warn":
            assert "8.8.4.4 (ens5)" in check.finding and exposure.DOCS in check.fix


ALL_REDUCE = """
import json, os
import tensorflow as tf
interfaces = sorted(line.split(":")[0].strip() for line in open("/proc/net/dev").readlines()[2:])
strategy = tf.distribute.MultiWorkerMirroredStrategy()
total = strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
print("RESULT", json.dumps({"interfaces": interfaces, "sum": float(total)}))
"""


@pytest.mark.slow
def test_a_private_network_launch_keeps_its_workers_on_loopback_and_they_still_train_together(tmp_path):
    """--private-network: the workers see only loopback (no other machine can reach their ports)
    and still form one cluster over it (an all-reduce of 1.0 from each of 2 workers is 2.0)."""
    import sys

    from support.processes import run_cli

    script = tmp_path / "reduce.py"
    script.write_text(ALL_REDUCE)
    done = run_cli(
        "launch", "--private-network", "--nproc", "2", "--", sys.executable, str(script), timeout=240
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    results = [
        json.loads(line.split("RESULT ", 1)[1]) for line in done.stdout.splitlines() if "RESULT " in line
    ]
    assert len(results) == 2 and all(r == {"interfaces": ["lo"], "sum": 2.0} for r in results), results


def test_a_private_network_is_refused_for_several_hosts(capsys):
    from tfgpu import cli

    assert cli.main(["launch", "--private-network", "--nnodes", "2", "--", "python", "t.py"]) == 2
    assert "cannot join other hosts" in capsys.readouterr().err

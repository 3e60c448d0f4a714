"""tfgpu launch: the pure plan for every layout, and real supervised processes on localhost."""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from support.processes import run_cli
from tfgpu import nvml
from tfgpu.errors import ConfigError
from tfgpu.launch import LaunchConfig
from tfgpu.launch.plan import expand_hostlist, make_plan
from tfgpu.testing.fake_nvml import FakeGpu, FakeNvml

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).parent / "scripts"
PY = sys.executable


def inventory(count: int = 4, model: str = "h100"):
    return nvml.probe(FakeNvml([FakeGpu(model) for _ in range(count)])).gpus


def plan(environ=None, count=4, **kw):
    ports = iter(range(40000, 40100))
    config = LaunchConfig(command=(PY, "train.py"), **kw)
    return make_plan(
        config,
        inventory=inventory(count),
        environ=environ or {},
        free_ports=lambda n: [next(ports) for _ in range(n)],
    )


def tf_config(process):
    return json.loads(process.env["TF_CONFIG"])


def test_one_worker_per_gpu_by_default():
    p = plan()
    assert [q.label for q in p.processes] == ["worker 0", "worker 1", "worker 2", "worker 3"]
    assert [q.env["CUDA_VISIBLE_DEVICES"] for q in p.processes] == ["0", "1", "2", "3"]
    assert p.cluster == {"worker": [f"localhost:{40000 + i}" for i in range(4)]}
    assert tf_config(p.processes[2]) == {"cluster": p.cluster, "task": {"type": "worker", "index": 2}}


def test_gpus_per_proc_and_gpu_subset():
    assert [q.gpus for q in plan(gpus_per_proc=2).processes] == [(0, 1), (2, 3)]
    assert [q.gpus for q in plan(gpus=(1, 3)).processes] == [(1,), (3,)]
    with pytest.raises(ConfigError, match="GPU 7, which does not exist"):
        plan(gpus=(7,))
    with pytest.raises(ConfigError, match="need 6 GPUs; 4 available"):
        plan(nproc=3, gpus_per_proc=2)


def test_procs_share_a_gpu_with_memory_caps(clean_choices):
    from tfgpu import choices

    p = plan(gpus=(0, 1), procs_per_gpu=3)
    assert [q.gpus for q in p.processes] == [(0,), (0,), (0,), (1,), (1,), (1,)]
    expected = int(81559 * 0.9 / 3)
    assert {q.env["TFGPU_MEMORY_LIMIT_MB"] for q in p.processes} == {str(expected)}
    assert choices.as_dict()["launch.memory_per_proc"]["value"] == f"{expected} MB"
    assert plan(procs_per_gpu=2, memory_per_proc_mb=10000, count=1).processes[0].memory_mb == 10000
    with pytest.raises(ConfigError, match="do not fit a GPU"):
        plan(procs_per_gpu=3, memory_per_proc_mb=30000, count=1)
    with pytest.raises(ConfigError, match="do not fit 1 GPU"):
        plan(procs_per_gpu=2, nproc=3, count=1)


def test_chief_and_parameter_servers():
    p = plan(ps=2, nproc=2)
    assert [q.label for q in p.processes] == ["chief 0", "worker 0", "worker 1", "ps 0", "ps 1"]
    assert set(p.cluster) == {"chief", "worker", "ps"} and len(p.cluster["ps"]) == 2
    roles = {q.label: q for q in p.processes}
    assert roles["chief 0"].gpus == () and roles["ps 1"].env["CUDA_VISIBLE_DEVICES"] == ""
    assert roles["worker 1"].gpus == (1,)
    mwms = plan(chief=True, nproc=2, count=2)
    assert [(q.label, q.gpus) for q in mwms.processes] == [("chief 0", (0,)), ("worker 0", (1,))]


def test_slurm_cluster_from_variables():
    env = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_NODEID": "1", "SLURM_NTASKS": "2"}
    p = plan(environ=env, nproc=2, count=2, port=29000)
    assert p.source == "slurm"
    assert p.cluster["worker"] == ["gpu01:29000", "gpu01:29001", "gpu02:29000", "gpu02:29001"]
    assert [q.label for q in p.local] == ["worker 2", "worker 3"]
    assert [q.gpus for q in p.local] == [(0,), (1,)]
    with pytest.raises(ConfigError, match="one per node"):
        plan(environ={**env, "SLURM_NTASKS": "4"}, nproc=2, count=2)


def test_hosts_file_cluster():
    p = plan(hosts=("a", "b", "c"), nnodes=3, node_rank=2, nproc=1, count=1, port=31000)
    assert p.cluster["worker"] == ["a:31000", "b:31000", "c:31000"]
    assert [q.label for q in p.local] == ["worker 2"]


def test_tf_config_from_a_scheduler_is_used_as_given():
    given = {"cluster": {"worker": ["w0:2222", "w1:2222"]}, "task": {"type": "worker", "index": 1}}
    p = plan(environ={"TF_CONFIG": json.dumps(given)}, count=1)
    assert p.source == "tf_config" and len(p.processes) == 1
    assert tf_config(p.processes[0]) == given
    with pytest.raises(ConfigError, match="already set"):
        plan(environ={"TF_CONFIG": json.dumps(given)}, nproc=2)


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("gpu[01-03,07],cpu5", ["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]),
        ("n1", ["n1"]),
        ("a[8-10]", ["a8", "a9", "a10"]),
    ],
)
def test_slurm_hostlists(text, hosts):
    assert expand_hostlist(text) == hosts


def test_bad_launch_configs():
    with pytest.raises(ConfigError, match="Unknown command 'no-such-program-xyz'"):
        LaunchConfig(command=("no-such-program-xyz",))
    with pytest.raises(ConfigError, match="No command"):
        LaunchConfig(command=())
    with pytest.raises(ConfigError, match="node-rank"):
        LaunchConfig(command=(PY,), nnodes=2, node_rank=2)


@pytest.mark.process
def test_cli_dry_run_on_this_machine():
    done = run_cli("launch", "--nproc", "3", "--dry-run", "--json", "--", PY, "train.py")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [p["label"] for p in data["processes"]] == ["worker 0", "worker 1", "worker 2"]
    assert data["processes"][0]["command"] == [PY, "train.py"]


@pytest.mark.process
def test_cli_bad_inputs_exit_2_before_starting():
    done = run_cli("launch", "--nproc", "2", "--", "no-such-program-xyz")
    assert done.returncode == 2 and "Unknown command" in done.stderr and "Traceback" not in done.stderr
    done = run_cli("launch", "--gpus", "3", "--dry-run", "--", PY)
    assert done.returncode == 2 and ("does not exist" in done.stderr or "no visible GPU" in done.stderr)
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        hosts = Path(__file__).parent / "scripts" / "hosts.txt"
        done = run_cli(
            "launch", "--hosts", str(hosts), "--node-rank", "0", "--port", str(port), "--dry-run", "--", PY
        )
    assert done.returncode == 2 and f"Port {port}" in done.stderr and "already in use" in done.stderr
    done = run_cli("launch", "--port", "30000", "--dry-run", "--", PY)
    assert done.returncode == 2 and "--port sets the ports of a multi-node cluster" in done.stderr


@pytest.mark.process
def test_a_worker_that_failed_silently_is_said_so():
    done = run_cli("launch", "--nproc", "1", "--", PY, "-c", "import sys; sys.exit(4)", timeout=60)
    assert done.returncode == 4 and "(worker 0 printed nothing before it failed)" in done.stderr


@pytest.mark.process
def test_failed_worker_stops_the_others():
    started = time.monotonic()
    done = run_cli(
        "launch", "--nproc", "3", "--grace", "2", "--", PY, str(SCRIPTS / "fail_one.py"), timeout=60
    )
    assert done.returncode == 3
    assert time.monotonic() - started < 30  # the others were stopped, not waited for
    assert "worker 1 failed with exit status 3" in done.stderr
    assert "boom" in done.stderr  # its last lines
    assert (
        "[worker 0] worker 0 waiting" in done.stdout and "[worker 1] worker 1 is about to fail" in done.stdout
    )


@pytest.mark.process
def test_restart_after_a_killed_worker_finishes():
    done = run_cli(
        "launch",
        "--nproc",
        "2",
        "--max-restarts",
        "1",
        "--grace",
        "2",
        "--",
        PY,
        str(SCRIPTS / "flaky.py"),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (
        "worker 1 failed (exit status 137); restarting all 2 processes, attempt 2 of 2"
        in done.stderr.replace("\n", " ")
    )
    assert "[worker 0] worker 0 finished on attempt 1" in done.stdout
    assert "[worker 1] worker 1 finished on attempt 1" in done.stdout
    once = run_cli("launch", "--nproc", "2", "--grace", "2", "--", PY, str(SCRIPTS / "flaky.py"), timeout=60)
    assert once.returncode == 137 and "worker 1 failed" in once.stderr


@pytest.mark.process
def test_ten_megabytes_of_output_do_not_stall():
    done = run_cli("launch", "--nproc", "2", "--", PY, str(SCRIPTS / "chatty.py"), timeout=120)
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert sum(1 for line in lines if line.startswith("[worker 0] xxx")) == 100_000
    assert "[worker 1] chatty done" in lines


@pytest.mark.process
def test_each_worker_s_own_devices_are_its_own(tmp_path):
    """Under launch, ``import tfgpu`` sets the task up before TensorFlow starts, and TensorFlow then
    lists every task's devices (as under MultiWorkerMirroredStrategy): what a split or a memory
    figure uses is this task's only (on an H100, 2 processes sharing it each counted 2 GPUs)."""
    script = tmp_path / "devices.py"
    script.write_text(
        "import json, tfgpu, tensorflow as tf\n"
        "from tfgpu import distribute\n"
        "from tfgpu.train.model import split\n"
        "listed = [d.name for d in tf.config.list_logical_devices('CPU')]\n"
        "print(json.dumps({'listed': listed, 'own': distribute.local_devices('CPU'), "
        "'split': split.local_devices()}))\n"
    )
    done = run_cli("launch", "--nproc", "2", "--", PY, str(script), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    by_worker = {
        int(line[len("[worker ") : line.index("]")]): json.loads(line.split("] ", 1)[1])
        for line in done.stdout.splitlines()
        if line.startswith("[worker") and "{" in line
    }
    assert sorted(by_worker) == [0, 1], done.stdout[-2000:]
    for index, seen in by_worker.items():
        own = f"/job:worker/replica:0/task:{index}/device:CPU:0"
        assert len(seen["listed"]) == 2 and own in seen["listed"]  # TensorFlow's: both tasks'
        assert seen["own"] == seen["split"] == [own]


@pytest.mark.process
def test_a_cluster_task_takes_device_settings_from_its_environment_and_says_a_later_ask_is_too_late(
    tmp_path,
):
    """``import tfgpu`` starts a launched task's devices (its cluster server); the TFGPU_*
    settings in its environment are applied first. A later ``configure`` asking for other device
    settings used to be accepted and ignored (logical_cpus=3 made nothing); now it is too late,
    with the fix; settings that apply at any time (precision) still do."""
    script = tmp_path / "configure.py"
    script.write_text(
        "import json, tfgpu, tensorflow as tf\n"
        "from tfgpu import distribute\n"
        "said = {}\n"
        "for ask in ({}, {'logical_cpus': 2}, {'logical_cpus': 3}, {'precision': 'fp32'}):\n"
        "    try:\n"
        "        tfgpu.configure(**ask); said[str(ask)] = 'ok'\n"
        "    except tfgpu.TfgpuError as error:\n"
        "        said[str(ask)] = str(error)\n"
        "print(json.dumps({'own': len(distribute.local_devices('CPU')), 'said': said}))\n"
    )
    done = run_cli(
        "launch", "--nproc", "2", "--", PY, str(script), timeout=120, env={"TFGPU_LOGICAL_CPUS": "2"}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line.split("] ", 1)[1] for line in done.stdout.splitlines() if line.startswith("[worker 0] {")]
    found = json.loads(lines[0])
    assert found["own"] == 2  # the environment's logical CPUs were made
    said = found["said"]
    assert said["{}"] == said["{'logical_cpus': 2}"] == said["{'precision': 'fp32'}"] == "ok"
    late = said["{'logical_cpus': 3}"]
    assert "logical_cpus=3" in late and "worker 0 of its cluster" in late and "TFGPU_" in late


@pytest.mark.slow
def test_two_worker_training_equals_one_process(tmp_path):
    done = run_cli(
        "launch",
        "--nproc",
        "2",
        "--",
        PY,
        str(ROOT / "examples" / "train_mwms.py"),
        str(tmp_path),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # the workers' TensorFlow log lines are filtered as tfgpu's own (issue 17)
    from tfgpu import quiet

    worker_lines = [
        line.split("] ", 1)[-1] for line in done.stdout.splitlines() if line.startswith("[worker")
    ]
    assert worker_lines and not [line for line in worker_lines if quiet.is_noise(line)], done.stdout[-2000:]
    assert not [line for line in done.stderr.splitlines() if quiet.is_noise(line)]
    single = run_cli_python(str(ROOT / "examples" / "train_mwms.py"), str(tmp_path))
    assert single.returncode == 0, single.stderr[-3000:]
    w0, w1, one = (np.load(tmp_path / f"{t}.npz") for t in ("worker-0", "worker-1", "single"))
    for key in one.files:
        assert np.array_equal(w0[key], w1[key])  # replicas stay in sync exactly
        np.testing.assert_allclose(w0[key], one[key], rtol=1e-5, atol=1e-6)
        assert np.all(np.isfinite(w0[key]))


def run_cli_python(*args: str):
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("TFGPU_") and k != "TF_CONFIG"}
    return subprocess.run([PY, *args], capture_output=True, text=True, timeout=300, env=env, check=False)

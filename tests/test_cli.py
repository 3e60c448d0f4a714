"""The tfgpu command as a user runs it: real processes, real TensorFlow, this machine."""

from __future__ import annotations

import json

from conftest import run_cli
from tfgpu.testing import run_on_logical_cpus


def test_doctor_json_is_one_object_and_says_why_no_gpu():
    done = run_cli("doctor", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    names = [c["name"] for c in data["checks"]]
    assert names[0] == "tensorflow-gpus"
    assert {"python", "tensorflow", "tensorflow-build", "keras", "nvidia-driver", "mixed-precision"} <= set(
        names
    )
    assert all(c["status"] in ("ok", "warn", "fail") for c in data["checks"])
    if not data["facts"]["nvml"]["available"]:
        assert "not using a GPU" in data["headline"]
    assert data["facts"]["tensorflow"]["tensorflow"].startswith("2.")


def test_doctor_table_for_people():
    done = run_cli("doctor", env={"COLUMNS": "120"})
    assert done.returncode == 0
    assert "tfgpu doctor" in done.stdout and "tensorflow-gpus" in done.stdout
    assert "failed" in done.stdout


def test_doctor_deep_checks_replicas_agree():
    done = run_cli("doctor", "--deep", "--json")
    assert done.returncode == 0, done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["replicas"]["status"] == "ok"
    assert any(name.startswith("matmul:") for name in checks)


def test_doctor_fails_on_malformed_tf_config_with_exit_1():
    done = run_cli(
        "doctor",
        "--json",
        env={"TF_CONFIG": '{"cluster": {"worker": ["x"]}, "task": {"type": "worker", "index": 0}}'},
    )
    assert done.returncode == 1
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["tf-config"]["status"] == "fail"


def test_doctor_does_not_initialize_tensorflow_in_the_caller():
    result = run_on_logical_cpus("bodies:doctor_then_configure", 1, env={"TFGPU_LOGICAL_CPUS": ""})
    assert result["initialized_after_doctor"] is False
    assert result["devices"] == 2


def test_demo_runs_end_to_end(tmp_path):
    done = run_cli(
        "demo",
        "--workdir",
        str(tmp_path / "demo"),
        "--report",
        str(tmp_path / "r.html"),
        "--epochs",
        "3",
        "--json",
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)
    assert data["ok"] and data["accuracy"] >= 0.6
    assert data["choices"]["strategy"]["value"].startswith(("MirroredStrategy", "OneDeviceStrategy"))
    assert data["diagnose"]["naive pipeline"]["bottleneck"] in ("input", "host", "device")
    assert data["prediction"]["predicted_rows"] == 160
    page = (tmp_path / "r.html").read_text()
    for section in (
        "Environment",
        "Bottleneck: naive pipeline",
        "Bottleneck: tfgpu.data.pipeline",
        "Training",
        "Prediction",
    ):
        assert f">{section}<" in page
    assert page.count("data:image/png;base64,") >= 8
    # the same report renders again from the recorded run
    again = run_cli("report", str(tmp_path / "demo"), "--output", str(tmp_path / "again.html"))
    assert again.returncode == 0, again.stderr
    rendered = (tmp_path / "again.html").read_text()
    for section in ("Environment", "Bottleneck: naive pipeline", "Training", "Prediction"):
        assert f">{section}<" in rendered
    missing = run_cli("report", str(tmp_path))
    assert missing.returncode == 2 and "No tfgpu run record" in missing.stderr


def test_bad_environment_value_is_one_message_and_exit_2():
    done = run_cli("demo", env={"TFGPU_LOGICAL_CPUS": "two"})
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "TFGPU_LOGICAL_CPUS" in done.stderr and "'two'" in done.stderr


def test_unknown_subcommand_is_usage_error():
    done = run_cli("doctr")
    assert done.returncode == 2
    assert "invalid choice" in done.stderr

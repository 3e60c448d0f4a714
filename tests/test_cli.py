"""The tfgpu command as a user runs it: real processes, real TensorFlow, this machine."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from support.processes import cli_environ, run_cli
from support.source import ROOT
from tfgpu.testing import run_on_logical_cpus


@pytest.mark.process
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


@pytest.mark.process
def test_doctor_table_for_people():
    done = run_cli("doctor", env={"COLUMNS": "120"})
    assert done.returncode == 0
    assert "tfgpu doctor" in done.stdout and "tensorflow-gpus" in done.stdout
    assert "failed" in done.stdout


@pytest.mark.process
def test_doctor_deep_checks_replicas_agree():
    done = run_cli("doctor", "--deep", "--json")
    assert done.returncode == 0, done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["replicas"]["status"] == "ok"
    assert any(name.startswith("matmul:") for name in checks)


@pytest.mark.process
def test_doctor_fails_on_malformed_tf_config_with_exit_1():
    done = run_cli(
        "doctor",
        "--json",
        env={"TF_CONFIG": '{"cluster": {"worker": ["x"]}, "task": {"type": "worker", "index": 0}}'},
    )
    assert done.returncode == 1
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["tf-config"]["status"] == "fail"


@pytest.mark.process
def test_doctor_does_not_initialize_tensorflow_in_the_caller():
    result = run_on_logical_cpus("bodies:doctor_then_configure", 1, env={"TFGPU_LOGICAL_CPUS": ""})
    assert result["initialized_after_doctor"] is False
    assert result["devices"] == 2


@pytest.mark.process
def test_demo_runs_end_to_end(tmp_path):
    """One demo, as a person runs it on an 80-column terminal: it talks from the start (issue 44),
    says each phase as it starts, and shows only tfgpu's lines, none wider than the terminal; what
    it did is its run record (run.json: what ``--json`` prints, with the per-step timelines; the
    printing itself: test_demo_json_is_its_result_on_stdout_alone), and the report renders again
    from it. (It ran twice, once with --json and once on a terminal: 124 s of CPU, now half.)"""
    import tfgpu.quiet
    from terminal import on_terminal
    from tfgpu.cli._progress import PHASES
    from tfgpu.report.runs import load_run

    work = tmp_path / "demo"
    seen = on_terminal(
        "demo",
        "--workdir",
        str(work),
        "--report",
        str(tmp_path / "r.html"),
        "--epochs",
        "4",
        cwd=str(tmp_path),
    )
    assert seen.returncode == 0, "\n".join(seen.lines)
    assert seen.first_output_s < seen.total_s / 3, (seen.first_output_s, seen.total_s)
    assert [line for line in seen.lines if tfgpu.quiet.is_noise(line)] == [], seen.lines
    assert seen.wider_than_the_terminal() == [], seen.lines
    # each phase's line, in order (a bar on a terminal: TFGPU_PROGRESS=lines gives plain lines)
    phases = ["doctor", "data", "diagnose", "tune", "train", "predict", "report"]
    first = [next((i for i, line in enumerate(seen.lines) if PHASES[p] in line), -1) for p in phases]
    assert -1 not in first and first == sorted(first), seen.lines
    record = load_run(work)
    assert record["kind"] == "demo"
    _check_demo_record(record["data"])
    page = (tmp_path / "r.html").read_text()
    for section in (
        "Environment",
        "Bottleneck: naive pipeline",
        "Bottleneck: tfgpu.data.pipeline",
        "Tuning",
        "Training",
        "Prediction",
    ):
        assert f">{section}<" in page
    assert page.count("data:image/png;base64,") >= 9
    # the same report renders again from the recorded run
    again = run_cli("report", str(work), "--output", str(tmp_path / "again.html"))
    assert again.returncode == 0, again.stderr
    rendered = (tmp_path / "again.html").read_text()
    for section in ("Environment", "Bottleneck: naive pipeline", "Training", "Prediction"):
        assert f">{section}<" in rendered
    missing = run_cli("report", str(tmp_path))
    assert missing.returncode == 2 and "No tfgpu run record" in missing.stderr


def _check_demo_record(data: dict) -> None:
    """What a demo's run found, as ``tfgpu demo --json`` prints it (less the timelines)."""
    assert data["ok"] and data["accuracy"] >= 0.6
    assert data["choices"]["strategy"]["value"].startswith(("MirroredStrategy", "OneDeviceStrategy"))
    assert data["diagnose"]["naive pipeline"]["bottleneck"] in ("input", "host", "device")
    # issue 25: one step profile for both diagnoses (the same model, strategy and global batch), and
    # training's steady state (epochs 2-4) is compared with diagnose of the same pipeline
    naive, tuned = data["diagnose"]["naive pipeline"], data["diagnose"]["tfgpu.data.pipeline"]
    assert naive["step"] and naive["step"] == tuned["step"]
    assert data["training"]["steady"]["epochs"] == [2, 3, 4]
    assert data["agreement"].startswith(("agree: ", "differ: ")), data["agreement"]
    assert data["prediction"]["predicted_rows"] == 160
    # the seconds of each phase (the record is written as the report phase starts; --json has all)
    assert set(data["phases"]) >= {"doctor", "data", "diagnose", "tune", "train", "predict"}
    tuning = data["training"]["tuning"]
    assert tuning["trials"] and tuning["summary"].startswith("tfgpu tuned in") and tuning["reused"] is None
    assert data["data"]["images_generated"] and data["data"]["shards_reused"] == 0


def test_demo_json_is_its_result_on_stdout_alone(monkeypatch, capsys):
    """``tfgpu demo --json``: one JSON object on stdout, the result's summary (``to_dict()``, the
    record less the per-step timelines), exit 0 when the demo's model learned, 1 when not; with
    TFGPU_PROGRESS=lines each phase is said on stderr, and stdout stays the JSON."""
    import tfgpu.demo
    from tfgpu.cli import main

    class Result:
        def __init__(self, ok):
            self.ok = ok

        def to_dict(self):
            return {"ok": self.ok, "accuracy": 0.9 if self.ok else 0.2, "training": {"steady": None}}

    def run_demo(*, workdir, report, epochs, progress):
        for phase in ("doctor", "data"):
            progress(phase, 0, 0)
        return Result(ok=epochs == 4)

    monkeypatch.setattr(tfgpu.demo, "run_demo", run_demo)
    monkeypatch.setenv("TFGPU_PROGRESS", "lines")
    for epochs, status in (("4", 0), ("1", 1)):
        assert main(["demo", "--json", "--epochs", epochs]) == status
        out, err = capsys.readouterr()
        assert json.loads(out) == Result(ok=status == 0).to_dict()
        assert [line.split(": ")[1] for line in err.splitlines() if line.strip()][:2] == ["doctor", "data"]


@pytest.mark.process
def test_bad_environment_value_is_one_message_and_exit_2():
    done = run_cli("demo", env={"TFGPU_LOGICAL_CPUS": "two"})
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "TFGPU_LOGICAL_CPUS" in done.stderr and "'two'" in done.stderr


@pytest.mark.process
def test_unknown_subcommand_is_usage_error():
    done = run_cli("doctr")
    assert done.returncode == 2
    assert "invalid choice" in done.stderr


USER_CODE = """
import numpy as np
import tensorflow as tf

import tfgpu


def model():
    import keras

    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])


def raises():
    raise ValueError("unknown option 'fast'")


def wrong_dtype_data(ctx, batch):
    ds = tf.data.Dataset.range(64).map(
        lambda i: tf.numpy_function(lambda v: np.ones(4) * v, [i], tf.float32)
    )
    return ds.map(lambda x: (tf.ensure_shape(x, [4]), tf.constant(0, tf.int64))).batch(batch)


def broken_data(ctx, batch):
    return {}["missing"]


def wrong_dtype():
    return tfgpu.Task(model=model, loss="sparse_categorical_crossentropy", train_data=wrong_dtype_data)


def broken():
    return tfgpu.Task(model=model, loss="sparse_categorical_crossentropy", train_data=broken_data)


def dataset():
    return tf.data.Dataset.range(64).map(lambda i: tf.fill([8], tf.cast(i, tf.float32))).batch(8)
"""


@pytest.mark.process
def test_errors_in_the_users_code_are_one_message(tmp_path):
    """A file that does not import, a function that raises, a pipeline TensorFlow rejects: exit 2,
    one message with the user's file and line (or function), no traceback unless --verbose."""
    (tmp_path / "user.py").write_text(USER_CODE)
    (tmp_path / "syntax.py").write_text("def make_task(:\n    pass\n")
    user = str(tmp_path / "user.py")

    def one_message(done, *expected):
        assert done.returncode == 2, done.stderr[-3000:]
        lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
        for text in expected:
            assert text in lines[0], lines[0]

    one_message(
        run_cli("train", str(tmp_path / "syntax.py") + ":make_task", "--steps", "1"),
        "Importing",
        "SyntaxError",
        "syntax.py:1",
    )
    one_message(
        run_cli("train", f"{user}:raises", "--steps", "1"),
        "ValueError: unknown option 'fast'",
        "user.py:15 in raises",
    )
    one_message(run_cli("train", f"{user}:broken", "--steps", "1"), "KeyError", "user.py:26 in broken_data")
    one_message(
        run_cli("train", f"{user}:wrong_dtype", "--steps", "1"),
        "TensorFlow failed while running your code",
        "user.py:wrong_dtype",
        "InvalidArgumentError: in a tf.data map function: 0-th value returned by pyfunc_0 is double, but expects float",
    )
    verbose = run_cli("-v", "train", f"{user}:raises", "--steps", "1")
    assert (
        verbose.returncode == 2
        and "Traceback" in verbose.stderr
        and "error: Your code raised" in verbose.stderr
    )


@pytest.mark.process
def test_a_module_in_the_current_folder_is_found(tmp_path):
    (tmp_path / "mymod.py").write_text(USER_CODE)
    done = run_cli(
        "diagnose", "--dataset", "mymod:dataset", "--step-time", "1ms", "--json", cwd=str(tmp_path)
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert "bottleneck" in done.stdout


@pytest.mark.process
def test_only_tfgpus_lines_unless_verbose(tmp_path):
    """TensorFlow's start-up and log lines are filtered from the CLI's stderr; --verbose and
    TFGPU_VERBOSE=1 let them through."""
    from tfgpu import quiet

    np.save(tmp_path / "x.npy", np.zeros((4, 8), "float32"))
    (tmp_path / "m.keras").write_text("not a model")
    args = ("predict", str(tmp_path / "m.keras"), str(tmp_path / "x.npy"), str(tmp_path / "o"))
    done = run_cli(*args)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), done.stderr
    loud = run_cli(*args, env={"TFGPU_VERBOSE": "1"})
    assert loud.returncode == 2 and any(quiet.is_noise(line) for line in loud.stderr.splitlines())
    assert quiet.is_noise(
        "I0000 00:00:1795431765.662915   19805 port.cc:153] oneDNN custom operations are on."
    )
    assert quiet.is_noise(
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
    )
    assert not quiet.is_noise(
        "F0000 00:00:1795431765.662915   19805 check.cc:1] Check failed"
    )  # fatal: shown
    assert not quiet.is_noise("error: Model m.keras does not exist.")


BAD_BEFORE_TENSORFLOW = [
    ["train", "nosuchfile.py"],
    ["train", "missing.py:make_task", "--steps", "1"],
    ["tune", "missing.py:make_task"],
    ["diagnose", "--dataset", "nowhere.py:make", "--step-time", "5ms"],
    ["diagnose", "--dataset", "tests/diagnose_inputs.py:memory", "--step-time", "fast"],
    [
        "diagnose",
        "--dataset",
        "tests/diagnose_inputs.py:memory",
        "--step-time",
        "5ms",
        "--service-workers",
        "1",
    ],
    ["profile", "--dataset", "nowhere.py:make", "--step-time", "1ms", "--log-dir", "logs"],
    ["train", "tests/tasks.py:make_task", "--epochs", "0"],
    ["train", "tests/tasks.py:make_task", "--steps", "-5"],
    ["train", "tests/tasks.py:make_task", "--steps", "1", "--checkpoint-dir", "README.md"],
    ["train", "tests/tasks.py:make_task", "--epochs", "1", "--log-every", "0"],
]


@pytest.mark.process
def test_a_mistyped_reference_or_option_is_said_before_tensorflow_is_imported():
    """Each command checks its FILE:FUNCTION references and options first: a typo is said in a
    fraction of a second, with exit status 2, not after TensorFlow's import (about 4 s here)."""
    child = (
        "import json, sys\n"
        "from tfgpu.cli import main\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    status = main(argv)\n"
        "    print(json.dumps([argv, status, 'tensorflow' in sys.modules]), flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child, json.dumps(BAD_BEFORE_TENSORFLOW)],
        capture_output=True,
        text=True,
        timeout=300,
        env=cli_environ(None),
        cwd=ROOT,
        check=False,
    )
    said = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(argv, status) for argv, status, _ in said] == [(a, 2) for a in BAD_BEFORE_TENSORFLOW], (
        done.stderr
    )
    assert [argv for argv, _, imported in said if imported] == []
    assert done.stderr.count("error:") == len(BAD_BEFORE_TENSORFLOW)

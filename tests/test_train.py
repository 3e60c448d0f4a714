"""tfgpu.Trainer: distributed results equal one device; exact evaluation; checkpoints and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tfgpu
from conftest import run_cli
from tasks import GLOBAL, make_task, model
from tfgpu import data
from tfgpu.errors import ConfigError
from tfgpu.testing import run_cluster

TASKS = str(Path(__file__).parent / "tasks.py")
STEPS = 12


def strategy(replicas: int):
    if replicas == 1:
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    # Several MirroredStrategies over different device sets in one process collide on collective
    # group keys ("joining a group with size 3, but that group has size 2"): reduce via one device.
    devices = [f"/cpu:{i}" for i in range(replicas)]
    return tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())


def train(replicas: int, **kw):
    trainer = tfgpu.Trainer(
        make_task(GLOBAL // replicas), strategy=strategy(replicas), monitor_gpus=False, **kw
    )
    result = trainer.fit(steps=STEPS)
    return trainer, result


@pytest.fixture(scope="module")
def single():
    trainer, result = train(1)
    return {"weights": trainer.model.get_weights(), "eval": trainer.evaluate(), "result": result}


def assert_same_weights(a, b, rtol=1e-5, atol=1e-6):
    for left, right in zip(a, b, strict=True):
        assert np.all(np.isfinite(left))
        np.testing.assert_allclose(left, right, rtol=rtol, atol=atol)


@pytest.mark.parametrize("replicas", [2, 3])
def test_replicas_match_one_device(single, replicas):
    trainer, result = train(replicas)
    assert result.global_batch == GLOBAL and result.replicas == replicas and result.steps == STEPS
    assert_same_weights(trainer.model.get_weights(), single["weights"])


@pytest.mark.slow
def test_two_workers_match_one_device(single):
    results = run_cluster(
        "bodies:train_weights_on_workers", workers=2, args=(GLOBAL // 2, STEPS), timeout=300
    )
    for result in results.values():
        assert_same_weights(result["weights"], single["weights"])
        assert result["eval"]["examples"] == 1001
        assert result["eval"]["accuracy"] == pytest.approx(single["eval"]["accuracy"], abs=1e-6)
        assert result["eval"]["loss"] == pytest.approx(single["eval"]["loss"], rel=1e-5)


@pytest.mark.parametrize("replicas", [2, 3])
def test_exact_evaluation_on_1001_examples(single, replicas):
    trainer = tfgpu.Trainer(make_task(GLOBAL // replicas), strategy=strategy(replicas), monitor_gpus=False)
    trainer.model.set_weights(single["weights"])
    metrics = trainer.evaluate()
    assert metrics["examples"] == 1001
    assert metrics["accuracy"] == pytest.approx(single["eval"]["accuracy"], abs=1e-6)
    assert metrics["loss"] == pytest.approx(single["eval"]["loss"], rel=1e-5)


def test_evaluation_from_a_tfgpu_dataset(single, tmp_path):
    from tasks import arrays

    x, y = arrays()
    np.savez(tmp_path / "d.npz", x=x, y=y)
    data.convert(
        tmp_path / "d.npz", tmp_path / "ds", options=data.ConvertOptions(label="y", min_shards=5, workers=1)
    )
    for replicas in (1, 3):
        trainer = tfgpu.Trainer(make_task(8), strategy=strategy(replicas), monitor_gpus=False)
        trainer.model.set_weights(single["weights"])
        metrics = trainer.evaluate(str(tmp_path / "ds"))
        assert metrics["examples"] == 1001
        assert metrics["accuracy"] == pytest.approx(single["eval"]["accuracy"], abs=1e-6)


def test_steps_per_execution_and_xla_give_the_same_weights(single):
    trainer, _result = train(2, steps_per_execution=4)
    assert_same_weights(trainer.model.get_weights(), single["weights"])
    trainer, _ = train(1, jit_compile=True)
    assert_same_weights(trainer.model.get_weights(), single["weights"], rtol=1e-4, atol=1e-5)
    with pytest.raises(ConfigError, match="XLA cannot compile a step replicated over logical CPU devices"):
        train(2, jit_compile=True)


def test_measures_and_reports_like_diagnose(single):
    result = single["result"]
    data_ = result.to_dict()
    assert data_["bottleneck"] in ("input", "host", "device")
    assert data_["input_bound"] in ("no", "moderately", "highly")
    assert 0.0 <= data_["input_wait_fraction"] <= 1.0
    assert data_["examples_per_s"] > 0 and len(data_["timeline"]) == STEPS


def test_epochs_history_and_tensorboard(tmp_path):
    trainer = tfgpu.Trainer(
        make_task(12), strategy=strategy(2), monitor_gpus=False, log_dir=str(tmp_path / "tb")
    )
    result = trainer.fit(epochs=2)
    assert [h["epoch"] for h in result.history] == [1, 2]
    assert result.history[0]["steps"] == 1001 // GLOBAL
    assert result.history[1]["eval_examples"] == 1001
    assert result.history[1]["loss"] < result.history[0]["loss"]
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_mixed_precision_fp16_uses_loss_scaling(clean_choices):
    import keras

    from tfgpu import choices

    keras.mixed_precision.set_dtype_policy("mixed_float16")
    try:
        trainer = tfgpu.Trainer(make_task(12), strategy=strategy(2), monitor_gpus=False)
        assert type(trainer.optimizer).__name__ == "LossScaleOptimizer"
        result = trainer.fit(steps=6)
        assert all(np.isfinite(p["loss"]) for p in result.timeline)
        assert choices.as_dict()["loss_scaling"]["value"] == "dynamic"
    finally:
        keras.mixed_precision.set_dtype_policy("float32")


def test_checkpoints_kept_and_resumed(tmp_path, single):
    directory = str(tmp_path / "ck")
    first = tfgpu.Trainer(
        make_task(12),
        strategy=strategy(2),
        monitor_gpus=False,
        checkpoint_dir=directory,
        checkpoint_every=2,
        keep_checkpoints=2,
    )
    first.fit(steps=7)
    kept = sorted(p.name for p in Path(directory).glob("ckpt-*.index"))
    assert kept == ["ckpt-6.index", "ckpt-7.index"]
    resumed = tfgpu.Trainer(make_task(12), strategy=strategy(2), monitor_gpus=False, checkpoint_dir=directory)
    assert resumed.resumed_from.endswith("ckpt-7") and int(resumed.step.read_value()) == 7
    resumed.fit(steps=STEPS)
    assert_same_weights(resumed.model.get_weights(), single["weights"])


def test_out_of_memory_names_the_batch_size(monkeypatch):
    trainer = tfgpu.Trainer(make_task(12), strategy=strategy(2), monitor_gpus=False)

    def explode():
        def run(batches):
            raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")

        return run

    monkeypatch.setattr(trainer, "_execution", explode)
    with pytest.raises(tfgpu.train.OutOfMemoryError) as info:
        trainer.fit(steps=2)
    assert "12 examples per replica (global batch 24)" in info.value.message
    assert "find_batch_size" in info.value.message


def test_find_batch_size_search():
    calls = []

    def fits(batch):
        calls.append(batch)
        return batch <= 300

    found = tfgpu.find_batch_size(make_task(), fits=fits)
    assert 282 <= found <= 300 and calls[:6] == [8, 16, 32, 64, 128, 256]
    with pytest.raises(ConfigError, match="Even 8"):
        tfgpu.find_batch_size(make_task(), fits=lambda b: False)
    assert tfgpu.find_batch_size(make_task(), strategy=strategy(1), limit=32) == 32  # real steps on CPU


def test_bad_training_options():
    with pytest.raises(ConfigError, match="exactly one of epochs or steps"):
        tfgpu.Trainer(make_task(), strategy=strategy(1), monitor_gpus=False).fit()
    with pytest.raises(ConfigError, match="Unknown loss"):
        tfgpu.Task(model=model, loss="hinge-ish", train_data=lambda c, b: None)


def test_cli_train_json_and_bad_task(tmp_path):
    done = run_cli(
        "train",
        f"{TASKS}:make_task",
        "--steps",
        "6",
        "--steps-per-execution",
        "3",
        "--json",
        "--log-dir",
        str(tmp_path / "run"),
        env={"TFGPU_LOGICAL_CPUS": "2"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    report = run_cli("report", str(tmp_path / "run"))
    assert report.returncode == 0, report.stderr[-2000:]
    page = (tmp_path / "run" / "report.html").read_text()
    assert ">Training<" in page and page.count("data:image/png;base64,") >= 3
    assert summary["steps"] == 6 and summary["replicas"] == 2 and summary["global_batch"] == 48
    assert summary["choices"]["global_batch"]["reason"] == "24 per replica x 2 replicas"
    bad = run_cli("train", f"{TASKS}:not_a_task", "--steps", "1")
    assert bad.returncode == 2 and "not a tfgpu.Task" in bad.stderr
    missing = run_cli("train", f"{TASKS}:nope", "--steps", "1")
    assert (
        missing.returncode == 2
        and "has no function 'nope'" in missing.stderr
        and "make_task" in missing.stderr
    )


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_weights(tmp_path):
    command = [
        sys.executable,
        "-m",
        "tfgpu.cli",
        "train",
        f"{TASKS}:slow_task",
        "--steps",
        "40",
        "--checkpoint-every",
        "4",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFGPU_")}
    reference = subprocess.run(
        [*command, "--checkpoint-dir", str(tmp_path / "ref")],
        env={**env, "SLOW_S": "0"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert reference.returncode == 0, reference.stderr[-2000:]
    directory = tmp_path / "run"
    proc = subprocess.Popen(
        [*command, "--checkpoint-dir", str(directory)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 180
    while time.time() < deadline and not list(directory.glob("ckpt-8.index")):
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = sorted(int(p.stem.split("-")[1]) for p in directory.glob("ckpt-*.index"))
    assert partial and max(partial) < 40  # killed midway
    done = subprocess.run(
        [*command, "--checkpoint-dir", str(directory)],
        env={**env, "SLOW_S": "0"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]

    def final(path):
        restored = model()
        tf.train.Checkpoint(model=restored).restore(tf.train.latest_checkpoint(str(path))).expect_partial()
        return restored.get_weights()

    assert_same_weights(final(directory), final(tmp_path / "ref"), rtol=1e-6, atol=1e-7)


@pytest.mark.slow
def test_parameter_server_training_lowers_the_loss():
    result = run_cluster("bodies:parameter_server_training", workers=2, chief=True, ps=1, timeout=300)[
        "chief:0"
    ]
    assert result["steps"] == 60
    assert result["last"] < result["first"]

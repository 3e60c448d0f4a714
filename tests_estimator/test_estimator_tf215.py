"""tfgpu.estimator on TensorFlow 2.15 with tensorflow-estimator (CI's second lane, see .ci/run).

The whole module shares one process on 2 logical CPU devices: ``run_config(logical_cpus=2)``
configures them before anything else touches TensorFlow, the way a user's program would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tfgpu
from tfgpu import choices, estimator
from tfgpu.errors import ConfigError, InputError
from tfgpu.predict import read_output

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS, BATCH = 103, 16  # 103 = 6 x 16 + 7: the last batch is short
WEIGHTS = np.array([1.0, -2.0, 0.5, 3.0], dtype=np.float32)


def _data() -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(0).normal(size=(ROWS, 4)).astype(np.float32)
    return x, (x @ WEIGHTS > 0).astype(np.int64)


def train_input_fn(params):
    x, y = _data()
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat().batch(params["batch"])


def eval_input_fn():
    x, y = _data()
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).batch(BATCH)


def predict_input_fn():
    return tf.data.Dataset.from_tensor_slices({"x": _data()[0]}).batch(BATCH)


def model_fn(features, labels, mode, params):
    hidden = tf.compat.v1.layers.dense(features["x"], 8, activation=tf.nn.relu)
    logits = tf.compat.v1.layers.dense(hidden, 2)
    predictions = {
        "class": tf.argmax(logits, 1),
        "probabilities": tf.nn.softmax(logits),
        "embedding": hidden,
    }
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions=predictions)
    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
    accuracy = tf.compat.v1.metrics.accuracy(labels, predictions["class"])
    train_op = tf.compat.v1.train.AdamOptimizer(params["lr"]).minimize(
        loss, global_step=tf.compat.v1.train.get_global_step()
    )
    return tf.estimator.EstimatorSpec(
        mode, loss=loss, train_op=train_op, eval_metric_ops={"accuracy": accuracy}
    )


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    choices.clear()
    return estimator.run_config(
        str(tmp_path_factory.mktemp("model")), logical_cpus=2, seed=7, save_checkpoints_steps=50
    )


@pytest.fixture(scope="module")
def trained(config):
    model = tf.estimator.Estimator(model_fn, config=config, params={"batch": BATCH, "lr": 0.05})
    model.train(train_input_fn, steps=60)
    return model


def test_run_config_mirrors_over_two_devices_the_session_creates(config):
    assert type(config.train_distribute).__name__ == "MirroredStrategy"
    assert config.train_distribute.num_replicas_in_sync == 2
    assert config.eval_distribute is config.train_distribute
    assert config.session_config.device_count["CPU"] == 2
    assert config.session_config.allow_soft_placement
    assert config.tf_random_seed == 7
    assert config.save_checkpoints_steps == 50
    line = choices.summary_line()
    assert "estimator.train_distribute=MirroredStrategy x2 (2 logical CPU devices)" in line


def test_estimator_trains_and_evaluates_on_two_replicas(trained):
    result = trained.evaluate(eval_input_fn)
    assert result["global_step"] == 60
    assert result["accuracy"] > 0.85, result  # chance is about 0.5


def test_predict_matches_estimator_predict_row_for_row(trained, tmp_path):
    expected = list(trained.predict(predict_input_fn))
    result = estimator.predict(trained, predict_input_fn, str(tmp_path / "out"), batch_size=BATCH)
    assert result.replicas == 2
    assert result.rows == ROWS and result.predicted_rows == ROWS
    got = read_output(str(tmp_path / "out"))
    assert list(got["row_id"]) == list(range(ROWS))
    np.testing.assert_array_equal(np.asarray(got["class"]), [e["class"] for e in expected])
    np.testing.assert_allclose(
        # float32 over other batch splits can differ in the last bit (seen: 1.2e-7 on a 0.03)
        np.stack(got["probabilities"]),
        np.stack([e["probabilities"] for e in expected]),
        rtol=1e-6,
        atol=1e-6,
    )
    np.testing.assert_allclose(
        np.stack(got["embedding"]), np.stack([e["embedding"] for e in expected]), rtol=1e-6, atol=1e-6
    )
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["model"].startswith("Estimator ")
    assert manifest["input"].startswith("input_fn predict_input_fn (103 rows)")


def test_predict_reads_files_tfgpu_predict_reads(trained, tmp_path):
    np.save(tmp_path / "x.npy", _data()[0])
    expected = np.array([e["class"] for e in trained.predict(predict_input_fn)])
    estimator.predict(trained, str(tmp_path / "x.npy"), str(tmp_path / "out"), batch_size=10, fmt="npy")
    got = read_output(str(tmp_path / "out"))
    np.testing.assert_array_equal(np.asarray(got["class"]), expected)


def test_predict_bad_inputs_say_what_to_do(trained, tmp_path):
    def forever():
        return predict_input_fn().repeat()

    with pytest.raises(InputError, match="repeats forever"):
        estimator.predict(trained, forever, str(tmp_path / "a"))

    def unbatched():
        return tf.data.Dataset.from_tensor_slices({"x": _data()[0][:, 0]})  # scalars: not batched

    with pytest.raises(InputError, match="batched features"):
        estimator.predict(trained, unbatched, str(tmp_path / "b"))
    np.save(tmp_path / "w.npy", _data()[0])  # its column is "w"; model_fn reads "x"
    with pytest.raises(InputError, match=r"cannot take the input's columns \['w'\] \(KeyError"):
        estimator.predict(trained, str(tmp_path / "w.npy"), str(tmp_path / "d"))
    (tmp_path / "taken").write_text("keep me")
    with pytest.raises(InputError, match="is a file"):
        estimator.predict(trained, predict_input_fn, str(tmp_path / "taken"))
    assert (tmp_path / "taken").read_text() == "keep me"
    untrained = tf.estimator.Estimator(model_fn, model_dir=str(tmp_path / "empty"), params={})
    with pytest.raises(InputError, match="no checkpoint"):
        estimator.predict(untrained, predict_input_fn, str(tmp_path / "c"))


def test_run_config_rejects_what_it_owns_and_bad_values():
    with pytest.raises(ConfigError, match="sets train_distribute itself"):
        estimator.run_config(train_distribute=None)
    with pytest.raises(ConfigError, match="Asked for 2 GPUs"):
        estimator.run_config(gpus=2)
    with pytest.raises(ConfigError, match="memory_growth cannot be combined"):
        estimator.run_config(memory_growth=True, memory_fraction=0.5)


def test_too_late_is_a_clear_error():
    tf.constant(1.0) + 1  # the devices are initialized now
    with pytest.raises(tfgpu.TooLateError, match="logical_cpus=3"):
        estimator.run_config(logical_cpus=3)


def test_multi_worker_from_tf_config(tmp_path):
    """Under TF_CONFIG the same rules give MultiWorkerMirroredStrategy; two workers train together."""
    script = tmp_path / "worker.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, sys
            sys.path.insert(0, {os.path.dirname(__file__)!r})
            import tensorflow as tf
            from tfgpu import choices, estimator
            import test_estimator_tf215 as t

            config = estimator.run_config({str(tmp_path / "model")!r}, save_checkpoints_steps=20)
            model = tf.estimator.Estimator(t.model_fn, config=config, params={{"batch": 8, "lr": 0.05}})
            tf.estimator.train_and_evaluate(
                model,
                tf.estimator.TrainSpec(t.train_input_fn, max_steps=20),
                tf.estimator.EvalSpec(t.eval_input_fn, steps=None, start_delay_secs=0, throttle_secs=0),
            )
            print(json.dumps({{"replicas": config.train_distribute.num_replicas_in_sync,
                              "step": int(model.get_variable_value("global_step")),
                              "chose": choices.summary_line()}}))
            """
        )
    )
    from tfgpu.testing.processes import free_ports

    ports = free_ports(2)
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    procs = []
    for index in range(2):
        env = {
            **os.environ,
            "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
            "TF_CPP_MIN_LOG_LEVEL": "2",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [p.communicate(timeout=240) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-3000:]
        report = json.loads(out.strip().splitlines()[-1])
        assert report["replicas"] == 2 and report["step"] == 20, report
        assert (
            "estimator.train_distribute=MultiWorkerMirroredStrategy x2 (TF_CONFIG has 2 tasks)"
            in report["chose"]
        )
        assert "estimator.eval_distribute=one device (no GPU)" in report["chose"]


def test_doctor_on_tensorflow_2_15_reports_the_estimator():
    done = subprocess.run(
        [sys.executable, "-m", "tfgpu.cli", "doctor", "--json"], capture_output=True, text=True, timeout=300
    )
    report = json.loads(done.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["estimator"]["status"] == "ok"
    assert "tf.estimator is available (TensorFlow 2.15.1)" in checks["estimator"]["finding"]
    assert "known:tf-estimator-removed" not in checks


def test_migration_guide_before_example_runs(tmp_path):
    """docs/migrating-from-estimator.md's Estimator (examples/estimator/before.py), on 2 devices."""
    done = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "examples", "estimator", "before.py"),
            str(tmp_path),
            "--cpus",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    accuracy = float(done.stdout.split("accuracy ")[1].split()[0])
    assert accuracy > 0.95, done.stdout

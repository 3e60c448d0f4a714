"""GPU paths on a real GPU (issue 17): skipped where NVML finds no GPU; CI has none.

Each test runs its work in a fresh process that sees the GPU (``gpu_environ``): the pytest
process itself hides it, like every other test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.processes import gpu_environ, run_cli

pytestmark = [pytest.mark.gpu, pytest.mark.process]
PY = sys.executable


def run_python(code: str, *, timeout: float = 300) -> dict:
    """Run ``code`` in a fresh process that sees the GPU; it prints one JSON object last."""
    import os

    done = subprocess.run(
        [PY, "-c", code],
        env={**os.environ, **gpu_environ()},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_doctor_sees_the_gpu():
    done = run_cli("doctor", "--json", env=gpu_environ())
    assert done.returncode == 0, done.stdout[-3000:]
    report = json.loads(done.stdout)
    head = next(c for c in report["checks"] if c["name"] == "tensorflow-gpus")
    assert head["status"] == "ok" and "GPU" in head["finding"]


def test_memory_limit_and_growth_on_a_real_gpu():
    code = """
import json, tfgpu, tensorflow as tf
tfgpu.configure(memory_limit_mb=1024)
gpu = tf.config.list_logical_devices("GPU")[0].name
with tf.device(gpu):
    small = tf.zeros([64, 1024, 1024])  # 256 MiB: fits
    try:
        tf.zeros([512, 1024, 1024]).numpy()  # 2 GiB: over the cap
        capped = False
    except tf.errors.ResourceExhaustedError:
        capped = True
print(json.dumps({"device": small.device, "capped": capped}))
"""
    result = run_python(code)
    assert "GPU" in result["device"] and result["capped"]
    grown = run_python(
        "import json, tfgpu, tensorflow as tf\n"
        "tfgpu.configure(memory_growth=True)\n"
        "gpu = tf.config.list_physical_devices('GPU')[0]\n"
        "print(json.dumps({'growth': tf.config.experimental.get_memory_growth(gpu)}))"
    )
    assert grown["growth"] is True


def test_two_processes_share_one_gpu_under_launch(tmp_path):
    script = tmp_path / "share.py"
    script.write_text(
        "import json, tfgpu, tensorflow as tf\n"
        "from tfgpu import distribute\n"
        "config = tfgpu.configure()\n"
        "x = tf.reduce_sum(tf.ones([1024, 1024])).numpy()\n"
        # TensorFlow lists both tasks' GPUs in a cluster (2 here, on the H100); its own is one
        "print(json.dumps({'gpus': len(distribute.local_devices('GPU')), 'cap': config.memory_limit_mb, 'sum': float(x)}))\n"
    )
    done = run_cli("launch", "--gpus", "0", "--procs-per-gpu", "2", "--", PY, str(script), env=gpu_environ())
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line.split("] ", 1)[1]) for line in done.stdout.splitlines() if "{" in line]
    assert len(lines) == 2 and all(r["gpus"] == 1 and r["cap"] and r["sum"] == 1024 * 1024 for r in lines)


def test_trainer_and_predict_on_the_gpu(tmp_path):
    code = f"""
import json
import numpy as np, keras, tensorflow as tf, tfgpu
from tfgpu.predict import PredictOptions, predict, read_output
rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 32)).astype("float32"); y = (x[:, 0] > 0).astype("int64")
build = lambda: keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(2)])
task = tfgpu.Task(model=build, loss="sparse_categorical_crossentropy", from_logits=True, train_data=(x, y), eval_data=(x, y), metrics=["accuracy"], batch_size=256, learning_rate=0.01)
trainer = tfgpu.Trainer(task, log_every=4)
result = trainer.fit(epochs=5)
trainer.model.save("{tmp_path}/m.keras"); np.save("{tmp_path}/x.npy", x)
predicted = predict("{tmp_path}/m.keras", "{tmp_path}/x.npy", "{tmp_path}/out", options=PredictOptions(batch_size=512))
outputs = next(v for k, v in read_output("{tmp_path}/out").items() if k != "row_id")
print(json.dumps({{
    "on_gpu": "GPU" in trainer.model.trainable_variables[0].value.device,
    "accuracy": result.history[-1]["val_accuracy"],
    "loss_finite": bool(np.isfinite(result.history[-1]["loss"])),
    "rows": predicted.predicted_rows,
    "matches": bool(np.allclose(outputs, trainer.model.predict(x, verbose=0), rtol=1e-4, atol=1e-4)),
}}))
"""
    result = run_python(code, timeout=600)
    assert result["on_gpu"] and result["loss_finite"] and result["accuracy"] > 0.9
    assert result["rows"] == 4096 and result["matches"]
    assert Path(tmp_path / "out" / "manifest.json").exists()


def test_keras_fit_contract_on_the_gpu():
    """tfgpu.fit / evaluate / predict on a compiled model on the GPU agree with Keras's own."""
    code = """
import json
import numpy as np, keras, tensorflow as tf, tfgpu
rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 32)).astype("float32"); y = (x[:, 0] > 0).astype("float32")
def build():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy", metrics=[keras.metrics.AUC(name="auc")])
    return model
ours, theirs = build(), build()
history = tfgpu.fit(ours, x, y, batch_size=256, epochs=3, shuffle=False, validation_split=0.25, verbose=0)
expected = theirs.fit(x, y, batch_size=256, epochs=3, shuffle=False, validation_split=0.25, verbose=0)
print(json.dumps({
    "on_gpu": "GPU" in ours.trainable_variables[0].value.device,
    "val_auc": history.history["val_auc"], "keras_val_auc": expected.history["val_auc"],
    "eval": tfgpu.evaluate(ours, x, y, batch_size=500, return_dict=True), "keras_eval": ours.evaluate(x, y, batch_size=500, verbose=0, return_dict=True),
    "predict_matches": bool(np.allclose(tfgpu.predict(ours, x, batch_size=512), ours.predict(x, batch_size=512, verbose=0), rtol=1e-4, atol=1e-5)),
}))
"""
    result = run_python(code, timeout=600)
    assert result["on_gpu"] and result["predict_matches"]
    assert result["val_auc"] == pytest.approx(result["keras_val_auc"], rel=1e-3)
    assert result["eval"] == pytest.approx(result["keras_eval"], rel=1e-4)


def test_as_written_losses_and_short_batches_train_as_one_gpu_on_logical_gpus():
    """Issue 43 on a real GPU: the H100 split into 3 logical GPUs. A model built at module level
    with a 0-d function loss, arrays with a short last batch (101 rows, batch 24: 5 rows on 2
    replicas) and a dataset split unevenly every step (32 on 3) train to one GPU's weights."""
    code = """
import json
import numpy as np, keras, tensorflow as tf
gpu = tf.config.list_physical_devices("GPU")[0]
tf.config.set_logical_device_configuration(gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=2048)] * 3)
tf.config.experimental.enable_tensor_float_32_execution(False)  # fp32 matmuls, comparable to 1e-5
import tfgpu

def mean_squared(y, p):
    return keras.ops.mean(keras.ops.square(y - p))

def small():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=mean_squared)
    return model

def mirrored(n):
    devices = [f"/gpu:{i}" for i in range(n)]
    return tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())

rng = np.random.default_rng(0)
x = rng.normal(size=(101, 4)).astype("float32"); y = rng.normal(size=(101, 1)).astype("float32")
out = {}
with tf.device("/gpu:0"):
    reference = small()
    expected = reference.fit(x, y, batch_size=24, epochs=2, shuffle=False, verbose=0).history["loss"]
model = small()  # built at module level, outside any scope
history = tfgpu.fit(model, x, y, batch_size=24, epochs=2, shuffle=False, verbose=0, strategy=mirrored(2))
out["arrays"] = {"loss": history.history["loss"], "expected": expected,
    "weights": max(float(np.max(np.abs(a - b))) for a, b in zip(model.get_weights(), reference.get_weights()))}
dataset = lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
with tf.device("/gpu:0"):
    reference = small()
    expected = reference.fit(dataset(), epochs=2, verbose=0).history["loss"]
model = small()
history = tfgpu.fit(model, dataset(), epochs=2, verbose=0, strategy=mirrored(3))
out["dataset"] = {"loss": history.history["loss"], "expected": expected,
    "weights": max(float(np.max(np.abs(a - b))) for a, b in zip(model.get_weights(), reference.get_weights()))}
out["on_gpu"] = "GPU" in model.trainable_variables[0].value.device
print(json.dumps(out))
"""
    result = run_python(code, timeout=600)
    assert result["on_gpu"]
    for case in ("arrays", "dataset"):
        assert result[case]["loss"] == pytest.approx(result[case]["expected"], rel=1e-4), case
        assert result[case]["weights"] < 1e-4, case

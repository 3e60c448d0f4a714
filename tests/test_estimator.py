"""tfgpu.estimator on the current TensorFlow (>= 2.16): a clear way forward, not a traceback.

The Estimator itself is tested on TensorFlow 2.15 in tests_estimator/ (the second CI lane).
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_calls_on_tensorflow_without_estimator_name_both_ways_forward():
    import tensorflow as tf

    import tfgpu

    with pytest.raises(tfgpu.estimator.EstimatorUnavailableError) as caught:
        tfgpu.estimator.run_config("/tmp/model", gpus="all")
    message = str(caught.value)
    assert f"this is TensorFlow {tf.__version__}" in message
    assert "pin tensorflow==2.15.1 and tensorflow-estimator==2.15.0" in message
    assert "docs/migrating-from-estimator.md" in message
    assert caught.value.exit_code == 2
    with pytest.raises(tfgpu.estimator.EstimatorUnavailableError):
        tfgpu.estimator.predict(object(), "data.npy", "out")


def test_migration_guide_exists_and_is_linked():
    guide = ROOT / "docs" / "migrating-from-estimator.md"
    text = guide.read_text()
    for needed in (
        "model_fn",
        "input_fn",
        "tfgpu.Task",
        "tfgpu.Trainer",
        "tfgpu.configure",
        "session_config",
    ):
        assert needed in text, needed
    assert "docs/migrating-from-estimator.md" in (ROOT / "README.md").read_text()


@pytest.mark.process
def test_migration_guide_after_example_trains(tmp_path):
    """docs/migrating-from-estimator.md's Task (examples/estimator/after.py), on 2 logical CPUs."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "estimator" / "after.py"), str(tmp_path), "--cpus", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    accuracy = float(done.stdout.split("accuracy ")[1].split()[0])
    assert accuracy > 0.95, done.stdout

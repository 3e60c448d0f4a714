"""Issue 68: five more public examples and tutorials (``wider_examples.py``), as their authors
wrote them, each run with Keras's own methods on one device and with tfgpu's on 2 replicas
(the model made outside any scope, ``strategy=`` passed as a user passes it), and all five
under ``tfgpu launch --nproc 2`` (MultiWorkerMirroredStrategy, 2 worker processes), every
run compared with Keras's on one device: histories, weights, evaluations and predictions
(``support.parity.same``)."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import pytest

import wider_examples
from support.parity import KERAS, same, tfgpu_with
from support.replicas import local_strategy

pytestmark = pytest.mark.heavy


@pytest.mark.parametrize("name", list(wider_examples.EXAMPLES))
def test_an_example_on_two_replicas_trains_as_keras_on_one_device(name):
    example = wider_examples.EXAMPLES[name]
    expected = example(KERAS)
    same(example(tfgpu_with(local_strategy(2), everywhere=True)), expected)


@pytest.mark.slow
@pytest.mark.process
def test_the_examples_under_tfgpu_launch_on_two_workers_train_as_keras_on_one_device(tmp_path):
    """Both workers run the five examples as written (tfgpu's methods, no strategy passed:
    tfgpu takes TF_CONFIG's) and each ends with Keras's one-device figures."""
    from support.processes import run_cli

    script = Path(__file__).parent / "scripts" / "wider_examples.py"
    done = run_cli("launch", "--nproc", "2", "--", sys.executable, str(script), str(tmp_path), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    for worker in ("worker-0", "worker-1"):
        strategy = json.loads((tmp_path / f"{worker}-strategy.json").read_text())
        assert "MultiWorkerMirrored" in strategy["value"] and "x2" in strategy["value"], strategy
    for name, example in wider_examples.EXAMPLES.items():
        expected = example(KERAS)
        for worker in ("worker-0", "worker-1"):
            with open(tmp_path / f"{worker}-{name}.pkl", "rb") as handle:
                same(pickle.load(handle), expected)

"""devices_per_replica: a model's layers split over K devices per replica, its batch in
micro-batches; the variables on the stage devices, the weights those of one device."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import tfgpu
from fit_models import deep_dense_model, linear_data
from support.parity import same
from tfgpu.errors import ConfigError


def components(variable):
    inner = variable.value
    return [v.device.split("device:")[-1] for v in getattr(inner, "values", [inner])]


def split_run(devices_per_replica: int) -> dict:
    """tfgpu.fit and tfgpu.predict of the model split over ``devices_per_replica`` devices."""
    x, y = linear_data(96)
    ours = deep_dense_model()
    history = tfgpu.fit(
        ours, x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, devices_per_replica=devices_per_replica
    )
    from tfgpu.train.pieces import model_cache

    ((_, placed),) = [c for key, c in model_cache.copies(ours).items() if key[0] == "split"]
    return {
        "weights": ours.get_weights(),
        "history": history.history,
        "devices": [components(v) for v in placed.weights],
        "predicted": tfgpu.predict(
            ours, x, batch_size=16, verbose=0, devices_per_replica=devices_per_replica
        ),
    }


@pytest.fixture(scope="module")
def on_one_device():
    x, y = linear_data(96)
    expected = deep_dense_model()
    history = expected.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    return expected, history.history


@pytest.mark.heavy
def test_one_replica_over_three_devices_is_one_device(on_one_device):
    """This test process has 3 logical CPUs: one replica, one layer group on each (4 layers)."""
    expected, history = on_one_device
    result = split_run(3)
    same(result["weights"], expected.get_weights())
    same(result["history"], history)
    assert {d[0] for d in result["devices"]} == {"CPU:0", "CPU:1", "CPU:2"}
    np.testing.assert_allclose(
        result["predicted"], expected.predict(linear_data(96)[0], verbose=0), rtol=1e-4, atol=1e-5
    )


@pytest.mark.slow
def test_two_replicas_of_two_devices_on_four_cpus_are_one_device(on_one_device):
    from tfgpu.testing import run_on_logical_cpus

    expected, history = on_one_device
    result = run_on_logical_cpus("test_split:split_run", 4, 2, timeout=300)
    same(result["weights"], expected.get_weights())
    same(result["history"], history)
    # each variable mirrored on two replicas, its components on the stage's device of each group
    assert {tuple(d) for d in result["devices"]} == {("CPU:0", "CPU:2"), ("CPU:1", "CPU:3")}
    np.testing.assert_allclose(
        result["predicted"], expected.predict(linear_data(96)[0], verbose=0), rtol=1e-4, atol=1e-5
    )


def test_stages_balance_the_layers_memory():
    from tfgpu.train.model import split

    assert split._partition([1, 1, 1, 1], 2) == [(0, 2), (2, 4)]
    assert split._partition([10, 1, 1, 1, 1], 2) == [(0, 1), (1, 5)]
    assert split._partition([5, 5, 5], 3) == [(0, 1), (1, 2), (2, 3)]


@pytest.mark.model
def test_bad_splits_are_one_message():
    x, y = linear_data(96)
    with pytest.raises(ConfigError, match="must divide this process's 3 devices") as caught:
        tfgpu.fit(deep_dense_model(), x, y, devices_per_replica=2)
    assert "[1, 3]" in caught.value.fix
    with pytest.raises(ConfigError, match="at least 1"):
        tfgpu.fit(deep_dense_model(), x, y, devices_per_replica=0)
    with pytest.raises(ConfigError, match="micro_batches"):
        tfgpu.fit(deep_dense_model(), x, y, devices_per_replica=3, micro_batches=0)

    class Own(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)

        def call(self, x):
            return self.dense(x)

    own = Own()
    own(x[:1])
    own.compile(loss="mse")
    with pytest.raises(ConfigError, match="Sequential or functional"):
        tfgpu.fit(own, x, y, devices_per_replica=3)


@pytest.mark.model
def test_a_split_under_several_workers_is_refused(monkeypatch):
    import json

    config = {"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    x, y = linear_data(96)
    with pytest.raises(ConfigError, match="one worker's devices") as caught:
        tfgpu.fit(deep_dense_model(), x, y, devices_per_replica=3)
    assert caught.value.value == "2 tasks in TF_CONFIG" and "--gpus-per-proc" in caught.value.fix


@pytest.mark.model
def test_remat_of_a_split_layer_recomputes_a_pure_function_of_its_weights():
    """A split wraps each layer's call to place it; remat still finds the layer behind the
    wrapper, so its recomputation takes the weights read before the forward pass (a layer missed
    read its variables itself in the backward pass, which raced the updates: now and then, under
    load, a split over 3 devices trained to weights 2e-3 off one device's)."""
    from tfgpu.train.model import split
    from tfgpu.train.pieces import remat

    placed = split.placed(deep_dense_model(), devices_per_replica=3, batch=16)[1]
    for layer in placed.layers:
        assert getattr(layer.call, "__self__", None) is None  # the split's wrapper
        assert remat.owner_of(layer.call) is layer
    assert remat.owner_of(keras.activations.relu) is None


@pytest.mark.heavy
@pytest.mark.process
def test_tfgpu_train_with_remat_over_two_devices_per_replica_is_one_device(tmp_path):
    """``tfgpu train --remat --devices-per-replica 2`` on 2 logical CPUs (one replica, its layers
    split over both and recomputed in the backward pass) trains as one device does: the same
    losses, epoch by epoch, and the same weights in the last checkpoint."""
    import json
    from pathlib import Path

    from support.processes import run_cli

    tasks = str(Path(__file__).parent / "tasks.py")
    runs = {}
    for name, cpus, flags in (
        ("one", "1", []),
        ("split", "2", ["--remat", "--devices-per-replica", "2"]),
    ):
        result = run_cli(
            "train",
            f"{tasks}:make_task",
            "--epochs",
            "2",
            "--json",
            "--checkpoint-dir",
            str(tmp_path / name),
            *flags,
            env={"TFGPU_LOGICAL_CPUS": cpus},
        )
        assert result.returncode == 0, result.stderr[-2000:]
        runs[name] = json.loads(result.stdout)
    one, split = runs["one"], runs["split"]
    assert split["choices"]["remat"]["value"] == "full"
    assert split["choices"]["devices_per_replica"]["value"] == "2"
    assert [e["loss"] for e in split["history"]] == pytest.approx(
        [e["loss"] for e in one["history"]], rel=1e-5
    )
    weights = {name: _weights(tmp_path / name) for name in runs}
    assert len(weights["one"]) == 4  # two Dense layers' kernels and biases
    for a, b in zip(weights["one"], weights["split"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _weights(directory):
    """The trained variables in a checkpoint (as the optimizer keys them), in order."""
    import tensorflow as tf

    names = sorted(
        n
        for n, _ in tf.train.list_variables(str(directory))
        if n.startswith("optimizer/_trainable_variables/")
    )
    return [tf.train.load_variable(str(directory), n) for n in names]

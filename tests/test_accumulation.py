"""Keras's gradient_accumulation_steps under tfgpu.fit on several replicas: Keras's own fit fails
there (keras-team/keras#20582, "Exception encountered when calling Cond.call()"); tfgpu trains
to the weights of Keras's fit on one device."""

from __future__ import annotations

import keras
import pytest

import tfgpu
from fit_models import ACCUMULATING_OPTIMIZERS, accumulating_model, linear_data
from support.parity import in_scope, same
from support.replicas import local_strategy
from tfgpu.errors import ConfigError


@pytest.mark.heavy
@pytest.mark.parametrize("optimizer", sorted(ACCUMULATING_OPTIMIZERS))
@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_accumulation_on_replicas_is_keras_on_one_device(replicas, optimizer):
    x, y = linear_data(192)
    expected = accumulating_model(optimizer)
    history = expected.fit(x, y, batch_size=24, epochs=2, shuffle=False, verbose=0)
    ours = in_scope(local_strategy(replicas), lambda: accumulating_model(optimizer))
    got = tfgpu.fit(ours, x, y, batch_size=24, epochs=2, shuffle=False, verbose=0)
    same(ours.get_weights(), expected.get_weights())
    same(got.history, history.history)
    # 16 steps, an update every N: Keras counts the optimizer's updates
    assert int(ours.optimizer.iterations.numpy()) == int(expected.optimizer.iterations.numpy())


def test_what_cannot_accumulate_across_replicas_is_said():
    from tfgpu.train.pieces import accumulation

    optimizer = keras.optimizers.Adam(global_clipnorm=1.0, gradient_accumulation_steps=2)
    with pytest.raises(ConfigError, match="global_clipnorm or use_ema"):
        accumulation.enable(optimizer)
    plain = keras.optimizers.Adam()
    accumulation.enable(plain)  # nothing to do without accumulation
    assert "_backend_apply_gradients" not in vars(plain)


@pytest.mark.slow
def test_accumulation_on_two_workers_is_keras_on_one_device():
    from tfgpu.testing import run_cluster

    x, y = linear_data(192)
    expected = accumulating_model("adamw-clipnorm")
    history = expected.fit(x, y, batch_size=24, epochs=2, shuffle=False, verbose=0)
    results = run_cluster("bodies:accumulate_on_workers", workers=2, args=("adamw-clipnorm",), timeout=300)
    for result in results.values():
        same(result["weights"], expected.get_weights())
        same(result["history"], history.history)
        assert result["iterations"] == int(expected.optimizer.iterations.numpy())


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", sorted(ACCUMULATING_OPTIMIZERS))
def test_accumulation_with_parameter_servers_is_keras_on_one_device(optimizer):
    from tfgpu.testing import run_on_logical_cpus

    x, y = linear_data(192)
    expected = accumulating_model(optimizer)
    history = expected.fit(x, y, batch_size=24, epochs=2, shuffle=False, verbose=0)
    result = run_on_logical_cpus("bodies:accumulate_with_parameter_servers", 1, optimizer, timeout=300)
    same(result["weights"], expected.get_weights())
    same(result["history"], history.history)
    assert result["iterations"] == int(expected.optimizer.iterations.numpy())


@pytest.mark.heavy
def test_a_resumed_fit_keeps_the_gradients_accumulated_so_far(tmp_path):
    """The first run stops after step 8, two gradients into a cycle of 3: the resumed run goes on
    from them, to the weights of an uninterrupted run."""
    x, y = linear_data(192)
    expected = accumulating_model("sgd-momentum")
    expected.fit(x, y, batch_size=24, epochs=2, shuffle=False, verbose=0)
    strategy = local_strategy(2)
    kept = {"checkpoint_dir": str(tmp_path), "checkpoint_every": 5}
    first = in_scope(strategy, lambda: accumulating_model("sgd-momentum"))
    tfgpu.fit(first, x, y, batch_size=24, epochs=1, shuffle=False, verbose=0, **kept)
    assert int(first.optimizer.iterations.numpy()) == 2  # 8 steps: 2 updates, 2 gradients kept
    resumed = in_scope(strategy, lambda: accumulating_model("sgd-momentum"))
    history = tfgpu.fit(resumed, x, y, batch_size=24, epochs=2, shuffle=False, verbose=0, **kept)
    assert history.epoch == [0, 1]  # the kept epoch, then the one trained (the run's whole History)
    same(resumed.get_weights(), expected.get_weights())
    assert int(resumed.optimizer.iterations.numpy()) == int(expected.optimizer.iterations.numpy())

"""Rematerialization under tfgpu.fit: a model built in keras.RematScope (which fails in Keras's own
compiled fit, keras-team/keras#21207) and ``remat=`` on a model built without it train to the
weights of the model without remat, BatchNormalization and Dropout included (their state is not
changed twice by the recomputation)."""

from __future__ import annotations

import contextlib

import keras
import numpy as np
import pytest

import tfgpu
from fit_models import deep_dense_model, linear_data
from support.parity import in_scope, same
from support.replicas import local_strategy
from tfgpu.errors import ConfigError


def data():
    return linear_data(96, seed=1)


def model(scope=None):
    """Dense layers with a BatchNormalization and a Dropout between: state a recomputation moves."""
    keras.utils.set_random_seed(0)
    with keras.RematScope(mode=scope) if scope else _nothing():
        inputs = keras.Input((8,))
        x = keras.layers.Dense(32, activation="relu")(inputs)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.Dropout(0.25, seed=5)(x)
        x = keras.layers.Dense(32, activation="tanh")(x)
        built = keras.Model(inputs, keras.layers.Dense(1)(x))
    built.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse")
    return built


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture(scope="module")
def plain_weights():
    """The model without remat, trained by Keras on one device and by tfgpu on 2 replicas (a
    Dropout draws its masks per replica, so 2 replicas are compared with 2 replicas)."""
    x, y = data()
    keras_model = model()
    keras_model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    two = in_scope(local_strategy(2), model)
    tfgpu.fit(two, x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    return {1: keras_model.get_weights(), 2: two.get_weights()}


@pytest.mark.heavy
@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("scope", ["full", "larger_than", "activations"])
def test_a_remat_scope_model_trains_to_the_weights_without_remat(scope, replicas, plain_weights):
    x, y = data()
    ours = in_scope(local_strategy(replicas), lambda: model(scope))
    tfgpu.fit(ours, x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    same(ours.get_weights(), plain_weights[replicas], rtol=1e-4, atol=1e-5)


@pytest.mark.heavy
@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("remat", [True, "activations", "largest"])
def test_remat_for_a_model_built_without_it_keeps_the_weights(remat, replicas, plain_weights, clean_choices):
    from tfgpu.train.pieces import model_cache

    x, y = data()
    ours = in_scope(local_strategy(replicas), model)
    tfgpu.fit(ours, x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, remat=remat)
    same(ours.get_weights(), plain_weights[replicas], rtol=1e-4, atol=1e-5)
    assert not model_cache.uses_remat(ours)  # for the run only
    assert "layers recomputed" in tfgpu.choices.as_dict()["remat"]["reason"]


@pytest.mark.model
def test_the_recomputation_really_happens_in_the_traced_step():
    """The gradient of a rematted layer recomputes its forward ops (a second MatMul in the graph)."""
    import tensorflow as tf

    from tfgpu.train.pieces import remat as rematerialization

    layer = keras.layers.Dense(4, activation="relu")
    layer.build((None, 3))
    x = tf.ones((2, 3))

    def count(mode):
        model = keras.Sequential([keras.Input((3,)), layer])
        with rematerialization.for_run(model, mode) if mode else contextlib.nullcontext():

            @tf.function
            def step():
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(layer(x, training=True))
                return tape.gradient(loss, layer.trainable_variables)

            graph = step.get_concrete_function().graph
        return sum(op.type == "MatMul" for op in graph.get_operations())

    assert count("full") > count(None)


@pytest.mark.model
def test_largest_picks_the_layers_holding_half_the_activations():
    from tfgpu.train.pieces import remat as rematerialization

    wide = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(512, name="wide"),
            keras.layers.Dense(8, name="narrow"),
            keras.layers.Dense(1),
        ]
    )
    names = [
        layer.name for layer in rematerialization._choose(wide, rematerialization._leaves(wide), "largest")
    ]
    assert names == ["wide"]


@pytest.mark.model
def test_bad_remat_is_one_message():
    from tfgpu.train.pieces import remat as rematerialization

    with pytest.raises(ConfigError, match="remat must be True") as caught:
        tfgpu.fit(model(), *data(), remat="everything")
    assert caught.value.value == "everything"

    class Bare(keras.Model):
        def call(self, x):
            return x * 2.0

    bare = Bare()
    bare(np.zeros((1, 2), "float32"))
    with pytest.raises(ConfigError, match="made of Keras layers"), rematerialization.for_run(bare, "full"):
        pass


@pytest.mark.model
def test_the_traced_step_is_kept_between_calls():
    """The remat modes are part of what a step was traced against, compared by value: a new
    tuple each call must not drop the traced functions (it did: a retrace every call, 80x slower)."""
    from tfgpu.train.pieces import model_cache

    x, y = data()
    ours = in_scope(local_strategy(1), model)
    tfgpu.fit(ours, x[:32], y[:32], batch_size=16, verbose=0)
    functions = model_cache.functions(ours)
    tfgpu.fit(ours, x[:32], y[:32], batch_size=16, verbose=0)
    assert model_cache.functions(ours) is functions


@pytest.mark.heavy
def test_two_replicas_with_batch_normalization_agree_every_time(plain_weights, clean_choices):
    """Recomputing a BatchNormalization and a Dropout on 2 replicas with the layers reading their
    own variables trained to other weights now and then (one run in 5 to 20, 0.02-0.15 apart,
    more often under load); the pure recomputation does not. Several runs in a row, each
    recomputed and equal to the model without remat."""
    x, y = data()
    for scope in (None, "full", None, "full", None):
        ours = in_scope(local_strategy(2), lambda scope=scope: model(scope))
        tfgpu.fit(ours, x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, remat=scope is None)
        same(ours.get_weights(), plain_weights[2], rtol=1e-4, atol=1e-5)
    assert "remat.kept" not in tfgpu.choices.as_dict()
    assert "6 of 6 layers recomputed" in tfgpu.choices.as_dict()["remat"]["reason"]


class Penalized(keras.layers.Layer):
    """A layer adding its own loss inside ``call`` (made in the recomputed function)."""

    def build(self, shape):
        self.kernel = self.add_weight(shape=(shape[-1], 16), initializer="glorot_uniform")

    def call(self, x):
        y = keras.ops.matmul(x, self.kernel)
        self.add_loss(0.1 * keras.ops.mean(y**2))
        return keras.ops.relu(y)


@pytest.mark.model
def test_a_loss_added_inside_call_counts_once_with_remat():
    """A layer's own loss added in its ``call`` reaches the model's loss as without remat: the same
    weights after training (dropped, the weights differ)."""
    x, y = data()

    def penalized():
        keras.utils.set_random_seed(0)
        inputs = keras.Input((8,))
        built = keras.Model(inputs, keras.layers.Dense(1)(Penalized()(inputs)))
        built.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        return built

    plain, ours = in_scope(local_strategy(1), penalized), in_scope(local_strategy(1), penalized)
    tfgpu.fit(plain, x[:32], y[:32], batch_size=16, shuffle=False, verbose=0)
    tfgpu.fit(ours, x[:32], y[:32], batch_size=16, shuffle=False, verbose=0, remat=True)
    same(ours.get_weights(), plain.get_weights(), rtol=1e-5, atol=1e-6)


@pytest.mark.model
def test_the_forward_pass_writes_the_statistics_once():
    """A BatchNormalization under remat: its moving mean moves by one update per step, as without."""
    import tensorflow as tf

    from tfgpu.train.pieces import remat as rematerialization

    def run(mode):
        keras.utils.set_random_seed(0)
        norm = keras.layers.BatchNormalization(momentum=0.5)
        layers = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), norm])
        x = tf.constant(np.arange(12, dtype="float32").reshape(4, 3))
        with rematerialization.for_run(layers, mode):

            @tf.function
            def step():
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(layers(x, training=True) ** 2)
                return tape.gradient(loss, layers.trainable_variables)

            grads = step()
        return norm.moving_mean.numpy(), [g.numpy() for g in grads]

    (mean, grads), (plain_mean, plain_grads) = run("full"), run(None)
    np.testing.assert_allclose(mean, plain_mean, rtol=1e-6)
    same(grads, plain_grads)


@pytest.mark.heavy
def test_a_model_without_state_is_recomputed_on_two_replicas(clean_choices):
    """Dense layers only: recomputed on both replicas (no remat.kept), the weights of the model
    without remat."""

    x, y = data()
    plain = in_scope(local_strategy(2), deep_dense_model)
    tfgpu.fit(plain, x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    for _ in range(3):
        ours = in_scope(local_strategy(2), deep_dense_model)
        tfgpu.fit(ours, x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, remat=True)
        same(ours.get_weights(), plain.get_weights(), rtol=1e-4, atol=1e-5)
    assert "remat.kept" not in tfgpu.choices.as_dict()
    assert "layers recomputed" in tfgpu.choices.as_dict()["remat"]["reason"]

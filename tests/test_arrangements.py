"""Issue 43's root: arrangements drawn, not chosen. Hypothesis draws how the model is made (a
Sequential with and without ``Input``, functional, subclassed, a custom layer without
``get_config``, a ``Lambda``), where it is built (inside the strategy's scope or at module level),
its loss (a name, an object, a per-example function, a function returning one number), the input
(arrays or a ``tf.data.Dataset``), the rows (leaving a short last batch) and 1-3
replicas, with a callback acting on every batch; each drawn case is compared with Keras's own
``fit`` on one device: weights, history and the batch calls.

A short last batch trains as on one device, however it splits over the replicas: arrays drop
only a remainder with fewer rows than replicas (docs/from-model-fit.md), so Keras's reference fits
the rows kept; a Dataset's last batch is trained as it comes, a replica left without rows
included. Profiles: ``fast`` (the default, 5 cases, drawn afresh each run)
and ``ci`` (``HYPOTHESIS_PROFILE=ci``, which ``make test`` sets: 14 cases, the same each run).
Every case it ever fails on is kept as an ``@example``.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import tfgpu
from conftest import local_strategy

settings.register_profile(
    "fast",
    max_examples=5,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "ci",
    max_examples=14,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))

PER_REPLICA = 4
BUILDS = ("sequential", "sequential-unbuilt", "functional", "subclassed", "custom-layer", "lambda")
LOSSES = ("name", "object", "per-example", "one-number")
INPUTS = ("arrays", "dataset")


class Doubling(keras.layers.Layer):
    """A custom layer as users write it: a weight made in ``build``, no ``get_config``."""

    def __init__(self, units):
        super().__init__()
        self.units = units

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), initializer="glorot_uniform")

    def call(self, inputs):
        return 2.0 * keras.ops.matmul(inputs, self.kernel)


class Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(3)
        self.out = keras.layers.Dense(1)

    def call(self, inputs):
        return self.out(self.hidden(inputs))


def build(kind: str):
    keras.utils.set_random_seed(0)
    if kind == "sequential":
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
    if kind == "sequential-unbuilt":
        return keras.Sequential([keras.layers.Dense(3), keras.layers.Dense(1)])
    if kind == "subclassed":
        return Subclassed()
    inputs = keras.Input((4,))
    hidden = {
        "functional": keras.layers.Dense(3),
        "custom-layer": Doubling(3),
        "lambda": keras.layers.Lambda(lambda t: t * 2.0),
    }[kind](inputs)
    return keras.Model(inputs, keras.layers.Dense(1)(hidden))


def loss_of(kind: str):
    return {
        "name": "mse",
        "object": keras.losses.MeanSquaredError(),
        "per-example": lambda y, p: keras.ops.mean(keras.ops.square(y - p), axis=-1),
        "one-number": lambda y, p: keras.ops.mean(keras.ops.square(y - p)),
    }[kind]


class BatchCalls(keras.callbacks.Callback):
    """Acts on every batch, as users' loss-history callbacks do."""

    def on_train_begin(self, logs=None):
        self.calls = []

    def on_train_batch_end(self, batch, logs=None):
        self.calls.append((batch, round(float(logs["loss"]), 5)))


def data(kind: str, rows: int, global_batch: int, replicas: int):
    rng = np.random.default_rng(rows)
    x = rng.normal(size=(rows, 4)).astype("float32")
    y = rng.normal(size=(rows, 1)).astype("float32")
    if kind == "arrays":
        short = rows % global_batch
        kept = rows - short if short < replicas else rows  # fewer rows than replicas: dropped
        return (x, y), (x[:kept], y[:kept])
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch), None


def compiled(model, loss):
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=loss)
    return model


@st.composite
def arrangements(draw):
    replicas = draw(st.integers(1, 3))
    source = draw(st.sampled_from(INPUTS))
    steps = draw(st.integers(1, 3))
    short = draw(st.integers(0, PER_REPLICA * replicas - 1))
    return {
        "replicas": replicas,
        "input": source,
        "rows": steps * PER_REPLICA * replicas + short,
        "build": draw(st.sampled_from(BUILDS)),
        "inside": draw(st.booleans()),
        "loss": draw(st.sampled_from(LOSSES)),
    }


def run(case):
    global_batch = PER_REPLICA * case["replicas"]
    given_data, whole = data(case["input"], case["rows"], global_batch, case["replicas"])
    loss = loss_of(case["loss"])
    reference = compiled(build(case["build"]), loss)
    keras_calls = BatchCalls()
    if whole is None:
        keras_history = reference.fit(given_data, epochs=2, verbose=0, callbacks=[keras_calls])
    else:
        keras_history = reference.fit(
            *whole, batch_size=global_batch, epochs=2, shuffle=False, verbose=0, callbacks=[keras_calls]
        )
    strategy = local_strategy(case["replicas"])
    if case["inside"]:
        with strategy.scope():
            model = compiled(build(case["build"]), loss)
    else:
        model = compiled(build(case["build"]), loss)
    calls = BatchCalls()
    fit = dict(epochs=2, verbose=0, callbacks=[calls], strategy=strategy)
    if whole is None:
        history = tfgpu.fit(model, given_data, **fit)
    else:
        history = tfgpu.fit(model, *given_data, batch_size=global_batch, shuffle=False, **fit)
    assert history.history["loss"] == pytest.approx(keras_history.history["loss"], rel=1e-5), case
    for ours, theirs in zip(model.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6, err_msg=str(case))
    assert [b for b, _ in calls.calls] == [b for b, _ in keras_calls.calls], case
    assert [v for _, v in calls.calls] == pytest.approx([v for _, v in keras_calls.calls], rel=1e-4), case


@pytest.mark.heavy
@given(case=arrangements())
@example(  # a short last batch of arrays cut 2, 2, 3 over the replicas
    case={
        "replicas": 3,
        "input": "arrays",
        "rows": 19,
        "build": "custom-layer",
        "inside": False,
        "loss": "one-number",
    }
)
@example(  # a Dataset's last batch of 1 row on 2 replicas: one replica has none
    case={
        "replicas": 2,
        "input": "dataset",
        "rows": 9,
        "build": "functional",
        "inside": False,
        "loss": "one-number",
    }
)
@example(
    case={
        "replicas": 2,
        "input": "arrays",
        "rows": 9,
        "build": "sequential-unbuilt",
        "inside": False,
        "loss": "one-number",
    }
)
@example(
    case={
        "replicas": 3,
        "input": "dataset",
        "rows": 15,
        "build": "lambda",
        "inside": False,
        "loss": "per-example",
    }
)
@example(
    case={
        "replicas": 2,
        "input": "dataset",
        "rows": 11,
        "build": "functional",
        "inside": True,
        "loss": "name",
    }
)
def test_a_drawn_arrangement_trains_as_keras_on_one_device(case, clean_choices):
    run(case)

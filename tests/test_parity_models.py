"""Where and how the model is built (in or outside a strategy's scope, built or not, Sequential,
functional or subclassed, custom layers, Lambdas, a model cloning cannot recreate, preprocessing
layers adapted outside the scope, a model with no ``call``) trains on several replicas to one
device's numbers, and a model that cannot is said with its cause.

Each test is an example of ``support.examples`` (its marker: its source, what it exercises),
run with Keras's methods and tfgpu's and compared under ``support/parity.py``'s rules.
"""

from __future__ import annotations

import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import guides
import tfgpu
from fit_models import (
    FIT_16,
    FIT_48,
    linear_data,
    mean_squared,
    normal_rows,
    small_regression,
)
from guides import (
    get_uncompiled_model,
)
from support.parity import KERAS, TFGPU, same, tfgpu_with
from support.replicas import local_strategy, one_device


# -- keras-io guides/training_with_built_in_methods.py -----------------------------------------------
@pytest.mark.heavy
@pytest.mark.exercises(
    "model:functional",
    "model:in_scope",
    "model:outside_scope",
    "inputs:arrays",
    "loss:object",
    "metric:builtin",
    "strategy:mirrored",
    source='keras-io guides/training_with_built_in_methods.py "a first end-to-end example"',
)
@pytest.mark.parametrize("where", ["in-scope", "outside-scope"])
def test_training_guide_first_end_to_end_example(where):
    """keras-io guides/training_with_built_in_methods.py, "API overview: a first end-to-end example":
    NumPy arrays, validation_data=(x_val, y_val), evaluate(batch_size=128), predict(x_test[:3]).

    Lines changed: none (in-scope: ``with strategy.scope():`` around building and compiling, as the
    distributed-training guide writes it; outside-scope: ``strategy=`` passed to all three calls,
    as a user who chose the replicas would: all three take it). Test-only: ``shuffle=False``.
    """
    (x_train, y_train), (x_val, y_val), (x_test, y_test) = guides.mnist_vectors()

    def guide(api, scope):
        keras.utils.set_random_seed(0)
        with scope():
            model = get_uncompiled_model()
            model.compile(
                optimizer=keras.optimizers.RMSprop(),  # Optimizer
                # Loss function to minimize
                loss=keras.losses.SparseCategoricalCrossentropy(),
                # List of metrics to monitor
                metrics=[keras.metrics.SparseCategoricalAccuracy()],
            )
        history = api.fit(
            model,
            x_train,
            y_train,
            batch_size=64,
            epochs=2,
            # We pass some validation for
            # monitoring validation loss and metrics
            # at the end of each epoch
            validation_data=(x_val, y_val),
            shuffle=False,
        )
        results = api.evaluate(model, x_test, y_test, batch_size=128)
        predictions = api.predict(model, x_test[:3])
        assert predictions.shape == (3, 10)
        return {"history": history.history, "results": results, "predictions": predictions,
                "weights": model.get_weights()}  # fmt: skip

    expected = guide(KERAS, one_device)
    strategy = local_strategy(2)
    if where == "in-scope":
        got = guide(TFGPU, strategy.scope)
    else:
        got = guide(tfgpu_with(strategy, everywhere=True), one_device)
    same(got, expected)


@pytest.mark.exercises(
    "model:sequential",
    "model:unbuilt",
    "model:outside_scope",
    "loss:string",
    "inputs:arrays",
    "strategy:mirrored",
    source="keras-io writing your own callbacks",
)
@pytest.mark.model
def test_an_unbuilt_sequential_from_no_scope_is_trained_in_place(clean_choices):
    """keras-io's "writing your own callbacks": Sequential without Input, built outside any scope.
    tfgpu trained a copy on the replicas, then failed copying the weights back
    (``set_weights ... expecting 0 weights``): the user's model stayed untrained."""

    def unbuilt():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.layers.Dense(4), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        return model

    x, y = normal_rows()
    theirs = unbuilt()
    expected = theirs.fit(x, y, **FIT_48).history["loss"]
    ours = unbuilt()
    history = tfgpu.fit(ours, x, y, **FIT_48, strategy=local_strategy(2))
    assert ours.built and history.history["loss"] == pytest.approx(expected, rel=1e-5)
    for a, b in zip(ours.get_weights(), theirs.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert tfgpu.evaluate(ours, x, y, verbose=0) == pytest.approx(theirs.evaluate(x, y, verbose=0), rel=1e-5)


class Scale(keras.layers.Layer):
    """A custom layer as users write it: an __init__ argument and no get_config (cloning failed:
    "__init__() got an unexpected keyword argument")."""

    def __init__(self, k):
        super().__init__()
        self.k = k

    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1],), initializer="ones")

    def call(self, x):
        return x * self.w * self.k


def shifted(t):
    return t + 1.0


def mean_abs(y, p):  # a metric that is a Python function ("Could not locate function")
    return keras.ops.mean(keras.ops.abs(y - p), axis=-1)


def as_written():
    """Built at module level in real code: no scope, a custom layer, a Lambda over a Python
    function, a function loss and a function metric."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    h = keras.layers.Lambda(shifted)(Scale(2.0)(inputs))
    outputs = keras.layers.Dense(1)(keras.layers.Dense(3, activation="relu")(h))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=mean_squared, metrics=[mean_abs])
    return model


@pytest.mark.exercises(
    "model:functional",
    "model:outside_scope",
    "model:custom_layer",
    "model:lambda",
    "model:cloned",
    "loss:function",
    "program:optimizer",
    "inputs:arrays",
    "strategy:mirrored",
    source="tfgpu (as real code writes it)",
)
@pytest.mark.heavy
def test_a_model_cloning_cannot_recreate_trains_in_place_as_on_one_device(clean_choices):
    x, y = normal_rows()
    theirs = as_written()
    expected = theirs.fit(x, y, **FIT_48).history
    ours = as_written()
    history = tfgpu.fit(ours, x, y, **FIT_48, strategy=local_strategy(2))
    assert ours.history is history and set(history.history) == set(expected)
    for key, values in expected.items():
        assert history.history[key] == pytest.approx(values, rel=1e-5), key
    for a, b in zip(ours.get_weights(), theirs.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tfgpu.predict(ours, x), theirs.predict(x, verbose=0), rtol=1e-5, atol=1e-6)
    assert tfgpu.evaluate(ours, x, y, verbose=0) == pytest.approx(theirs.evaluate(x, y, verbose=0), rel=1e-5)


@pytest.mark.exercises(
    "model:sequential",
    "model:outside_scope",
    "model:cloned",
    "loss:string",
    "inputs:arrays",
    "strategy:mirrored",
    source="tfgpu",
)
@pytest.mark.model
def test_keras_variables_still_hold_what_rehoming_replaces(monkeypatch, clean_choices):
    """Fails loudly when a Keras release moves KerasVariable._value / _initialize; and if it has,
    a model cloning can copy is still cloned (the fallback), with a warning."""
    from tfgpu.train.model import rehoming

    rehoming.check_keras_variables()
    variable = keras.Variable(1.0)
    before = variable._value
    with local_strategy(2).scope():
        variable._initialize(tf.convert_to_tensor(variable._value))
    assert variable._value is not before and type(variable._value).__name__ == "MirroredVariable"

    def moved(*args, **kwargs):
        raise RuntimeError("Keras's variables no longer hold a tf.Variable")

    monkeypatch.setattr(rehoming, "check_keras_variables", moved)
    x, y = normal_rows()
    plain = small_regression("mse")
    tfgpu.fit(plain, x, y, **FIT_48, strategy=local_strategy(2))
    from tfgpu import choices

    assert "re-created" in choices.as_dict()["model"]["value"]


class NoCall(keras.Model):
    """keras-io semisupervised_simclr's shape: sub-models as Input-less ``Sequential``s, no
    ``call()``, built and trained only in the model's own ``train_step``."""

    def __init__(self):
        super().__init__()
        self.encoder = keras.Sequential([keras.layers.Dense(8, activation="relu"), keras.layers.Dense(4)])
        self.head = keras.Sequential([keras.layers.Dense(3)])

    def compile(self, optimizer, **kwargs):
        super().compile(**kwargs)
        self.own_optimizer = optimizer
        self.tracker = keras.metrics.Mean(name="loss")

    @property
    def metrics(self):
        return [self.tracker]

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            logits = self.head(self.encoder(x, training=True), training=True)
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))
        variables = self.encoder.trainable_weights + self.head.trainable_weights
        self.own_optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        self.tracker.update_state(loss)
        return {"loss": self.tracker.result()}


class AveragedNoCall(NoCall):
    """The same, its loss averaged over the global batch (``tf.nn.compute_average_loss``), as a
    step written for several replicas averages it."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            logits = self.head(self.encoder(x, training=True), training=True)
            per_example = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
            loss = tf.nn.compute_average_loss(per_example)
        variables = self.encoder.trainable_weights + self.head.trainable_weights
        self.own_optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        self.tracker.update_state(tf.reduce_mean(per_example))
        return {"loss": self.tracker.result()}


def _no_call_fit(api, strategy=None, made=NoCall, *, in_scope=False):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 5)).astype("float32"), rng.integers(0, 3, 64)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    keras.utils.set_random_seed(0)
    with strategy.scope() if in_scope else contextlib.nullcontext():
        model = made()
        model.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = (
        model.fit(dataset, epochs=2, verbose=0)
        if api == "keras"
        else tfgpu.fit(model, dataset, epochs=2, verbose=0, strategy=strategy)
    )
    return model.encoder.get_weights() + model.head.get_weights(), history.history


@pytest.mark.exercises(
    "step:train_step",
    "model:subclassed",
    "model:sequential",
    "model:unbuilt",
    "model:outside_scope",
    "model:in_scope",
    "program:optimizer",
    "metric:builtin",
    "inputs:dataset",
    "strategy:one",
    "strategy:mirrored",
    source="keras-io semisupervised_simclr shape",
)
@pytest.mark.heavy
def test_a_model_with_no_call_whose_step_builds_its_layers_trains_as_keras_on_one_device(clean_choices):
    """Issue 68 item 1: ``tfgpu.fit`` stopped with "Unable to automatically build the model" where
    Keras's ``fit`` trains it on one device (its first ``train_step`` makes the variables). A
    throwaway trace of the step builds them now, with the same initial weights: one device's
    weights and history exactly. On 2 replicas (where Keras's own ``fit`` fails: a variable
    made inside ``strategy.run``) the step is traced outside any scope and the model moved into
    the strategy's: a step that averages its loss over the global batch trains to one device's
    weights."""
    expected, keras_history = _no_call_fit("keras")
    weights, history = _no_call_fit("tfgpu", local_strategy(1))
    for a, b in zip(weights, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(history["loss"], keras_history["loss"], rtol=1e-6)
    expected, keras_history = _no_call_fit("keras", made=AveragedNoCall)
    for inside in (False, True):  # made outside any scope, and inside the strategy's
        weights, history = _no_call_fit("tfgpu", local_strategy(2), made=AveragedNoCall, in_scope=inside)
        for a, b in zip(weights, expected, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(history["loss"], keras_history["loss"], rtol=1e-5)


@pytest.mark.exercises(
    "model:sequential",
    "model:outside_scope",
    "program:optimizer",
    "loss:string",
    "inputs:arrays",
    "strategy:mirrored",
    source="tfgpu (imbalanced-data tutorial)",
)
@pytest.mark.heavy
def test_a_model_predicted_on_tfgpu_s_choice_then_fit_on_another_strategy_moves_in_place(
    caplog, clean_choices
):
    """A model from no scope is moved into tfgpu's strategy by ``tfgpu.predict`` (issue 67); a fit
    given another strategy then moves it again, in place: its variables are read outside the new
    scope (read inside it, the first strategy's variables failed with "Mixing different
    tf.distribute.Strategy objects", the model was cloned and its optimizer state could not come
    back: the imbalanced-data tutorial). It trains to one device's weights."""
    import logging

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(48, 4)).astype("float32"), rng.normal(size=(48, 1)).astype("float32")

    def made():
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(1)]
        )
        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
        return model

    model, twin = made(), made()
    tfgpu.predict(model, x, verbose=0)
    with caplog.at_level(logging.WARNING, logger="tfgpu"):
        tfgpu.fit(model, x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, strategy=local_strategy(2))
    twin.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    assert "cloning the model" not in caplog.text
    for a, b in zip(model.get_weights(), twin.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


OPTIMIZERS = {
    "adam": (lambda: keras.optimizers.Adam(0.01), {}),
    "rmsprop": (lambda: keras.optimizers.RMSprop(0.01), {}),
    # the parameter-server tutorial's compile
    "sgd-steps-per-execution": (lambda: keras.optimizers.SGD(0.01), {"steps_per_execution": 10}),
}


@pytest.mark.exercises(
    "model:sequential",
    "model:unbuilt",
    "model:in_scope",
    "program:optimizer",
    "loss:string",
    "inputs:arrays",
    "strategy:mirrored",
    source="tfgpu (issue 57 item 1; parameter-server tutorial's compile)",
)
@pytest.mark.heavy
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_an_unbuilt_model_compiled_in_the_scope_trains_as_one_device(optimizer, clean_choices):
    """Item 1: an ``Input``-less Sequential made and compiled in the scope, with an optimizer that
    keeps slot variables, failed with "colocate_vars_with" (it was built for the data outside
    the scope); with SGD and steps_per_execution=10, an AssertionError from Keras."""
    make, compile_kw = OPTIMIZERS[optimizer]
    x, y = linear_data(64, features=4)

    def model():
        keras.utils.set_random_seed(0)
        m = keras.Sequential([keras.layers.Dense(3), keras.layers.Dense(1)])
        m.compile(optimizer=make(), loss="mse", **compile_kw)
        return m

    reference = model()
    expected = reference.fit(x, y, **FIT_16).history["loss"]
    with local_strategy(2).scope():  # no strategy= given: the model's own, as the tutorial's fit
        ours = model()
    history = tfgpu.fit(ours, x, y, **FIT_16)
    assert history.history["loss"] == pytest.approx(expected, rel=1e-5)
    same(ours.get_weights(), reference.get_weights())


class RaisesWhenArmed(keras.layers.Layer):
    """A layer of the user's that raises once training starts (it builds as usual)."""

    armed = False

    def call(self, inputs):
        if RaisesWhenArmed.armed:
            raise ValueError("a bug in the user's layer")
        return inputs


@pytest.mark.exercises(
    "model:sequential",
    "model:custom_layer",
    "loss:string",
    "inputs:arrays",
    "strategy:mirrored",
    source="tfgpu (issue 57 item 2)",
)
@pytest.mark.model
def test_a_failure_building_the_model_names_its_real_cause(monkeypatch, clean_choices):
    """Item 2: every failure while the model was built on the data was said as a label shape
    ("Fix: give labels of the shape the loss expects"), whatever it was."""
    from tfgpu.errors import ConfigError

    x, y = linear_data(32, features=4)
    model = keras.Sequential([keras.Input((4,)), RaisesWhenArmed(), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    monkeypatch.setattr(RaisesWhenArmed, "armed", True)
    with pytest.raises(ConfigError) as raised:
        tfgpu.fit(model, x, y, verbose=0)
    text = str(raised.value)
    assert f"{__file__}:" in text and "a bug in the user's layer" in text
    assert "labels" not in text and "\x1b" not in text

    wide = keras.Sequential([keras.Input((5,)), keras.layers.Dense(1)])
    wide.compile(optimizer="adam", loss="mse")
    with pytest.raises(ConfigError, match="cannot take the data's inputs") as raised:
        tfgpu.fit(wide, x, y, verbose=0)
    assert "labels" not in str(raised.value)

    classes = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    classes.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    with pytest.raises(ConfigError, match="cannot take the data's labels") as raised:
        tfgpu.fit(classes, x, np.zeros((32, 2, 2), "float32"), verbose=0)
    assert "give labels of the shape the loss expects" in str(raised.value)


@pytest.mark.exercises(
    "model:preprocessing",
    "model:outside_scope",
    "model:cloned",
    "model:functional",
    "inputs:dataset",
    "inputs:text",
    "inputs:multi",
    "loss:string",
    "metric:builtin",
    "strategy:mirrored",
    source="Keras structured-data examples (small)",
)
@pytest.mark.heavy
def test_adapted_preprocessing_layers_outside_the_scope_as_keras():
    """The model is re-created in the strategy's scope: its adapted vocabularies (tables, not
    weights) and normalization constants come with it."""
    import tensorflow as tf

    from fit_models import adapted_model

    rng = np.random.default_rng(0)
    words = np.array(["cat", "dog", "eel", "fox"])[rng.integers(0, 4, 256)]
    numbers = rng.normal(loc=3.0, size=(256, 1)).astype("float32")
    texts = np.array([" ".join(rng.choice(["red", "blue", "big", "small", "dog"], 4)) for _ in range(256)])
    y = ((words == "dog") | (numbers[:, 0] > 3.5)).astype("float32")

    def data():
        return tf.data.Dataset.from_tensor_slices(((words[:, None], numbers, texts[:, None]), y)).batch(32)

    expected = adapted_model(words, numbers, texts)
    keras_history = expected.fit(data(), epochs=2, verbose=0).history
    model = adapted_model(words, numbers, texts)
    history = tfgpu.fit(model, data(), epochs=2, verbose=0, strategy=local_strategy(2))
    same(history.history, keras_history)
    same(model.get_weights(), expected.get_weights())
    assert tfgpu.evaluate(model, data(), verbose=0, strategy=local_strategy(2)) == pytest.approx(
        expected.evaluate(data(), verbose=0), rel=1e-5
    )

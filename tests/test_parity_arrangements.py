"""Arrangements drawn, not chosen: Hypothesis draws how the model is
made (a Sequential with and without ``Input``, functional, subclassed, a custom layer without
``get_config``, a ``Lambda``, an ``Embedding`` (sparse gradients), a model stepping two optimizers
of its own in a custom ``train_step``, a model with no ``call()`` whose ``train_step`` builds its
Input-less sub-models, a model whose own ``predict`` post-processes), where it is made and compiled (inside the strategy's
scope, at module level, or made outside and compiled inside), the optimizer (SGD, with momentum,
Adam, RMSprop: slot variables are where an unbuilt model compiled in the scope failed), its loss
(a name, an object, a per-example function, a function returning one number), the input (arrays,
a ``tf.data.Dataset`` from tensors, one that reads a TFRecord file, a ``padded_batch`` of a text
file's lines of 1-4 values: to each batch's longest for the Embedding, whose shape then changes
from step to step), the rows (leaving a short last
batch) and 1-3 replicas, with a callback acting on every batch; each drawn case is compared with
Keras's own ``fit``, ``evaluate`` and ``predict`` on one device: weights, history, the batch
calls, the evaluation and the predictions (the model's own ``predict`` where it has one). A model made under another strategy than the one passed fails before training, with
one message naming that cause and the fix.

A short last batch trains as on one device, however it splits over the replicas: arrays drop
only a remainder with fewer rows than replicas (docs/from-model-fit.md), so Keras's reference fits
the rows kept; a Dataset's last batch is trained as it comes, a replica left without rows
included. Profiles: ``fast`` (the default, 5 cases, drawn afresh each run)
and ``ci`` (``HYPOTHESIS_PROFILE=ci``, which ``make test`` sets: 20 cases, the same each run).
Every case it ever fails on is kept as an ``@example``.


Each test is an example of ``support.examples`` (its marker: its source, what it exercises),
run with Keras's methods and tfgpu's and compared under ``support/parity.py``'s rules.
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
from support.replicas import local_strategy
from tfgpu.errors import ConfigError

settings.register_profile(
    "fast",
    max_examples=5,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


settings.register_profile(
    "ci",
    max_examples=20,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))


PER_REPLICA = 4


BUILDS = (
    "sequential",
    "sequential-unbuilt",
    "functional",
    "subclassed",
    "custom-layer",
    "lambda",
    "embedding",
    "two-optimizers",
    "no-call",
    "own-predict",
)


LOSSES = ("name", "object", "per-example", "one-number")


INPUTS = ("arrays", "dataset", "file", "padded-file")


OPTIMIZERS = ("sgd", "momentum", "adam", "rmsprop")


WHERE = ("outside", "inside", "compiled-inside", "another-strategy")


VOCABULARY = 12


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


class TwoOptimizers(keras.Model):
    """keras-io's GANs' shape: two parts, each stepped by an optimizer of its own that ``compile``
    keeps as an attribute; the loss is the compiled one (``compute_loss``), the tracker fed the
    per-example squares so that the logged figure is one device's on any replicas."""

    def __init__(self):
        super().__init__()
        self.encoder = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        self.head = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        self.tracker = keras.metrics.Mean(name="loss")

    def call(self, inputs):
        return self.head(self.encoder(inputs))

    def compile(self, *, optimizer, loss):
        super().compile(loss=loss)
        self.encoder_optimizer, self.head_optimizer = optimizer(), optimizer()

    @property
    def metrics(self):
        return [self.tracker]

    def _apply(self, part, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
        grads = tape.gradient(loss, part.trainable_weights)
        optimizer.apply_gradients(zip(grads, part.trainable_weights, strict=True))

    def train_step(self, data):
        x, y = data
        self._apply(self.encoder, self.encoder_optimizer, x, y)
        self._apply(self.head, self.head_optimizer, x, y)
        self.tracker.update_state(keras.ops.square(y - self(x)))
        return {"loss": self.tracker.result()}

    def test_step(self, data):
        x, y = data
        self.tracker.update_state(keras.ops.square(y - self(x)))
        return {"loss": self.tracker.result()}


class NoCall(keras.Model):
    """keras-io's semisupervised_simclr's shape: sub-models as ``Sequential``s without an
    ``Input``, no ``call()``, built by the first ``train_step``, which steps the compiled optimizer
    on the compiled loss (``compute_loss``); the tracker is fed the per-example squares."""

    def __init__(self):
        super().__init__()
        self.encoder = keras.Sequential([keras.layers.Dense(3)])
        self.head = keras.Sequential([keras.layers.Dense(1)])
        self.tracker = keras.metrics.Mean(name="loss")

    @property
    def metrics(self):
        return [self.tracker]

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self.head(self.encoder(x, training=True), training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
        variables = self.encoder.trainable_weights + self.head.trainable_weights
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        self.tracker.update_state(keras.ops.square(y - self.head(self.encoder(x))))
        return {"loss": self.tracker.result()}

    def test_step(self, data):
        x, y = data
        self.tracker.update_state(keras.ops.square(y - self.head(self.encoder(x))))
        return {"loss": self.tracker.result()}


class OwnPredict(keras.Model):
    """A functional model whose own ``predict`` post-processes (keras-io's end-to-end export
    model's shape): ``tfgpu.predict`` must give what ``model.predict`` gives."""

    def predict(self, x, **kwargs):
        return 100.0 * super().predict(x, **kwargs) + 1.0


def build(kind: str):
    keras.utils.set_random_seed(0)
    if kind == "sequential":
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
    if kind == "sequential-unbuilt":
        return keras.Sequential([keras.layers.Dense(3), keras.layers.Dense(1)])
    if kind == "subclassed":
        return Subclassed()
    if kind == "two-optimizers":
        return TwoOptimizers()
    if kind == "no-call":
        return NoCall()
    if kind == "embedding":  # any length: a padded batch's is its longest row's
        inputs = keras.Input((None,), dtype="int32")
        hidden = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(VOCABULARY, 2)(inputs))
        return keras.Model(inputs, keras.layers.Dense(1)(hidden))
    if kind == "own-predict":
        inputs = keras.Input((4,))
        return OwnPredict(inputs, keras.layers.Dense(1)(keras.layers.Dense(3)(inputs)))
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


def optimizer_of(kind: str):
    return {
        "sgd": lambda: keras.optimizers.SGD(0.05),
        "momentum": lambda: keras.optimizers.SGD(0.05, momentum=0.9),
        "adam": lambda: keras.optimizers.Adam(0.01),
        "rmsprop": lambda: keras.optimizers.RMSprop(0.01),
    }[kind]


class BatchCalls(keras.callbacks.Callback):
    """Acts on every batch, as users' loss-history callbacks do."""

    def on_train_begin(self, logs=None):
        self.calls = []

    def on_train_batch_end(self, batch, logs=None):
        self.calls.append((batch, round(float(logs["loss"]), 5)))


def features(kind: str, rows: int):
    rng = np.random.default_rng(rows)
    x = rng.normal(size=(rows, 4)).astype("float32")
    if kind == "embedding":
        x = rng.integers(0, VOCABULARY, size=(rows, 4)).astype("int32")
    return x, rng.normal(size=(rows, 1)).astype("float32")


def tfrecord(x, y, path):
    """The rows as tf.train.Examples in one TFRecord file, and a Dataset that parses them back in
    order, as TensorFlow's TFRecord guide writes it."""
    with tf.io.TFRecordWriter(str(path)) as writer:
        for row, label in zip(x, y, strict=True):
            values = tf.train.Feature(float_list=tf.train.FloatList(value=row.astype("float32").tolist()))
            target = tf.train.Feature(float_list=tf.train.FloatList(value=label.tolist()))
            example = tf.train.Example(features=tf.train.Features(feature={"x": values, "y": target}))
            writer.write(example.SerializeToString())
    spec = {"x": tf.io.FixedLenFeature([4], tf.float32), "y": tf.io.FixedLenFeature([1], tf.float32)}

    def parse(record):
        parsed = tf.io.parse_single_example(record, spec)
        return tf.cast(parsed["x"], x.dtype), parsed["y"]

    return tf.data.TFRecordDataset(str(path)).map(parse)


def padded_lines(x, y, path, *, global_batch: int, longest: bool):
    """The rows as a text file's lines, row i keeping its first 1 + i % 4 values, read back and
    ``padded_batch``-ed with zeros (keras-io's NER input's shape): to 4 values, or, ``longest``,
    to each batch's longest row (the Embedding's batches then change shape from step to step)."""
    with open(path, "w") as handle:
        for i, (row, label) in enumerate(zip(x, y, strict=True)):
            handle.write(",".join(f"{v:.6f}" for v in (*label, *row[: 1 + i % 4])) + "\n")

    def parse(line):
        values = tf.strings.to_number(tf.strings.split(line, ","))
        return tf.cast(values[1:], x.dtype), values[:1]

    shapes = ([None] if longest else [4], [1])
    return tf.data.TextLineDataset(str(path)).map(parse).padded_batch(global_batch, padded_shapes=shapes)


def data(case, global_batch: int, path):
    """(what tfgpu is given, what Keras's reference is given: arrays it batches, or a Dataset)."""
    x, y = features(case["build"], case["rows"])
    if case["input"] == "arrays":
        short = case["rows"] % global_batch
        kept = (
            case["rows"] - short if short < case["replicas"] else case["rows"]
        )  # fewer than replicas: dropped
        return (x, y), (x[:kept], y[:kept])
    if case["input"] == "padded-file":
        given = padded_lines(x, y, path, global_batch=global_batch, longest=case["build"] == "embedding")
        # Keras's reference reads the same batches, their number told (see "file" below)
        return (given,), (
            given.apply(tf.data.experimental.assert_cardinality(-(-case["rows"] // global_batch))),
        )
    tensors = (tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch),)
    if case["input"] == "file":
        # Keras's reference reads the same batches from tensors: its own fit on a Dataset of
        # unknown length (a file's) steps the optimizer once more an epoch (Keras 3.15: 14
        # iterations for 12 batches, Adam's bias correction then off by 1e-3)
        return (tfrecord(x, y, path).batch(global_batch),), tensors
    return tensors, tensors


def compile_kwargs(model, case):
    if isinstance(model, TwoOptimizers):
        return {"optimizer": optimizer_of(case["optimizer"]), "loss": loss_of(case["loss"])}
    return {"optimizer": optimizer_of(case["optimizer"])(), "loss": loss_of(case["loss"])}


def made(case, strategy):
    """The model made and compiled where the case says."""
    import contextlib

    where = case["where"]
    scope = strategy.scope() if where in ("inside", "compiled-inside") else contextlib.nullcontext()
    with strategy.scope() if where == "inside" else contextlib.nullcontext():
        model = build(case["build"])
    with scope:
        model.compile(**compile_kwargs(model, case))
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
        "where": draw(st.sampled_from(WHERE)),
        "optimizer": draw(st.sampled_from(OPTIMIZERS)),
        "loss": draw(st.sampled_from(LOSSES)),
    }


def run(case, path):
    global_batch = PER_REPLICA * case["replicas"]
    given_data, whole = data(case, global_batch, path)
    reference = build(case["build"])
    reference.compile(**compile_kwargs(reference, case))
    keras_calls = BatchCalls()
    if case["input"] != "arrays":
        keras_history = reference.fit(*whole, epochs=2, verbose=0, callbacks=[keras_calls])
        keras_eval = reference.evaluate(*whole, verbose=0, return_dict=True)
    else:
        keras_history = reference.fit(
            *whole, batch_size=global_batch, epochs=2, shuffle=False, verbose=0, callbacks=[keras_calls]
        )
        keras_eval = reference.evaluate(*whole, batch_size=global_batch, verbose=0, return_dict=True)
    strategy = local_strategy(case["replicas"])
    if case["where"] == "another-strategy":  # made in one strategy's scope, passed another
        with local_strategy(1 if case["replicas"] > 1 else 2).scope():
            model = build(case["build"])
            model.compile(**compile_kwargs(model, case))
        with pytest.raises(ConfigError, match="was created in the scope of a") as refused:
            tfgpu.fit(model, *given_data, epochs=1, verbose=0, strategy=strategy)
        assert "pass the strategy the model was created under" in str(refused.value)
        return
    model = made(case, strategy)
    calls = BatchCalls()
    fit = dict(epochs=2, verbose=0, callbacks=[calls], strategy=strategy)
    if case["input"] != "arrays":
        history = tfgpu.fit(model, *given_data, **fit)
        ours = tfgpu.evaluate(model, *given_data, verbose=0, return_dict=True)
    else:
        history = tfgpu.fit(model, *given_data, batch_size=global_batch, shuffle=False, **fit)
        ours = tfgpu.evaluate(model, *whole, batch_size=global_batch, verbose=0, return_dict=True)
    assert history.history["loss"] == pytest.approx(keras_history.history["loss"], rel=1e-5), case
    for mine, theirs in zip(model.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6, err_msg=str(case))
    assert [b for b, _ in calls.calls] == [b for b, _ in keras_calls.calls], case
    assert [v for _, v in calls.calls] == pytest.approx([v for _, v in keras_calls.calls], rel=1e-4), case
    # a Mean over batch means (the two-optimizer tracker) weighs a short batch by the batches
    # of each replica, as the code asks; a row-weighted figure agrees exactly
    tracker_of_batches = case["build"] == "two-optimizers" and case["replicas"] > 1
    if not tracker_of_batches:
        assert ours == pytest.approx(keras_eval, rel=1e-5), case
    if case["build"] != "no-call":  # no call(): Keras's predict cannot run it either
        x = features(case["build"], case["rows"])[0]
        np.testing.assert_allclose(
            tfgpu.predict(model, x, batch_size=global_batch, verbose=0),
            reference.predict(x, batch_size=global_batch, verbose=0),
            rtol=1e-5,
            atol=1e-6,
            err_msg=str(case),
        )


@pytest.mark.exercises(
    "model:sequential",
    "model:unbuilt",
    "model:functional",
    "model:subclassed",
    "model:custom_layer",
    "model:lambda",
    "model:outside_scope",
    "model:in_scope",
    "step:train_step",
    "step:test_step",
    "step:compute_loss",
    "loss:string",
    "loss:object",
    "loss:function",
    "metric:builtin",
    "inputs:arrays",
    "inputs:dataset",
    "inputs:files",
    "inputs:text",
    "inputs:short_batch",
    "callbacks:custom",
    "program:optimizer",
    "strategy:one",
    "strategy:mirrored",
    source="tfgpu",
)
@pytest.mark.heavy
@given(case=arrangements())
@example(  # a short last batch of arrays cut 2, 2, 3 over the replicas
    case={
        "replicas": 3,
        "input": "arrays",
        "rows": 19,
        "build": "custom-layer",
        "where": "outside",
        "optimizer": "sgd",
        "loss": "one-number",
    }
)
@example(  # a Dataset's last batch of 1 row on 2 replicas: one replica has none
    case={
        "replicas": 2,
        "input": "dataset",
        "rows": 9,
        "build": "functional",
        "where": "outside",
        "optimizer": "sgd",
        "loss": "one-number",
    }
)
@example(
    case={
        "replicas": 2,
        "input": "arrays",
        "rows": 9,
        "build": "sequential-unbuilt",
        "where": "outside",
        "optimizer": "sgd",
        "loss": "one-number",
    }
)
@example(
    case={
        "replicas": 3,
        "input": "dataset",
        "rows": 15,
        "build": "lambda",
        "where": "outside",
        "optimizer": "sgd",
        "loss": "per-example",
    }
)
@example(
    case={
        "replicas": 2,
        "input": "dataset",
        "rows": 11,
        "build": "functional",
        "where": "inside",
        "optimizer": "sgd",
        "loss": "name",
    }
)
@example(  # issue 57 item 1: unbuilt, made and compiled in the scope, an optimizer with slots
    case={
        "replicas": 2,
        "input": "arrays",
        "rows": 16,
        "build": "sequential-unbuilt",
        "where": "inside",
        "optimizer": "adam",
        "loss": "name",
    }
)
@example(  # items 3 and 4: two optimizers of the model's own, made outside any scope
    case={
        "replicas": 2,
        "input": "arrays",
        "rows": 16,
        "build": "two-optimizers",
        "where": "outside",
        "optimizer": "rmsprop",
        "loss": "object",
    }
)
@example(  # item 6: sparse gradients and a short last batch read from a file
    case={
        "replicas": 3,
        "input": "file",
        "rows": 29,
        "build": "embedding",
        "where": "compiled-inside",
        "optimizer": "adam",
        "loss": "per-example",
    }
)
@example(  # issue 68 item 1: no call(), its Input-less sub-models built by its step, 2 replicas
    case={
        "replicas": 2,
        "input": "dataset",
        "rows": 13,
        "build": "no-call",
        "where": "outside",
        "optimizer": "adam",
        "loss": "per-example",
    }
)
@example(  # item 3: a padded text file, its batches' shape changing, sparse gradients
    case={
        "replicas": 2,
        "input": "padded-file",
        "rows": 21,
        "build": "embedding",
        "where": "inside",
        "optimizer": "adam",
        "loss": "name",
    }
)
@example(  # item 2: the model's own predict, a padded file's short last batch on 3 replicas
    case={
        "replicas": 3,
        "input": "padded-file",
        "rows": 26,
        "build": "own-predict",
        "where": "compiled-inside",
        "optimizer": "momentum",
        "loss": "object",
    }
)
def test_a_drawn_arrangement_trains_as_keras_on_one_device(case, tmp_path, clean_choices):
    import uuid

    run(case, tmp_path / f"{uuid.uuid4().hex}.tfrecord")

"""Models and data for the tfgpu.fit tests, compared with Keras's own fit on one device."""

from __future__ import annotations

from typing import Any

import numpy as np

ROWS = 960  # 768 training rows after validation_split=0.2: 16 batches of 48


def linear_data(rows: int, *, features: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Normal features and a linear target: the small regression most comparisons train (their
    weights are compared, so the rows, features and seed are theirs)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)).astype("float32")
    return x, (x @ rng.normal(size=(features, 1))).astype("float32")


def binary_data(rows: int = ROWS) -> tuple[np.ndarray, np.ndarray]:
    """The most common classifier's data: labels of shape (N,), a sigmoid output of shape (N, 1)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 8)).astype("float32")
    noise = rng.normal(scale=0.7, size=rows)
    y = (x[:, :4].sum(1) + noise > 0).astype("float32")
    return x, y


def binary_model(*, lr: float = 0.01, steps_per_execution: int = 1, metrics: Any = None) -> Any:
    import keras

    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(
                16,
                activation="relu",
                kernel_initializer=keras.initializers.GlorotUniform(seed=1),
                kernel_regularizer=keras.regularizers.l2(1e-3),
            ),
            keras.layers.Dense(
                1, activation="sigmoid", kernel_initializer=keras.initializers.GlorotUniform(seed=2)
            ),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(lr),
        loss="binary_crossentropy",
        metrics=metrics
        if metrics is not None
        else ["accuracy", keras.metrics.AUC(name="auc"), keras.metrics.Precision(name="precision")],
        steps_per_execution=steps_per_execution,
    )
    return model


def two_output_data(rows: int = ROWS) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(rows, 6)).astype("float32")
    kind = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 0).astype("int64")
    size = (x[:, 2] * 0.5 + x[:, 3]).astype("float32")[:, None]
    return x, {"kind": kind, "size": size}


def two_output_model() -> Any:
    import keras

    inputs = keras.Input((6,))
    hidden = keras.layers.Dense(
        16, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=3)
    )(inputs)
    kind = keras.layers.Dense(
        3, activation="softmax", name="kind", kernel_initializer=keras.initializers.GlorotUniform(seed=4)
    )(hidden)
    size = keras.layers.Dense(1, name="size", kernel_initializer=keras.initializers.GlorotUniform(seed=5))(
        hidden
    )
    model = keras.Model(inputs, {"kind": kind, "size": size})
    model.compile(
        optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
        loss={"kind": "sparse_categorical_crossentropy", "size": "huber"},
        loss_weights={"kind": 1.0, "size": 0.5},
        metrics={"kind": ["accuracy"], "size": ["mae"]},
    )
    return model


def custom_step_model() -> Any:
    """A model whose train_step the user wrote (Keras's "customizing fit" guide, with a twist)."""
    import keras
    import tensorflow as tf

    class Custom(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.hidden = keras.layers.Dense(
                16, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=1)
            )
            self.out = keras.layers.Dense(
                1, activation="sigmoid", kernel_initializer=keras.initializers.GlorotUniform(seed=2)
            )

        def call(self, x: Any) -> Any:
            return self.out(self.hidden(x))

        def train_step(self, data: Any) -> Any:
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                # the twist: the loss counted twice, so a loop that ignored this step would differ
                loss = 2.0 * self.compute_loss(x=x, y=y, y_pred=y_pred)
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables, strict=True))
            return self.logged(loss, y, y_pred)

        def test_step(self, data: Any) -> Any:
            x, y = data
            y_pred = self(x, training=False)
            loss = 3.0 * self.compute_loss(x=x, y=y, y_pred=y_pred)  # a twist here too
            return self.logged(loss, y, y_pred)

        def logged(self, loss: Any, y: Any, y_pred: Any) -> Any:
            for metric in self.metrics:
                if metric.name == "loss":
                    metric.update_state(loss)
                else:
                    metric.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}

    model = Custom()
    model(np.zeros((1, 8), "float32"))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy", metrics=["accuracy"])
    return model


def images(rows: int = 96) -> tuple[np.ndarray, np.ndarray]:
    """Small images with a learnable pattern per class (a brighter quadrant)."""
    rng = np.random.default_rng(2)
    y = rng.integers(0, 4, size=rows)
    x = rng.normal(scale=0.3, size=(rows, 32, 32, 3)).astype("float32")
    for i, label in enumerate(y):
        r, c = divmod(int(label), 2)
        x[i, r * 16 : (r + 1) * 16, c * 16 : (c + 1) * 16] += 1.0
    return x, y


def mobilenet() -> Any:
    import keras

    keras.utils.set_random_seed(0)  # its layers' initializers are not seeded
    model = keras.applications.MobileNetV2(input_shape=(32, 32, 3), alpha=0.35, weights=None, classes=4)
    # a gentle rate: batch-norm statistics are per replica (8 images each on 2), and at 0.02 with
    # momentum the two runs' second epochs went apart (2.57 vs 1.21) although their first agreed
    model.compile(
        optimizer=keras.optimizers.SGD(0.005, momentum=0.9),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def padded_text(rows: int = 256, length: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """Token ids padded with 0 to ``length``; the label: token 7 occurs in the sequence."""
    rng = np.random.default_rng(3)
    x = np.zeros((rows, length), "int32")
    for i, size in enumerate(rng.integers(3, length + 1, size=rows)):
        x[i, :size] = rng.integers(1, 50, size=size)
    return x, (x == 7).any(axis=1).astype("float32")


def text_model() -> Any:
    import keras

    model = keras.Sequential(
        [
            keras.Input((20,), dtype="int32"),
            keras.layers.Embedding(
                50, 16, mask_zero=True, embeddings_initializer=keras.initializers.RandomUniform(seed=6)
            ),
            keras.layers.LSTM(
                16,
                kernel_initializer=keras.initializers.GlorotUniform(seed=7),
                recurrent_initializer=keras.initializers.Orthogonal(seed=8),
            ),
            keras.layers.Dense(
                1, activation="sigmoid", kernel_initializer=keras.initializers.GlorotUniform(seed=9)
            ),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy", metrics=["accuracy"])
    return model


def transfer_model(*, frozen: bool = True) -> tuple[Any, Any]:
    """Keras's transfer-learning guide in small: a base model, frozen, under a new head.

    Returns (model, base): the guide unfreezes ``base`` and compiles ``model`` again.
    """
    import keras

    base = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(
                16, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=3)
            ),
            keras.layers.Dense(5, kernel_initializer=keras.initializers.GlorotUniform(seed=4)),
        ],
        name="base",
    )
    base.trainable = not frozen
    inputs = keras.Input((8,))
    outputs = keras.layers.Dense(
        1, activation="sigmoid", kernel_initializer=keras.initializers.GlorotUniform(seed=5)
    )(base(inputs, training=False))
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy", metrics=["binary_accuracy"]
    )
    return model, base


def grad_norm_model() -> Any:
    """A custom train_step that returns logs of its own (the loss and the gradient's norm), not
    the model's metrics, and a test_step that adds one: Keras reports exactly what they return."""
    import keras
    import tensorflow as tf

    class GradNorm(keras.Sequential):
        def train_step(self, data: Any) -> Any:
            x, y = data
            with tf.GradientTape() as tape:
                loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables, strict=True))
            return {"loss": loss, "grad_norm": tf.linalg.global_norm(grads)}

        def test_step(self, data: Any) -> Any:
            x, y = data
            y_pred = self(x, training=False)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
            return {"loss": loss, "mean_prediction": tf.reduce_mean(y_pred)}

    model = GradNorm(
        [
            keras.Input((8,)),
            keras.layers.Dense(
                4, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=1)
            ),
            keras.layers.Dense(
                1, activation="sigmoid", kernel_initializer=keras.initializers.GlorotUniform(seed=2)
            ),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="binary_crossentropy")
    return model


def two_in_two_out() -> Any:
    """The functional API guide's shape in small: two inputs, two outputs, a loss for each."""
    import keras

    init = keras.initializers.GlorotUniform
    a, b = keras.Input((6,), name="a"), keras.Input((4,), name="b")
    joined = keras.layers.concatenate([keras.layers.Dense(8, kernel_initializer=init(seed=1))(a), b])
    score = keras.layers.Dense(1, name="score", kernel_initializer=init(seed=2))(joined)
    kind = keras.layers.Dense(3, activation="softmax", name="kind", kernel_initializer=init(seed=3))(joined)
    model = keras.Model([a, b], [score, kind])
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss=["mse", "sparse_categorical_crossentropy"],
        loss_weights=[1.0, 0.5],
        metrics=[["mae"], ["accuracy"]],
    )
    return model


def endpoint_model() -> Any:
    """ "Training with built-in methods": a LogisticEndpoint layer adds its own loss; fit(x) alone."""
    import keras

    class LogisticEndpoint(keras.layers.Layer):
        def __init__(self, name: str | None = None) -> None:
            super().__init__(name=name)
            self.loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)

        def call(self, targets: Any, logits: Any, sample_weights: Any = None) -> Any:
            self.add_loss(self.loss_fn(targets, logits, sample_weights))
            return keras.ops.softmax(logits)

    inputs = keras.Input((3,), name="inputs")
    targets = keras.Input((10,), name="targets")
    logits = keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(seed=4))(inputs)
    predictions = LogisticEndpoint(name="predictions")(targets, logits)
    model = keras.Model(inputs=[inputs, targets], outputs=predictions)
    model.compile(optimizer=keras.optimizers.Adam(0.01))  # no loss
    return model


def adapted_model(words: Any, numbers: Any, texts: Any) -> Any:
    """Keras's structured-data examples in small: StringLookup, Normalization and a tf-idf
    TextVectorization adapted to the data, then the model built around them (outside any scope)."""
    import keras

    keras.utils.set_random_seed(0)
    lookup = keras.layers.StringLookup(output_mode="one_hot")
    lookup.adapt(words)
    norm = keras.layers.Normalization()
    norm.adapt(numbers)
    vectorize = keras.layers.TextVectorization(max_tokens=20, output_mode="tf_idf")
    vectorize.adapt(texts)
    word = keras.Input((1,), dtype="string", name="word")
    number = keras.Input((1,), name="number")
    text = keras.Input((1,), dtype="string", name="text")
    joined = keras.layers.concatenate(
        [keras.layers.Flatten()(lookup(word)), norm(number), keras.layers.Flatten()(vectorize(text))]
    )
    out = keras.layers.Dense(
        1, activation="sigmoid", kernel_initializer=keras.initializers.GlorotUniform(seed=1)
    )(joined)
    model = keras.Model([word, number, text], out)
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    return model


# gradient accumulation (tests/test_accumulation.py, and its workers in bodies.py)
ACCUMULATING_OPTIMIZERS = {  # name -> (Keras optimizer class, its arguments)
    "sgd-momentum": ("SGD", {"learning_rate": 0.05, "momentum": 0.9, "gradient_accumulation_steps": 3}),
    "adamw-clipnorm": (
        "AdamW",
        {"learning_rate": 0.01, "weight_decay": 0.05, "clipnorm": 0.5, "gradient_accumulation_steps": 2},
    ),
}


def accumulating_model(optimizer: str) -> Any:
    """An MLP of 8 features compiled with one of ``ACCUMULATING_OPTIMIZERS``, seeded."""
    import keras

    kind, arguments = ACCUMULATING_OPTIMIZERS[optimizer]
    keras.utils.set_random_seed(0)
    built = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    built.compile(optimizer=getattr(keras.optimizers, kind)(**arguments), loss="mse", metrics=["mae"])
    return built


def deep_dense_model() -> Any:
    """Four Dense layers of 8 features, SGD with momentum, seeded: split over devices
    (tests/test_split.py) and rematerialized (tests/test_remat.py)."""
    import keras

    keras.utils.set_random_seed(0)
    built = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(16, activation="tanh"),
            keras.layers.Dense(1),
        ]
    )
    built.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse", metrics=["mae"])
    return built


# -- the small regressions the program and parity tests train, and their fits ---------------------
# 2 epochs of batches in order, silent (FIT_48, FIT_16), or batches of 48 in order for any epochs
FIT_48 = dict(batch_size=48, epochs=2, shuffle=False, verbose=0)
FIT_16 = dict(batch_size=16, epochs=2, shuffle=False, verbose=0)
IN_ORDER_48 = dict(batch_size=48, shuffle=False, verbose=0)


def mean_squared(y: Any, p: Any) -> Any:
    """A loss that returns one number for the batch (keras-io's contrastive loss ends so)."""
    import keras

    return keras.ops.mean(keras.ops.square(y - p))


def normal_rows(rows: int = 288) -> tuple[np.ndarray, np.ndarray]:
    """Four normal features and an unrelated normal target: a regression with nothing to learn
    but its noise (the figures are compared, not the fit's quality)."""
    rng = np.random.default_rng(0)
    return rng.normal(size=(rows, 4)).astype("float32"), rng.normal(size=(rows, 1)).astype("float32")


def small_regression(loss: Any = mean_squared) -> Any:
    """Dense(4) -> Dense(1) under SGD(0.1), seeded: the smallest model a loss can be told by."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss)
    return model

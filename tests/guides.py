"""The definitions of Keras's and TensorFlow's own guides and examples, as they write them, for
the ``test_parity_*`` files (support.examples): shrunk (fewer rows, smaller layers) and fed synthetic data of the same shapes
and dtypes (no downloads). Each block names the guide it comes from; where a line differs from
the guide beyond size, a comment says so.
"""

from __future__ import annotations

import re
import string

import keras
import numpy as np
import tensorflow as tf
from keras import layers, ops

RNG_SEED = 7


def rng(offset: int = 0) -> np.random.Generator:
    return np.random.default_rng(RNG_SEED + offset)


# -- keras-io guides/training_with_built_in_methods.py (Keras 3 version) -----------------------------
def mnist_vectors(train: int = 320, val: int = 64, test: int = 64):
    """The guide's MNIST arrays: (x_train, y_train), (x_val, y_val), (x_test, y_test), float32,
    x of 784 values in [0, 1], y class ids 0-9 as float32 (as the guide casts them)."""
    r = rng(1)
    rows = train + val + test
    y = r.integers(0, 10, size=rows)
    x = r.random((rows, 784)).astype("float32") * 0.5
    for i, label in enumerate(y):  # a learnable pattern: a brighter band per class
        x[i, label * 78 : (label + 1) * 78] += 0.5
    y = y.astype("float32")
    return (
        (x[:train], y[:train]),
        (x[train : train + val], y[train : train + val]),
        (x[train + val :], y[train + val :]),
    )


def get_uncompiled_model():
    inputs = keras.Input(shape=(784,), name="digits")
    x = layers.Dense(64, activation="relu", name="dense_1")(inputs)
    x = layers.Dense(64, activation="relu", name="dense_2")(x)
    outputs = layers.Dense(10, activation="softmax", name="predictions")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    return model


def get_compiled_model():
    model = get_uncompiled_model()
    model.compile(
        optimizer="rmsprop",
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
    )
    return model


def custom_mean_squared_error(y_true, y_pred):
    return ops.mean(ops.square(y_true - y_pred), axis=-1)


class CustomMSE(keras.losses.Loss):
    def __init__(self, regularization_factor=0.1, name="custom_mse"):
        super().__init__(name=name)
        self.regularization_factor = regularization_factor

    def call(self, y_true, y_pred):
        mse = ops.mean(ops.square(y_true - y_pred), axis=-1)
        reg = ops.mean(ops.square(0.5 - y_pred), axis=-1)
        return mse + reg * self.regularization_factor


class CategoricalTruePositives(keras.metrics.Metric):
    def __init__(self, name="categorical_true_positives", **kwargs):
        super().__init__(name=name, **kwargs)
        self.true_positives = self.add_variable(shape=(), name="ctp", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = ops.reshape(ops.argmax(y_pred, axis=1), (-1, 1))
        values = ops.cast(y_true, "int32") == ops.cast(y_pred, "int32")
        values = ops.cast(values, "float32")
        if sample_weight is not None:
            sample_weight = ops.cast(sample_weight, "float32")
            values = ops.multiply(values, sample_weight)
        self.true_positives.assign_add(ops.sum(values))

    def result(self):
        return self.true_positives

    def reset_state(self):
        # The state of the metric will be reset at the start of each epoch.
        self.true_positives.assign(0.0)


class ActivityRegularizationLayer(layers.Layer):
    def call(self, inputs):
        self.add_loss(ops.sum(inputs) * 0.1)
        return inputs  # Pass-through layer.


def activity_regularized_model():
    inputs = keras.Input(shape=(784,), name="digits")
    x = layers.Dense(64, activation="relu", name="dense_1")(inputs)

    # Insert activity regularization as a layer
    x = ActivityRegularizationLayer()(x)

    x = layers.Dense(64, activation="relu", name="dense_2")(x)
    outputs = layers.Dense(10, name="predictions")(x)

    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


class LogisticEndpoint(keras.layers.Layer):
    def __init__(self, name=None):
        super().__init__(name=name)
        self.loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)

    def call(self, targets, logits, sample_weights=None):
        # Compute the training-time loss value and add it
        # to the layer using `self.add_loss()`.
        loss = self.loss_fn(targets, logits, sample_weights)
        self.add_loss(loss)

        # Return the inference-time prediction tensor (for `.predict()`).
        return ops.softmax(logits)


def endpoint_model():
    inputs = keras.Input(shape=(3,), name="inputs")
    targets = keras.Input(shape=(10,), name="targets")
    logits = keras.layers.Dense(10)(inputs)
    predictions = LogisticEndpoint(name="predictions")(targets, logits)

    model = keras.Model(inputs=[inputs, targets], outputs=predictions)
    model.compile(optimizer="adam")  # No loss argument!
    return model


class ExamplePyDataset(keras.utils.PyDataset):
    def __init__(self, x, y, batch_size, **kwargs):
        super().__init__(**kwargs)
        self.x = x
        self.y = y
        self.batch_size = batch_size

    def __len__(self):
        return int(np.ceil(len(self.x) / float(self.batch_size)))

    def __getitem__(self, idx):
        batch_x = self.x[idx * self.batch_size : (idx + 1) * self.batch_size]
        batch_y = self.y[idx * self.batch_size : (idx + 1) * self.batch_size]
        return batch_x, batch_y


def image_and_timeseries_model():
    """The guide's multi-input, multi-output model, compiled with a list of losses."""
    image_input = keras.Input(shape=(32, 32, 3), name="img_input")
    timeseries_input = keras.Input(shape=(None, 10), name="ts_input")

    x1 = layers.Conv2D(3, 3)(image_input)
    x1 = layers.GlobalMaxPooling2D()(x1)

    x2 = layers.Conv1D(3, 3)(timeseries_input)
    x2 = layers.GlobalMaxPooling1D()(x2)

    x = layers.concatenate([x1, x2])

    score_output = layers.Dense(1, name="score_output")(x)
    class_output = layers.Dense(5, name="class_output")(x)

    model = keras.Model(inputs=[image_input, timeseries_input], outputs=[score_output, class_output])
    model.compile(
        optimizer=keras.optimizers.RMSprop(1e-3),
        loss=[
            keras.losses.MeanSquaredError(),
            keras.losses.CategoricalCrossentropy(),
        ],
    )
    return model


def image_and_timeseries_data(rows: int = 128):
    """The guide's dummy data (np.random.random_sample), from a seeded generator."""
    r = rng(2)
    img_data = r.random(size=(rows, 32, 32, 3))
    ts_data = r.random(size=(rows, 20, 10))
    score_targets = r.random(size=(rows, 1))
    class_targets = r.random(size=(rows, 5))
    return img_data, ts_data, score_targets, class_targets


class LossHistory(keras.callbacks.Callback):
    def on_train_begin(self, logs):
        self.per_batch_losses = []

    def on_batch_end(self, batch, logs):
        self.per_batch_losses.append(logs.get("loss"))


# -- keras-io guides/custom_train_step_in_tensorflow.py -----------------------------------------------
class CustomModel(keras.Model):
    def train_step(self, data):
        # Unpack the data. Its structure depends on your model and
        # on what you pass to `fit()`.
        x, y = data

        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)  # Forward pass
            # Compute the loss value
            # (the loss function is configured in `compile()`)
            loss = self.compute_loss(y=y, y_pred=y_pred)

        # Compute gradients
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)

        # Update weights
        self.optimizer.apply(gradients, trainable_vars)

        # Update metrics (includes the metric that tracks the loss)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)

        # Return a dict mapping metric names to current value
        return {m.name: m.result() for m in self.metrics}


class LowerLevelCustomModel(keras.Model):  # the guide's second `CustomModel`
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")
        self.loss_fn = keras.losses.MeanSquaredError()

    def train_step(self, data):
        x, y = data

        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)  # Forward pass
            # Compute our own loss
            loss = self.loss_fn(y, y_pred)

        # Compute gradients
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)

        # Update weights
        self.optimizer.apply(gradients, trainable_vars)

        # Compute our own metrics
        self.loss_tracker.update_state(loss)
        self.mae_metric.update_state(y, y_pred)
        return {
            "loss": self.loss_tracker.result(),
            "mae": self.mae_metric.result(),
        }

    @property
    def metrics(self):
        # We list our `Metric` objects here so that `reset_states()` can be
        # called automatically at the start of each epoch
        # or at the start of `evaluate()`.
        return [self.loss_tracker, self.mae_metric]


class WeightedCustomModel(keras.Model):  # the guide's third `CustomModel`
    def train_step(self, data):
        # Unpack the data. Its structure depends on your model and
        # on what you pass to `fit()`.
        if len(data) == 3:
            x, y, sample_weight = data
        else:
            sample_weight = None
            x, y = data

        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)  # Forward pass
            # Compute the loss value.
            # The loss function is configured in `compile()`.
            loss = self.compute_loss(
                y=y,
                y_pred=y_pred,
                sample_weight=sample_weight,
            )

        # Compute gradients
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)

        # Update weights
        self.optimizer.apply(gradients, trainable_vars)

        # Update the metrics.
        # Metrics are configured in `compile()`.
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred, sample_weight=sample_weight)

        # Return a dict mapping metric names to current value.
        # Note that it will include the loss (tracked in self.metrics).
        return {m.name: m.result() for m in self.metrics}


class EvalCustomModel(keras.Model):  # the guide's fourth `CustomModel`
    def test_step(self, data):
        # Unpack the data
        x, y = data
        # Compute predictions
        y_pred = self(x, training=False)
        # Updates the metrics tracking the loss
        loss = self.compute_loss(y=y, y_pred=y_pred)
        # Update the metrics.
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        # Return a dict mapping metric names to current value.
        # Note that it will include the loss (tracked in self.metrics).
        return {m.name: m.result() for m in self.metrics}


latent_dim = 16  # the guide's 128


def gan_parts():
    """The guide's discriminator and generator (filters 64/128 -> 8/8)."""
    discriminator = keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            layers.Conv2D(8, (3, 3), strides=(2, 2), padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2D(8, (3, 3), strides=(2, 2), padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.GlobalMaxPooling2D(),
            layers.Dense(1),
        ],
        name="discriminator",
    )
    generator = keras.Sequential(
        [
            keras.Input(shape=(latent_dim,)),
            # We want to generate 128 coefficients to reshape into a 7x7x128 map
            layers.Dense(7 * 7 * 8),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Reshape((7, 7, 8)),
            layers.Conv2DTranspose(8, (4, 4), strides=(2, 2), padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2DTranspose(8, (4, 4), strides=(2, 2), padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2D(1, (7, 7), padding="same", activation="sigmoid"),
        ],
        name="generator",
    )
    return discriminator, generator


class GAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")
        self.seed_generator = keras.random.SeedGenerator(1337)

    @property
    def metrics(self):
        return [self.d_loss_tracker, self.g_loss_tracker]

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn

    def train_step(self, real_images):
        if isinstance(real_images, tuple):
            real_images = real_images[0]
        # Sample random points in the latent space
        batch_size = tf.shape(real_images)[0]
        random_latent_vectors = keras.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator
        )

        # Decode them to fake images
        generated_images = self.generator(random_latent_vectors)

        # Combine them with real images
        combined_images = tf.concat([generated_images, real_images], axis=0)

        # Assemble labels discriminating real from fake images
        labels = tf.concat([tf.ones((batch_size, 1)), tf.zeros((batch_size, 1))], axis=0)
        # Add random noise to the labels - important trick!
        labels += 0.05 * keras.random.uniform(tf.shape(labels), seed=self.seed_generator)

        # Train the discriminator
        with tf.GradientTape() as tape:
            predictions = self.discriminator(combined_images)
            d_loss = self.loss_fn(labels, predictions)
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply(grads, self.discriminator.trainable_weights)

        # Sample random points in the latent space
        random_latent_vectors = keras.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator
        )

        # Assemble labels that say "all real images"
        misleading_labels = tf.zeros((batch_size, 1))

        # Train the generator (note that we should *not* update the weights
        # of the discriminator)!
        with tf.GradientTape() as tape:
            predictions = self.discriminator(self.generator(random_latent_vectors))
            g_loss = self.loss_fn(misleading_labels, predictions)
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply(grads, self.generator.trainable_weights)

        # Update metrics and return their value.
        self.d_loss_tracker.update_state(d_loss)
        self.g_loss_tracker.update_state(g_loss)
        return {
            "d_loss": self.d_loss_tracker.result(),
            "g_loss": self.g_loss_tracker.result(),
        }


def mnist_digits(rows: int = 128):
    """The GAN guide's `all_digits`: float32 (rows, 28, 28, 1) in [0, 1]."""
    return rng(3).random((rows, 28, 28, 1)).astype("float32")


# -- keras-io guides/transfer_learning.py (Keras 3 version) -----------------------------------------
def small_base_model(input_shape=(32, 32, 3)):
    """Stands for keras.applications.Xception(weights="imagenet", include_top=False): a small
    convolutional base with batch normalization, the part of Xception the guide is about."""
    inputs = keras.Input(shape=input_shape)
    x = layers.Conv2D(8, 3, strides=2, padding="same")(inputs)
    x = layers.BatchNormalization()(x)
    x = layers.ReLU()(x)
    x = layers.Conv2D(8, 3, strides=2, padding="same")(x)
    x = layers.BatchNormalization()(x)
    outputs = layers.ReLU()(x)
    return keras.Model(inputs, outputs, name="base")


def cats_vs_dogs(rows: int):
    """(image, label) examples as tfds's cats_vs_dogs after resizing: float32 0-255, int64 0/1."""
    r = rng(4)
    y = r.integers(0, 2, size=rows)
    x = r.random((rows, 32, 32, 3)).astype("float32") * 200
    x[y == 1, :16] += 55.0
    return tf.data.Dataset.from_tensor_slices((x, y))


# -- keras-io guides/distributed_training_with_tensorflow.py ----------------------------------------
def get_distributed_compiled_model():
    # Make a simple 2-layer densely-connected neural network.
    inputs = keras.Input(shape=(784,))
    x = keras.layers.Dense(32, activation="relu")(inputs)
    x = keras.layers.Dense(32, activation="relu")(x)
    outputs = keras.layers.Dense(10)(x)
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
    return model


def get_dataset():
    batch_size = 32
    num_val_samples = 64

    # Return the MNIST dataset in the form of a `tf.data.Dataset`.
    (x_train, y_train), _, (x_test, y_test) = mnist_vectors(train=320, val=0, test=64)  # load_data()

    # Reserve num_val_samples samples for validation
    x_val = x_train[-num_val_samples:]
    y_val = y_train[-num_val_samples:]
    x_train = x_train[:-num_val_samples]
    y_train = y_train[:-num_val_samples]
    return (
        tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(batch_size),
        tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(batch_size),
        tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(batch_size),
    )


# -- keras-io guides/functional_api.py (Keras 3 version) --------------------------------------------
num_tags = 12  # Number of unique issue tags
num_words = 100  # Size of vocabulary obtained when preprocessing text data (the guide's 10000)
num_departments = 4  # Number of departments for predictions


def ticket_model():
    title_input = keras.Input(shape=(None,), name="title")  # Variable-length sequence of ints
    body_input = keras.Input(shape=(None,), name="body")  # Variable-length sequence of ints
    tags_input = keras.Input(shape=(num_tags,), name="tags")  # Binary vectors of size `num_tags`

    # Embed each word in the title into a 64-dimensional vector (here 8)
    title_features = layers.Embedding(num_words, 8)(title_input)
    # Embed each word in the text into a 64-dimensional vector (here 8)
    body_features = layers.Embedding(num_words, 8)(body_input)

    # Reduce sequence of embedded words in the title into a single 128-dimensional vector (here 8)
    title_features = layers.LSTM(8)(title_features)
    # Reduce sequence of embedded words in the body into a single 32-dimensional vector (here 4)
    body_features = layers.LSTM(4)(body_features)

    # Merge all available features into a single large vector via concatenation
    x = layers.concatenate([title_features, body_features, tags_input])

    # Stick a logistic regression for priority prediction on top of the features
    priority_pred = layers.Dense(1, name="priority")(x)
    # Stick a department classifier on top of the features
    department_pred = layers.Dense(num_departments, name="department")(x)

    # Instantiate an end-to-end model predicting both priority and department
    model = keras.Model(
        inputs=[title_input, body_input, tags_input],
        outputs={"priority": priority_pred, "department": department_pred},
    )
    return model


def ticket_data(rows: int = 128):
    """The guide's dummy data (np.random), from a seeded generator; body 100 -> 20 words."""
    r = rng(5)
    title_data = r.integers(num_words, size=(rows, 10))
    body_data = r.integers(num_words, size=(rows, 20))
    tags_data = r.integers(2, size=(rows, num_tags)).astype("float32")
    priority_targets = r.random(size=(rows, 1))
    dept_targets = r.integers(2, size=(rows, num_departments))
    return title_data, body_data, tags_data, priority_targets, dept_targets


# -- keras-io examples/vision/mnist_convnet.py ------------------------------------------------------
num_classes = 10
input_shape = (28, 28, 1)


def mnist_images(train: int = 256, test: int = 64):
    """keras.datasets.mnist.load_data(): uint8 (n, 28, 28) images, uint8 labels."""
    r = rng(6)
    y = r.integers(0, 10, size=train + test).astype("uint8")
    x = (r.random((train + test, 28, 28)) * 128).astype("uint8")
    for i, label in enumerate(y):
        x[i, 2 * label : 2 * label + 6] += 120
    return (x[:train], y[:train]), (x[train:], y[train:])


def mnist_convnet():
    return keras.Sequential(
        [
            keras.Input(shape=input_shape),
            layers.Conv2D(8, kernel_size=(3, 3), activation="relu"),  # 32 filters in the example
            layers.MaxPooling2D(pool_size=(2, 2)),
            layers.Conv2D(16, kernel_size=(3, 3), activation="relu"),  # 64
            layers.MaxPooling2D(pool_size=(2, 2)),
            layers.Flatten(),
            layers.Dropout(0.5),
            layers.Dense(num_classes, activation="softmax"),
        ]
    )


# -- keras-io examples/nlp/text_classification_from_scratch.py ---------------------------------------
WORDS = ["the", "a", "movie", "film", "great", "terrible", "plot", "actor", "good", "bad", "boring",
         "loved", "hated", "story", "ending"]  # fmt: skip


def imdb_reviews(rows: int, seed: int):
    """text_dataset_from_directory's batches: (string (32,), int32 (32,)); HTML breaks and
    punctuation as in IMDB's reviews."""
    r = rng(10 + seed)
    texts, labels = [], []
    for _ in range(rows):
        label = int(r.integers(0, 2))
        words = list(r.choice(WORDS, size=int(r.integers(5, 30))))
        words.insert(int(r.integers(0, len(words))), "loved" if label else "hated")
        text = " ".join(words).capitalize() + "!<br /><br />" + " ".join(r.choice(WORDS, size=3)) + "."
        texts.append(text)
        labels.append(label)
    return tf.data.Dataset.from_tensor_slices((texts, np.array(labels, "int32"))).batch(32)


def custom_standardization(input_data):
    lowercase = tf.strings.lower(input_data)
    stripped_html = tf.strings.regex_replace(lowercase, "<br />", " ")
    return tf.strings.regex_replace(stripped_html, f"[{re.escape(string.punctuation)}]", "")


# Model constants (the example's 20000, 128, 500).
max_features = 200
embedding_dim = 8
sequence_length = 40


def text_conv_model():
    # A integer input for vocab indices.
    inputs = keras.Input(shape=(None,), dtype="int64")

    # Next, we add a layer to map those vocab indices into a space of dimensionality
    # 'embedding_dim'.
    x = layers.Embedding(max_features, embedding_dim)(inputs)
    x = layers.Dropout(0.5)(x)

    # Conv1D + global max pooling (128 filters in the example)
    x = layers.Conv1D(8, 7, padding="valid", activation="relu", strides=3)(x)
    x = layers.Conv1D(8, 7, padding="valid", activation="relu", strides=3)(x)
    x = layers.GlobalMaxPooling1D()(x)

    # We add a vanilla hidden layer:
    x = layers.Dense(8, activation="relu")(x)
    x = layers.Dropout(0.5)(x)

    # We project onto a single unit output layer, and squash it with a sigmoid:
    predictions = layers.Dense(1, activation="sigmoid", name="predictions")(x)

    model = keras.Model(inputs, predictions)

    # Compile the model with binary crossentropy loss and an adam optimizer.
    model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
    return model


# -- keras-io examples/timeseries/timeseries_classification_from_scratch.py -------------------------
def ford_a(train: int = 160, test: int = 64, length: int = 32):
    """FordA's arrays after the example's reshaping: float64 (n, length, 1), labels 0/1."""
    r = rng(8)
    y = r.integers(0, 2, size=train + test)
    t = np.linspace(0, 4 * np.pi, length)
    x = r.normal(scale=0.5, size=(train + test, length)) + np.where(y[:, None] == 1, np.sin(t), np.cos(t))
    x = x.reshape((x.shape[0], x.shape[1], 1))
    return (x[:train], y[:train]), (x[train:], y[train:])


def make_model(input_shape, num_classes):
    """The example's make_model (filters 64 -> 8); num_classes is a global there."""
    input_layer = keras.layers.Input(input_shape)

    conv1 = keras.layers.Conv1D(filters=8, kernel_size=3, padding="same")(input_layer)
    conv1 = keras.layers.BatchNormalization()(conv1)
    conv1 = keras.layers.ReLU()(conv1)

    conv2 = keras.layers.Conv1D(filters=8, kernel_size=3, padding="same")(conv1)
    conv2 = keras.layers.BatchNormalization()(conv2)
    conv2 = keras.layers.ReLU()(conv2)

    conv3 = keras.layers.Conv1D(filters=8, kernel_size=3, padding="same")(conv2)
    conv3 = keras.layers.BatchNormalization()(conv3)
    conv3 = keras.layers.ReLU()(conv3)

    gap = keras.layers.GlobalAveragePooling1D()(conv3)

    output_layer = keras.layers.Dense(num_classes, activation="softmax")(gap)

    return keras.models.Model(inputs=input_layer, outputs=output_layer)


# -- keras-io examples/structured_data/structured_data_classification_with_feature_space.py ---------
def heart_dataframe(rows: int = 160):
    """The heart-disease CSV's columns and dtypes, as a dict of columns (pandas is not installed
    here: the example's DataFrame, `dict(dataframe)`, is a dict of columns too)."""
    r = rng(9)
    frame = {
        "age": r.integers(29, 78, size=rows),
        "sex": r.integers(0, 2, size=rows),
        "cp": r.integers(0, 5, size=rows),
        "trestbps": r.integers(94, 200, size=rows),
        "chol": r.integers(126, 564, size=rows),
        "fbs": r.integers(0, 2, size=rows),
        "restecg": r.integers(0, 3, size=rows),
        "thalach": r.integers(71, 202, size=rows),
        "exang": r.integers(0, 2, size=rows),
        "oldpeak": np.round(r.random(rows) * 6.2, 1),
        "slope": r.integers(1, 4, size=rows),
        "ca": r.integers(0, 4, size=rows),
        "thal": r.choice(["fixed", "normal", "reversible"], size=rows),
    }
    frame["target"] = ((frame["age"] > 55).astype(int) ^ (frame["thal"] == "reversible")).astype("int64")
    return frame


def dataframe_to_dataset(dataframe):
    dataframe = dict(dataframe)  # dataframe.copy()
    labels = dataframe.pop("target")
    ds = tf.data.Dataset.from_tensor_slices((dict(dataframe), labels))
    # test-only: reshuffle_each_iteration=False (the example reshuffles each epoch)
    ds = ds.shuffle(buffer_size=len(labels), reshuffle_each_iteration=False)
    return ds


def heart_feature_space():
    from keras.utils import FeatureSpace

    return FeatureSpace(
        features={
            # Categorical features encoded as integers
            "sex": FeatureSpace.integer_categorical(num_oov_indices=0),
            "cp": FeatureSpace.integer_categorical(num_oov_indices=0),
            "fbs": FeatureSpace.integer_categorical(num_oov_indices=0),
            "restecg": FeatureSpace.integer_categorical(num_oov_indices=0),
            "exang": FeatureSpace.integer_categorical(num_oov_indices=0),
            "ca": FeatureSpace.integer_categorical(num_oov_indices=0),
            # Categorical feature encoded as string
            "thal": FeatureSpace.string_categorical(num_oov_indices=0),
            # Numerical features to discretize
            "age": FeatureSpace.float_discretized(num_bins=30),
            # Numerical features to normalize
            "trestbps": FeatureSpace.float_normalized(),
            "chol": FeatureSpace.float_normalized(),
            "thalach": FeatureSpace.float_normalized(),
            "oldpeak": FeatureSpace.float_normalized(),
            "slope": FeatureSpace.float_normalized(),
        },
        # Specify feature cross with a custom crossing dim.
        crosses=[
            FeatureSpace.cross(feature_names=("sex", "age"), crossing_dim=64),
            FeatureSpace.cross(
                feature_names=("thal", "ca"),
                crossing_dim=16,
            ),
        ],
        output_mode="concat",
    )


# -- tensorflow/docs site/en/tutorials/keras/classification.ipynb ------------------------------------
def fashion_mnist(train: int = 256, test: int = 64):
    """fashion_mnist.load_data(): uint8 (n, 28, 28) images, uint8 labels 0-9."""
    return mnist_images(train, test)


# -- tensorflow/docs site/en/tutorials/keras/regression.ipynb ----------------------------------------
AUTO_MPG_COLUMNS = ["Cylinders", "Displacement", "Horsepower", "Weight", "Acceleration", "Model Year"]


def auto_mpg(train: int = 160, test: int = 40):
    """The tutorial's features after get_dummies (6 numeric columns and Europe/Japan/USA, float64)
    and MPG labels, as NumPy arrays (the tutorial's pandas frames; pandas is not installed here)."""
    r = rng(11)
    rows = train + test
    cylinders = r.choice([4.0, 6.0, 8.0], size=rows)
    displacement = cylinders * 40 + r.normal(0, 20, rows)
    horsepower = displacement * 0.5 + r.normal(0, 10, rows)
    weight = horsepower * 20 + r.normal(0, 200, rows)
    acceleration = 20 - horsepower / 20 + r.normal(0, 1, rows)
    year = r.integers(70, 83, size=rows).astype(float)
    origin = np.eye(3)[r.integers(0, 3, size=rows)]
    features = np.column_stack([cylinders, displacement, horsepower, weight, acceleration, year, origin])
    mpg = 45 - horsepower / 8 + (year - 70) * 0.5 + r.normal(0, 2, rows)
    return (features[:train], mpg[:train]), (features[train:], mpg[train:])


def build_and_compile_model(norm):
    model = keras.Sequential(
        [
            norm,
            layers.Dense(16, activation="relu"),  # 64 in the tutorial
            layers.Dense(16, activation="relu"),
            layers.Dense(1),
        ]
    )
    model.compile(loss="mean_absolute_error", optimizer=tf.keras.optimizers.Adam(0.001))
    return model


# -- tensorflow/docs site/en/tutorials/keras/save_and_load.ipynb -------------------------------------
def create_model():
    """The tutorial's create_model (Dense 512 -> 32)."""
    model = tf.keras.Sequential(
        [
            keras.layers.Dense(32, activation="relu", input_shape=(784,)),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(10),
        ]
    )
    model.compile(
        optimizer="adam",
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
    )
    return model


# -- tensorflow/docs site/en/tutorials/keras/overfit_and_underfit.ipynb ------------------------------
FEATURES = 28


def higgs(rows: int):
    """The HIGGS CSV as the tutorial packs it: (float32 (28,), float32 label) examples."""
    r = rng(12)
    features = r.normal(size=(rows, FEATURES)).astype("float32")
    label = (features[:, 0] + features[:, 1] * features[:, 2] > 0).astype("float32")
    return tf.data.Dataset.from_tensor_slices((features, label))


class EpochDots(keras.callbacks.Callback):
    """tensorflow_docs.modeling.EpochDots (tensorflow_docs is not installed): a dot per epoch."""

    def __init__(self, report_every=100, dot_every=1):
        super().__init__()
        self.report_every = report_every
        self.dot_every = dot_every

    def on_epoch_end(self, epoch, logs):
        if epoch % self.report_every == 0:
            print(f"\nEpoch: {epoch:d}, " + ", ".join(f"{k}:{v:0.4f}" for k, v in sorted(logs.items())))
        if epoch % self.dot_every == 0:
            print(".", end="", flush=True)


# -- tensorflow/docs site/en/tutorials/distribute/keras.ipynb ----------------------------------------
def mnist_supervised(rows: int, seed: int):
    """tfds.load('mnist', as_supervised=True)'s examples: uint8 (28, 28, 1), int64 label."""
    r = rng(20 + seed)
    y = r.integers(0, 10, size=rows)
    x = (r.random((rows, 28, 28, 1)) * 128).astype("uint8")
    for i, label in enumerate(y):
        x[i, 2 * label : 2 * label + 6] += 120
    return tf.data.Dataset.from_tensor_slices((x, y))


def scale(image, label):
    image = tf.cast(image, tf.float32)
    image /= 255
    return image, label


# -- the shape of keras-io's GANs: two sub-models, an optimizer each (the parity tests' own) --------
class TwoOptimizers(keras.Model):
    """keras-io's GANs' shape: two sub-models, each stepped by an optimizer of its own, given
    to ``compile`` and kept as attributes, made outside any scope. The loss tracker is fed the
    unscaled per-example losses, so every figure is one device's."""

    def __init__(self):
        super().__init__()
        self.encoder = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        self.head = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        self.tracker = keras.metrics.Mean(name="loss")

    def compile(self, encoder_optimizer, head_optimizer, loss_fn):
        super().compile()
        self.encoder_optimizer, self.head_optimizer, self.loss_fn = encoder_optimizer, head_optimizer, loss_fn

    @property
    def metrics(self):
        return [self.tracker]

    def _apply(self, part, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = self.loss_fn(y, self.head(self.encoder(x)))
        grads = tape.gradient(loss, part.trainable_weights)
        optimizer.apply_gradients(zip(grads, part.trainable_weights, strict=True))

    def train_step(self, data):
        x, y = data
        self._apply(self.encoder, self.encoder_optimizer, x, y)
        self._apply(self.head, self.head_optimizer, x, y)
        self.tracker.update_state(keras.ops.square(y - self.head(self.encoder(x))))
        return {"loss": self.tracker.result()}


def two_optimizers():
    keras.utils.set_random_seed(0)
    model = TwoOptimizers()
    model.compile(
        encoder_optimizer=keras.optimizers.Adam(0.01),
        head_optimizer=keras.optimizers.RMSprop(0.01),
        loss_fn=keras.losses.MeanSquaredError(),
    )
    return model

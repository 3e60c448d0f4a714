"""More of keras-io's examples and guides (keras-team/keras-io), run on tfgpu as their authors wrote them.

The rules are ``test_examples_as_written.py``'s: each test is one example or guide not already
run by ``test_guides.py``, ``test_as_written.py`` or ``test_examples_as_written.py``, shrunk to a
few seconds on synthetic data of the example's shapes and dtypes (no downloads) and written as the
example writes it: the model built where the example builds it, outside any strategy's scope,
with its custom layers, subclassed models, ``compile`` overrides, callbacks and data pipelines.
The only change a user makes is ``model.fit(...)`` -> ``tfgpu.fit(model, ...)`` (``evaluate``
and ``predict`` likewise), with the strategy passed (``strategy=``: 2 replicas here). Only sizes
shrink (rows, units, vocabularies, epochs); each docstring names the example and every line that
differs from it. Where the stored example is its tf.keras version, ``from tensorflow import
keras`` is read as ``import keras`` (the same Keras 3 under TensorFlow 2.16 and later).

Each example runs twice through the same function, and the two runs must agree (histories to rel
1e-5, weights, evaluate and predict; ``support.parity.same``): once with Keras's own methods, on
one device from the same initial weights (``keras.utils.set_random_seed`` before anything is
built; ``shuffle=False`` for arrays), once with tfgpu's on 2 replicas. Where a figure is per
replica (Dropout's masks, random latent vectors in a ``train_step``, a sum over the batch), the
reference is Keras's own fit of the same model moved into the same 2-replica MirroredStrategy in
place (``support.parity.KerasUnder``), and the docstring says so.
"""

from __future__ import annotations

import contextlib
import io
import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import layers, ops
from keras.layers import StringLookup

import guides
from support.parity import KERAS, TFGPU, KerasUnder, same, tfgpu_with
from support.replicas import local_strategy

pytestmark = pytest.mark.heavy


def printed_by(callback_lines, text):
    """The lines a guide's callbacks printed (not Keras's progress bars). A progress bar that
    ends without a newline (``predict``'s, as time decides) runs into the next printed line, so
    each is found where it starts, not only at a line's start."""
    import re

    starts = "|".join(re.escape(start) for start in callback_lines)
    return re.findall(rf"(?:{starts})[^\r\n]*", text)


# -- keras-io guides/writing_your_own_callbacks.py ----------------------------------------------------
# Define the Keras model to add callbacks to
def get_model():
    model = keras.Sequential()
    model.add(keras.layers.Dense(1))
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=0.1),
        loss="mean_squared_error",
        metrics=["mean_absolute_error"],
    )
    return model


class CustomCallback(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        keys = list(logs.keys())
        print("Starting training; got log keys: {}".format(keys))  # noqa: UP032

    def on_train_end(self, logs=None):
        keys = list(logs.keys())
        print("Stop training; got log keys: {}".format(keys))  # noqa: UP032

    def on_epoch_begin(self, epoch, logs=None):
        keys = list(logs.keys())
        print("Start epoch {} of training; got log keys: {}".format(epoch, keys))  # noqa: UP032

    def on_epoch_end(self, epoch, logs=None):
        keys = list(logs.keys())
        print("End epoch {} of training; got log keys: {}".format(epoch, keys))  # noqa: UP032

    def on_test_begin(self, logs=None):
        keys = list(logs.keys())
        print("Start testing; got log keys: {}".format(keys))  # noqa: UP032

    def on_test_end(self, logs=None):
        keys = list(logs.keys())
        print("Stop testing; got log keys: {}".format(keys))  # noqa: UP032

    def on_predict_begin(self, logs=None):
        keys = list(logs.keys())
        print("Start predicting; got log keys: {}".format(keys))  # noqa: UP032

    def on_predict_end(self, logs=None):
        keys = list(logs.keys())
        print("Stop predicting; got log keys: {}".format(keys))  # noqa: UP032

    def on_train_batch_begin(self, batch, logs=None):
        keys = list(logs.keys())
        print("...Training: start of batch {}; got log keys: {}".format(batch, keys))  # noqa: UP032

    def on_train_batch_end(self, batch, logs=None):
        keys = list(logs.keys())
        print("...Training: end of batch {}; got log keys: {}".format(batch, keys))  # noqa: UP032

    def on_test_batch_begin(self, batch, logs=None):
        keys = list(logs.keys())
        print("...Evaluating: start of batch {}; got log keys: {}".format(batch, keys))  # noqa: UP032

    def on_test_batch_end(self, batch, logs=None):
        keys = list(logs.keys())
        print("...Evaluating: end of batch {}; got log keys: {}".format(batch, keys))  # noqa: UP032

    def on_predict_batch_begin(self, batch, logs=None):
        keys = list(logs.keys())
        print("...Predicting: start of batch {}; got log keys: {}".format(batch, keys))  # noqa: UP032

    def on_predict_batch_end(self, batch, logs=None):
        keys = list(logs.keys())
        print("...Predicting: end of batch {}; got log keys: {}".format(batch, keys))  # noqa: UP032


class LossAndErrorPrintingCallback(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        print("Up to batch {}, the average loss is {:7.2f}.".format(batch, logs["loss"]))

    def on_test_batch_end(self, batch, logs=None):
        print("Up to batch {}, the average loss is {:7.2f}.".format(batch, logs["loss"]))

    def on_epoch_end(self, epoch, logs=None):
        print(
            "The average loss for epoch {} is {:7.2f} and mean absolute error is {:7.2f}.".format(
                epoch, logs["loss"], logs["mean_absolute_error"]
            )
        )


class EarlyStoppingAtMinLoss(keras.callbacks.Callback):
    """Stop training when the loss is at its min, i.e. the loss stops decreasing.

    Arguments:
        patience: Number of epochs to wait after min has been hit. After this
        number of no improvement, training stops.
    """

    def __init__(self, patience=0):
        super().__init__()
        self.patience = patience
        # best_weights to store the weights at which the minimum loss occurs.
        self.best_weights = None

    def on_train_begin(self, logs=None):
        # The number of epoch it has waited when loss is no longer minimum.
        self.wait = 0
        # The epoch the training stops at.
        self.stopped_epoch = 0
        # Initialize the best as infinity.
        self.best = np.inf

    def on_epoch_end(self, epoch, logs=None):
        current = logs.get("loss")
        if np.less(current, self.best):
            self.best = current
            self.wait = 0
            # Record the best weights if current results is better (less).
            self.best_weights = self.model.get_weights()
        else:
            self.wait += 1
            if self.wait >= self.patience:
                self.stopped_epoch = epoch
                self.model.stop_training = True
                print("Restoring model weights from the end of the best epoch.")
                self.model.set_weights(self.best_weights)

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0:
            print(f"Epoch {self.stopped_epoch + 1}: early stopping")


class CustomLearningRateScheduler(keras.callbacks.Callback):
    """Learning rate scheduler which sets the learning rate according to schedule.

    Arguments:
        schedule: a function that takes an epoch index
            (integer, indexed from 0) and current learning rate
            as inputs and returns a new learning rate as output (float).
    """

    def __init__(self, schedule):
        super().__init__()
        self.schedule = schedule

    def on_epoch_begin(self, epoch, logs=None):
        if not hasattr(self.model.optimizer, "learning_rate"):
            raise ValueError('Optimizer must have a "learning_rate" attribute.')
        # Get the current learning rate from model's optimizer.
        lr = self.model.optimizer.learning_rate
        # Call schedule function to get the scheduled learning rate.
        scheduled_lr = self.schedule(epoch, lr)
        # Set the value back to the optimizer before this epoch starts
        self.model.optimizer.learning_rate = scheduled_lr
        print(f"\nEpoch {epoch}: Learning rate is {float(np.array(scheduled_lr))}.")


LR_SCHEDULE = [
    # (epoch to start, learning rate) tuples
    (3, 0.05),
    (6, 0.01),
    (9, 0.005),
    (12, 0.001),
]


def lr_schedule(epoch, lr):
    """Helper function to retrieve the scheduled learning rate based on epoch."""
    if epoch < LR_SCHEDULE[0][0] or epoch > LR_SCHEDULE[-1][0]:
        return lr
    for i in range(len(LR_SCHEDULE)):
        if epoch == LR_SCHEDULE[i][0]:
            return LR_SCHEDULE[i][1]
    return lr


CALLBACK_LINES = ("Start", "Stop", "End epoch", "...", "Up to batch", "The average", "Restoring", "Epoch ")


@pytest.mark.parametrize("where", ["outside-scope", "in-scope"])
def test_writing_your_own_callbacks_guide(where):
    """keras-io guides/writing_your_own_callbacks.py (its Keras 3 version): ``get_model()`` builds
    an Input-less ``keras.Sequential()`` + ``Dense(1)`` compiled with ``RMSprop(learning_rate=0.1)``,
    "mean_squared_error", ["mean_absolute_error"], a fresh one for each of its four runs:
    ``CustomCallback`` printing every hook's log keys through fit (``validation_split=0.5``),
    evaluate and predict (``batch_size=128``); ``LossAndErrorPrintingCallback`` through fit and
    evaluate; ``EarlyStoppingAtMinLoss`` (``self.model.stop_training``, ``get_weights`` /
    ``set_weights`` in ``on_epoch_end``) and ``CustomLearningRateScheduler`` (sets
    ``self.model.optimizer.learning_rate`` in ``on_epoch_begin``), both with ``batch_size=64``,
    ``steps_per_epoch=5`` over 1000 rows (so the arrays run out, as in the guide). What the
    callbacks print is compared too (the guide's output). Runs 3 and 4 fit arrays with
    ``steps_per_epoch=5``: epochs of 5, 5, 5 and 1 batches, then again, as Keras takes them
    (tfgpu took a whole pass an epoch until this example found it).

    outside-scope: lines changed: none (the strategy passed). in-scope: ``get_model()`` called
    inside ``with strategy.scope():`` (an unbuilt model compiled in the scope, its RMSprop's slot
    variables made at the first step) and tfgpu's calls made without ``strategy=``. Test-only:
    ``shuffle=False``; MNIST's 1000 digits are synthetic; epochs 30 -> 8 and 15 -> 8 (the
    schedule's 0.05 and 0.01 are still reached).
    """
    (x_train, y_train), (x_test, y_test) = guides.mnist_images(train=1000, test=1000)
    strategy = local_strategy(2)

    def guide(api, scope):
        keras.utils.set_random_seed(0)
        out = io.StringIO()
        results = {}
        x_tr = x_train.reshape(-1, 784).astype("float32") / 255.0
        x_te = x_test.reshape(-1, 784).astype("float32") / 255.0
        with contextlib.redirect_stdout(out):
            with scope():
                model = get_model()
            history = api.fit(
                model,
                x_tr,
                y_train,
                batch_size=128,
                epochs=1,
                verbose=0,
                validation_split=0.5,
                callbacks=[CustomCallback()],
                shuffle=False,
            )
            results["history_1"] = history.history
            results["evaluate_1"] = api.evaluate(
                model, x_te, y_test, batch_size=128, verbose=0, callbacks=[CustomCallback()]
            )
            results["predict_1"] = api.predict(model, x_te, batch_size=128, callbacks=[CustomCallback()])
            results["weights_1"] = model.get_weights()

            with scope():
                model = get_model()
            history = api.fit(
                model,
                x_tr,
                y_train,
                batch_size=128,
                epochs=2,
                verbose=0,
                callbacks=[LossAndErrorPrintingCallback()],
                shuffle=False,
            )
            results["history_2"] = history.history
            results["evaluate_2"] = api.evaluate(
                model, x_te, y_test, batch_size=128, verbose=0, callbacks=[LossAndErrorPrintingCallback()]
            )
            results["weights_2"] = model.get_weights()

            with scope():
                model = get_model()
            history = api.fit(
                model,
                x_tr,
                y_train,
                batch_size=64,
                steps_per_epoch=5,
                epochs=8,
                verbose=0,
                callbacks=[LossAndErrorPrintingCallback(), EarlyStoppingAtMinLoss()],
                shuffle=False,
            )
            results["history_3"] = history.history
            results["weights_3"] = model.get_weights()

            with scope():
                model = get_model()
            history = api.fit(
                model,
                x_tr,
                y_train,
                batch_size=64,
                steps_per_epoch=5,
                epochs=8,
                verbose=0,
                callbacks=[LossAndErrorPrintingCallback(), CustomLearningRateScheduler(lr_schedule)],
                shuffle=False,
            )
            results["history_4"] = history.history
            results["weights_4"] = model.get_weights()
            results["learning_rate_4"] = float(np.array(model.optimizer.learning_rate))
        results["printed"] = "\n".join(printed_by(CALLBACK_LINES, out.getvalue()))
        return results

    expected = guide(KERAS, contextlib.nullcontext)
    assert "Start predicting; got log keys: []" in expected["printed"]
    assert expected["learning_rate_4"] == pytest.approx(0.01)
    if where == "in-scope":
        got = guide(TFGPU, strategy.scope)
    else:
        got = guide(tfgpu_with(strategy, everywhere=True), contextlib.nullcontext)
    same(got, expected)


# -- keras-io examples/structured_data/collaborative_filtering_movielens.py ---------------------------
EMBEDDING_SIZE = 8  # 50 in the example


class RecommenderNet(keras.Model):
    def __init__(self, num_users, num_movies, embedding_size, **kwargs):
        super().__init__(**kwargs)
        self.num_users = num_users
        self.num_movies = num_movies
        self.embedding_size = embedding_size
        self.user_embedding = layers.Embedding(
            num_users,
            embedding_size,
            embeddings_initializer="he_normal",
            embeddings_regularizer=keras.regularizers.l2(1e-6),
        )
        self.user_bias = layers.Embedding(num_users, 1)
        self.movie_embedding = layers.Embedding(
            num_movies,
            embedding_size,
            embeddings_initializer="he_normal",
            embeddings_regularizer=keras.regularizers.l2(1e-6),
        )
        self.movie_bias = layers.Embedding(num_movies, 1)

    def call(self, inputs):
        user_vector = self.user_embedding(inputs[:, 0])
        user_bias = self.user_bias(inputs[:, 0])
        movie_vector = self.movie_embedding(inputs[:, 1])
        movie_bias = self.movie_bias(inputs[:, 1])
        dot_user_movie = tf.tensordot(user_vector, movie_vector, 2)
        # Add all the components (including bias)
        x = dot_user_movie + user_bias + movie_bias
        # The sigmoid activation forces the rating to between 0 and 1
        return tf.nn.sigmoid(x)


def test_collaborative_filtering_movielens_example():
    """keras-io examples/structured_data/collaborative_filtering_movielens.py: ``RecommenderNet``,
    a subclassed model (no Input, built at its first call) with user and movie Embeddings
    (he_normal, an L2 regularizer: losses added per batch) and bias Embeddings, a
    ``tf.tensordot(user_vector, movie_vector, 2)`` (axes=2: the sum over the whole batch, as
    the example writes it) plus the biases, a sigmoid; BinaryCrossentropy, Adam(0.001); int64
    ``(user, movie)`` pairs and float64 normalized ratings; ``validation_data``; predict on one
    user's unwatched movies. ``tensordot(..., 2)`` sums over each replica's rows, so the
    reference is Keras's own fit of the same model moved into the same MirroredStrategy
    (``KerasUnder``).

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False``; MovieLens's 100836
    ratings -> 576 synthetic (512 training rows: 8 batches of 64), 610 users -> 40, 9724 movies
    -> 60, EMBEDDING_SIZE 50 -> 8, epochs 5 -> 2; ``strategy=`` passed to ``tfgpu.predict`` too
    (the batch-wide sum makes a prediction depend on how its batch is split over replicas). The
    predictions of the short last predict batch are not compared: tfgpu fills that batch up to
    its size (and drops the filling after), which a sum over the batch sees.
    """
    r = np.random.default_rng(11)
    num_users, num_movies = 40, 60
    x = np.stack([r.integers(0, num_users, 576), r.integers(0, num_movies, 576)], axis=1)
    rating = r.integers(1, 11, 576).astype(np.float32) / 2.0
    min_rating, max_rating = float(rating.min()), float(rating.max())
    y = (rating.astype(np.float64) - min_rating) / (max_rating - min_rating)
    train_indices = 512
    x_train, x_val, y_train, y_val = (
        x[:train_indices],
        x[train_indices:],
        y[:train_indices],
        y[train_indices:],
    )
    strategy = local_strategy(2)

    def example(api):
        keras.utils.set_random_seed(0)
        model = RecommenderNet(num_users, num_movies, EMBEDDING_SIZE)
        model.compile(
            loss=keras.losses.BinaryCrossentropy(),
            optimizer=keras.optimizers.Adam(learning_rate=0.001),
        )
        history = api.fit(
            model,
            x=x_train,
            y=y_train,
            batch_size=64,
            epochs=2,
            verbose=1,
            validation_data=(x_val, y_val),
            shuffle=False,
        )
        user_encoder = 3
        movies_not_watched = [[m] for m in range(num_movies) if m % 3]
        user_movie_array = np.hstack(([[user_encoder]] * len(movies_not_watched), movies_not_watched))
        ratings = api.predict(model, user_movie_array).flatten()
        return {"history": history.history, "weights": model.get_weights(), "ratings": ratings}

    expected = example(KerasUnder(strategy))
    assert set(expected["history"]) == {"loss", "val_loss"}
    got = example(tfgpu_with(strategy, everywhere=True))
    same(got, expected, keys=["history", "weights"])
    # predict's short last batch (8 of 40 rows): tfgpu fills it up to the batch (rows it drops
    # after) so that every replica has an equal, static share, and the batch-wide sum sees those
    # rows; the full batch agrees
    np.testing.assert_allclose(got["ratings"][:32], expected["ratings"][:32], rtol=1e-5, atol=1e-6)


# -- keras-io examples/generative/dcgan_overriding_train_step.py --------------------------------------
class DCGAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn
        self.d_loss_metric = keras.metrics.Mean(name="d_loss")
        self.g_loss_metric = keras.metrics.Mean(name="g_loss")

    @property
    def metrics(self):
        return [self.d_loss_metric, self.g_loss_metric]

    def train_step(self, real_images):
        # Sample random points in the latent space
        batch_size = tf.shape(real_images)[0]
        random_latent_vectors = tf.random.normal(shape=(batch_size, self.latent_dim))

        # Decode them to fake images
        generated_images = self.generator(random_latent_vectors)

        # Combine them with real images
        combined_images = tf.concat([generated_images, real_images], axis=0)

        # Assemble labels discriminating real from fake images
        labels = tf.concat([tf.ones((batch_size, 1)), tf.zeros((batch_size, 1))], axis=0)
        # Add random noise to the labels - important trick!
        labels += 0.05 * tf.random.uniform(tf.shape(labels))

        # Train the discriminator
        with tf.GradientTape() as tape:
            predictions = self.discriminator(combined_images)
            d_loss = self.loss_fn(labels, predictions)
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))  # noqa: B905

        # Sample random points in the latent space
        random_latent_vectors = tf.random.normal(shape=(batch_size, self.latent_dim))

        # Assemble labels that say "all real images"
        misleading_labels = tf.zeros((batch_size, 1))

        # Train the generator (note that we should *not* update the weights
        # of the discriminator)!
        with tf.GradientTape() as tape:
            predictions = self.discriminator(self.generator(random_latent_vectors))
            g_loss = self.loss_fn(misleading_labels, predictions)
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))  # noqa: B905

        # Update metrics
        self.d_loss_metric.update_state(d_loss)
        self.g_loss_metric.update_state(g_loss)
        return {
            "d_loss": self.d_loss_metric.result(),
            "g_loss": self.g_loss_metric.result(),
        }


class GANMonitor(keras.callbacks.Callback):
    def __init__(self, num_img=3, latent_dim=128):
        self.num_img = num_img
        self.latent_dim = latent_dim

    def on_epoch_end(self, epoch, logs=None):
        random_latent_vectors = tf.random.normal(shape=(self.num_img, self.latent_dim))
        generated_images = self.model.generator(random_latent_vectors)
        generated_images *= 255
        generated_images.numpy()
        for i in range(self.num_img):
            img = keras.preprocessing.image.array_to_img(generated_images[i])
            img.save("generated_img_%03d_%d.png" % (epoch, i))  # noqa: UP031


def test_dcgan_overriding_train_step_example(tmp_path, monkeypatch):
    """keras-io examples/generative/dcgan_overriding_train_step.py: a folder of images read by
    ``image_dataset_from_directory(label_mode=None)`` and mapped to [0, 1]; a ``GAN`` model with
    no ``call``, its own ``compile(d_optimizer, g_optimizer, loss_fn)`` keeping two Adams made
    outside any scope and two Mean metrics (a ``metrics`` property), a ``train_step`` drawing
    latent vectors and label noise with ``tf.random`` and stepping both optimizers; a
    ``GANMonitor`` callback (no ``super().__init__()``) saving generated images at each epoch's
    end. Built outside any scope.

    On one replica (OneDeviceStrategy, passed as ``strategy=``) tfgpu must give Keras's
    one-device history and weights exactly. On 2 replicas each replica draws its own latent
    vectors and noise, and Keras's own fit cannot run a model without ``call`` moved into a
    MirroredStrategy (it cannot build it), so no Keras run has tfgpu's 2-replica figures: there
    it must run the example as Keras runs it on one device: the same logs, finite, both
    sub-models and both optimizers stepped once a batch, the monitor's images saved.

    Lines changed: none (the strategy passed). Test-only: the CelebA folder is 64 synthetic
    64x64 PNGs; filters 64/128/128 -> 4/8/8 (discriminator) and 128/256/512 -> 8/8/8
    (generator), latent_dim 128 -> 16; ``GANMonitor(num_img=10)`` -> 2; the run in ``tmp_path``.
    """
    monkeypatch.chdir(tmp_path)
    (tmp_path / "celeba_gan").mkdir()
    r = np.random.default_rng(5)
    for i in range(64):
        pixels = r.integers(0, 256, size=(64, 64, 3), dtype=np.uint8)
        tf.io.write_file(f"celeba_gan/{i:06d}.png", tf.io.encode_png(pixels))

    def example(api):
        keras.utils.set_random_seed(0)
        dataset = keras.utils.image_dataset_from_directory(
            "celeba_gan", label_mode=None, image_size=(64, 64), batch_size=32
        )
        dataset = dataset.map(lambda x: x / 255.0)

        discriminator = keras.Sequential(
            [
                keras.Input(shape=(64, 64, 3)),
                layers.Conv2D(4, kernel_size=4, strides=2, padding="same"),
                layers.LeakyReLU(negative_slope=0.2),
                layers.Conv2D(8, kernel_size=4, strides=2, padding="same"),
                layers.LeakyReLU(negative_slope=0.2),
                layers.Conv2D(8, kernel_size=4, strides=2, padding="same"),
                layers.LeakyReLU(negative_slope=0.2),
                layers.Flatten(),
                layers.Dropout(0.2),
                layers.Dense(1, activation="sigmoid"),
            ],
            name="discriminator",
        )
        latent_dim = 16
        generator = keras.Sequential(
            [
                keras.Input(shape=(latent_dim,)),
                layers.Dense(8 * 8 * 8),
                layers.Reshape((8, 8, 8)),
                layers.Conv2DTranspose(8, kernel_size=4, strides=2, padding="same"),
                layers.LeakyReLU(negative_slope=0.2),
                layers.Conv2DTranspose(8, kernel_size=4, strides=2, padding="same"),
                layers.LeakyReLU(negative_slope=0.2),
                layers.Conv2DTranspose(8, kernel_size=4, strides=2, padding="same"),
                layers.LeakyReLU(negative_slope=0.2),
                layers.Conv2D(3, kernel_size=5, padding="same", activation="sigmoid"),
            ],
            name="generator",
        )

        epochs = 1  # In practice, use ~100 epochs

        gan = DCGAN(discriminator=discriminator, generator=generator, latent_dim=latent_dim)
        gan.compile(
            d_optimizer=keras.optimizers.Adam(learning_rate=0.0001),
            g_optimizer=keras.optimizers.Adam(learning_rate=0.0001),
            loss_fn=keras.losses.BinaryCrossentropy(),
        )
        initial = [w.copy() for w in gan.get_weights()]
        history = api.fit(
            gan, dataset, epochs=epochs, callbacks=[GANMonitor(num_img=2, latent_dim=latent_dim)]
        )
        moved = [float(np.abs(a - b).max()) for a, b in zip(gan.get_weights(), initial, strict=True)]
        steps = [int(gan.d_optimizer.iterations.numpy()), int(gan.g_optimizer.iterations.numpy())]
        saved = sorted(p.name for p in tmp_path.glob("generated_img_*.png"))
        return {"history": history.history, "weights": gan.get_weights(), "moved": moved, "steps": steps,
                "saved": saved}  # fmt: skip

    expected = example(KERAS)
    assert expected["steps"] == [2, 2] and min(expected["moved"]) > 0
    assert expected["saved"] == ["generated_img_000_0.png", "generated_img_000_1.png"]
    same(example(tfgpu_with(local_strategy(1))), expected)
    got = example(tfgpu_with(local_strategy(2)))
    assert set(got["history"]) == set(expected["history"]) == {"d_loss", "g_loss"}
    assert all(np.isfinite(v).all() for v in got["history"].values())
    assert got["steps"] == [2, 2] and min(got["moved"]) > 0
    assert got["saved"] == expected["saved"]


# -- keras-io examples/nlp/text_classification_with_transformer.py ------------------------------------
class TransformerBlock(layers.Layer):
    def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1):
        super().__init__()
        self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
        self.ffn = keras.Sequential(
            [
                layers.Dense(ff_dim, activation="relu"),
                layers.Dense(embed_dim),
            ]
        )
        self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
        self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
        self.dropout1 = layers.Dropout(rate)
        self.dropout2 = layers.Dropout(rate)

    def call(self, inputs):
        attn_output = self.att(inputs, inputs)
        attn_output = self.dropout1(attn_output)
        out1 = self.layernorm1(inputs + attn_output)
        ffn_output = self.ffn(out1)
        ffn_output = self.dropout2(ffn_output)
        return self.layernorm2(out1 + ffn_output)


class TokenAndPositionEmbedding(layers.Layer):
    def __init__(self, maxlen, vocab_size, embed_dim):
        super().__init__()
        self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
        self.pos_emb = layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

    def call(self, x):
        maxlen = ops.shape(x)[-1]
        positions = ops.arange(start=0, stop=maxlen, step=1)
        positions = self.pos_emb(positions)
        x = self.token_emb(x)
        return x + positions


def test_text_classification_with_transformer_example():
    """keras-io examples/nlp/text_classification_with_transformer.py (its Keras 3 version):
    ``TokenAndPositionEmbedding`` (a position Embedding looked up on ``ops.arange(maxlen)``, once
    per batch) and ``TransformerBlock`` (MultiHeadAttention, a Sequential feed-forward net,
    LayerNormalization, Dropout) in a functional model on float ``Input(shape=(maxlen,))`` fed
    int32 padded sequences; GlobalAveragePooling1D, Dropout, "adam",
    "sparse_categorical_crossentropy", ["accuracy"], ``validation_data``. Dropout's masks are
    per replica: the reference is Keras's own fit of the same model moved into the same
    MirroredStrategy (``KerasUnder``), whose Adam steps the position embedding's rows as tfgpu's
    does (one gradient slice per replica); tfgpu's replica proof names that cause.

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False``; IMDB's 25000 + 25000
    reviews -> 128 + 64 synthetic sequences (``pad_sequences`` of random lengths), vocab_size
    20000 -> 200, maxlen 200 -> 16.
    """
    r = np.random.default_rng(3)
    vocab_size = 200  # Only consider the top 20k words
    maxlen = 16  # Only consider the first 200 words of each movie review

    def reviews(n):
        return [list(r.integers(1, vocab_size, int(r.integers(4, 30)))) for _ in range(n)]

    x_train_lists, x_val_lists = reviews(128), reviews(64)
    y_train, y_val = r.integers(0, 2, 128), r.integers(0, 2, 64)
    strategy = local_strategy(2)

    def example(api):
        keras.utils.set_random_seed(0)
        x_train = keras.utils.pad_sequences(x_train_lists, maxlen=maxlen)
        x_val = keras.utils.pad_sequences(x_val_lists, maxlen=maxlen)

        embed_dim = 32  # Embedding size for each token
        num_heads = 2  # Number of attention heads
        ff_dim = 32  # Hidden layer size in feed forward network inside transformer

        inputs = layers.Input(shape=(maxlen,))
        embedding_layer = TokenAndPositionEmbedding(maxlen, vocab_size, embed_dim)
        x = embedding_layer(inputs)
        transformer_block = TransformerBlock(embed_dim, num_heads, ff_dim)
        x = transformer_block(x)
        x = layers.GlobalAveragePooling1D()(x)
        x = layers.Dropout(0.1)(x)
        x = layers.Dense(20, activation="relu")(x)
        x = layers.Dropout(0.1)(x)
        outputs = layers.Dense(2, activation="softmax")(x)

        model = keras.Model(inputs=inputs, outputs=outputs)

        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        history = api.fit(
            model, x_train, y_train, batch_size=32, epochs=2, validation_data=(x_val, y_val), shuffle=False
        )
        proof = getattr(getattr(history, "train_result", None), "proof", None)
        return {"history": history.history, "weights": model.get_weights(), "proof": proof}

    expected = example(KerasUnder(strategy))
    got = example(tfgpu_with(strategy))
    same(got, expected, keys=["history", "weights"])


# -- keras-io examples/keras_recipes/memory_efficient_embeddings.py -----------------------------------
def embedding_encoder(vocabulary, embedding_dim, num_oov_indices=0, name=None):
    return keras.Sequential(
        [
            StringLookup(vocabulary=vocabulary, mask_token=None, num_oov_indices=num_oov_indices),
            layers.Embedding(input_dim=len(vocabulary) + num_oov_indices, output_dim=embedding_dim),
        ],
        name=f"{name}_embedding" if name else None,
    )


class QREmbedding(keras.layers.Layer):
    def __init__(self, vocabulary, embedding_dim, num_buckets, name=None):
        super().__init__(name=name)
        self.num_buckets = num_buckets

        self.index_lookup = StringLookup(vocabulary=vocabulary, mask_token=None, num_oov_indices=0)
        self.q_embeddings = layers.Embedding(
            num_buckets,
            embedding_dim,
        )
        self.r_embeddings = layers.Embedding(
            num_buckets,
            embedding_dim,
        )

    def call(self, inputs):
        # Get the item index.
        embedding_index = self.index_lookup(inputs)
        # Get the quotient index.
        quotient_index = tf.math.floordiv(embedding_index, self.num_buckets)
        # Get the reminder index.
        remainder_index = tf.math.floormod(embedding_index, self.num_buckets)
        # Lookup the quotient_embedding using the quotient_index.
        quotient_embedding = self.q_embeddings(quotient_index)
        # Lookup the remainder_embedding using the remainder_index.
        remainder_embedding = self.r_embeddings(remainder_index)
        # Use multiplication as a combiner operation
        return quotient_embedding * remainder_embedding


class MDEmbedding(keras.layers.Layer):
    def __init__(self, blocks_vocabulary, blocks_embedding_dims, base_embedding_dim, name=None):
        super().__init__(name=name)
        self.num_blocks = len(blocks_vocabulary)
        self.base_embedding_dim = base_embedding_dim  # test-only: the example reads the global

        # Create vocab to block lookup.
        keys = []
        values = []
        for block_idx, block_vocab in enumerate(blocks_vocabulary):
            keys.extend(block_vocab)
            values.extend([block_idx] * len(block_vocab))
        self.vocab_to_block = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(keys, values), default_value=-1
        )

        self.block_embedding_encoders = []
        self.block_embedding_projectors = []

        # Create block embedding encoders and projectors.
        for idx in range(self.num_blocks):
            vocabulary = blocks_vocabulary[idx]
            embedding_dim = blocks_embedding_dims[idx]
            block_embedding_encoder = embedding_encoder(vocabulary, embedding_dim, num_oov_indices=1)
            self.block_embedding_encoders.append(block_embedding_encoder)
            if embedding_dim == base_embedding_dim:
                self.block_embedding_projectors.append(layers.Lambda(lambda x: x))
            else:
                self.block_embedding_projectors.append(layers.Dense(units=base_embedding_dim))

    def call(self, inputs):
        # Get block index for each input item.
        block_indicies = self.vocab_to_block.lookup(inputs)
        # Initialize output embeddings to zeros.
        embeddings = tf.zeros(shape=(tf.shape(inputs)[0], self.base_embedding_dim))
        # Generate embeddings from blocks.
        for idx in range(self.num_blocks):
            # Lookup embeddings from the current block.
            block_embeddings = self.block_embedding_encoders[idx](inputs)
            # Project embeddings to base_embedding_dim.
            block_embeddings = self.block_embedding_projectors[idx](block_embeddings)
            # Create a mask to filter out embeddings of items that do not belong to the current block.
            mask = tf.expand_dims(tf.cast(block_indicies == idx, tf.dtypes.float32), 1)
            # Set the embeddings for the items not belonging to the current block to zeros.
            block_embeddings = block_embeddings * mask
            # Add the block embeddings to the final embeddings.
            embeddings += block_embeddings

        return embeddings


def test_memory_efficient_embeddings_example(tmp_path, monkeypatch):
    """keras-io examples/keras_recipes/memory_efficient_embeddings.py: ratings written to "|"
    separated CSV files and read with ``tf.data.experimental.make_csv_dataset`` (string
    ``user_id`` / ``movie_id`` features, a float ``rating`` label; the training file shuffled);
    a baseline model (two ``Sequential`` s of ``StringLookup`` + ``Embedding`` on string
    ``Input(shape=())``, a ``Dot``, sigmoid * 5), then a memory-efficient one: ``QREmbedding``
    (a StringLookup, quotient and remainder indices, two Embeddings multiplied) and
    ``MDEmbedding`` (a ``tf.lookup.StaticHashTable`` made in ``__init__`` mapping each movie to
    its block, per-block lookups of mixed dimensions projected by Dense layers, masked and
    summed); each compiled in ``run_experiment`` (Adam, MeanSquaredError, MeanAbsoluteError
    named "mae") and fit with ``validation_data``. The reference is Keras's fit on one device:
    Keras's own fit cannot run these models moved into a MirroredStrategy (its StringLookup
    vocabularies fail in ``AddN`` on strings), tfgpu's must.

    Lines changed: none (the strategy passed). Test-only: 1M ratings -> 640 synthetic rows (85%
    train by the example's ``np.random.rand`` split), 6040 users -> 2500 (the quotient indices
    need users / (users // 50) <= users // 50), 3706 movies -> 60 with blocks [:400], [400:1700],
    [1700:] -> [:10], [10:30], [30:]; base_embedding_dim 64 -> 8 and block dims [64, 32, 16] ->
    [8, 4, 2]; num_epochs 3 -> 2; the CSV written without pandas (the same lines its
    ``to_csv(index=False, sep="|", header=False)`` writes); ``MDEmbedding`` keeps
    ``base_embedding_dim`` on ``self`` (the example reads the module's global); the run in
    ``tmp_path``; Keras's reference is told the training file's length (``assert_cardinality``):
    its own fit on a Dataset of unknown length steps the optimizer once more an epoch, and under
    Adam (bias correction by the step count) its weights then drifted 1e-3 from the same run
    told the length, and from tfgpu's; the training file read with ``shuffle=False`` (a Dataset
    reshuffled each epoch is read in another order by Keras's own fit than its iterations give:
    test_guides' ``test_training_guide_tf_data_reshuffled_each_epoch``; with the example's
    shuffle the weights differ by one Adam step, 1.3e-3, in both runs' orders).
    """
    monkeypatch.chdir(tmp_path)
    r = np.random.default_rng(8)
    n_ratings, n_users, n_movies = 640, 2500, 60
    user_ids = [f"user_{i}" for i in r.integers(1, n_users + 1, n_ratings)]
    user_ids[: n_users // 4] = [f"user_{i}" for i in range(1, n_users // 4 + 1)]
    movie_ids = [f"movie_{i}" for i in (r.zipf(1.5, n_ratings) % n_movies) + 1]
    ratings = [float(v) for v in r.integers(1, 6, n_ratings)]
    csv_header = ["user_id", "movie_id", "rating"]
    user_vocabulary = list(dict.fromkeys(user_ids + [f"user_{i}" for i in range(1, n_users + 1)]))
    movie_vocabulary = list(dict.fromkeys(movie_ids + [f"movie_{i}" for i in range(1, n_movies + 1)]))

    np.random.seed(0)
    random_selection = np.random.rand(n_ratings) <= 0.85
    for path, keep in (("train_data.csv", random_selection), ("eval_data.csv", ~random_selection)):
        rows = [f"{u}|{m}|{v}" for u, m, v, k in zip(user_ids, movie_ids, ratings, keep, strict=True) if k]
        (tmp_path / path).write_text("\n".join(rows) + "\n")

    target_feature_name = "rating"
    learning_rate = 0.001
    batch_size = 128
    num_epochs = 2
    base_embedding_dim = 8

    counts = {m: movie_ids.count(m) for m in movie_vocabulary}
    sorted_movie_vocabulary = sorted(movie_vocabulary, key=lambda m: -counts[m])
    movie_blocks_vocabulary = [
        sorted_movie_vocabulary[:10],  # high popularity movies block
        sorted_movie_vocabulary[10:30],  # normal popularity movies block
        sorted_movie_vocabulary[30:],  # low popularity movies block
    ]
    movie_blocks_embedding_dims = [8, 4, 2]
    user_embedding_num_buckets = len(user_vocabulary) // 50
    assert math.ceil(len(user_vocabulary) / user_embedding_num_buckets) <= user_embedding_num_buckets
    strategy = local_strategy(2)

    def get_dataset_from_csv(csv_file_path, batch_size=128, shuffle=True):
        return tf.data.experimental.make_csv_dataset(
            csv_file_path,
            batch_size=batch_size,
            column_names=csv_header,
            label_name=target_feature_name,
            num_epochs=1,
            header=False,
            field_delim="|",
            shuffle=shuffle,
        )

    def batches(path):
        with open(path) as rows:
            return math.ceil(sum(1 for _ in rows) / batch_size)

    def example(api):
        def run_experiment(model):
            # Compile the model.
            model.compile(
                optimizer=keras.optimizers.Adam(learning_rate),
                loss=keras.losses.MeanSquaredError(),
                metrics=[keras.metrics.MeanAbsoluteError(name="mae")],
            )
            # Read the training data.
            train_dataset = get_dataset_from_csv("train_data.csv", batch_size, shuffle=False)  # test-only
            # Read the test data.
            eval_dataset = get_dataset_from_csv("eval_data.csv", batch_size, shuffle=False)
            if api is KERAS:  # test-only: the length told (see the docstring)
                train_dataset = train_dataset.apply(
                    tf.data.experimental.assert_cardinality(batches("train_data.csv"))
                )
            # Fit the model with the training data.
            history = api.fit(
                model,
                train_dataset,
                epochs=num_epochs,
                validation_data=eval_dataset,
            )
            return history

        def create_baseline_model():
            # Receive the user as an input.
            user_input = layers.Input(name="user_id", shape=(), dtype=tf.string)
            # Get user embedding.
            user_embedding = embedding_encoder(
                vocabulary=user_vocabulary, embedding_dim=base_embedding_dim, name="user"
            )(user_input)

            # Receive the movie as an input.
            movie_input = layers.Input(name="movie_id", shape=(), dtype=tf.string)
            # Get embedding.
            movie_embedding = embedding_encoder(
                vocabulary=movie_vocabulary, embedding_dim=base_embedding_dim, name="movie"
            )(movie_input)

            # Compute dot product similarity between user and movie embeddings.
            logits = layers.Dot(axes=1, name="dot_similarity")([user_embedding, movie_embedding])
            # Convert to rating scale.
            prediction = keras.activations.sigmoid(logits) * 5
            # Create the model.
            model = keras.Model(inputs=[user_input, movie_input], outputs=prediction, name="baseline_model")
            return model

        def create_memory_efficient_model():
            # Take the user as an input.
            user_input = layers.Input(name="user_id", shape=(), dtype=tf.string)
            # Get user embedding.
            user_embedding = QREmbedding(
                vocabulary=user_vocabulary,
                embedding_dim=base_embedding_dim,
                num_buckets=user_embedding_num_buckets,
                name="user_embedding",
            )(user_input)

            # Take the movie as an input.
            movie_input = layers.Input(name="movie_id", shape=(), dtype=tf.string)
            # Get embedding.
            movie_embedding = MDEmbedding(
                blocks_vocabulary=movie_blocks_vocabulary,
                blocks_embedding_dims=movie_blocks_embedding_dims,
                base_embedding_dim=base_embedding_dim,
                name="movie_embedding",
            )(movie_input)

            # Compute dot product similarity between user and movie embeddings.
            logits = layers.Dot(axes=1, name="dot_similarity")([user_embedding, movie_embedding])
            # Convert to rating scale.
            prediction = keras.activations.sigmoid(logits) * 5
            # Create the model.
            model = keras.Model(inputs=[user_input, movie_input], outputs=prediction, name="baseline_model")
            return model

        keras.utils.set_random_seed(0)
        baseline_model = create_baseline_model()
        history = run_experiment(baseline_model)
        results = {"history_baseline": history.history, "weights_baseline": baseline_model.get_weights()}

        memory_efficient_model = create_memory_efficient_model()
        history = run_experiment(memory_efficient_model)
        results["history_efficient"] = history.history
        results["weights_efficient"] = memory_efficient_model.get_weights()
        return results

    expected = example(KERAS)
    assert set(expected["history_efficient"]) == {"loss", "mae", "val_loss", "val_mae"}
    same(example(tfgpu_with(strategy)), expected)


# -- keras-io examples/structured_data/regression_boston_housing.py -----------------------------------
def test_regression_boston_housing_example():
    """keras-io examples/structured_data/regression_boston_housing.py: ``build_model()`` a
    Sequential whose first Dense takes ``input_shape=[13]`` (Keras 3 warns and builds it),
    Dense(32, relu) x2, Dense(1), compiled with "mse", "adam", ["mae", "mse"]; fit with
    ``batch_size=32``, ``validation_split=0.3`` and ``EarlyStopping(monitor="val_loss",
    patience=10)``; ``loss, mae, mse = model.evaluate(...)``; ``model.predict(x_test).flatten()``.
    The training split (247 rows) ends in a batch of 23 rows, 12 and 11 on the 2 replicas: each
    replica's loss weighed by its share of the rows.

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False``; Boston housing's 506
    rows (70:30, ``seed=42``) are synthetic of its shapes (354 training rows of 13 float64
    features, float64 prices); epochs 100 -> 4; the plots left out.
    """
    r = np.random.default_rng(42)
    features = r.random((506, 13)) * np.linspace(1, 100, 13)
    prices = features @ r.random(13) / 50 + r.normal(size=506)
    x_train, y_train, x_test, y_test = features[:354], prices[:354], features[354:], prices[354:]
    strategy = local_strategy(2)

    def example(api):
        keras.utils.set_random_seed(0)

        def build_model():
            model = keras.Sequential(
                [
                    # input_shape is number of features
                    layers.Dense(32, activation="relu", input_shape=[x_train.shape[1]]),
                    layers.Dense(32, activation="relu"),
                    layers.Dense(1),
                ]
            )

            # The loss function is mean squared error
            # The metrics is Mean Absolute Error and Mean Squared Error
            model.compile(loss="mse", optimizer="adam", metrics=["mae", "mse"])
            return model

        # Build the model
        model = build_model()

        # Use early stopping to break the training if the val_loss doesn't changed in 10 epochs
        early_stop = keras.callbacks.EarlyStopping(monitor="val_loss", patience=10)

        history = api.fit(
            model,
            x_train,
            y_train,
            batch_size=32,
            epochs=4,
            verbose=0,
            validation_split=0.3,
            callbacks=[early_stop],
            shuffle=False,
        )
        # Test Loss
        loss, mae, mse = api.evaluate(model, x_test, y_test, verbose=2)
        prediction = api.predict(model, x_test).flatten()
        return {
            "history": history.history,
            "weights": model.get_weights(),
            "test": [loss, mae, mse],
            "prediction": prediction,
        }

    expected = example(KERAS)
    assert set(expected["history"]) == {"loss", "mae", "mse", "val_loss", "val_mae", "val_mse"}
    same(example(tfgpu_with(strategy, everywhere=True)), expected)

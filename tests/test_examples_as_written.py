"""keras-io's examples (keras-team/keras-io, ``examples/...``), run on tfgpu as their authors wrote them.

Each test is one example not already run by ``test_guides.py`` or ``test_as_written.py``, shrunk to
a few seconds on synthetic data of the example's shapes and dtypes (no downloads) and written as
the example writes it: the model built where the example builds it, outside any strategy's scope,
with its custom layers, subclassed models, ``compile`` / ``compute_loss`` / ``train_step``
overrides, callbacks and data pipelines. The only change a user makes is ``model.fit(...)`` ->
``tfgpu.fit(model, ...)`` (``evaluate`` and ``predict`` likewise), with the strategy passed
(``strategy=``: 2 replicas here). Only sizes shrink (rows, units, filters, epochs); each docstring
names the example and every line that differs from it.

Each example runs twice through the same function, and the two runs must agree (histories to rel
1e-5, weights, evaluate and predict; ``support.parity.same``): once with Keras's own methods, on
one device from the same initial weights (``keras.utils.set_random_seed`` before anything is
built; ``shuffle=False`` for arrays), once with tfgpu's on 2 replicas. Where a figure is per
replica (Dropout's masks, random augmentation layers, a loss added with ``add_loss``, which Keras
scales by 1/replicas), the reference is Keras's own fit of the same model moved into the same
2-replica MirroredStrategy in place (``support.parity.KerasUnder``), and the docstring says so.

Row counts mostly fill every training batch, as they were chosen when tfgpu dropped a short last
batch of arrays (it trains it now, as Keras does: docs/from-model-fit.md). A name the
example rebinds from data both runs share (``x_train = x_train.astype(...)``) is given a short
twin (``x_tr``) inside the run; plots and ``summary()`` calls are left out, and what a run
returns for comparison is collected in a dict.

Found here: a dataset whose short last batch splits unevenly over the replicas trained to other
weights than one device (each replica's mean scaled by 1/replicas, not by its share of the rows,
as in Keras's own ``fit``; fixed in ``tfgpu/train/pieces/losses.py``); Keras's own ``predict`` of a model with
BatchNormalization under a MirroredStrategy fails on one row (replica 1 gets an empty batch),
tfgpu's does not.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import layers, ops
from tensorflow import data as tf_data
from tensorflow.random import gamma as tf_random_gamma

import guides
from support.parity import KERAS, KerasUnder, same, tfgpu_with
from support.replicas import local_strategy


# -- keras-io examples/keras_recipes/antirectifier.py -------------------------------------------------
class Antirectifier(layers.Layer):
    def __init__(self, initializer="he_normal", **kwargs):
        super().__init__(**kwargs)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        output_dim = input_shape[-1]
        self.kernel = self.add_weight(
            shape=(output_dim * 2, output_dim),
            initializer=self.initializer,
            name="kernel",
            trainable=True,
        )

    def call(self, inputs):
        inputs -= ops.mean(inputs, axis=-1, keepdims=True)
        pos = ops.relu(inputs)
        neg = ops.relu(-inputs)
        concatenated = ops.concatenate([pos, neg], axis=-1)
        mixed = ops.matmul(concatenated, self.kernel)
        return mixed

    def get_config(self):
        # Implement get_config to enable serialization. This is optional.
        base_config = super().get_config()
        config = {"initializer": keras.initializers.serialize(self.initializer)}
        return dict(list(base_config.items()) + list(config.items()))


@pytest.mark.heavy
def test_antirectifier_example():
    """keras-io examples/keras_recipes/antirectifier.py: a custom layer (``Antirectifier``: its
    weight made in ``build`` from the input's last dimension, ``inputs -= ...`` in ``call``, an
    initializer kept as an object, a ``get_config``) twice in a Sequential with Dropout(0.5),
    SparseCategoricalCrossentropy(from_logits=True), RMSprop, ``validation_split=0.15``, evaluate.
    Built outside any scope; Dropout's masks are per replica, so the reference is Keras's own fit
    of the same model moved into the same MirroredStrategy (``KerasUnder``).

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False``; 60000 digits -> 640
    (544 training rows: 17 batches of 32), Dense 256 -> 16, batch_size 128 -> 32, epochs 20 -> 2.
    """
    (x_train, y_train), (x_test, y_test) = guides.mnist_images(train=640, test=64)
    strategy = local_strategy(2)

    def example(api):
        keras.utils.set_random_seed(0)
        # Training parameters
        batch_size = 32
        num_classes = 10  # noqa: F841 (the example's, unused there too)
        epochs = 2

        # The data, split between train and test sets
        x_tr = x_train.reshape(-1, 784)
        x_te = x_test.reshape(-1, 784)
        x_tr = x_tr.astype("float32")
        x_te = x_te.astype("float32")
        x_tr /= 255
        x_te /= 255

        # Build the model
        model = keras.Sequential(
            [
                keras.Input(shape=(784,)),
                layers.Dense(16),
                Antirectifier(),
                layers.Dense(16),
                Antirectifier(),
                layers.Dropout(0.5),
                layers.Dense(10),
            ]
        )

        # Compile the model
        model.compile(
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            optimizer=keras.optimizers.RMSprop(),
            metrics=[keras.metrics.SparseCategoricalAccuracy()],
        )

        # Train the model
        history = api.fit(
            model, x_tr, y_train, batch_size=batch_size, epochs=epochs, validation_split=0.15, shuffle=False
        )

        # Test the model
        score = api.evaluate(model, x_te, y_test)
        return {"history": history.history, "score": score, "weights": model.get_weights()}

    expected = example(KerasUnder(strategy))
    assert len(expected["history"]["loss"]) == 2
    same(example(tfgpu_with(strategy)), expected)


# -- keras-io examples/vision/knowledge_distillation.py ------------------------------------------------
class Distiller(keras.Model):
    def __init__(self, student, teacher):
        super().__init__()
        self.teacher = teacher
        self.student = student

    def compile(
        self,
        optimizer,
        metrics,
        student_loss_fn,
        distillation_loss_fn,
        alpha=0.1,
        temperature=3,
    ):
        """Configure the distiller.

        Args:
            optimizer: Keras optimizer for the student weights
            metrics: Keras metrics for evaluation
            student_loss_fn: Loss function of difference between student
                predictions and ground-truth
            distillation_loss_fn: Loss function of difference between soft
                student predictions and soft teacher predictions
            alpha: weight to student_loss_fn and 1-alpha to distillation_loss_fn
            temperature: Temperature for softening probability distributions.
                Larger temperature gives softer distributions.
        """
        super().compile(optimizer=optimizer, metrics=metrics)
        self.student_loss_fn = student_loss_fn
        self.distillation_loss_fn = distillation_loss_fn
        self.alpha = alpha
        self.temperature = temperature

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, allow_empty=False):
        teacher_pred = self.teacher(x, training=False)
        student_loss = self.student_loss_fn(y, y_pred)

        distillation_loss = self.distillation_loss_fn(
            ops.softmax(teacher_pred / self.temperature, axis=1),
            ops.softmax(y_pred / self.temperature, axis=1),
        ) * (self.temperature**2)

        loss = self.alpha * student_loss + (1 - self.alpha) * distillation_loss
        return loss

    def call(self, x):
        return self.student(x)


@pytest.mark.heavy
def test_knowledge_distillation_example():
    """keras-io examples/vision/knowledge_distillation.py (its Keras 3 version): a teacher trained
    with fit and evaluated, then a subclassed ``Distiller`` holding the trained teacher and an
    untrained student, with its own ``compile`` signature (two loss functions, alpha,
    temperature), a ``compute_loss`` override that calls the frozen teacher on ``x`` and mixes
    the student's loss with a KL divergence of softened logits, and ``call`` -> the student; fit,
    evaluate; then ``student_scratch`` (``keras.models.clone_model(student)`` made before any
    training) compiled, fit and evaluated. All built outside any scope; the teacher is moved into
    the strategy by its own fit, the distiller then holds variables from both sides. No figure
    is per replica: the reference is Keras on one device.

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False``; 60000 digits -> 256;
    teacher filters 256/512 -> 8/16, student 16/32 -> 4/8; epochs 5/3/3 -> 1/2/2.
    """
    (x_train, y_train), (x_test, y_test) = guides.mnist_images(train=256, test=64)

    def example(api):
        keras.utils.set_random_seed(0)
        # Create the teacher
        teacher = keras.Sequential(
            [
                keras.Input(shape=(28, 28, 1)),
                layers.Conv2D(8, (3, 3), strides=(2, 2), padding="same"),
                layers.LeakyReLU(negative_slope=0.2),
                layers.MaxPooling2D(pool_size=(2, 2), strides=(1, 1), padding="same"),
                layers.Conv2D(16, (3, 3), strides=(2, 2), padding="same"),
                layers.Flatten(),
                layers.Dense(10),
            ],
            name="teacher",
        )

        # Create the student
        student = keras.Sequential(
            [
                keras.Input(shape=(28, 28, 1)),
                layers.Conv2D(4, (3, 3), strides=(2, 2), padding="same"),
                layers.LeakyReLU(negative_slope=0.2),
                layers.MaxPooling2D(pool_size=(2, 2), strides=(1, 1), padding="same"),
                layers.Conv2D(8, (3, 3), strides=(2, 2), padding="same"),
                layers.Flatten(),
                layers.Dense(10),
            ],
            name="student",
        )

        # Clone student for later comparison
        student_scratch = keras.models.clone_model(student)

        # Prepare the train and test dataset.
        batch_size = 64  # noqa: F841 (the example's, unused there too: fit takes Keras's 32)

        # Normalize data
        x_tr = x_train.astype("float32") / 255.0
        x_tr = np.reshape(x_tr, (-1, 28, 28, 1))

        x_te = x_test.astype("float32") / 255.0
        x_te = np.reshape(x_te, (-1, 28, 28, 1))

        # Train teacher as usual
        teacher.compile(
            optimizer=keras.optimizers.Adam(),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[keras.metrics.SparseCategoricalAccuracy()],
        )

        # Train and evaluate teacher on data.
        runs = {"history_teacher": api.fit(teacher, x_tr, y_train, epochs=1, shuffle=False).history}
        runs["teacher"] = api.evaluate(teacher, x_te, y_test)

        # Initialize and compile distiller
        distiller = Distiller(student=student, teacher=teacher)
        distiller.compile(
            optimizer=keras.optimizers.Adam(),
            metrics=[keras.metrics.SparseCategoricalAccuracy()],
            student_loss_fn=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            distillation_loss_fn=keras.losses.KLDivergence(),
            alpha=0.1,
            temperature=10,
        )

        # Distill teacher to student
        runs["history_distiller"] = api.fit(distiller, x_tr, y_train, epochs=2, shuffle=False).history

        # Evaluate student on test dataset
        runs["distilled"] = api.evaluate(distiller, x_te, y_test)

        # Train student as doen usually
        student_scratch.compile(
            optimizer=keras.optimizers.Adam(),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[keras.metrics.SparseCategoricalAccuracy()],
        )

        # Train and evaluate student trained from scratch.
        runs["history_scratch"] = api.fit(student_scratch, x_tr, y_train, epochs=2, shuffle=False).history
        runs["scratch"] = api.evaluate(student_scratch, x_te, y_test)
        runs["weights_teacher"] = teacher.get_weights()
        runs["weights_student"] = student.get_weights()
        runs["weights_scratch"] = student_scratch.get_weights()
        return runs

    strategy = local_strategy(2)
    expected = example(KERAS)
    assert expected["weights_student"][0].shape == (3, 3, 1, 4)
    same(example(tfgpu_with(strategy)), expected)


# -- keras-io examples/keras_recipes/endpoint_layer_pattern.py -----------------------------------------
class LogisticEndpoint(keras.layers.Layer):
    def __init__(self, name=None):
        super().__init__(name=name)
        self.loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
        self.accuracy_metric = keras.metrics.BinaryAccuracy(name="accuracy")

    def call(self, logits, targets=None, sample_weight=None):
        if targets is not None:
            # Compute the training-time loss value and add it
            # to the layer using `self.add_loss()`.
            loss = self.loss_fn(targets, logits, sample_weight)
            self.add_loss(loss)

            # Log the accuracy as a metric (we could log arbitrary metrics,
            # including different metrics for training and inference.)
            self.accuracy_metric.update_state(targets, logits, sample_weight)

        # Return the inference-time prediction tensor (for `.predict()`).
        return tf.nn.softmax(logits)


class LogReg(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)
        self.logistic_endpoint = LogisticEndpoint()

    def call(self, inputs):
        # Note that all inputs should be in the first argument
        # since we want to be able to call `model.fit(inputs)`.
        logits = self.dense(inputs["inputs"])
        preds = self.logistic_endpoint(
            logits=logits,
            targets=inputs["targets"],
            sample_weight=inputs["sample_weight"],
        )
        return preds


@pytest.mark.heavy
def test_endpoint_layer_pattern_example():
    """keras-io examples/keras_recipes/endpoint_layer_pattern.py: an endpoint layer that takes the
    targets and sample weights as inputs, computes its loss with ``add_loss`` and updates its own
    ``BinaryAccuracy`` in ``call``; a functional model of three named inputs compiled with an
    optimizer only, ``fit(data)`` on a dict of float64 arrays with no y; the inference model
    (the endpoint without targets) given its weights with ``set_weights`` and used with
    ``predict``; then a subclassed ``LogReg`` (unbuilt until fit) on the same kind of dict.
    Under a strategy Keras scales an ``add_loss`` term by 1/replicas, so the reference is Keras's
    own fit of the same models moved into the same MirroredStrategy (``KerasUnder``).

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False``; the data from a
    seeded generator (``np.random.random`` in the example); 1000 rows -> 64, 764 features -> 16.
    """
    r = guides.rng(40)
    arrays = [
        {
            "inputs": r.random((64, 16)),
            "targets": r.random((64, 1)),
            "sample_weight": r.random((64, 1)),
        }
        for _ in range(2)
    ]
    new_inputs = r.random((64, 16))
    strategy = local_strategy(2)

    def example(api):
        keras.utils.set_random_seed(0)
        runs = {}
        inputs = keras.Input((16,), name="inputs")
        logits = keras.layers.Dense(1)(inputs)
        targets = keras.Input((1,), name="targets")
        sample_weight = keras.Input((1,), name="sample_weight")
        preds = LogisticEndpoint()(logits, targets, sample_weight)
        model = keras.Model([inputs, targets, sample_weight], preds)

        data = arrays[0]

        model.compile(keras.optimizers.Adam(1e-3))
        runs["history_functional"] = api.fit(model, data, epochs=2, shuffle=False).history
        runs["weights_functional"] = model.get_weights()

        inputs = keras.Input((16,), name="inputs")
        logits = keras.layers.Dense(1)(inputs)
        preds = LogisticEndpoint()(logits, targets=None, sample_weight=None)
        inference_model = keras.Model(inputs, preds)

        inference_model.set_weights(model.get_weights())

        preds = api.predict(inference_model, new_inputs)
        runs["preds"] = preds  # a softmax over one logit: 1.0 everywhere, as in the example

        model = LogReg()
        data = arrays[1]

        model.compile(keras.optimizers.Adam(1e-3))
        runs["history_subclassed"] = api.fit(model, data, epochs=2, shuffle=False).history
        runs["weights_subclassed"] = model.get_weights()
        return runs

    expected = example(KerasUnder(strategy))
    assert set(expected["history_functional"]) == {"loss", "accuracy"}
    same(example(tfgpu_with(strategy, everywhere=True)), expected)


# -- keras-io examples/vision/autoencoder.py -----------------------------------------------------------
def preprocess(array):
    """Normalizes the supplied array and reshapes it."""
    array = array.astype("float32") / 255.0
    array = np.reshape(array, (len(array), 28, 28, 1))
    return array


def noise(array):
    """Adds random noise to each image in the supplied array."""
    noise_factor = 0.4
    noisy_array = array + noise_factor * np.random.normal(loc=0.0, scale=1.0, size=array.shape)

    return np.clip(noisy_array, 0.0, 1.0)


@pytest.mark.heavy
def test_denoising_autoencoder_example():
    """keras-io examples/vision/autoencoder.py: a functional convolutional autoencoder
    (Conv2D / MaxPooling2D, then strided Conv2DTranspose, a sigmoid Conv2D), its input named
    ``input``, binary crossentropy against the images themselves; fit with
    ``validation_data=(test_data, test_data)``, predict, then fit again on noisy images (float64,
    from ``np.random.normal`` after the seed) against the clean ones, predict on the noisy test
    images. No figure is per replica: the reference is Keras on one device.

    Lines changed: none (the strategy passed). Test-only: ``shuffle=True`` -> ``shuffle=False``;
    60000 digits -> 128 (10000 test -> 64), filters 32 -> 4, batch_size 128 -> 32, epochs 50/100
    -> 2/1.
    """
    (train_raw, _), (test_raw, _) = guides.mnist_images(train=128, test=64)

    def example(api):
        keras.utils.set_random_seed(0)
        # Normalize and reshape the data
        train_data = preprocess(train_raw)
        test_data = preprocess(test_raw)

        # Create a copy of the data with added noise
        noisy_train_data = noise(train_data)
        noisy_test_data = noise(test_data)

        input = layers.Input(shape=(28, 28, 1))

        # Encoder
        x = layers.Conv2D(4, (3, 3), activation="relu", padding="same")(input)
        x = layers.MaxPooling2D((2, 2), padding="same")(x)
        x = layers.Conv2D(4, (3, 3), activation="relu", padding="same")(x)
        x = layers.MaxPooling2D((2, 2), padding="same")(x)

        # Decoder
        x = layers.Conv2DTranspose(4, (3, 3), strides=2, activation="relu", padding="same")(x)
        x = layers.Conv2DTranspose(4, (3, 3), strides=2, activation="relu", padding="same")(x)
        x = layers.Conv2D(1, (3, 3), activation="sigmoid", padding="same")(x)

        # Autoencoder
        autoencoder = keras.Model(input, x)
        autoencoder.compile(optimizer="adam", loss="binary_crossentropy")

        history = api.fit(
            autoencoder,
            x=train_data,
            y=train_data,
            epochs=2,
            batch_size=32,
            shuffle=False,
            validation_data=(test_data, test_data),
        )
        predictions = api.predict(autoencoder, test_data)
        denoising = api.fit(
            autoencoder,
            x=noisy_train_data,
            y=train_data,
            epochs=1,
            batch_size=32,
            shuffle=False,
            validation_data=(noisy_test_data, test_data),
        )
        denoised = api.predict(autoencoder, noisy_test_data)
        return {"history": history.history, "predictions": predictions, "weights": autoencoder.get_weights(),
                "history_denoising": denoising.history, "denoised": denoised}  # fmt: skip

    expected = example(KERAS)
    assert expected["denoised"].shape == (64, 28, 28, 1)
    same(example(tfgpu_with(local_strategy(2), everywhere=True)), expected)


# -- keras-io examples/nlp/addition_rnn.py -------------------------------------------------------------
class CharacterTable:
    """Given a set of characters:
    + Encode them to a one-hot integer representation
    + Decode the one-hot or integer representation to their character output
    + Decode a vector of probabilities to their character output
    """

    def __init__(self, chars):
        """Initialize character table.
        # Arguments
            chars: Characters that can appear in the input.
        """
        self.chars = sorted(set(chars))
        self.char_indices = dict((c, i) for i, c in enumerate(self.chars))
        self.indices_char = dict((i, c) for i, c in enumerate(self.chars))

    def encode(self, C, num_rows):
        """One-hot encode given string C.
        # Arguments
            C: string, to be encoded.
            num_rows: Number of rows in the returned one-hot encoding. This is
                used to keep the # of rows for each data the same.
        """
        x = np.zeros((num_rows, len(self.chars)))
        for i, c in enumerate(C):
            x[i, self.char_indices[c]] = 1
        return x

    def decode(self, x, calc_argmax=True):
        """Decode the given vector or 2D array to their character output.
        # Arguments
            x: A vector or a 2D array of probabilities or one-hot representations;
                or a vector of character indices (used with `calc_argmax=False`).
            calc_argmax: Whether to find the character index with maximum
                probability, defaults to `True`.
        """
        if calc_argmax:
            x = x.argmax(axis=-1)
        return "".join(self.indices_char[x] for x in x)


@pytest.mark.heavy
def test_addition_rnn_example():
    """keras-io examples/nlp/addition_rnn.py: one-hot questions and answers as **bool** arrays
    (``np.zeros(..., dtype=bool)``), a Sequential encoder LSTM -> RepeatVector -> decoder LSTM
    (``return_sequences``) -> a softmax Dense over every time step, categorical crossentropy;
    ``fit(..., epochs=1, validation_data=...)`` called once per iteration of the example's own
    loop, each followed by ``predict`` on single validation rows (one row on two replicas)
    decoded back to digits. No figure is per replica: the reference is Keras on one device.

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False``; TRAINING_SIZE 50000
    -> 320 (288 training rows: 9 batches of 32), LSTM 128 -> 8 units, iterations 29 -> 2, 10
    predicted rows an iteration -> 2.
    """
    # Parameters for the model and dataset.
    TRAINING_SIZE = 320
    DIGITS = 3
    REVERSE = True

    # Maximum length of input is 'int + int' (e.g., '345+678'). Maximum length of
    # int is DIGITS.
    MAXLEN = DIGITS + 1 + DIGITS

    def example(api):
        keras.utils.set_random_seed(0)  # np.random's too: the questions and the rows shown
        # All the numbers, plus sign and space for padding.
        chars = "0123456789+ "
        ctable = CharacterTable(chars)

        questions = []
        expected = []
        seen = set()
        while len(questions) < TRAINING_SIZE:
            f = lambda: int(  # noqa: E731
                "".join(np.random.choice(list("0123456789")) for i in range(np.random.randint(1, DIGITS + 1)))
            )
            a, b = f(), f()
            # Skip any addition questions we've already seen
            # Also skip any such that x+Y == Y+x (hence the sorting).
            key = tuple(sorted((a, b)))
            if key in seen:
                continue
            seen.add(key)
            # Pad the data with spaces such that it is always MAXLEN.
            q = "{}+{}".format(a, b)  # noqa: UP032
            query = q + " " * (MAXLEN - len(q))
            ans = str(a + b)
            # Answers can be of maximum size DIGITS + 1.
            ans += " " * (DIGITS + 1 - len(ans))
            if REVERSE:
                # Reverse the query, e.g., '12+345  ' becomes '  543+21'. (Note the
                # space used for padding.)
                query = query[::-1]
            questions.append(query)
            expected.append(ans)

        x = np.zeros((len(questions), MAXLEN, len(chars)), dtype=bool)
        y = np.zeros((len(questions), DIGITS + 1, len(chars)), dtype=bool)
        for i, sentence in enumerate(questions):
            x[i] = ctable.encode(sentence, MAXLEN)
        for i, sentence in enumerate(expected):
            y[i] = ctable.encode(sentence, DIGITS + 1)

        # Shuffle (x, y) in unison as the later parts of x will almost all be larger
        # digits.
        indices = np.arange(len(y))
        np.random.shuffle(indices)
        x = x[indices]
        y = y[indices]

        # Explicitly set apart 10% for validation data that we never train over.
        split_at = len(x) - len(x) // 10
        (x_train, x_val) = x[:split_at], x[split_at:]
        (y_train, y_val) = y[:split_at], y[split_at:]

        num_layers = 1  # Try to add more LSTM layers!

        model = keras.Sequential()
        # "Encode" the input sequence using a LSTM, producing an output of size 128.
        # Note: In a situation where your input sequences have a variable length,
        # use input_shape=(None, num_feature).
        model.add(layers.Input((MAXLEN, len(chars))))
        model.add(layers.LSTM(8))
        # As the decoder RNN's input, repeatedly provide with the last output of
        # RNN for each time step. Repeat 'DIGITS + 1' times as that's the maximum
        # length of output, e.g., when DIGITS=3, max output is 999+999=1998.
        model.add(layers.RepeatVector(DIGITS + 1))
        # The decoder RNN could be multiple layers stacked or a single layer.
        for _ in range(num_layers):
            # By setting return_sequences to True, return not only the last output but
            # all the outputs so far in the form of (num_samples, timesteps,
            # output_dim). This is necessary as TimeDistributed in the below expects
            # the first dimension to be the timesteps.
            model.add(layers.LSTM(8, return_sequences=True))

        # Apply a dense layer to the every temporal slice of an input. For each of step
        # of the output sequence, decide which character should be chosen.
        model.add(layers.Dense(len(chars), activation="softmax"))
        model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])

        # Training parameters.
        epochs = 3
        batch_size = 32

        # Formatting characters for results display.
        green_color = "\033[92m"
        red_color = "\033[91m"
        end_char = "\033[0m"

        runs = {}
        # Train the model each generation and show predictions against the validation
        # dataset.
        for epoch in range(1, epochs):
            runs[f"history_{epoch}"] = api.fit(
                model,
                x_train,
                y_train,
                batch_size=batch_size,
                epochs=1,
                validation_data=(x_val, y_val),
                shuffle=False,
            ).history
            # Select 10 samples from the validation set at random so we can visualize
            # errors.
            for i in range(2):
                ind = np.random.randint(0, len(x_val))
                rowx, rowy = x_val[np.array([ind])], y_val[np.array([ind])]
                preds = np.argmax(api.predict(model, rowx, verbose=0), axis=-1)
                q = ctable.decode(rowx[0])
                correct = ctable.decode(rowy[0])
                guess = ctable.decode(preds[0], calc_argmax=False)
                print("Q", q[::-1] if REVERSE else q, end=" ")
                print("T", correct, end=" ")
                if correct == guess:
                    print(f"{green_color}☑ {guess}{end_char}")
                else:
                    print(f"{red_color}☒ {guess}{end_char}")
                runs[f"shown_{epoch}_{i}"] = (ind, guess)  # test-only: what was shown
        runs["weights"] = model.get_weights()
        return runs

    expected = example(KERAS)
    assert len(expected["history_2"]["val_accuracy"]) == 1
    same(example(tfgpu_with(local_strategy(2), everywhere=True)), expected)


# -- keras-io examples/nlp/bidirectional_lstm_imdb.py --------------------------------------------------
def imdb_sequences(rows: int, seed: int, max_features: int):
    """keras.datasets.imdb.load_data(num_words=...): lists of word indices of varied lengths
    (1 starts each review, 2 stands for a word past num_words) and int64 labels 0/1."""
    r = guides.rng(50 + seed)
    labels = r.integers(0, 2, size=rows)
    reviews = []
    for label in labels:
        words = [int(w) for w in r.integers(3, max_features, size=int(r.integers(4, 30)))]
        words.insert(int(r.integers(0, len(words))), 7 if label else 8)
        reviews.append([1, *words])
    return reviews, labels.astype("int64")


@pytest.mark.heavy
def test_bidirectional_lstm_imdb_example():
    """keras-io examples/nlp/bidirectional_lstm_imdb.py: variable-length integer sequences
    (``keras.Input(shape=(None,), dtype="int32")``) padded with ``keras.utils.pad_sequences``,
    an Embedding and two ``Bidirectional(LSTM)`` (the first returning sequences), a sigmoid Dense,
    ``batch_size=32``, ``validation_data=(x_val, y_val)``. No figure is per replica: the reference
    is Keras on one device.

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False``; 25000 reviews -> 128
    (25000 validation -> 64), max_features 20000 -> 100, maxlen 200 -> 16, embedding 128 -> 8,
    LSTM 64 -> 4 units.
    """
    max_features = 100  # Only consider the top 20k words
    maxlen = 16  # Only consider the first 200 words of each movie review
    (x_train_raw, y_train), (x_val_raw, y_val) = (
        imdb_sequences(128, 0, max_features),
        imdb_sequences(64, 1, max_features),
    )

    def example(api):
        keras.utils.set_random_seed(0)
        # Input for variable-length sequences of integers
        inputs = keras.Input(shape=(None,), dtype="int32")
        # Embed each integer in a 128-dimensional vector
        x = layers.Embedding(max_features, 8)(inputs)
        # Add 2 bidirectional LSTMs
        x = layers.Bidirectional(layers.LSTM(4, return_sequences=True))(x)
        x = layers.Bidirectional(layers.LSTM(4))(x)
        # Add a classifier
        outputs = layers.Dense(1, activation="sigmoid")(x)
        model = keras.Model(inputs, outputs)

        # Use pad_sequence to standardize sequence length:
        # this will truncate sequences longer than 200 words and zero-pad sequences shorter than 200 words.
        x_train = keras.utils.pad_sequences(x_train_raw, maxlen=maxlen)
        x_val = keras.utils.pad_sequences(x_val_raw, maxlen=maxlen)

        model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
        history = api.fit(
            model, x_train, y_train, batch_size=32, epochs=2, validation_data=(x_val, y_val), shuffle=False
        )
        return {"history": history.history, "weights": model.get_weights()}

    expected = example(KERAS)
    assert set(expected["history"]) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    same(example(tfgpu_with(local_strategy(2))), expected)


# -- keras-io examples/timeseries/timeseries_anomaly_detection.py --------------------------------------
def art_daily(points: int, *, jump: bool, seed: int):
    """NAB's art_daily_small_noise / art_daily_jumpsup ``value`` column: a daily cycle with small
    noise, one value every 5 minutes (the DataFrame's ``.values``: float64 of shape (n, 1));
    ``jump``: a stretch jumps up (the anomaly)."""
    r = guides.rng(60 + seed)
    t = np.arange(points)
    values = 20 + 60 * (np.sin(2 * np.pi * t / 32) > 0) + r.normal(0, 2, points)
    if jump:
        values[points // 2 : points // 2 + 8] += 60
    return values.reshape(-1, 1)


@pytest.mark.heavy
def test_timeseries_anomaly_detection_example():
    """keras-io examples/timeseries/timeseries_anomaly_detection.py: windows of a float64 series
    (``create_sequences``), a Sequential convolutional autoencoder (strided Conv1D with Dropout,
    then Conv1DTranspose back to the window's length), MSE against the windows themselves,
    ``validation_split=0.1`` with EarlyStopping on val_loss; then the reconstruction error of the
    training windows (``predict``) sets a threshold, and the test series' windows above it are
    the anomalies. Built outside any scope; Dropout's masks are per replica, so the reference is
    Keras's own fit of the same model moved into the same MirroredStrategy (``KerasUnder``).

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False``; the series from a
    seeded generator, its mean and std taken with NumPy (pandas' ``DataFrame.mean()`` / ``std()``
    in the example: pandas is not installed here); 4032 points -> 351 (320 windows: 288 training
    rows, 9 batches of 32), TIME_STEPS 288 -> 32, filters 32/16 -> 8/4, batch_size 128 -> 32,
    epochs 50 -> 2; the plots left out.
    """
    df_small_noise = art_daily(351, jump=False, seed=0)
    df_daily_jumpsup = art_daily(351, jump=True, seed=1)
    strategy = local_strategy(2)

    TIME_STEPS = 32

    # Generated training sequences for use in the model.
    def create_sequences(values, time_steps=TIME_STEPS):
        output = []
        for i in range(len(values) - time_steps + 1):
            output.append(values[i : (i + time_steps)])
        return np.stack(output)

    def example(api):
        keras.utils.set_random_seed(0)
        # Normalize and save the mean and std we get,
        # for normalizing test data.
        training_mean = df_small_noise.mean()
        training_std = df_small_noise.std(ddof=1)  # pandas' default
        df_training_value = (df_small_noise - training_mean) / training_std

        x_train = create_sequences(df_training_value)

        model = keras.Sequential(
            [
                layers.Input(shape=(x_train.shape[1], x_train.shape[2])),
                layers.Conv1D(filters=8, kernel_size=7, padding="same", strides=2, activation="relu"),
                layers.Dropout(rate=0.2),
                layers.Conv1D(filters=4, kernel_size=7, padding="same", strides=2, activation="relu"),
                layers.Conv1DTranspose(
                    filters=4, kernel_size=7, padding="same", strides=2, activation="relu"
                ),
                layers.Dropout(rate=0.2),
                layers.Conv1DTranspose(
                    filters=8, kernel_size=7, padding="same", strides=2, activation="relu"
                ),
                layers.Conv1DTranspose(filters=1, kernel_size=7, padding="same"),
            ]
        )
        model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.001), loss="mse")

        history = api.fit(
            model,
            x_train,
            x_train,
            epochs=2,
            batch_size=32,
            validation_split=0.1,
            callbacks=[keras.callbacks.EarlyStopping(monitor="val_loss", patience=5, mode="min")],
            shuffle=False,
        )

        # Get train MAE loss.
        x_train_pred = api.predict(model, x_train)
        train_mae_loss = np.mean(np.abs(x_train_pred - x_train), axis=1)

        # Get reconstruction loss threshold.
        threshold = np.max(train_mae_loss)
        print("Reconstruction error threshold: ", threshold)

        df_test_value = (df_daily_jumpsup - training_mean) / training_std

        # Create sequences from test values.
        x_test = create_sequences(df_test_value)

        # Get test MAE loss.
        x_test_pred = api.predict(model, x_test)
        test_mae_loss = np.mean(np.abs(x_test_pred - x_test), axis=1)
        test_mae_loss = test_mae_loss.reshape(-1)

        # Detect all the samples which are anomalies.
        anomalies = test_mae_loss > threshold
        print("Number of anomaly samples: ", np.sum(anomalies))

        # data i is an anomaly if samples [(i - timesteps + 1) to (i)] are anomalies
        anomalous_data_indices = []
        for data_idx in range(TIME_STEPS - 1, len(df_test_value) - TIME_STEPS + 1):
            if np.all(anomalies[data_idx - TIME_STEPS + 1 : data_idx]):
                anomalous_data_indices.append(data_idx)
        return {"history": history.history, "weights": model.get_weights(), "x_train_pred": x_train_pred,
                "x_test_pred": x_test_pred, "threshold": float(threshold),
                "anomalies": str(np.flatnonzero(anomalies)),
                "indices": str(anomalous_data_indices)}  # fmt: skip

    expected = example(KerasUnder(strategy))
    assert expected["x_train_pred"].shape == (320, 32, 1) and len(expected["history"]["val_loss"]) == 2
    same(example(tfgpu_with(strategy, everywhere=True)), expected)


# -- keras-io examples/timeseries/timeseries_weather_forecasting.py ------------------------------------
def jena_climate(rows: int):
    """The 7 selected columns of jena_climate_2009_2016.csv as float64 (pressure, temperature,
    saturation vapor pressure, vapor pressure deficit, specific humidity, airtight, wind speed),
    one row every 10 minutes: daily cycles and noise."""
    r = guides.rng(70)
    t = np.arange(rows)
    day = np.sin(2 * np.pi * t / 144)
    temperature = 10 + 8 * day + r.normal(0, 1, rows)
    return np.stack(
        [
            990 + 5 * np.cos(2 * np.pi * t / 700) + r.normal(0, 1, rows),
            temperature,
            12 + 0.8 * temperature + r.normal(0, 0.5, rows),
            3 + 2 * day + r.normal(0, 0.3, rows),
            6 + 0.3 * temperature + r.normal(0, 0.2, rows),
            1200 - 2 * temperature + r.normal(0, 2, rows),
            np.abs(2 + r.normal(0, 1, rows)),
        ],
        axis=1,
    )


@pytest.mark.heavy
@pytest.mark.parametrize(
    "rows",
    [
        1002,  # 694 training windows: 21 batches of 32 and one of 22, 11 rows a replica
        1000,  # 693: 21 rows last, 11 and 10 a replica
    ],
)
def test_timeseries_weather_forecasting_example(tmp_path, monkeypatch, rows):
    """keras-io examples/timeseries/timeseries_weather_forecasting.py: features normalized with the
    training split's mean and std, ``keras.preprocessing.timeseries_dataset_from_array`` (windows
    sampled every ``step`` rows, labels ``past + future`` rows ahead, its last batch short) for
    training and validation, an LSTM on ``(sequence_length, 7)`` windows, MSE, EarlyStopping and
    a ModelCheckpoint of the best weights (``save_weights_only``, ``.weights.h5``, verbose);
    then ``model.predict(x)`` on batches taken from the validation dataset (tensors). No figure
    is per replica: the reference is Keras on one device.

    Lines changed: none (the strategy passed). Test-only: the CSV from a seeded generator, its
    DataFrame replaced by the NumPy array of the same columns (pandas is not installed here:
    ``features.loc[0 : train_split - 1]`` -> ``features[:train_split]``, ``.iloc[start:end][[1]]``
    -> ``[start:end][:, [1]]``); 420551 rows -> 1002, past 720 -> 24, future 72 -> 6, step 6 ->
    2, batch_size 256 -> 32, LSTM 32 -> 4 units, epochs 10 -> 2, 5 predicted batches -> 2; the
    plots left out.

    The training dataset's last batch is short, as the example's is: with 1002 rows its 22 rows
    split 11/11 over the replicas; with 1000 rows, 21 split 11/10, and each replica's loss is
    scaled by its share of the rows (``tfgpu/train/pieces/losses.py``): tfgpu equals one device on both.
    """
    raw = jena_climate(rows)

    def example(api, where):
        where.mkdir()
        monkeypatch.chdir(where)
        keras.utils.set_random_seed(0)
        split_fraction = 0.715
        train_split = int(split_fraction * int(raw.shape[0]))
        step = 2

        past = 24
        future = 6
        learning_rate = 0.001
        batch_size = 32
        epochs = 2

        def normalize(data, train_split):
            data_mean = data[:train_split].mean(axis=0)
            data_std = data[:train_split].std(axis=0)
            return (data - data_mean) / data_std

        features = normalize(raw, train_split)

        train_data = features[:train_split]
        val_data = features[train_split:]

        start = past + future
        end = start + train_split

        x_train = train_data[:, [i for i in range(7)]]
        y_train = features[start:end][:, [1]]

        sequence_length = int(past / step)

        dataset_train = keras.preprocessing.timeseries_dataset_from_array(
            x_train,
            y_train,
            sequence_length=sequence_length,
            sampling_rate=step,
            batch_size=batch_size,
        )

        x_end = len(val_data) - past - future

        label_start = train_split + past + future

        x_val = val_data[:x_end][:, [i for i in range(7)]]
        y_val = features[label_start:][:, [1]]

        dataset_val = keras.preprocessing.timeseries_dataset_from_array(
            x_val,
            y_val,
            sequence_length=sequence_length,
            sampling_rate=step,
            batch_size=batch_size,
        )

        for batch in dataset_train.take(1):
            inputs, targets = batch

        print("Input shape:", inputs.numpy().shape)
        print("Target shape:", targets.numpy().shape)

        inputs = keras.layers.Input(shape=(inputs.shape[1], inputs.shape[2]))
        lstm_out = keras.layers.LSTM(4)(inputs)
        outputs = keras.layers.Dense(1)(lstm_out)

        model = keras.Model(inputs=inputs, outputs=outputs)
        model.compile(optimizer=keras.optimizers.Adam(learning_rate=learning_rate), loss="mse")

        path_checkpoint = "model_checkpoint.weights.h5"
        es_callback = keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=0, patience=5)

        modelckpt_callback = keras.callbacks.ModelCheckpoint(
            monitor="val_loss",
            filepath=path_checkpoint,
            verbose=1,
            save_weights_only=True,
            save_best_only=True,
        )

        history = api.fit(
            model,
            dataset_train,
            epochs=epochs,
            validation_data=dataset_val,
            callbacks=[es_callback, modelckpt_callback],
        )
        runs = {"history": history.history, "weights": model.get_weights()}
        for i, (x, y) in enumerate(dataset_val.take(2)):
            runs[f"prediction_{i}"] = [x[0][:, 1].numpy(), y[0].numpy(), api.predict(model, x)[0]]
        model.load_weights(path_checkpoint)
        runs["best"] = model.get_weights()
        return runs

    expected = example(KERAS, tmp_path / "keras")
    assert len(expected["history"]["val_loss"]) == 2
    same(example(tfgpu_with(local_strategy(2), everywhere=True), tmp_path / "tfgpu"), expected)


# -- keras-io examples/vision/mixup.py -----------------------------------------------------------------
def sample_beta_distribution(size, concentration_0=0.2, concentration_1=0.2):
    gamma_1_sample = tf_random_gamma(shape=[size], alpha=concentration_1)
    gamma_2_sample = tf_random_gamma(shape=[size], alpha=concentration_0)
    return gamma_1_sample / (gamma_1_sample + gamma_2_sample)


def mix_up(ds_one, ds_two, alpha=0.2):
    # Unpack two datasets
    images_one, labels_one = ds_one
    images_two, labels_two = ds_two
    batch_size = keras.ops.shape(images_one)[0]

    # Sample lambda and reshape it to do the mixup
    l = sample_beta_distribution(batch_size, alpha, alpha)  # noqa: E741
    x_l = keras.ops.reshape(l, (batch_size, 1, 1, 1))
    y_l = keras.ops.reshape(l, (batch_size, 1))

    # Perform mixup on both images and labels by combining a pair of images/labels
    # (one from each dataset) into one image/label
    images = images_one * x_l + images_two * (1 - x_l)
    labels = labels_one * y_l + labels_two * (1 - y_l)
    return (images, labels)


def get_training_model():
    model = keras.Sequential(
        [
            layers.Conv2D(4, (5, 5), activation="relu", input_shape=(28, 28, 1)),
            layers.MaxPooling2D(pool_size=(2, 2)),
            layers.Conv2D(8, (5, 5), activation="relu"),
            layers.MaxPooling2D(pool_size=(2, 2)),
            layers.Dropout(0.2),
            layers.GlobalAveragePooling2D(),
            layers.Dense(16, activation="relu"),
            layers.Dense(10, activation="softmax"),
        ]
    )
    return model


@pytest.mark.heavy
def test_mixup_example(tmp_path, monkeypatch):
    """keras-io examples/vision/mixup.py: one-hot labels from ``keras.ops.one_hot`` (tensors, sliced
    for the validation set), two shuffled datasets of the same rows zipped, mapped through
    ``mix_up`` (``tf.random.gamma`` draws a Beta-distributed lambda per image), previewed with
    ``next(iter(...))``; a Sequential made with ``input_shape=`` on its first layer; the initial
    weights saved once with ``save_weights`` and loaded into each model; fit on the mixed-up
    dataset with ``validation_data``, evaluate on the test dataset; then a second model trained on
    the plain dataset. Built outside any scope; Dropout's masks are per replica, so the reference
    is Keras's own fit of the same models moved into the same MirroredStrategy (``KerasUnder``).

    Lines changed: none (the strategy passed). Test-only: the ``mix_up`` map sequential
    (``num_parallel_calls=AUTO`` -> ``None``: in parallel, ``tf.random.gamma``'s draws go to the
    batches in whatever order the map's threads run, so two reads of the example's dataset, even
    by Keras alone, differ); ``reshuffle_each_iteration=False`` in both shuffles (Keras under a
    strategy reads a reshuffling dataset's 2nd order in epoch 1, tfgpu its 1st:
    test_guides.test_training_guide_tf_data_reshuffled_each_epoch); 60000 images -> 320 (2000
    validation -> 64: 256 training rows, 8 batches of 32; 10000 test -> 64), filters 16/32 ->
    4/8, Dense 128 -> 16, BATCH_SIZE 64 -> 32, EPOCHS 10 -> 2; the plots left out.
    """
    (x_train_raw, y_train_raw), (x_test_raw, y_test_raw) = guides.fashion_mnist(train=320, test=64)
    strategy = local_strategy(2)

    def example(api, where):
        where.mkdir()
        monkeypatch.chdir(where)
        keras.utils.set_random_seed(0)
        x_train = x_train_raw.astype("float32") / 255.0
        x_train = np.reshape(x_train, (-1, 28, 28, 1))
        y_train = keras.ops.one_hot(y_train_raw, 10)

        x_test = x_test_raw.astype("float32") / 255.0
        x_test = np.reshape(x_test, (-1, 28, 28, 1))
        y_test = keras.ops.one_hot(y_test_raw, 10)

        AUTO = tf_data.AUTOTUNE  # noqa: F841 (test-only: unused, see the map below)
        BATCH_SIZE = 32
        EPOCHS = 2

        # Put aside a few samples to create our validation set
        val_samples = 64
        x_val, y_val = x_train[:val_samples], y_train[:val_samples]
        new_x_train, new_y_train = x_train[val_samples:], y_train[val_samples:]

        train_ds_one = (
            tf_data.Dataset.from_tensor_slices((new_x_train, new_y_train))
            .shuffle(BATCH_SIZE * 100, reshuffle_each_iteration=False)
            .batch(BATCH_SIZE)
        )
        train_ds_two = (
            tf_data.Dataset.from_tensor_slices((new_x_train, new_y_train))
            .shuffle(BATCH_SIZE * 100, reshuffle_each_iteration=False)
            .batch(BATCH_SIZE)
        )
        # Because we will be mixing up the images and their corresponding labels, we will be
        # combining two shuffled datasets from the same training data.
        train_ds = tf_data.Dataset.zip((train_ds_one, train_ds_two))

        val_ds = tf_data.Dataset.from_tensor_slices((x_val, y_val)).batch(BATCH_SIZE)

        test_ds = tf_data.Dataset.from_tensor_slices((x_test, y_test)).batch(BATCH_SIZE)

        # First create the new dataset using our `mix_up` utility
        train_ds_mu = train_ds.map(
            lambda ds_one, ds_two: mix_up(ds_one, ds_two, alpha=0.2),
            num_parallel_calls=None,  # test-only: the example's AUTO draws in its threads' order
        )

        # Let's preview 9 samples from the dataset
        sample_images, sample_labels = next(iter(train_ds_mu))  # noqa: RUF059 (plotted there)
        for label in sample_labels[:9]:
            print(label.numpy().tolist())

        initial_model = get_training_model()
        initial_model.save_weights("initial_weights.weights.h5")

        runs = {"sample_labels": sample_labels.numpy()}
        model = get_training_model()
        model.load_weights("initial_weights.weights.h5")
        model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
        runs["history_mixup"] = api.fit(model, train_ds_mu, validation_data=val_ds, epochs=EPOCHS).history
        _, test_acc = api.evaluate(model, test_ds)
        print(f"Test accuracy: {test_acc * 100:.2f}%")
        runs["test_acc_mixup"], runs["weights_mixup"] = test_acc, model.get_weights()

        model = get_training_model()
        model.load_weights("initial_weights.weights.h5")
        model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
        # Notice that we are NOT using the mixed up dataset here
        runs["history_plain"] = api.fit(model, train_ds_one, validation_data=val_ds, epochs=EPOCHS).history
        _, test_acc = api.evaluate(model, test_ds)
        print(f"Test accuracy: {test_acc * 100:.2f}%")
        runs["test_acc_plain"], runs["weights_plain"] = test_acc, model.get_weights()
        return runs

    expected = example(KerasUnder(strategy), tmp_path / "keras")
    assert 0 < expected["sample_labels"].max() <= 1 and expected["sample_labels"].shape == (32, 10)
    same(example(tfgpu_with(strategy), tmp_path / "tfgpu"), expected)


# -- keras-io examples/vision/image_classification_with_vision_transformer.py --------------------------
def mlp(x, hidden_units, dropout_rate):
    for units in hidden_units:
        x = layers.Dense(units, activation=keras.activations.gelu)(x)
        x = layers.Dropout(dropout_rate)(x)
    return x


class Patches(layers.Layer):
    def __init__(self, patch_size):
        super().__init__()
        self.patch_size = patch_size

    def call(self, images):
        input_shape = ops.shape(images)
        batch_size = input_shape[0]
        height = input_shape[1]
        width = input_shape[2]
        channels = input_shape[3]
        num_patches_h = height // self.patch_size
        num_patches_w = width // self.patch_size
        patches = keras.ops.image.extract_patches(images, size=self.patch_size)
        patches = ops.reshape(
            patches,
            (
                batch_size,
                num_patches_h * num_patches_w,
                self.patch_size * self.patch_size * channels,
            ),
        )
        return patches

    def get_config(self):
        config = super().get_config()
        config.update({"patch_size": self.patch_size})
        return config


class PatchEncoder(layers.Layer):
    def __init__(self, num_patches, projection_dim):
        super().__init__()
        self.num_patches = num_patches
        self.projection = layers.Dense(units=projection_dim)
        self.position_embedding = layers.Embedding(input_dim=num_patches, output_dim=projection_dim)

    def call(self, patch):
        positions = ops.expand_dims(ops.arange(start=0, stop=self.num_patches, step=1), axis=0)
        projected_patches = self.projection(patch)
        encoded = projected_patches + self.position_embedding(positions)
        return encoded

    def get_config(self):
        config = super().get_config()
        config.update({"num_patches": self.num_patches})
        return config


def cifar(train: int, test: int, num_classes: int):
    """keras.datasets.cifar100.load_data(): uint8 (n, 32, 32, 3) images, uint8 labels of shape
    (n, 1); here 16x16 images, a brighter square per class."""
    r = guides.rng(80)
    y = r.integers(0, num_classes, size=(train + test, 1)).astype("uint8")
    x = (r.random((train + test, 16, 16, 3)) * 128).astype("uint8")
    for i, label in enumerate(y[:, 0]):
        x[i, label : label + 4, label : label + 4] += 120
    return (x[:train], y[:train]), (x[train:], y[train:])


@pytest.mark.heavy
def test_vision_transformer_example(tmp_path):
    """keras-io examples/vision/image_classification_with_vision_transformer.py: a data
    augmentation Sequential (Normalization adapted on the uint8 training images, Resizing,
    RandomFlip, RandomRotation, RandomZoom) inside the model; custom layers ``Patches``
    (``keras.ops.image.extract_patches`` and a reshape by the dynamic batch size) and
    ``PatchEncoder`` (a Dense projection plus a position Embedding of ``ops.arange``); Transformer
    blocks of LayerNormalization, MultiHeadAttention with dropout, residual Adds and a GELU MLP
    with Dropout; AdamW with weight decay, SparseCategoricalCrossentropy(from_logits=True),
    accuracy and top-5 accuracy; ``validation_split=0.1``, a ModelCheckpoint of the best weights
    on val_accuracy (``save_weights_only``), ``load_weights`` of it, evaluate. Built outside any
    scope; the augmentation's draws and Dropout's masks are per replica, so the reference is
    Keras's own fit of the same model moved into the same MirroredStrategy (``KerasUnder``).
    Every weight is compared to rel 1e-5 but the attention's key bias, whose gradient is zero
    but for float noise (compared to 5e-4: below).

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False``; the checkpoint under
    ``tmp_path`` (``/tmp/checkpoint.weights.h5`` in the example); 50000 images -> 320 (288
    training rows: 9 batches of 32), 32x32 -> 16x16, num_classes 100 -> 10, image_size 72 -> 24,
    projection_dim 64 -> 8, num_heads 4 -> 2, transformer_layers 8 -> 1, mlp_head_units
    [2048, 1024] -> [16, 8], batch_size 256 -> 32, num_epochs 10 -> 2; ``run_experiment`` returns
    the test accuracies beside the history (to compare them); the plots left out.
    """
    num_classes = 10
    input_shape = (16, 16, 3)

    (x_train, y_train), (x_test, y_test) = cifar(320, 64, num_classes)

    learning_rate = 0.001
    weight_decay = 0.0001
    batch_size = 32
    num_epochs = 2  # For real training, use num_epochs=100. 10 is a test value
    image_size = 24  # We'll resize input images to this size
    patch_size = 6  # Size of the patches to be extract from the input images
    num_patches = (image_size // patch_size) ** 2
    projection_dim = 8
    num_heads = 2
    hidden_dim = projection_dim * num_heads
    transformer_units = [
        hidden_dim * 2,
        hidden_dim,
    ]  # Size of the transformer layers
    transformer_layers = 1
    mlp_head_units = [
        16,
        8,
    ]  # Size of the dense layers of the final classifier
    strategy = local_strategy(2)

    def example(api, checkpoint_filepath):
        keras.utils.set_random_seed(0)
        data_augmentation = keras.Sequential(
            [
                layers.Normalization(),
                layers.Resizing(image_size, image_size),
                layers.RandomFlip("horizontal"),
                layers.RandomRotation(factor=0.02),
                layers.RandomZoom(height_factor=0.2, width_factor=0.2),
            ],
            name="data_augmentation",
        )
        # Compute the mean and the variance of the training data for normalization.
        data_augmentation.layers[0].adapt(x_train)

        def create_vit_classifier():
            inputs = keras.Input(shape=input_shape)
            # Augment data.
            augmented = data_augmentation(inputs)
            # Create patches.
            patches = Patches(patch_size)(augmented)
            # Encode patches.
            encoded_patches = PatchEncoder(num_patches, hidden_dim)(patches)

            # Create multiple layers of the Transformer block.
            for _ in range(transformer_layers):
                # Layer normalization 1.
                x1 = layers.LayerNormalization(epsilon=1e-6)(encoded_patches)
                # Create a multi-head attention layer.
                attention_output = layers.MultiHeadAttention(
                    num_heads=num_heads, key_dim=projection_dim, dropout=0.1
                )(x1, x1)
                # Skip connection 1.
                x2 = layers.Add()([attention_output, encoded_patches])
                # Layer normalization 2.
                x3 = layers.LayerNormalization(epsilon=1e-6)(x2)
                # MLP.
                x3 = mlp(x3, hidden_units=transformer_units, dropout_rate=0.1)
                # Skip connection 2.
                encoded_patches = layers.Add()([x3, x2])

            # Create a [batch_size, projection_dim] tensor.
            representation = layers.LayerNormalization(epsilon=1e-6)(encoded_patches)
            representation = layers.Flatten()(representation)
            representation = layers.Dropout(0.5)(representation)
            # Add MLP.
            features = mlp(representation, hidden_units=mlp_head_units, dropout_rate=0.5)
            # Classify outputs.
            logits = layers.Dense(num_classes)(features)
            # Create the Keras model.
            model = keras.Model(inputs=inputs, outputs=logits)
            return model

        def run_experiment(model):
            optimizer = keras.optimizers.AdamW(learning_rate=learning_rate, weight_decay=weight_decay)

            model.compile(
                optimizer=optimizer,
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=[
                    keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
                    keras.metrics.SparseTopKCategoricalAccuracy(5, name="top-5-accuracy"),
                ],
            )

            checkpoint_callback = keras.callbacks.ModelCheckpoint(
                checkpoint_filepath,
                monitor="val_accuracy",
                save_best_only=True,
                save_weights_only=True,
            )

            history = api.fit(
                model,
                x=x_train,
                y=y_train,
                batch_size=batch_size,
                epochs=num_epochs,
                validation_split=0.1,
                callbacks=[checkpoint_callback],
                shuffle=False,
            )

            model.load_weights(checkpoint_filepath)
            _, accuracy, top_5_accuracy = api.evaluate(model, x_test, y_test)
            print(f"Test accuracy: {round(accuracy * 100, 2)}%")
            print(f"Test top 5 accuracy: {round(top_5_accuracy * 100, 2)}%")

            return history, accuracy, top_5_accuracy

        vit_classifier = create_vit_classifier()
        history, accuracy, top_5_accuracy = run_experiment(vit_classifier)
        noise = [w.path.endswith("/key/bias") for w in vit_classifier.weights]
        weights = vit_classifier.get_weights()
        return {"history": history.history, "accuracy": accuracy, "top_5_accuracy": top_5_accuracy,
                "weights": [w for w, n in zip(weights, noise, strict=True) if not n],
                "key_bias": [w for w, n in zip(weights, noise, strict=True) if n]}  # fmt: skip

    expected = example(KerasUnder(strategy), str(tmp_path / "keras.weights.h5"))
    assert {"top-5-accuracy", "val_top-5-accuracy"} <= set(expected["history"])
    got = example(tfgpu_with(strategy), str(tmp_path / "tfgpu.weights.h5"))
    same(got, expected, keys=["history", "accuracy", "top_5_accuracy", "weights"])
    # the attention's key bias has no gradient in exact arithmetic (the softmax over the keys does
    # not see a shift common to all of them): Adam's steps on its float noise (about 1e-9, scaled
    # up by Adam to 1e-5) follow the order of the sums, so only its size is compared
    assert len(got["key_bias"]) == 1
    np.testing.assert_allclose(got["key_bias"][0], expected["key_bias"][0], atol=5e-4)


# -- keras-io examples/structured_data/imbalanced_classification.py ------------------------------------
def credit_card_csv(path, rows: int):
    """creditcard.csv: a header, then 30 quoted float features ("Time", "V1".."V28", "Amount")
    and the quoted class, 1 for about one row in eight here (0.17% in the real file)."""
    r = guides.rng(90)
    classes = (r.random(rows) < 0.125).astype(int)
    features = r.normal(size=(rows, 30))
    features[:, 1:5] += 2.5 * classes[:, None]
    features[:, 0] = np.arange(rows) * 3.0
    features[:, -1] = np.abs(features[:, -1]) * 90
    header = ",".join(f'"{name}"' for name in ["Time", *(f"V{i}" for i in range(1, 29)), "Amount", "Class"])
    lines = [header] + [
        ",".join([*(f"{v:.6f}" for v in row), f'"{c}"']) for row, c in zip(features, classes, strict=True)
    ]
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.heavy
def test_imbalanced_classification_example(tmp_path, monkeypatch):
    """keras-io examples/structured_data/imbalanced_classification.py: a CSV read line by line
    into float32 features and uint8 targets of shape (n, 1), normalized with the training
    rows' statistics; a Sequential made with ``input_shape=`` on its first Dense, Dropout(0.3)
    twice; ``class_weight`` of 1/count per class (weights of about 1e-3 and 1e-2); the confusion
    counts, Precision and Recall as metrics; a ModelCheckpoint per epoch
    (``"fraud_model_at_epoch_{epoch}.keras"``); ``verbose=2``; ``validation_data``. Built outside
    any scope; Dropout's masks are per replica, so the reference is Keras's own fit of the same
    model moved into the same MirroredStrategy (``KerasUnder``); the saved models are loaded and
    their predictions compared too.

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False``; the CSV written from a
    seeded generator, its path under ``tmp_path`` (the author's Downloads folder in the example);
    284807 rows -> 800 (640 training rows: 10 batches of 64), Dense 256 -> 16, batch_size 2048 ->
    64, epochs 30 -> 2.
    """
    credit_card_csv(tmp_path / "creditcard.csv", 800)
    strategy = local_strategy(2)

    def example(api, where):
        where.mkdir()
        monkeypatch.chdir(where)
        keras.utils.set_random_seed(0)
        fname = str(tmp_path / "creditcard.csv")

        all_features = []
        all_targets = []
        with open(fname) as f:
            for i, line in enumerate(f):
                if i == 0:
                    print("HEADER:", line.strip())
                    continue  # Skip header
                fields = line.strip().split(",")
                all_features.append([float(v.replace('"', "")) for v in fields[:-1]])
                all_targets.append([int(fields[-1].replace('"', ""))])
                if i == 1:
                    print("EXAMPLE FEATURES:", all_features[-1])

        features = np.array(all_features, dtype="float32")
        targets = np.array(all_targets, dtype="uint8")

        num_val_samples = int(len(features) * 0.2)
        train_features = features[:-num_val_samples]
        train_targets = targets[:-num_val_samples]
        val_features = features[-num_val_samples:]
        val_targets = targets[-num_val_samples:]

        counts = np.bincount(train_targets[:, 0])
        print(
            "Number of positive samples in training data: {} ({:.2f}% of total)".format(  # noqa: UP032
                counts[1], 100 * float(counts[1]) / len(train_targets)
            )
        )

        weight_for_0 = 1.0 / counts[0]
        weight_for_1 = 1.0 / counts[1]

        mean = np.mean(train_features, axis=0)
        train_features -= mean
        val_features -= mean
        std = np.std(train_features, axis=0)
        train_features /= std
        val_features /= std

        model = keras.Sequential(
            [
                keras.layers.Dense(16, activation="relu", input_shape=(train_features.shape[-1],)),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dropout(0.3),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dropout(0.3),
                keras.layers.Dense(1, activation="sigmoid"),
            ]
        )

        metrics = [
            keras.metrics.FalseNegatives(name="fn"),
            keras.metrics.FalsePositives(name="fp"),
            keras.metrics.TrueNegatives(name="tn"),
            keras.metrics.TruePositives(name="tp"),
            keras.metrics.Precision(name="precision"),
            keras.metrics.Recall(name="recall"),
        ]

        model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy", metrics=metrics)

        callbacks = [keras.callbacks.ModelCheckpoint("fraud_model_at_epoch_{epoch}.keras")]
        class_weight = {0: weight_for_0, 1: weight_for_1}

        history = api.fit(
            model,
            train_features,
            train_targets,
            batch_size=64,
            epochs=2,
            verbose=2,
            callbacks=callbacks,
            validation_data=(val_features, val_targets),
            class_weight=class_weight,
            shuffle=False,
        )
        saved = [keras.models.load_model(f"fraud_model_at_epoch_{epoch}.keras") for epoch in (1, 2)]
        return {"history": history.history, "weights": model.get_weights(),
                "saved": [m.predict(val_features, verbose=0) for m in saved]}  # fmt: skip

    expected = example(KerasUnder(strategy), tmp_path / "keras")
    assert expected["history"]["tp"][-1] + expected["history"]["fn"][-1] == pytest.approx(
        np.sum(
            np.loadtxt(tmp_path / "creditcard.csv", delimiter=",", skiprows=1, dtype=str)[:640, -1] == '"1"'
        )
    )
    same(example(tfgpu_with(strategy), tmp_path / "tfgpu"), expected)


# -- keras-io examples/keras_recipes/trainer_pattern.py ------------------------------------------------
class MyTrainer(keras.Model):
    def __init__(self, model):
        super().__init__()
        self.model = model
        # Create loss and metrics here.
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy()
        self.accuracy_metric = keras.metrics.SparseCategoricalAccuracy()

    @property
    def metrics(self):
        # List metrics here.
        return [self.accuracy_metric]

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self.model(x, training=True)  # Forward pass
            # Compute loss value
            loss = self.loss_fn(y, y_pred)

        # Compute gradients
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)

        # Update weights
        self.optimizer.apply_gradients(zip(gradients, trainable_vars))  # noqa: B905

        # Update metrics
        for metric in self.metrics:
            metric.update_state(y, y_pred)

        # Return a dict mapping metric names to current value.
        return {m.name: m.result() for m in self.metrics}

    def test_step(self, data):
        x, y = data

        # Inference step
        y_pred = self.model(x, training=False)

        # Update metrics
        for metric in self.metrics:
            metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}

    def call(self, x):
        # Equivalent to `call()` of the wrapped keras.Model
        x = self.model(x)
        return x


@pytest.mark.heavy
def test_trainer_pattern_example():
    """keras-io examples/keras_recipes/trainer_pattern.py: ``MyTrainer``, a subclassed model that
    wraps another (``self.model = model``) with its own loss object, a ``metrics`` property, a
    ``train_step`` on a GradientTape over ``self.trainable_variables`` and a ``test_step``;
    compiled with an optimizer only; two Trainers: one around a Sequential whose Flatten takes
    ``input_shape=(28, 28)``, one around a functional model on (28, 28, 1) inputs fed (28, 28)
    float64 images; SGD and Adam; ``validation_data``. Built outside any scope; Dropout's masks
    are per replica, so the reference is Keras's own fit of the same Trainers moved into the
    same MirroredStrategy (``KerasUnder``).

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False``; 60000 digits -> 256
    (10000 test -> 64), Dense 256/512 -> 16/32, epochs 5 -> 2.
    """
    (x_train, y_train), (x_test, y_test) = guides.mnist_images(train=256, test=64)
    x_train, x_test = x_train / 255.0, x_test / 255.0
    strategy = local_strategy(2)

    def example(api):
        keras.utils.set_random_seed(0)
        # A model defined using Sequential API
        model_a = keras.models.Sequential(
            [
                keras.layers.Flatten(input_shape=(28, 28)),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dropout(0.2),
                keras.layers.Dense(10, activation="softmax"),
            ]
        )

        # A model defined using Functional API
        func_input = keras.Input(shape=(28, 28, 1))
        x = keras.layers.Flatten(input_shape=(28, 28))(func_input)
        x = keras.layers.Dense(32, activation="relu")(x)
        x = keras.layers.Dropout(0.4)(x)
        func_output = keras.layers.Dense(10, activation="softmax")(x)

        model_b = keras.Model(func_input, func_output)

        trainer_1 = MyTrainer(model_a)
        trainer_2 = MyTrainer(model_b)

        trainer_1.compile(optimizer=keras.optimizers.SGD())
        first = api.fit(
            trainer_1,
            x_train,
            y_train,
            epochs=2,
            batch_size=64,
            validation_data=(x_test, y_test),
            shuffle=False,
        )

        trainer_2.compile(optimizer=keras.optimizers.Adam())
        second = api.fit(
            trainer_2,
            x_train,
            y_train,
            epochs=2,
            batch_size=64,
            validation_data=(x_test, y_test),
            shuffle=False,
        )
        return {"history_1": first.history, "weights_1": model_a.get_weights(),
                "history_2": second.history, "weights_2": model_b.get_weights()}  # fmt: skip

    expected = example(KerasUnder(strategy))
    assert set(expected["history_2"]) == {"sparse_categorical_accuracy", "val_sparse_categorical_accuracy"}
    same(example(tfgpu_with(strategy)), expected)

"""More of TensorFlow's own tutorials (tensorflow/docs), run on tfgpu as their users would run them.

The conventions are test_guides.py's: each test is one tutorial, shrunk to seconds on synthetic
data of the tutorial's shapes and dtypes, written as the tutorial writes it, the only change a
user makes ``model.fit(...)`` -> ``tfgpu.fit(model, ...)`` (``evaluate`` and ``predict`` likewise);
it runs twice through the same function, once with Keras's own methods on one device and once
with tfgpu's on 2 replicas (models made outside any scope, the strategy passed), and the two must
agree (histories to rel 1e-5, weights, evaluate and predict). Where a figure is per replica
(Dropout's masks), the reference is Keras's fit of the model's copy in the same strategy's scope
(``KerasUnder``). Each docstring names the tutorial and the lines that differ from it.
"""

from __future__ import annotations

import os
import re
import string
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

import guides
from support.parity import KERAS, KerasUnder, same, tfgpu_with
from support.replicas import local_strategy

# every tutorial trains real models for seconds: make test runs them, make test-fast does not
pytestmark = pytest.mark.heavy


class DataFrame(np.ndarray):
    """The tutorials' pandas frames where they are read as arrays: a float array with the frame's
    ``.columns`` (pandas is not installed here)."""

    def __new__(cls, data, columns):
        frame = np.asarray(data).view(cls)
        frame.columns = list(columns)
        return frame

    def __array_finalize__(self, obj):
        self.columns = getattr(obj, "columns", None)


# -- tensorflow/docs site/en/tutorials/structured_data/time_series.ipynb ---------------------------
def jena_climate(rows: int = 400):
    """The tutorial's frame after its feature engineering, normalized by the training split's mean
    and std: a few of its float columns, 'T (degC)' among them, one row an hour."""
    r = guides.rng(20)
    hours = np.arange(rows)
    day = np.sin(hours * 2 * np.pi / 24)
    temp = 10 + 8 * day + np.cumsum(r.normal(0, 0.3, rows))
    pressure = 990 - 0.5 * temp + r.normal(0, 1, rows)
    wx, wy = r.normal(0, 2, rows), r.normal(0, 2, rows)
    columns = ["p (mbar)", "T (degC)", "Wx", "Wy", "Day sin"]
    data = np.stack([pressure, temp, wx, wy, day], axis=1)
    n = len(data)
    train = data[0 : int(n * 0.7)]
    mean, std = train.mean(axis=0), train.std(axis=0, ddof=1)
    data = (data - mean) / std
    return DataFrame(data, columns)


def test_tf_time_series_tutorial():
    """tensorflow/docs site/en/tutorials/structured_data/time_series.ipynb, single-step models:
    ``WindowGenerator`` (``split_window``, ``make_dataset`` on
    ``tf.keras.utils.timeseries_dataset_from_array(shuffle=True, batch_size=32)``, its
    ``train``/``val``/``test``/``example`` properties); the subclassed ``Baseline`` (no weights)
    compiled and evaluated with ``return_dict=True``; ``compile_and_fit`` (MeanSquaredError,
    Adam, MeanAbsoluteError, EarlyStopping on val_loss) of the linear model (called eagerly on
    ``example`` before, so built outside any scope) and the LSTM on the wide window; each
    evaluated on val and test (the dense, conv and multi-step models are left out).

    Lines changed: none (the strategy passed). Test-only: the jena frame is a few synthetic
    columns, 400 rows (70/20/10 split), a NumPy array with ``.columns`` (pandas is not installed),
    normalized before it is split; ``make_dataset``'s dataset is cached after its map (its shuffle
    reshuffles at each iteration, which Keras on one device reads inconsistently; see
    test_guides' test_training_guide_tf_data_reshuffled_each_epoch); MAX_EPOCHS 20 -> 3;
    LSTM 32 -> 8.
    """

    def tutorial(api):
        keras.utils.set_random_seed(0)
        df = jena_climate()
        column_indices = {name: i for i, name in enumerate(df.columns)}
        n = len(df)
        train_df = df[0 : int(n * 0.7)]
        val_df = df[int(n * 0.7) : int(n * 0.9)]
        test_df = df[int(n * 0.9) :]

        class WindowGenerator:
            def __init__(
                self,
                input_width,
                label_width,
                shift,
                train_df=train_df,
                val_df=val_df,
                test_df=test_df,
                label_columns=None,
            ):
                # Store the raw data.
                self.train_df = train_df
                self.val_df = val_df
                self.test_df = test_df

                # Work out the label column indices.
                self.label_columns = label_columns
                if label_columns is not None:
                    self.label_columns_indices = {name: i for i, name in enumerate(label_columns)}
                self.column_indices = {name: i for i, name in enumerate(train_df.columns)}

                # Work out the window parameters.
                self.input_width = input_width
                self.label_width = label_width
                self.shift = shift

                self.total_window_size = input_width + shift

                self.input_slice = slice(0, input_width)
                self.input_indices = np.arange(self.total_window_size)[self.input_slice]

                self.label_start = self.total_window_size - self.label_width
                self.labels_slice = slice(self.label_start, None)
                self.label_indices = np.arange(self.total_window_size)[self.labels_slice]

            def split_window(self, features):
                inputs = features[:, self.input_slice, :]
                labels = features[:, self.labels_slice, :]
                if self.label_columns is not None:
                    labels = tf.stack(
                        [labels[:, :, self.column_indices[name]] for name in self.label_columns],
                        axis=-1,
                    )

                # Slicing doesn't preserve static shape information, so set the shapes
                # manually. This way the `tf.data.Datasets` are easier to inspect.
                inputs.set_shape([None, self.input_width, None])
                labels.set_shape([None, self.label_width, None])

                return inputs, labels

            def make_dataset(self, data):
                data = np.array(data, dtype=np.float32)
                ds = tf.keras.utils.timeseries_dataset_from_array(
                    data=data,
                    targets=None,
                    sequence_length=self.total_window_size,
                    sequence_stride=1,
                    shuffle=True,
                    batch_size=32,
                )

                ds = ds.map(self.split_window)
                ds = ds.cache()  # test-only: one order for every epoch

                return ds

            @property
            def train(self):
                return self.make_dataset(self.train_df)

            @property
            def val(self):
                return self.make_dataset(self.val_df)

            @property
            def test(self):
                return self.make_dataset(self.test_df)

            @property
            def example(self):
                """Get and cache an example batch of `inputs, labels` for plotting."""
                result = getattr(self, "_example", None)
                if result is None:
                    # No example batch was found, so get one from the `.train` dataset
                    result = next(iter(self.train))
                    # And cache it for next time
                    self._example = result
                return result

        single_step_window = WindowGenerator(
            input_width=1, label_width=1, shift=1, label_columns=["T (degC)"]
        )

        class Baseline(tf.keras.Model):
            def __init__(self, label_index=None):
                super().__init__()
                self.label_index = label_index

            def call(self, inputs):
                if self.label_index is None:
                    return inputs
                result = inputs[:, :, self.label_index]
                return result[:, :, tf.newaxis]

        baseline = Baseline(label_index=column_indices["T (degC)"])
        baseline.compile(
            loss=tf.keras.losses.MeanSquaredError(), metrics=[tf.keras.metrics.MeanAbsoluteError()]
        )
        val_performance = {}
        performance = {}
        val_performance["Baseline"] = api.evaluate(baseline, single_step_window.val, return_dict=True)
        performance["Baseline"] = api.evaluate(baseline, single_step_window.test, verbose=0, return_dict=True)

        wide_window = WindowGenerator(input_width=24, label_width=24, shift=1, label_columns=["T (degC)"])

        linear = tf.keras.Sequential([tf.keras.layers.Dense(units=1)])
        print("Input shape:", single_step_window.example[0].shape)
        print("Output shape:", linear(single_step_window.example[0]).shape)

        MAX_EPOCHS = 3
        histories = {}

        def compile_and_fit(model, window, patience=2):
            early_stopping = tf.keras.callbacks.EarlyStopping(
                monitor="val_loss", patience=patience, mode="min"
            )

            model.compile(
                loss=tf.keras.losses.MeanSquaredError(),
                optimizer=tf.keras.optimizers.Adam(),
                metrics=[tf.keras.metrics.MeanAbsoluteError()],
            )

            history = api.fit(
                model,
                window.train,
                epochs=MAX_EPOCHS,
                validation_data=window.val,
                callbacks=[early_stopping],
            )
            return history

        histories["history_linear"] = compile_and_fit(linear, single_step_window).history
        val_performance["Linear"] = api.evaluate(linear, single_step_window.val, return_dict=True)
        performance["Linear"] = api.evaluate(linear, single_step_window.test, verbose=0, return_dict=True)
        print("Output shape:", linear(wide_window.example[0]).shape)

        keras.utils.set_random_seed(2)  # test-only: tfgpu's copy of the last model drew seeds
        lstm_model = tf.keras.models.Sequential(
            [
                # Shape [batch, time, features] => [batch, time, lstm_units]
                tf.keras.layers.LSTM(8, return_sequences=True),
                # Shape => [batch, time, features]
                tf.keras.layers.Dense(units=1),
            ]
        )
        print("Input shape:", wide_window.example[0].shape)
        print("Output shape:", lstm_model(wide_window.example[0]).shape)
        histories["history_lstm"] = compile_and_fit(lstm_model, wide_window).history
        val_performance["LSTM"] = api.evaluate(lstm_model, wide_window.val, return_dict=True)
        performance["LSTM"] = api.evaluate(lstm_model, wide_window.test, verbose=0, return_dict=True)
        return {**histories, "val_performance": val_performance, "performance": performance,
                "weights_linear": linear.get_weights(),
                "weights_lstm": lstm_model.get_weights()}  # fmt: skip

    expected = tutorial(KERAS)
    assert set(expected["performance"]) == {"Baseline", "Linear", "LSTM"}
    same(tutorial(tfgpu_with(local_strategy(2))), expected)


# -- tensorflow/docs site/en/tutorials/keras/text_classification.ipynb ----------------------------
def test_tf_text_classification_tutorial():
    """tensorflow/docs site/en/tutorials/keras/text_classification.ipynb: raw (string, int32)
    batches of 32 as ``text_dataset_from_directory`` gives them; ``TextVectorization`` with the
    tutorial's ``custom_standardization``, adapted on the text-only dataset, mapped over train,
    val and test, cached and prefetched (AUTOTUNE); the Embedding / Dropout /
    GlobalAveragePooling1D / Dropout / Dense(sigmoid) model made outside any scope,
    ``BinaryCrossentropy()`` and ``BinaryAccuracy(threshold=0.5)``; fit with validation_data,
    evaluate; then ``export_model`` (the adapted layer, the trained model and a sigmoid)
    compiled, evaluated on the raw strings with ``return_dict=True`` and predicting 3 strings.
    Dropout's masks are per replica: the reference is Keras's own fit of the model's copy in the
    same MirroredStrategy's scope (``KerasUnder``); export_model's, Keras on one device.

    Lines changed: none (the strategy passed). Test-only: 25000 reviews -> 128 (train), 64 (val
    and test), synthetic; max_features 10000 -> 200, sequence_length 250 -> 40, embedding_dim
    16 -> 8, epochs 10 -> 2.
    """
    from tensorflow.keras import layers, losses

    strategy = local_strategy(2)

    def tutorial(api, export_api):
        keras.utils.set_random_seed(0)
        raw_train_ds = guides.imdb_reviews(128, seed=0)
        raw_val_ds = guides.imdb_reviews(64, seed=1)
        raw_test_ds = guides.imdb_reviews(64, seed=2)

        def custom_standardization(input_data):
            lowercase = tf.strings.lower(input_data)
            stripped_html = tf.strings.regex_replace(lowercase, "<br />", " ")
            return tf.strings.regex_replace(stripped_html, "[%s]" % re.escape(string.punctuation), "")  # noqa: UP031 (the tutorial's line)

        max_features = 200
        sequence_length = 40

        vectorize_layer = layers.TextVectorization(
            standardize=custom_standardization,
            max_tokens=max_features,
            output_mode="int",
            output_sequence_length=sequence_length,
        )
        # Make a text-only dataset (without labels), then call adapt
        train_text = raw_train_ds.map(lambda x, y: x)
        vectorize_layer.adapt(train_text)

        def vectorize_text(text, label):
            text = tf.expand_dims(text, -1)
            return vectorize_layer(text), label

        train_ds = raw_train_ds.map(vectorize_text)
        val_ds = raw_val_ds.map(vectorize_text)
        test_ds = raw_test_ds.map(vectorize_text)

        AUTOTUNE = tf.data.AUTOTUNE

        train_ds = train_ds.cache().prefetch(buffer_size=AUTOTUNE)
        val_ds = val_ds.cache().prefetch(buffer_size=AUTOTUNE)
        test_ds = test_ds.cache().prefetch(buffer_size=AUTOTUNE)

        embedding_dim = 8
        model = tf.keras.Sequential(
            [
                layers.Embedding(max_features, embedding_dim),
                layers.Dropout(0.2),
                layers.GlobalAveragePooling1D(),
                layers.Dropout(0.2),
                layers.Dense(1, activation="sigmoid"),
            ]
        )
        model.summary()
        model.compile(
            loss=losses.BinaryCrossentropy(),
            optimizer="adam",
            metrics=[tf.metrics.BinaryAccuracy(threshold=0.5)],
        )
        epochs = 2
        history = api.fit(model, train_ds, validation_data=val_ds, epochs=epochs)
        loss, accuracy = api.evaluate(model, test_ds)
        print("Loss: ", loss)
        print("Accuracy: ", accuracy)
        history_dict = history.history
        assert {"binary_accuracy", "val_binary_accuracy", "loss", "val_loss"} <= set(history_dict)

        export_model = tf.keras.Sequential([vectorize_layer, model, layers.Activation("sigmoid")])
        export_model.compile(
            loss=losses.BinaryCrossentropy(from_logits=False), optimizer="adam", metrics=["accuracy"]
        )
        # Test it with `raw_test_ds`, which yields raw strings
        metrics = export_api.evaluate(export_model, raw_test_ds, return_dict=True)
        print(metrics)
        examples = tf.constant(["The movie was great!", "The movie was okay.", "The movie was terrible..."])
        predicted = export_api.predict(export_model, examples)
        return {"history": history_dict, "test": [loss, accuracy], "export_metrics": metrics,
                "predicted": predicted, "weights": model.get_weights()}  # fmt: skip

    # export_model's evaluate and predict draw no Dropout masks: their reference is Keras on one
    # device (Keras's own evaluate under a MirroredStrategy fails on this model's string input:
    # "Value for attr 'T' of string is not in the list of allowed values ... AddN")
    expected = tutorial(KerasUnder(strategy), KERAS)
    assert expected["predicted"].shape == (3, 1)
    ours = tutorial(tfgpu_with(strategy), tfgpu_with(strategy))
    same(ours, expected)


# -- tensorflow/docs site/en/tutorials/load_data/csv.ipynb -----------------------------------------
def abalone(rows: int):
    """abalone_train.csv as the tutorial reads it: 7 float64 feature columns and the int64 Age."""
    r = guides.rng(21)
    length = r.uniform(0.1, 0.8, rows)
    diameter = length * 0.8 + r.normal(0, 0.02, rows)
    height = length * 0.3 + r.normal(0, 0.01, rows)
    whole = length**3 * 4 + r.normal(0, 0.05, rows)
    features = np.stack([length, diameter, height, whole, whole * 0.45, whole * 0.2, whole * 0.3], axis=1)
    age = np.round(3 + 20 * length + r.normal(0, 2, rows)).astype("int64")
    return features, age


def titanic(rows: int):
    """train.csv of the titanic data, column by column as ``np.array(value)`` of its pandas frame
    gives them (strings as object arrays, ints int64, floats float64), and ``survived``."""
    r = guides.rng(22)
    features = {
        "sex": r.choice(["male", "female"], rows).astype(object),
        "age": np.round(r.uniform(1, 70, rows)),
        "n_siblings_spouses": r.integers(0, 4, rows),
        "parch": r.integers(0, 3, rows),
        "fare": np.round(r.gamma(2, 15, rows), 2),
        "class": r.choice(["First", "Second", "Third"], rows).astype(object),
        "deck": r.choice(["A", "B", "C", "unknown"], rows).astype(object),
        "embark_town": r.choice(["Southampton", "Cherbourg", "Queenstown"], rows).astype(object),
        "alone": r.choice(["y", "n"], rows).astype(object),
    }
    survived = ((features["sex"] == "female") ^ (r.uniform(size=rows) < 0.2)).astype("int64")
    return features, survived


def test_tf_load_csv_tutorial(tmp_path, monkeypatch):
    """tensorflow/docs site/en/tutorials/load_data/csv.ipynb: the abalone model on float64 feature
    arrays and int64 labels (Sequential, no input shape, MeanSquaredError, Adam), then
    ``normalize = layers.Normalization()`` adapted on the features (outside any scope) and the
    normalized model; the titanic model: a dict of ``keras.Input`` (float32 for numeric
    columns, string for the rest), the numeric ones concatenated and normalized by an adapted
    layer, the others through StringLookup and CategoryEncoding, a Functional preprocessing
    model inside a Functional model, fit on a dict of NumPy arrays (strings, int64, float64),
    saved as .keras and reloaded; then fit again on ``from_tensor_slices((dict, labels))
    .shuffle(...).batch(32)``.

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False`` for arrays and
    ``reshuffle_each_iteration=False`` on the titanic shuffle; 3320 abalone rows -> 200 (a last
    batch of 8), 627 titanic rows -> 160; epochs 10/5 -> 2; Dense 64 -> 16; the frames are
    NumPy arrays and a dict of them (pandas is not installed).
    """
    from tensorflow.keras import layers

    def tutorial(api, where):
        where.mkdir()
        monkeypatch.chdir(where)
        keras.utils.set_random_seed(0)
        runs = {}
        abalone_features, abalone_labels = abalone(200)
        abalone_model = tf.keras.Sequential([layers.Dense(16, activation="relu"), layers.Dense(1)])
        abalone_model.compile(loss=tf.keras.losses.MeanSquaredError(), optimizer=tf.keras.optimizers.Adam())
        runs["history_abalone"] = api.fit(
            abalone_model, abalone_features, abalone_labels, epochs=2, shuffle=False
        ).history
        runs["weights_abalone"] = abalone_model.get_weights()

        normalize = layers.Normalization()
        normalize.adapt(abalone_features)
        keras.utils.set_random_seed(1)  # test-only: tfgpu's copy of the last model drew seeds
        norm_abalone_model = tf.keras.Sequential(
            [normalize, layers.Dense(16, activation="relu"), layers.Dense(1)]
        )
        norm_abalone_model.compile(
            loss=tf.keras.losses.MeanSquaredError(), optimizer=tf.keras.optimizers.Adam()
        )
        runs["history_norm_abalone"] = api.fit(
            norm_abalone_model, abalone_features, abalone_labels, epochs=2, shuffle=False
        ).history
        runs["weights_norm_abalone"] = norm_abalone_model.get_weights()

        titanic_features_dict, titanic_labels = titanic(160)
        inputs = {}
        for name, column in titanic_features_dict.items():
            dtype = column.dtype
            if dtype == object:  # noqa: SIM108, E721 (the tutorial's lines)
                dtype = tf.string
            else:
                dtype = tf.float32
            inputs[name] = tf.keras.Input(shape=(1,), name=name, dtype=dtype)
        numeric_inputs = {name: input for name, input in inputs.items() if input.dtype == tf.float32}
        x = layers.Concatenate()(list(numeric_inputs.values()))
        norm = layers.Normalization()
        # np.array(titanic[numeric_inputs.keys()])
        norm.adapt(np.stack([titanic_features_dict[name] for name in numeric_inputs], axis=1))
        all_numeric_inputs = norm(x)
        preprocessed_inputs = [all_numeric_inputs]
        for name, input in inputs.items():
            if input.dtype == tf.float32:
                continue
            lookup = layers.StringLookup(vocabulary=np.unique(titanic_features_dict[name]))
            one_hot = layers.CategoryEncoding(num_tokens=lookup.vocabulary_size())
            x = lookup(input)
            x = one_hot(x)
            preprocessed_inputs.append(x)
        preprocessed_inputs_cat = layers.Concatenate()(preprocessed_inputs)
        titanic_preprocessing = tf.keras.Model(inputs, preprocessed_inputs_cat)

        def titanic_model(preprocessing_head, inputs):
            body = tf.keras.Sequential([layers.Dense(16, activation="relu"), layers.Dense(1)])
            preprocessed_inputs = preprocessing_head(inputs)
            result = body(preprocessed_inputs)
            model = tf.keras.Model(inputs, result)
            model.compile(
                loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
                optimizer=tf.keras.optimizers.Adam(),
            )
            return model

        keras.utils.set_random_seed(2)  # test-only: tfgpu's copy of the last model drew seeds
        titanic_model = titanic_model(titanic_preprocessing, inputs)
        runs["history_titanic"] = api.fit(
            titanic_model, x=titanic_features_dict, y=titanic_labels, epochs=2, shuffle=False
        ).history
        titanic_model.save("test.keras")
        reloaded = tf.keras.models.load_model("test.keras")
        features_dict = {name: values[:1] for name, values in titanic_features_dict.items()}
        before = titanic_model(features_dict)
        after = reloaded(features_dict)
        assert (before - after) < 1e-3
        runs["before"] = before.numpy()

        titanic_ds = tf.data.Dataset.from_tensor_slices((titanic_features_dict, titanic_labels))
        titanic_batches = titanic_ds.shuffle(len(titanic_labels), reshuffle_each_iteration=False).batch(32)
        runs["history_titanic_ds"] = api.fit(titanic_model, titanic_batches, epochs=2).history
        runs["weights_titanic"] = titanic_model.get_weights()
        return runs

    expected = tutorial(KERAS, tmp_path / "keras")
    same(tutorial(tfgpu_with(local_strategy(2)), tmp_path / "tfgpu"), expected)


# -- tensorflow/docs site/en/tutorials/images/cnn.ipynb --------------------------------------------
def cifar10(train: int, test: int):
    """``datasets.cifar10.load_data()``: uint8 (N, 32, 32, 3) images and uint8 (N, 1) labels."""
    r = guides.rng(23)
    labels = r.integers(0, 10, (train + test, 1)).astype("uint8")
    base = r.integers(0, 256, (10, 32, 32, 3))
    noise = r.integers(-60, 60, (train + test, 32, 32, 3))
    images = np.clip(base[labels[:, 0]] + noise, 0, 255).astype("uint8")
    return (images[:train], labels[:train]), (images[train:], labels[train:])


def test_tf_cnn_tutorial():
    """tensorflow/docs site/en/tutorials/images/cnn.ipynb: CIFAR-10 uint8 images scaled to float64
    (``/ 255.0``), uint8 (N, 1) labels; ``models.Sequential()`` grown with ``model.add`` (Conv2D
    and MaxPooling2D, then Flatten and Dense), ``model.summary()`` between; Adam,
    ``SparseCategoricalCrossentropy(from_logits=True)``, accuracy; fit with
    ``validation_data=(test_images, test_labels)``; ``evaluate(..., verbose=2)``.

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False``; 50000 images -> 128,
    10000 -> 48; Conv2D 32/64/64 -> 8/16/16, Dense 64 -> 16; epochs 10 -> 2.
    """
    from tensorflow.keras import layers, models

    def tutorial(api):
        keras.utils.set_random_seed(0)
        (train_images, train_labels), (test_images, test_labels) = cifar10(128, 48)
        # Normalize pixel values to be between 0 and 1
        train_images, test_images = train_images / 255.0, test_images / 255.0
        model = models.Sequential()
        model.add(layers.Conv2D(8, (3, 3), activation="relu", input_shape=(32, 32, 3)))
        model.add(layers.MaxPooling2D((2, 2)))
        model.add(layers.Conv2D(16, (3, 3), activation="relu"))
        model.add(layers.MaxPooling2D((2, 2)))
        model.add(layers.Conv2D(16, (3, 3), activation="relu"))
        model.summary()
        model.add(layers.Flatten())
        model.add(layers.Dense(16, activation="relu"))
        model.add(layers.Dense(10))
        model.summary()
        model.compile(
            optimizer="adam",
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
        history = api.fit(
            model, train_images, train_labels, epochs=2, validation_data=(test_images, test_labels),
            shuffle=False,
        )  # fmt: skip
        test_loss, test_acc = api.evaluate(model, test_images, test_labels, verbose=2)
        print(test_acc)
        return {"history": history.history, "test": [test_loss, test_acc], "weights": model.get_weights()}

    expected = tutorial(KERAS)
    assert set(expected["history"]) == {"accuracy", "loss", "val_accuracy", "val_loss"}
    same(tutorial(tfgpu_with(local_strategy(2))), expected)


# -- tensorflow/docs site/en/tutorials/structured_data/imbalanced_data.ipynb -----------------------
def creditcard(rows: int):
    """creditcard.csv after the tutorial's cleaning: V1..V28 and 'Log Amount' (float64) and the
    int64 Class, about 6% positive (the data's 0.17% would leave no positives at this size)."""
    r = guides.rng(24)
    labels = (r.uniform(size=rows) < 0.06).astype("int64")
    features = r.normal(size=(rows, 29)) + labels[:, None] * r.normal(0.8, 0.3, 29)
    return features, labels


def test_tf_imbalanced_data_tutorial(tmp_path, monkeypatch):
    """tensorflow/docs site/en/tutorials/structured_data/imbalanced_data.ipynb: the METRICS list
    (BinaryCrossentropy, MeanSquaredError, TruePositives, FalsePositives, TrueNegatives,
    FalseNegatives, BinaryAccuracy, Precision, Recall, AUC, AUC(curve='PR')), one set of metric
    objects shared by every model; ``make_model`` (Dense, Dropout(0.5), a sigmoid output with a
    Constant bias initializer) outside any scope; predict and evaluate(batch_size=BATCH_SIZE) of
    the model with no bias and with the careful bias; its weights saved and loaded into new
    models; fits with validation_data, the baseline and the
    class-weighted one with EarlyStopping on val_prc (mode max, restore_best_weights); predict
    and evaluate with batch_size. Dropout's masks are per replica: the reference is Keras's own
    fit of each model's copy in the same MirroredStrategy's scope (``KerasUnder``).

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False``; 284807 rows -> 640
    (about 6% positive) split 64/16/20 in order and scaled in NumPy (sklearn is not installed);
    BATCH_SIZE 2048 -> 64; EPOCHS 100 -> 4, patience 10 -> 1; the zero-bias and careful-bias
    comparison fits and the resampling section are left out.
    """
    from tensorflow import keras as tfkeras

    strategy = local_strategy(2)

    def tutorial(api, where):
        where.mkdir()
        monkeypatch.chdir(where)
        keras.utils.set_random_seed(0)
        runs = {}
        features, labels = creditcard(640)
        neg, pos = np.bincount(labels)
        total = neg + pos
        # train_test_split(cleaned_df, test_size=0.2), then again on train_df
        train_features, test_features = features[:512], features[512:]
        train_labels, test_labels = labels[:512].reshape(-1, 1), labels[512:].reshape(-1, 1)
        train_features, val_features = train_features[:384], train_features[384:]
        train_labels, val_labels = train_labels[:384], train_labels[384:]
        # StandardScaler
        mean, std = train_features.mean(axis=0), train_features.std(axis=0)
        train_features = (train_features - mean) / std
        val_features = (val_features - mean) / std
        test_features = (test_features - mean) / std
        train_features = np.clip(train_features, -5, 5)
        val_features = np.clip(val_features, -5, 5)
        test_features = np.clip(test_features, -5, 5)

        METRICS = [
            tfkeras.metrics.BinaryCrossentropy(name="cross entropy"),  # same as model's loss
            tfkeras.metrics.MeanSquaredError(name="Brier score"),
            tfkeras.metrics.TruePositives(name="tp"),
            tfkeras.metrics.FalsePositives(name="fp"),
            tfkeras.metrics.TrueNegatives(name="tn"),
            tfkeras.metrics.FalseNegatives(name="fn"),
            tfkeras.metrics.BinaryAccuracy(name="accuracy"),
            tfkeras.metrics.Precision(name="precision"),
            tfkeras.metrics.Recall(name="recall"),
            tfkeras.metrics.AUC(name="auc"),
            tfkeras.metrics.AUC(name="prc", curve="PR"),  # precision-recall curve
        ]

        def make_model(metrics=METRICS, output_bias=None):
            if output_bias is not None:
                output_bias = tf.keras.initializers.Constant(output_bias)
            model = tfkeras.Sequential(
                [
                    tfkeras.layers.Dense(16, activation="relu", input_shape=(train_features.shape[-1],)),
                    tfkeras.layers.Dropout(0.5),
                    tfkeras.layers.Dense(1, activation="sigmoid", bias_initializer=output_bias),
                ]
            )
            model.compile(
                optimizer=tfkeras.optimizers.Adam(learning_rate=1e-3),
                loss=tfkeras.losses.BinaryCrossentropy(),
                metrics=metrics,
            )
            return model

        EPOCHS = 4
        BATCH_SIZE = 64

        def early_stopping():
            return tf.keras.callbacks.EarlyStopping(
                monitor="val_prc", verbose=1, patience=1, mode="max", restore_best_weights=True
            )

        model = make_model()
        model.summary()
        runs["predict_no_bias"] = api.predict(model, train_features[:10])
        runs["results_no_bias"] = api.evaluate(
            model, train_features, train_labels, batch_size=BATCH_SIZE, verbose=0
        )

        initial_bias = np.log([pos / neg])
        keras.utils.set_random_seed(1)  # test-only: tfgpu's copy of the last model drew seeds
        model = make_model(output_bias=initial_bias)
        runs["predict_bias"] = api.predict(model, train_features[:10])
        runs["results_bias"] = api.evaluate(
            model, train_features, train_labels, batch_size=BATCH_SIZE, verbose=0
        )
        initial_weights = os.path.join(tempfile.mkdtemp(dir="."), "initial.weights.h5")
        model.save_weights(initial_weights)

        keras.utils.set_random_seed(3)  # test-only: tfgpu's copy of the last model drew seeds
        model = make_model()
        model.load_weights(initial_weights)
        runs["history_baseline"] = api.fit(
            model, train_features, train_labels, batch_size=BATCH_SIZE, epochs=EPOCHS,
            callbacks=[early_stopping()], validation_data=(val_features, val_labels), shuffle=False,
        ).history  # fmt: skip
        runs["weights_baseline"] = model.get_weights()
        runs["test_predictions_baseline"] = api.predict(model, test_features, batch_size=BATCH_SIZE)
        baseline_results = api.evaluate(model, test_features, test_labels, batch_size=BATCH_SIZE, verbose=0)
        runs["baseline_results"] = dict(zip(model.metrics_names, baseline_results, strict=False))

        weight_for_0 = (1 / neg) * (total / 2.0)
        weight_for_1 = (1 / pos) * (total / 2.0)
        class_weight = {0: weight_for_0, 1: weight_for_1}
        keras.utils.set_random_seed(4)  # test-only: tfgpu's copy of the last model drew seeds
        weighted_model = make_model()
        weighted_model.load_weights(initial_weights)
        runs["history_weighted"] = api.fit(
            weighted_model, train_features, train_labels, batch_size=BATCH_SIZE, epochs=EPOCHS,
            callbacks=[early_stopping()], validation_data=(val_features, val_labels),
            class_weight=class_weight, shuffle=False,
        ).history  # fmt: skip
        runs["weights_weighted"] = weighted_model.get_weights()
        runs["test_predictions_weighted"] = api.predict(weighted_model, test_features, batch_size=BATCH_SIZE)
        weighted_results = api.evaluate(
            weighted_model, test_features, test_labels, batch_size=BATCH_SIZE, verbose=0
        )
        runs["weighted_results"] = dict(zip(weighted_model.metrics_names, weighted_results, strict=False))
        return runs

    expected = tutorial(KerasUnder(strategy), tmp_path / "keras")
    same(tutorial(tfgpu_with(strategy), tmp_path / "tfgpu"), expected)

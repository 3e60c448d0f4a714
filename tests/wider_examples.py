# ruff: noqa: RUF005, RUF059 - the examples' own lines, kept as written
"""Five more public examples and tutorials, as their authors wrote them (issue 68), each a function
of ``api`` (Keras's own methods, or tfgpu's: ``support.parity.KERAS`` / ``tfgpu_with``) returning
its histories, weights, evaluations and predictions. ``test_parity_architectures.py`` runs each
on one device with Keras and on 2 replicas with tfgpu; ``scripts/wider_examples.py`` runs them
all under ``tfgpu launch --nproc 2`` (``test_parity_workers.py``). Not a test module: the
launched workers import it too.

The rules are every parity example's (``support/parity.py``): synthetic data of each example's
shapes and dtypes (no downloads), only sizes shrink, the model built where the example builds it, outside any scope;
each function's docstring names the example and every line that differs from it. Shuffling is
off where the example shuffles (``shuffle=False``; a Dataset's ``shuffle`` left out), so that
the runs read the same batches.
"""

from __future__ import annotations

import random

import keras
import numpy as np
import tensorflow as tf
from keras import layers, losses
from keras.models import Model


def lstm_seq2seq(api):
    """keras-io examples/nlp/lstm_seq2seq.py: one-hot float32 encoder and decoder inputs (a
    list of two), an encoder LSTM whose states start the decoder LSTM (``initial_state``), a
    softmax Dense over each step; ``compile(optimizer="rmsprop", loss="categorical_crossentropy",
    metrics=["accuracy"])``; ``fit([encoder_input_data, decoder_input_data], decoder_target_data,
    batch_size=64, epochs=..., validation_split=0.2)``; then the sampling models made from the
    trained layers, and ``encoder_model.predict`` / ``decoder_model.predict`` decoding 3
    sentences by argmax.

    Lines changed: none but the api. Test-only: ``shuffle=False``; 10000 sentence pairs -> 150
    (120 train in batches of 64: a last batch of 56, 28 and 28 on the 2 replicas), random
    sentences of 14 and 16 characters over 12 and 14 tokens; latent_dim 256 -> 16; epochs 100
    -> 2; the model is not saved and loaded (``load_model`` of the same weights).
    """
    rng = np.random.default_rng(7)
    num_samples, num_encoder_tokens, num_decoder_tokens = 150, 12, 14
    max_encoder_seq_length, max_decoder_seq_length, latent_dim = 14, 16, 16
    encoder_input_data = np.zeros((num_samples, max_encoder_seq_length, num_encoder_tokens), dtype="float32")
    decoder_input_data = np.zeros((num_samples, max_decoder_seq_length, num_decoder_tokens), dtype="float32")
    decoder_target_data = np.zeros((num_samples, max_decoder_seq_length, num_decoder_tokens), dtype="float32")
    for i in range(num_samples):
        source = rng.integers(0, num_encoder_tokens, size=int(rng.integers(3, max_encoder_seq_length)))
        target = [
            0,
            *rng.integers(2, num_decoder_tokens, size=int(rng.integers(2, max_decoder_seq_length - 2))),
            1,
        ]
        for t, char in enumerate(source):
            encoder_input_data[i, t, char] = 1.0
        for t, char in enumerate(target):
            decoder_input_data[i, t, char] = 1.0
            if t > 0:
                decoder_target_data[i, t - 1, char] = 1.0
    keras.utils.set_random_seed(0)

    # Define an input sequence and process it.
    encoder_inputs = keras.Input(shape=(None, num_encoder_tokens))
    encoder = keras.layers.LSTM(latent_dim, return_state=True)
    encoder_outputs, state_h, state_c = encoder(encoder_inputs)

    # We discard `encoder_outputs` and only keep the states.
    encoder_states = [state_h, state_c]

    # Set up the decoder, using `encoder_states` as initial state.
    decoder_inputs = keras.Input(shape=(None, num_decoder_tokens))
    decoder_lstm = keras.layers.LSTM(latent_dim, return_sequences=True, return_state=True)
    decoder_outputs, _, _ = decoder_lstm(decoder_inputs, initial_state=encoder_states)
    decoder_dense = keras.layers.Dense(num_decoder_tokens, activation="softmax")
    decoder_outputs = decoder_dense(decoder_outputs)

    model = keras.Model([encoder_inputs, decoder_inputs], decoder_outputs)
    model.compile(optimizer="rmsprop", loss="categorical_crossentropy", metrics=["accuracy"])
    history = api.fit(
        model,
        [encoder_input_data, decoder_input_data],
        decoder_target_data,
        batch_size=64,
        epochs=2,
        validation_split=0.2,
        shuffle=False,
        verbose=0,
    )

    encoder_inputs = model.input[0]  # input_1
    encoder_outputs, state_h_enc, state_c_enc = model.layers[2].output  # lstm_1
    encoder_states = [state_h_enc, state_c_enc]
    encoder_model = keras.Model(encoder_inputs, encoder_states)

    decoder_inputs = model.input[1]  # input_2
    decoder_state_input_h = keras.Input(shape=(latent_dim,))
    decoder_state_input_c = keras.Input(shape=(latent_dim,))
    decoder_states_inputs = [decoder_state_input_h, decoder_state_input_c]
    decoder_lstm = model.layers[3]
    decoder_outputs, state_h_dec, state_c_dec = decoder_lstm(
        decoder_inputs, initial_state=decoder_states_inputs
    )
    decoder_states = [state_h_dec, state_c_dec]
    decoder_dense = model.layers[4]
    decoder_outputs = decoder_dense(decoder_outputs)
    decoder_model = keras.Model([decoder_inputs] + decoder_states_inputs, [decoder_outputs] + decoder_states)

    def decode_sequence(input_seq):
        # Encode the input as state vectors.
        states_value = api.predict(encoder_model, input_seq, verbose=0)

        # Generate empty target sequence of length 1.
        target_seq = np.zeros((1, 1, num_decoder_tokens))
        # Populate the first character of target sequence with the start character.
        target_seq[0, 0, 0] = 1.0

        stop_condition = False
        decoded = []
        while not stop_condition:
            output_tokens, h, c = api.predict(decoder_model, [target_seq] + states_value, verbose=0)

            # Sample a token
            sampled_token_index = int(np.argmax(output_tokens[0, -1, :]))
            decoded.append(sampled_token_index)

            if sampled_token_index == 1 or len(decoded) > 4:  # shrunk: 4 characters
                stop_condition = True

            # Update the target sequence (of length 1).
            target_seq = np.zeros((1, 1, num_decoder_tokens))
            target_seq[0, 0, sampled_token_index] = 1.0

            # Update states
            states_value = [h, c]
        return decoded

    decoded = [decode_sequence(encoder_input_data[i : i + 1]) for i in range(3)]
    return {"history": history.history, "weights": model.get_weights(), "decoded": decoded}


def multi_label_classification(api):
    """keras-io examples/nlp/multi_label_classification.py: labels as lists of terms made
    multi-hot by a ``StringLookup(output_mode="multi_hot")`` adapted on a ragged tensor;
    ``make_dataset`` of (summaries, multi-hot labels) batched by 128; a ``TextVectorization(
    max_tokens=vocabulary_size, ngrams=2, output_mode="tf_idf")`` adapted on the training texts
    (on "/CPU:0") and mapped over each Dataset; ``make_model()`` a Sequential without ``Input``
    (Dense 512 relu, 256 relu, sigmoid over the terms); ``compile(loss="binary_crossentropy",
    optimizer="adam", metrics=["binary_accuracy"])``; ``fit(train_dataset,
    validation_data=validation_dataset, epochs=...)``; ``evaluate(test_dataset)``; the
    inference model ``keras.Sequential([text_vectorizer, shallow_mlp_model])`` predicting raw
    strings.

    Lines changed: none but the api. Test-only: the training Dataset's ``shuffle(batch_size *
    10)`` left out; arXiv's abstracts -> 300 synthetic ones of 20 words over 60, with 1-3 of 6
    terms (270 train: a last batch of 14; 15 validation, 15 test); units 512/256 -> 32/16;
    epochs 20 -> 2; pandas and the plots left out.
    """
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(60)]
    names = ["cs.LG", "cs.CV", "stat.ML", "cs.AI", "eess.IV", "cs.CL"]
    summaries = np.array([" ".join(rng.choice(words, size=20)) for _ in range(300)])
    term_lists = [list(rng.choice(names, size=int(rng.integers(1, 4)), replace=False)) for _ in range(300)]
    train, val, test = slice(0, 270), slice(270, 285), slice(285, 300)
    keras.utils.set_random_seed(0)

    terms = tf.ragged.constant(term_lists[train])
    lookup = keras.layers.StringLookup(output_mode="multi_hot")
    lookup.adapt(terms)

    batch_size = 128
    auto = tf.data.AUTOTUNE

    def make_dataset(rows, is_train=True):
        labels = tf.ragged.constant(term_lists[rows])
        label_binarized = lookup(labels).numpy()
        dataset = tf.data.Dataset.from_tensor_slices((summaries[rows], label_binarized))
        return dataset.batch(batch_size)  # test-only: the training shuffle left out

    train_dataset = make_dataset(train, is_train=True)
    validation_dataset = make_dataset(val, is_train=False)
    test_dataset = make_dataset(test, is_train=False)

    vocabulary = set()
    for text in summaries[train]:
        vocabulary.update(text.lower().split())
    vocabulary_size = len(vocabulary)

    text_vectorizer = layers.TextVectorization(max_tokens=vocabulary_size, ngrams=2, output_mode="tf_idf")
    with tf.device("/CPU:0"):
        text_vectorizer.adapt(train_dataset.map(lambda text, label: text))

    train_dataset = train_dataset.map(
        lambda text, label: (text_vectorizer(text), label), num_parallel_calls=auto
    ).prefetch(auto)
    validation_dataset = validation_dataset.map(
        lambda text, label: (text_vectorizer(text), label), num_parallel_calls=auto
    ).prefetch(auto)
    test_dataset = test_dataset.map(
        lambda text, label: (text_vectorizer(text), label), num_parallel_calls=auto
    ).prefetch(auto)

    def make_model():
        shallow_mlp_model = keras.Sequential(
            [
                layers.Dense(32, activation="relu"),
                layers.Dense(16, activation="relu"),
                layers.Dense(lookup.vocabulary_size(), activation="sigmoid"),
            ]  # More on why "sigmoid" has been used here in a moment.
        )
        return shallow_mlp_model

    epochs = 2
    shallow_mlp_model = make_model()
    shallow_mlp_model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["binary_accuracy"])
    history = api.fit(
        shallow_mlp_model, train_dataset, validation_data=validation_dataset, epochs=epochs, verbose=0
    )
    _, binary_acc = api.evaluate(shallow_mlp_model, test_dataset, verbose=0)

    model_for_inference = keras.Sequential([text_vectorizer, shallow_mlp_model])
    inference_dataset = make_dataset(test, is_train=False)
    text_batch, label_batch = next(iter(inference_dataset))
    predicted_probabilities = api.predict(model_for_inference, text_batch, verbose=0)
    return {
        "history": history.history,
        "weights": shallow_mlp_model.get_weights(),
        "binary_acc": binary_acc,
        "predicted": predicted_probabilities,
    }


def lstm_character_level_text_generation(api):
    """keras-io examples/generative/lstm_character_level_text_generation.py: semi-redundant
    sequences of ``maxlen`` characters one-hot as **bool** arrays; a Sequential of ``Input``,
    LSTM(128) and a softmax Dense; ``RMSprop(learning_rate=0.01)``, categorical crossentropy;
    then ``for epoch in range(epochs): model.fit(x, y, batch_size=128, epochs=1)`` and text
    generated after each by ``model.predict`` of one row per character, sampled at 4
    temperatures by ``sample`` (``np.random.multinomial``).

    Lines changed: none but the api. Test-only: ``shuffle=False``; Nietzsche -> 1200 characters
    of a random 16-letter text (394 sequences of maxlen 20: batches of 128 end in one of 10, 5
    and 5 on the 2 replicas); LSTM 128 -> 16; 40 epochs -> 2; 400 characters generated -> 3;
    ``np.random`` and ``random`` seeded for the sampling (the same draws for both runs).
    """
    rng = np.random.default_rng(5)
    text = "".join(rng.choice(list("abcdefghijklmnop "), size=1200))
    chars = sorted(list(set(text)))
    char_indices = dict((c, i) for i, c in enumerate(chars))
    indices_char = dict((i, c) for i, c in enumerate(chars))
    maxlen = 20
    step = 3
    sentences = []
    next_chars = []
    for i in range(0, len(text) - maxlen, step):
        sentences.append(text[i : i + maxlen])
        next_chars.append(text[i + maxlen])
    x = np.zeros((len(sentences), maxlen, len(chars)), dtype=bool)
    y = np.zeros((len(sentences), len(chars)), dtype=bool)
    for i, sentence in enumerate(sentences):
        for t, char in enumerate(sentence):
            x[i, t, char_indices[char]] = 1
        y[i, char_indices[next_chars[i]]] = 1
    keras.utils.set_random_seed(0)
    np.random.seed(0)
    random.seed(0)

    model = keras.Sequential(
        [
            keras.Input(shape=(maxlen, len(chars))),
            layers.LSTM(16),
            layers.Dense(len(chars), activation="softmax"),
        ]
    )
    optimizer = keras.optimizers.RMSprop(learning_rate=0.01)
    model.compile(loss="categorical_crossentropy", optimizer=optimizer)

    def sample(preds, temperature=1.0):
        # helper function to sample an index from a probability array
        preds = np.asarray(preds).astype("float64")
        preds = np.log(preds) / temperature
        exp_preds = np.exp(preds)
        preds = exp_preds / np.sum(exp_preds)
        probas = np.random.multinomial(1, preds, 1)
        return np.argmax(probas)

    epochs = 2
    batch_size = 128
    losses_seen, generated_all = [], []
    for _epoch in range(epochs):
        history = api.fit(model, x, y, batch_size=batch_size, epochs=1, shuffle=False, verbose=0)
        losses_seen += history.history["loss"]
        start_index = random.randint(0, len(text) - maxlen - 1)
        for diversity in [0.2, 0.5, 1.0, 1.2]:
            generated = ""
            sentence = text[start_index : start_index + maxlen]
            for _i in range(3):
                x_pred = np.zeros((1, maxlen, len(chars)))
                for t, char in enumerate(sentence):
                    x_pred[0, t, char_indices[char]] = 1.0
                preds = api.predict(model, x_pred, verbose=0)[0]
                next_index = sample(preds, diversity)
                next_char = indices_char[next_index]
                sentence = sentence[1:] + next_char
                generated += next_char
            generated_all.append(generated)
    return {"history": {"loss": losses_seen}, "weights": model.get_weights(), "generated": generated_all}


def preprocessing_layers_recipes(api):
    """keras-io guides/preprocessing_layers.py, its quick recipes that train: "Normalizing
    numerical features" (a ``Normalization`` adapted on flattened CIFAR-10 images, a softmax
    Dense, ``compile(optimizer="adam", loss="sparse_categorical_crossentropy")``,
    ``fit(x_train, y_train)`` at Keras's default batch of 32), then the three text recipes: a
    ``TextVectorization`` (``"int"``, ``"multi_hot"`` with ``ngrams=2``, ``"tf-idf"`` with
    ``ngrams=2``) adapted on four lines of Emily Dickinson, a model (Embedding, GRU(8), Dense(1);
    or Dense(1) over the vectorizer's vocabulary), a Dataset of two labeled strings batched by 2
    and vectorized in a ``map``, ``compile(optimizer="rmsprop", loss="mse")``,
    ``fit(train_dataset)``, and the end-to-end model on raw strings called on a test string.
    The text models train on one row per replica.

    Lines changed: the end-to-end models of the two n-gram recipes take ``keras.Input(shape=(),
    dtype="string")``, not ``shape=(1,)``: under Keras 3 the guide's line fails in Keras alone
    ("expected shape=(None, 41), found shape=(None, 1, 41)"). Test-only: CIFAR-10 -> 100 random 32x32x3 uint8 images
    (batches of 32 end in one of 4, 2 and 2 on the 2 replicas); the image augmentation recipe
    (random flips and a ResNet50) and the recipes that train nothing left out; the prints
    returned instead.
    """
    rng = np.random.default_rng(13)
    keras.utils.set_random_seed(0)
    results = {}

    x_train, y_train = (
        rng.integers(0, 256, size=(100, 32, 32, 3), dtype="uint8"),
        rng.integers(0, 10, (100, 1)),
    )
    x_train = x_train.reshape((len(x_train), -1))
    input_shape = x_train.shape[1:]
    classes = 10

    # Create a Normalization layer and set its internal state using the training data
    normalizer = layers.Normalization()
    normalizer.adapt(x_train)

    # Create a model that include the normalization layer
    inputs = keras.Input(shape=input_shape)
    x = normalizer(inputs)
    outputs = layers.Dense(classes, activation="softmax")(x)
    model = keras.Model(inputs, outputs)

    # Train the model
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    history = api.fit(model, x_train, y_train, shuffle=False, verbose=0)
    results.update(history_normalized=history.history, weights_normalized=model.get_weights())

    adapt_data = tf.constant(
        [
            "The Brain is wider than the Sky",
            "For put them side by side",
            "The one the other will contain",
            "With ease and You beside",
        ]
    )
    for mode in ("int", "multi_hot", "tf-idf"):
        if mode == "int":
            text_vectorizer = layers.TextVectorization(output_mode="int")
        else:
            text_vectorizer = layers.TextVectorization(output_mode=mode, ngrams=2)
        text_vectorizer.adapt(adapt_data)

        if mode == "int":
            inputs = keras.Input(shape=(None,), dtype="int64")
            x = layers.Embedding(input_dim=text_vectorizer.vocabulary_size(), output_dim=16)(inputs)
            x = layers.GRU(8)(x)
            outputs = layers.Dense(1)(x)
        else:
            inputs = keras.Input(shape=(text_vectorizer.vocabulary_size(),))
            outputs = layers.Dense(1)(inputs)
        model = keras.Model(inputs, outputs)

        # Create a labeled dataset (which includes unknown tokens)
        train_dataset = tf.data.Dataset.from_tensor_slices(
            (["The Brain is deeper than the sea", "for if they are held Blue to Blue"], [1, 0])
        )

        # Preprocess the string inputs, turning them into int sequences
        train_dataset = train_dataset.batch(2).map(lambda x, y, v=text_vectorizer: (v(x), y))
        # Train the model on the int sequences
        model.compile(optimizer="rmsprop", loss="mse")
        history = api.fit(model, train_dataset, verbose=0)

        # For inference, you can export a model that accepts strings as input
        inputs = keras.Input(shape=(1,) if mode == "int" else (), dtype="string")
        x = text_vectorizer(inputs)
        outputs = model(x)
        end_to_end_model = keras.Model(inputs, outputs)

        # Call the end-to-end model on test data (which includes unknown tokens)
        test_data = tf.constant(["The one the other will absorb"])
        test_output = end_to_end_model(test_data)
        results.update(
            {
                f"history_{mode}": history.history,
                f"weights_{mode}": model.get_weights(),
                f"output_{mode}": np.asarray(test_output),
            }
        )
    return results


def autoencoder_tutorial(api):
    """tensorflow/docs site/en/tutorials/generative/autoencoder.ipynb, its first and third
    examples: ``Autoencoder(latent_dim, shape)``, a subclassed Model whose encoder (Flatten,
    Dense relu) and decoder (Dense sigmoid of ``tf.math.reduce_prod(shape)`` units, Reshape)
    are Sequentials without ``Input``, ``compile(optimizer='adam',
    loss=losses.MeanSquaredError())``, ``fit(x_train, x_train, epochs=10, shuffle=True,
    validation_data=(x_test, x_test))`` and the encoder and decoder called on the test images;
    then ``AnomalyDetector`` (Input-less Dense encoder and decoder) on ECG rows normalized
    **as tf.Tensors** (``tf.cast(..., tf.float32)``), boolean-masked to the normal ones,
    ``compile(optimizer='adam', loss='mae')``, ``fit(normal_train_data, normal_train_data,
    epochs=20, batch_size=512, validation_data=(test_data, test_data), shuffle=True)``,
    ``autoencoder.predict(normal_train_data)``, the threshold from ``tf.keras.losses.mae`` and
    the tutorial's ``predict(model, data, threshold)`` (the model called on the data).

    Lines changed: ``Dense(int(tf.math.reduce_prod(shape).numpy()))``: Keras 3 refuses the
    NumPy integer the tutorial passes ("expected a positive integer. Received: units=784") in
    Keras alone (``from tensorflow.keras import layers, losses`` / ``Model`` read as Keras 3's). Test-only: ``shuffle=False``; Fashion MNIST -> 300 random
    28x28 images (a last batch of 12 at Keras's default 32: 6 and 6 on the 2 replicas);
    latent_dim 64 -> 8; ECG5000 -> 600 rows of 140 points, ``train_test_split(...,
    random_state=21)`` -> the first 480 rows; batch_size 512 -> 64; epochs 10 and 20 -> 2.
    """
    rng = np.random.default_rng(11)
    x_train = rng.random((300, 28, 28)).astype("float32")
    x_test = rng.random((40, 28, 28)).astype("float32")
    keras.utils.set_random_seed(0)

    class Autoencoder(Model):
        def __init__(self, latent_dim, shape):
            super(Autoencoder, self).__init__()  # noqa: UP008 - as the tutorial writes it
            self.latent_dim = latent_dim
            self.shape = shape
            self.encoder = tf.keras.Sequential(
                [
                    layers.Flatten(),
                    layers.Dense(latent_dim, activation="relu"),
                ]
            )
            self.decoder = tf.keras.Sequential(
                [
                    layers.Dense(int(tf.math.reduce_prod(shape).numpy()), activation="sigmoid"),
                    layers.Reshape(shape),
                ]
            )

        def call(self, x):
            encoded = self.encoder(x)
            decoded = self.decoder(encoded)
            return decoded

    shape = x_test.shape[1:]
    latent_dim = 8
    autoencoder = Autoencoder(latent_dim, shape)
    autoencoder.compile(optimizer="adam", loss=losses.MeanSquaredError())
    first = api.fit(
        autoencoder, x_train, x_train, epochs=2, shuffle=False, validation_data=(x_test, x_test), verbose=0
    )
    encoded_imgs = autoencoder.encoder(x_test).numpy()
    decoded_imgs = autoencoder.decoder(encoded_imgs).numpy()
    results = {
        "history_images": first.history,
        "weights_images": autoencoder.get_weights(),
        "decoded": decoded_imgs,
    }

    raw_data = np.concatenate([rng.random((600, 140)), (rng.random((600, 1)) > 0.4)], axis=1)
    labels = raw_data[:, -1]
    data = raw_data[:, 0:-1]
    train_data, test_data, train_labels, test_labels = data[:480], data[480:], labels[:480], labels[480:]
    min_val = tf.reduce_min(train_data)
    max_val = tf.reduce_max(train_data)
    train_data = (train_data - min_val) / (max_val - min_val)
    test_data = (test_data - min_val) / (max_val - min_val)
    train_data = tf.cast(train_data, tf.float32)
    test_data = tf.cast(test_data, tf.float32)
    train_labels = train_labels.astype(bool)
    test_labels = test_labels.astype(bool)
    normal_train_data = train_data[train_labels]

    class AnomalyDetector(Model):
        def __init__(self):
            super(AnomalyDetector, self).__init__()  # noqa: UP008 - as the tutorial writes it
            self.encoder = tf.keras.Sequential(
                [
                    layers.Dense(32, activation="relu"),
                    layers.Dense(16, activation="relu"),
                    layers.Dense(8, activation="relu"),
                ]
            )
            self.decoder = tf.keras.Sequential(
                [
                    layers.Dense(16, activation="relu"),
                    layers.Dense(32, activation="relu"),
                    layers.Dense(140, activation="sigmoid"),
                ]
            )

        def call(self, x):
            encoded = self.encoder(x)
            decoded = self.decoder(encoded)
            return decoded

    autoencoder = AnomalyDetector()
    autoencoder.compile(optimizer="adam", loss="mae")
    history = api.fit(
        autoencoder,
        normal_train_data,
        normal_train_data,
        epochs=2,
        batch_size=64,
        validation_data=(test_data, test_data),
        shuffle=False,
        verbose=0,
    )
    reconstructions = api.predict(autoencoder, normal_train_data, verbose=0)
    train_loss = tf.keras.losses.mae(reconstructions, normal_train_data)
    threshold = np.mean(train_loss) + np.std(train_loss)

    def predict(model, data, threshold):
        reconstructions = model(data)
        loss = tf.keras.losses.mae(reconstructions, data)
        return tf.math.less(loss, threshold)

    preds = predict(autoencoder, test_data, threshold)
    assert preds.shape == (len(test_labels),)  # booleans: a row by the threshold may flip, not compared
    results.update(
        history_ecg=history.history,
        weights_ecg=autoencoder.get_weights(),
        reconstructions=reconstructions,
        threshold=threshold,
    )
    return results


EXAMPLES = {
    f.__name__: f
    for f in (
        lstm_seq2seq,
        multi_label_classification,
        lstm_character_level_text_generation,
        preprocessing_layers_recipes,
        autoencoder_tutorial,
    )
}

"""keras-io's ner_transformers input, as written: a TextLineDataset of tab-separated records,
the tokens looked up by a StringLookup in a map, ``padded_batch(32)``, a loss of its own that
leaves the padding out, Embeddings and Adam; trained with tfgpu.fit under
`tfgpu launch --nproc 2`. 202 sentences, so the last batch holds 10. The model is trained
twice: as the example compiles it, and with Keras's ``sparse_categorical_crossentropy`` and SGD,
which train on several replicas exactly as on one device (the example's loss divides by its
replica's count of tokens, and Keras's Adam squares an Embedding's gradient slices before it sums
them: neither is one device's on several, tfgpu or not). Each worker saves its weights, history
and evaluation of each.

Usage: padded_text.py OUT
"""

import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf
from keras import ops

import tfgpu  # sets the launched task up before TensorFlow starts

SENTENCES = 202
VOCAB = ["the", "eu", "rejects", "german", "call", "to", "boycott", "british", "lamb", "peter"]


def records() -> list[str]:
    """Lines as the example's make_tag_lookup_table writes them: length, tokens, then tags."""
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(SENTENCES):
        length = int(rng.integers(3, 19))
        tokens = [VOCAB[i] for i in rng.integers(0, len(VOCAB), size=length)]
        tags = [str(t) for t in rng.integers(0, 4, size=length)]
        lines.append("\t".join([str(length), *tokens, *tags]))
    return lines


def write(out: str) -> str:
    path = os.path.join(out, "conll_train.txt")
    if not os.path.exists(path):  # both workers write it: the first rename wins, whole
        with open(f"{path}.{os.getpid()}", "w") as handle:
            handle.writelines(line + "\n" for line in records())
        os.replace(f"{path}.{os.getpid()}", path)
    return path


lookup_layer = keras.layers.StringLookup(vocabulary=VOCAB)


def map_record_to_training_data(record):
    record = tf.strings.split(record, sep="\t")
    length = tf.strings.to_number(record[0], out_type=tf.int32)
    tokens = record[1 : length + 1]
    tags = record[length + 1 :]
    tags = tf.strings.to_number(tags, out_type=tf.int64)
    tags += 1
    return tokens, tags


def lowercase_and_convert_to_ids(tokens):
    tokens = tf.strings.lower(tokens)
    return lookup_layer(tokens)


def dataset(path: str):
    return (
        tf.data.TextLineDataset(path)
        .map(map_record_to_training_data)
        .map(lambda x, y: (lowercase_and_convert_to_ids(x), y))
        .padded_batch(32)
    )


class CustomNonPaddingTokenLoss(keras.losses.Loss):
    def __init__(self, name="custom_ner_loss"):
        super().__init__(name=name)

    def call(self, y_true, y_pred):
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=False, reduction=None)
        loss = loss_fn(y_true, y_pred)
        mask = ops.cast((y_true > 0), dtype="float32")
        loss = loss * mask
        return ops.sum(loss) / ops.sum(mask)


COMPILED = {
    "example": lambda: {"optimizer": "adam", "loss": CustomNonPaddingTokenLoss()},
    "exact": lambda: {"optimizer": "sgd", "loss": "sparse_categorical_crossentropy"},
}


def model(compiled: str = "example") -> keras.Model:
    keras.utils.set_random_seed(0)
    inputs = keras.Input((None,), dtype="int64")
    embedded = keras.layers.Embedding(len(VOCAB) + 1, 8)(inputs)
    hidden = keras.layers.Dense(8, activation="relu")(embedded)
    made = keras.Model(inputs, keras.layers.Dense(5, activation="softmax")(hidden))
    made.compile(**COMPILED[compiled]())
    return made


def main() -> None:
    out = sys.argv[1]
    data = dataset(write(out))
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    for compiled in COMPILED:
        trained = model(compiled)
        history = tfgpu.fit(trained, data, epochs=2, verbose=0)
        name = f"{task['type']}-{task['index']}-{compiled}"
        np.savez(os.path.join(out, f"{name}.npz"), *trained.get_weights())
        figures = {"history": history.history, "evaluate": tfgpu.evaluate(trained, data, verbose=0)}
        with open(os.path.join(out, f"{name}.json"), "w") as handle:
            json.dump(figures, handle)


if __name__ == "__main__":
    main()

"""The input forms Keras's verbs take, each made from the same rows, and one small model to give
them to: shared by tests/test_input_forms.py and tests/scripts/input_forms.py (the forms under
``tfgpu launch --nproc 2``)."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

import tfgpu

FEATURES = 6


class Batches(keras.utils.PyDataset):
    """A PyDataset of batches of ``rows`` rows: x alone, (x, y) or (x, y, sample_weight)."""

    def __init__(self, parts, rows, **kwargs):
        super().__init__(**kwargs)
        self.parts, self.rows = parts, rows

    def __len__(self):
        return -(-len(self.parts[0]) // self.rows)

    def __getitem__(self, index):
        cut = slice(index * self.rows, (index + 1) * self.rows)
        batch = tuple(part[cut] for part in self.parts)
        return batch if len(batch) > 1 else batch[0]


def generator(parts, rows):
    """Batches as tuples, (x,) for x alone: a generator Keras takes yields tuples."""
    for start in range(0, len(parts[0]), rows):
        yield tuple(part[start : start + rows] for part in parts)


def dataset(parts, rows):
    return tf.data.Dataset.from_tensor_slices(parts if len(parts) > 1 else parts[0]).batch(rows)


def frame(x):
    import pandas as pd

    return pd.DataFrame(x, columns=[f"f{i}" for i in range(FEATURES)])


# form -> (two inputs?, fn(x, y, w, batch) -> (args, keywords) of the verb). ``verbs``: the verbs it
# is given to (predict takes x alone, evaluate and fit take labels).
FORMS = {
    "numpy": (False, lambda x, y, w, b, verb: ((x,) if verb == "predict" else (x, y), {"batch_size": b})),
    "tensor": (
        False,
        lambda x, y, w, b, verb: (
            (tf.constant(x),) if verb == "predict" else (tf.constant(x), tf.constant(y)),
            {"batch_size": b},
        ),
    ),
    "pandas": (
        False,
        lambda x, y, w, b, verb: ((frame(x),) if verb == "predict" else (frame(x), y), {"batch_size": b}),
    ),
    "list": (
        True,
        lambda x, y, w, b, verb: (
            ([x[:, :4], x[:, 4:]],) + (() if verb == "predict" else (y,)),
            {"batch_size": b},
        ),
    ),
    "dict": (
        True,
        lambda x, y, w, b, verb: (
            ({"a": x[:, :4], "b": x[:, 4:]},) + (() if verb == "predict" else (y,)),
            {"batch_size": b},
        ),
    ),
    "sample_weight": (
        False,
        lambda x, y, w, b, verb: (
            ((x,), {"batch_size": b})
            if verb == "predict"
            else ((x, y), {"batch_size": b, "sample_weight": w})
        ),
    ),
    "dataset_x": (False, lambda x, y, w, b, verb: ((dataset((x,), b),), {})),
    "dataset_xy": (False, lambda x, y, w, b, verb: ((dataset((x, y), b),), {})),
    "dataset_xyw": (False, lambda x, y, w, b, verb: ((dataset((x, y, w), b),), {})),
    "pydataset_x": (False, lambda x, y, w, b, verb: ((Batches((x,), b),), {})),
    "pydataset_xy": (False, lambda x, y, w, b, verb: ((Batches((x, y), b),), {})),
    "pydataset_xyw": (False, lambda x, y, w, b, verb: ((Batches((x, y, w), b),), {})),
    "pydataset_workers": (False, lambda x, y, w, b, verb: ((Batches((x, y), b, workers=2),), {})),
    "pydataset_processes": (
        False,
        lambda x, y, w, b, verb: ((Batches((x,), b, workers=2, use_multiprocessing=True),), {}),
    ),
    "generator": (False, lambda x, y, w, b, verb: ((generator((x, y), b),), {})),
    "generator_x": (False, lambda x, y, w, b, verb: ((generator((x,), b),), {})),
}
# (verb, form) under ``tfgpu launch --nproc 2`` (tests/scripts/input_forms.py)
LAUNCHED = [
    ("fit", "numpy"),
    ("fit", "pydataset_xy"),
    ("fit", "generator"),
    ("predict", "numpy"),
    ("predict", "pydataset_x"),
    ("predict", "generator_x"),
]
# predict's alone: the others need labels (processes: forked workers, predicted once)
X_ONLY = {"dataset_x", "pydataset_x", "generator_x", "pydataset_processes"}
CASES = [
    (form, verb)
    for form in FORMS
    for verb in ("fit", "evaluate", "predict")
    if verb == "predict" or form not in X_ONLY
]


def data(rows):
    rng = np.random.default_rng(rows)
    x = rng.normal(size=(rows, FEATURES)).astype("float32")
    y = (x[:, :1] * 0.5 - x[:, 1:2]).astype("float32")
    w = rng.uniform(0.5, 2.0, size=(rows,)).astype("float32")
    return x, y, w


def small_model(two_inputs):
    init = keras.initializers.GlorotUniform(seed=7)
    if two_inputs:
        a, b = keras.Input((4,), name="a"), keras.Input((2,), name="b")
        hidden = keras.layers.Dense(8, activation="tanh", kernel_initializer=init)(
            keras.layers.Concatenate()([a, b])
        )
        model = keras.Model([a, b], keras.layers.Dense(1, kernel_initializer=init)(hidden))
    else:
        model = keras.Sequential(
            [
                keras.Input((FEATURES,)),
                keras.layers.Dense(8, activation="tanh", kernel_initializer=init),
                keras.layers.Dense(1, kernel_initializer=init),
            ]
        )
    model.compile(keras.optimizers.SGD(0.05), "mse", metrics=["mae"])
    return model


def run(verb, form, model, x, y, w, batch, *, ours):
    make = FORMS[form][1]
    args, keywords = make(x, y, w, batch, verb)
    if verb == "fit":
        keywords = {**keywords, "epochs": 2, "shuffle": False}
        history = (
            tfgpu.fit(model, *args, **keywords, verbose=0)
            if ours
            else model.fit(*args, **keywords, verbose=0)
        )
        return history.history, model.get_weights()
    if verb == "evaluate":
        return (
            tfgpu.evaluate(model, *args, **keywords, verbose=0)
            if ours
            else model.evaluate(*args, **keywords, verbose=0)
        ), None
    return (
        tfgpu.predict(model, *args, **keywords, verbose=0)
        if ours
        else model.predict(*args, **keywords, verbose=0)
    ), None

"""Every input kind the docs promise meets every entry point: arrays, dicts of arrays, a
``tf.data.Dataset``, a dataset directory and a data function, through ``tfgpu.fit``,
``tfgpu.evaluate``, ``tfgpu.predict`` and ``tfgpu.Trainer``; compared with Keras where Keras takes
the same data. (``tfgpu train`` runs a Task file: tests/test_cli.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import tfgpu
from support.replicas import local_strategy
from tfgpu import data

ROWS = 240


def _model():
    import keras

    inputs = {"x": keras.Input((8,), name="x")}
    hidden = keras.layers.Dense(
        8, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=1)
    )
    out = keras.layers.Dense(
        1, activation="sigmoid", kernel_initializer=keras.initializers.GlorotUniform(seed=2)
    )
    model = keras.Model(inputs, out(hidden(inputs["x"])))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="binary_crossentropy", metrics=["accuracy"])
    return model


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(ROWS, 8)).astype("float32")
    y = (x[:, :3].sum(1) > 0).astype("int64")
    root = tmp_path_factory.mktemp("entry")
    np.savez(root / "rows.npz", x=x, y=y)
    data.convert(root / "rows.npz", root / "ds", options=data.ConvertOptions(label="y", min_shards=4))
    return {"x": x, "y": y, "dir": str(root / "ds")}


def _kinds(d):
    """Each input kind as a user passes it (x, y) to fit / evaluate."""

    def function(ctx, per_replica):
        rows = tf.data.Dataset.from_tensor_slices(({"x": d["x"]}, d["y"]))
        return rows.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(per_replica)

    return {
        "arrays": ({"x": d["x"]}, d["y"]),
        "dataset": (tf.data.Dataset.from_tensor_slices(({"x": d["x"]}, d["y"])).batch(48), None),
        "directory": (d["dir"], None),
        "data function": (function, None),
    }


@pytest.mark.heavy
@pytest.mark.parametrize("kind", ["arrays", "dataset", "directory", "data function"])
def test_fit_and_evaluate_take_every_input_kind(dataset, kind):
    x, y = _kinds(dataset)[kind]
    keras_model = _model()
    expected = keras_model.evaluate({"x": dataset["x"]}, dataset["y"], verbose=0, return_dict=True)
    model = _model()
    model.set_weights(keras_model.get_weights())
    batch = None if kind == "dataset" else 48
    # evaluate first, on the untrained model: every row once, whatever the order the kind reads in
    got = tfgpu.evaluate(model, x, y, batch_size=batch, verbose=0, return_dict=True)
    assert got == pytest.approx(expected, rel=1e-5)
    before = [w.copy() for w in model.get_weights()]
    history = tfgpu.fit(model, x, y, batch_size=batch, epochs=2, shuffle=False, verbose=0)
    assert set(history.history) == {"loss", "accuracy"} and len(history.history["loss"]) == 2
    assert max(np.abs(a - b).max() for a, b in zip(model.get_weights(), before, strict=True)) > 1e-4


@pytest.mark.heavy
def test_fit_on_a_directory_shuffles_as_asked(dataset, clean_choices):
    """shuffle=False reads the stored order each epoch (two fits give equal weights); the
    default shuffles it (the weights differ)."""
    from tfgpu import choices

    runs = {}
    for shuffle in (False, False, True):
        model = _model()
        tfgpu.fit(model, dataset["dir"], batch_size=48, epochs=2, shuffle=shuffle, verbose=0)
        runs.setdefault(shuffle, []).append(model.get_weights())
    for a, b in zip(*runs[False], strict=True):
        np.testing.assert_array_equal(a, b)
    assert any(not np.allclose(a, b) for a, b in zip(runs[False][0], runs[True][0], strict=True))
    assert "data.shuffle_buffer" in choices.as_dict()


@pytest.mark.heavy
@pytest.mark.parametrize("replicas", [1, 2])
def test_trainer_takes_every_input_kind(dataset, replicas):
    strategy = local_strategy(replicas)
    for kind, (x, y) in _kinds(dataset).items():
        train = x if y is None else (x, y)
        task = tfgpu.Task(model=_model, train_data=train, batch_size=24, shuffle=False)
        if kind == "dataset":  # a Task's data function or directory batches per replica; a Dataset is global
            task = tfgpu.Task(model=_model, train_data=x, batch_size=1, shuffle=False)
        result = tfgpu.Trainer(task, strategy=strategy, monitor_gpus=False).fit(epochs=1)
        assert result.steps > 0 and np.isfinite(result.history[-1]["loss"]), kind


@pytest.mark.model
def test_predict_takes_arrays_dicts_and_datasets(dataset):
    model = _model()
    want = model.predict({"x": dataset["x"]}, verbose=0)
    placed = in_two(model)
    for x in (
        {"x": dataset["x"]},
        tf.data.Dataset.from_tensor_slices({"x": dataset["x"]}).batch(50),
        tf.data.Dataset.from_tensor_slices(({"x": dataset["x"]}, dataset["y"])).batch(50),
    ):
        np.testing.assert_allclose(tfgpu.predict(placed, x, verbose=0), want, rtol=1e-5, atol=1e-6)


def in_two(model):
    with local_strategy(2).scope():
        placed = _model()
    placed.set_weights(model.get_weights())
    return placed


def test_pipeline_options_are_typed_and_checked():
    options = data.PipelineOptions(cache="off", training=True)
    assert data.PipelineOptions.of(options, shuffle=False).shuffles is False
    with pytest.raises(tfgpu.ConfigError, match=r"Unknown pipeline option.*use one of .*augment"):
        data.PipelineOptions.of(shufle=False)
    with pytest.raises(tfgpu.ConfigError, match="cache must be one of"):
        data.PipelineOptions(cache="ram")
    task = tfgpu.Task(model=_model, train_data=(np.zeros((4, 8)), np.zeros(4)), pipeline={"cache": "off"})
    assert task.pipeline == data.PipelineOptions(cache="off")

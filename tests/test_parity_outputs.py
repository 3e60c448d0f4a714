"""Models of several inputs and several outputs, given as lists or dicts, train, evaluate and
predict on several replicas as Keras on one device.

Each test is an example of ``support.examples`` (its marker: its source, what it exercises),
run with Keras's methods and tfgpu's and compared under ``support/parity.py``'s rules.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import guides
import tfgpu
from fit_models import (
    IN_ORDER_48,
    two_in_two_out,
)
from support.parity import KERAS, in_scope, same, tfgpu_with
from support.replicas import local_strategy


@pytest.mark.heavy
@pytest.mark.exercises(
    "outputs:multi",
    "inputs:multi",
    "inputs:arrays",
    "loss:per_output",
    "loss:object",
    "model:functional",
    "model:outside_scope",
    "strategy:mirrored",
    source='keras-io guides/training_with_built_in_methods.py "Passing data to multi-input, multi-output models"',
)
def test_training_guide_multi_input_multi_output_lists():
    """keras-io guides/training_with_built_in_methods.py, "Passing data to multi-input, multi-output
    models": an image and a time-series input, a score and a class output, losses as a list,
    ``model.fit([img_data, ts_data], [score_targets, class_targets])``.

    Lines changed: none (outside any scope, the strategy passed). Test-only: ``shuffle=False``;
    100 rows -> 128 (whole batches: Keras's per-output losses are a mean of batch means, which
    a short last batch splits differently over replicas, docs/from-model-fit.md).
    """
    img_data, ts_data, score_targets, class_targets = guides.image_and_timeseries_data()

    def guide(api):
        keras.utils.set_random_seed(0)
        model = guides.image_and_timeseries_model()
        # Fit on lists
        history = api.fit(
            model, [img_data, ts_data], [score_targets, class_targets], batch_size=32, epochs=1, shuffle=False
        )
        return {"history": history.history, "weights": model.get_weights(),
                "predictions": api.predict(model, [img_data, ts_data])}  # fmt: skip

    same(guide(tfgpu_with(local_strategy(2))), guide(KERAS))


@pytest.mark.heavy
@pytest.mark.exercises(
    "outputs:multi",
    "inputs:multi",
    "inputs:dict",
    "inputs:dataset",
    "inputs:arrays",
    "loss:per_output",
    "loss:object",
    "model:functional",
    "model:outside_scope",
    "strategy:mirrored",
    source='keras-io guides/training_with_built_in_methods.py "Passing data to multi-input, multi-output models"',
)
def test_training_guide_multi_input_multi_output_dicts_and_dataset():
    """keras-io guides/training_with_built_in_methods.py, "Passing data to multi-input, multi-output
    models": the same model fit on dicts keyed by input and output names, then on a
    ``tf.data.Dataset`` of (dict, dict), shuffled and batched.

    Lines changed: none (outside any scope, the strategy passed). Test-only: ``shuffle=False``
    for the arrays; 100 rows -> 128 (whole batches, as above).
    """
    img_data, ts_data, score_targets, class_targets = guides.image_and_timeseries_data()

    def guide(api):
        keras.utils.set_random_seed(0)
        model = guides.image_and_timeseries_model()
        # Alternatively, fit on dicts
        dicts = api.fit(
            model,
            {"img_input": img_data, "ts_input": ts_data},
            {"score_output": score_targets, "class_output": class_targets},
            batch_size=32,
            epochs=1,
            shuffle=False,
        )
        train_dataset = tf.data.Dataset.from_tensor_slices(
            (
                {"img_input": img_data, "ts_input": ts_data},
                {"score_output": score_targets, "class_output": class_targets},
            )
        )
        train_dataset = train_dataset.shuffle(buffer_size=1024).batch(64)
        dataset = api.fit(model, train_dataset, epochs=1)
        return {"history_dicts": dicts.history, "history_dataset": dataset.history,
                "weights": model.get_weights()}  # fmt: skip

    same(guide(tfgpu_with(local_strategy(2))), guide(KERAS))


# -- keras-io guides/functional_api.py ---------------------------------------------------------------
@pytest.mark.heavy
@pytest.mark.exercises(
    "outputs:multi",
    "inputs:multi",
    "inputs:dict",
    "inputs:arrays",
    "loss:per_output",
    "loss:object",
    "program:recompile",
    "model:functional",
    "model:outside_scope",
    "strategy:mirrored",
    source="keras-io guides/functional_api.py (ticket classifier)",
)
def test_functional_api_guide_ticket_classifier():
    """keras-io guides/functional_api.py, "Models with multiple inputs and outputs": the ticket
    classifier (title and body as variable-length int sequences through Embedding and LSTM, tags
    as binary vectors; a priority and a department output), compiled with losses as a list, then
    as a dict with loss_weights, fit on dicts of arrays.

    Lines changed: none (outside any scope, the strategy passed). Test-only: ``shuffle=False``;
    1280 rows -> 128, vocabulary 10000 -> 100, Embedding 64 -> 8, LSTM 128/32 -> 8/4, body 100
    words -> 20.
    """
    title_data, body_data, tags_data, priority_targets, dept_targets = guides.ticket_data()

    def guide(api):
        keras.utils.set_random_seed(0)
        model = guides.ticket_model()
        model.compile(
            optimizer=keras.optimizers.RMSprop(1e-3),
            loss=[
                keras.losses.BinaryCrossentropy(from_logits=True),
                keras.losses.CategoricalCrossentropy(from_logits=True),
            ],
            loss_weights=[1.0, 0.2],
        )
        model.compile(
            optimizer=keras.optimizers.RMSprop(1e-3),
            loss={
                "priority": keras.losses.BinaryCrossentropy(from_logits=True),
                "department": keras.losses.CategoricalCrossentropy(from_logits=True),
            },
            loss_weights={"priority": 1.0, "department": 0.2},
        )
        history = api.fit(
            model,
            {"title": title_data, "body": body_data, "tags": tags_data},
            {"priority": priority_targets, "department": dept_targets},
            epochs=2,
            batch_size=32,
            shuffle=False,
        )
        return {"history": history.history, "weights": model.get_weights(),
                "predictions": api.predict(model, {"title": title_data, "body": body_data, "tags": tags_data})}  # fmt: skip

    same(guide(tfgpu_with(local_strategy(2))), guide(KERAS))


@pytest.mark.heavy
@pytest.mark.exercises(
    "outputs:multi",
    "inputs:multi",
    "inputs:arrays",
    "inputs:dict",
    "inputs:dataset",
    "loss:per_output",
    "loss:object",
    "model:functional",
    "model:outside_scope",
    "strategy:mirrored",
    source="keras-io guides/functional_api.py (ticket classifier)",
)
def test_functional_api_guide_ticket_classifier_lists():
    """keras-io guides/functional_api.py: "Train the model by passing lists of NumPy arrays of inputs
    and targets", and "When calling fit with a Dataset object, it should yield ... a tuple of
    lists like ([title_data, body_data, tags_data], [priority_targets, dept_targets])": the
    ticket classifier fit on a list of inputs (in the model's input order) with dict targets,
    then on a Dataset of (list, list)... compiled with losses as a list.

    Lines changed: none (outside any scope, the strategy passed). Test-only: as above.
    """
    title_data, body_data, tags_data, priority_targets, dept_targets = guides.ticket_data()

    def guide(api):
        keras.utils.set_random_seed(0)
        model = guides.ticket_model()
        model.compile(
            optimizer=keras.optimizers.RMSprop(1e-3),
            loss={
                "priority": keras.losses.BinaryCrossentropy(from_logits=True),
                "department": keras.losses.CategoricalCrossentropy(from_logits=True),
            },
            loss_weights={"priority": 1.0, "department": 0.2},
        )
        arrays = api.fit(
            model,
            [title_data, body_data, tags_data],
            {"priority": priority_targets, "department": dept_targets},
            epochs=1,
            batch_size=32,
            shuffle=False,
        )
        dataset = tf.data.Dataset.from_tensor_slices(
            ((title_data, body_data, tags_data), {"priority": priority_targets, "department": dept_targets})
        ).batch(32)
        tuples = api.fit(model, dataset, epochs=1)
        return {"history_lists": arrays.history, "history_dataset": tuples.history,
                "weights": model.get_weights(),
                "predictions": api.predict(model, [title_data, body_data, tags_data])}  # fmt: skip

    same(guide(tfgpu_with(local_strategy(2))), guide(KERAS))


def _two_in_two_out_data(rows=192):
    rng = np.random.default_rng(7)
    a, b = rng.normal(size=(rows, 6)).astype("float32"), rng.normal(size=(rows, 4)).astype("float32")
    score = (a[:, :2].sum(1, keepdims=True) + b[:, :1]).astype("float32")
    kind = (a[:, 0] > 0).astype("int64") + (b[:, 0] > 0).astype("int64")
    return [a, b], [score, kind]


@pytest.mark.exercises(
    "inputs:multi",
    "outputs:multi",
    "loss:per_output",
    "loss:string",
    "metric:builtin",
    "inputs:arrays",
    "model:functional",
    "model:in_scope",
    "strategy:mirrored",
    source="Keras functional API guide (small)",
)
@pytest.mark.heavy
def test_lists_for_several_inputs_and_outputs_as_keras():
    x, y = _two_in_two_out_data()
    expected = two_in_two_out()
    keras_history = expected.fit(x, y, epochs=2, validation_data=(x, y), **IN_ORDER_48).history
    model = in_scope(local_strategy(2), two_in_two_out)
    history = tfgpu.fit(model, x, y, epochs=2, validation_data=(x, y), **IN_ORDER_48)
    same(history.history, keras_history)
    same(model.get_weights(), expected.get_weights())
    assert tfgpu.evaluate(model, x, y, verbose=0) == pytest.approx(
        expected.evaluate(x, y, verbose=0), rel=1e-5
    )
    for ours, theirs in zip(tfgpu.predict(model, x, verbose=0), expected.predict(x, verbose=0), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)

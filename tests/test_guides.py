"""Keras's and TensorFlow's own guides and examples, run on tfgpu as their users would run them.

Each test is one guide or example (keras-team/keras-io, tensorflow/docs), shrunk to a few seconds
on synthetic data of the guide's shapes and dtypes, and written as the guide writes it; the only
change a user makes is ``model.fit(...)`` -> ``tfgpu.fit(model, ...)`` (``evaluate`` and ``predict``
likewise). Each runs twice through the same function: once with Keras's own methods, once with
tfgpu's on 2 replicas, and the two must agree (histories to rel 1e-5, evaluate and predict).

The reference is Keras's fit on one device, from the same initial weights
(``keras.utils.set_random_seed`` before the guide builds anything, so the same initializers and
the same tf.data shuffles) and ``shuffle=False`` where the guide fits arrays. Where a figure is
per replica (Dropout's masks, BatchNormalization's batch statistics, random ops in a
``train_step``, a loss summed over the batch), the reference is Keras's own fit under the same
2-replica MirroredStrategy instead, and the test says so. A guide's model built outside any
strategy's scope is passed to ``tfgpu.fit(..., strategy=...)``; for such a model with per-replica
randomness, the reference is Keras's fit of its copy in that strategy's scope
(``KerasUnder``: cloned there, as tfgpu re-creates it, so Dropout draws the same seeds).

Each docstring names the guide and the lines a user had to change beyond the ``tfgpu.`` calls
("test-only" lines make the two runs comparable and are not a user's change: ``shuffle=False``
for arrays, ``reshuffle_each_iteration=False`` where a reshuffling dataset is read for several
epochs (Keras's own order is test_training_guide_tf_data_reshuffled_each_epoch's), and
``keras.utils.set_random_seed`` again before a model built after tfgpu re-created an earlier one
(cloning draws the unseeded initializers' seeds, which Keras's run does not)).
"""

from __future__ import annotations

import contextlib
import math
import os
import pathlib
from types import SimpleNamespace

import keras
import numpy as np
import pytest
import tensorflow as tf

import guides
import tfgpu
from guides import (
    GAN,
    CategoricalTruePositives,
    CustomModel,
    CustomMSE,
    EvalCustomModel,
    ExamplePyDataset,
    LossHistory,
    LowerLevelCustomModel,
    WeightedCustomModel,
    custom_mean_squared_error,
    get_compiled_model,
    get_uncompiled_model,
)
from support.parity import KERAS, TFGPU, KerasUnder, same, tfgpu_with
from support.replicas import local_strategy

# -- the two ways each guide runs ------------------------------------------------------------------
# every guide trains real models for seconds: make test runs them, make test-fast does not
pytestmark = pytest.mark.heavy


def one_device():
    return contextlib.nullcontext()


# -- keras-io guides/training_with_built_in_methods.py -----------------------------------------------
@pytest.mark.parametrize("where", ["in-scope", "outside-scope"])
def test_training_guide_first_end_to_end_example(where):
    """keras-io guides/training_with_built_in_methods.py, "API overview: a first end-to-end example":
    NumPy arrays, validation_data=(x_val, y_val), evaluate(batch_size=128), predict(x_test[:3]).

    Lines changed: none (in-scope: ``with strategy.scope():`` around building and compiling, as the
    distributed-training guide writes it; outside-scope: ``strategy=`` passed to all three calls,
    as a user who chose the replicas would: all three take it). Test-only: ``shuffle=False``.
    """
    (x_train, y_train), (x_val, y_val), (x_test, y_test) = guides.mnist_vectors()

    def guide(api, scope):
        keras.utils.set_random_seed(0)
        with scope():
            model = get_uncompiled_model()
            model.compile(
                optimizer=keras.optimizers.RMSprop(),  # Optimizer
                # Loss function to minimize
                loss=keras.losses.SparseCategoricalCrossentropy(),
                # List of metrics to monitor
                metrics=[keras.metrics.SparseCategoricalAccuracy()],
            )
        history = api.fit(
            model,
            x_train,
            y_train,
            batch_size=64,
            epochs=2,
            # We pass some validation for
            # monitoring validation loss and metrics
            # at the end of each epoch
            validation_data=(x_val, y_val),
            shuffle=False,
        )
        results = api.evaluate(model, x_test, y_test, batch_size=128)
        predictions = api.predict(model, x_test[:3])
        assert predictions.shape == (3, 10)
        return {"history": history.history, "results": results, "predictions": predictions,
                "weights": model.get_weights()}  # fmt: skip

    expected = guide(KERAS, one_device)
    strategy = local_strategy(2)
    if where == "in-scope":
        got = guide(TFGPU, strategy.scope)
    else:
        got = guide(tfgpu_with(strategy, everywhere=True), one_device)
    same(got, expected)


def test_training_guide_custom_losses_and_metrics():
    """keras-io guides/training_with_built_in_methods.py, "Custom losses" and "Custom metrics": a loss
    function on one-hot labels (``ops.one_hot``: a tf.Tensor as y), a ``keras.losses.Loss``
    subclass, a ``keras.metrics.Metric`` subclass whose result is a sum (its state summed over
    the replicas). As the guide writes it, ``CategoricalTruePositives`` compares y_true of shape
    (batch,) with y_pred reshaped to (batch, 1): a (batch, batch) matrix, so it counts pairs
    within a batch, and within a replica's part under a strategy: its figures are compared with
    Keras's own fit under the same MirroredStrategy (about half those on one device); the rest
    with Keras on one device.

    Lines changed: ``with strategy.scope():`` around building and compiling. Test-only:
    ``shuffle=False``, epochs 3 -> 2.
    """
    (x_train, y_train), _, _ = guides.mnist_vectors()
    from keras import ops

    def guide(api, scope):
        keras.utils.set_random_seed(0)
        runs = {}
        with scope():
            model = get_uncompiled_model()
            model.compile(optimizer=keras.optimizers.Adam(), loss=custom_mean_squared_error)
        # We need to one-hot encode the labels to use MSE
        y_train_one_hot = ops.one_hot(y_train, num_classes=10)
        runs["history_fn"] = api.fit(
            model, x_train, y_train_one_hot, batch_size=64, epochs=1, shuffle=False
        ).history

        with scope():
            model = get_uncompiled_model()
            model.compile(optimizer=keras.optimizers.Adam(), loss=CustomMSE())
        y_train_one_hot = ops.one_hot(y_train, num_classes=10)
        runs["history_loss"] = api.fit(
            model, x_train, y_train_one_hot, batch_size=64, epochs=1, shuffle=False
        ).history

        with scope():
            model = get_uncompiled_model()
            model.compile(
                optimizer=keras.optimizers.RMSprop(learning_rate=1e-3),
                loss=keras.losses.SparseCategoricalCrossentropy(),
                metrics=[CategoricalTruePositives()],
            )
        runs["history_metric"] = api.fit(
            model, x_train, y_train, batch_size=64, epochs=2, shuffle=False
        ).history
        runs["weights"] = model.get_weights()
        return runs

    strategy = local_strategy(2)
    expected = guide(KERAS, one_device)
    assert expected["history_metric"]["categorical_true_positives"][-1] > 320  # pairs, not rows
    got = guide(TFGPU, strategy.scope)
    same(got, expected, keys=["history_fn", "history_loss", "weights"])
    same(got, guide(KERAS, strategy.scope), keys=["history_metric"])


def test_training_guide_add_loss_in_a_layer():
    """keras-io guides/training_with_built_in_methods.py, "Handling losses and metrics that don't fit
    the standard signature": ``ActivityRegularizationLayer`` adds ``ops.sum(inputs) * 0.1``, a sum
    over the batch. Under a strategy each replica sums its own part and Keras scales each
    replica's loss by 1/replicas, so the reference is Keras's own fit under the same
    MirroredStrategy (on one device the added loss is twice as large).

    Lines changed: ``with strategy.scope():`` around building and compiling. Test-only:
    ``shuffle=False``.
    """
    (x_train, y_train), _, _ = guides.mnist_vectors()
    strategy = local_strategy(2)

    def guide(api):
        keras.utils.set_random_seed(0)
        with strategy.scope():
            model = guides.activity_regularized_model()
        # The displayed loss will be much higher than before
        # due to the regularization component.
        history = api.fit(model, x_train, y_train, batch_size=64, epochs=1, shuffle=False)
        return {"history": history.history, "weights": model.get_weights()}

    same(guide(TFGPU), guide(KERAS))


def test_training_guide_endpoint_layer_fit_on_x_alone():
    """keras-io guides/training_with_built_in_methods.py, the ``LogisticEndpoint`` layer: a model
    with inputs and targets as its two inputs, compiled without a loss, ``model.fit(data)`` on a
    dict of arrays with no y. Under a strategy Keras scales a loss from ``add_loss`` by
    1/replicas and logs it so (0.350 on 2 replicas, 0.701 on one device, and the weights 1e-5
    apart through Adam's epsilon): the reference is Keras's own fit under the same
    MirroredStrategy.

    Lines changed: ``with strategy.scope():`` around building and compiling. Test-only:
    ``shuffle=False``; 3 rows -> 64.
    """
    r = guides.rng(30)
    data = {
        "inputs": r.random((64, 3)),
        "targets": r.random((64, 10)),
    }

    def guide(api, scope):
        keras.utils.set_random_seed(0)
        with scope():
            model = guides.endpoint_model()
        history = api.fit(model, data, shuffle=False)
        return {"history": history.history, "weights": model.get_weights(),
                "predictions": api.predict(model, data)}  # fmt: skip

    strategy = local_strategy(2)
    same(guide(TFGPU, strategy.scope), guide(KERAS, strategy.scope))


def test_training_guide_tf_data_reshuffled_each_epoch():
    """keras-io guides/training_with_built_in_methods.py, "Training & evaluation using tf.data
    Datasets", its first example: ``dataset.shuffle(buffer_size=1024).batch(64)``, fit for
    several epochs, evaluate on a Dataset. The shuffle reshuffles at each iteration, so each
    epoch reads the next order the dataset's seed gives: tfgpu reads the n-th in epoch n. Keras
    is not consistent here (on one device it reads the 1st and the 3rd order, under a
    MirroredStrategy the 2nd and the 4th: it makes iterators it does not read), so the reference
    is Keras on one device given the dataset's 1st order for epoch 1, then its 2nd for epoch 2.

    Lines changed: ``with strategy.scope():`` around building and compiling. Test-only:
    epochs 3 -> 2.
    """
    (x_train, y_train), _, (x_test, y_test) = guides.mnist_vectors()

    def data():
        # First, let's create a training Dataset instance.
        # For the sake of our example, we'll use the same MNIST data as before.
        train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))
        # Shuffle and slice the dataset.
        train_dataset = train_dataset.shuffle(buffer_size=1024).batch(64)
        # Now we get a test dataset.
        test_dataset = tf.data.Dataset.from_tensor_slices((x_test, y_test))
        test_dataset = test_dataset.batch(64)
        return train_dataset, test_dataset

    keras.utils.set_random_seed(0)  # the shuffle's seed too
    with local_strategy(2).scope():
        model = get_compiled_model()
    train_dataset, test_dataset = data()
    # Since the dataset already takes care of batching,
    # we don't pass a `batch_size` argument.
    history = tfgpu.fit(model, train_dataset, epochs=2).history
    # You can also evaluate or predict on a dataset.
    result = tfgpu.evaluate(model, test_dataset)
    got = {
        "history": history,
        "result": dict(zip(model.metrics_names, result, strict=False)),
        "weights": model.get_weights(),
    }

    keras.utils.set_random_seed(0)
    expected_model = get_compiled_model()
    train_dataset, test_dataset = data()
    orders = [list(train_dataset) for _ in range(2)]  # the 1st and the 2nd order, as batches
    runs = [
        expected_model.fit(
            tf.data.Dataset.from_tensor_slices(
                tuple(np.stack([b[k].numpy() for b in order]) for k in (0, 1))
            ),
            epochs=1,
            verbose=0,
        ).history
        for order in orders
    ]
    result = expected_model.evaluate(test_dataset, verbose=0)
    expected = {
        "history": {k: [run[k][0] for run in runs] for k in runs[0]},
        "result": dict(zip(expected_model.metrics_names, result, strict=False)),
        "weights": expected_model.get_weights(),
    }
    same(got, expected)


def test_training_guide_tf_data_datasets():
    """keras-io guides/training_with_built_in_methods.py, "Training & evaluation using tf.data
    Datasets": shuffled, batched Datasets; ``steps_per_epoch`` shorter than the dataset (the
    second epoch goes on where the first stopped); a validation Dataset with
    ``validation_steps``; sample weights as the dataset's third element. (Each fit here reads
    its dataset's first order only: the reshuffling across epochs is the test above.)

    Lines changed: ``with strategy.scope():`` around building and compiling. Test-only:
    100 steps -> 2, 10 validation steps -> 1.
    """
    (x_train, y_train), (x_val, y_val), _ = guides.mnist_vectors()

    def guide(api, scope):
        keras.utils.set_random_seed(0)  # the shuffles' seeds too
        runs = {}
        with scope():
            model = get_compiled_model()
        # Prepare the training dataset
        train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))
        train_dataset = train_dataset.shuffle(buffer_size=1024).batch(64)
        # Only use the 2 batches per epoch (that's 64 * 2 samples)
        runs["history_steps"] = api.fit(model, train_dataset, epochs=2, steps_per_epoch=2).history
        runs["weights_steps"] = model.get_weights()

        with scope():
            model = get_compiled_model()
        # Prepare the training dataset
        train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))
        train_dataset = train_dataset.shuffle(buffer_size=1024).batch(64)
        # Prepare the validation dataset
        val_dataset = tf.data.Dataset.from_tensor_slices((x_val, y_val))
        val_dataset = val_dataset.batch(32)
        runs["history_val"] = api.fit(
            model,
            train_dataset,
            epochs=1,
            # Only run validation using the first batch of the dataset
            # using the `validation_steps` argument
            validation_data=val_dataset,
            validation_steps=1,
        ).history

        sample_weight = np.ones(shape=(len(y_train),))
        sample_weight[y_train == 5] = 2.0
        # Create a Dataset that includes sample weights
        # (3rd element in the return tuple).
        train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train, sample_weight))
        # Shuffle and slice the dataset.
        train_dataset = train_dataset.shuffle(buffer_size=1024).batch(64)
        with scope():
            model = get_compiled_model()
        runs["history_weighted"] = api.fit(model, train_dataset, epochs=1).history
        runs["weights"] = model.get_weights()
        return runs

    same(guide(TFGPU, local_strategy(2).scope), guide(KERAS, one_device))


def test_training_guide_py_dataset():
    """keras-io guides/training_with_built_in_methods.py, "Training & evaluation using PyDataset
    instances": ``ExamplePyDataset`` (batches from ``__getitem__``) as x and as validation_data,
    then evaluate on it. The guide passes ``batch_size=64`` too, which Keras ignores for a
    PyDataset.

    Lines changed: ``with strategy.scope():`` around building and compiling. Test-only:
    ``shuffle=False`` (Keras shuffles a PyDataset's batches).
    """
    (x_train, y_train), (x_val, y_val), _ = guides.mnist_vectors()
    train_py_dataset = ExamplePyDataset(x_train, y_train, batch_size=32)
    val_py_dataset = ExamplePyDataset(x_val, y_val, batch_size=32)

    def guide(api, scope):
        keras.utils.set_random_seed(0)
        with scope():
            model = get_compiled_model()
        history = api.fit(
            model, train_py_dataset, batch_size=64, validation_data=val_py_dataset, epochs=1, shuffle=False
        )
        return {"history": history.history, "results": api.evaluate(model, val_py_dataset),
                "weights": model.get_weights()}  # fmt: skip

    same(guide(TFGPU, local_strategy(2).scope), guide(KERAS, one_device))


def test_training_guide_python_generator():
    """keras-io guides/training_with_built_in_methods.py lists iterators as fit's input; Keras 3's
    ``Model.fit`` documents "a Python generator function yielding (inputs, targets)": here one
    yielding the guide's MNIST batches, with ``steps_per_epoch`` (a generator has no length).

    Lines changed: ``with strategy.scope():`` around building and compiling.
    """
    (x_train, y_train), _, _ = guides.mnist_vectors()

    def batches():
        while True:
            for start in range(0, len(x_train), 64):
                yield x_train[start : start + 64], y_train[start : start + 64]

    def guide(api, scope):
        keras.utils.set_random_seed(0)
        with scope():
            model = get_compiled_model()
        history = api.fit(model, batches(), steps_per_epoch=5, epochs=2)
        return {"history": history.history, "weights": model.get_weights()}

    same(guide(TFGPU, local_strategy(2).scope), guide(KERAS, one_device))


def test_training_guide_class_and_sample_weights():
    """keras-io guides/training_with_built_in_methods.py, "Using sample weighting and class
    weighting": ``class_weight={...5: 2.0...}`` and a ``sample_weight`` array with NumPy data.

    Lines changed: none (the guide's ``get_compiled_model()`` outside any scope, the strategy
    passed to ``tfgpu.fit``). Test-only: ``shuffle=False``.
    """
    (x_train, y_train), _, _ = guides.mnist_vectors()
    class_weight = {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0,
                    # Set weight "2" for class "5",
                    # making this class 2x more important
                    5: 2.0, 6: 1.0, 7: 1.0, 8: 1.0, 9: 1.0}  # fmt: skip
    sample_weight = np.ones(shape=(len(y_train),))
    sample_weight[y_train == 5] = 2.0

    def guide(api):
        keras.utils.set_random_seed(0)
        runs = {}
        print("Fit with class weight")
        model = get_compiled_model()
        runs["history_class"] = api.fit(
            model, x_train, y_train, class_weight=class_weight, batch_size=64, epochs=1, shuffle=False
        ).history
        runs["weights_class"] = model.get_weights()
        print("Fit with sample weight")
        keras.utils.set_random_seed(1)  # test-only: tfgpu's copy of the last model drew seeds
        model = get_compiled_model()
        runs["history_sample"] = api.fit(
            model, x_train, y_train, sample_weight=sample_weight, batch_size=64, epochs=1, shuffle=False
        ).history
        runs["weights_sample"] = model.get_weights()
        return runs

    same(guide(tfgpu_with(local_strategy(2))), guide(KERAS))


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


def test_training_guide_callbacks_and_checkpoints(tmp_path, monkeypatch):
    """keras-io guides/training_with_built_in_methods.py, "Using callbacks" and "Checkpointing
    models": EarlyStopping on val_loss with validation_split; ModelCheckpoint
    ``mymodel_{epoch}.keras`` with save_best_only; the fault-tolerance pattern
    (``make_or_restore_model``: a checkpoint every N batches named by the loss, then training goes
    on from the latest one, loaded by ``keras.models.load_model``); the guide's ``LossHistory``
    callback, which records ``logs["loss"]`` at each batch.

    Lines changed: none (outside any scope, the strategy passed). Test-only: ``shuffle=False``;
    epochs 20 -> 4; ``save_freq=100`` -> 4; ``LossHistory()`` passed with the checkpoints (the
    guide defines it, fit here is where it would go).
    """
    (x_train, y_train), _, _ = guides.mnist_vectors()

    def guide(api, where):
        (where / "ckpt").mkdir(parents=True)
        monkeypatch.chdir(where)
        keras.utils.set_random_seed(0)
        runs = {}
        model = get_compiled_model()
        callbacks = [
            keras.callbacks.EarlyStopping(
                # Stop training when `val_loss` is no longer improving
                monitor="val_loss",
                # "no longer improving" being defined as "no better than 1e-2 less"
                min_delta=1e-2,
                # "no longer improving" being further defined as "for at least 2 epochs"
                patience=2,
                verbose=1,
            )
        ]
        runs["history_early"] = api.fit(
            model, x_train, y_train, epochs=4, batch_size=64, callbacks=callbacks, validation_split=0.2,
            shuffle=False,
        ).history  # fmt: skip

        keras.utils.set_random_seed(1)  # test-only: tfgpu's copy of the last model drew seeds
        model = get_compiled_model()
        callbacks = [
            keras.callbacks.ModelCheckpoint(
                # Path where to save the model
                # The two parameters below mean that we will overwrite
                # the current checkpoint if and only if
                # the `val_loss` score has improved.
                # The saved model name will include the current epoch.
                filepath="mymodel_{epoch}.keras",
                save_best_only=True,  # Only save a model if `val_loss` has improved.
                monitor="val_loss",
                verbose=1,
            )
        ]
        runs["history_best"] = api.fit(
            model, x_train, y_train, epochs=2, batch_size=64, callbacks=callbacks, validation_split=0.2,
            shuffle=False,
        ).history  # fmt: skip

        # Prepare a directory to store all the checkpoints.
        checkpoint_dir = "./ckpt"

        def make_or_restore_model():
            # Either restore the latest model, or create a fresh one
            # if there is no checkpoint available.
            checkpoints = [checkpoint_dir + "/" + name for name in os.listdir(checkpoint_dir)]
            if checkpoints:
                latest_checkpoint = max(checkpoints, key=os.path.getctime)
                print("Restoring from", latest_checkpoint)
                return keras.models.load_model(latest_checkpoint)
            print("Creating a new model")
            return get_compiled_model()

        for n, attempt in enumerate(("new", "restored")):
            keras.utils.set_random_seed(2 + n)  # test-only: tfgpu's copy of the last model drew seeds
            model = make_or_restore_model()
            losses = LossHistory()
            callbacks = [
                # This callback saves the model every 4 batches.
                # We include the training loss in the saved model name.
                keras.callbacks.ModelCheckpoint(filepath=checkpoint_dir + "/model-loss={loss:.2f}.keras", save_freq=4),
                losses,
            ]  # fmt: skip
            runs[f"history_{attempt}"] = api.fit(
                model, x_train, y_train, epochs=1, callbacks=callbacks, shuffle=False
            ).history
            runs[f"per_batch_losses_{attempt}"] = losses.per_batch_losses
        runs["weights"] = model.get_weights()
        runs["files"] = sorted(str(p.relative_to(where)) for p in where.rglob("*.keras"))
        return runs

    expected = guide(KERAS, tmp_path / "keras")
    assert len(expected["per_batch_losses_new"]) == 10  # 320 rows in batches of 32
    same(guide(tfgpu_with(local_strategy(2)), tmp_path / "tfgpu"), expected)


# -- keras-io guides/custom_train_step_in_tensorflow.py ---------------------------------------------
def test_custom_train_step_guide():
    """keras-io guides/custom_train_step_in_tensorflow.py: the four ``CustomModel`` s, a subclassed
    ``keras.Model`` built functionally: ``train_step`` with ``compute_loss`` and the compiled
    metrics; a lower-level one with its own loss and ``metrics`` property (compiled with an
    optimizer only); one that unpacks ``sample_weight``; a ``test_step`` for ``evaluate``.

    The reference is Keras's own fit under the same MirroredStrategy: there ``compute_loss``
    scales the logged loss by 1/replicas (the weights are one device's), and the lower-level
    step's own ``loss_fn`` is not scaled, so its gradients are summed over the replicas. In
    evaluation tfgpu scales no loss, so the custom ``test_step`` reports one device's loss (2x
    Keras's under the strategy).

    Lines changed: ``with strategy.scope():`` around building and compiling (a subclassed model
    cannot be re-created in a scope). Test-only: 1000 rows -> 256, epochs 3/5 -> 2.
    """
    r = guides.rng(31)
    x = r.random((256, 32))
    y = r.random((256, 1))
    sw = r.random((256, 1))
    strategy = local_strategy(2)

    def guide(api, scope):
        keras.utils.set_random_seed(0)
        runs = {}
        with scope():
            # Construct and compile an instance of CustomModel
            inputs = keras.Input(shape=(32,))
            outputs = keras.layers.Dense(1)(inputs)
            model = CustomModel(inputs, outputs)
            model.compile(optimizer="adam", loss="mse", metrics=["mae"])
        # Just use `fit` as usual
        runs["history_first"] = api.fit(model, x, y, epochs=2, shuffle=False).history
        runs["weights_first"] = model.get_weights()

        with scope():
            # Construct an instance of CustomModel
            inputs = keras.Input(shape=(32,))
            outputs = keras.layers.Dense(1)(inputs)
            model = LowerLevelCustomModel(inputs, outputs)
            # We don't pass a loss or metrics here.
            model.compile(optimizer="adam")
        # Just use `fit` as usual -- you can use callbacks, etc.
        runs["history_lower"] = api.fit(model, x, y, epochs=2, shuffle=False).history
        runs["weights_lower"] = model.get_weights()

        with scope():
            inputs = keras.Input(shape=(32,))
            outputs = keras.layers.Dense(1)(inputs)
            model = WeightedCustomModel(inputs, outputs)
            model.compile(optimizer="adam", loss="mse", metrics=["mae"])
        # You can now use sample_weight argument
        runs["history_weighted"] = api.fit(model, x, y, sample_weight=sw, epochs=2, shuffle=False).history
        runs["weights_weighted"] = model.get_weights()

        with scope():
            # Construct an instance of CustomModel
            inputs = keras.Input(shape=(32,))
            outputs = keras.layers.Dense(1)(inputs)
            model = EvalCustomModel(inputs, outputs)
            model.compile(loss="mse", metrics=["mae"])
        # Evaluate with our custom test_step
        runs["evaluated"] = api.evaluate(model, x, y)
        return runs

    expected = guide(KERAS, strategy.scope)
    # the custom test_step's loss is compute_loss's value, which Keras scales by 1/replicas in
    # evaluation too (no gradient is summed there); tfgpu reports one device's (issue 57 item 5)
    expected["evaluated"] = [expected["evaluated"][0] * 2, *expected["evaluated"][1:]]
    same(guide(TFGPU, strategy.scope), expected)


def test_custom_train_step_guide_gan():
    """keras-io guides/custom_train_step_in_tensorflow.py, "Wrapping up: an end-to-end GAN
    example": a ``GAN`` model holding the generator and discriminator, no ``call()``, its own
    ``compile`` signature (two optimizers, built at their first ``apply``), a dataset of images
    without labels, ``fit(dataset.take(100))``.

    Keras's own fit cannot run this guide under a MirroredStrategy (RuntimeError: "Unable to
    automatically build the model", the model has no ``call``), and its latent vectors are drawn
    per replica, so no Keras run has tfgpu's 2-replica figures. So: on one replica
    (OneDeviceStrategy) tfgpu must give Keras's one-device history and weights exactly; on 2
    replicas it must run the guide as Keras runs it on one device: the same logs, finite, both
    sub-models and both optimizers stepped once a batch.

    Lines changed: ``with strategy.scope():`` around building and compiling (a subclassed model
    cannot be re-created in a scope). Test-only: ``reshuffle_each_iteration=False``; 70000 digits
    -> 128, filters 64/128 -> 8, latent_dim 128 -> 16.
    """
    all_digits = guides.mnist_digits()

    def guide(api, scope):
        keras.utils.set_random_seed(0)
        batch_size = 64
        dataset = tf.data.Dataset.from_tensor_slices(all_digits)
        # test-only: reshuffle_each_iteration=False (Keras under a strategy reads a reshuffling
        # dataset's 2nd order in epoch 1: see test_training_guide_tf_data_reshuffled_each_epoch)
        dataset = dataset.shuffle(buffer_size=1024, reshuffle_each_iteration=False).batch(batch_size)
        with scope():
            discriminator, generator = guides.gan_parts()
            gan = GAN(discriminator=discriminator, generator=generator, latent_dim=guides.latent_dim)
            gan.compile(
                d_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
                g_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
                loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
            )
        initial = [w.copy() for w in gan.get_weights()]
        # To limit the execution time, we only train on 100 batches. You can train on
        # the entire dataset. You will need about 20 epochs to get nice results.
        history = api.fit(gan, dataset.take(100), epochs=1)
        moved = [float(np.abs(a - b).max()) for a, b in zip(gan.get_weights(), initial, strict=True)]
        steps = [int(gan.d_optimizer.iterations.numpy()), int(gan.g_optimizer.iterations.numpy())]
        return {"history": history.history, "weights": gan.get_weights(), "moved": moved, "steps": steps}

    expected = guide(KERAS, one_device)
    assert expected["steps"] == [2, 2] and min(expected["moved"]) > 0
    same(guide(TFGPU, local_strategy(1).scope), expected)
    got = guide(TFGPU, local_strategy(2).scope)
    assert set(got["history"]) == set(expected["history"]) == {"d_loss", "g_loss"}
    assert all(np.isfinite(v).all() for v in got["history"].values())
    assert got["steps"] == [2, 2] and min(got["moved"]) > 0


# -- keras-io guides/transfer_learning.py -------------------------------------------------------------
def test_transfer_learning_guide():
    """keras-io guides/transfer_learning.py, "An end-to-end example": augmentation layers mapped over
    the dataset, batched, prefetched and cached; a frozen base with batch normalization called
    with ``training=False``; Rescaling and Dropout around it; the top trained, then the base
    unfrozen, the model compiled again with a low learning rate and trained end to end;
    evaluate on the test dataset. Dropout's masks are per replica: the reference is Keras's own
    fit under the same MirroredStrategy.

    Lines changed: ``with strategy.scope():`` around building and compiling (both compiles).
    Test-only: Xception -> a small base with batch normalization (no download), 150x150 -> 32x32,
    batch 64 -> 32.
    """
    strategy = local_strategy(2)

    def guide(api):
        keras.utils.set_random_seed(0)
        train_ds, validation_ds, test_ds = (
            guides.cats_vs_dogs(96),
            guides.cats_vs_dogs(32),
            guides.cats_vs_dogs(32),
        )
        from keras import layers

        augmentation_layers = [
            layers.RandomFlip("horizontal"),
            layers.RandomRotation(0.1),
        ]

        def data_augmentation(x):
            for layer in augmentation_layers:
                x = layer(x)
            return x

        train_ds = train_ds.map(lambda x, y: (data_augmentation(x), y))

        from tensorflow import data as tf_data

        batch_size = 32
        train_ds = train_ds.batch(batch_size).prefetch(tf_data.AUTOTUNE).cache()
        validation_ds = validation_ds.batch(batch_size).prefetch(tf_data.AUTOTUNE).cache()
        test_ds = test_ds.batch(batch_size).prefetch(tf_data.AUTOTUNE).cache()

        with strategy.scope():
            base_model = guides.small_base_model(input_shape=(32, 32, 3))
            # Freeze the base_model
            base_model.trainable = False

            # Create new model on top
            inputs = keras.Input(shape=(32, 32, 3))
            scale_layer = keras.layers.Rescaling(scale=1 / 127.5, offset=-1)
            x = scale_layer(inputs)
            x = base_model(x, training=False)
            x = keras.layers.GlobalAveragePooling2D()(x)
            x = keras.layers.Dropout(0.2)(x)  # Regularize with dropout
            outputs = keras.layers.Dense(1)(x)
            model = keras.Model(inputs, outputs)

            model.compile(
                optimizer=keras.optimizers.Adam(),
                loss=keras.losses.BinaryCrossentropy(from_logits=True),
                metrics=[keras.metrics.BinaryAccuracy()],
            )
        epochs = 2
        print("Fitting the top layer of the model")
        top = api.fit(model, train_ds, epochs=epochs, validation_data=validation_ds)
        frozen = [w.copy() for w in base_model.get_weights()]

        # Unfreeze the base_model. Note that it keeps running in inference mode
        # since we passed `training=False` when calling it.
        base_model.trainable = True
        with strategy.scope():
            model.compile(
                optimizer=keras.optimizers.Adam(1e-5),  # Low learning rate
                loss=keras.losses.BinaryCrossentropy(from_logits=True),
                metrics=[keras.metrics.BinaryAccuracy()],
            )
        epochs = 1
        print("Fitting the end-to-end model")
        tuned = api.fit(model, train_ds, epochs=epochs, validation_data=validation_ds)
        moved = max(float(np.abs(a - b).max()) for a, b in zip(base_model.get_weights(), frozen, strict=True))
        assert moved > 0  # the unfrozen base trained
        print("Test dataset evaluation")
        return {"history_top": top.history, "history_tuned": tuned.history,
                "results": api.evaluate(model, test_ds), "weights": model.get_weights()}  # fmt: skip

    same(guide(TFGPU), guide(KERAS))


# -- keras-io guides/distributed_training_with_tensorflow.py -----------------------------------------
def test_distributed_training_guide(tmp_path, monkeypatch):
    """keras-io guides/distributed_training_with_tensorflow.py: a model built and compiled in a
    MirroredStrategy's scope, tf.data datasets of global batches, fit with validation_data,
    evaluate; then ``run_training`` twice with ``make_or_restore_model``: a ``ckpt-{epoch}.keras``
    checkpoint each epoch, and the second run loads the latest in a new strategy's scope and goes
    on from there (optimizer state included).

    Lines changed: none. Test-only: ``tf.distribute.MirroredStrategy()`` -> 2 of this process's
    CPUs (``local_strategy(2)``); Keras's reference runs the same code under the default
    strategy (one device); Dense 256 -> 32; MNIST 60000 -> 320 rows.
    """

    def guide(api, make_strategy, where):
        where.mkdir()
        monkeypatch.chdir(where)
        keras.utils.set_random_seed(0)
        runs = {}
        # Create a MirroredStrategy.
        strategy = make_strategy()
        print("Number of devices: {}".format(strategy.num_replicas_in_sync))  # noqa: UP032 (the guide's line)

        # Open a strategy scope.
        with strategy.scope():
            # Everything that creates variables should be under the strategy scope.
            # In general this is only model construction & `compile()`.
            model = guides.get_distributed_compiled_model()

            # Train the model on all available devices.
            train_dataset, val_dataset, test_dataset = guides.get_dataset()
            runs["history"] = api.fit(model, train_dataset, epochs=2, validation_data=val_dataset).history

            # Test the model on all available devices.
            runs["results"] = api.evaluate(model, test_dataset)

        # Prepare a directory to store all the checkpoints.
        checkpoint_dir = "./ckpt"
        if not os.path.exists(checkpoint_dir):
            os.makedirs(checkpoint_dir)

        def make_or_restore_model():
            # Either restore the latest model, or create a fresh one
            # if there is no checkpoint available.
            checkpoints = [checkpoint_dir + "/" + name for name in os.listdir(checkpoint_dir)]
            if checkpoints:
                latest_checkpoint = max(checkpoints, key=os.path.getctime)
                print("Restoring from", latest_checkpoint)
                return keras.models.load_model(latest_checkpoint)
            print("Creating a new model")
            return guides.get_distributed_compiled_model()

        def run_training(epochs=1):
            # Create a MirroredStrategy.
            strategy = make_strategy()

            # Open a strategy scope and create/restore the model
            with strategy.scope():
                model = make_or_restore_model()

                callbacks = [
                    # This callback saves a SavedModel every epoch
                    # We include the current epoch in the folder name.
                    keras.callbacks.ModelCheckpoint(
                        filepath=checkpoint_dir + "/ckpt-{epoch}.keras",
                        save_freq="epoch",
                    )
                ]
                history = api.fit(
                    model,
                    train_dataset,
                    epochs=epochs,
                    callbacks=callbacks,
                    validation_data=val_dataset,
                    verbose=2,
                )
            return history.history, model

        # Running the first time creates the model
        runs["history_first"], _ = run_training(epochs=1)
        # Calling the same function again will resume from where we left off
        runs["history_resumed"], model = run_training(epochs=1)
        runs["weights"] = model.get_weights()
        assert int(model.optimizer.iterations.numpy()) == 16  # restored at 8, then 8 more
        return runs

    expected = guide(KERAS, tf.distribute.get_strategy, tmp_path / "keras")
    same(guide(TFGPU, lambda: local_strategy(2), tmp_path / "tfgpu"), expected)


# -- keras-io guides/functional_api.py ---------------------------------------------------------------
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


# -- keras-io examples/vision/mnist_convnet.py -------------------------------------------------------
def test_mnist_convnet_example():
    """keras-io examples/vision/mnist_convnet.py: a Sequential convnet with Dropout(0.5) on
    (28, 28, 1) images, one-hot labels (``to_categorical``), ``batch_size=128`` and
    ``validation_split=0.1``, evaluate. 712 rows: ``validation_split`` leaves 640 training rows,
    five full batches of 128, and 72 validation
    rows (an odd count split 15/14 over 2 replicas fails Keras's own fit under the strategy,
    "Inputs to operation AddN ... must have the same size and shape"; tfgpu takes it).
    The example builds it outside any scope; Dropout's masks are per replica, so the reference is
    Keras's own fit of its copy in the same MirroredStrategy's scope (``KerasUnder``).

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False``; 60000 images -> 712,
    filters 32/64 -> 8/16, epochs 15 -> 2.
    """
    (x_train, y_train), (x_test, y_test) = guides.mnist_images(train=712)
    # Scale images to the [0, 1] range
    x_train = x_train.astype("float32") / 255
    x_test = x_test.astype("float32") / 255
    # Make sure images have shape (28, 28, 1)
    x_train = np.expand_dims(x_train, -1)
    x_test = np.expand_dims(x_test, -1)
    # convert class vectors to binary class matrices
    y_train = keras.utils.to_categorical(y_train, guides.num_classes)
    y_test = keras.utils.to_categorical(y_test, guides.num_classes)
    strategy = local_strategy(2)

    def guide(api):
        keras.utils.set_random_seed(0)
        model = guides.mnist_convnet()
        batch_size = 128
        epochs = 2
        model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
        history = api.fit(
            model, x_train, y_train, batch_size=batch_size, epochs=epochs, validation_split=0.1, shuffle=False
        )
        score = api.evaluate(model, x_test, y_test, verbose=0)
        print("Test loss:", score[0])
        print("Test accuracy:", score[1])
        return {"history": history.history, "score": score, "weights": model.get_weights()}

    same(guide(tfgpu_with(strategy)), guide(KerasUnder(strategy)))


# -- keras-io examples/nlp/text_classification_from_scratch.py --------------------------------------
def test_text_classification_from_scratch_example():
    """keras-io examples/nlp/text_classification_from_scratch.py: ``TextVectorization`` with a
    custom standardization, adapted on the text dataset and mapped over the (string, label)
    datasets, cached and prefetched; a 1D convnet with Dropout trained on them; evaluate; then
    the end-to-end model (raw strings in: the adapted layer and the trained model), made
    outside any scope, compiled and evaluated on the raw test dataset. Dropout's masks are per
    replica: the reference is Keras's own fit under the same MirroredStrategy.

    Lines changed: ``with strategy.scope():`` around building and compiling the model. Test-only:
    25000 reviews -> 128, vocabulary 20000 -> 200, sequence 500 -> 40, filters 128 -> 8, epochs 3
    -> 2.
    """
    strategy = local_strategy(2)

    def guide(api):
        keras.utils.set_random_seed(0)
        raw_train_ds = guides.imdb_reviews(128, seed=0)
        raw_val_ds = guides.imdb_reviews(64, seed=1)
        raw_test_ds = guides.imdb_reviews(64, seed=2)
        vectorize_layer = keras.layers.TextVectorization(
            standardize=guides.custom_standardization,
            max_tokens=guides.max_features,
            output_mode="int",
            output_sequence_length=guides.sequence_length,
        )
        # Let's make a text-only dataset (no labels):
        text_ds = raw_train_ds.map(lambda x, y: x)
        # Let's call `adapt`:
        vectorize_layer.adapt(text_ds)

        def vectorize_text(text, label):
            text = tf.expand_dims(text, -1)
            return vectorize_layer(text), label

        # Vectorize the data.
        train_ds = raw_train_ds.map(vectorize_text)
        val_ds = raw_val_ds.map(vectorize_text)
        test_ds = raw_test_ds.map(vectorize_text)

        # Do async prefetching / buffering of the data for best performance on GPU.
        train_ds = train_ds.cache().prefetch(buffer_size=10)
        val_ds = val_ds.cache().prefetch(buffer_size=10)
        test_ds = test_ds.cache().prefetch(buffer_size=10)

        with strategy.scope():
            model = guides.text_conv_model()
        epochs = 2
        # Fit the model using the train and test datasets.
        history = api.fit(model, train_ds, validation_data=val_ds, epochs=epochs)
        results = api.evaluate(model, test_ds)

        # A string input
        inputs = keras.Input(shape=(1,), dtype="string")
        # Turn strings into vocab indices
        indices = vectorize_layer(inputs)
        # Turn vocab indices into predictions
        outputs = model(indices)

        # Our end to end model
        end_to_end_model = keras.Model(inputs, outputs)
        end_to_end_model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])

        # Test it with `raw_test_ds`, which yields raw strings
        end_to_end = api.evaluate(end_to_end_model, raw_test_ds)
        return {"history": history.history, "results": results, "end_to_end": end_to_end,
                "weights": model.get_weights()}  # fmt: skip

    expected = guide(KERAS)
    assert expected["results"] == pytest.approx(expected["end_to_end"], rel=1e-5)
    same(guide(TFGPU), expected)


# -- keras-io examples/timeseries/timeseries_classification_from_scratch.py -------------------------
def test_timeseries_classification_example(tmp_path, monkeypatch):
    """keras-io examples/timeseries/timeseries_classification_from_scratch.py: a fully convolutional
    network with BatchNormalization on (length, 1) float64 series, callbacks ModelCheckpoint
    (save_best_only on val_loss), ReduceLROnPlateau and EarlyStopping, ``validation_split=0.2``;
    then the best model loaded with ``keras.models.load_model`` and ``predict(x_test)``. Built
    outside any scope; batch statistics are per replica, so the reference is Keras's own fit of
    its copy in the same MirroredStrategy's scope (``KerasUnder``).

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False``; 3601 series -> 160 of
    length 32; filters 64 -> 8; epochs 500 -> 3; ``"best_model.h5"`` -> ``"best_model.keras"``
    (Keras 3's ModelCheckpoint takes .keras; the example on keras.io writes that now).
    """
    (x_train, y_train), (x_test, y_test) = guides.ford_a()
    num_classes = len(np.unique(y_train))
    strategy = local_strategy(2)

    def guide(api, where):
        where.mkdir()
        monkeypatch.chdir(where)
        keras.utils.set_random_seed(0)
        model = guides.make_model(input_shape=x_train.shape[1:], num_classes=num_classes)
        epochs = 3
        batch_size = 32

        callbacks = [
            keras.callbacks.ModelCheckpoint("best_model.keras", save_best_only=True, monitor="val_loss"),
            keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=20, min_lr=0.0001),
            keras.callbacks.EarlyStopping(monitor="val_loss", patience=50, verbose=1),
        ]
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        history = api.fit(
            model,
            x_train,
            y_train,
            batch_size=batch_size,
            epochs=epochs,
            callbacks=callbacks,
            validation_split=0.2,
            verbose=1,
            shuffle=False,
        )
        weights = model.get_weights()
        model = keras.models.load_model("best_model.keras")
        y_pred = api.predict(model, x_test)
        print("Test accuracy", np.mean(y_pred.argmax(axis=1) == y_test))  # accuracy_score(y_pred, y_test)
        return {"history": history.history, "weights": weights, "y_pred": y_pred}

    expected = guide(KerasUnder(strategy), tmp_path / "keras")
    same(guide(tfgpu_with(strategy), tmp_path / "tfgpu"), expected)


# -- keras-io examples/structured_data/structured_data_classification_with_feature_space.py --------
def test_structured_data_feature_space_example():
    """keras-io examples/structured_data/structured_data_classification_with_feature_space.py:
    datasets of (dict of raw features, label), shuffled and batched; a ``FeatureSpace`` (integer
    and string lookups, discretization, normalization, crosses) adapted on them and mapped over
    them; a training model on the encoded features (with Dropout) and an inference model on the
    raw dict inputs that shares its layers, both made outside any scope; fit, then
    ``inference_model.predict`` on a dict of one-row tensors. Dropout's masks are per replica:
    the reference is Keras's own fit of the training model's copy in the same MirroredStrategy's
    scope (``KerasUnder``).

    Lines changed: none (the strategy passed). Test-only: 303 rows -> 160, epochs 20 -> 2;
    ``reshuffle_each_iteration=False`` in ``dataframe_to_dataset`` (Keras under a strategy reads
    a reshuffling dataset's 2nd order in epoch 1); the DataFrame is a dict of columns (pandas is
    not installed here).
    """
    dataframe = guides.heart_dataframe()
    strategy = local_strategy(2)

    def guide(api):
        keras.utils.set_random_seed(0)
        val_dataframe = {k: v[:32] for k, v in dataframe.items()}
        train_dataframe = {k: v[32:] for k, v in dataframe.items()}
        train_ds = guides.dataframe_to_dataset(train_dataframe)
        val_ds = guides.dataframe_to_dataset(val_dataframe)
        train_ds = train_ds.batch(32)
        val_ds = val_ds.batch(32)
        feature_space = guides.heart_feature_space()
        train_ds_with_no_labels = train_ds.map(lambda x, _: x)
        feature_space.adapt(train_ds_with_no_labels)

        preprocessed_train_ds = train_ds.map(
            lambda x, y: (feature_space(x), y), num_parallel_calls=tf.data.AUTOTUNE
        )
        preprocessed_train_ds = preprocessed_train_ds.prefetch(tf.data.AUTOTUNE)
        preprocessed_val_ds = val_ds.map(
            lambda x, y: (feature_space(x), y), num_parallel_calls=tf.data.AUTOTUNE
        )
        preprocessed_val_ds = preprocessed_val_ds.prefetch(tf.data.AUTOTUNE)

        dict_inputs = feature_space.get_inputs()
        encoded_features = feature_space.get_encoded_features()

        x = keras.layers.Dense(32, activation="relu")(encoded_features)
        x = keras.layers.Dropout(0.5)(x)
        predictions = keras.layers.Dense(1, activation="sigmoid")(x)

        training_model = keras.Model(inputs=encoded_features, outputs=predictions)
        training_model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])

        inference_model = keras.Model(inputs=dict_inputs, outputs=predictions)

        history = api.fit(
            training_model, preprocessed_train_ds, epochs=2, validation_data=preprocessed_val_ds, verbose=2
        )
        sample = {
            "age": 60, "sex": 1, "cp": 1, "trestbps": 145, "chol": 233, "fbs": 1, "restecg": 2,
            "thalach": 150, "exang": 0, "oldpeak": 2.3, "slope": 3, "ca": 0, "thal": "fixed",
        }  # fmt: skip
        input_dict = {name: tf.convert_to_tensor([value]) for name, value in sample.items()}
        # the inference model was never compiled: Keras's predict runs it as it is
        predicted = (
            api.predict(inference_model, input_dict)
            if api.name == "tfgpu"
            else inference_model.predict(input_dict)
        )
        return {"history": history.history, "weights": training_model.get_weights(),
                "predicted": predicted}  # fmt: skip

    expected = guide(KerasUnder(strategy))
    same(guide(tfgpu_with(strategy)), expected)


# -- tensorflow/docs site/en/tutorials/keras/classification.ipynb ------------------------------------
@pytest.mark.parametrize("how", ["strategy-passed", "as-written"])
def test_tf_basic_classification_tutorial(how):
    """tensorflow/docs site/en/tutorials/keras/classification.ipynb: Fashion MNIST images scaled to
    float64 (``train_images / 255.0``), ``Flatten(input_shape=(28, 28))``, logits with
    ``SparseCategoricalCrossentropy(from_logits=True)``, fit with Keras's default batch (32),
    ``test_loss, test_acc = model.evaluate(..., verbose=2)``, then a ``probability_model`` (the
    trained model and Softmax, made outside any scope) and its predict, also on one image.

    Lines changed: none. strategy-passed: outside any scope, ``strategy=`` (2 replicas) passed to
    fit and evaluate; as-written: no strategy anywhere, tfgpu's own (``tfgpu.strategy()``: 3
    replicas in this process, where Keras's default batch of 32 does not split evenly).
    Test-only: ``shuffle=False``; 60000 images -> 256 or 264, Dense 128 -> 32, epochs 10 -> 2.
    """
    # full batches: 256 rows at 32 (2 replicas), 264 at 33 (3)
    rows = 256 if how == "strategy-passed" else 264
    (train_images, train_labels), (test_images, test_labels) = guides.fashion_mnist(train=rows)
    train_images = train_images / 255.0
    test_images = test_images / 255.0

    def guide(api):
        keras.utils.set_random_seed(0)
        model = tf.keras.Sequential(
            [
                tf.keras.layers.Flatten(input_shape=(28, 28)),
                tf.keras.layers.Dense(32, activation="relu"),
                tf.keras.layers.Dense(10),
            ]
        )
        model.compile(
            optimizer="adam",
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
        history = api.fit(model, train_images, train_labels, epochs=2, shuffle=False)
        test_loss, test_acc = api.evaluate(model, test_images, test_labels, verbose=2)
        print("\nTest accuracy:", test_acc)
        probability_model = tf.keras.Sequential([model, tf.keras.layers.Softmax()])
        predictions = api.predict(probability_model, test_images)
        img = test_images[1]
        img = np.expand_dims(img, 0)
        predictions_single = api.predict(probability_model, img)
        return {"history": history.history, "test": [test_loss, test_acc], "weights": model.get_weights(),
                "predictions": predictions, "predictions_single": predictions_single}  # fmt: skip

    if how == "strategy-passed":
        same(guide(tfgpu_with(local_strategy(2))), guide(KERAS))
        return
    # tfgpu's own strategy: Keras's default batch (32) rounded up to split over its replicas,
    # said in the summary; the reference is Keras at that batch
    from tfgpu import choices

    choices.clear()
    ours = guide(TFGPU)
    batch = int(choices.as_dict()["batch_size"]["value"])
    assert batch == 33 and "rounded up" in choices.as_dict()["batch_size"]["reason"]
    at_batch = SimpleNamespace(**{**vars(KERAS), "fit": lambda m, *a, **k: m.fit(*a, batch_size=batch, **k)})
    same(ours, guide(at_batch))


# -- tensorflow/docs site/en/tutorials/keras/regression.ipynb ----------------------------------------
def test_tf_regression_tutorial(tmp_path, monkeypatch):
    """tensorflow/docs site/en/tutorials/keras/regression.ipynb: ``Normalization`` layers adapted on
    NumPy data outside any scope, one (axis=None, ``input_shape=[1,]``) on the Horsepower column
    and one on all features, each shared by two models; the one-input linear model, the linear
    model, the DNN on Horsepower and the DNN on all features, each fit with
    ``validation_split=0.2`` and ``verbose=0``, evaluated, ``predict(tf.linspace(0.0, 250, 251))``
    (a tf.Tensor); the DNN saved, reloaded and evaluated.

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False``; 314 rows -> 160;
    epochs 100 -> 2; Dense 64 -> 16; the DataFrames are NumPy arrays (pandas is not installed).
    """
    (train_features, train_labels), (test_features, test_labels) = guides.auto_mpg()
    from keras import layers

    def guide(api, where):
        where.mkdir()
        monkeypatch.chdir(where)
        keras.utils.set_random_seed(0)
        runs = {}
        normalizer = tf.keras.layers.Normalization(axis=-1)
        normalizer.adapt(np.array(train_features))
        horsepower = np.array(train_features[:, 2])  # train_features['Horsepower']
        horsepower_normalizer = layers.Normalization(input_shape=[1], axis=None)
        horsepower_normalizer.adapt(horsepower)
        horsepower_model = tf.keras.Sequential([horsepower_normalizer, layers.Dense(units=1)])
        horsepower_model.compile(
            optimizer=tf.keras.optimizers.Adam(learning_rate=0.1), loss="mean_absolute_error"
        )
        runs["history_hp"] = api.fit(
            horsepower_model,
            train_features[:, 2],
            train_labels,
            epochs=2,
            # Suppress logging.
            verbose=0,
            # Calculate validation results on 20% of the training data.
            validation_split=0.2,
            shuffle=False,
        ).history
        runs["test_hp"] = api.evaluate(horsepower_model, test_features[:, 2], test_labels, verbose=0)
        x = tf.linspace(0.0, 250, 251)
        runs["y_hp"] = api.predict(horsepower_model, x)

        keras.utils.set_random_seed(1)  # test-only: tfgpu's copy of the last model drew seeds
        linear_model = tf.keras.Sequential([normalizer, layers.Dense(units=1)])
        linear_model.compile(
            optimizer=tf.keras.optimizers.Adam(learning_rate=0.1), loss="mean_absolute_error"
        )
        runs["history_linear"] = api.fit(
            linear_model,
            train_features,
            train_labels,
            epochs=2,
            verbose=0,
            validation_split=0.2,
            shuffle=False,
        ).history
        runs["test_linear"] = api.evaluate(linear_model, test_features, test_labels, verbose=0)

        keras.utils.set_random_seed(2)  # test-only: tfgpu's copy of the last model drew seeds
        dnn_horsepower_model = guides.build_and_compile_model(horsepower_normalizer)
        runs["history_dnn_hp"] = api.fit(
            dnn_horsepower_model, train_features[:, 2], train_labels, validation_split=0.2, verbose=0, epochs=2,
            shuffle=False,
        ).history  # fmt: skip
        runs["y_dnn_hp"] = api.predict(dnn_horsepower_model, x)

        keras.utils.set_random_seed(3)  # test-only: tfgpu's copy of the last model drew seeds
        dnn_model = guides.build_and_compile_model(normalizer)
        runs["history_dnn"] = api.fit(
            dnn_model, train_features, train_labels, validation_split=0.2, verbose=0, epochs=2, shuffle=False
        ).history
        runs["test_dnn"] = api.evaluate(dnn_model, test_features, test_labels, verbose=0)
        runs["predictions"] = api.predict(dnn_model, test_features).flatten()
        dnn_model.save("dnn_model.keras")
        reloaded = tf.keras.models.load_model("dnn_model.keras")
        runs["test_reloaded"] = api.evaluate(reloaded, test_features, test_labels, verbose=0)
        runs["weights"] = dnn_model.get_weights()
        return runs

    expected = guide(KERAS, tmp_path / "keras")
    assert expected["test_reloaded"] == pytest.approx(expected["test_dnn"])
    same(guide(tfgpu_with(local_strategy(2)), tmp_path / "tfgpu"), expected)


# -- tensorflow/docs site/en/tutorials/keras/save_and_load.ipynb -------------------------------------
def test_tf_save_and_load_tutorial(tmp_path, monkeypatch):
    """tensorflow/docs site/en/tutorials/keras/save_and_load.ipynb: ``create_model()`` (Dropout)
    outside any scope, float64 images; ModelCheckpoint saving weights each epoch
    (``cp.weights.h5``), then every ``5*n_batches`` batches (``cp-{epoch:04d}.weights.h5``), a new
    model's ``load_weights`` and evaluate; the whole model saved as .keras, loaded, evaluated and
    predicted. Dropout's masks are per replica: the reference is Keras's own fit of each model's
    copy in the same MirroredStrategy's scope (``KerasUnder``).

    Lines changed: none (the strategy passed). Test-only: ``shuffle=False``; 1000 images -> 256;
    Dense 512 -> 32; epochs 10/50/5 -> 2/5/1.
    """
    (train_images, train_labels), (test_images, test_labels) = guides.mnist_images(train=256, test=64)
    train_images = train_images.reshape(-1, 28 * 28) / 255.0
    test_images = test_images.reshape(-1, 28 * 28) / 255.0
    strategy = local_strategy(2)

    def guide(api, where):
        where.mkdir()
        monkeypatch.chdir(where)
        keras.utils.set_random_seed(0)
        runs = {}
        model = guides.create_model()
        checkpoint_path = "training_1/cp.weights.h5"
        # Create a callback that saves the model's weights
        cp_callback = tf.keras.callbacks.ModelCheckpoint(
            filepath=checkpoint_path, save_weights_only=True, verbose=1
        )
        # Train the model with the new callback
        runs["history_1"] = api.fit(
            model, train_images, train_labels, epochs=2, validation_data=(test_images, test_labels),
            callbacks=[cp_callback], shuffle=False,
        ).history  # fmt: skip
        runs["weights_1"] = model.get_weights()
        # Create a basic model instance
        keras.utils.set_random_seed(2)  # test-only: tfgpu's copy of the last model drew seeds
        model = guides.create_model()
        # Loads the weights
        model.load_weights(checkpoint_path)
        # Re-evaluate the model
        runs["restored_1"] = api.evaluate(model, test_images, test_labels, verbose=2)

        # Include the epoch in the file name (uses `str.format`)
        checkpoint_path = "training_2/cp-{epoch:04d}.weights.h5"
        checkpoint_dir = os.path.dirname(checkpoint_path)
        os.mkdir(checkpoint_dir)
        batch_size = 32
        n_batches = len(train_images) / batch_size
        n_batches = math.ceil(n_batches)
        cp_callback = tf.keras.callbacks.ModelCheckpoint(
            filepath=checkpoint_path, verbose=1, save_weights_only=True, save_freq=5 * n_batches
        )
        keras.utils.set_random_seed(3)  # test-only: tfgpu's copy of the last model drew seeds
        model = guides.create_model()
        # Save the weights using the `checkpoint_path` format
        model.save_weights(checkpoint_path.format(epoch=0))
        runs["history_2"] = api.fit(
            model, train_images, train_labels, epochs=5, batch_size=batch_size, callbacks=[cp_callback],
            validation_data=(test_images, test_labels), verbose=0, shuffle=False,
        ).history  # fmt: skip
        runs["files"] = sorted(os.listdir(checkpoint_dir))

        def load_latest_checkpoint(checkpoint_dir):
            latest = max(os.listdir(checkpoint_dir), key=lambda f: int(f.split("-")[1].split(".")[0]))
            return os.path.join(checkpoint_dir, latest)

        latest = load_latest_checkpoint(checkpoint_dir)
        keras.utils.set_random_seed(4)  # test-only: tfgpu's copy of the last model drew seeds
        model = guides.create_model()
        model.load_weights(latest)
        runs["restored_2"] = api.evaluate(model, test_images, test_labels, verbose=2)
        runs["weights_2"] = model.get_weights()

        keras.utils.set_random_seed(5)  # test-only: tfgpu's copy of the last model drew seeds

        model = guides.create_model()
        runs["history_3"] = api.fit(model, train_images, train_labels, epochs=1, shuffle=False).history
        # Save the entire model as a `.keras` zip archive.
        model.save("my_model.keras")
        new_model = tf.keras.models.load_model("my_model.keras")
        runs["restored_3"] = api.evaluate(new_model, test_images, test_labels, verbose=2)
        runs["predicted_3"] = api.predict(new_model, test_images)
        return runs

    expected = guide(KerasUnder(strategy), tmp_path / "keras")
    assert expected["files"] == ["cp-0000.weights.h5", "cp-0005.weights.h5"]
    same(guide(tfgpu_with(strategy), tmp_path / "tfgpu"), expected)


# -- tensorflow/docs site/en/tutorials/keras/overfit_and_underfit.ipynb ------------------------------
def test_tf_overfit_and_underfit_tutorial(tmp_path):
    """tensorflow/docs site/en/tutorials/keras/overfit_and_underfit.ipynb: ``compile_and_fit`` of
    Sequential models made outside any scope (the tiny model, and the L2-regularized one), an
    ``InverseTimeDecay`` schedule, a BinaryCrossentropy metric named as the loss; the training
    dataset cached, shuffled, repeated forever and batched, so ``steps_per_epoch`` ends each
    epoch; validation on a mapped dataset; EpochDots, EarlyStopping on
    ``val_binary_crossentropy`` and TensorBoard callbacks.

    Lines changed: none (the strategy passed). Test-only: 11000 rows -> 600, batch 500 -> 50,
    Dense 512 -> 16, max_epochs 10000 -> 3; ``tfdocs.modeling.EpochDots`` is the same callback
    written here (tensorflow_docs is not installed).
    """
    from tensorflow.keras import layers, regularizers

    FEATURES = guides.FEATURES

    def guide(api, logdir):
        keras.utils.set_random_seed(0)
        packed_ds = guides.higgs(600)
        N_VALIDATION = 100
        N_TRAIN = 500
        BUFFER_SIZE = 500
        BATCH_SIZE = 50
        STEPS_PER_EPOCH = N_TRAIN // BATCH_SIZE
        validate_ds = packed_ds.take(N_VALIDATION).cache()
        train_ds = packed_ds.skip(N_VALIDATION).take(N_TRAIN).cache()
        validate_ds = validate_ds.batch(BATCH_SIZE)
        train_ds = train_ds.shuffle(BUFFER_SIZE).repeat().batch(BATCH_SIZE)
        lr_schedule = tf.keras.optimizers.schedules.InverseTimeDecay(
            0.001, decay_steps=STEPS_PER_EPOCH * 1000, decay_rate=1, staircase=False
        )

        def get_optimizer():
            return tf.keras.optimizers.Adam(lr_schedule)

        def get_callbacks(name):
            return [
                guides.EpochDots(),
                tf.keras.callbacks.EarlyStopping(monitor="val_binary_crossentropy", patience=200),
                tf.keras.callbacks.TensorBoard(logdir / name),
            ]

        def compile_and_fit(model, name, optimizer=None, max_epochs=10000):
            if optimizer is None:
                optimizer = get_optimizer()
            model.compile(
                optimizer=optimizer,
                loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
                metrics=[
                    tf.keras.metrics.BinaryCrossentropy(from_logits=True, name="binary_crossentropy"),
                    "accuracy",
                ],
            )
            model.summary()
            history = api.fit(
                model,
                train_ds.map(lambda x, y: (x, tf.expand_dims(y, axis=-1))),
                steps_per_epoch=STEPS_PER_EPOCH,
                epochs=max_epochs,
                validation_data=validate_ds.map(lambda x, y: (x, tf.expand_dims(y, axis=-1))),
                callbacks=get_callbacks(name),
                verbose=0,
            )
            return history

        tiny_model = tf.keras.Sequential(
            [layers.Dense(16, activation="elu", input_shape=(FEATURES,)), layers.Dense(1)]
        )
        size_histories = {}
        size_histories["Tiny"] = compile_and_fit(tiny_model, "sizes/Tiny", max_epochs=3)
        keras.utils.set_random_seed(1)  # test-only: tfgpu's copy of the last model drew seeds
        l2_model = tf.keras.Sequential(
            [
                layers.Dense(
                    16, activation="elu", kernel_regularizer=regularizers.l2(0.001), input_shape=(FEATURES,)
                ),
                layers.Dense(16, activation="elu", kernel_regularizer=regularizers.l2(0.001)),
                layers.Dense(1),
            ]
        )
        regularizer_histories = {"l2": compile_and_fit(l2_model, "regularizers/l2", max_epochs=3)}
        assert list((logdir / "regularizers/l2" / "train").glob("events.out.tfevents.*"))
        return {"history_tiny": size_histories["Tiny"].history, "history_l2": regularizer_histories["l2"].history,
                "weights_tiny": tiny_model.get_weights(), "weights_l2": l2_model.get_weights()}  # fmt: skip

    expected = guide(KERAS, tmp_path / "keras")
    same(guide(tfgpu_with(local_strategy(2)), tmp_path / "tfgpu"), expected)


# -- tensorflow/docs site/en/tutorials/distribute/keras.ipynb ----------------------------------------
def test_tf_distributed_training_with_keras_tutorial(tmp_path, monkeypatch):
    """tensorflow/docs site/en/tutorials/distribute/keras.ipynb: (uint8 image, int64 label) examples
    mapped, cached, shuffled and batched by BATCH_SIZE_PER_REPLICA * replicas; a convnet built
    and compiled in the strategy's scope; TensorBoard, a ModelCheckpoint of weights each epoch,
    LearningRateScheduler and a custom callback reading ``model.optimizer.learning_rate``; the
    latest checkpoint loaded and evaluated; the model saved, loaded outside the scope
    (``unreplicated_model``) and inside it, compiled again and evaluated.

    The reference is Keras on one device with the same global batch (the model built outside
    the scope there; the replicated model's evaluate is Keras's under the strategy in both).

    Lines changed: none. Test-only: ``tf.distribute.MirroredStrategy()`` -> 2 of this process's
    CPUs; ``reshuffle_each_iteration=False`` (the reshuffled order is
    test_training_guide_tf_data_reshuffled_each_epoch's); 60000 images -> 256, Conv2D 32 -> 8,
    Dense 64 -> 16, batch 64 -> 16 per replica, EPOCHS 12 -> 4 (the decay's steps at epochs 3
    and 7 -> 1 and 3).
    """
    strategy = local_strategy(2)

    def decay(epoch):
        if epoch < 1:
            return 1e-3
        elif epoch >= 1 and epoch < 3:
            return 1e-4
        else:
            return 1e-5

    def guide(api, scope, where):
        where.mkdir()
        monkeypatch.chdir(where)
        keras.utils.set_random_seed(0)
        runs = {}
        mnist_train, mnist_test = guides.mnist_supervised(256, seed=0), guides.mnist_supervised(64, seed=1)
        BUFFER_SIZE = 10000
        BATCH_SIZE_PER_REPLICA = 16
        BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync
        train_dataset = (
            mnist_train.map(guides.scale)
            .cache()
            .shuffle(BUFFER_SIZE, reshuffle_each_iteration=False)
            .batch(BATCH_SIZE)
        )
        eval_dataset = mnist_test.map(guides.scale).batch(BATCH_SIZE)
        with scope():
            model = tf.keras.Sequential(
                [
                    tf.keras.layers.Conv2D(8, 3, activation="relu", input_shape=(28, 28, 1)),
                    tf.keras.layers.MaxPooling2D(),
                    tf.keras.layers.Flatten(),
                    tf.keras.layers.Dense(16, activation="relu"),
                    tf.keras.layers.Dense(10),
                ]
            )
            model.compile(
                loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                optimizer=tf.keras.optimizers.Adam(learning_rate=0.001),
                metrics=["accuracy"],
            )
        checkpoint_dir = "./training_checkpoints"
        checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt_{epoch:04d}.weights.h5")
        printed = []

        class PrintLR(tf.keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                print(
                    "\nLearning rate for epoch {} is {}".format(  # noqa: UP032 (the tutorial's line)
                        epoch + 1, model.optimizer.learning_rate.numpy()
                    )
                )
                printed.append(float(model.optimizer.learning_rate.numpy()))

        callbacks = [
            tf.keras.callbacks.TensorBoard(log_dir="./logs"),
            tf.keras.callbacks.ModelCheckpoint(filepath=checkpoint_prefix, save_weights_only=True),
            tf.keras.callbacks.LearningRateScheduler(decay),
            PrintLR(),
        ]
        EPOCHS = 4
        runs["history"] = api.fit(model, train_dataset, epochs=EPOCHS, callbacks=callbacks).history
        runs["printed"] = printed
        latest_checkpoint = sorted(pathlib.Path(checkpoint_dir).glob("*"))[-1]
        model.load_weights(latest_checkpoint)
        runs["eval"] = api.evaluate(model, eval_dataset)
        path = "my_model.keras"
        model.save(path)
        unreplicated_model = tf.keras.models.load_model(path)
        unreplicated_model.compile(
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            optimizer=tf.keras.optimizers.Adam(),
            metrics=["accuracy"],
        )
        runs["eval_unreplicated"] = api.evaluate(unreplicated_model, eval_dataset)
        with strategy.scope():
            replicated_model = tf.keras.models.load_model(path)
            replicated_model.compile(
                loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                optimizer=tf.keras.optimizers.Adam(),
                metrics=["accuracy"],
            )
            runs["eval_replicated"] = api.evaluate(replicated_model, eval_dataset)
        runs["weights"] = model.get_weights()
        runs["checkpoints"] = sorted(p.name for p in pathlib.Path(checkpoint_dir).glob("*"))
        assert list(pathlib.Path("logs/train").glob("events.out.tfevents.*"))
        return runs

    expected = guide(KERAS, one_device, tmp_path / "keras")
    assert expected["printed"] == pytest.approx([1e-3, 1e-4, 1e-4, 1e-5])
    same(guide(TFGPU, strategy.scope, tmp_path / "tfgpu"), expected)

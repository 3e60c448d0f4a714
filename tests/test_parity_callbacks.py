"""Callbacks (Keras's and the user's), checkpoints, ``BackupAndRestore`` and resumed runs, progress
bars and batch hooks see what Keras's own fit shows them, on several replicas to one device's numbers.

Each test is an example of ``support.examples`` (its marker: its source, what it exercises),
run with Keras's methods and tfgpu's and compared under ``support/parity.py``'s rules.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import guides
import tfgpu
from fit_models import (
    FIT_48,
    IN_ORDER_48,
    binary_data,
    binary_model,
    normal_rows,
    small_regression,
)
from guides import (
    LossHistory,
    get_compiled_model,
)
from support.parity import KERAS, TFGPU, KerasUnder, in_scope, same, tfgpu_with
from support.replicas import local_strategy, one_device


@pytest.mark.heavy
@pytest.mark.exercises(
    "callbacks:builtin",
    "callbacks:custom",
    "callbacks:checkpoint",
    "inputs:arrays",
    "loss:string",
    "metric:builtin",
    "model:functional",
    "model:outside_scope",
    "strategy:mirrored",
    source='keras-io guides/training_with_built_in_methods.py "Using callbacks" / "Checkpointing models"',
)
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


# -- keras-io guides/distributed_training_with_tensorflow.py -----------------------------------------
@pytest.mark.heavy
@pytest.mark.exercises(
    "callbacks:checkpoint",
    "callbacks:builtin",
    "model:functional",
    "model:in_scope",
    "inputs:dataset",
    "loss:object",
    "metric:builtin",
    "strategy:mirrored",
    source="keras-io guides/distributed_training_with_tensorflow.py",
)
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


# -- tensorflow/docs site/en/tutorials/keras/save_and_load.ipynb -------------------------------------
@pytest.mark.heavy
@pytest.mark.exercises(
    "callbacks:checkpoint",
    "callbacks:builtin",
    "model:sequential",
    "model:outside_scope",
    "random:dropout",
    "inputs:arrays",
    "loss:object",
    "metric:builtin",
    "program:keras_methods",
    "strategy:mirrored",
    source="tensorflow/docs tutorials/keras/save_and_load",
)
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


# -- tensorflow/docs site/en/tutorials/distribute/keras.ipynb ----------------------------------------
@pytest.mark.heavy
@pytest.mark.exercises(
    "callbacks:builtin",
    "callbacks:custom",
    "callbacks:checkpoint",
    "model:sequential",
    "model:in_scope",
    "inputs:dataset",
    "loss:object",
    "metric:builtin",
    "program:optimizer",
    "program:keras_methods",
    "strategy:mirrored",
    source="tensorflow/docs tutorials/distribute/keras",
)
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


@pytest.mark.heavy
@pytest.mark.exercises(
    "callbacks:custom",
    "model:sequential",
    "model:unbuilt",
    "model:outside_scope",
    "model:in_scope",
    "loss:string",
    "metric:builtin",
    "inputs:arrays",
    "program:optimizer",
    "strategy:mirrored",
    source="keras-io guides/writing_your_own_callbacks.py",
)
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


class BatchLog(keras.callbacks.Callback):
    """Records the batches each per-batch hook saw (keras-io's "writing your own callbacks")."""

    def __init__(self):
        super().__init__()
        self.test, self.predict = [], []

    def on_test_batch_end(self, batch, logs=None):
        self.test.append((batch, round(float(logs["loss"]), 5)))

    def on_predict_batch_end(self, batch, logs=None):
        self.predict.append(batch)


@pytest.mark.exercises(
    "callbacks:custom",
    "loss:string",
    "model:sequential",
    "model:in_scope",
    "inputs:arrays",
    "strategy:one",
    "strategy:mirrored",
    source="keras-io writing your own callbacks",
)
@pytest.mark.heavy
@pytest.mark.parametrize("replicas", [1, 2])
def test_test_and_predict_batch_hooks_see_every_batch_as_in_keras(replicas, clean_choices):
    x, y = normal_rows(rows=192)
    keras_model, theirs = small_regression("mse"), BatchLog()
    keras_model.evaluate(x, y, batch_size=48, verbose=0, callbacks=[theirs])
    keras_model.predict(x, batch_size=48, verbose=0, callbacks=[theirs])
    keras_model.fit(
        x, y, batch_size=48, epochs=1, verbose=0, shuffle=False, validation_data=(x, y), callbacks=[theirs]
    )
    with local_strategy(replicas).scope():
        model = small_regression("mse")
    ours = BatchLog()
    tfgpu.evaluate(model, x, y, batch_size=48, verbose=0, callbacks=[ours])
    tfgpu.predict(model, x, batch_size=48, verbose=0, callbacks=[ours])
    tfgpu.fit(
        model,
        x,
        y,
        batch_size=48,
        epochs=1,
        verbose=0,
        shuffle=False,
        validation_data=(x, y),
        callbacks=[ours],
    )
    assert [b for b, _ in ours.test] == [b for b, _ in theirs.test] == [0, 1, 2, 3] * 2
    assert [loss for _, loss in ours.test] == pytest.approx([loss for _, loss in theirs.test], rel=1e-4)
    assert ours.predict == theirs.predict == [0, 1, 2, 3]
    from tfgpu import choices

    assert {"evaluation steps per call", "predict.steps_per_execution"} <= set(choices.as_dict())


@pytest.mark.exercises(
    "callbacks:checkpoint",
    "program:proof",
    "program:recompile",
    "metric:builtin",
    "loss:string",
    "inputs:arrays",
    "inputs:dataset",
    "model:sequential",
    "model:in_scope",
    "strategy:mirrored",
    source="README.md fit block",
)
@pytest.mark.heavy
def test_a_proved_model_checkpoints_and_resumes(tmp_path, clean_choices):
    """The proof lends the optimizer's variables and gives them back, re-keying its index dict:
    through ``pop`` that passed TensorFlow's wrapper of the dict by, and the next checkpoint save
    failed ("Unable to save the object {...} (a dictionary wrapper ...)", found by running
    README.md's fit block)."""
    x, y = normal_rows()
    for data in ((x, y), (tf.data.Dataset.from_tensor_slices((x, y)).batch(48),)):
        with local_strategy(2).scope():
            model = small_regression("mse")
            model.compile(optimizer="adam", loss="mse", metrics=[keras.metrics.AUC()])
        fit = {**FIT_48, "batch_size": None} if len(data) == 1 else FIT_48
        history = tfgpu.fit(model, *data, checkpoint_dir=str(tmp_path / str(len(data))), **fit)
        assert history.train_result.proof.status == "agree"
        assert history.train_result.final_checkpoint


@pytest.mark.exercises(
    "callbacks:builtin",
    "inputs:arrays",
    "model:sequential",
    "model:outside_scope",
    "loss:string",
    "strategy:one",
    source="tfgpu (issue 68 item 5)",
)
@pytest.mark.model
def test_evaluate_s_progress_bar_knows_the_steps_of_arrays(capsys, clean_choices):
    """Issue 68 item 5: ``tfgpu.evaluate`` on arrays showed "128/Unknown"; Keras's bar shows the
    steps it knows (100 rows at batch 25: 4)."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(100, 4)).astype("float32"), rng.normal(size=(100, 1)).astype("float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    tfgpu.evaluate(model, x, y, batch_size=25, verbose=1, strategy=local_strategy(1))
    shown = capsys.readouterr().out
    assert "4/4" in shown and "Unknown" not in shown, shown


class _Interrupt(keras.callbacks.Callback):
    """The Keras docs' way to show BackupAndRestore: a failure at the start of an epoch."""

    def __init__(self, at_epoch):
        super().__init__()
        self.at_epoch = at_epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.at_epoch:
            raise RuntimeError("interrupted")


@pytest.mark.exercises(
    "callbacks:backup",
    "callbacks:custom",
    "model:sequential",
    "model:in_scope",
    "loss:string",
    "metric:builtin",
    "inputs:arrays",
    "strategy:mirrored",
    source="Keras docs' BackupAndRestore example (failure at an epoch's start)",
)
@pytest.mark.heavy
def test_backup_and_restore_resumes_at_the_epoch_as_keras(tmp_path):
    x, y = binary_data(384)
    keras_model = binary_model()
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "keras"))
    with pytest.raises(RuntimeError, match="interrupted"):
        keras_model.fit(x, y, epochs=4, callbacks=[backup, _Interrupt(2)], **IN_ORDER_48)
    resumed = keras_model.fit(x, y, epochs=4, callbacks=[backup], **IN_ORDER_48).history
    model = in_scope(local_strategy(2), binary_model)
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "ours"))
    with pytest.raises(RuntimeError, match="interrupted"):
        tfgpu.fit(model, x, y, epochs=4, callbacks=[backup, _Interrupt(2)], **IN_ORDER_48)
    assert (tmp_path / "ours").is_dir()  # the backup of epochs 1-2
    fresh = in_scope(local_strategy(2), binary_model)  # a new process would build the model anew
    history = tfgpu.fit(fresh, x, y, epochs=4, callbacks=[backup], **IN_ORDER_48)
    assert history.epoch == [2, 3]  # as Keras: only the epochs left
    same(history.history, resumed)
    same(fresh.get_weights(), keras_model.get_weights())
    assert not (tmp_path / "ours").exists()  # deleted once training ended, as Keras does

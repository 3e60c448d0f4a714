"""Keras's contract on real code (issue 36): what ``model.fit`` / ``evaluate`` / ``predict`` take,
return and report, checked against Keras on one device."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import tfgpu
from fit_models import (
    binary_data,
    binary_model,
    endpoint_model,
    grad_norm_model,
    transfer_model,
    two_in_two_out,
)
from support.parity import in_scope, same
from support.replicas import local_strategy
from tutorials import ps_tutorial_trained_as_keras, tutorial

ARGS = dict(batch_size=48, shuffle=False, verbose=0)


def _fine_tune(fit, model, base, x, y):
    """The transfer-learning guide's two phases, then a re-compile with a zero learning rate."""
    fit(model, x, y, epochs=1)
    frozen = [w.copy() for w in base.get_weights()]
    base.trainable = True
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy", metrics=["binary_accuracy"]
    )
    tuned = fit(model, x, y, epochs=2, validation_data=(x[:32], y[:32]))
    moved = max(float(np.abs(a - b).max()) for a, b in zip(base.get_weights(), frozen, strict=True))
    before = [w.copy() for w in model.get_weights()]
    model.compile(
        optimizer=keras.optimizers.SGD(0.0), loss="binary_crossentropy", metrics=["binary_accuracy"]
    )
    still = fit(model, x, y, epochs=1, validation_data=(x[:32], y[:32]))
    unmoved = max(float(np.abs(a - b).max()) for a, b in zip(model.get_weights(), before, strict=True))
    return tuned.history, still.history, moved, unmoved


@pytest.mark.heavy
@pytest.mark.parametrize("where", ["in-scope", "outside-scope"])
def test_fine_tuning_follows_compile_and_trainable_as_keras(where):
    x, y = binary_data(384)
    model, base = transfer_model()
    expected = _fine_tune(lambda m, *a, **k: m.fit(*a, **k, **ARGS), model, base, x, y)
    assert expected[2] > 1e-3 and expected[3] == 0.0  # Keras trains the base, then SGD(0) moves nothing
    if where == "in-scope":
        model, base = in_scope(local_strategy(2), transfer_model)
        fit = tfgpu.fit
    else:  # the guide as written, no scope: re-created in tfgpu.strategy()'s (collectives, 3 replicas)
        model, base = transfer_model()
        fit = tfgpu.fit

    got = _fine_tune(lambda m, *a, **k: fit(m, *a, **k, **ARGS), model, base, x, y)
    assert got[2] == pytest.approx(expected[2], rel=1e-4)
    assert got[3] == 0.0
    same(got[0], expected[0])
    same(got[1], expected[1])  # metrics start again each call: nothing accumulates


@pytest.mark.heavy
def test_a_model_outside_the_scope_keeps_its_optimizer_state_between_calls():
    """Two fit calls on the default strategy (tfgpu.strategy(), collectives): as one Keras model."""
    x, y = binary_data(384)
    expected, _ = transfer_model(frozen=False)
    first = expected.fit(x, y, epochs=1, **ARGS).history
    second = expected.fit(x, y, epochs=1, **ARGS).history
    model, _ = transfer_model(frozen=False)
    assert tfgpu.strategy() is tfgpu.strategy()  # one strategy per process: collectives stay in step
    same(tfgpu.fit(model, x, y, epochs=1, **ARGS).history, first)
    same(tfgpu.fit(model, x, y, epochs=1, **ARGS).history, second)  # Adam's moments kept
    same(model.get_weights(), expected.get_weights())


@pytest.mark.heavy
def test_evaluate_after_re_compile_is_keras_and_repeatable():
    x, y = binary_data(384)
    model, base = in_scope(local_strategy(2), transfer_model)
    tfgpu.fit(model, x, y, epochs=1, **ARGS)
    base.trainable = True
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3), loss="binary_crossentropy", metrics=["binary_accuracy"]
    )
    tfgpu.fit(model, x, y, epochs=1, **ARGS)
    first = tfgpu.evaluate(model, x, y, return_dict=True)
    assert tfgpu.evaluate(model, x, y, return_dict=True) == first
    reference = keras.Model.from_config(model.get_config())
    reference.set_weights(model.get_weights())
    reference.compile(loss="binary_crossentropy", metrics=["binary_accuracy"])
    assert first == pytest.approx(reference.evaluate(x, y, verbose=0, return_dict=True), rel=1e-5)


@pytest.mark.heavy
@pytest.mark.parametrize("replicas", [1, 2])
def test_a_train_step_s_own_logs_are_reported_as_keras_reports_them(replicas):
    x, y = binary_data(384)
    seen = []
    logger = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append(dict(logs)))
    # Keras under the same strategy: a step's own logs are the mean over the replicas
    expected = in_scope(local_strategy(replicas), grad_norm_model)
    keras_history = expected.fit(x, y, epochs=2, validation_data=(x[:96], y[:96]), **ARGS).history
    assert {"grad_norm", "loss", "val_mean_prediction", "val_loss"} == set(keras_history)
    # but in evaluation: Keras scales compute_loss's value by 1/replicas there too, where no
    # gradient is summed; tfgpu reports one device's (issue 57 item 5)
    keras_history["val_loss"] = [v * replicas for v in keras_history["val_loss"]]
    model = in_scope(local_strategy(replicas), grad_norm_model)
    history = tfgpu.fit(model, x, y, epochs=2, validation_data=(x[:96], y[:96]), callbacks=[logger], **ARGS)
    same(history.history, keras_history)
    assert seen[-1] == pytest.approx({k: v[-1] for k, v in keras_history.items()}, rel=1e-5)
    # evaluate: the last test step's logs, as Keras's evaluate (a dict, or in Keras's order)
    got = tfgpu.evaluate(model, x[:96], y[:96], batch_size=48, return_dict=True)
    keras_eval = expected.evaluate(x[:96], y[:96], batch_size=48, verbose=0, return_dict=True)
    assert got == pytest.approx({**keras_eval, "loss": keras_eval["loss"] * replicas})


@pytest.mark.heavy
def test_evaluate_and_predict_keep_keras_s_signature_defaults_and_results(capsys):
    import tensorflow as tf

    x, y = binary_data(200)
    expected = binary_model()
    expected.fit(x, y, epochs=1, **ARGS)
    model = in_scope(local_strategy(2), binary_model)
    model.set_weights(expected.get_weights())
    # the guides' pattern: a list in Keras's order unless return_dict; positional batch_size, verbose
    test_loss, test_acc, auc, precision = tfgpu.evaluate(model, x, y, 50, 0)
    assert [test_loss, test_acc, auc, precision] == pytest.approx(expected.evaluate(x, y, 50, 0), rel=1e-5)
    capsys.readouterr()
    tfgpu.evaluate(model, x, y, verbose=1)  # Keras's progress bar
    assert "loss" in capsys.readouterr().out
    only_loss = in_scope(local_strategy(2), lambda: binary_model(metrics=[]))
    alone = keras.Sequential.from_config(only_loss.get_config())
    alone.compile(loss="binary_crossentropy")
    assert tfgpu.evaluate(only_loss, x, y, verbose=0) == pytest.approx(
        alone.evaluate(x, y, verbose=0), rel=1e-5
    )
    # predict: Keras's positional arguments, a tf.data.Dataset (x alone or (x, y)), steps, callbacks
    ended = []
    done = keras.callbacks.LambdaCallback(on_predict_end=lambda logs: ended.append(True))
    want = expected.predict(x, batch_size=32, verbose=0)
    np.testing.assert_allclose(tfgpu.predict(model, x, 32, 0, None, [done]), want, rtol=1e-5, atol=1e-6)
    assert ended == [True]
    for data in (tf.data.Dataset.from_tensor_slices(x), tf.data.Dataset.from_tensor_slices((x, y))):
        got = tfgpu.predict(model, data.batch(30), verbose=0)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert tfgpu.predict(model, x, batch_size=40, steps=2, verbose=0).shape == (80, 1)
    with pytest.raises(tfgpu.ConfigError, match=r"batch_size, steps and callbacks are model\.predict's"):
        tfgpu.predict(model, x, "out", steps=2)  # a path third: the output directory, as before


def _two_in_two_out_data(rows=192):
    rng = np.random.default_rng(7)
    a, b = rng.normal(size=(rows, 6)).astype("float32"), rng.normal(size=(rows, 4)).astype("float32")
    score = (a[:, :2].sum(1, keepdims=True) + b[:, :1]).astype("float32")
    kind = (a[:, 0] > 0).astype("int64") + (b[:, 0] > 0).astype("int64")
    return [a, b], [score, kind]


@pytest.mark.heavy
def test_lists_for_several_inputs_and_outputs_as_keras():
    x, y = _two_in_two_out_data()
    expected = two_in_two_out()
    keras_history = expected.fit(x, y, epochs=2, validation_data=(x, y), **ARGS).history
    model = in_scope(local_strategy(2), two_in_two_out)
    history = tfgpu.fit(model, x, y, epochs=2, validation_data=(x, y), **ARGS)
    same(history.history, keras_history)
    same(model.get_weights(), expected.get_weights())
    assert tfgpu.evaluate(model, x, y, verbose=0) == pytest.approx(
        expected.evaluate(x, y, verbose=0), rel=1e-5
    )
    for ours, theirs in zip(tfgpu.predict(model, x, verbose=0), expected.predict(x, verbose=0), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.heavy
def test_x_without_y_for_a_model_that_adds_its_own_loss():
    rng = np.random.default_rng(8)
    data = {
        "inputs": rng.random((192, 3)).astype("float32"),
        "targets": rng.random((192, 10)).astype("float32"),
    }
    # Keras's own fit under the same strategy: an add_loss loss is scaled by 1/replicas there (its
    # logged loss is half the one-device figure on 2 replicas, its weights 1.3e-4 apart): Keras's
    # behaviour, kept (docs/from-model-fit.md)
    expected = in_scope(local_strategy(2), endpoint_model)
    keras_history = expected.fit(data, epochs=2, **ARGS).history
    model = in_scope(local_strategy(2), endpoint_model)
    same(tfgpu.fit(model, data, epochs=2, **ARGS).history, keras_history)
    same(model.get_weights(), expected.get_weights())
    with pytest.raises(tfgpu.ConfigError, match="without y, and the model's compiled loss needs labels"):
        tfgpu.fit(in_scope(local_strategy(2), binary_model), data["inputs"], epochs=1, verbose=0)


class _Batches(keras.utils.PyDataset):
    """ "Training with built-in methods": a PyDataset of (x, y) batches, read by its workers."""

    def __init__(self, x, y, batch_size, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch_size, self.epochs_ended = x, y, batch_size, 0

    def __len__(self):
        return int(np.ceil(len(self.x) / self.batch_size))

    def __getitem__(self, index):
        cut = slice(index * self.batch_size, (index + 1) * self.batch_size)
        return self.x[cut], self.y[cut]

    def on_epoch_end(self):
        self.epochs_ended += 1


@pytest.mark.heavy
def test_a_py_dataset_with_workers_and_a_generator_as_keras(clean_choices):
    from tfgpu import choices

    x, y = binary_data(384)
    expected = binary_model()
    keras_batches = _Batches(x, y, 48, workers=2)
    keras_history = expected.fit(keras_batches, epochs=2, verbose=0, shuffle=False).history
    model = in_scope(local_strategy(2), binary_model)
    batches = _Batches(x, y, 48, workers=2)
    history = tfgpu.fit(model, batches, epochs=2, verbose=0, shuffle=False)
    same(history.history, keras_history)
    same(model.get_weights(), expected.get_weights())
    # Keras ends an epoch before the first (its iterator's reset), then one per epoch: 3
    assert batches.epochs_ended == keras_batches.epochs_ended == 3
    assert "PyDataset" in choices.as_dict()["input"]["value"]

    def generator():
        for start in range(0, 384, 48):
            yield x[start : start + 48], y[start : start + 48]

    expected = binary_model()
    keras_history = expected.fit(generator(), epochs=1, verbose=0).history
    model = in_scope(local_strategy(2), binary_model)
    same(tfgpu.fit(model, generator(), epochs=1, verbose=0).history, keras_history)
    assert tfgpu.evaluate(model, generator(), verbose=0) == pytest.approx(
        expected.evaluate(generator(), verbose=0), rel=1e-5
    )


class _Interrupt(keras.callbacks.Callback):
    """The Keras docs' way to show BackupAndRestore: a failure at the start of an epoch."""

    def __init__(self, at_epoch):
        super().__init__()
        self.at_epoch = at_epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.at_epoch:
            raise RuntimeError("interrupted")


@pytest.mark.heavy
def test_backup_and_restore_resumes_at_the_epoch_as_keras(tmp_path):
    x, y = binary_data(384)
    keras_model = binary_model()
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "keras"))
    with pytest.raises(RuntimeError, match="interrupted"):
        keras_model.fit(x, y, epochs=4, callbacks=[backup, _Interrupt(2)], **ARGS)
    resumed = keras_model.fit(x, y, epochs=4, callbacks=[backup], **ARGS).history
    model = in_scope(local_strategy(2), binary_model)
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "ours"))
    with pytest.raises(RuntimeError, match="interrupted"):
        tfgpu.fit(model, x, y, epochs=4, callbacks=[backup, _Interrupt(2)], **ARGS)
    assert (tmp_path / "ours").is_dir()  # the backup of epochs 1-2
    fresh = in_scope(local_strategy(2), binary_model)  # a new process would build the model anew
    history = tfgpu.fit(fresh, x, y, epochs=4, callbacks=[backup], **ARGS)
    assert history.epoch == [2, 3]  # as Keras: only the epochs left
    same(history.history, resumed)
    same(fresh.get_weights(), keras_model.get_weights())
    assert not (tmp_path / "ours").exists()  # deleted once training ended, as Keras does


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["function", "arrays", "dataset"])
def test_the_parameter_server_tutorial_in_process_with_a_cluster_resolver(kind):
    """No TF_CONFIG: the cluster comes from the strategy's own resolver; every optimizer step
    and every metric update is counted (3 epochs of 20 steps, 32 examples each), whether the
    data is the tutorial's dataset function, arrays, or a tf.data.Dataset (each worker its copy)."""
    from tfgpu.testing import run_on_logical_cpus

    result = run_on_logical_cpus("bodies:ps_tutorial_in_process", 1, kind, timeout=600)
    assert result["steps"] == 60 and result["iterations"] == 60
    assert result["loss_count"] == 20 * 32
    assert result["loss"][-1] < result["loss"][0]
    # validation each epoch and evaluate on the coordinator: Keras's figures for those weights
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x @ np.arange(8, dtype="float32") / 8)[:, None]
    reference = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    reference.compile(loss="mse", metrics=["mae"])
    reference.set_weights(result["weights"])
    assert result["eval"] == pytest.approx(
        reference.evaluate(x, y, batch_size=32, verbose=0, return_dict=True), rel=1e-5
    )
    np.testing.assert_allclose(result["predicted"], reference.predict(x, verbose=0), rtol=1e-5, atol=1e-6)
    last = reference.evaluate(x[:100], y[:100], verbose=0, return_dict=True)
    # the loss is ~2e-6 by then: float32 sums in another order differ by 2e-5 of it (seen once)
    assert {k: v[-1] for k, v in result["validated"].items() if k.startswith("val_")} == pytest.approx(
        {f"val_{k}": v for k, v in last.items()}, rel=1e-4
    )


@pytest.mark.slow
def test_the_multi_worker_tutorial_checkpoints_and_predicts_on_every_worker(tmp_path):
    """fit inside strategy.scope() with a ModelCheckpoint (every worker joins the save; only the
    chief's files remain), then predict in memory: every worker gets every row, as Keras's
    predict gives it; the same history and predictions as Keras on one device."""
    import tensorflow as tf

    from tfgpu.testing import run_cluster

    x, y = binary_data()
    expected = binary_model()
    history = expected.fit(
        tf.data.Dataset.from_tensor_slices((x[:768], y[:768])).batch(48), epochs=2, verbose=0
    )
    want = expected.predict(x, batch_size=64, verbose=0)
    # a train_step's own logs (grad_norm): each worker's replica's, averaged over the workers, as
    # Keras averages over a MirroredStrategy's replicas; Keras's own fit cannot run here
    mirrored = in_scope(local_strategy(2), grad_norm_model)
    own_logs = mirrored.fit(
        tf.data.Dataset.from_tensor_slices((x[:768], y[:768])).batch(48), epochs=2, verbose=0
    )
    results = run_cluster("bodies:multi_worker_tutorial", workers=2, args=(str(tmp_path),), timeout=400)
    for result in results.values():
        same(result["history"], history.history)
        same(result["own_logs"], own_logs.history)
        np.testing.assert_allclose(result["predicted"], want, rtol=1e-5, atol=1e-6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-1.keras", "ckpt-2.keras"]


@pytest.mark.heavy
def test_adapted_preprocessing_layers_outside_the_scope_as_keras():
    """The model is re-created in the strategy's scope: its adapted vocabularies (tables, not
    weights) and normalization constants come with it."""
    import tensorflow as tf

    from fit_models import adapted_model

    rng = np.random.default_rng(0)
    words = np.array(["cat", "dog", "eel", "fox"])[rng.integers(0, 4, 256)]
    numbers = rng.normal(loc=3.0, size=(256, 1)).astype("float32")
    texts = np.array([" ".join(rng.choice(["red", "blue", "big", "small", "dog"], 4)) for _ in range(256)])
    y = ((words == "dog") | (numbers[:, 0] > 3.5)).astype("float32")

    def data():
        return tf.data.Dataset.from_tensor_slices(((words[:, None], numbers, texts[:, None]), y)).batch(32)

    expected = adapted_model(words, numbers, texts)
    keras_history = expected.fit(data(), epochs=2, verbose=0).history
    model = adapted_model(words, numbers, texts)
    history = tfgpu.fit(model, data(), epochs=2, verbose=0, strategy=local_strategy(2))
    same(history.history, keras_history)
    same(model.get_weights(), expected.get_weights())
    assert tfgpu.evaluate(model, data(), verbose=0, strategy=local_strategy(2)) == pytest.approx(
        expected.evaluate(data(), verbose=0), rel=1e-5
    )


@pytest.mark.heavy
def test_the_gan_guide_runs_as_written_on_two_replicas():
    """Its optimizers are built by its first step, which under a strategy fails (Keras's own fit
    needs three lines that build them by hand): tfgpu builds what the first step would, and gives
    the figures of Keras's own fit under the same strategy with those lines."""
    import tensorflow as tf

    import guides

    def gan_model():
        discriminator, generator = guides.gan_parts()
        gan = guides.GAN(discriminator=discriminator, generator=generator, latent_dim=guides.latent_dim)
        gan.compile(
            d_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
            g_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
            loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
        )
        return gan

    images = np.random.default_rng(0).random((128, 28, 28, 1)).astype("float32")

    def data():
        return tf.data.Dataset.from_tensor_slices(images).batch(32)

    model = in_scope(local_strategy(2), gan_model)
    start = model.get_weights()
    history = tfgpu.fit(model, data(), epochs=2, verbose=0)
    with local_strategy(2).scope():
        expected = gan_model()
        expected.d_optimizer.build(expected.discriminator.trainable_variables)  # the three lines
        expected.g_optimizer.build(expected.generator.trainable_variables)
        expected.built = True
    expected.set_weights(start)
    same(history.history, expected.fit(data(), epochs=2, verbose=0).history)
    same(model.get_weights(), expected.get_weights())


@pytest.mark.slow
def test_the_multi_worker_tutorial_under_tfgpu_launch(tmp_path):
    """tensorflow/docs' multi-worker tutorial under `tfgpu launch --nproc 2`: both workers end
    with the weights and history of Keras's own fit on one device at the same global batch, and
    BackupAndRestore's backup is gone once training ended."""
    import json
    import sys

    from support.processes import run_cli
    from tfgpu.testing import run_on_logical_cpus

    path, _ = tutorial("multi_worker")
    done = run_cli("launch", "--nproc", "2", "--", sys.executable, str(path), str(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    expected, history = run_on_logical_cpus("bodies:keras_fits_the_multi_worker_tutorial", 1)
    for task in ("worker-0", "worker-1"):
        weights = np.load(tmp_path / f"{task}.npz")
        same([weights[f"arr_{i}"] for i in range(len(weights.files))], expected)
        same(json.loads((tmp_path / f"{task}.json").read_text()), history)
    assert not (tmp_path / "backup").exists()


@pytest.mark.slow
def test_the_parameter_server_tutorial_under_tfgpu_launch(tmp_path):
    """tensorflow/docs' parameter-server tutorial (its Model.fit section: the dataset_fn of one
    argument, TensorBoard, ModelCheckpoint and BackupAndRestore) under `tfgpu launch --ps 1`:
    one worker runs the steps in order, so the weights are Keras's on one device; every step is
    counted."""
    import sys

    from support.processes import run_cli

    path, loaded = tutorial("parameter_server")
    done = run_cli(
        "launch", "--ps", "1", "--nproc", "1", "--", sys.executable, str(path), str(tmp_path), timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ps_tutorial_trained_as_keras(loaded, tmp_path)
    assert (
        (tmp_path / "ckpt.keras").exists()
        and (tmp_path / "log").is_dir()
        and not (tmp_path / "backup").exists()
    )

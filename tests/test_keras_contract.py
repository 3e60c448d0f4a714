"""Keras's contract on real code (issue 36): what ``model.fit`` / ``evaluate`` / ``predict`` take,
return and report, checked against Keras on one device."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import tfgpu
from conftest import local_strategy
from fit_models import binary_data, binary_model, grad_norm_model, transfer_model
from test_fit import in_scope, same_history, same_weights

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
    same_history(got[0], expected[0])
    same_history(got[1], expected[1])  # metrics start again each call: nothing accumulates


def test_a_model_outside_the_scope_keeps_its_optimizer_state_between_calls():
    """Two fit calls on the default strategy (tfgpu.strategy(), collectives): as one Keras model."""
    x, y = binary_data(384)
    expected, _ = transfer_model(frozen=False)
    first = expected.fit(x, y, epochs=1, **ARGS).history
    second = expected.fit(x, y, epochs=1, **ARGS).history
    model, _ = transfer_model(frozen=False)
    assert tfgpu.strategy() is tfgpu.strategy()  # one strategy per process: collectives stay in step
    same_history(tfgpu.fit(model, x, y, epochs=1, **ARGS).history, first)
    same_history(tfgpu.fit(model, x, y, epochs=1, **ARGS).history, second)  # Adam's moments kept
    same_weights(model.get_weights(), expected.get_weights())


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


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_train_step_s_own_logs_are_reported_as_keras_reports_them(replicas):
    x, y = binary_data(384)
    seen = []
    logger = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append(dict(logs)))
    # Keras under the same strategy: a step's own logs are the mean over the replicas
    expected = in_scope(local_strategy(replicas), grad_norm_model)
    keras_history = expected.fit(x, y, epochs=2, validation_data=(x[:96], y[:96]), **ARGS).history
    assert {"grad_norm", "loss", "val_mean_prediction", "val_loss"} == set(keras_history)
    model = in_scope(local_strategy(replicas), grad_norm_model)
    history = tfgpu.fit(model, x, y, epochs=2, validation_data=(x[:96], y[:96]), callbacks=[logger], **ARGS)
    same_history(history.history, keras_history)
    assert seen[-1] == pytest.approx({k: v[-1] for k, v in keras_history.items()}, rel=1e-5)
    # evaluate: the last test step's logs, as Keras's evaluate (a dict, or in Keras's order)
    got = tfgpu.evaluate(model, x[:96], y[:96], batch_size=48, return_dict=True)
    assert got == pytest.approx(expected.evaluate(x[:96], y[:96], batch_size=48, verbose=0, return_dict=True))


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
    with pytest.raises(tfgpu.ConfigError, match="pass output='out'"):
        tfgpu.predict(model, x, "out")

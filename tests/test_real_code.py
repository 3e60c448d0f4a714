"""Issue 57: real code as its authors wrote it, each arrangement that failed or trained wrong on
2 replicas, against Keras's own ``fit`` / ``evaluate`` on one device. Each test failed before its
fix (the item it covers is named)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfgpu
from fit_models import linear_data
from support.parity import same
from support.replicas import local_strategy

FIT = dict(batch_size=16, epochs=2, shuffle=False, verbose=0)


def regression(rows: int = 64, features: int = 4):
    return linear_data(rows, features=features)


OPTIMIZERS = {
    "adam": (lambda: keras.optimizers.Adam(0.01), {}),
    "rmsprop": (lambda: keras.optimizers.RMSprop(0.01), {}),
    # the parameter-server tutorial's compile
    "sgd-steps-per-execution": (lambda: keras.optimizers.SGD(0.01), {"steps_per_execution": 10}),
}


@pytest.mark.heavy
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_an_unbuilt_model_compiled_in_the_scope_trains_as_one_device(optimizer, clean_choices):
    """Item 1: an ``Input``-less Sequential made and compiled in the scope, with an optimizer that
    keeps slot variables, failed with "colocate_vars_with" (it was built for the data outside
    the scope); with SGD and steps_per_execution=10, an AssertionError from Keras."""
    make, compile_kw = OPTIMIZERS[optimizer]
    x, y = regression()

    def model():
        keras.utils.set_random_seed(0)
        m = keras.Sequential([keras.layers.Dense(3), keras.layers.Dense(1)])
        m.compile(optimizer=make(), loss="mse", **compile_kw)
        return m

    reference = model()
    expected = reference.fit(x, y, **FIT).history["loss"]
    with local_strategy(2).scope():  # no strategy= given: the model's own, as the tutorial's fit
        ours = model()
    history = tfgpu.fit(ours, x, y, **FIT)
    assert history.history["loss"] == pytest.approx(expected, rel=1e-5)
    same(ours.get_weights(), reference.get_weights())


class TwoOptimizers(keras.Model):
    """keras-io's GANs' shape: two sub-models, each stepped by an optimizer of its own, given
    to ``compile`` and kept as attributes, made outside any scope. The loss tracker is fed the
    unscaled per-example losses, so every figure is one device's."""

    def __init__(self):
        super().__init__()
        self.encoder = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        self.head = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        self.tracker = keras.metrics.Mean(name="loss")

    def compile(self, encoder_optimizer, head_optimizer, loss_fn):
        super().compile()
        self.encoder_optimizer, self.head_optimizer, self.loss_fn = encoder_optimizer, head_optimizer, loss_fn

    @property
    def metrics(self):
        return [self.tracker]

    def _apply(self, part, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = self.loss_fn(y, self.head(self.encoder(x)))
        grads = tape.gradient(loss, part.trainable_weights)
        optimizer.apply_gradients(zip(grads, part.trainable_weights, strict=True))

    def train_step(self, data):
        x, y = data
        self._apply(self.encoder, self.encoder_optimizer, x, y)
        self._apply(self.head, self.head_optimizer, x, y)
        self.tracker.update_state(keras.ops.square(y - self.head(self.encoder(x))))
        return {"loss": self.tracker.result()}


def two_optimizers():
    keras.utils.set_random_seed(0)
    model = TwoOptimizers()
    model.compile(
        encoder_optimizer=keras.optimizers.Adam(0.01),
        head_optimizer=keras.optimizers.RMSprop(0.01),
        loss_fn=keras.losses.MeanSquaredError(),
    )
    return model


@pytest.mark.heavy
@pytest.mark.parametrize("prove", [True, False])
def test_optimizers_the_model_keeps_move_with_it_and_the_proof_leaves_them_as_they_were(prove, clean_choices):
    """Items 3 and 4: the optimizers a model keeps as attributes, made outside any scope, failed
    ("Mixing different tf.distribute.Strategy objects"); moved, the proof stepped them and never
    put them back (weights 4e-3 from one device's, where prove=False agreed)."""
    x, y = regression()
    reference = two_optimizers()
    expected = reference.fit(x, y, **FIT).history["loss"]
    ours = two_optimizers()
    history = tfgpu.fit(ours, x, y, strategy=local_strategy(2), prove=prove, **FIT)
    assert history.history["loss"] == pytest.approx(expected, rel=1e-5)
    same(ours.get_weights(), reference.get_weights())
    for mine, theirs in (
        (ours.encoder_optimizer, reference.encoder_optimizer),
        (ours.head_optimizer, reference.head_optimizer),
    ):
        assert int(keras.ops.convert_to_numpy(mine.iterations)) == 8  # stepped by the run, not the proof
        assert int(keras.ops.convert_to_numpy(theirs.iterations)) == 8
    proof = history.train_result.proof
    assert getattr(proof, "status", None) == ("agree" if prove else None), proof


class ScaledTracker(TwoOptimizers):
    """The tracker fed the loss as Keras scales it for the replicas (keras-io's GAN trackers)."""

    def train_step(self, data):
        x, y = data
        self._apply(self.encoder, self.encoder_optimizer, x, y)
        self._apply(self.head, self.head_optimizer, x, y)
        self.tracker.update_state(self.loss_fn(y, self.head(self.encoder(x))))
        return {"loss": self.tracker.result()}


@pytest.mark.heavy
def test_a_tracker_fed_the_scaled_loss_is_said_with_its_cause(clean_choices):
    keras.utils.set_random_seed(0)
    model = ScaledTracker()
    model.compile(keras.optimizers.Adam(0.01), keras.optimizers.Adam(0.01), keras.losses.MeanSquaredError())
    x, y = regression()
    history = tfgpu.fit(model, x, y, strategy=local_strategy(2), **FIT)
    proof = history.train_result.proof
    assert proof.status == "differ"
    assert "fed the loss as Keras scales it for the replicas (1/2" in proof.sentence
    assert "the weights train as one device" in proof.sentence


class OwnEvaluation(keras.Model):
    """keras-io's "providing your own evaluation step", as written."""

    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        loss = self.compute_loss(y=y, y_pred=y_pred)
        for metric in self.metrics:
            if metric.name != "loss":
                metric.update_state(y, y_pred)
            else:
                metric.update_state(loss)
        return {m.name: m.result() for m in self.metrics}


def flat_logs(logs: dict) -> dict:
    """Logs with a nested dict's figures (``compile_metrics``) at the top, as Keras >= 3.14 gives them."""
    return {
        k: v
        for key, value in logs.items()
        for k, v in (value.items() if isinstance(value, dict) else [(key, value)])
    }


def own_evaluation():
    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape=(32,))
    model = OwnEvaluation(inputs, keras.layers.Dense(1)(inputs))
    model.compile(loss="mse", metrics=["mae"])
    return model


@pytest.mark.model
@pytest.mark.parametrize("rows", [1024, 1000])
def test_an_own_evaluation_step_reports_one_device_s_figures(rows, clean_choices):
    """Item 5: the loss read 1/2 of one device's on 2 replicas (the tracker fed compute_loss's
    scaled value); with a last batch leaving a replica no rows, every figure was that of one
    replica's rows (mae 0.372 against 0.385). The loss tracker here is an unweighted mean of
    batch means, and on 2 replicas a batch is half as many rows: with a short last batch it
    weighs those rows otherwise than one device (0.8% here), as the code asks; with whole
    batches it agrees exactly, and every row-weighted figure (mae) does in both."""
    rng = np.random.default_rng(1)
    x, y = rng.random((rows, 32)).astype("float32"), rng.random((rows, 1)).astype("float32")
    expected = own_evaluation().evaluate(x, y, verbose=0, return_dict=True)
    with local_strategy(2).scope():
        model = own_evaluation()
    ours = tfgpu.evaluate(model, x, y, verbose=0, return_dict=True)
    # Keras < 3.14's own evaluate keeps compile_metrics' figures in a dict of their own; tfgpu
    # gives them flat on every version, as Keras >= 3.14 does
    assert set(ours) == set(flat_logs(ours))
    expected = {key: float(value) for key, value in flat_logs(expected).items()}  # tensors before 3.14
    assert ours["mae"] == pytest.approx(expected["mae"], rel=1e-5)
    if rows % 32 == 0:
        assert ours["loss"] == pytest.approx(expected["loss"], rel=1e-5)


class RaisesWhenArmed(keras.layers.Layer):
    """A layer of the user's that raises once training starts (it builds as usual)."""

    armed = False

    def call(self, inputs):
        if RaisesWhenArmed.armed:
            raise ValueError("a bug in the user's layer")
        return inputs


@pytest.mark.model
def test_a_failure_building_the_model_names_its_real_cause(monkeypatch, clean_choices):
    """Item 2: every failure while the model was built on the data was said as a label shape
    ("Fix: give labels of the shape the loss expects"), whatever it was."""
    from tfgpu.errors import ConfigError

    x, y = regression(32)
    model = keras.Sequential([keras.Input((4,)), RaisesWhenArmed(), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    monkeypatch.setattr(RaisesWhenArmed, "armed", True)
    with pytest.raises(ConfigError) as raised:
        tfgpu.fit(model, x, y, verbose=0)
    text = str(raised.value)
    assert f"{__file__}:" in text and "a bug in the user's layer" in text
    assert "labels" not in text and "\x1b" not in text

    wide = keras.Sequential([keras.Input((5,)), keras.layers.Dense(1)])
    wide.compile(optimizer="adam", loss="mse")
    with pytest.raises(ConfigError, match="cannot take the data's inputs") as raised:
        tfgpu.fit(wide, x, y, verbose=0)
    assert "labels" not in str(raised.value)

    classes = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    classes.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    with pytest.raises(ConfigError, match="cannot take the data's labels") as raised:
        tfgpu.fit(classes, x, np.zeros((32, 2, 2), "float32"), verbose=0)
    assert "give labels of the shape the loss expects" in str(raised.value)


@pytest.mark.model
@pytest.mark.parametrize("replicas", [1, 2])
def test_xla_asked_in_compile_is_taken_or_said_why_not(replicas, clean_choices):
    """Item 9: keras-io's image classification example asks for XLA in ``compile``; tfgpu.fit
    read it only from its own argument, and said nothing."""
    from tfgpu import choices

    x, y = regression()
    with local_strategy(replicas).scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    history = tfgpu.fit(model, x, y, **FIT)
    said = choices.as_dict()["jit_compile"]
    if replicas == 1:
        assert said["value"] == "True" and "compiled with jit_compile=True" in said["reason"]
        keras.utils.set_random_seed(0)
        reference = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        reference.compile(optimizer="sgd", loss="mse", jit_compile=True)
        expected = reference.fit(x, y, **FIT).history["loss"]
        assert history.history["loss"] == pytest.approx(expected, rel=1e-5)
    else:  # replicas on logical CPUs share one XLA device: trained without, and said
        assert said["value"] == "False" and "not taken: replicas on logical CPU devices" in said["reason"]
    assert tfgpu.fit(model, x, y, jit_compile=False, **FIT).history["loss"]  # the argument still rules


@pytest.mark.timing  # tunes: measures for up to its budget
def test_tuning_an_arrays_fit_prints_no_absl_option_warning(tmp_path, monkeypatch, caplog, clean_choices):
    """Item 10: tune=True printed absl's "Changing the value of option enabled from False to
    True." (the tuned input options over the arrays pipeline's), 1 to 13 lines a run."""
    monkeypatch.setenv("TFGPU_CACHE_DIR", str(tmp_path))
    x, y = regression(2048)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    with caplog.at_level("WARNING"):
        tfgpu.fit(model, x, y, epochs=2, verbose=0, tune=("input",), tune_budget_s=5)
    assert "Changing the value of option" not in caplog.text


def embedding_model(optimizer):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((5,), dtype="int32"),
            keras.layers.Embedding(20, 4),
            keras.layers.Flatten(),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=optimizer(), loss="mse")
    return model


@pytest.mark.heavy
@pytest.mark.parametrize("source", ["arrays", "dataset", "file"])
def test_a_short_last_batch_with_sparse_gradients_trains_as_one_device(source, tmp_path, clean_choices):
    """Item 6: an Embedding's IndexedSlices gradients are all-gathered; a short last batch inside
    the in-graph loop aborted it ("Collective ops is aborted by: Shape mismatch"). tfgpu's own
    strategy here: collective all-reduce over the 3 logical CPUs, as a user's would be."""
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 20, size=(69, 5)), rng.normal(size=(69, 1)).astype("float32")
    data = (x, y) if source == "arrays" else (tf.data.Dataset.from_tensor_slices((x, y)).batch(18),)
    args = dict(batch_size=18, shuffle=False) if source == "arrays" else {}
    reference = embedding_model(lambda: keras.optimizers.Adam(0.01))
    expected = reference.fit(*data, epochs=2, verbose=0, **args).history["loss"]
    if source == "file":  # a Dataset of unknown length: tfgpu reads the same rows from a file
        path = tmp_path / "rows.txt"
        path.write_text("".join(",".join(map(str, (*x[i], y[i, 0]))) + "\n" for i in range(len(x))))

        def parse(line):
            values = tf.strings.to_number(tf.strings.split(line, ","))
            return tf.cast(values[:5], tf.int64), values[5:]

        data = (tf.data.TextLineDataset(str(path)).map(parse).batch(18),)
    model = embedding_model(lambda: keras.optimizers.Adam(0.01))
    strategy = tfgpu.strategy()
    assert strategy.num_replicas_in_sync == 3  # 69 rows of 18: a last batch of 15, 5 a replica
    history = tfgpu.fit(model, *data, epochs=2, verbose=0, strategy=strategy, **args)
    assert history.history["loss"] == pytest.approx(expected, rel=1e-5)
    same(model.get_weights(), reference.get_weights())


class TokenAndPositionEmbedding(keras.layers.Layer):
    """keras-io's "Text classification with Transformer" embedding, as written (``per_example``:
    the positions broadcast to the batch before the lookup, the fix the proof names)."""

    def __init__(self, maxlen, vocab_size, embed_dim, per_example=False):
        super().__init__()
        self.token_emb = keras.layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
        self.pos_emb = keras.layers.Embedding(input_dim=maxlen, output_dim=embed_dim)
        self.per_example = per_example

    def call(self, x):
        maxlen = keras.ops.shape(x)[-1]
        positions = keras.ops.arange(start=0, stop=maxlen, step=1)
        if self.per_example:
            positions = keras.ops.broadcast_to(positions, keras.ops.shape(x))
        return self.token_emb(x) + self.pos_emb(positions)


def position_model(per_example):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6,), dtype="int32")
    pooled = keras.layers.GlobalAveragePooling1D()(TokenAndPositionEmbedding(6, 30, 4, per_example)(inputs))
    model = keras.Model(inputs, keras.layers.Dense(1)(pooled))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    return model


@pytest.mark.heavy
@pytest.mark.parametrize("per_example", [False, True])
def test_a_position_embedding_under_adam_is_said_or_trains_as_one_device(per_example, clean_choices):
    """Item 7: a row looked up once per batch gets a gradient slice per replica, and Adam
    squares each before they are summed: those rows step otherwise than on one device (Keras's
    own fit alike). The proof catches it and names the cause; the fix it names trains as one
    device."""
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 30, size=(64, 6)), rng.normal(size=(64, 1)).astype("float32")
    reference = position_model(per_example)
    reference.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    model = position_model(per_example)
    history = tfgpu.fit(
        model, x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, strategy=local_strategy(2)
    )
    proof = history.train_result.proof
    if per_example:
        assert proof.status == "agree", proof
        same(model.get_weights(), reference.get_weights(), atol=1e-5)
    else:
        assert proof.status == "differ"
        assert "Likely cause: sparse gradients" in proof.sentence
        assert "broadcast the positions to the batch" in proof.sentence


@pytest.mark.slow
@pytest.mark.process
@pytest.mark.parametrize(("files", "rows"), [(1, 97), (2, 100)])
def test_a_dataset_reading_files_trains_on_two_workers_as_one_device(tmp_path, files, rows):
    """Item 8: TensorFlow's AUTO policy shards a Dataset that reads files by FILE: one file
    failed ("Could not apply FILE based sharding"), two trained each worker on its own file.
    Each worker now takes its slice of every global batch (DATA), the short last one included
    (97 rows: a last batch of 1, one worker without rows)."""
    import json
    import sys

    from support.processes import run_cli

    script = __import__("pathlib").Path(__file__).parent / "scripts" / "file_dataset.py"
    done = run_cli(
        "launch",
        "--nproc",
        "2",
        "--",
        sys.executable,
        str(script),
        str(tmp_path),
        str(files),
        str(rows),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    sys.path.insert(0, str(script.parent))
    try:
        import file_dataset
    finally:
        sys.path.remove(str(script.parent))
    x, y = file_dataset.rows_of(rows)
    reference = file_dataset.model()
    expected = reference.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(16), epochs=2, verbose=0)
    for worker in ("worker-0", "worker-1"):
        weights = np.load(tmp_path / f"{worker}.npz")
        for i, theirs in enumerate(reference.get_weights()):
            np.testing.assert_allclose(weights[f"arr_{i}"], theirs, rtol=1e-5, atol=1e-6)
        result = json.loads((tmp_path / f"{worker}.json").read_text())
        assert result["history"]["loss"] == pytest.approx(expected.history["loss"], rel=1e-5)
        assert result["evaluate"] == pytest.approx(
            reference.evaluate(x, y, batch_size=16, verbose=0), rel=1e-5
        )


@pytest.mark.slow
@pytest.mark.process
def test_a_padded_text_dataset_from_a_file_trains_on_two_workers_as_one_device(tmp_path):
    """Issue 68, item 3: keras-io's NER input (a TextLineDataset, a StringLookup in a map,
    ``padded_batch(32)`` over 202 sentences: a last batch of 10) with Embeddings. Under tfgpu
    launch --nproc 2 the run aborted in the optimizer's all-gather ("Shape mismatch in the
    collective instance ... expected shape [544,8] but another member in the group expected
    shape [576,8]"): a padded batch changes shape every step inside a call. Each step now runs in
    a call of its own there: with a loss and optimizer that are one device's on several replicas,
    both workers end at one device's weights, history and evaluation; as the example compiles it
    (its loss divides by a replica's own token count, Adam squares sparse slices) both workers
    agree and the loss tracks one device's."""
    import json
    import sys

    from support.processes import run_cli

    script = __import__("pathlib").Path(__file__).parent / "scripts" / "padded_text.py"
    done = run_cli("launch", "--nproc", "2", "--", sys.executable, str(script), str(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    sys.path.insert(0, str(script.parent))
    try:
        import padded_text
    finally:
        sys.path.remove(str(script.parent))
    data = padded_text.dataset(str(tmp_path / "conll_train.txt"))
    for compiled in padded_text.COMPILED:
        reference = padded_text.model(compiled)
        expected = reference.fit(data, epochs=2, verbose=0).history["loss"]
        found = [json.loads((tmp_path / f"worker-{i}-{compiled}.json").read_text()) for i in (0, 1)]
        weights = [np.load(tmp_path / f"worker-{i}-{compiled}.npz") for i in (0, 1)]
        assert found[0] == found[1]
        for i in range(len(reference.get_weights())):
            np.testing.assert_array_equal(weights[0][f"arr_{i}"], weights[1][f"arr_{i}"])
        if compiled == "exact":
            for i, theirs in enumerate(reference.get_weights()):
                np.testing.assert_allclose(weights[0][f"arr_{i}"], theirs, rtol=1e-5, atol=1e-6)
            assert found[0]["history"]["loss"] == pytest.approx(expected, rel=1e-5)
            assert found[0]["evaluate"] == pytest.approx(reference.evaluate(data, verbose=0), rel=1e-5)
        else:
            assert found[0]["history"]["loss"] == pytest.approx(expected, rel=1e-3)


def test_pass_at_follows_keras_s_epochs_through_the_arrays():
    """1000 rows in batches of 64 (16 a pass) at 5 an epoch: Keras trains 5, 5, 5, 1, then again."""
    from tfgpu.train.inputs.readers import pass_at

    starts = [pass_at(e, per_epoch=5, pass_steps=16) for e in range(9)]
    assert starts == [(0, 0), (0, 5), (0, 10), (0, 15), (1, 0), (1, 5), (1, 10), (1, 15), (2, 0)]
    assert [pass_at(e, per_epoch=20, pass_steps=16) for e in range(3)] == [(0, 0), (1, 0), (2, 0)]


class StopAt(keras.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == self.epoch:
            self.model.stop_training = True


@pytest.mark.heavy
def test_steps_per_epoch_on_arrays_takes_keras_s_batches_and_resumes(tmp_path, clean_choices):
    """keras-io's callbacks guide fits 1000 rows with batch_size=64, steps_per_epoch=5: Keras
    takes 5 batches an epoch, going on through the rows, an epoch of 1 where a pass ends, then a
    new pass. tfgpu took a whole pass every epoch (32 steps where Keras takes 10 in 2 epochs). A
    run stopped after epoch 3 and started again resumes at its place in the pass."""
    rng = np.random.default_rng(0)
    x = rng.random((1000, 4), dtype=np.float32)
    y = x.sum(1, keepdims=True)
    args = dict(batch_size=64, steps_per_epoch=5, epochs=8, shuffle=False, verbose=0)

    def model():
        keras.utils.set_random_seed(0)
        made = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        made.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
        return made

    reference = model()
    expected = reference.fit(x, y, **args).history["loss"]
    ours = model()
    history = tfgpu.fit(ours, x, y, strategy=local_strategy(2), **args)
    assert history.history["loss"] == pytest.approx(expected, rel=1e-5)
    same(ours.get_weights(), reference.get_weights())
    assert int(keras.ops.convert_to_numpy(ours.optimizer.iterations)) == 5 + 5 + 5 + 1 + 5 + 5 + 5 + 1

    stopped = model()
    place = dict(checkpoint_dir=tmp_path, strategy=local_strategy(2))
    first = tfgpu.fit(stopped, x, y, callbacks=[StopAt(3)], **place, **args)
    assert len(first.history["loss"]) == 3
    resumed = model()
    tfgpu.fit(resumed, x, y, **place, **args)
    same(resumed.get_weights(), reference.get_weights())

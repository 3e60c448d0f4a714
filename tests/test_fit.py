"""tfgpu.fit / tfgpu.evaluate: the user's compiled Keras model, compared with Keras's fit on one device."""

from __future__ import annotations

import csv
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfgpu
from fit_models import binary_data, binary_model, custom_step_model, two_output_data, two_output_model
from support.parity import in_scope, same
from support.replicas import local_strategy
from tfgpu.errors import ConfigError

FIT = dict(batch_size=48, epochs=2, shuffle=False, validation_split=0.2, verbose=0)


@pytest.fixture(scope="module")
def reference():
    """Keras's own fit on one device: the binary classifier, validation_split, AUC and Precision."""
    x, y = binary_data()
    model = binary_model()
    history = model.fit(x, y, **FIT)
    return {"x": x, "y": y, "model": model, "history": history.history}


@pytest.mark.heavy
@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_binary_classifier_matches_keras(reference, replicas):
    strategy = local_strategy(replicas)
    model = in_scope(strategy, binary_model)
    history = tfgpu.fit(model, reference["x"], reference["y"], **FIT)
    assert isinstance(history, keras.callbacks.History) and model.history is history
    assert history.epoch == [0, 1] and history.params["epochs"] == 2
    same(history.history, reference["history"])
    same(model.get_weights(), reference["model"].get_weights())
    result = history.train_result
    assert result.replicas == replicas and result.examples_per_s > 0
    assert 0.0 <= result.input_wait_fraction <= 1.0


@pytest.mark.heavy
def test_a_learning_rate_schedule_and_keras_progress_bar(reference, capsys):
    x, y = reference["x"][:768], reference["y"][:768]
    schedule = lambda: keras.optimizers.schedules.ExponentialDecay(0.05, decay_steps=4, decay_rate=0.5)  # noqa: E731
    expected = binary_model(lr=schedule())
    expected.fit(x, y, batch_size=48, epochs=2, shuffle=False, verbose=0)
    model = in_scope(local_strategy(2), lambda: binary_model(lr=schedule()))
    capsys.readouterr()
    tfgpu.fit(model, x, y, batch_size=48, epochs=2, shuffle=False, verbose=1)
    same(model.get_weights(), expected.get_weights())
    assert int(model.optimizer.iterations.numpy()) == 32
    shown = capsys.readouterr().out
    assert "Epoch 1/2" in shown and "Epoch 2/2" in shown and "16/16" in shown


@pytest.mark.heavy
def test_stateful_metrics_equal_keras_evaluate(reference):
    """AUC and Precision are not per-example means: tfgpu reads Keras's own metric state."""
    x, y = reference["x"], reference["y"]
    expected = reference["model"].evaluate(x, y, batch_size=50, verbose=0, return_dict=True)
    assert expected["auc"] > 0.8
    for replicas in (1, 3):
        strategy = local_strategy(replicas)
        model = in_scope(strategy, binary_model)
        model.set_weights(reference["model"].get_weights())
        # 960 rows in batches of 51 (17 per replica): the last batch leaves replicas short
        got = tfgpu.evaluate(model, x, y, batch_size=51, verbose=0, return_dict=True)
        assert got == pytest.approx(expected, rel=1e-5)
        listed = tfgpu.evaluate(model, x, y, batch_size=51, verbose=0)  # Keras's default: a list in its order
        assert listed == pytest.approx(reference["model"].evaluate(x, y, batch_size=50, verbose=0), rel=1e-5)


@pytest.mark.heavy
def test_a_model_made_outside_the_scope_is_moved_into_it_and_trained_in_place(reference, clean_choices):
    """Issue 43: re-homed, not cloned: the user's model object trains on the replicas, and a
    subclassed model (which cloning could not re-create) trains too, as on one device."""
    from tfgpu import choices

    model = binary_model()  # no strategy's scope
    history = tfgpu.fit(model, reference["x"], reference["y"], strategy=local_strategy(2), **FIT)
    same(history.history, reference["history"])
    same(model.get_weights(), reference["model"].get_weights())
    assert model.history is history and "moved into" in choices.as_dict()["model"]["value"]
    assert tfgpu.evaluate(model, reference["x"], reference["y"], verbose=0) == pytest.approx(
        reference["model"].evaluate(reference["x"], reference["y"], verbose=0), rel=1e-5
    )
    other = in_scope(local_strategy(2), binary_model)
    with pytest.raises(ConfigError, match="created in the scope of a MirroredStrategy"):
        tfgpu.fit(other, reference["x"], reference["y"], strategy=local_strategy(1), **FIT)
    theirs = custom_step_model()
    theirs.fit(reference["x"], reference["y"], **FIT)
    subclassed = custom_step_model()  # its own train_step logs compute_loss's scaled value: weights
    tfgpu.fit(subclassed, reference["x"], reference["y"], strategy=local_strategy(2), **FIT)
    same(subclassed.get_weights(), theirs.get_weights())


@pytest.mark.heavy
def test_two_outputs_with_per_output_losses_weights_and_metrics():
    x, y = two_output_data()
    # validation rows a multiple of the batch: Keras's per-output loss figures are a mean of batch
    # means, which a short last batch splits differently over replicas (docs/from-model-fit.md)
    args = dict(
        batch_size=48,
        epochs=2,
        shuffle=False,
        verbose=0,
        validation_data=(x[:192], {k: v[:192] for k, v in y.items()}),
    )
    expected = two_output_model()
    keras_history = expected.fit(x, y, **args)
    model = in_scope(local_strategy(2), two_output_model)
    history = tfgpu.fit(model, x, y, **args)
    assert {"kind_accuracy", "size_mae", "val_kind_loss", "val_size_loss"} <= set(history.history)
    same(history.history, keras_history.history)
    same(model.get_weights(), expected.get_weights())


@pytest.mark.heavy
def test_class_weight_and_sample_weight_match_keras(reference):
    x, y = reference["x"], reference["y"]
    weights = {0: 1.0, 1: 3.0}
    expected = binary_model()
    keras_history = expected.fit(
        x, y, batch_size=48, epochs=2, shuffle=False, verbose=0, class_weight=weights
    )
    model = in_scope(local_strategy(2), binary_model)
    history = tfgpu.fit(model, x, y, batch_size=48, epochs=2, shuffle=False, verbose=0, class_weight=weights)
    same(history.history, keras_history.history)
    same(model.get_weights(), expected.get_weights())
    rows = np.linspace(0.5, 2.0, len(x)).astype("float32")
    expected = binary_model()
    keras_history = expected.fit(x, y, batch_size=48, epochs=1, shuffle=False, verbose=0, sample_weight=rows)
    model = in_scope(local_strategy(3), binary_model)
    history = tfgpu.fit(model, x, y, batch_size=48, epochs=1, shuffle=False, verbose=0, sample_weight=rows)
    same(history.history, keras_history.history)


@pytest.mark.heavy
def test_a_custom_train_step_is_honoured(reference):
    x, y = reference["x"][:768], reference["y"][:768]
    expected = custom_step_model()
    expected.fit(x, y, batch_size=48, epochs=2, shuffle=False, verbose=0)
    model = in_scope(local_strategy(2), custom_step_model)
    history = tfgpu.fit(model, x, y, batch_size=48, epochs=2, shuffle=False, verbose=0)
    same(model.get_weights(), expected.get_weights())
    # the step logs compute_loss's value, which Keras scales by 1/replicas under a strategy:
    # its own fit under the same MirroredStrategy logs the same figures
    mirrored = in_scope(local_strategy(2), custom_step_model)
    keras_history = mirrored.fit(x, y, batch_size=48, epochs=2, shuffle=False, verbose=0)
    same(history.history, keras_history.history)
    # the test_step override too (its loss x3): as Keras's evaluate on one device reports it
    # (Keras's under the strategy reads 1/2 of that loss: compute_loss's value scaled for the
    # replicas; evaluation sums no gradient, and tfgpu's scales nothing there: issue 57 item 5)
    single = custom_step_model()
    single.set_weights(mirrored.get_weights())
    expected = single.evaluate(x, y, batch_size=48, verbose=0, return_dict=True)
    assert tfgpu.evaluate(mirrored, x, y, batch_size=48, return_dict=True) == pytest.approx(
        expected, rel=1e-5
    )


@pytest.mark.heavy
def test_a_tf_data_dataset_of_global_batches(reference):
    x, y = reference["x"][:768], reference["y"][:768]
    expected = binary_model()
    keras_history = expected.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(48), epochs=2, verbose=0)
    for replicas in (1, 2):
        model = in_scope(local_strategy(replicas), binary_model)
        history = tfgpu.fit(model, tf.data.Dataset.from_tensor_slices((x, y)).batch(48), epochs=2, verbose=0)
        same(history.history, keras_history.history)
        same(model.get_weights(), expected.get_weights())
        assert history.train_result.global_batch == 48  # the dataset's batch (the Trainer's is 1)
    # an infinite dataset, then a finite one, on the same model and replicas: the compiled loop
    # traced for the first must still see the end of the second (TF's distributed iterator
    # drops its end-of-data check for infinite datasets; its type spec does not say so)
    model = in_scope(local_strategy(2), binary_model)
    endless = tf.data.Dataset.from_tensor_slices((x, y)).batch(48).repeat()
    tfgpu.fit(model, endless, epochs=1, steps_per_epoch=4, verbose=0)
    again = tfgpu.fit(model, tf.data.Dataset.from_tensor_slices((x, y)).batch(48), epochs=2, verbose=0)
    assert [result["steps"] for result in again.train_result.history] == [16, 16]


@pytest.mark.heavy
def test_warm_up_is_reported_apart_from_the_steady_state(reference):
    """Issue 25: the first call (tracing), each epoch's first fetch and the epoch that fills a
    cache are warm-up, reported on their own; the verdict and examples/s are the steady state's,
    or say that the run had none."""
    x, y = reference["x"][:768], reference["y"][:768]

    def batches():
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(48)  # 16 steps an epoch

    result = tfgpu.fit(binary_model(), batches().cache(), epochs=3, verbose=0).train_result
    (filled,) = result.warm_up.epochs
    assert filled.epoch == 1 and filled.why == "filled the cache" and filled.steps > 0
    assert result.warm_up.tracing_s > 0 and result.warm_up.first_fetches >= 1
    assert result.steady.epochs == (2, 3) and result.steady.steps == 32
    assert result.examples_per_s == pytest.approx(result.steady.examples_per_s, rel=1e-3)
    assert result.sentence().endswith("(steady state, epochs 2-3)")
    summary = result.to_dict()
    assert (
        summary["verdict"] == result.sentence() and "epoch 1 filled the cache" in summary["warm_up_summary"]
    )
    # one epoch, and it fills the cache: no steady state, and the verdict says so
    short = tfgpu.fit(binary_model(), batches().cache(), epochs=1, verbose=0).train_result
    assert short.steady is None and "no steady state" in short.sentence()
    # no cache: every epoch is steady state, past the first call (4 of epoch 1's 16 steps)
    plain = tfgpu.fit(binary_model(), batches(), epochs=2, verbose=0, steps_per_execution=4).train_result
    assert plain.warm_up.epochs == () and plain.steady.epochs == (1, 2)
    assert plain.steady.steps == 28


@pytest.mark.heavy
def test_batch_callbacks_once_per_execution_as_keras(reference):
    """At the same steps_per_execution, batch hooks see the same batches as under Keras's fit."""
    x, y = reference["x"][:768], reference["y"][:768]

    def recorder():
        seen = []
        return seen, keras.callbacks.LambdaCallback(
            on_train_batch_end=lambda batch, logs: seen.append((batch, sorted(logs))),
            on_epoch_end=lambda epoch, logs: seen.append(("epoch", epoch, sorted(logs))),
        )

    keras_seen, callback = recorder()
    binary_model(steps_per_execution=4).fit(
        x, y, batch_size=48, epochs=2, shuffle=False, verbose=0, callbacks=[callback]
    )
    seen, callback = recorder()
    model = in_scope(local_strategy(2), lambda: binary_model(steps_per_execution=4))
    tfgpu.fit(model, x, y, batch_size=48, epochs=2, shuffle=False, verbose=0, callbacks=[callback])
    assert seen == keras_seen
    assert [s[0] for s in seen[:5]] == [3, 7, 11, 15, "epoch"]


@pytest.mark.heavy
def test_early_stopping_reduce_lr_checkpoints_and_csv(reference, tmp_path):
    x, y = reference["x"], reference["y"]

    def callbacks(directory):
        return [
            keras.callbacks.EarlyStopping(monitor="loss", min_delta=10.0, patience=2),  # never improves by 10
            keras.callbacks.ReduceLROnPlateau(monitor="loss", min_delta=10.0, patience=1, factor=0.5),
            keras.callbacks.ModelCheckpoint(
                str(directory / "best.keras"), monitor="val_loss", save_best_only=True
            ),
            keras.callbacks.ModelCheckpoint(str(directory / "e{epoch}.weights.h5"), save_weights_only=True),
            keras.callbacks.CSVLogger(str(directory / "log.csv")),
        ]

    (tmp_path / "k").mkdir()
    expected = binary_model()
    keras_history = expected.fit(x, y, **{**FIT, "epochs": 6}, callbacks=callbacks(tmp_path / "k"))
    (tmp_path / "t").mkdir()
    model = in_scope(local_strategy(2), binary_model)
    board = keras.callbacks.TensorBoard(log_dir=str(tmp_path / "tb"))
    history = tfgpu.fit(model, x, y, **{**FIT, "epochs": 6}, callbacks=[*callbacks(tmp_path / "t"), board])
    assert list((tmp_path / "tb" / "train").glob("events.out.tfevents.*"))
    assert list((tmp_path / "tb" / "validation").glob("events.out.tfevents.*"))
    assert history.epoch == keras_history.epoch == [0, 1, 2]  # stopped early, at the same epoch
    assert history.history["learning_rate"] == pytest.approx(keras_history.history["learning_rate"])
    assert history.history["learning_rate"][-1] < 0.01  # reduced on the plateau
    same(model.get_weights(), expected.get_weights())
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == sorted(
        p.name for p in (tmp_path / "k").iterdir()
    )
    with (tmp_path / "t" / "log.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2] and "val_auc" in rows[0]
    best = keras.models.load_model(tmp_path / "t" / "best.keras")
    assert best.evaluate(x, y, verbose=0, return_dict=True)["loss"] == pytest.approx(
        min(history.history["val_loss"]), rel=0.5
    )


@pytest.mark.heavy
def test_terminate_on_nan_stops_as_in_keras(reference):
    x, y = reference["x"][:768].copy(), reference["y"][:768]
    x[100] = np.nan
    model = in_scope(local_strategy(2), binary_model)
    history = tfgpu.fit(
        model,
        x,
        y,
        batch_size=48,
        epochs=3,
        shuffle=False,
        verbose=0,
        callbacks=[keras.callbacks.TerminateOnNaN()],
    )
    assert history.epoch == [0]  # stopped within the first epoch
    # the step whose loss Keras first logs as NaN (a NaN input row need not make its own step's
    # loss NaN: some CPU kernels map it away, and the NaN gradient shows one step later)
    losses = []
    binary_model().fit(
        x,
        y,
        batch_size=48,
        epochs=1,
        shuffle=False,
        verbose=0,
        callbacks=[
            keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: losses.append(logs["loss"]))
        ],
    )
    step = 1 + next(i for i, loss in enumerate(losses) if not np.isfinite(loss))
    with pytest.raises(tfgpu.TfgpuError, match=f"non-finite at step {step} "):
        tfgpu.fit(
            in_scope(local_strategy(2), binary_model),
            x,
            y,
            batch_size=48,
            epochs=1,
            shuffle=False,
            verbose=0,
            steps_per_execution=2,
            log_every=4,
        )


@pytest.mark.heavy
def test_mixed_float16_trains_with_loss_scaling(reference, clean_choices):
    from tfgpu import choices

    keras.mixed_precision.set_dtype_policy("mixed_float16")
    try:
        model = in_scope(local_strategy(2), binary_model)
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
        history = tfgpu.fit(model, reference["x"], reference["y"], **FIT)
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    assert (
        all(np.isfinite(history.history["loss"])) and history.history["loss"][1] < history.history["loss"][0]
    )
    assert choices.as_dict()["loss_scaling"]["value"] == "dynamic"


@pytest.mark.model
def test_bad_arguments_are_one_message(reference):
    x, y = reference["x"], reference["y"]
    model = in_scope(local_strategy(2), binary_model)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(48)
    cases = [
        (
            keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)]),
            dict(x=x, y=y),
            "needs a compiled model",
        ),
        (model, dict(x=dataset, validation_split=0.2), "validation_split needs arrays in memory"),
        (model, dict(x=x, y=y, batch_size=47), "split evenly over the 2 replicas"),
        (model, dict(x=x, y=y[:100]), "different numbers of rows"),
        (model, dict(x=x, y=y, epochs=-1), "epochs must be a whole number"),
        (
            model,
            dict(x=x, y=y, checkpoint_dir="a", callbacks=[keras.callbacks.BackupAndRestore("b")]),
            "checkpoint_dir and a BackupAndRestore callback are both set",
        ),
        (model, dict(x=x, y=np.zeros((len(x), 3, 2), "float32")), "cannot take the data"),
    ]
    for chosen, kwargs, message in cases:
        with pytest.raises(ConfigError, match=message):
            tfgpu.fit(chosen, **{"verbose": 0, **kwargs})
    two = in_scope(local_strategy(2), two_output_model)
    x2, y2 = two_output_data()
    with pytest.raises(ConfigError, match="class_weight needs a model with one output"):
        tfgpu.fit(two, x2, y2, class_weight={0: 1.0, 1: 2.0}, verbose=0)


@pytest.mark.slow
def test_two_workers_match_keras_on_one_device(reference, tmp_path):
    """MultiWorkerMirroredStrategy, where Keras 3's own fit fails (keras-team/keras#20585)."""
    from tfgpu.testing import run_cluster

    x, y = reference["x"], reference["y"]
    expected_eval = reference["model"].evaluate(x, y, batch_size=50, verbose=0, return_dict=True)
    from_dataset = binary_model()
    from_dataset.fit(tf.data.Dataset.from_tensor_slices((x[:768], y[:768])).batch(48), epochs=2, verbose=0)
    results = run_cluster("bodies:fit_on_workers", workers=2, args=(str(tmp_path),), timeout=300)
    for name, result in results.items():
        same(result["weights"], reference["model"].get_weights())
        same(result["history"], reference["history"])
        assert result["eval"] == pytest.approx(expected_eval, rel=1e-5)
        same(result["dataset_weights"], from_dataset.get_weights())
        # file-writing callbacks: the chief (worker 0) only
        assert result["files"] == (["log.csv", "m.keras"] if name == "worker:0" else []), name


@pytest.mark.slow
def test_a_script_as_written_trains_on_two_workers_as_on_one_device():
    """keras-io's scripts build their data and model before fit. Under ``tfgpu launch`` that
    failed: "Collective ops must be configured at program startup" (MultiWorkerMirroredStrategy
    is made at tfgpu.fit, after TensorFlow's first op); ``import tfgpu`` now sets the worker up.
    The dataset's last batch (5 rows) is short, split 3 and 2 over the workers."""
    from tfgpu.testing import run_cluster

    x, y = binary_data(101)
    expected = binary_model()
    history = expected.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(24), epochs=2, verbose=0)
    results = run_cluster("bodies:fit_as_written_on_workers", workers=2, timeout=300)
    for result in results.values():
        assert result["multi_worker"] and result["replicas"] == 2 and result["one_device_after"]
        same(result["weights"], expected.get_weights())
        same(result["history"], history.history)


def test_the_worker_is_set_up_only_for_a_multi_worker_strategy_before_tensorflow_starts(monkeypatch):
    """``prepare_multi_worker`` (run by ``import tfgpu``) touches nothing without a cluster it
    trains on with MultiWorkerMirroredStrategy, nor once TensorFlow has run an op (as here); a
    strategy made too late says what to do. TensorFlow still has what it calls."""
    from tensorflow.core.protobuf import tensorflow_server_pb2  # noqa: F401
    from tensorflow.python.distribute import collective_all_reduce_strategy, multi_worker_util
    from tensorflow.python.eager import context

    from tfgpu import distribute

    for name in ("configure_collective_ops", "configure_coordination_service", "enable_collective_ops"):
        assert callable(getattr(context.context(), name)), name
    assert hasattr(context.context(), "_context_handle")
    assert hasattr(collective_all_reduce_strategy.coordination_config_pb2, "CoordinatedJob")
    assert callable(multi_worker_util.collective_leader) and callable(multi_worker_util.coordination_leader)
    two = {"worker": ["localhost:1", "localhost:2"]}

    def config(task: str, cluster: dict | None = None) -> dict[str, str]:
        return {"TF_CONFIG": json.dumps({"cluster": cluster or two, "task": {"type": task, "index": 0}})}

    def reached(*args, **kwargs):
        raise AssertionError("the context was set up")

    monkeypatch.setattr(distribute, "_configure_task", reached)
    assert not distribute.prepare_multi_worker({})
    assert not distribute.prepare_multi_worker({"TF_CONFIG": "{not json"})
    assert not distribute.prepare_multi_worker(
        config("ps", {**two, "ps": ["localhost:3"], "chief": ["localhost:4"]})
    )
    assert not distribute.prepare_multi_worker({**config("worker"), "TFGPU_STRATEGY": "one-device"})
    tf.constant(1.0)  # TensorFlow has run an op in this process
    assert not distribute.prepare_multi_worker(config("worker"))
    monkeypatch.setenv("TF_CONFIG", config("worker")["TF_CONFIG"])
    with pytest.raises(ConfigError, match="before TensorFlow's first op") as info:
        distribute.strategy("multi-worker")
    assert "import tfgpu" in str(info.value)


def test_the_worker_s_second_server_start_is_skipped_and_no_other():
    """``_configure_task`` on a recording context: the settings MultiWorkerMirroredStrategy will
    ask for (equal, so its own call returns), and once the context has started, the strategy's
    second start of the same task's server skipped while another cluster's goes through."""
    from tensorflow.python.training import server_lib

    from tfgpu import cluster, distribute

    class Context:
        _context_handle = None
        config = tf.compat.v1.ConfigProto()

        def __init__(self):
            self.calls = []

        def configure_collective_ops(self, **kwargs):
            self.calls.append(("collective", kwargs))

        def configure_coordination_service(self, **kwargs):
            self.calls.append(("coordination", kwargs))

        def enable_collective_ops(self, server_def):
            self.calls.append(("enable", server_def.job_name, server_def.task_index))

    two = {"chief": ["localhost:1"], "worker": ["localhost:2"]}
    spec = cluster.build_cluster(hosts=two, task_type="worker", task_index=0)
    context = Context()
    distribute._configure_task(context, spec, rpc_layer="grpc")
    (_, collective), (_, coordination), enabled = context.calls
    assert collective == {
        "collective_leader": "/job:chief/replica:0/task:0",
        "scoped_allocator_enabled_ops": ("CollectiveReduce",),
        "device_filters": ("/job:worker/task:0",),
    }
    assert (
        coordination["service_type"] == "standalone"
        and coordination["service_leader"] == "/job:chief/replica:0/task:0"
    )
    assert [(j.name, j.num_tasks) for j in coordination["coordinated_jobs"]] == [("chief", 1), ("worker", 1)]
    assert enabled == ("enable", "worker", 0)
    from tensorflow.core.protobuf import tensorflow_server_pb2

    same = tensorflow_server_pb2.ServerDef(
        cluster=server_lib.ClusterSpec(two).as_cluster_def(), job_name="worker", task_index=0
    )
    other = tensorflow_server_pb2.ServerDef(
        cluster=server_lib.ClusterSpec({"worker": ["h:9"]}).as_cluster_def(), job_name="worker", task_index=0
    )
    context._context_handle = object()  # the context has started
    context.enable_collective_ops(same)
    context.enable_collective_ops(other)
    assert context.calls[3:] == [("enable", "worker", 0)]  # only the other cluster's


@pytest.mark.slow
def test_parameter_servers_count_every_step():
    from tfgpu.testing import run_cluster

    result = run_cluster("bodies:fit_with_parameter_servers", workers=2, chief=True, ps=1, timeout=300)[
        "chief:0"
    ]
    assert result["epochs"] == [0, 1, 2]
    assert result["iterations"] == 60  # 10 executions of 2 steps side by side on 2 workers, none lost
    assert result["loss_count"] == 20 * 24  # the last epoch's rows, each counted once
    assert result["history"]["loss"][-1] < result["history"]["loss"][0]


@pytest.mark.model
def test_predict_in_memory_keeps_the_input_order(reference):
    import tfgpu.diagnose.advice
    import tfgpu.predict.writers  # binds the subpackages as tfgpu.predict / tfgpu.diagnose

    assert callable(tfgpu.predict) and callable(tfgpu.diagnose)  # whatever was imported first
    x = reference["x"][:203]  # not a multiple of the batch: the last batch is filled and cut
    expected = reference["model"].predict(x, batch_size=32, verbose=0)
    for replicas in (1, 3):
        model = in_scope(local_strategy(replicas), binary_model)
        model.set_weights(reference["model"].get_weights())
        got = tfgpu.predict(model, x, batch_size=32, steps_per_execution=2)
        assert got.shape == expected.shape == (203, 1)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    x2, _ = two_output_data(rows=50)
    two = in_scope(local_strategy(2), two_output_model)
    got = tfgpu.predict(two, x2, batch_size=16)
    want = two.predict(x2, batch_size=16, verbose=0)
    assert set(got) == {"kind", "size"} and got["kind"].shape == (50, 3)
    for key in got:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6)


@pytest.mark.model
def test_predict_traces_once_and_rewrites_no_graph_of_the_arrays(reference):
    """Issue 46: a second tfgpu.predict reuses the first one's trace (Keras keeps its
    predict_function), and the arrays' dataset is left out of tf.data's graph rewrites, which
    copy the captured arrays into a GraphDef each time an iterator is made (0.85 s of each call
    on 627 MB)."""
    from tfgpu.train.inputs import adapters
    from tfgpu.train.pieces import model_cache

    model = in_scope(local_strategy(2), binary_model)
    first = tfgpu.predict(model, reference["x"][:100], batch_size=32)
    second = tfgpu.predict(model, reference["x"][100:190], batch_size=32)
    assert first.shape == (100, 1) and second.shape == (90, 1)
    (call,) = [f for key, f in model_cache.functions(model).items() if key[0] == "predict"]
    assert call.experimental_get_tracing_count() == 1
    options = adapters.filled_batches(reference["x"][:64], rows=64, global_batch=32).options()
    assert options.experimental_optimization.apply_default_optimizations is False

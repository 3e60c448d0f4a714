"""Several processes: MultiWorkerMirroredStrategy and parameter servers, in process with a cluster
resolver and under ``tfgpu launch``, each worker ending with Keras's one-device weights and
history (TensorFlow's multi-worker and parameter-server tutorials, files read by tf.data, the
wider examples).

Each test is an example of ``support.examples`` (its marker: its source, what it exercises),
run with Keras's methods and tfgpu's and compared under ``support/parity.py``'s rules.
"""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import wider_examples
from fit_models import (
    binary_data,
    binary_model,
    grad_norm_model,
)
from support.parity import KERAS, in_scope, same
from support.replicas import local_strategy
from tutorials import ps_tutorial_trained_as_keras, tutorial


@pytest.mark.exercises(
    "strategy:launch",
    "strategy:multi_worker",
    "inputs:files",
    "inputs:dataset",
    "inputs:short_batch",
    "model:sequential",
    "loss:string",
    source="tfgpu (issue 57 item 8; keras-io NER file reading)",
)
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


@pytest.mark.exercises(
    "strategy:launch",
    "strategy:multi_worker",
    "inputs:text",
    "inputs:files",
    "inputs:dataset",
    "inputs:short_batch",
    "loss:subclass",
    "loss:own_count",
    "loss:string",
    "model:functional",
    "model:preprocessing",
    source="keras-io ner_transformers",
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


@pytest.mark.exercises(
    "strategy:parameter_server",
    "inputs:dataset",
    "inputs:arrays",
    "model:sequential",
    "model:in_scope",
    "loss:string",
    "metric:builtin",
    source="TensorFlow parameter-server tutorial (in-process servers)",
)
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


@pytest.mark.exercises(
    "strategy:multi_worker",
    "callbacks:checkpoint",
    "step:train_step",
    "model:subclassed",
    "model:sequential",
    "model:in_scope",
    "inputs:dataset",
    "loss:string",
    "metric:builtin",
    source="TensorFlow multi-worker tutorial's pattern",
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


@pytest.mark.exercises(
    "strategy:launch",
    "strategy:multi_worker",
    "callbacks:backup",
    "inputs:dataset",
    "model:sequential",
    "model:in_scope",
    "loss:object",
    "metric:builtin",
    source="tensorflow/docs multi-worker tutorial (examples/tutorials/multi_worker.py)",
)
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


@pytest.mark.exercises(
    "strategy:launch",
    "strategy:parameter_server",
    "callbacks:builtin",
    "callbacks:checkpoint",
    "callbacks:backup",
    "inputs:dataset",
    "model:sequential",
    "model:in_scope",
    "loss:string",
    source="tensorflow/docs parameter-server tutorial, Model.fit section (examples/tutorials/parameter_server.py)",
)
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


@pytest.mark.heavy
@pytest.mark.exercises(
    "strategy:launch",
    "strategy:multi_worker",
    "model:functional",
    "model:sequential",
    "model:subclassed",
    "model:unbuilt",
    "model:preprocessing",
    "model:outside_scope",
    "inputs:arrays",
    "inputs:dataset",
    "inputs:text",
    "inputs:multi",
    "inputs:short_batch",
    "loss:string",
    "loss:object",
    "metric:builtin",
    source="keras-io examples/nlp/lstm_seq2seq.py, examples/nlp/multi_label_classification.py, examples/generative/lstm_character_level_text_generation.py, guides/preprocessing_layers.py; tensorflow/docs tutorials/generative/autoencoder",
)
@pytest.mark.slow
@pytest.mark.process
def test_the_examples_under_tfgpu_launch_on_two_workers_train_as_keras_on_one_device(tmp_path):
    """Both workers run the five examples as written (tfgpu's methods, no strategy passed:
    tfgpu takes TF_CONFIG's) and each ends with Keras's one-device figures."""
    from support.processes import run_cli

    script = Path(__file__).parent / "scripts" / "wider_examples.py"
    done = run_cli("launch", "--nproc", "2", "--", sys.executable, str(script), str(tmp_path), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    for worker in ("worker-0", "worker-1"):
        strategy = json.loads((tmp_path / f"{worker}-strategy.json").read_text())
        assert "MultiWorkerMirrored" in strategy["value"] and "x2" in strategy["value"], strategy
    for name, example in wider_examples.EXAMPLES.items():
        expected = example(KERAS)
        for worker in ("worker-0", "worker-1"):
            with open(tmp_path / f"{worker}-{name}.pkl", "rb") as handle:
                same(pickle.load(handle), expected)

"""tfgpu predict: outputs equal a plain single-device loop, row for row, in input order."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import keras
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

import tfgpu
from support.processes import run_cli
from tfgpu import data
from tfgpu.errors import ConfigError, InputError
from tfgpu.predict import PredictOptions, predict, read_output
from tfgpu.testing import run_cluster

RNG = np.random.default_rng(0)
X = RNG.normal(size=(1001, 8)).astype("float32")


def strategy(replicas: int):
    if replicas == 1:
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    devices = [f"/cpu:{i}" for i in range(replicas)]
    return tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())


def loop(model, x, batch: int = 64) -> np.ndarray:
    """The reference: a plain single-device loop, batch by batch, in order."""
    return np.concatenate([model(x[i : i + batch], training=False).numpy() for i in range(0, len(x), batch)])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("predict")
    keras.utils.set_random_seed(3)
    model = keras.Sequential(
        [
            keras.Input((8,), name="x"),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )
    model.save(root / "m.keras")
    np.save(root / "x.npy", X)
    np.savez(root / "d.npz", x=X, y=RNG.integers(0, 3, len(X)))
    data.convert(root / "d.npz", root / "ds", options=data.ConvertOptions(label="y", min_shards=6, workers=1))

    class Exported(tf.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def serve(self, examples):
            parsed = tf.io.parse_example(examples, {"x": tf.io.FixedLenFeature([8], tf.float32)})
            return {"probabilities": self.inner(parsed["x"])}

        @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
        def tensors(self, x):
            return {"probabilities": self.inner(x)}

    module = Exported(model)
    tf.saved_model.save(
        module,
        str(root / "estimator_like"),
        signatures={"serving_default": module.serve, "tensors": module.tensors},
    )
    return {"root": root, "model": model, "reference": loop(model, X)}


def run(files, source, out, replicas=2, **kw):
    options = PredictOptions(
        batch_size=kw.pop("batch_size", 64), rows_per_shard=kw.pop("rows_per_shard", 300), **kw
    )
    model = kw.pop("model", None) or str(files["root"] / "m.keras")
    return predict(model, str(source), str(out), options=options, strategy=strategy(replicas))


def only_output(result: dict) -> np.ndarray:
    return next(v for k, v in result.items() if k != "row_id")


@pytest.mark.model
@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_replicas_equal_the_single_device_loop(files, tmp_path, replicas):
    result = run(files, files["root"] / "x.npy", tmp_path / "o", replicas)
    assert result.predicted_rows == 1001 and result.replicas == replicas and result.shards == 4
    out = read_output(tmp_path / "o")
    assert np.array_equal(out["row_id"], np.arange(1001))
    np.testing.assert_allclose(only_output(out), files["reference"], rtol=1e-5, atol=1e-6)


@pytest.mark.model
@pytest.mark.parametrize(("replicas", "per_call"), [(1, 1), (1, 5), (2, 3)])
def test_several_batches_per_call_keep_every_row(files, tmp_path, replicas, per_call, clean_choices):
    """16 batches of 64 (the last padded) taken 1, 3 or 5 per compiled call: the same rows."""
    from tfgpu import choices

    result = run(files, files["root"] / "x.npy", tmp_path / "o", replicas, steps_per_execution=per_call)
    assert result.predicted_rows == 1001
    assert choices.as_dict()["predict.steps_per_execution"] == {"value": str(per_call), "reason": "asked for"}
    out = read_output(tmp_path / "o")
    assert np.array_equal(out["row_id"], np.arange(1001))
    np.testing.assert_allclose(only_output(out), files["reference"], rtol=1e-5, atol=1e-6)


@pytest.mark.model
def test_any_order_reads_from_a_dataset_keep_input_order(files, tmp_path):
    run(files, files["root"] / "ds", tmp_path / "o", 3, deterministic=False)
    out = read_output(tmp_path / "o")
    assert np.array_equal(out["row_id"], np.arange(1001))
    np.testing.assert_allclose(only_output(out), files["reference"], rtol=1e-5, atol=1e-6)


@pytest.mark.model
@pytest.mark.parametrize("fmt", ["npy", "tfrecord"])
def test_other_output_formats(files, tmp_path, fmt):
    run(files, files["root"] / "x.npy", tmp_path / "o", 2, fmt=fmt)
    out = read_output(tmp_path / "o")
    assert np.array_equal(out["row_id"], np.arange(1001))
    np.testing.assert_allclose(only_output(out).reshape(1001, 3), files["reference"], rtol=1e-5, atol=1e-6)


@pytest.mark.heavy
def test_estimator_style_signature_takes_serialized_examples(files, tmp_path):
    saved = str(files["root"] / "estimator_like")
    for source in (files["root"] / "ds", files["root"] / "x.npy"):
        out = tmp_path / source.stem
        predict(
            saved,
            str(source),
            str(out),
            options=PredictOptions(batch_size=50, rows_per_shard=400),
            strategy=strategy(2),
        )
        result = read_output(out)
        assert np.array_equal(result["row_id"], np.arange(1001))
        np.testing.assert_allclose(result["probabilities"], files["reference"], rtol=1e-5, atol=1e-6)
    predict(
        saved,
        str(files["root"] / "x.npy"),
        str(tmp_path / "t"),
        options=PredictOptions(signature="tensors"),
        strategy=strategy(3),
    )
    np.testing.assert_allclose(
        read_output(tmp_path / "t")["probabilities"], files["reference"], rtol=1e-5, atol=1e-6
    )


@pytest.mark.model
def test_named_inputs_from_parquet_and_csv(tmp_path):
    inputs = {n: keras.Input((), name=n) for n in "abc"}
    stacked = keras.layers.Concatenate()([keras.layers.Reshape((1,))(v) for v in inputs.values()])
    model = keras.Model(inputs=list(inputs.values()), outputs=keras.layers.Dense(2)(stacked))
    model.save(tmp_path / "abc.keras")
    table = {n: RNG.normal(size=257).astype("float32") for n in "abc"}
    pq.write_table(pa.table(table), tmp_path / "t.parquet")
    import pyarrow.csv as pcsv

    pcsv.write_csv(pa.table({n: v.astype("float64") for n, v in table.items()}), tmp_path / "t.csv")
    reference = np.concatenate(
        [model([table[n][i : i + 32] for n in "abc"], training=False).numpy() for i in range(0, 257, 32)]
    )
    for source in ("t.parquet", "t.csv"):
        predict(
            str(tmp_path / "abc.keras"),
            str(tmp_path / source),
            str(tmp_path / source.replace(".", "_")),
            options=PredictOptions(batch_size=32),
            strategy=strategy(2),
        )
        out = read_output(tmp_path / source.replace(".", "_"))
        assert np.array_equal(out["row_id"], np.arange(257))
        np.testing.assert_allclose(only_output(out), reference, rtol=1e-5, atol=1e-5)


@pytest.mark.model
def test_bucketing_variable_length_rows(tmp_path):
    keras.utils.set_random_seed(5)
    tokens = keras.Input((None,), dtype="int64", name="tokens")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50, 4, mask_zero=True)(tokens))
    model = keras.Model(tokens, keras.layers.Dense(2)(pooled))
    model.save(tmp_path / "seq.keras")
    rows = [RNG.integers(1, 50, RNG.integers(1, 40)).tolist() for _ in range(301)]
    pq.write_table(pa.table({"tokens": pa.array(rows, pa.list_(pa.int64()))}), tmp_path / "seq.parquet")
    reference = np.concatenate([model(np.array([r]), training=False).numpy() for r in rows])
    predict(
        str(tmp_path / "seq.keras"),
        str(tmp_path / "seq.parquet"),
        str(tmp_path / "o"),
        options=PredictOptions(batch_size=16, bucket_by="tokens", buckets=4),
        strategy=strategy(2),
    )
    out = read_output(tmp_path / "o")
    assert np.array_equal(out["row_id"], np.arange(301))
    np.testing.assert_allclose(only_output(out), reference, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_two_workers_split_the_input_and_the_chief_writes_the_manifest(files, tmp_path):
    out = tmp_path / "o"
    results = run_cluster(
        "bodies:predict_as_worker",
        workers=2,
        args=(str(files["root"] / "m.keras"), str(files["root"] / "ds"), str(out)),
        timeout=300,
    )
    assert sorted(r["rows"] for r in results.values()) == [500, 501]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["workers"] == 2 and manifest["total_rows"] == 1001
    result = read_output(out)
    assert np.array_equal(result["row_id"], np.arange(1001))
    np.testing.assert_allclose(only_output(result), files["reference"], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_killed_run_resumes_with_every_row_once(files, tmp_path):
    big = np.tile(X, (60, 1))
    np.save(tmp_path / "x.npy", big)
    command = [
        sys.executable,
        "-m",
        "tfgpu.cli",
        "predict",
        str(files["root"] / "m.keras"),
        str(tmp_path / "x.npy"),
        str(tmp_path / "o"),
        "--batch-size",
        "32",
        "--rows-per-shard",
        "2000",
        "--json",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFGPU_")}
    # killed right after the program says it wrote its 2nd shard (verbose, it logs each one)
    proc = subprocess.Popen(
        command,
        env={**env, "TFGPU_VERBOSE": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    announced = 0
    for line in proc.stderr:  # ends only if the process does: then the assertion below says so
        announced += "wrote shard part-" in line
        if announced == 2:
            break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert announced == 2, "the prediction ended before announcing 2 shards"
    written = len(list((tmp_path / "o").glob("part-*.parquet")))
    assert 2 <= written < 31 and not (tmp_path / "o" / "manifest.json").exists()
    done = run_cli(*command[3:])
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["resumed_from_row"] >= 4000
    out = read_output(tmp_path / "o")
    assert np.array_equal(out["row_id"], np.arange(len(big)))
    np.testing.assert_allclose(only_output(out), np.tile(files["reference"], (60, 1)), rtol=1e-5, atol=1e-6)
    assert not list((tmp_path / "o").glob("*.tmp-*"))


@pytest.mark.model
def test_bad_inputs(files, tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "empty").mkdir()
    x = str(files["root"] / "x.npy")
    cases = [
        (str(tmp_path / "notes.txt"), x, {}, "not a model tfgpu can load"),
        (str(tmp_path / "empty"), x, {}, "not a SavedModel"),
        (str(files["root"] / "estimator_like"), x, {"signature": "predict"}, "no signature 'predict'"),
        (str(files["root"] / "m.keras"), str(tmp_path / "notes.txt"), {}, "cannot read notes.txt"),
    ]
    for model, source, extra, needle in cases:
        with pytest.raises(InputError, match=needle) as info:
            predict(model, source, str(tmp_path / "o"), options=PredictOptions(**extra), strategy=strategy(1))
        assert "Fix:" in info.value.message
    with pytest.raises(InputError) as info:
        predict(
            str(files["root"] / "estimator_like"),
            x,
            str(tmp_path / "o"),
            options=PredictOptions(signature="nope"),
            strategy=strategy(1),
        )
    assert "serving_default, tensors" in str(info.value)
    pq.write_table(pa.table({"q": ["a", "b"], "r": [1.0, 2.0]}), tmp_path / "s.parquet")
    pq.write_table(pa.table({"x": ["a", "b"]}), tmp_path / "x.parquet")
    np.save(tmp_path / "w.npy", np.zeros((4, 5), "float32"))
    for source, needle in (
        ("s.parquet", r"inputs \['x'\] are not columns"),
        ("x.parquet", "holds string but model input 'x' takes float32"),
        ("w.npy", r"shape \(5,\) per row but model input 'x' takes \(8,\)"),
    ):
        with pytest.raises(InputError, match=needle):
            predict(
                str(files["root"] / "m.keras"),
                str(tmp_path / source),
                str(tmp_path / "o2"),
                strategy=strategy(1),
            )


@pytest.mark.process
def test_cli_bad_model_exits_2(tmp_path):
    (tmp_path / "m.keras").write_text("not a zip")
    np.save(tmp_path / "x.npy", X)
    done = run_cli("predict", str(tmp_path / "m.keras"), str(tmp_path / "x.npy"), str(tmp_path / "o"))
    assert done.returncode == 2 and "Traceback" not in done.stderr and "not a Keras model file" in done.stderr
    assert "a .keras file is a zip archive, and this one is not" in done.stderr
    assert "File not found" not in done.stderr
    (tmp_path / "taken").write_text("keep me")
    done = run_cli("predict", str(tmp_path / "m.keras"), str(tmp_path / "x.npy"), str(tmp_path / "taken"))
    assert done.returncode == 2 and "Traceback" not in done.stderr and "is a file" in done.stderr
    assert (tmp_path / "taken").read_text() == "keep me"


def test_npy_rows_read_by_tensorflow_equal_numpy_slices(tmp_path):
    """The fixed-length-record reader of .npy files, for any row range and batch, and the fallback."""
    from tfgpu.predict.inputs import ArrayInput

    data = np.arange(103 * 6, dtype=np.float32).reshape(103, 2, 3)
    np.save(tmp_path / "c.npy", data)
    np.save(tmp_path / "f.npy", np.asfortranarray(data))
    np.save(tmp_path / "b.npy", data.astype(">f4"))
    for name in ("c", "f", "b"):
        source = ArrayInput(tmp_path / f"{name}.npy")
        assert source._fixed_length() == (name == "c")
        for start, stop, batch in ((0, 103, 16), (5, 98, 10), (40, 41, 8), (0, 103, 103), (7, 103, None)):
            parts = list(source.dataset(start, stop, examples=False, deterministic=True, batch=batch))
            ids = np.concatenate([np.atleast_1d(i.numpy()) for i, _ in parts])
            rows = np.concatenate([np.reshape(f[name].numpy(), (-1, 2, 3)) for _, f in parts])
            np.testing.assert_array_equal(ids, np.arange(start, stop))
            np.testing.assert_array_equal(rows, data[start:stop])
            if batch:
                assert [len(i) for i, _ in parts][:-1] == [batch] * (len(parts) - 1)


@pytest.mark.model
def test_one_replica_off_the_host_reads_through_the_distributed_iterator(files, tmp_path, monkeypatch):
    from tfgpu import distribute

    monkeypatch.setattr(distribute, "on_host_cpu", lambda devices: False)
    run(files, files["root"] / "x.npy", tmp_path / "o", 1, steps_per_execution=4)
    out = read_output(tmp_path / "o")
    assert np.array_equal(out["row_id"], np.arange(1001))
    np.testing.assert_allclose(only_output(out), files["reference"], rtol=1e-5, atol=1e-6)


@pytest.mark.process
def test_a_rerun_with_another_input_or_model_is_refused_until_overwrite(files, tmp_path):
    """Issue 18: a re-run resumes only the run that made OUTPUT; nothing is lost unless --overwrite."""
    out = tmp_path / "o"
    other = tmp_path / "b.npy"
    np.save(other, X[::-1].copy())
    run(files, files["root"] / "x.npy", out, 1, rows_per_shard=200)
    for shard in sorted(out.glob("part-*"))[3:]:  # as if killed after 3 shards
        shard.unlink()
    (out / "manifest.json").unlink()
    kept = sorted(p.name for p in out.glob("part-*"))
    with pytest.raises(
        InputError,
        match=r"holds predictions of another run: the input changed since.*input\.listing_sha256",
    ):
        run(files, other, out, 1, rows_per_shard=200)
    with pytest.raises(
        InputError, match=r"the options changed since.*'options.rows_per_shard': \{'then': 200, 'now': 300\}"
    ):
        run(files, files["root"] / "x.npy", out, 1, rows_per_shard=300)
    files["model"].save(tmp_path / "same-weights-other-file.keras")
    with pytest.raises(InputError, match="the model changed since"):
        predict(
            str(tmp_path / "same-weights-other-file.keras"),
            str(files["root"] / "x.npy"),
            str(out),
            options=PredictOptions(batch_size=64, rows_per_shard=200),
            strategy=strategy(1),
        )
    assert sorted(p.name for p in out.glob("part-*")) == kept
    resumed = run(files, files["root"] / "x.npy", out, 1, rows_per_shard=200)  # the same run resumes
    assert resumed.resumed_from_row == 600 and resumed.predicted_rows == 401
    args = ("predict", str(files["root"] / "m.keras"), str(other), str(out), "--batch-size", "64")
    done = run_cli(*args, "--rows-per-shard", "200")
    assert done.returncode == 2 and "--overwrite" in done.stderr and "Traceback" not in done.stderr
    done = run_cli(*args, "--rows-per-shard", "200", "--overwrite")
    assert done.returncode == 0, done.stderr[-2000:]
    result = read_output(out)
    assert np.array_equal(result["row_id"], np.arange(1001))
    np.testing.assert_allclose(only_output(result), files["reference"][::-1], rtol=1e-5, atol=1e-6)


@pytest.mark.model
def test_a_keras_file_split_over_devices_predicts_as_one_device(files, tmp_path, clean_choices):
    """--devices-per-replica 3: the model's two layers on two of this process's 3 logical CPUs,
    the rows in order, the outputs the one-device loop's."""
    result = predict(
        str(files["root"] / "m.keras"),
        str(files["root"] / "x.npy"),
        str(tmp_path / "o"),
        options=PredictOptions(batch_size=64, rows_per_shard=300, devices_per_replica=3),
    )
    assert result.predicted_rows == 1001 and result.replicas == 1
    out = read_output(tmp_path / "o")
    assert np.array_equal(out["row_id"], np.arange(1001))
    np.testing.assert_allclose(only_output(out), files["reference"], rtol=1e-5, atol=1e-6)
    assert "devices_per_replica" in tfgpu.choices.as_dict()
    with pytest.raises(ConfigError, match=r"needs a \.keras file"):
        predict(
            str(files["root"] / "estimator_like"),
            str(files["root"] / "x.npy"),
            str(tmp_path / "p"),
            options=PredictOptions(devices_per_replica=3),
        )


@pytest.mark.process
def test_predict_and_evaluate_of_a_model_from_no_scope_use_every_device_before_and_after_a_fit():
    """Issue 67: on 2 logical CPUs, ``tfgpu.predict`` of a model made outside any scope ran under
    TensorFlow's default strategy (one replica) until a ``tfgpu.fit`` moved the model; now it and
    ``tfgpu.evaluate`` run on both replicas before and after a fit, with Keras's predictions and
    figures on one device."""
    from tfgpu.testing import run_on_logical_cpus

    found = run_on_logical_cpus("bodies:predict_and_evaluate_from_no_scope", 2, timeout=300)
    for when in ("before", "after"):
        assert found[f"predict_{when}_replicas"] == 2 and found[f"evaluate_{when}_replicas"] == 2
        np.testing.assert_allclose(
            found[f"predict_{when}"], found[f"keras_predict_{when}"], rtol=1e-5, atol=1e-6
        )
        np.testing.assert_allclose(
            found[f"evaluate_{when}"], found[f"keras_evaluate_{when}"], rtol=1e-5, atol=1e-6
        )

"""tfgpu convert and tfgpu.data.pipeline: exact round trips, sharding, bad input, resume."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from PIL import Image

from support.processes import cli_environ, run_cli
from tfgpu import data
from tfgpu.data.convert import ConvertOptions, plan_shards
from tfgpu.errors import ConfigError, InputError, from_graph_assertion
from tfgpu.testing import run_cluster

RNG = np.random.default_rng(0)


def opts(**kw) -> ConvertOptions:
    return ConvertOptions(workers=kw.pop("workers", 1), min_shards=kw.pop("min_shards", 4), **kw)


def read_all(dataset, *, batch_size: int = 64, **kw) -> dict[str, np.ndarray]:
    parts: dict[str, list] = {}
    for batch in data.pipeline(dataset, batch_size=batch_size, with_ids=True, **kw):
        for key, value in batch.items():
            parts.setdefault(key, []).append(value.numpy())
    return {k: np.concatenate(v) for k, v in parts.items()}


@pytest.fixture(scope="module")
def arrays(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("arrays")
    n = 1001
    values = {
        "x": RNG.normal(size=(n, 8)).astype("float32"),
        "y": RNG.integers(0, 5, n),
        "w": RNG.normal(size=n),
        "flag": RNG.integers(0, 2, n).astype(bool),
        "pix": RNG.integers(0, 255, (n, 4, 4, 3), dtype=np.uint8),
        "big": RNG.normal(size=(n, 300)).astype("float32"),
    }
    np.savez(root / "a.npz", **values)
    np.save(root / "feat.npy", values["x"])
    out = root / "out"
    data.convert(root / "a.npz", out, options=opts(label="y"))
    return {"root": root, "values": values, "out": out}


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("images")
    src = root / "src"
    pixels = {}
    for label, name in enumerate(["cat", "dog", "eel"]):
        (src / name).mkdir(parents=True)
        for i in range(7):
            array = RNG.integers(0, 255, (20, 24, 3), dtype=np.uint8)
            path = src / name / f"{i}.png"
            Image.fromarray(array).save(path)
            pixels[str(path)] = (array, label)
    return {"src": src, "pixels": pixels}


def test_arrays_round_trip_exactly(arrays):
    got = read_all(arrays["out"])
    assert np.array_equal(got["id"], np.arange(1001))
    for name, value in arrays["values"].items():
        assert got[name].dtype == value.dtype, name
        assert np.array_equal(got[name], value), name
    manifest = data.load(arrays["out"])
    assert manifest.label == "y" and manifest.total_rows == 1001
    assert manifest.features["big"].encoding == "raw" and manifest.features["x"].encoding == "float"
    assert manifest.created_by["source_kind"] == "arrays"
    assert all(len(s.sha256) == 64 for s in manifest.shards)


def test_single_npy_file(arrays, tmp_path):
    data.convert(arrays["root"] / "feat.npy", tmp_path / "o", options=opts())
    assert np.array_equal(read_all(tmp_path / "o")["feat"], arrays["values"]["x"])


@pytest.mark.process
def test_image_folder_round_trips_exactly_as_raw(images, tmp_path):
    data.convert(
        images["src"], tmp_path / "raw", options=opts(image_format="raw", workers=2, keep_order=True)
    )
    got = read_all(tmp_path / "raw", batch_size=5)
    expected = list(images["pixels"].values())
    assert np.array_equal(got["image"], np.stack([p for p, _ in expected]))
    assert np.array_equal(got["label"], np.array([label for _, label in expected]))
    manifest = data.load(tmp_path / "raw")
    assert manifest.class_names == ["cat", "dog", "eel"]
    allpix = np.stack([p for p, _ in expected]).reshape(-1, 3).astype(float)
    assert np.allclose(manifest.stats["image_mean"], allpix.mean(axis=0), atol=1e-3)
    assert np.allclose(manifest.stats["image_std"], allpix.std(axis=0), atol=1e-3)


@pytest.mark.process
def test_image_rows_shuffled_once_so_every_shard_mixes_classes(images, tmp_path):
    """A listing is class by class; by default the rows are shuffled once, the same way every time."""
    data.convert(images["src"], tmp_path / "a", options=opts(image_format="raw", min_shards=3))
    data.convert(images["src"], tmp_path / "b", options=opts(image_format="raw", min_shards=3, workers=2))
    got = read_all(tmp_path / "a", batch_size=5)
    listed = [label for _, label in images["pixels"].values()]
    assert got["label"].tolist() != listed  # not class by class
    assert sorted(got["label"].tolist()) == sorted(listed)
    by_pixels = {p.tobytes(): label for p, label in images["pixels"].values()}
    assert [by_pixels[p.tobytes()] for p in got["image"]] == got["label"].tolist()  # every row once, intact
    assert len(by_pixels) == len({p.tobytes() for p in got["image"]}) == 21
    manifest = data.load(tmp_path / "a")
    for shard in manifest.shards:  # 3 shards of 7 rows: each holds more than one class
        labels = got["label"][shard.first_row : shard.first_row + shard.rows]
        assert len(set(labels.tolist())) > 1
    assert "shuffled" in manifest.created_by["row_order"]
    assert np.array_equal(read_all(tmp_path / "b", batch_size=5)["image"], got["image"])  # same order


def test_images_resized_offline_and_jpeg_bytes_kept(images, tmp_path):
    data.convert(
        images["src"], tmp_path / "r", options=opts(resize=(8, 10), image_format="raw", keep_order=True)
    )
    first, _ = next(iter(images["pixels"].values()))
    expected = np.asarray(Image.fromarray(first).resize((10, 8), Image.BILINEAR))
    got = read_all(tmp_path / "r")
    assert got["image"].shape == (21, 8, 10, 3)
    assert np.array_equal(got["image"][0], expected)
    jpg = tmp_path / "jpg" / "a"
    jpg.mkdir(parents=True)
    Image.fromarray(first).save(jpg / "0.jpg", quality=90)
    data.convert(tmp_path / "jpg", tmp_path / "jo", options=opts())
    record = next(iter(tf.data.TFRecordDataset(data.load(tmp_path / "jo").files())))
    stored = tf.io.parse_single_example(record, {"image": tf.io.FixedLenFeature([], tf.string)})[
        "image"
    ].numpy()
    assert stored == (jpg / "0.jpg").read_bytes()  # original JPEG bytes, no second lossy encode


def test_tables_round_trip_exactly(images, tmp_path):
    paths = list(images["pixels"])
    rows = [
        {"path": os.path.relpath(p, tmp_path), "n": i, "v": i / 3, "kind": "ab"[i % 2]}
        for i, p in enumerate(paths)
    ]
    with open(tmp_path / "t.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    data.convert(
        tmp_path / "t.csv",
        tmp_path / "c",
        options=opts(label="kind", image_column="path", resize=(6, 6), image_format="raw"),
    )
    got = read_all(tmp_path / "c")
    assert np.array_equal(got["n"], [r["n"] for r in rows])
    assert np.array_equal(got["v"], [r["v"] for r in rows])  # float64 kept exactly
    assert np.array_equal(got["kind"], [i % 2 for i in range(len(rows))])
    assert data.load(tmp_path / "c").class_names == ["a", "b"]
    assert got["path"].shape == (len(rows), 6, 6, 3)
    table = pa.table(
        {
            "f": pa.array(RNG.normal(size=50).astype("float32")),
            "i": pa.array(np.arange(50, dtype=np.int32)),
            "s": [f"r{i}" for i in range(50)],
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    data.convert(tmp_path / "t.parquet", tmp_path / "p", options=opts())
    got = read_all(tmp_path / "p")
    assert got["i"].dtype == np.int32 and np.array_equal(got["i"], np.arange(50))
    assert np.array_equal(got["f"], table.column("f").to_numpy())
    assert [s.decode() for s in got["s"]] == table.column("s").to_pylist()


def test_shard_plan():
    assert plan_shards(1001, 100, ConvertOptions(min_shards=4)) == [
        (0, 250),
        (250, 500),
        (500, 751),
        (751, 1001),
    ]
    assert len(plan_shards(3, 100, ConvertOptions(min_shards=16))) == 3
    big = plan_shards(10_000, 1024 * 1024, ConvertOptions(target_shard_mb=128, min_shards=1))
    assert len(big) == 79  # about 128 MiB each


@pytest.mark.parametrize(("workers", "min_shards"), [(2, 4), (3, 4), (3, 2)])
def test_every_row_once_across_workers(arrays, tmp_path, workers, min_shards):
    out = arrays["out"] if min_shards == 4 else tmp_path / "few"
    if min_shards != 4:
        data.convert(arrays["root"] / "a.npz", out, options=opts(min_shards=min_shards))
    seen = []
    for worker in range(workers):
        ctx = tf.distribute.InputContext(
            num_input_pipelines=workers, input_pipeline_id=worker, num_replicas_in_sync=workers
        )
        ids = read_all(out, batch_size=32, input_context=ctx)["id"]
        assert len(ids) > 0
        seen.extend(ids.tolist())
    assert sorted(seen) == list(range(1001))


def test_every_row_once_under_mirrored_strategy(arrays):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1", "/cpu:2"])

    def make(ctx):
        return data.pipeline(
            arrays["out"], batch_size=ctx.get_per_replica_batch_size(96), input_context=ctx, with_ids=True
        )

    ids = []
    for batch in strategy.distribute_datasets_from_function(make):
        for local in strategy.experimental_local_results(batch["id"]):
            ids.extend(local.numpy().tolist())
    assert sorted(ids) == list(range(1001))


@pytest.mark.slow
def test_every_row_once_across_two_worker_processes(arrays):
    results = run_cluster("bodies:worker_pipeline_ids", workers=2, args=(str(arrays["out"]), 64), timeout=240)
    everything = results["worker:0"] + results["worker:1"]
    assert sorted(everything) == list(range(1001))
    assert results["worker:0"] and results["worker:1"]


def test_training_shuffles_batches_statically_and_caches(arrays):
    ds = data.pipeline(arrays["out"], batch_size=100, training=True, seed=3, with_ids=True)
    epochs = [np.concatenate([b["id"].numpy() for b in ds]) for _ in range(2)]
    for ids in epochs:
        assert len(ids) == 1000 and len(set(ids.tolist())) == 1000  # remainder dropped, no duplicates
        assert not np.array_equal(ids, np.sort(ids))
    assert not np.array_equal(epochs[0], epochs[1])  # reshuffled each epoch
    assert ds.element_spec["x"].shape.as_list() == [100, 8]


def test_supervised_output_and_augment(images, tmp_path):
    data.convert(images["src"], tmp_path / "s", options=opts(resize=(8, 8)))

    def flip(e):
        return {**e, "image": tf.image.flip_left_right(e["image"])}

    x, y = next(
        iter(data.pipeline(tmp_path / "s", batch_size=4, training=True, augment=flip, supervised=True))
    )
    assert x.shape == (4, 8, 8, 3) and y.shape == (4,)

    def flip_pair(image, label):  # tf.data's own form (issue 44: a 70-line traceback before)
        return tf.image.flip_left_right(image), label + 10

    plain = dict(batch_size=4, training=True, supervised=True, shuffle=False)
    x0, y0 = next(iter(data.pipeline(tmp_path / "s", **plain)))
    x2, y2 = next(iter(data.pipeline(tmp_path / "s", augment=flip_pair, **plain)))
    np.testing.assert_array_equal(x2.numpy(), x0.numpy()[:, :, ::-1, :])
    np.testing.assert_array_equal(y2.numpy(), y0.numpy() + 10)
    np.save(tmp_path / "plain.npy", np.zeros((4, 2), "float32"))
    data.convert(tmp_path / "plain.npy", tmp_path / "nolabel", options=opts())
    with pytest.raises(ConfigError, match="needs a label feature"):
        data.pipeline(tmp_path / "nolabel", batch_size=4, supervised=True)


def test_file_list_with_feature_spec(arrays):
    manifest = data.load(arrays["out"])
    got = read_all(manifest.files(), features={"x": manifest.features["x"], "y": manifest.features["y"]})
    assert np.array_equal(got["x"], arrays["values"]["x"])
    with pytest.raises(ConfigError, match="feature spec"):
        data.pipeline(manifest.files(), batch_size=8)


def test_corrupt_and_missing_shards(arrays, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(arrays["out"], copy)
    shard = data.load(copy).files()[1]
    blob = bytearray(Path(shard).read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    Path(shard).write_bytes(bytes(blob))
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        read_all(copy)
    assert "part-00001-of-00004.tfrecord" in str(info.value) and "record number" in str(info.value)
    translated = from_graph_assertion(info.value)
    assert translated.message.startswith("corrupt or truncated TFRecord file ")
    assert "part-00001-of-00004.tfrecord - record number" in translated.message
    assert translated.message.endswith("Fix: re-run `tfgpu convert`, or pass on_corrupt='skip'.")
    assert from_graph_assertion(tf.errors.InvalidArgumentError(None, None, "shape mismatch")) is None
    kept = read_all(copy, on_corrupt="skip")["id"]
    assert 500 < len(kept) < 1001 and len(set(kept.tolist())) == len(kept)
    problems = data.verify(copy)
    assert len(problems) == 1 and "cannot be read" in problems[0]["problem"]
    manifest = json.loads((copy / "manifest.json").read_text())  # a manifest whose ranges overlap
    manifest["shards"][3]["first_row"] -= 1
    (copy / "manifest.json").write_text(json.dumps(manifest))
    problems = data.verify(copy)
    assert any("but the shards before it end at row" in p["problem"] for p in problems)
    os.remove(data.load(copy).files()[2])
    with pytest.raises(InputError, match=r"part-00002-of-00004\.tfrecord is missing"):
        data.pipeline(copy, batch_size=8)


@pytest.mark.parametrize("keep", [100, 150, None])
def test_record_count_checked_at_every_chunk_boundary(arrays, tmp_path, monkeypatch, keep):
    """A shard cut at a chunk boundary (100 of 250, chunks of 50) still fails, and so does a
    shard with records the manifest does not list; an intact shard ending on a boundary passes."""
    import importlib
    import shutil

    monkeypatch.setattr(importlib.import_module("tfgpu.data.pipeline"), "CHUNK", 50)
    copy = tmp_path / "copy"
    shutil.copytree(arrays["out"], copy)
    manifest = data.load(copy)
    shard = manifest.files()[0]
    records = [r.numpy() for r in tf.data.TFRecordDataset(shard)]
    kept = records[:keep] if keep else records + records[:50]  # None: 50 records too many
    with tf.io.TFRecordWriter(shard) as writer:
        for record in kept:
            writer.write(record)
    with pytest.raises(tf.errors.InvalidArgumentError, match="record number"):
        read_all(copy)
    got = read_all(copy, on_corrupt="skip")["id"]
    assert len(got) == 1001 - manifest.shards[0].rows + len(kept)


def test_intact_shards_on_chunk_boundaries(arrays, monkeypatch):
    import importlib

    rows = data.load(arrays["out"]).shards[0].rows
    monkeypatch.setattr(importlib.import_module("tfgpu.data.pipeline"), "CHUNK", rows)
    assert np.array_equal(np.sort(read_all(arrays["out"])["id"]), np.arange(1001))


@pytest.mark.process
def test_cli_truncated_shard_is_one_message(arrays, tmp_path):
    """A shard truncated after conversion, met mid-run by a command: exit 2, no traceback."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(arrays["out"], copy)
    shard = Path(data.load(copy).files()[0])
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    (tmp_path / "inputs.py").write_text(
        f"from tfgpu import data\n\ndef make():\n    return data.pipeline({str(copy)!r}, batch_size=16)\n"
    )
    done = run_cli("diagnose", "--dataset", f"{tmp_path / 'inputs.py'}:make", "--step-time", "5ms")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "error: corrupt or truncated TFRecord file" in done.stderr and "record number" in done.stderr


def test_cache_choices(arrays, tmp_path, clean_choices):
    from tfgpu import choices

    data.pipeline(arrays["out"], batch_size=8)
    assert choices.as_dict()["data.eval.cache"]["value"].startswith("memory")
    ds = data.pipeline(arrays["out"], batch_size=500, cache="disk", cache_dir=str(tmp_path))
    for _ in ds:
        pass
    assert any(tmp_path.rglob("worker-0*"))


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda d: np.savez(d / "r.npz", a=np.zeros((3, 2)), b=np.zeros(4)) or d / "r.npz", "ragged"),
        (
            lambda d: np.save(d / "o.npy", np.array([[1], [1, 2]], dtype=object)) or d / "o.npy",
            "object (ragged) array",
        ),
        (lambda d: (d / "m.csv").write_text("a,b\n1,2\n") and d / "m.csv", "no column 'label'"),
        (
            lambda d: (d / "n.csv").write_text("a,label\n1,x\n,y\n") and d / "n.csv",
            "row 2 has no value in column 'a'",
        ),
        (lambda d: (d / "x.txt").write_text("hi") and d / "x.txt", "cannot read x.txt"),
        (lambda d: d / "absent.csv", "does not exist"),
        (lambda d: (d / "empty").mkdir() or d / "empty", "no class subfolders"),
    ],
)
def test_bad_sources_get_one_clear_message(tmp_path, make, needle):
    source = make(tmp_path)
    with pytest.raises(InputError, match=re.escape(needle)):
        data.convert(
            source, tmp_path / "out", options=opts(label="label" if str(source).endswith(".csv") else None)
        )
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.process
def test_cli_bad_image_then_skip_bad(images, tmp_path):
    import shutil

    src = tmp_path / "src"
    shutil.copytree(images["src"], src)
    # rows are shuffled at conversion: each name puts the bad file in another shard, so the error
    # stops the pool at another point while the other worker writes; nothing half-written is left
    for name in ("a-broken.png", "m-broken.png", "broken.png"):
        for old in (src / "dog").glob("*broken.png"):
            old.unlink()
        (src / "dog" / name).write_bytes(b"\x89PNG not really")
        out = tmp_path / f"o-{name}"
        done = run_cli("convert", str(src), str(out), "--min-shards", "3", "--workers", "2")
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert name in done.stderr and "--skip-bad" in done.stderr
        assert not list(out.glob("*.tmp-*")) and not list((out / ".tfgpu").glob("*.tmp-*"))
    out = tmp_path / "o2"
    done = run_cli("convert", str(src), str(out), "--min-shards", "3", "--skip-bad", "--keep-order", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["rows"] == 21 and summary["skipped"] == 1
    assert data.load(out).created_by["row_order"] == "source order"
    labels = read_all(out, image_size=(20, 24))["label"].tolist()
    assert labels == [0] * 7 + [1] * 7 + [2] * 7  # the listing, class by class


@pytest.mark.process
@pytest.mark.parametrize("workers", [1, 2])
def test_a_stopped_conversion_leaves_complete_shards_and_nothing_half_written(tmp_path, workers):
    """A bad row or Ctrl-C stops the pool and kills workers mid-shard: their temporary files go,
    and no shard is written after the stop."""
    source = tmp_path / "a.npz"
    np.savez(source, x=RNG.normal(size=(40_000, 64)).astype("float32"))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    out = tmp_path / "o"

    def progress(done: int, total: int) -> None:
        if done:  # one shard complete; now a worker dies mid-shard and the run is stopped
            (out / f"part-00007-of-00008.tfrecord.tmp-{int(dead.stdout)}").write_bytes(b"half")
            raise KeyboardInterrupt

    options = opts(min_shards=8, workers=workers)
    with pytest.raises(KeyboardInterrupt) as stopped:  # held, as a notebook holds its last traceback
        data.convert(source, out, options=options, on_progress=progress)
    complete = len(list(out.glob("part-*.tfrecord")))
    assert complete <= workers and not list(out.glob("*.tmp-*"))
    time.sleep(1.0)  # the pool is stopped: nothing more is written
    assert len(list(out.glob("part-*.tfrecord"))) == complete and not list(out.glob("*.tmp-*"))
    assert data.convert(source, out, options=options).shards_reused == complete  # kept for the resume
    assert stopped.type is KeyboardInterrupt


def test_resume_rewrites_only_damaged_shards(arrays, tmp_path):
    out = tmp_path / "r"
    data.convert(arrays["root"] / "a.npz", out, options=opts(min_shards=5))
    files = data.load(out).files()
    os.remove(files[0])
    Path(files[3]).write_bytes(b"garbage")
    (out / "manifest.json").unlink()
    result = data.convert(arrays["root"] / "a.npz", out, options=opts(min_shards=5))
    assert (result.shards_written, result.shards_reused) == (2, 3)
    assert data.verify(out) == []
    assert np.array_equal(read_all(out)["x"], arrays["values"]["x"])
    with pytest.raises(InputError, match="made from other input: the options changed since"):
        data.convert(arrays["root"] / "a.npz", out, options=opts(min_shards=6))


def test_a_source_that_changed_is_not_resumed_into_old_shards(images, tmp_path):
    """Issue 18: stopped by a corrupt image, the image removed, run again: refused (the source's
    files changed), the shards kept; --overwrite starts over and every image is in one shard."""
    src = tmp_path / "src"
    shutil.copytree(images["src"], src)
    (src / "dog" / "9.png").write_bytes(b"not an image")
    out = tmp_path / "o"
    options = opts(min_shards=6, workers=1, keep_order=True)
    with pytest.raises(InputError):
        data.convert(src, out, options=options)
    written = sorted(p.name for p in out.glob("part-*"))
    assert written  # shards before the bad image were complete
    (src / "dog" / "9.png").unlink()
    with pytest.raises(InputError, match="made from other input: the source's files changed since") as info:
        data.convert(src, out, options=options)
    assert "(removed dog/9.png)" in str(info.value)  # which file, not only the counts
    assert "'content.files': {'then': 22, 'now': 21}" in str(info.value)
    assert sorted(p.name for p in out.glob("part-*")) == written
    result = data.convert(src, out, options=options, overwrite=True)
    assert result.manifest.total_rows == 21 and result.shards_reused == 0
    assert data.verify(out) == []
    assert data.convert(src, out, options=options).shards_reused == result.manifest.shards.__len__()


@pytest.mark.slow
def test_conversion_killed_halfway_resumes(images, tmp_path):
    src = tmp_path / "many" / "only"
    src.mkdir(parents=True)
    first, _ = next(iter(images["pixels"].values()))
    for i in range(400):
        Image.fromarray(np.roll(first, i, axis=1)).save(src / f"{i:03d}.png")
    out = tmp_path / "o"
    command = [
        sys.executable,
        "-m",
        "tfgpu.cli",
        "convert",
        str(src.parent),
        str(out),
        "--min-shards",
        "40",
        "--workers",
        "1",
        "--resize",
        "64x64",
    ]
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.time() + 120
    while time.time() < deadline and len(list((out / ".tfgpu").glob("part-*.json"))) < 3:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "manifest.json").exists()
    done_before = len(list((out / ".tfgpu").glob("part-*.json")))
    assert 3 <= done_before < 40
    done = run_cli(*command[3:], "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["shards_reused"] >= done_before and summary["rows"] == 400
    assert data.verify(out) == []
    assert not list(out.glob("*.tmp-*"))


@pytest.mark.process
def test_output_that_is_a_file_is_refused_and_kept(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((4, 2), "float32"))
    (tmp_path / "taken").write_text("keep me")
    done = run_cli("convert", str(tmp_path / "x.npy"), str(tmp_path / "taken"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "is a file, but tfgpu convert writes a directory" in done.stderr
    assert (tmp_path / "taken").read_text() == "keep me"


def test_a_malformed_csv_row_is_named_by_its_line(tmp_path):
    (tmp_path / "t.csv").write_text("a,b,y\n1,2,0\n3,4,1\n5,6,7,1\n7,8,0\n")
    with pytest.raises(
        InputError, match=r"t\.csv, line 4: CSV parse error: Expected 3 columns, got 4"
    ) as info:
        data.convert(tmp_path / "t.csv", tmp_path / "o", options=opts(label="y", workers=1))
    assert "that line has 4 fields, the header 3" in str(info.value)


@pytest.mark.process  # the pool's workers, where they pay
@pytest.mark.parametrize("start_s", [3.0, 0.0])
def test_small_work_converts_in_this_process_and_large_in_workers(arrays, tmp_path, monkeypatch, start_s):
    """Issue 54: with no worker count asked, the first shard is converted here and timed, and the
    rest go to worker processes only when that beats converting them here (each worker imports
    TensorFlow: seconds). A small array file stays here; with starting workers free (0 s), the
    pool takes the rest. Either way the shards hold every row, in order."""
    import importlib

    convert_module = importlib.import_module("tfgpu.data.convert")  # tfgpu.data.convert is the function
    pooled = []
    real = convert_module.run_jobs
    monkeypatch.setattr(convert_module, "WORKER_START_S", start_s)
    monkeypatch.setattr(convert_module.host, "cores", lambda: 2)
    monkeypatch.setattr(
        convert_module,
        "run_jobs",
        lambda fn, jobs, workers: pooled.append(len(jobs)) or real(fn, jobs, workers=workers),
    )
    out = tmp_path / "o"
    result = data.convert(
        arrays["root"] / "a.npz", out, options=ConvertOptions(min_shards=4, keep_order=True)
    )
    assert result.shards_written == 4
    assert pooled == ([] if start_s else [3])  # the first shard here, the other 3 in the pool or not
    assert np.array_equal(read_all(out)["x"], arrays["values"]["x"])


@pytest.mark.process
def test_a_table_converts_and_is_read_for_prediction_without_pandas(tmp_path):
    """pandas is no dependency of tfgpu: pyarrow < 26's ``to_pandas_dtype`` imported it, so on a
    plain install (pyarrow 25 beside it) ``tfgpu convert rows.csv`` failed with "No module named
    'pandas'" (make test's wheel smoke found it). A child Python that cannot import pandas
    converts a CSV and reads a Parquet file's column types for prediction."""
    (tmp_path / "rows.csv").write_text("a,b,y\n1,0.5,0\n2,1.5,1\n3,2.5,0\n")
    pq.write_table(pa.table({"i": pa.array([1, 2], pa.int16()), "f": [0.5, 1.5]}), tmp_path / "rows.parquet")
    child = (
        "import sys\n"
        "class NoPandas:\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] == 'pandas':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, NoPandas())\n"
        "from tfgpu.cli import main\n"
        "from tfgpu.predict.inputs import open_input\n"
        "assert main(['convert', 'rows.csv', 'rows-ds', '--label', 'y']) == 0\n"
        "print({name: c.dtype for name, c in open_input('rows.parquet').columns.items()})\n"
        "import tfgpu.data\n"
        "print(tfgpu.data.load('rows-ds').total_rows)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=cli_environ(),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "{'i': 'int16', 'f': 'float64'}" in done.stdout and done.stdout.strip().endswith("3")

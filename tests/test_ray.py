"""tfgpu.fit as Ray Train's TensorFlow loop (docs/ray.md, tfgpu.ray).

The cluster tests run tests/scripts/ray_fit.py once, in a process of its own (Ray's workers are
processes; one ``ray.init(num_cpus=2)`` for the three runs), and compare what each worker
trained with Keras's ``fit`` on one device:

- arrays: the same global batches as one device, so the same weights;
- a Ray Data shard: each worker's ``to_tf(batch_size=B)`` batch is cut among the replicas, as
  TensorFlow cuts any dataset's batches (tfgpu keeps Ray's AutoShardPolicy.OFF, so nothing is
  sharded twice): global batch k holds worker 0's k-th piece then worker 1's. With
  ``preserve_order`` and blocks of equal rows, Ray hands worker r the blocks r, r+2, ...;
- a worker killed mid-epoch: Ray restarts both, tfgpu resumes from the checkpoint Ray kept, and
  the run ends with the weights of one never interrupted; that checkpoint loads into a fresh
  model (``tfgpu.ray.load_weights``);
- an elastic group (tests/scripts/ray_elastic.py): a node lost, the run goes on with 1 worker of
  2; a node added, with 2 of 1; each ends at one device's weights.

The unit tests need Ray installed but no cluster.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from support.parity import same

pytest.importorskip("ray.train", reason="tfgpu[ray] is not installed")

SCRIPT = Path(__file__).parent / "scripts" / "ray_fit.py"
CEILING_S = 900  # only a hang reaches it: the three runs take about 90 s here

sys.path.insert(0, str(SCRIPT.parent))
import ray_fit  # noqa: E402


def _ran(script: Path, *args: str) -> str:
    """``script`` with ``args`` in a Python of its own, which must succeed: what it printed."""
    env = {**os.environ, "RAY_DEDUP_LOGS": "0"}  # every worker's lines, not Ray's "repeated 2x"
    env.pop("TFGPU_LOGICAL_CPUS", None)
    done = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=CEILING_S,
        env=env,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    return output


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("ray")
    return out, _ran(SCRIPT, str(out))


def _worker(out: Path, name: str, rank: int) -> dict:
    return json.loads((out / f"{name}-{rank}.json").read_text())


def _keras(batches: list[np.ndarray]) -> tuple[list[np.ndarray], list[float]]:
    """One device, Keras's own loop, one global batch after another: (weights, epoch losses)."""
    x, y = ray_fit.rows()
    model = ray_fit.model()
    order = np.concatenate(batches)
    sizes = [len(b) for b in batches]
    if len(set(sizes[:-1])) <= 1 and sizes[-1] <= sizes[0]:  # plain batches: Keras's fit
        history = model.fit(
            x[order], y[order], batch_size=sizes[0], epochs=ray_fit.EPOCHS, shuffle=False, verbose=0
        )
        return model.get_weights(), history.history["loss"]
    losses = []
    for _ in range(ray_fit.EPOCHS):
        model.reset_metrics()
        for rows in batches:
            logs = model.train_on_batch(x[rows], y[rows], return_dict=True, reset_metrics=False)
        losses.append(logs["loss"])
    return model.get_weights(), losses


def _plain() -> list[np.ndarray]:
    return [np.arange(i, min(i + ray_fit.BATCH, ray_fit.ROWS)) for i in range(0, ray_fit.ROWS, ray_fit.BATCH)]


@pytest.mark.slow
def test_fit_on_arrays_in_each_ray_worker_trains_as_one_device(runs: tuple[Path, str]) -> None:
    out, _ = runs
    weights, losses = _keras(_plain())
    for rank in (0, 1):
        found = _worker(out, "arrays", rank)
        same(found["weights"], weights)
        same(found["history"]["loss"], losses, atol=0)


def _shard_batches() -> list[np.ndarray]:
    """The global batches of two workers reading their Ray Data shards (the module's rule)."""
    block = ray_fit.ROWS // ray_fit.BLOCKS
    streams = [
        np.concatenate([np.arange(b * block, (b + 1) * block) for b in range(r, ray_fit.BLOCKS, 2)])
        for r in (0, 1)
    ]
    pieces = []
    for stream in streams:
        cut = []
        for start in range(0, len(stream), ray_fit.BATCH):
            batch = stream[start : start + ray_fit.BATCH]
            half = (len(batch) + 1) // 2
            cut += [batch[:half], batch[half:]]
        pieces.append(cut)
    return [np.concatenate(pair) for pair in zip(*pieces, strict=True)]


@pytest.mark.slow
def test_fit_on_a_ray_data_shard_trains_as_one_device_on_the_stated_global_batches(
    runs: tuple[Path, str],
) -> None:
    out, _ = runs
    batches = _shard_batches()
    assert sorted(np.concatenate(batches).tolist()) == list(range(ray_fit.ROWS))  # each row once an epoch
    weights, losses = _keras(batches)
    for rank in (0, 1):
        found = _worker(out, "shard", rank)
        same(found["weights"], weights)
        same(found["history"]["loss"], losses, atol=0)
        assert found["iterations"] == len(batches) * ray_fit.EPOCHS


@pytest.mark.slow
def test_a_worker_killed_mid_epoch_resumes_from_ray_s_checkpoint_to_an_uninterrupted_run(
    runs: tuple[Path, str],
) -> None:
    out, output = runs
    assert (out / "killed-1-attempts").read_text() == "xx", "worker 1 did not die and start again"
    assert "worker 1 dies at step 12 (2 checkpoints kept)" in output
    resumed = [int(step) for step in re.findall(r"resumed from \S+ckpt-(\d+) at step \d+", output)]
    assert resumed == [10], output[-3000:]  # mid-epoch (16 steps an epoch), rank 0's line only
    weights, losses = _keras(_plain())
    steps = ray_fit.ROWS // ray_fit.BATCH * ray_fit.EPOCHS
    for rank in (0, 1):
        found = _worker(out, "killed", rank)
        assert found["iterations"] == steps  # restored count + the steps after: none twice
        for got, want in zip(found["weights"], weights, strict=True):
            np.testing.assert_allclose(np.array(got), want, rtol=1e-5, atol=1e-6)
        # the resumed run's History has the epochs it trained (the last one here)
        np.testing.assert_allclose(found["history"]["loss"][-1], losses[-1], rtol=1e-5)
    kept = json.loads((out / "killed-result.json").read_text())
    assert kept["metrics"]["step"] == steps and kept["metrics"]["epoch"] == ray_fit.EPOCHS
    np.testing.assert_allclose(kept["metrics"]["loss"], losses[-1], rtol=1e-5)
    for got, want in zip(kept["weights"], weights, strict=True):  # Ray's checkpoint, loaded afresh
        np.testing.assert_allclose(np.array(got), want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_tfgpu_s_summary_and_progress_lines_come_from_rank_0_only(runs: tuple[Path, str]) -> None:
    _, output = runs
    ranks = {pid: int(rank) for rank, pid in re.findall(r"worker (\d) pid (\d+) attempt", output)}
    assert sorted(set(ranks.values())) == [0, 1]

    def pids(pattern: str) -> set[int]:
        return {ranks[pid] for pid in re.findall(rf"RayTrainWorker pid=(\d+)\)\S* {pattern}", output)}

    assert pids("tfgpu chose:") == {0}
    assert pids(r"Epoch \d+/\d+") == {0}
    assert pids("resumed from") == {0}
    assert len(re.findall(r"tfgpu chose:", output)) == 4  # arrays, shard, killed twice


ELASTIC = Path(__file__).parent / "scripts" / "ray_elastic.py"


@pytest.fixture(scope="module", params=["shrink", "grow"])
def elastic(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, str]:
    """ray_elastic.py in a process of its own for each change (a Ray cluster of its own: Ray's
    view of the nodes is kept by a detached actor that outlives one run)."""
    mode = request.param
    out = tmp_path_factory.mktemp(f"ray-{mode}")
    return mode, out, _ran(ELASTIC, str(out), mode)


@pytest.mark.slow
def test_an_elastic_group_that_shrinks_or_grows_mid_epoch_ends_at_one_device_s_weights(
    elastic: tuple[str, Path, str],
) -> None:
    """ScalingConfig(num_workers=(1, 2)): 2 workers lose a node at step 12 and go on as 1, or 1
    worker gains one and goes on as 2; either way from Ray's checkpoint of step 10, on the same
    global batches, to the weights of one device's run never interrupted."""
    mode, out, output = elastic
    before, after = (2, 1) if mode == "shrink" else (1, 2)
    groups = (out / f"{mode}-groups").read_text().split()
    assert sorted(groups[:before]) == [f"{r}/{before}" for r in range(before)], groups
    assert sorted(groups[before:]) == [f"{r}/{after}" for r in range(after)], groups
    assert "the cluster changes at step 12 (2 checkpoints kept)" in output
    replicas = f"{before} replica{'s' if before > 1 else ''}, now {after}"
    resumed = re.findall(
        rf"resumed from \S+ckpt-(\d+) at step \d+ \(saved on {replicas}\), the same global", output
    )
    assert resumed == ["10"], output[-3000:]
    weights, losses = _keras(_plain())
    for rank in range(after):
        found = _worker(out, mode, rank)
        assert (
            found["size"] == after and found["iterations"] == ray_fit.ROWS // ray_fit.BATCH * ray_fit.EPOCHS
        )
        for got, want in zip(found["weights"], weights, strict=True):
            np.testing.assert_allclose(np.array(got), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(found["history"]["loss"][-1], losses[-1], rtol=1e-5)


def test_the_callback_outside_a_ray_worker_says_where_to_make_it() -> None:
    import tfgpu
    import tfgpu.ray

    with pytest.raises(tfgpu.ConfigError, match="outside a Ray Train worker") as raised:
        tfgpu.ray.ReportCheckpointCallback()
    assert "train_loop_per_worker" in str(raised.value)


def test_metrics_are_picked_as_ray_s_own_keras_callback_picks_them() -> None:
    import tfgpu
    from tfgpu.ray import _picked

    logs = {"loss": 0.5, "val_loss": 0.7, "mae": 0.1}
    assert _picked(logs, None) == {"loss": 0.5, "val_loss": 0.7, "mae": 0.1}
    assert _picked(logs, "val_loss") == {"val_loss": 0.7}
    assert _picked(logs, ["loss", "mae"]) == {"loss": 0.5, "mae": 0.1}
    assert _picked(logs, {"validation": "val_loss"}) == {"validation": 0.7}
    with pytest.raises(tfgpu.ConfigError, match="val_auc"):
        _picked(logs, ["val_auc"])


@pytest.mark.model
def test_load_weights_refuses_an_unbuilt_model_a_foreign_checkpoint_and_an_empty_directory(
    tmp_path: Path,
) -> None:
    import keras
    import tensorflow as tf

    import tfgpu
    import tfgpu.ray

    trained = ray_fit.model()
    tf.train.Checkpoint(model=trained).save(str(tmp_path / "ckpt"))
    fresh = ray_fit.model()
    fresh.layers[0].kernel.assign(np.zeros_like(fresh.layers[0].kernel))
    tfgpu.ray.load_weights(fresh, tmp_path)
    for got, want in zip(fresh.get_weights(), trained.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(tfgpu.ConfigError, match="built model"):
        tfgpu.ray.load_weights(keras.Sequential([keras.layers.Dense(1)]), tmp_path)
    other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    with pytest.raises(tfgpu.ConfigError, match="architecture"):
        tfgpu.ray.load_weights(other, tmp_path)
    with pytest.raises(tfgpu.ConfigError, match="No tfgpu checkpoint"):
        tfgpu.ray.load_weights(fresh, tmp_path / "empty")


def test_without_ray_the_callback_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import tfgpu
    import tfgpu.ray

    monkeypatch.setitem(sys.modules, "ray.train", None)  # as if Ray Train were not installed
    with pytest.raises(tfgpu.ConfigError, match=r"tfgpu\[ray\]"):
        tfgpu.ray.ReportCheckpointCallback()

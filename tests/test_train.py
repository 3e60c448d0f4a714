"""tfgpu.Trainer: distributed results equal one device; exact evaluation; checkpoints and resume."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tfgpu
from support.parity import same
from support.processes import run_cli
from support.replicas import local_strategy
from tasks import GLOBAL, make_task, model
from tfgpu import data
from tfgpu.errors import ConfigError
from tfgpu.testing import run_cluster

TASKS = str(Path(__file__).parent / "tasks.py")
STEPS = 12


strategy = local_strategy


def train(replicas: int, **kw):
    trainer = tfgpu.Trainer(
        make_task(GLOBAL // replicas), strategy=strategy(replicas), monitor_gpus=False, **kw
    )
    result = trainer.fit(steps=STEPS)
    return trainer, result


@pytest.fixture(scope="module")
def single():
    trainer, result = train(1)
    return {"weights": trainer.model.get_weights(), "eval": trainer.evaluate(), "result": result}


@pytest.mark.heavy
@pytest.mark.parametrize("replicas", [2, 3])
def test_replicas_match_one_device(single, replicas):
    trainer, result = train(replicas)
    assert result.global_batch == GLOBAL and result.replicas == replicas and result.steps == STEPS
    same(trainer.model.get_weights(), single["weights"])


@pytest.mark.model
@pytest.mark.parametrize("compiled", [False, True])
def test_a_task_s_model_made_outside_any_scope_is_placed_as_fit_places_it(single, compiled):
    """Issue 67: the Trainer places its Task's model by ``placement.place``, the rule of
    ``tfgpu.fit``: a builder returning a model made outside any scope (at module level, as
    scripts make it), compiled there or not, is moved into the strategy and trains on 2
    replicas to one device's weights. Before, Setup checked it by a rule of its own and refused
    it ("created under another strategy")."""
    import keras

    made = model()  # outside any scope
    if compiled:
        made.compile(
            optimizer=keras.optimizers.Adam(0.01),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    task = dataclasses.replace(make_task(GLOBAL // 2), model=lambda: made)
    if compiled:
        task = dataclasses.replace(task, loss=None, metrics=())
    trainer = tfgpu.Trainer(task, strategy=strategy(2), monitor_gpus=False)
    trainer.fit(steps=STEPS)
    assert trainer.strategy.num_replicas_in_sync == 2
    same(trainer.model.get_weights(), single["weights"])


@pytest.mark.slow
def test_two_workers_match_one_device(single):
    results = run_cluster(
        "bodies:train_weights_on_workers", workers=2, args=(GLOBAL // 2, STEPS), timeout=300
    )
    for result in results.values():
        same(result["weights"], single["weights"])
        assert result["eval"]["examples"] == 1001
        assert result["eval"]["accuracy"] == pytest.approx(single["eval"]["accuracy"], abs=1e-6)
        assert result["eval"]["loss"] == pytest.approx(single["eval"]["loss"], rel=1e-5)


@pytest.mark.model
@pytest.mark.parametrize("replicas", [2, 3])
def test_exact_evaluation_on_1001_examples(single, replicas):
    trainer = tfgpu.Trainer(make_task(GLOBAL // replicas), strategy=strategy(replicas), monitor_gpus=False)
    trainer.model.set_weights(single["weights"])
    metrics = trainer.evaluate()
    assert metrics["examples"] == 1001
    assert metrics["accuracy"] == pytest.approx(single["eval"]["accuracy"], abs=1e-6)
    assert metrics["loss"] == pytest.approx(single["eval"]["loss"], rel=1e-5)


@pytest.mark.model
def test_evaluation_from_a_tfgpu_dataset(single, tmp_path):
    from tasks import arrays

    x, y = arrays()
    np.savez(tmp_path / "d.npz", x=x, y=y)
    data.convert(
        tmp_path / "d.npz", tmp_path / "ds", options=data.ConvertOptions(label="y", min_shards=5, workers=1)
    )
    for replicas in (1, 3):
        trainer = tfgpu.Trainer(make_task(8), strategy=strategy(replicas), monitor_gpus=False)
        trainer.model.set_weights(single["weights"])
        metrics = trainer.evaluate(str(tmp_path / "ds"))
        assert metrics["examples"] == 1001
        assert metrics["accuracy"] == pytest.approx(single["eval"]["accuracy"], abs=1e-6)


@pytest.mark.heavy
def test_steps_per_execution_and_xla_give_the_same_weights(single):
    trainer, _result = train(2, steps_per_execution=4)
    same(trainer.model.get_weights(), single["weights"])
    trainer, _ = train(1, jit_compile=True)
    same(trainer.model.get_weights(), single["weights"], rtol=1e-4, atol=1e-5)
    with pytest.raises(ConfigError, match="XLA cannot compile a step replicated over logical CPU devices"):
        train(2, jit_compile=True)


@pytest.mark.model
def test_measures_and_reports_like_diagnose(single):
    result = single["result"]
    data_ = result.to_dict()
    assert data_["bottleneck"] in ("input", "host", "device")
    assert data_["input_bound"] in ("no", "moderately", "highly")
    assert 0.0 <= data_["input_wait_fraction"] <= 1.0
    # one point per log window (100 steps by default), the last at the end of the run
    assert data_["examples_per_s"] > 0 and [p["step"] for p in data_["timeline"]] == [STEPS]
    _trainer, result = train(1, log_every=5, steps_per_execution=2)
    assert [p["step"] for p in result.timeline] == [5, 10, 12]
    # a run this short is measured throughout: a lean step would trace for one window of two
    assert all(0.0 <= p["input_wait"] <= 1.0 for p in result.timeline)


@pytest.mark.heavy
def test_epochs_history_and_tensorboard(tmp_path):
    trainer = tfgpu.Trainer(
        make_task(12), strategy=strategy(2), monitor_gpus=False, log_dir=str(tmp_path / "tb")
    )
    result = trainer.fit(epochs=2)
    assert [h["epoch"] for h in result.history] == [1, 2]
    assert result.history[0]["steps"] == 1001 // GLOBAL
    # Keras's logs: the compiled metrics, validation with a val_ prefix
    assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(result.history[1])
    assert result.history[1]["loss"] < result.history[0]["loss"]
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


@pytest.mark.model
def test_mixed_precision_fp16_uses_loss_scaling(clean_choices):
    import keras

    from tfgpu import choices

    keras.mixed_precision.set_dtype_policy("mixed_float16")
    try:
        trainer = tfgpu.Trainer(make_task(12), strategy=strategy(2), monitor_gpus=False)
        assert type(trainer.optimizer).__name__ == "LossScaleOptimizer"
        result = trainer.fit(steps=6)
        assert all(np.isfinite(p["loss"]) for p in result.timeline)
        assert choices.as_dict()["loss_scaling"]["value"] == "dynamic"
    finally:
        keras.mixed_precision.set_dtype_policy("float32")


@pytest.mark.heavy
def test_checkpoints_kept_and_resumed(tmp_path, single):
    directory = str(tmp_path / "ck")
    first = tfgpu.Trainer(
        make_task(12),
        strategy=strategy(2),
        monitor_gpus=False,
        checkpoint_dir=directory,
        checkpoint_every=2,
        keep_checkpoints=2,
    )
    first.fit(steps=7)
    kept = sorted(p.name for p in Path(directory).glob("ckpt-*.index"))
    assert kept == ["ckpt-6.index", "ckpt-7.index"]
    resumed = tfgpu.Trainer(make_task(12), strategy=strategy(2), monitor_gpus=False, checkpoint_dir=directory)
    assert resumed.resumed_from.endswith("ckpt-7") and resumed.loop.counters.step == 7
    resumed.fit(steps=STEPS)
    same(resumed.model.get_weights(), single["weights"])


@pytest.mark.heavy
def test_a_run_resumed_on_other_replicas_goes_on_as_one_device_and_says_so(tmp_path, single, caplog):
    """Checkpoints of 2 replicas resumed on 3 (an elastic group that grew, a relaunch on other
    machines): the same global batches, so one device's weights, and the resume line says so."""
    directory = str(tmp_path / "ck")
    first = tfgpu.Trainer(
        make_task(GLOBAL // 2), strategy=strategy(2), monitor_gpus=False, checkpoint_dir=directory
    )
    first.fit(steps=5)
    with caplog.at_level("INFO", logger="tfgpu"):
        resumed = tfgpu.Trainer(
            make_task(GLOBAL // 3), strategy=strategy(3), monitor_gpus=False, checkpoint_dir=directory
        )
    assert resumed.loop.counters.step == 5
    said = [r.getMessage() for r in caplog.records if "resumed from" in r.getMessage()]
    assert said and said[0].endswith("at step 5 (saved on 2 replicas, now 3), the same global batches")
    assert not [r for r in caplog.records if r.levelname == "WARNING" and r.name.startswith("tfgpu")]
    resumed.fit(steps=STEPS)
    same(resumed.model.get_weights(), single["weights"])


@pytest.mark.model
def test_a_run_resumed_with_another_global_batch_is_warned_that_it_is_another_run(tmp_path, caplog):
    directory = str(tmp_path / "ck")
    tfgpu.Trainer(make_task(12), strategy=strategy(1), monitor_gpus=False, checkpoint_dir=directory).fit(
        steps=2
    )
    with caplog.at_level("INFO", logger="tfgpu"):
        tfgpu.Trainer(make_task(12), strategy=strategy(2), monitor_gpus=False, checkpoint_dir=directory)
    warned = [
        r.getMessage() for r in caplog.records if r.levelname == "WARNING" and r.name.startswith("tfgpu")
    ]
    assert len(warned) == 1
    assert "saved on 1 replica, now 2" in caplog.text
    assert "the global batch is 24, the checkpoint's steps were of 12" in warned[0]
    assert "pass the same batch_size" in warned[0]


@pytest.mark.model
def test_out_of_memory_names_the_batch_size(monkeypatch):
    trainer = tfgpu.Trainer(make_task(12), strategy=strategy(2), monitor_gpus=False)

    def explode(iterator, limit):
        raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")

    from tfgpu.train.pieces import model_cache

    monkeypatch.setattr(model_cache, "function", lambda model, key, make: explode)
    with pytest.raises(tfgpu.train.OutOfMemoryError) as info:
        trainer.fit(steps=2)
    assert "12 examples per replica (global batch 24)" in info.value.message
    assert "find_batch_size" in info.value.message


@pytest.mark.model
def test_find_batch_size_search():
    calls = []

    def fits(batch):
        calls.append(batch)
        return batch <= 300

    found = tfgpu.find_batch_size(make_task(), fits=fits)
    assert 282 <= found <= 300 and calls[:6] == [8, 16, 32, 64, 128, 256]
    with pytest.raises(ConfigError, match="Even 8"):
        tfgpu.find_batch_size(make_task(), fits=lambda b: False)
    assert tfgpu.find_batch_size(make_task(), strategy=strategy(1), limit=32) == 32  # real steps on CPU


@pytest.mark.model
def test_bad_training_options():
    with pytest.raises(ConfigError, match="exactly one of epochs or steps"):
        tfgpu.Trainer(make_task(), strategy=strategy(1), monitor_gpus=False).fit()
    with pytest.raises(ConfigError, match="Keras does not know this loss"):
        tfgpu.Task(model=model, loss="hinge-ish", train_data=lambda c, b: None)


@pytest.mark.process
def test_cli_train_json_and_bad_task(tmp_path):
    done = run_cli(
        "train",
        f"{TASKS}:make_task",
        "--steps",
        "6",
        "--steps-per-execution",
        "3",
        "--json",
        "--log-dir",
        str(tmp_path / "run"),
        env={"TFGPU_LOGICAL_CPUS": "2"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    report = run_cli("report", str(tmp_path / "run"))
    assert report.returncode == 0, report.stderr[-2000:]
    page = (tmp_path / "run" / "report.html").read_text()
    assert ">Training<" in page and page.count("data:image/png;base64,") >= 3
    assert summary["steps"] == 6 and summary["replicas"] == 2 and summary["global_batch"] == 48
    assert summary["choices"]["global_batch"]["reason"] == "24 per replica x 2 replicas"
    bad = run_cli("train", f"{TASKS}:not_a_task", "--steps", "1")
    assert bad.returncode == 2 and "not a tfgpu.Task" in bad.stderr
    missing = run_cli("train", f"{TASKS}:nope", "--steps", "1")
    assert (
        missing.returncode == 2
        and "has no function 'nope'" in missing.stderr
        and "make_task" in missing.stderr
    )


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_weights(tmp_path):
    command = [
        sys.executable,
        "-m",
        "tfgpu.cli",
        "train",
        f"{TASKS}:slow_task",
        "--steps",
        "40",
        "--checkpoint-every",
        "4",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFGPU_")}
    reference = subprocess.run(
        [*command, "--checkpoint-dir", str(tmp_path / "ref")],
        env={**env, "SLOW_S": "0"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert reference.returncode == 0, reference.stderr[-2000:]
    directory = tmp_path / "run"
    proc = subprocess.Popen(
        [*command, "--checkpoint-dir", str(directory)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 180
    while time.time() < deadline and not list(directory.glob("ckpt-8.index")):
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = sorted(int(p.stem.split("-")[1]) for p in directory.glob("ckpt-*.index"))
    assert partial and max(partial) < 40  # killed midway
    done = subprocess.run(
        [*command, "--checkpoint-dir", str(directory)],
        env={**env, "SLOW_S": "0"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]

    def final(path):
        restored = model()
        tf.train.Checkpoint(model=restored).restore(tf.train.latest_checkpoint(str(path))).expect_partial()
        return restored.get_weights()

    same(final(directory), final(tmp_path / "ref"), rtol=1e-6, atol=1e-7)


@pytest.mark.slow
def test_parameter_server_training_lowers_the_loss():
    result = run_cluster("bodies:parameter_server_training", workers=2, chief=True, ps=1, timeout=300)[
        "chief:0"
    ]
    assert result["steps"] == 60 and result["points"] == list(range(5, 61, 5))
    assert result["last"] < result["first"]


# -- the in-graph loop (issue 16) ---------------------------------------------------------------


@pytest.mark.model
def test_default_strategy_is_accepted(single):
    trainer = tfgpu.Trainer(make_task(GLOBAL), strategy=tf.distribute.get_strategy(), monitor_gpus=False)
    trainer.fit(steps=STEPS)
    same(trainer.model.get_weights(), single["weights"])


@pytest.mark.heavy
def test_data_function_is_built_once_unless_it_takes_the_epoch():
    from tasks import global_batches

    calls = []

    def once(ctx, per_replica):
        calls.append("once")
        return global_batches(ctx, per_replica, rows=240)

    def each(ctx, per_replica, epoch):
        calls.append(epoch)
        return global_batches(ctx, per_replica, rows=240)

    for fn, expected in ((once, ["once"]), (each, [0, 1, 2])):
        calls.clear()
        task = dataclasses.replace(make_task(12), train_data=fn, eval_data=None)
        result = tfgpu.Trainer(task, strategy=strategy(2), monitor_gpus=False).fit(epochs=3)
        assert calls == expected and [h["steps"] for h in result.history] == [10, 10, 10]


def _array_task(per_replica, **extra):
    from tasks import arrays

    x, y = arrays()
    return dataclasses.replace(make_task(per_replica), train_data=(x, y), eval_data=(x, y), **extra)


@pytest.mark.heavy
def test_arrays_in_memory_match_across_replicas_and_resume(tmp_path):
    reference = tfgpu.Trainer(_array_task(GLOBAL), strategy=strategy(1), monitor_gpus=False)
    result = reference.fit(epochs=2)
    steps = -(-1001 // GLOBAL)  # the short last batch (17 rows) trained, as Keras trains it
    assert [h["steps"] for h in result.history] == [steps] * 2
    assert result.history[1]["val_accuracy"] > 0.5
    for replicas in (2, 3):
        trainer = tfgpu.Trainer(
            _array_task(GLOBAL // replicas), strategy=strategy(replicas), monitor_gpus=False
        )
        trainer.fit(epochs=2)
        same(trainer.model.get_weights(), reference.model.get_weights())
        assert trainer.evaluate()["examples"] == 1001
    # stopped mid-epoch and continued: the first fit let go of its iterator when it returned
    # (``Input.release``), and the second starts one where the run stands, the same run
    split = tfgpu.Trainer(_array_task(GLOBAL), strategy=strategy(1), monitor_gpus=False)
    split.fit(steps=5)
    assert split.setup.train._live is None
    split.fit(steps=2 * steps)
    same(split.model.get_weights(), reference.model.get_weights())
    # killed after epoch 1 and resumed: the epoch-seeded order makes it the same run
    first = tfgpu.Trainer(
        _array_task(12), strategy=strategy(2), monitor_gpus=False, checkpoint_dir=str(tmp_path)
    )
    first.fit(epochs=1)
    resumed = tfgpu.Trainer(
        _array_task(12), strategy=strategy(2), monitor_gpus=False, checkpoint_dir=str(tmp_path)
    )
    resumed.fit(epochs=2)
    same(resumed.model.get_weights(), reference.model.get_weights())


@pytest.mark.slow
def test_arrays_on_two_workers_match_one_device():
    reference = tfgpu.Trainer(_array_task(GLOBAL), strategy=strategy(1), monitor_gpus=False)
    reference.fit(epochs=2)
    results = run_cluster("bodies:train_arrays_on_workers", workers=2, args=(GLOBAL // 2, 2), timeout=300)
    for result in results.values():
        same(result["weights"], reference.model.get_weights())
        assert result["examples"] == 1001


def test_array_order_is_shuffled_per_epoch_and_can_be_kept():
    from tfgpu.train.inputs.adapters import of_task
    from tfgpu.train.inputs.readers import input_of

    def first_labels(task, epoch):
        source = input_of(
            of_task(task.train_data, role="train_data"),
            task=task,
            training=True,
            global_batch=100,
            strategy=None,
            direct=True,
        )
        iterator, skip = source.iterator(epoch)
        assert skip == 0
        return next(iterator)[1].numpy().tolist()

    shuffled = _array_task(100)
    assert first_labels(shuffled, 0) != first_labels(shuffled, 1)
    assert first_labels(shuffled, 1) == first_labels(shuffled, 1)
    kept = _array_task(100, shuffle=False)
    assert first_labels(kept, 0) == first_labels(kept, 1) == shuffled.train_data[1][:100].tolist()


@pytest.mark.model
def test_bad_arrays_and_options():
    from tasks import arrays

    x, y = arrays()
    task = dataclasses.replace(make_task(12), train_data=(x, y[:-1]))
    with pytest.raises(ConfigError, match="different numbers of rows") as info:
        tfgpu.Trainer(task, strategy=strategy(1), monitor_gpus=False).fit(steps=1)
    assert "1001" in str(info.value) and "1000" in str(info.value)
    task = dataclasses.replace(make_task(12), train_data=(x[:1], y[:1]))
    with pytest.raises(ConfigError, match="1 row, fewer than one per replica \\(2 replicas\\)"):
        tfgpu.Trainer(task, strategy=strategy(2), monitor_gpus=False).fit(steps=1)
    with pytest.raises(ConfigError, match="Unknown Trainer option"):
        tfgpu.Trainer(make_task(), strategy=strategy(1), steps_per_exec=2)
    with pytest.raises(ConfigError, match="log_every"):
        tfgpu.Trainer(make_task(), strategy=strategy(1), log_every=0)


def test_one_options_tree_from_flat_keywords():
    """TrainOptions.of: every field flat, the placement's and the tuning's budget included, each
    checked once; None for a field with a default is "not given" (an unset CLI flag)."""
    from tfgpu.train import Placement, TrainOptions

    options = TrainOptions.of(
        remat=True, devices_per_replica=2, tune=True, tune_budget_s=5, keep_checkpoints=None
    )
    assert options.placement == Placement(remat="full", devices_per_replica=2)
    assert options.tune.budget_s == 5 and options.keep_checkpoints == 3
    assert TrainOptions.of(options, micro_batches=4).placement == Placement("full", 2, 4)
    assert options.tuned(steps_per_execution=256, jit_compile=True).log_every == 256
    with pytest.raises(ConfigError, match="remat must be") as info:
        TrainOptions.of(remat="some")
    assert info.value.value == "some"
    with pytest.raises(ConfigError, match="devices_per_replica must be a whole number"):
        TrainOptions.of(devices_per_replica=0)
    with pytest.raises(ConfigError, match=r"Unknown tfgpu\.fit keyword"):
        TrainOptions.of(what="tfgpu.fit keyword", remats=True)
    with pytest.raises(ConfigError, match="tune_budget_s needs tune=True"):
        TrainOptions.of(tune_budget_s=5)


@pytest.mark.heavy
def test_a_trainer_takes_remat_and_a_split_as_keywords():
    """Trainer(task, remat=True, devices_per_replica=3): one replica over this process's 3
    logical CPUs, recomputed in the backward pass, trains to one device's weights."""
    one = tfgpu.Trainer(make_task(GLOBAL), strategy=strategy(1), monitor_gpus=False)
    one.fit(epochs=1)
    split = tfgpu.Trainer(make_task(GLOBAL), monitor_gpus=False, remat=True, devices_per_replica=3)
    assert split.replicas == 1 and split.model is not one.model
    split.fit(epochs=1)
    same(split.model.get_weights(), one.model.get_weights())
    assert tfgpu.choices.as_dict()["remat"]["value"] == "full"
    with pytest.raises(ConfigError, match="chooses the strategy"):
        tfgpu.Trainer(make_task(GLOBAL), strategy=strategy(1), devices_per_replica=3)


@pytest.mark.model
def test_non_finite_loss_is_named_with_its_step():
    from tasks import arrays

    x, y = arrays()
    weights = np.ones(len(x), np.float32)
    weights[7 * 24 + 3] = np.nan  # a sample weight in the 8th batch
    task = dataclasses.replace(make_task(24), train_data=(x, y, weights), shuffle=False)
    trainer = tfgpu.Trainer(
        task, strategy=strategy(1), monitor_gpus=False, log_every=10, steps_per_execution=4
    )
    with pytest.raises(tfgpu.TfgpuError, match=r"non-finite at step 8 \(found when reading steps 1-10\)"):
        trainer.fit(steps=20)


@pytest.mark.timing
def test_input_wait_is_measured_inside_the_graph():
    from tasks import slow_task

    # 25 ms per batch of a tiny model (SLOW_S unset)
    result = tfgpu.Trainer(slow_task(), strategy=strategy(1), monitor_gpus=False, log_every=5).fit(steps=15)
    assert result.input_wait_fraction > 0.5 and result.verdict.input_bound == "highly"
    assert all(p["input_wait"] > 0.5 for p in result.timeline[1:])  # the first one traced the step


@pytest.mark.heavy
def test_one_replica_off_the_host_reads_through_the_distributed_iterator(single, monkeypatch):
    """A GPU replica gets batches fetched to its device: the path runs here by calling CPU:0 a device."""
    from tfgpu import distribute

    monkeypatch.setattr(distribute, "on_host_cpu", lambda devices: False)
    for chosen in (strategy(1), tf.distribute.get_strategy()):
        trainer = tfgpu.Trainer(make_task(GLOBAL), strategy=chosen, monitor_gpus=False)
        assert not trainer.setup.direct
        trainer.fit(steps=STEPS)
        same(trainer.model.get_weights(), single["weights"])
        assert trainer.evaluate()["examples"] == 1001


@pytest.mark.process
def test_cli_bad_input_is_one_message(tmp_path):
    """The issue's sweep: each is one message naming the fix, exit 2, no traceback."""
    from concurrent.futures import ThreadPoolExecutor

    (tmp_path / "a-file").write_text("not a directory")
    cases = {
        "uncompiled_model": ("is not compiled, and Task.loss is not set",),
        "unknown_loss": ("Keras does not know this loss",),
        "labels_that_cannot_fit": ("cannot take the data",),
        "class_weight_two_outputs": ("class_weight needs a model with one output",),
        "validation_split_with_a_function": ("validation_split needs arrays in memory",),
        "callback_that_raises": ("the user's callback failed after epoch 0", "tasks.py:"),
        "data_function_returning_a_list": ("returned list, not a tf.data.Dataset",),
        "data_function_returning_none": ("returned NoneType, not a tf.data.Dataset",),
    }
    runs = [(name, ("--epochs", "1")) for name in cases]
    runs += [
        ("make_task", ("--epochs", "-1")),
        ("make_task", ("--steps", "-5")),
        ("make_task", ("--epochs", "0")),
        ("make_task", ("--steps", "1", "--checkpoint-dir", str(tmp_path / "a-file"))),
    ]
    expected = [
        *cases.values(),
        ("epochs must be",),
        ("steps must be",),
        ("epochs must be",),
        ("--checkpoint-dir",),
    ]
    with ThreadPoolExecutor(3) as pool:
        done = list(pool.map(lambda run: run_cli("train", f"{TASKS}:{run[0]}", *run[1]), runs))
    for (name, flags), result, needles in zip(runs, done, expected, strict=True):
        assert result.returncode == 2, (name, flags, result.stderr[-1500:])
        assert "Traceback" not in result.stderr, (name, result.stderr[-1500:])
        for needle in needles:
            assert needle in result.stderr, (name, flags, needle, result.stderr[-1500:])


@pytest.mark.model
def test_a_run_on_cpus_samples_no_gpu(monkeypatch):
    """NVML's sampler thread starts only where a replica may run on a GPU: not here, even asked."""
    from tfgpu.train.loop import windows

    def no_monitor():
        raise AssertionError("a GPU sampler was started for a run on CPUs")

    monkeypatch.setattr(windows, "Monitor", no_monitor)
    result = tfgpu.Trainer(make_task(GLOBAL), strategy=strategy(1), monitor_gpus=True).fit(steps=2)
    assert result.gpu_utilization == []


@pytest.mark.model
def test_one_execution_is_traced_its_first_call_is_warm_up_and_every_window_is_measured():
    """Issue 65: the run traces one training execution; its first call (tracing) is warm-up,
    left out of the steady state, and every window times the input wait (no lean variant)."""
    trainer = tfgpu.Trainer(
        make_task(GLOBAL), strategy=strategy(1), monitor_gpus=False, log_every=4, steps_per_execution=4
    )
    result = trainer.fit(steps=48)
    windows = len(result.timeline)  # 12, and one more where the 41-step epoch ends
    assert [p["warm_up"] for p in result.timeline] == [True] + [False] * (windows - 1)
    assert all(p["input_wait"] is not None for p in result.timeline)
    assert result.steady.steps == 44  # every window but the one that traced

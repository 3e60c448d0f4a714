"""Preempted, not lost: a training run told to stop (SIGTERM) finishes its call, saves one
checkpoint where it is, exits resumable (status 75), and its resume ends at the weights, History
and optimizer steps of the run that was never stopped: on one device, on 2 replicas, under
``tfgpu launch --nproc 2`` (a signal to one worker, to all, or to the launcher) and under
parameter servers (the coordinator decides)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfgpu
from support.processes import cli_environ, run_cli
from support.replicas import local_strategy
from tfgpu.errors import RESUMABLE, StoppedOnRequest

SCRIPTS = Path(__file__).parent.parent / "examples"  # examples/preemptible.py, as docs/multi-node.md runs it
sys.path.insert(0, str(SCRIPTS))
import preemptible as preempted_fit  # noqa: E402

STRATEGIES: dict[int, object] = {}  # one per replica count: Mirrored strategies in one process collide


def strategy(replicas: int):
    if replicas not in STRATEGIES:
        STRATEGIES[replicas] = local_strategy(replicas)
    return STRATEGIES[replicas]


def fit(directory: Path, *, replicas: int, per_call: int, callbacks=()):
    """preempted_fit's run in this process: 3 epochs of 20 steps."""
    x, y = preempted_fit.data()
    model = preempted_fit.model()
    history = tfgpu.fit(
        model,
        x,
        y,
        batch_size=20,
        epochs=3,
        verbose=0,
        steps_per_execution=per_call,
        checkpoint_dir=str(directory),
        strategy=strategy(replicas),
        callbacks=list(callbacks),
    )
    return model, history.history


UNSTOPPED: dict[tuple[int, int], tuple] = {}


def unstopped(tmp: Path, *, replicas: int, per_call: int):
    key = (replicas, per_call)
    if key not in UNSTOPPED:
        model, history = fit(tmp / f"unstopped-{replicas}-{per_call}", replicas=replicas, per_call=per_call)
        UNSTOPPED[key] = (model.get_weights(), history, int(model.optimizer.iterations.numpy()))
    return UNSTOPPED[key]


def checkpoints(directory: Path) -> list[int]:
    return sorted(int(p.name[5:].split(".")[0]) for p in directory.glob("ckpt-*.index"))


@pytest.mark.heavy
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    at=st.integers(1, 59),
    replicas=st.sampled_from([1, 2]),
    per_call=st.sampled_from([1, 3, 4]),
)
def test_a_signalled_fit_stops_at_its_call_saves_once_and_resumes_to_the_unstopped_run(
    tmp_path_factory, at, replicas, per_call
):
    """SIGTERM at a drawn step (from a batch callback, between two calls): the run stops after
    that call, at most ``per_call`` steps on, with one checkpoint at its step; run again, it ends
    at the unstopped run's weights, History and optimizer steps (no step lost, none twice)."""
    tmp = tmp_path_factory.mktemp("stop")
    weights, history, iterations = unstopped(
        tmp_path_factory.getbasetemp(), replicas=replicas, per_call=per_call
    )
    directory = tmp / "checkpoints"
    with pytest.raises(StoppedOnRequest) as stopped:
        fit(
            directory,
            replicas=replicas,
            per_call=per_call,
            callbacks=[preempted_fit.SignalAt(at, os.getpid())],
        )
    step = stopped.value.step
    assert stopped.value.code == RESUMABLE
    assert at <= step < at + per_call, (at, step)
    assert checkpoints(directory) == [step] and stopped.value.checkpoint.endswith(f"ckpt-{step}")
    assert "saved" in str(stopped.value) and f"step {step}" in str(stopped.value)
    model, resumed = fit(directory, replicas=replicas, per_call=per_call)
    assert int(model.optimizer.iterations.numpy()) == iterations == 60
    for got, want in zip(model.get_weights(), weights, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert resumed.keys() == history.keys()
    for name, values in history.items():
        np.testing.assert_allclose(resumed[name], values, rtol=1e-5, atol=1e-6)


@pytest.mark.model
def test_a_fit_without_checkpoint_dir_stops_and_says_nothing_was_kept(caplog):
    x, y = preempted_fit.data()
    model = preempted_fit.model()
    with pytest.raises(StoppedOnRequest) as stopped:
        tfgpu.fit(
            model,
            x,
            y,
            batch_size=20,
            epochs=2,
            verbose=0,
            strategy=strategy(1),
            callbacks=[preempted_fit.SignalAt(5, os.getpid())],
        )
    assert stopped.value.checkpoint is None and "nothing was kept" in str(stopped.value)
    assert "checkpoint_dir" in str(stopped.value)
    assert int(model.optimizer.iterations.numpy()) == stopped.value.step < 40


def slow_data(send_at: int):
    """400 batches of 20 rows; from batch ``send_at`` on each takes 20 ms, and batch
    ``send_at`` sends SIGTERM to this process as it is read (inside the call of 200 steps)."""
    import tensorflow as tf

    x, y = preempted_fit.data()
    x, y = np.tile(x, (20, 1)), np.tile(y, 20)

    def late(index, features, label):
        def wait(i):
            if i == send_at:
                os.kill(os.getpid(), signal.SIGTERM)
            if i >= send_at:
                time.sleep(0.02)
            return i

        tf.py_function(wait, [index], tf.int64)
        return features, label

    rows = tf.data.Dataset.from_tensor_slices((x, y)).batch(20)
    return rows.enumerate().map(lambda i, b: late(i, *b)).prefetch(0)


@pytest.mark.heavy
@pytest.mark.parametrize("replicas", [1, 2])
def test_a_call_of_many_steps_ends_at_the_step_the_signal_lands_in(tmp_path, replicas):
    """A call of 200 steps is not waited for: the signal, landing while the call runs (sent as
    batch 10 is read), ends the call within a few steps, not at its 200th (each step after
    the signal takes 20 ms of input: the 190 left would take 3.8 s)."""
    model = preempted_fit.model()
    with pytest.raises(StoppedOnRequest) as stopped:
        tfgpu.fit(
            model,
            slow_data(10),
            epochs=1,
            verbose=0,
            steps_per_execution=200,
            checkpoint_dir=str(tmp_path),
            strategy=strategy(replicas),
        )
    step = stopped.value.step
    assert 5 <= step < 60, step  # the fetch runs ahead of the step by a few batches
    assert int(model.optimizer.iterations.numpy()) == step
    assert checkpoints(tmp_path) == [step]


@pytest.mark.process
def test_a_stop_that_outlasts_the_grace_exits_at_the_grace(tmp_path):
    """A run that cannot stop in TFGPU_STOP_GRACE (here a callback that holds the loop) exits
    with the signal's status and says why, instead of waiting for SIGKILL."""
    script = tmp_path / "held.py"
    script.write_text(
        "import os, signal, sys, time, keras\n"
        f"sys.path.insert(0, {str(SCRIPTS)!r})\n"
        "import preemptible as preempted_fit, tfgpu\n"
        "class Hold(keras.callbacks.Callback):\n"
        "    def on_train_batch_end(self, batch, logs=None):\n"
        "        if batch == 3:\n"
        "            os.kill(os.getpid(), signal.SIGTERM)\n"
        f"            open({str(tmp_path / 'held')!r}, 'w').close()\n"
        "            time.sleep(600)\n"
        "x, y = preempted_fit.data()\n"
        "tfgpu.fit(preempted_fit.model(), x, y, batch_size=24, epochs=1, verbose=0,\n"
        "          steps_per_execution=1, callbacks=[Hold()])\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        env=cli_environ({"TFGPU_STOP_GRACE": "2"}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (tmp_path / "held").exists()
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-2000:]
    assert "stopped without saving after 2 s" in done.stderr


def test_stop_signals_are_read_from_the_environment():
    from tfgpu import env
    from tfgpu.errors import ConfigError

    assert env.stop_signals({}) == (signal.SIGTERM,)
    assert env.stop_signals({"TFGPU_STOP_SIGNALS": "sigterm, USR1"}) == (signal.SIGTERM, signal.SIGUSR1)
    assert env.stop_signals({"TFGPU_STOP_SIGNALS": "none"}) == ()
    with pytest.raises(ConfigError, match="SIGKILL"):
        env.stop_signals({"TFGPU_STOP_SIGNALS": "SIGKILL"})
    assert env.stop_grace({}) == 20.0 and env.stop_grace({"TFGPU_STOP_GRACE": "5"}) == 5.0
    with pytest.raises(ConfigError):
        env.stop_grace({"TFGPU_STOP_GRACE": "0"})


@pytest.mark.model
def test_a_signal_named_in_tfgpu_stop_signals_stops_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("TFGPU_STOP_SIGNALS", "SIGUSR1")

    class Usr1(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 4:
                os.kill(os.getpid(), signal.SIGUSR1)

    x, y = preempted_fit.data()
    with pytest.raises(StoppedOnRequest) as stopped:
        tfgpu.fit(
            preempted_fit.model(),
            x,
            y,
            batch_size=20,
            epochs=1,
            verbose=0,
            strategy=strategy(1),
            callbacks=[Usr1()],
        )
    assert str(stopped.value).startswith("SIGUSR1: stopped at step 5")
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # the process's own handling back


# -- several workers -------------------------------------------------------------------------


def launched(out: Path, *args: str) -> subprocess.CompletedProcess:
    out.mkdir(parents=True, exist_ok=True)
    script = SCRIPTS / "preemptible.py"
    return run_cli("launch", "--nproc", "2", "--", sys.executable, str(script), str(out), *args, timeout=600)


def launch_result(out: Path, worker: int):
    weights = np.load(out / f"weights-{worker}.npz")
    return [weights[k] for k in sorted(weights, key=lambda k: int(k.split("_")[1]))], json.loads(
        (out / f"result-{worker}.json").read_text()
    )


LAUNCHED: dict[str, Path] = {}


@pytest.mark.process
@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(at=st.integers(1, 38), who=st.sampled_from(["0", "1", "all", "launcher"]))
def test_a_signal_to_one_worker_all_or_the_launcher_stops_every_worker_at_one_step(tmp_path_factory, at, who):
    """Under tfgpu launch --nproc 2 (MultiWorkerMirroredStrategy): SIGTERM to worker 0, worker
    1, both, or the launcher (which passes it on) stops both workers after the same call (the
    workers agree about once a second and at each epoch's end: the signal lands before the
    second epoch ends), one checkpoint is written, the launcher exits 75; the run launched again
    ends at the weights, History and optimizer steps of the run launched once and never stopped."""
    if "unstopped" not in LAUNCHED:
        LAUNCHED["unstopped"] = tmp_path_factory.mktemp("unstopped")
        assert launched(LAUNCHED["unstopped"]).returncode == 0
    want_weights, want = launch_result(LAUNCHED["unstopped"], 0)
    out = tmp_path_factory.mktemp("launch")
    stopped = launched(out, str(at), who)
    assert stopped.returncode == RESUMABLE, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    assert "stopped on request" in stopped.stderr
    (step,) = checkpoints(out / "checkpoints")  # one checkpoint: both workers stopped at one step
    assert at <= step <= 40, (at, step)
    assert f"stopped at step {step}" in stopped.stdout
    assert launched(out).returncode == 0
    for worker in (0, 1):
        got_weights, got = launch_result(out, worker)
        assert got["iterations"] == want["iterations"] == 60
        for a, b in zip(got_weights, want_weights, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        for name, values in want["history"].items():
            np.testing.assert_allclose(got["history"][name], values, rtol=1e-5, atol=1e-6)


@pytest.mark.process
def test_a_stopped_process_is_not_restarted_and_the_launcher_exits_resumable():
    done = run_cli(
        "launch",
        "--nproc",
        "2",
        "--max-restarts",
        "2",
        "--",
        sys.executable,
        "-c",
        f"import sys; print('attempt'); sys.exit({RESUMABLE})",
        timeout=120,
    )
    assert done.returncode == RESUMABLE, done.stderr
    assert done.stdout.count("attempt") == 2  # each process once: no restart
    assert "restarting" not in done.stderr and "stopped on request" in done.stderr


@pytest.mark.process
def test_parameter_server_training_stops_where_the_coordinator_decides_and_resumes(tmp_path):
    """1 chief, 1 ps, 2 workers: SIGTERM to the chief at the first epoch's end stops the run at
    the window after it, saved; the run started again goes on from there to 60 optimizer steps,
    none lost and none twice."""
    from tfgpu.testing.processes import run_cluster

    directory = str(tmp_path / "checkpoints")
    first = run_cluster(
        "bodies:parameter_server_stopped", workers=2, chief=True, ps=1, args=(directory, 0), timeout=300
    )["chief:0"]
    assert first["stopped"] in (10, 15, 20) and first["iterations"] == first["stopped"], first
    assert checkpoints(Path(directory)) == [first["stopped"]]
    second = run_cluster(
        "bodies:parameter_server_stopped", workers=2, chief=True, ps=1, args=(directory, -1), timeout=300
    )["chief:0"]
    assert second == {"steps": 60, "iterations": 60}


def test_the_chief_proposes_a_second_between_agreements_and_calls_a_quarter_of_the_grace():
    """Several workers agree on a stop about once a second, and a call there takes at most the
    steps of a quarter of TFGPU_STOP_GRACE (it cannot end early): from 200 steps in 2 s, a
    period of 100 steps and calls of at most 500 at a grace of 20 s; one slow step, one each."""
    from tfgpu.train.pieces import stopping

    assert stopping.proposals(200, 2.0, grace=20.0) == (100.0, 500.0)
    assert stopping.proposals(1, 30.0, grace=20.0) == (1.0, 1.0)

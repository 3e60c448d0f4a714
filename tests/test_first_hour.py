"""Issue 44: what a newcomer meets in the first hour: a mistyped command or flag, names the README
shows, numbers without units, a cluster of no nodes."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from support.replicas import local_strategy
from tfgpu import cli


def usage_error(capsys, *argv):
    with pytest.raises(SystemExit) as caught:
        cli.main(list(argv))
    assert caught.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (("trian",), "did you mean 'train'?"),
        (("convert", "x.npy", "out", "--resise", "64"), "did you mean '--resize' for '--resise'?"),
        (("train", "task.py", "--epocs", "3"), "did you mean '--epochs' for '--epocs'?"),
        (("launch", "--emit", "kubernetis", "--", "python", "t.py"), "did you mean 'kubernetes'?"),
    ],
)
def test_a_mistyped_command_flag_or_choice_gets_did_you_mean(capsys, argv, hint):
    assert usage_error(capsys, *argv).endswith(hint)


def test_nothing_close_gets_no_guess(capsys):
    line = usage_error(capsys, "zzzzzz")
    assert "invalid choice" in line and "did you mean" not in line


def test_zero_nodes_is_refused(capsys):
    assert cli.main(["launch", "--emit", "kubernetes", "--nodes", "0", "--", "python", "t.py"]) == 2
    assert "--nodes must be at least 1" in capsys.readouterr().err


@pytest.mark.process
def test_the_names_the_readme_shows_resolve_after_importing_the_package():
    """``import tfgpu.testing; tfgpu.testing.fake_nvml`` and ``tfgpu.diagnose.workloads`` raised
    AttributeError until the submodule was imported by hand (the docs test imports them first,
    so only a fresh process sees it)."""
    code = (
        "import tfgpu, tfgpu.testing\n"
        "print(tfgpu.testing.fake_nvml.FakeNvml.__name__, tfgpu.diagnose.workloads.__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["FakeNvml", "tfgpu.diagnose.workloads"]


@pytest.mark.process  # convert's workers are processes
def test_convert_refuses_a_directory_of_the_users_files(tmp_path, capsys):
    """``tfgpu convert x.npy userdir/`` replaced the user's own ``userdir/manifest.json`` without
    a word; now it is refused (exit 2, nothing touched) unless --overwrite; a re-run of tfgpu's
    own conversion there still resumes."""
    import numpy as np

    np.save(tmp_path / "x.npy", np.zeros((20, 3), "float32"))
    userdir = tmp_path / "userdir"
    userdir.mkdir()
    (userdir / "manifest.json").write_text('{"mine": 1}')
    assert cli.main(["convert", str(tmp_path / "x.npy"), str(userdir)]) == 2
    err = capsys.readouterr().err
    assert "holds files tfgpu convert did not write (manifest.json)" in err and "--overwrite" in err
    assert (userdir / "manifest.json").read_text() == '{"mine": 1}' and sorted(
        p.name for p in userdir.iterdir()
    ) == ["manifest.json"]
    out = tmp_path / "fresh"
    assert cli.main(["convert", str(tmp_path / "x.npy"), str(out)]) == 0
    assert cli.main(["convert", str(tmp_path / "x.npy"), str(out)]) == 0  # its own: resumed
    assert cli.main(["convert", str(tmp_path / "x.npy"), str(userdir), "--overwrite"]) == 0
    assert (userdir / "manifest.json").read_text() != '{"mine": 1}'


@pytest.mark.heavy
def test_a_finished_run_started_again_says_so_and_keeps_its_history(tmp_path, caplog):
    """Running a ``tfgpu.fit(..., checkpoint_dir=...)`` script twice: the second run resumed at
    its end and returned an empty History without a word (the script's
    ``history.history["val_loss"]`` raised KeyError). Now it says so and gives the History back."""
    import keras
    import numpy as np

    import tfgpu

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 4)).astype("float32"), rng.normal(size=(64, 1)).astype("float32")

    def run():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        return tfgpu.fit(
            model,
            x,
            y,
            batch_size=16,
            epochs=3,
            verbose=0,
            validation_split=0.25,
            checkpoint_dir=tmp_path,
            strategy=local_strategy(1),
        )

    first = run().history
    with caplog.at_level("WARNING", logger="tfgpu"):
        again = run()
    assert again.epoch == [0, 1, 2] and set(again.history) == set(first)
    for key, values in first.items():
        assert again.history[key] == pytest.approx(values, rel=1e-6), key
    assert len(again.history["val_loss"]) == 3
    assert any("holds a finished run" in r.getMessage() for r in caplog.records)


def test_a_kept_default_is_not_shown_as_a_slowdown_and_a_spent_budget_is_said_once():
    from tfgpu.train import tuning

    kept = tuning.Trial(
        knob="together",
        baseline="a",
        candidate="b",
        baseline_examples_per_s=31087.0,
        candidate_examples_per_s=18154.0,
        ratio=0.584,
        spread=(0.58, 0.59),
        decision="drop",
    )
    notes = ["budget of 8 s spent: input not tried", "budget of 8 s spent: XLA not tried"]
    line = tuning.Tuning(4.0, {"steps_per_execution": 100}, {}, [kept], notes).line()
    assert "->" not in line and line.count("budget of 8 s spent") == 1
    assert line.endswith("budget of 8 s spent: input and XLA not tried")
    taken = tuning.Tuning(4.0, {}, {}, [dataclasses.replace(kept, decision="take")]).line()
    assert "(31,087 -> 18,154 examples/s)" in taken


@pytest.mark.model
def test_smaller_things_a_user_meets():
    import keras

    from tfgpu.doctor.known_issues import KNOWN_ISSUES
    from tfgpu.errors import ConfigError
    from tfgpu.train.step import footprint

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    with pytest.raises(ConfigError, match="'bf16', 'fp16' or 'fp32'"):  # it named Keras's policies
        footprint._check(model, 32, "mixed_bfloat16")
    fixes = {issue.key: issue.fix for issue in KNOWN_ISSUES}
    assert "tfgpu.fit" in fixes["keras#20582"] and "tfgpu.fit" in fixes["keras#21207"]


def test_a_fix_measured_slower_is_reported_as_tried_not_advised_first():
    """diagnose --apply put first prefetch, estimated 1.09x and measured 0.87x."""
    from tfgpu.diagnose.advice import Advice, ranked_by_measurement

    prefetch = Advice("prefetch", "add a prefetch", 1.09, measured_speedup=0.87)
    batch = Advice("increase-batch-size", "double the batch", 1.05)
    parallel = Advice("parallelize-map", "map in parallel", 1.2, measured_speedup=1.4)
    ranked = ranked_by_measurement([prefetch, batch, parallel])
    assert [a.kind for a in ranked] == ["parallelize-map", "increase-batch-size", "prefetch"]
    assert prefetch.tried and prefetch.to_dict()["tried"] and not parallel.tried


def test_the_demo_phases_are_said_as_they_start(capsys, monkeypatch):
    from tfgpu.cli import _progress

    monkeypatch.setenv("TFGPU_PROGRESS", "lines")
    with _progress.phases("demo") as update:
        update("doctor", 0, 0)
        update("data", 0, 0)
        update("data", 760, 760)
        update("train", 0, 0)
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == "tfgpu demo: doctor: is TensorFlow using the GPU?"
    assert [line.split(": ")[1] for line in lines] == ["doctor", "data", "train"]
    monkeypatch.delenv("TFGPU_PROGRESS")
    with _progress.phases("demo", machine_output=True) as update:  # --json: stdout is the JSON
        update("doctor", 0, 0)
    assert capsys.readouterr().err == ""


@pytest.mark.heavy
def test_a_checkpoint_of_another_model_is_one_message_and_nothing_trains(tmp_path):
    """README's fit block and its `tfgpu train` both wrote to ckpt/: the second run restored the
    first model's checkpoint into its own variables and died in a Keras traceback (found by
    running the README's blocks in order)."""
    import keras

    import tfgpu
    from tfgpu.errors import InputError

    x = np.zeros((96, 4), "float32")
    y = np.zeros((96, 1), "float32")

    def model(width):
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(width), keras.layers.Dense(1)])
        m.compile(optimizer="sgd", loss="mse")
        return m

    tfgpu.fit(model(3), x, y, epochs=1, batch_size=48, checkpoint_dir=str(tmp_path), verbose=0)
    other = model(5)
    before = [w.copy() for w in other.get_weights()]
    with pytest.raises(InputError, match="is not of this model") as raised:
        tfgpu.fit(other, x, y, epochs=1, batch_size=48, checkpoint_dir=str(tmp_path), verbose=0)
    assert "own checkpoint directory" in str(raised.value)
    assert all(np.array_equal(a, b) for a, b in zip(before, other.get_weights(), strict=True))


def test_verbose_goes_after_the_command_too():
    """Errors say "run with --verbose"; users add it at the end, where it was refused."""
    parser = cli.build_parser()
    assert parser.parse_args(["doctor", "--verbose"]).verbose is True
    assert parser.parse_args(["--verbose", "doctor"]).verbose is True
    assert parser.parse_args(["doctor"]).verbose is False


def test_epoch_lines_break_between_fields_at_80_columns():
    from tfgpu.cli._common import packed

    fields = [
        "epoch 1",
        "steps 1",
        "accuracy 0.5000",
        "loss 0.7136",
        "val_accuracy 0.5000",
        "val_loss 0.7648",
    ]
    lines = packed(fields, width=80)
    assert all(len(line) <= 80 for line in lines)
    assert " ".join(" ".join(lines).split()) == " ".join(" ".join(fields).split())
    assert lines[1].strip() == "val_loss 0.7648"  # the value stays with its name


@pytest.mark.process
def test_train_on_an_80_column_terminal_shows_tfgpus_lines_whole(tmp_path):
    """As a person sees it (pyte reads the pty): the epoch lines broke "val_loss" from its value."""
    import tfgpu.quiet
    from terminal import on_terminal

    seen = on_terminal("train", "tasks.py:make_task", "--epochs", "2", cwd=str(Path(__file__).parent))
    assert seen.returncode == 0, "\n".join(seen.lines)
    assert seen.wider_than_the_terminal() == [], seen.lines
    assert [line for line in seen.lines if tfgpu.quiet.is_noise(line)] == []
    epochs = [line for line in seen.lines if line.startswith("  epoch ")]
    assert len(epochs) == 2
    orphans = [line for line in seen.lines if line.strip().replace(".", "").isdigit()]
    assert orphans == [], seen.lines  # a value wrapped away from its name
    assert any(line.startswith("trained ") for line in seen.lines)


def test_a_tensorflow_error_of_several_replicas_says_what_failed_and_where():
    """Issue 43 item 7: `tfgpu train` reported only TensorFlow's last line, "0 derived errors
    ignored"; and find_batch_size's C++ log left its node context line on stderr (issue 44)."""
    import tensorflow as tf

    from tfgpu import quiet, usercode

    text = (
        "Graph execution error:\n\nDetected at node while/body/_10/while/replica_1/sequential_1/dense_1/BiasAdd"
        ' defined at (most recent call last):\n  File "x.py", line 3\n2 root error(s) found.\n'
        "  (0) INVALID_ARGUMENT:  Matrix size-incompatible: In[0]: [0,3], In[1]: [8,2]\n"
        "\t [[{{node while/body/_10/while/replica_1/sequential_1/dense_1/MatMul}}]]\n"
        "  (1) INVALID_ARGUMENT:  Matrix size-incompatible: In[0]: [0,3], In[1]: [8,2]\n"
        "0 derived errors ignored. [Op:__inference_execute_1796]"
    )
    assert usercode.one_line(tf.errors.InvalidArgumentError(None, None, text)) == (
        "InvalidArgumentError: Matrix size-incompatible: In[0]: [0,3], In[1]: [8,2] "
        "(at replica_1/sequential_1/dense_1)"
    )
    assert quiet.is_noise("\t [[{{node MultiDeviceIteratorGetNextFromShard}}]]")
    assert not quiet.is_noise("[[ a line of the user's own ]]")


DIAGNOSED = """
import tensorflow as tf


def dataset():
    return tf.data.Dataset.range(4096).map(lambda i: tf.fill([16], tf.cast(i, tf.float32))).batch(32)
"""


def _terminal_command(command: str, tmp_path: Path) -> tuple[str, ...]:
    """The command as a user types it, with what it reads made in ``tmp_path``."""
    import keras

    if command == "tune":  # the task beside the user, as the command it prints names it
        (tmp_path / "tasks.py").write_text((Path(__file__).parent / "tasks.py").read_text())
        return (
            "tune",
            "tasks.py:make_task",
            "--knobs",
            "steps_per_execution",
            "--budget",
            "4",
            "--out",
            "t.json",
        )
    if command == "diagnose":
        (tmp_path / "inputs.py").write_text(DIAGNOSED)
        return ("diagnose", "--dataset", "inputs:dataset", "--step-time", "2ms")
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)]
    )
    model.save(tmp_path / "m.keras")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).normal(size=(4000, 8)).astype("float32"))
    return ("predict", "m.keras", "x.npy", "out")


@pytest.mark.process
@pytest.mark.parametrize("command", ["tune", "diagnose", "predict"])
def test_tune_diagnose_and_predict_on_an_80_column_terminal(command, tmp_path):
    """As a person sees them (pyte reads the pty, 80 x 24): the command says something before
    its work is done, only tfgpu's lines reach the screen, and none is wider than the terminal
    (which would break it mid-word: rich breaks its own between words)."""
    import tfgpu.quiet
    from terminal import on_terminal

    seen = on_terminal(
        *_terminal_command(command, tmp_path), cwd=str(tmp_path), env={"TFGPU_LOGICAL_CPUS": "1"}
    )
    # diagnose exits 1 when it finds a bottleneck to fix (docs: exit codes)
    assert seen.returncode in ((0, 1) if command == "diagnose" else (0,)), "\n".join(seen.lines)
    assert [line for line in seen.lines if tfgpu.quiet.is_noise(line)] == [], seen.lines
    assert seen.wider_than_the_terminal() == [], seen.lines
    said = {
        "tune": "tune: measuring steps per call",
        "diagnose": "measuring the pipeline, the device",
        "predict": "predict",
    }
    assert any(said[command] in line for line in seen.lines), seen.lines
    if command != "predict":  # it talks while it measures (it was silent until the end: issue 44)
        assert seen.total_s - seen.first_output_s > 0.5, (seen.first_output_s, seen.total_s)

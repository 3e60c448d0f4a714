"""Issue 44: what a newcomer meets in the first hour: a mistyped command or flag, names the README
shows, numbers without units, a cluster of no nodes."""

from __future__ import annotations

import subprocess
import sys

import pytest

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

"""Every verb takes every input form Keras's verbs take, decided once at one door (issue 75).

``tfgpu.fit``, ``tfgpu.evaluate`` and ``tfgpu.predict`` over arrays, lists and dicts of arrays,
tensors, pandas frames, sample weights, ``tf.data`` of x, (x, y) and (x, y, sample_weight),
``keras.utils.PyDataset`` (with workers too) and generators, on one device and on 2 replicas,
with a short last batch, against Keras's own verbs on one device: weights and history for fit,
the results for evaluate, the outputs for predict. Data tfgpu cannot take is said in one
message. And the shape that keeps it so: what the data is is asked in one module
(``train/inputs/adapters.py``), each verb enters it at one call site, and no class reading data is
over 150 lines.
"""

from __future__ import annotations

import ast
import json
import pickle
import re
import sys
from pathlib import Path
from typing import ClassVar

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tfgpu
from input_forms import CASES, FORMS, LAUNCHED, Batches, data, generator, run, small_model
from support.parity import same
from support.replicas import local_strategy

SRC = Path(__file__).resolve().parent.parent / "src" / "tfgpu"


def check_form(form, verb, replicas, rows, batch):
    x, y, w = data(rows)
    two = FORMS[form][0]
    expected = run(verb, form, small_model(two), x, y, w, batch, ours=False)
    with local_strategy(replicas).scope():  # one replica: OneDevice, not tfgpu's choice of all
        model = small_model(two)
    same(run(verb, form, model, x, y, w, batch, ours=True), expected, rtol=2e-5, atol=2e-6)


@pytest.mark.heavy
@pytest.mark.parametrize(("form", "verb"), CASES)
def test_each_form_each_verb_on_two_replicas_gives_keras_s_one_device_numbers(form, verb):
    """37 rows in global batches of 8: four whole batches and a short one of 5 (uneven over 2)."""
    check_form(form, verb, 2, 37, 8)


@pytest.mark.heavy
@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    case=st.sampled_from(CASES),
    replicas=st.sampled_from([1, 2]),
    rows=st.integers(9, 70),
    batch=st.sampled_from([4, 8, 16, 20]),
)
def test_drawn_forms_verbs_replicas_and_short_batches_give_keras_s_numbers(case, replicas, rows, batch):
    # a last batch of one row on 2 replicas is dropped in training (a replica would have none)
    assume(case[1] != "fit" or rows % batch != 1 or replicas == 1)
    check_form(*case, replicas, rows, batch)


@pytest.mark.slow
@pytest.mark.process
def test_three_forms_under_tfgpu_launch_fit_and_predict_as_keras_on_one_device(tmp_path):
    """Arrays, a PyDataset and a generator, as written (no strategy passed: tfgpu takes
    TF_CONFIG's), on 2 workers: each worker ends with Keras's one-device weights and history,
    and predicts every row once, in input order."""
    from support.processes import run_cli

    script = Path(__file__).parent / "scripts" / "input_forms.py"
    done = run_cli("launch", "--nproc", "2", "--", sys.executable, str(script), str(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    x, y, w = data(37)
    for worker in ("worker-0", "worker-1"):
        strategy = json.loads((tmp_path / f"{worker}-strategy.json").read_text())
        assert "MultiWorkerMirrored" in strategy["value"], strategy
        with open(tmp_path / f"{worker}-forms.pkl", "rb") as handle:
            results = pickle.load(handle)
        for verb, form in LAUNCHED:
            expected = run(verb, form, small_model(FORMS[form][0]), x, y, w, 8, ours=False)
            same(results[f"{verb}-{form}"], expected, rtol=2e-5, atol=2e-6)


# -- what cannot be taken ------------------------------------------------------------------------
class Endless(keras.utils.PyDataset):
    """Keras's infinite PyDataset: ``num_batches`` None."""

    @property
    def num_batches(self):
        return None

    def __getitem__(self, index):
        x, y, _ = data(8)
        return x, y


class Changing(keras.utils.PyDataset):
    """Batches whose structure changes: (x, y), then x alone."""

    def __len__(self):
        return 3

    def __getitem__(self, index):
        x, y, _ = data(8)
        return (x, y) if index == 0 else x


@pytest.mark.model
@pytest.mark.parametrize("verb", ["fit", "evaluate", "predict"])
def test_an_endless_py_dataset_without_steps_is_one_message_naming_the_argument(verb):
    model = small_model(False)
    argument = "steps_per_epoch" if verb == "fit" else "steps"
    with pytest.raises(tfgpu.ConfigError, match=f"has no end .*{argument} is not set") as caught:
        getattr(tfgpu, verb)(model, Endless(), verbose=0)
    assert f"pass {argument}=N" in caught.value.fix


@pytest.mark.heavy
def test_an_endless_py_dataset_with_steps_is_read_as_keras_reads_it():
    expected = small_model(False)
    keras_out = expected.predict(Endless(), steps=3, verbose=0)
    model = small_model(False)
    np.testing.assert_allclose(tfgpu.predict(model, Endless(), steps=3, verbose=0), keras_out, rtol=1e-6)
    history = tfgpu.fit(model, Endless(), steps_per_epoch=2, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and int(model.optimizer.iterations) == 4


@pytest.mark.model
@pytest.mark.parametrize("verb", ["fit", "predict"])
def test_a_py_dataset_whose_batches_change_structure_is_one_message(verb):
    with pytest.raises(
        tfgpu.ConfigError, match="PyDataset's first batches cannot be read as batches of tensors"
    ) as caught:
        getattr(tfgpu, verb)(small_model(False), Changing(), verbose=0)
    assert "same structure" in caught.value.fix


@pytest.mark.model
def test_a_generator_of_arrays_not_tuples_is_one_message_with_keras_s_reason():
    x, _, _ = data(16)
    with pytest.raises(tfgpu.ConfigError, match="must return a tuple") as caught:
        tfgpu.predict(small_model(False), (x[i : i + 8] for i in range(0, 16, 8)), verbose=0)
    assert "(x,)" in caught.value.fix and "[[" not in str(caught.value)


@pytest.mark.model
def test_predict_of_a_dataset_directory_without_output_says_how(tmp_path):
    with pytest.raises(tfgpu.ConfigError, match="a dataset directory is not one of them") as caught:
        tfgpu.predict(small_model(False), str(tmp_path), batch_size=None)
    assert "output=" in caught.value.fix


@pytest.mark.model
def test_y_beside_a_generator_is_one_message():
    x, y, _ = data(16)
    with pytest.raises(
        tfgpu.ConfigError, match="y and sample_weight go inside x when it is a Python generator"
    ):
        tfgpu.fit(small_model(False), generator((x, y), 8), y, verbose=0)


@pytest.mark.heavy
def test_a_py_dataset_s_epoch_hooks_are_called_as_keras_calls_them():
    """Keras's fit and evaluate end an epoch before they begin (their iterator's reset: a
    PyDataset that reshuffles in ``on_epoch_end`` starts shuffled); predict does not."""

    class Counted(Batches):
        calls: ClassVar[list[str]] = []

        def on_epoch_begin(self):
            Counted.calls.append("begin")

        def on_epoch_end(self):
            Counted.calls.append("end")

    x, y, _ = data(20)
    model = small_model(False)
    for verb, parts, keywords in (
        ("fit", (x, y), {"epochs": 2}),
        ("evaluate", (x, y), {}),
        ("predict", (x,), {}),
    ):
        Counted.calls = []
        getattr(model, verb)(Counted(parts, 8), verbose=0, **keywords)
        keras_calls = Counted.calls
        Counted.calls = []
        getattr(tfgpu, verb)(model, Counted(parts, 8), verbose=0, **keywords)
        assert Counted.calls == keras_calls, (verb, Counted.calls, keras_calls)


# -- the shape that keeps it so ------------------------------------------------------------------
KIND_TESTS = re.compile(
    r"isinstance\([^)]*(tf\.data\.Dataset|DatasetV2|PyDataset|GeneratorType|utils\.Sequence)"
    r"|\bkind_of\(|\bis_arrays\(|\bsources\.(ARRAYS|DATASET|DIRECTORY|FUNCTION|of)\b"
    r"|callable\([^)]*(train_data|eval_data)"
)


def test_what_the_data_is_is_asked_in_the_adapters_module_alone():
    found = [
        f"{path.relative_to(SRC)}:{number}: {line.strip()}"
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "adapters.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if KIND_TESTS.search(line)
    ]
    assert not found, "a test of what the data is outside train/inputs/adapters.py:\n" + "\n".join(found)


def test_the_kind_test_pattern_finds_what_it_looks_for():
    """The reading above can fail: these lines are what it refuses."""
    for line in (
        "if isinstance(x, tf.data.Dataset):",
        "if isinstance(x, keras.utils.PyDataset):",
        "elif isinstance(x, types.GeneratorType):",
        "kind = sources.kind_of(task.train_data)",
        "if callable(task.train_data) or ...",
    ):
        assert KIND_TESTS.search(line), line


DATA_MODULES = ("train/inputs/adapters.py", "train/inputs/readers.py")


def test_no_class_that_reads_data_is_over_150_lines():
    big = [
        f"{name}: {node.name} {node.end_lineno - node.lineno + 1} lines"
        for name in DATA_MODULES
        for node in ast.parse((SRC / name).read_text()).body
        if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > 150
    ]
    assert not big, big


def test_each_verb_enters_the_door_at_one_call_site():
    """A static walk (``call_graph``) from ``tfgpu.fit``, ``tfgpu.evaluate`` and ``tfgpu.predict``:
    the calls of ``adapters.of`` written outside the adapters module; the Trainer's door for a
    Task's data (``adapters.through_door``) is entered once too."""
    from support.call_graph import CallGraph

    graph = CallGraph("tfgpu")
    door = "tfgpu.train.inputs.adapters"

    def sites(start, name):
        return sorted(
            (node, call.lineno)
            for node in graph.reachable(start)
            if node[0] != door
            for call, targets in graph.calls(node)
            if (door, name) in targets
        )

    for verb in (
        ("tfgpu.train.keras_fit", "fit"),
        ("tfgpu.train.keras_fit", "evaluate"),
        ("tfgpu.predict.memory", "predict_arrays"),
    ):
        entered = sites(verb, "of")
        assert len(entered) == 1, (verb, entered)
    trainer = sites(("tfgpu.train.run.trainer", "Trainer.__init__"), "through_door")
    assert [node for node, _ in trainer] == [("tfgpu.train.run.trainer", "_through_door")], trainer

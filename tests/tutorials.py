"""tensorflow/docs' tutorials as ``examples/tutorials/`` keeps them, loaded as modules, and what a
parameter-server tutorial's chief must end with: shared by tests/test_parity_workers.py (under
``tfgpu launch``) and tests/test_kubernetes.py (as a JobSet's pods)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

from support.parity import same

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def tutorial(name: str):
    """``examples/tutorials/NAME.py``: its path, and the module it is (run once, as a user's import runs it)."""
    path = EXAMPLES / "tutorials" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"tutorial_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module


def ps_tutorial_trained_as_keras(tutorial, out: Path) -> None:
    """The chief of the parameter-server tutorial saved, in ``out``, Keras's one-device weights and
    history, every step counted (its steps run in order on one worker)."""
    import tensorflow as tf

    result = json.loads((out / "chief.json").read_text())
    assert result["iterations"] == 100 and len(result["history"]["loss"]) == 5
    expected = tutorial.build_model()
    history = expected.fit(
        tutorial.dataset_fn(tf.distribute.InputContext()), epochs=5, steps_per_epoch=20, verbose=0
    )
    weights = np.load(out / "chief.npz")
    same([weights[f"arr_{i}"] for i in range(len(weights.files))], expected.get_weights())
    same(result["history"], history.history)

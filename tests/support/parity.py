"""One comparator for "tfgpu's run equals Keras's" and the two ways an example runs.

``same(ours, keras_)`` compares whatever a run gives: weights (a list of arrays), a History's
dict, evaluate's float, list or dict, predict's arrays, or a dict of all of those (a guide's run),
to one tolerance, and reports every place that differs with its path (``history.loss[1]``), not
only the first.

The rules every parity example keeps (tests/test_parity_*.py; ``support.examples`` is their
registry): the program is written as its author wrote it (a keras-io or tensorflow/docs guide or
example, or real code the team met), shrunk to seconds on synthetic data of its shapes and dtypes
(no downloads); the only change a user makes is ``model.fit(...)`` -> ``tfgpu.fit(model, ...)``
(``evaluate`` and ``predict`` likewise), with the strategy passed where the model is built outside
any scope. It runs twice through the same function, once with ``KERAS`` (Keras's own methods) and
once with ``TFGPU`` / ``tfgpu_with(strategy)`` (2 replicas unless it says otherwise), and the two
must agree (``same``: histories, weights, evaluate and predict).

The reference is Keras's fit on one device from the same initial weights
(``keras.utils.set_random_seed`` before anything is built, so the same initializers and tf.data
shuffles) and ``shuffle=False`` where arrays are fit. Where a figure is per replica (Dropout's
masks, BatchNormalization's batch statistics, random ops in a ``train_step``, a loss summed over
the batch, ``add_loss``, which Keras scales by 1/replicas), the reference is Keras's own fit under
the same strategy: of the model built in its scope, or of its copy moved there (``KerasUnder``, as
tfgpu re-creates it, so Dropout draws the same seeds); the test's docstring says so, and names
every line that differs from the source ("test-only" lines make the two runs comparable and are no
user's change: ``shuffle=False``, ``reshuffle_each_iteration=False`` where a reshuffling dataset is
read for several epochs, a seed set again before a model built after tfgpu re-created an earlier
one).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from types import SimpleNamespace
from typing import Any

import numpy as np

RTOL, ATOL = 1e-5, 1e-6


def same(
    ours: Any, keras_: Any, *, rtol: float = RTOL, atol: float = ATOL, keys: Iterable[str] | None = None
) -> None:
    """Assert ``ours`` equals ``keras_`` to ``rtol`` / ``atol``: mappings key by key (the same
    keys; ``keys``: only those of a top-level mapping), sequences item by item (the same length),
    numbers and arrays with ``np.testing.assert_allclose`` (a NaN never equals), anything else
    (strings, None) with ``==``."""
    if keys is not None:
        keys = list(keys)
        missing = sorted(set(keys) - set(ours))
        assert not missing, f"missing from ours: {missing}"
        ours, keras_ = {k: ours[k] for k in keys}, {k: keras_[k] for k in keys}
    differ = differences(ours, keras_, rtol=rtol, atol=atol)
    assert not differ, "differs from Keras: " + "; ".join(differ)


def differences(
    ours: Any, keras_: Any, *, rtol: float = RTOL, atol: float = ATOL, path: str = ""
) -> list[str]:
    """Each place where ``ours`` and ``keras_`` differ, as ``path: what``."""
    where = path or "value"
    if isinstance(keras_, Mapping):
        if not isinstance(ours, Mapping) or set(ours) != set(keras_):
            return [
                f"{where}: keys {sorted(ours) if isinstance(ours, Mapping) else ours!r} != {sorted(keras_)}"
            ]
        return [
            d
            for k in keras_
            for d in differences(ours[k], keras_[k], rtol=rtol, atol=atol, path=_at(path, k))
        ]
    if _numeric(keras_) or _numeric(ours):
        return _close(ours, keras_, rtol=rtol, atol=atol, where=where)
    if isinstance(keras_, list | tuple):
        if not isinstance(ours, list | tuple) or len(ours) != len(keras_):
            return [
                f"{where}: {len(ours) if isinstance(ours, list | tuple) else ours!r} items != {len(keras_)}"
            ]
        pairs = enumerate(zip(ours, keras_, strict=True))
        return [
            d for i, (a, b) in pairs for d in differences(a, b, rtol=rtol, atol=atol, path=f"{where}[{i}]")
        ]
    return [] if ours == keras_ else [f"{where}: {ours!r} != {keras_!r}"]


def _at(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _numeric(value: Any) -> bool:
    """A number, an array or a tensor, or a (nested) list of numbers: compared as one array."""
    if isinstance(value, bool | str | Mapping) or value is None:
        return False
    if isinstance(value, int | float | np.number | np.ndarray) or hasattr(value, "numpy"):
        return True
    if not (isinstance(value, list) and value):
        return False
    try:  # a rectangular list of numbers (weights read back from JSON), not a list of parts
        return np.asarray(value).dtype.kind in "iuf"
    except ValueError:
        return False


def _close(ours: Any, keras_: Any, *, rtol: float, atol: float, where: str) -> list[str]:
    try:
        np.testing.assert_allclose(
            np.asarray(ours), np.asarray(keras_), rtol=rtol, atol=atol, equal_nan=False
        )
    except AssertionError as exc:
        shown = [line.strip() for line in str(exc).splitlines() if line.strip()]
        return [f"{where}: {' | '.join(shown[:4])}"]
    return []


# -- the two ways an example runs ------------------------------------------------------------------
# Keras's own fit / evaluate / predict, called as tfgpu's are: ``verb(model, ...)``
KERAS = SimpleNamespace(
    name="keras",
    fit=lambda model, *args, **kwargs: model.fit(*args, **kwargs),
    evaluate=lambda model, *args, **kwargs: model.evaluate(*args, **kwargs),
    predict=lambda model, *args, **kwargs: model.predict(*args, **kwargs),
)


def __getattr__(name: str) -> Any:
    """``TFGPU``: tfgpu's fit / evaluate / predict (made when asked: tfgpu's verbs import TensorFlow)."""
    if name == "TFGPU":
        import tfgpu

        return SimpleNamespace(name="tfgpu", fit=tfgpu.fit, evaluate=tfgpu.evaluate, predict=tfgpu.predict)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def tfgpu_with(strategy: Any, everywhere: bool = False) -> SimpleNamespace:
    """tfgpu for a model made outside any scope: ``strategy=`` passed to ``tfgpu.fit`` and
    ``tfgpu.evaluate`` (predict then runs where tfgpu puts it: ``tfgpu.strategy()``, 3 replicas
    in this process); ``everywhere``: passed to ``tfgpu.predict`` too, which takes it."""
    import tfgpu

    return SimpleNamespace(
        name="tfgpu",
        fit=functools.partial(tfgpu.fit, strategy=strategy),
        evaluate=functools.partial(tfgpu.evaluate, strategy=strategy),
        predict=functools.partial(tfgpu.predict, strategy=strategy) if everywhere else tfgpu.predict,
    )


class KerasUnder:
    """Keras's own fit / evaluate / predict of a model made outside any scope, run on that model
    moved into ``strategy``'s scope in place (``placement.moved_in``, what tfgpu does): the same
    weights and Dropout seeds as the model tfgpu trains."""

    name = "keras"

    def __init__(self, strategy: Any) -> None:
        self.strategy = strategy

    def _placed(self, model: Any) -> Any:
        from tfgpu.train.model import placement

        if getattr(model, "_distribute_strategy", None) is not self.strategy:
            placement.moved_in(model, self.strategy)
        return model

    def fit(self, model, *args, **kwargs):
        return self._placed(model).fit(*args, **kwargs)

    def evaluate(self, model, *args, **kwargs):
        return self._placed(model).evaluate(*args, **kwargs)

    def predict(self, model, *args, **kwargs):
        return self._placed(model).predict(*args, **kwargs)


def in_scope(strategy: Any, build: Any) -> Any:
    """``build()`` called in ``strategy``'s scope: a model made and compiled there."""
    with strategy.scope():
        return build()

"""tfgpu's own graph code runs as written: no AutoGraph.

Keras 3 traces its step functions with AutoGraph off (``do_not_convert`` on ``one_step_on_data``
and ``multi_step_on_iterator``), so a one-epoch ``model.fit`` converts nothing. tfgpu's loop, its
helpers and its input maps are written with ``tf.while_loop`` / ``tf.cond`` and Python that runs
once, while tracing; converted, they cost a one-epoch fit of keras-io's mnist_convnet 37
conversions and 1.5 s on the CPU (issue 65), and the user's ``train_step`` was converted with them,
which Keras's ``fit`` never does. Every ``tf.function`` tfgpu makes passes ``autograph=False``, and
every function tfgpu hands to tf.data (``map``, ``flat_map``, ``interleave``, ...) goes through
``as_written``. ``tests/test_fit_path.py`` counts the conversions of a fit, an evaluation and a
prediction: none.

Two more rules for how tfgpu's compiled loops run, decided here once: a model compiled with
``run_eagerly=True`` gets them run eagerly (``traced``), as Keras runs its own steps then; and
under op determinism they read no clock (``clock_readable``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def as_written(function: F) -> F:
    """``function`` marked so tf.data (and a ``tf.function`` that calls it) traces it as it is,
    without converting its Python control flow."""
    import tensorflow as tf

    return tf.autograph.experimental.do_not_convert(function)


def traced(function: F, *, model: Any = None) -> F:
    """``tf.function(function, autograph=False)``, or ``function`` itself, run eagerly, for a
    ``model`` compiled with ``run_eagerly=True``: Keras's ``fit`` then calls its step without
    tracing it (one debugs a step so, printing a tensor's value), on one device and under a
    strategy alike, and a traced step failed there ("must be real number, not SymbolicTensor")."""
    import tensorflow as tf

    if eager(model):
        return function
    return tf.function(function, autograph=False)


def eager(model: Any) -> bool:
    """Whether ``model`` asks for its steps to run eagerly (``compile(run_eagerly=True)``)."""
    return bool(getattr(model, "run_eagerly", False))


def clock_readable() -> bool:
    """Whether a compiled loop may read the host's clock (``tf.timestamp``): op determinism
    forbids it ("Timestamp cannot be called when determinism is enabled"), and every fit of a
    reproducibility recipe (``keras.utils.set_random_seed`` with
    ``tf.config.experimental.enable_op_determinism()``) failed on the input-wait timestamps. The
    loops then time nothing in the graph, and the result says the input wait was not measured.
    Read when a loop is traced: determinism is set once, before the first op."""
    from tensorflow.python.framework import config  # no public reader in TensorFlow 2.16-2.21

    return not config.is_op_determinism_enabled()

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

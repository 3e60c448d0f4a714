"""Batch prediction on every GPU and worker, in input order, streamed to disk, resumable."""

from __future__ import annotations

import os
from typing import Any

from tfgpu.callable_module import make_callable
from tfgpu.errors import ConfigError
from tfgpu.predict.engine import PredictOptions, PredictResult
from tfgpu.predict.engine import predict as predict_to_disk
from tfgpu.predict.models import Predictor, load_predictor
from tfgpu.predict.writers import read_output


def predict(
    model: Any,
    x: Any = None,
    batch_size: int | None = None,
    verbose: Any = "auto",
    steps: int | None = None,
    callbacks: Any = None,
    *,
    output: str | os.PathLike | None = None,
    input: Any = None,
    **options: Any,
) -> Any:
    """Predict ``model`` on ``x``.

    Without ``output``: ``Model.predict``'s arguments and result, on every replica of the
    model's strategy: a Keras model over arrays (or a dict / list of arrays) or a
    ``tf.data.Dataset`` of global batches, the outputs as NumPy arrays in input order (keywords
    ``steps_per_execution``, ``strategy`` added). With an ``output`` directory (a keyword, or a
    path as the third argument: ``predict("model.keras", "data/", "out/")``): the saved model
    (a path) over the input file or dataset directory ``x``, each worker its part, streamed to
    disk in order and resumable (see ``tfgpu.predict.engine.predict``; returns a PredictResult;
    keywords ``options``, ``strategy``, ``overwrite``...).
    """
    x = input if x is None else x
    if isinstance(batch_size, str | os.PathLike) and output is None:
        # predict(model_path, input, "out/"): a path is never a batch size, so the third
        # argument names the output directory, as before Keras's positional batch_size was taken
        output, batch_size = batch_size, None
    if output is None:
        from tfgpu.predict.memory import predict_arrays
        from tfgpu.train.model import placement

        with placement.handed_back(model):  # a one-device Keras model again after, as its user made it
            return predict_arrays(
                model, x, batch_size=batch_size, verbose=verbose, steps=steps, callbacks=callbacks, **options
            )
    if batch_size is not None or steps is not None or callbacks is not None:
        raise ConfigError(
            "batch_size, steps and callbacks are model.predict's; prediction to a directory takes options=",
            value={"batch_size": batch_size, "steps": steps, "callbacks": callbacks},
            fix="pass options=tfgpu.predict.PredictOptions(batch_size=...)",
        )
    return predict_to_disk(model, x, str(output), **options)


__all__ = [
    "PredictOptions",
    "PredictResult",
    "Predictor",
    "load_predictor",
    "predict",
    "predict_to_disk",
    "read_output",
]


make_callable(__name__, predict)  # tfgpu.predict(...) whatever was imported first (see callable_module)

"""Batch prediction on every GPU and worker, in input order, streamed to disk, resumable."""

from __future__ import annotations

from typing import Any

from tfgpu.callable_module import make_callable
from tfgpu.predict.engine import PredictOptions, PredictResult
from tfgpu.predict.engine import predict as predict_to_disk
from tfgpu.predict.models import Predictor, load_predictor
from tfgpu.predict.writers import read_output


def predict(model: Any, input: Any, output: str | None = None, **options: Any) -> Any:
    """Predict ``model`` on ``input``.

    With an ``output`` directory: the saved model (a path) over the input file or dataset
    directory, each worker its part, streamed to disk in order and resumable (see
    ``tfgpu.predict.engine.predict``; returns a PredictResult). Without one: a Keras model over
    arrays in memory, as ``model.predict`` does, on every replica of its strategy (returns the
    outputs as NumPy arrays in input order; keywords ``batch_size``, ``steps_per_execution``,
    ``strategy``).
    """
    if output is None:
        from tfgpu.predict.memory import predict_arrays

        return predict_arrays(model, input, **options)
    return predict_to_disk(model, input, output, **options)


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

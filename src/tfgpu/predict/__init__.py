"""Batch prediction on every GPU and worker, in input order, streamed to disk, resumable."""

from tfgpu.predict.engine import PredictOptions, PredictResult, predict
from tfgpu.predict.models import Predictor, load_predictor
from tfgpu.predict.writers import read_output

__all__ = ["PredictOptions", "PredictResult", "Predictor", "load_predictor", "predict", "read_output"]

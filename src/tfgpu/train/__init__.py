"""Training on every GPU and worker: ``Task`` says what, ``Trainer`` runs the in-graph loop."""

from tfgpu.train.batch_size import find_batch_size
from tfgpu.train.loop import OutOfMemoryError, Trainer
from tfgpu.train.options import Progress, TrainOptions, TrainResult
from tfgpu.train.task import Task

__all__ = [
    "OutOfMemoryError",
    "Progress",
    "Task",
    "TrainOptions",
    "TrainResult",
    "Trainer",
    "find_batch_size",
]

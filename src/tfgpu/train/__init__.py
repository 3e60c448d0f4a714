"""Training on every GPU and worker: ``Task`` says what, ``Trainer`` runs it (a setup, a loop and a
tuning session: ``train.run.trainer``)."""

from tfgpu.train.loop.result import Progress, TrainResult
from tfgpu.train.loop.training import OutOfMemoryError
from tfgpu.train.pieces.options import Placement, TrainOptions
from tfgpu.train.pieces.task import Task
from tfgpu.train.run.batch_size import find_batch_size
from tfgpu.train.run.trainer import Trainer

__all__ = [
    "OutOfMemoryError",
    "Placement",
    "Progress",
    "Task",
    "TrainOptions",
    "TrainResult",
    "Trainer",
    "find_batch_size",
]

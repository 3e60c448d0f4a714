"""Training on every GPU and worker: ``Task`` says what, ``Trainer`` runs it (a setup, a loop and a
tuning session: ``train.trainer``)."""

from tfgpu.train.batch_size import find_batch_size
from tfgpu.train.loop import OutOfMemoryError
from tfgpu.train.options import Placement, TrainOptions
from tfgpu.train.result import Progress, TrainResult
from tfgpu.train.task import Task
from tfgpu.train.trainer import Trainer

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

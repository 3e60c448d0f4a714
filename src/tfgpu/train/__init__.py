"""Training on every GPU and worker: ``Task`` says what, ``Trainer`` runs a strategy.run loop."""

from tfgpu.train.batch_size import find_batch_size
from tfgpu.train.loop import OutOfMemoryError, Progress, Trainer, TrainResult
from tfgpu.train.task import Task

__all__ = ["OutOfMemoryError", "Progress", "Task", "TrainResult", "Trainer", "find_batch_size"]

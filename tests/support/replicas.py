"""The logical CPU devices a test process runs on, and a strategy over the first N of them."""

from __future__ import annotations

import contextlib
from typing import Any

# conftest configures this many before TensorFlow initializes its devices (when a test needs them)
LOGICAL_CPUS = 3


def local_strategy(replicas: int) -> Any:
    """OneDevice on CPU:0, or Mirrored over the first N logical CPUs of this test process."""
    import tensorflow as tf

    if replicas == 1:
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    # Several MirroredStrategies over different device sets in one process collide on collective
    # group keys ("joining a group with size 3, but that group has size 2"): reduce via one device.
    devices = [f"/cpu:{i}" for i in range(replicas)]
    return tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())


def one_device() -> contextlib.AbstractContextManager:
    """The scope a model is built in when no strategy is asked for (Keras's default): none."""
    return contextlib.nullcontext()

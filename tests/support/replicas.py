"""The logical CPU devices a test process runs on, and a strategy over the first N of them."""

from __future__ import annotations

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

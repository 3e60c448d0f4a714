"""tfgpu.memory: a step's fixed and per-example bytes, estimated from the shapes (no GPU here) or
measured from the allocator's peak (a fake allocator here), and the out-of-memory message."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import tfgpu
from support.parity import in_scope
from support.replicas import local_strategy
from tfgpu.errors import ConfigError
from tfgpu.train.step import footprint


def mlp(optimizer="adam"):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=optimizer, loss="mse")
    return model


@pytest.mark.model
def test_the_estimate_counts_weights_gradients_slots_and_activations():
    params = 8 * 16 + 16 + 16 + 1
    found = tfgpu.memory(mlp(), batch_size=10, devices_bytes={"GPU:0": 10_000})
    assert found.source == "estimated" and "no GPU" in found.how
    assert (found.weights_bytes, found.gradients_bytes) == (4 * params, 4 * params)
    assert found.optimizer_bytes == 2 * 4 * params  # Adam's two moments, not made yet
    assert found.per_example_bytes == 4 * (16 + 16 + 1)  # outputs, and relu's input
    assert found.step_bytes() == 16 * params + 10 * 4 * 33
    # 90% of 10,000 bytes, less the fixed, over the bytes per example
    assert found.devices[0].largest_batch == (9000 - 16 * params) // (4 * 33)
    remat = next(c for c in found.changes if c.option == "remat=True")
    assert remat.per_example_bytes == 4 * 17  # relu's input recomputed
    half = tfgpu.memory(mlp(), batch_size=10, precision="bf16")
    assert half.per_example_bytes == found.per_example_bytes // 2
    assert "per example" in "\n".join(found.lines())


@pytest.mark.model
def test_slots_made_by_the_optimizer_are_counted_as_they_are():
    model = mlp(keras.optimizers.SGD(0.1, momentum=0.9))
    model.fit(np.zeros((4, 8), "float32"), np.zeros((4, 1), "float32"), verbose=0)
    found = tfgpu.memory(model, batch_size=4)
    assert found.optimizer_bytes == found.gradients_bytes  # one momentum per weight


@pytest.mark.model
def test_measured_from_the_allocator_peak_at_two_batch_sizes():
    """A fake allocator: the peaks of a pass at 8 and 16 examples; the model's BatchNormalization
    statistics moved by the passes are put back."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4), keras.layers.BatchNormalization()])
    model.compile(optimizer="sgd", loss="mse")
    before = model.get_weights()
    peaks = iter([1_000_000 + 8 * 3_000, 1_000_000 + 16 * 3_000])
    parts, per_example, how = footprint._measured(model, 8, "CPU:0", reader=lambda device: next(peaks))
    assert per_example == 3_000 and "allocator peak on CPU:0 at 8 and 16" in how
    assert sum(parts) == 1_000_000  # weights + gradients + slots (SGD: none)
    for a, b in zip(model.get_weights(), before, strict=True):
        np.testing.assert_array_equal(a, b)


def test_accumulation_keeps_the_effective_batch():
    assert footprint.accumulation_for(256, fits=100) == (64, 4)
    assert footprint.accumulation_for(96, fits=48) == (48, 2)
    assert footprint.accumulation_for(7, fits=3) == (1, 7)


@pytest.mark.model
def test_an_out_of_memory_step_says_the_figures_and_the_fixes(monkeypatch):
    """A fake allocator that fails every step: one message with the batch, the bytes, the fixes."""
    import tensorflow as tf

    from tfgpu.train.loop.training import OutOfMemoryError
    from tfgpu.train.step import execution

    def failing(strategy, model, *, jit_compile, known=False, extras=execution.ALL):
        def execute(iterator, limit):
            raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor with shape[64,16]")

        return execute

    monkeypatch.setattr(execution, "train_execution", failing)
    x, y = np.zeros((128, 8), "float32"), np.zeros((128, 1), "float32")
    with pytest.raises(OutOfMemoryError) as caught:
        tfgpu.fit(in_scope(local_strategy(1), mlp), x, y, batch_size=64, verbose=0)
    message = str(caught.value)
    assert "at 64 examples per replica" in message
    assert "132 B per example (estimated)" in message
    assert "batch_size 32 per replica with gradient_accumulation_steps=2" in message
    assert "mixed precision" in message and "remat=True" in message
    assert "Traceback" not in message


@pytest.mark.model
def test_bad_input_is_one_message():
    with pytest.raises(ConfigError, match="batch_size must be"):
        tfgpu.memory(mlp(), batch_size=0)
    with pytest.raises(ConfigError, match="precision must be"):
        tfgpu.memory(mlp(), precision="fp8")
    with pytest.raises(ConfigError, match="takes a Keras model"):
        tfgpu.memory("model.keras")
    with pytest.raises(ConfigError, match="needs a GPU"):
        tfgpu.memory(mlp(), measure=True)


def test_a_launched_task_measures_its_own_gpus_by_their_memory_names(monkeypatch):
    """In a cluster TensorFlow names a task's GPU ``/job:worker/replica:0/task:1/device:GPU:0``;
    ``get_memory_info`` takes ``GPU:0``, and another task's GPUs are not this process's."""
    from tfgpu import distribute

    monkeypatch.setattr(
        distribute,
        "local_devices",
        lambda kind: [
            f"/job:worker/replica:0/task:1/device:{kind}:0",
            f"/job:worker/replica:0/task:1/device:{kind}:1",
        ],
    )
    assert footprint._gpus() == ["GPU:0", "GPU:1"]

"""Dataset and model functions the diagnose CLI tests load as tests/diagnose_inputs.py:NAME."""

from tfgpu.diagnose import workloads


def sequential():
    return workloads.sequential_map()


def memory():
    return workloads.in_memory()


def tiny_model():
    return workloads.tiny_model()


def uncompiled_model():
    import keras

    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])


def not_a_dataset():
    return [1, 2, 3]

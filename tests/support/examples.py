"""The registry of examples: each parity test is one example body, marked with where it comes from
and what it exercises, in the file named for the behaviour it is there to check.

A parity test runs a program as its author wrote it twice through one body, once with Keras's own
methods and once with tfgpu's (``support.parity``: ``KERAS``, ``TFGPU``, ``same``), and carries

    @pytest.mark.exercises("loss:function", "inputs:dataset", "strategy:mirrored",
                           source="keras-io guides/training_with_built_in_methods.py")

The tags are ``TAGS``' (a tag not here fails ``test_lanes``); ``source`` is the guide or example the
body is written after, or "tfgpu" for one the team wrote. Each ``tests/test_parity_<behaviour>.py``
holds the examples whose point is that behaviour (``FILES``: a test there carries one of its tags),
so a change to how tfgpu treats losses runs ``test_parity_losses.py`` first; every example that
touches a behaviour, wherever it lives, runs with ``pytest tests --exercising loss:function`` (the
option may be given several times: an example with any of the tags runs).

The registry is the test functions' own markers, read by pytest at collection and by
``test_lanes`` from the source (without importing TensorFlow): there is no list to keep beside them.
"""

from __future__ import annotations

from collections.abc import Iterable

TAGS: dict[str, str] = {
    # the loss and metrics, as compile is given them
    "loss:string": "a loss named by a string",
    "loss:object": "a keras.losses object",
    "loss:function": "a loss written as a function",
    "loss:subclass": "a keras.losses.Loss subclass",
    "loss:add_loss": "a layer's or model's add_loss",
    "loss:per_output": "a loss (or weights) per output",
    "loss:weighted": "sample_weight or class_weight",
    "loss:sum": "a loss summed over the batch, not averaged",
    "loss:own_count": "a loss divided by a count of its own",
    "metric:builtin": "Keras's metrics",
    "metric:subclass": "a keras.metrics.Metric subclass",
    # the model's own steps
    "step:train_step": "an overridden train_step",
    "step:test_step": "an overridden test_step",
    "step:predict_step": "an overridden predict_step",
    "step:compute_loss": "an overridden compute_loss",
    "step:own_method": "the model's own fit, evaluate or predict",
    # what the verbs are given
    "inputs:arrays": "NumPy arrays",
    "inputs:dataset": "a tf.data.Dataset",
    "inputs:pydataset": "a keras.utils.PyDataset",
    "inputs:generator": "a Python generator",
    "inputs:dict": "inputs or targets as dicts",
    "inputs:dataframe": "a pandas DataFrame",
    "inputs:files": "files read by tf.data (TFRecords, CSV, text, a converted directory)",
    "inputs:text": "strings, and the layers that read them",
    "inputs:short_batch": "a short last batch, or batches split unevenly over the replicas",
    "inputs:multi": "several inputs",
    "outputs:multi": "several outputs",
    # callbacks
    "callbacks:builtin": "Keras's callbacks",
    "callbacks:custom": "a callback of the user's",
    "callbacks:checkpoint": "ModelCheckpoint, or saving and loading between calls",
    "callbacks:backup": "BackupAndRestore, a resumed run",
    # the model, and where it is built
    "model:sequential": "a Sequential model",
    "model:functional": "a functional model",
    "model:subclassed": "a subclassed keras.Model",
    "model:outside_scope": "built outside any strategy's scope",
    "model:in_scope": "built in the strategy's scope",
    "model:unbuilt": "not built before the verb",
    "model:custom_layer": "a layer of the user's",
    "model:lambda": "a Lambda layer",
    "model:preprocessing": "preprocessing layers (adapted, or reading strings)",
    "model:cloned": "a model (or optimizer) tfgpu re-creates, or that cloning cannot",
    # what the model is made of (whole examples)
    "arch:mlp": "dense layers",
    "arch:convnet": "convolutions",
    "arch:rnn": "recurrent layers (LSTM, GRU)",
    "arch:transformer": "attention and transformer blocks",
    "arch:embedding": "embeddings",
    "arch:autoencoder": "an encoder and a decoder",
    # randomness that differs per replica
    "random:dropout": "Dropout",
    "random:batchnorm": "BatchNormalization",
    "random:per_replica": "random ops drawn on each replica",
    # what tfgpu runs it under
    "strategy:one": "one device",
    "strategy:mirrored": "several local replicas",
    "strategy:multi_worker": "several workers",
    "strategy:parameter_server": "parameter servers",
    "strategy:launch": "processes under tfgpu launch (or Ray)",
    # the program around the fit
    "program:optimizer": "the optimizer the user holds",
    "program:recompile": "a second compile",
    "program:keras_methods": "Keras's own methods before or after a verb",
    "program:eager": "run_eagerly",
    "program:determinism": "seeds and op determinism",
    "program:trainable": "trainable changed between calls (fine-tuning)",
    "program:xla": "jit_compile asked in compile",
    "program:signature": "the verbs' arguments, defaults and results as Keras's",
    "program:proof": "the first step proved equal to one device's, or said why not",
    "precision:mixed": "mixed precision",
}

# each behaviour file, and the tags one of which each of its examples carries
FILES: dict[str, tuple[str, ...]] = {
    "test_parity_losses.py": ("loss:", "metric:", "precision:"),
    "test_parity_custom_steps.py": ("step:",),
    "test_parity_inputs.py": ("inputs:",),
    "test_parity_outputs.py": ("outputs:", "inputs:multi"),
    "test_parity_callbacks.py": ("callbacks:",),
    "test_parity_models.py": ("model:", "random:"),
    "test_parity_architectures.py": ("arch:",),
    "test_parity_arrangements.py": ("model:", "loss:", "inputs:"),
    "test_parity_program.py": ("program:",),
    "test_parity_workers.py": ("strategy:multi_worker", "strategy:parameter_server", "strategy:launch"),
}


def exercises(tags: Iterable[str], asked: Iterable[str]) -> bool:
    """Whether an example tagged ``tags`` is one ``--exercising`` asked for: any of ``asked``, a
    tag or a family ("loss:" for every loss)."""
    tags = list(tags)
    return any(tag == want or (want.endswith(":") and tag.startswith(want)) for want in asked for tag in tags)


def unknown(asked: Iterable[str]) -> list[str]:
    """The ``--exercising`` values that are no tag and no family of one."""
    families = {tag.split(":")[0] + ":" for tag in TAGS}
    return [want for want in asked if want not in TAGS and want not in families]

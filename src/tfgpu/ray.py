"""``tfgpu.fit`` inside Ray Train's workers: its checkpoints handed to Ray, a restarted run resumed.

Ray Train's ``TensorflowTrainer`` starts the workers and sets ``TF_CONFIG`` on each before
``train_loop_per_worker`` runs, so ``tfgpu.fit`` called there trains under
MultiWorkerMirroredStrategy as under ``tfgpu launch``: nothing here is needed for that
(docs/ray.md). What Ray adds is its own storage and fault tolerance: a run restarted after a lost
worker (``FailureConfig(max_failures=...)``) calls ``train_loop_per_worker`` again on new workers,
and hands them the last checkpoint reported to it (``ray.train.get_checkpoint()``).
``ReportCheckpointCallback`` joins tfgpu's checkpoints to that: each one tfgpu saves (every
``save_freq`` steps, and at each epoch's end) is reported to Ray with the figures so far, and a
restarted run resumes from Ray's latest, mid-epoch included, to the weights of a run never
interrupted. ``load_weights`` puts such a checkpoint into a fresh model.

Imported only when named (``tfgpu.ray``); it imports Ray then (``pip install "tfgpu[ray]"``).
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import keras

from tfgpu.errors import ConfigError
from tfgpu.train.pieces.checkpoints import HISTORY

__all__ = ["ReportCheckpointCallback", "load_weights"]


def _ray_train() -> Any:
    try:
        import ray.train
    except ImportError as error:
        raise ConfigError(
            "tfgpu.ray needs Ray Train, which is not installed",
            value=str(error),
            fix='pip install "tfgpu[ray]"',
        ) from error
    return ray.train


class ReportCheckpointCallback(keras.callbacks.BackupAndRestore):
    """Report ``tfgpu.fit``'s checkpoints and figures to Ray Train; resume from Ray's latest.

    Made inside ``train_loop_per_worker`` and passed to ``tfgpu.fit(callbacks=[...])``, on every
    worker. It is a ``BackupAndRestore`` whose backup lives in Ray's storage: tfgpu saves model,
    optimizer and step every ``save_freq`` steps (``"epoch"``: at each epoch's end only) and at
    each epoch's end; the chief hands each checkpoint to ``ray.train.report`` with the logs so far
    (``metrics`` picks them as Ray's own callback does: a name, a list of names, or
    {reported name: log name}), plus ``epoch`` and ``step``; every worker reports alike, as Ray
    asks. Made in a restarted run, it first fetches Ray's latest checkpoint
    (``ray.train.get_checkpoint()``), and ``tfgpu.fit`` resumes from it.

    Ray's own ``ray.train.tensorflow.keras.ReportCheckpointCallback`` saves a ``.keras`` file
    from every worker at each epoch's end and leaves resuming to the user's code; this one is
    tfgpu's checkpoint, resumed by tfgpu, mid-epoch too. Under Keras's own ``fit`` it is a plain
    ``BackupAndRestore`` into a scratch directory: it reports nothing.
    """

    epoch_ends = True  # train.callbacks: a save at each epoch's end besides every save_freq steps
    per_worker = True  # each worker's backup_dir is its own (a copy of Ray's checkpoint)

    def __init__(
        self,
        save_freq: str | int = "epoch",
        *,
        metrics: str | Sequence[str] | Mapping[str, str] | None = None,
    ) -> None:
        train = _ray_train()
        checkpoint = _latest(train)
        directory = tempfile.mkdtemp(prefix="tfgpu-ray-")
        if checkpoint is not None:
            checkpoint.to_directory(directory)
        super().__init__(directory, save_freq=save_freq, delete_checkpoint=True)
        self.metrics = metrics
        self.resumed_from = None if checkpoint is None else checkpoint.path  # Ray's, or None

    def saved(self, path: str | None, *, step: int, epoch: int, logs: dict[str, Any]) -> None:
        """Called by tfgpu's loop on every worker after each save (``path``: the chief's, else
        None): the chief reports the checkpoint with the figures, the others the figures alone."""
        train = _ray_train()
        reported = {**_picked(logs, self.metrics), "epoch": epoch, "step": step}
        if path is None:
            train.report(reported, checkpoint=None)
            return
        staged = _staged(path)
        try:
            train.report(reported, checkpoint=train.Checkpoint.from_directory(staged))
        finally:
            shutil.rmtree(staged, ignore_errors=True)


def _latest(train: Any) -> Any:
    """Ray's latest checkpoint for this run (None on a first start); outside a Ray Train worker,
    said with the fix, as nothing could be reported from there."""
    try:
        return train.get_checkpoint()
    except RuntimeError as error:
        raise ConfigError(
            "ReportCheckpointCallback was made outside a Ray Train worker",
            value=str(error).splitlines()[0],
            fix="make it inside train_loop_per_worker (the function TensorflowTrainer runs), "
            "where tfgpu.fit is called",
        ) from error


def _picked(logs: dict[str, Any], metrics: str | Sequence[str] | Mapping[str, str] | None) -> dict:
    """The logs Ray gets, chosen as Ray's own Keras callback chooses them."""
    if metrics is None:
        return dict(logs)
    pairs = (
        dict(metrics)
        if isinstance(metrics, Mapping)
        else {m: m for m in ([metrics] if isinstance(metrics, str) else metrics)}
    )
    missing = sorted(name for name in pairs.values() if name not in logs)
    if missing:
        raise ConfigError(
            "ReportCheckpointCallback(metrics=...) names figures the logs do not have",
            value=missing,
            fix=f"name some of {sorted(logs)}",
        )
    return {reported: logs[name] for reported, name in pairs.items()}


def _staged(path: str) -> str:
    """A directory holding the checkpoint at ``path`` alone (tfgpu keeps the last K beside it:
    Ray gets one, not K, each time), its index, and the finished epochs' logs."""
    staged = tempfile.mkdtemp(prefix="tfgpu-ray-report-")
    for part in glob.glob(f"{glob.escape(path)}.*"):
        shutil.copy2(part, staged)
    history = os.path.join(os.path.dirname(path), HISTORY)
    if os.path.exists(history):
        shutil.copy2(history, staged)
    name = os.path.basename(path)
    with open(os.path.join(staged, "checkpoint"), "w") as index:  # tf.train.latest_checkpoint's
        index.write(f'model_checkpoint_path: "{name}"\nall_model_checkpoint_paths: "{name}"\n')
    return staged


def load_weights(model: Any, checkpoint: Any) -> Any:
    """``model`` (built, the architecture trained) with the weights of a checkpoint that
    ``ReportCheckpointCallback`` reported: a ``ray.train.Checkpoint`` (``result.checkpoint``,
    ``result.best_checkpoints``) or its local directory. Returns ``model``.

    For prediction or evaluation after ``trainer.fit()``; a restarted run needs none of this
    (the callback resumes it). Checked: a checkpoint of another model is said, not half-loaded.
    """
    import tensorflow as tf

    if not model.built:
        raise ConfigError(
            "load_weights needs a built model: an unbuilt one has no weights to load into",
            value=type(model).__name__,
            fix="build it first (a keras.Input, model.build(input_shape), or a call on one batch)",
        )
    if not hasattr(checkpoint, "as_directory"):  # a directory (Ray's Checkpoint refuses os.fspath)
        return _restored(tf, model, os.fspath(checkpoint))
    with checkpoint.as_directory() as directory:
        return _restored(tf, model, directory)


def _restored(tf: Any, model: Any, directory: str) -> Any:
    path = tf.train.latest_checkpoint(directory)
    if path is None:
        raise ConfigError(
            "No tfgpu checkpoint in this Ray checkpoint",
            value=directory,
            fix="pass a checkpoint that tfgpu.ray.ReportCheckpointCallback reported "
            "(Ray's own Keras callback writes model.keras: keras.models.load_model reads that)",
        )
    try:
        tf.train.Checkpoint(model=model).restore(path).expect_partial().assert_existing_objects_matched()
    except (AssertionError, ValueError) as error:
        raise ConfigError(
            "The checkpoint is not of this model's architecture",
            value=str(error).splitlines()[0][:300],
            fix="build the model the run trained (same layers and shapes) before loading",
        ) from error
    return model

"""Keras callbacks, called as ``Model.fit`` calls them, and written to disk by the chief only.

tfgpu uses Keras's own ``CallbackList`` (History, the progress bar, and its dispatch of batch hooks
off the main thread when no callback needs the logs at once). Two things differ from ``fit``:

- Under several workers every worker runs the callbacks (their logs are the same global figures
  everywhere, so EarlyStopping, ReduceLROnPlateau and the like decide alike on every worker), but
  only the chief writes files: Keras's callbacks have no chief logic, and every worker would
  write the same path. CSVLogger and TensorBoard run on the chief only; a ModelCheckpoint runs on
  every worker, the others saving into a scratch directory removed at the end, because saving
  distributed variables is a collective every worker must join (TensorFlow's multi-worker guide
  does the same; run on the chief alone, the job failed with "Collective instance 163 expected
  type 1 and data_type 9 but got type 0 and data_type 1").
- ``BackupAndRestore`` (the fault tolerance of TensorFlow's multi-worker and parameter-server
  tutorials) is honoured by tfgpu's own checkpoints, with Keras's semantics (``backup``): saved
  at each epoch's end (or every ``save_freq`` batches) into its ``backup_dir``, restored when the
  run starts again (mid-epoch too), deleted when training ends unless ``delete_checkpoint=False``.
  The same checkpoints work on every strategy; Keras's own callback writes from every worker.
  A subclass may say more (``tfgpu.ray.ReportCheckpointCallback`` does, to hand each checkpoint
  to Ray Train): ``epoch_ends = True`` saves at each epoch's end besides every ``save_freq``
  batches; ``per_worker = True`` says each worker has a ``backup_dir`` of its own (removed by each
  at the end, not by the chief alone); ``saved(path, step=, epoch=, logs=)`` is called on every worker
  after each save (``path`` None but on the chief).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tfgpu.errors import ConfigError


def _file_writers() -> tuple[type, ...]:
    import keras

    return (keras.callbacks.ModelCheckpoint, keras.callbacks.CSVLogger, keras.callbacks.TensorBoard)


def callback_list(
    callbacks: Sequence[Any] | None,
    *,
    model: Any,
    is_chief: bool,
    verbose: Any,
    epochs: int,
    steps: int | None,
    history: bool = True,
) -> Any:
    """A Keras ``CallbackList`` with History (and the progress bar when ``verbose``), set on ``model``."""
    import keras

    given = list(callbacks or [])
    for callback in given:
        if not isinstance(callback, keras.callbacks.Callback):
            raise ConfigError(
                "callbacks must be Keras callbacks",
                value=type(callback).__name__,
                fix="pass instances of keras.callbacks.Callback (or a subclass of it)",
            )
        if isinstance(callback, keras.callbacks.BackupAndRestore):
            raise ConfigError(
                "BackupAndRestore reached the callback list: the Trainer takes it out first",
                value=callback.backup_dir,
                fix="pass it in Task.callbacks or tfgpu.fit(callbacks=...)",
            )
    if not is_chief:
        given = _on_other_workers(given)
        verbose = 0
    return keras.callbacks.CallbackList(
        given,
        add_history=history,
        add_progbar=verbose != 0,
        model=model,
        verbose=verbose,
        epochs=epochs,
        steps=steps,
    )


def _on_other_workers(given: list[Any]) -> list[Any]:
    """A non-chief worker's callbacks: no CSVLogger or TensorBoard; each ModelCheckpoint saving
    into a scratch directory, removed when training ends."""
    import copy
    import os
    import tempfile

    import keras

    kept: list[Any] = []
    for callback in given:
        if isinstance(callback, keras.callbacks.ModelCheckpoint):
            directory = tempfile.mkdtemp(prefix="tfgpu-worker-checkpoint-")
            mine = copy.copy(callback)
            mine.filepath = os.path.join(directory, os.path.basename(str(callback.filepath)))
            kept += [mine, _remove_at_end(directory)]
        elif not isinstance(callback, _file_writers()):
            kept.append(callback)
    return kept


def _remove_at_end_type() -> type:
    import keras

    class RemoveAtEnd(keras.callbacks.Callback):
        def __init__(self, directory: str) -> None:
            super().__init__()
            self.directory = directory

        def on_train_end(self, logs: Any = None) -> None:
            import shutil

            shutil.rmtree(self.directory, ignore_errors=True)

    return RemoveAtEnd


def _remove_at_end(directory: str) -> Any:
    return _remove_at_end_type()(directory)


_HOOKS = {
    "train": ("on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end"),
    "test": ("on_test_batch_begin", "on_test_batch_end"),
    "predict": ("on_predict_batch_begin", "on_predict_batch_end"),
}


def has_batch_hooks(callbacks: Any, *, kind: str = "train") -> bool:
    """True when some callback does something per batch (Keras marks its no-op hooks as default).

    Without one the loop skips the batch calls, so nothing is dispatched per execution.
    """
    return any(
        not getattr(getattr(callback, hook), "_is_default", False)
        for callback in callbacks.callbacks
        for hook in _HOOKS[kind]
    )


def split_backup(callbacks: Sequence[Any]) -> tuple[Any | None, tuple[Any, ...]]:
    """(the BackupAndRestore among ``callbacks`` or None, the others)."""
    import keras

    backups = [c for c in callbacks if isinstance(c, keras.callbacks.BackupAndRestore)]
    if len(backups) > 1:
        raise ConfigError(
            "More than one BackupAndRestore callback",
            value=[b.backup_dir for b in backups],
            fix="pass one BackupAndRestore(backup_dir)",
        )
    others = tuple(c for c in callbacks if not isinstance(c, keras.callbacks.BackupAndRestore))
    return (backups[0] if backups else None), others


def backup_options(options: Any, backup: Any) -> Any:
    """``options`` checkpointing as ``backup`` (a Keras BackupAndRestore) asks: its directory,
    and each epoch's end (``save_freq="epoch"``) or every N batches (``save_freq=N``)."""
    import dataclasses

    if options.checkpoint_dir and str(options.checkpoint_dir) != str(backup.backup_dir):
        raise ConfigError(
            "checkpoint_dir and a BackupAndRestore callback are both set, to different directories",
            value={"checkpoint_dir": options.checkpoint_dir, "backup_dir": backup.backup_dir},
            fix="use one of them: both resume a killed run where it stopped",
        )
    every = backup.save_freq if isinstance(backup.save_freq, int) and backup.save_freq else None
    return dataclasses.replace(
        options,
        checkpoint_dir=str(backup.backup_dir),
        checkpoint_every=options.checkpoint_every or every,
        checkpoint_epochs=backup.save_freq == "epoch" or bool(getattr(backup, "epoch_ends", False)),
    )


def acting_per_batch(callbacks: Sequence[Any], *, kind: str = "train") -> list[str]:
    """The user's callbacks that act on every batch: their ``kind`` batch hooks ("train",
    "test" or "predict") do something.

    Keras calls batch hooks once per compiled call, and its ``fit`` / ``evaluate`` / ``predict``
    make one step a call unless the model was compiled with more; a callback that records or
    saves per batch (``LossHistory``, ``ModelCheckpoint(save_freq=N)``) sees what Keras shows it
    only at the model's own ``steps_per_execution``. TensorBoard and ModelCheckpoint act per
    batch only when their frequency is a number of batches; the progress bar only redraws.
    """
    import keras

    names = []
    for callback in getattr(callbacks, "callbacks", callbacks):
        if isinstance(callback, keras.callbacks.ProgbarLogger | keras.callbacks.BackupAndRestore):
            continue
        if isinstance(callback, keras.callbacks.TensorBoard) and not isinstance(callback.update_freq, int):
            continue
        if isinstance(callback, keras.callbacks.ModelCheckpoint) and not isinstance(callback.save_freq, int):
            continue
        if any(not getattr(getattr(callback, hook), "_is_default", False) for hook in _HOOKS[kind]):
            names.append(type(callback).__name__)
    return names


def pythonify(logs: Any) -> dict[str, Any]:
    """Logs as Python numbers (lists for non-scalar results), as Keras's ``pythonify_logs``
    makes them: in key order, nested dicts (a custom step returning ``metric.result()`` of
    Keras's CompileMetrics) flattened into their keys."""
    out: dict[str, Any] = {}
    for name, value in sorted((logs or {}).items()):
        if isinstance(value, dict):
            out.update(pythonify(value))
            continue
        array = value.numpy() if hasattr(value, "numpy") else value
        size = getattr(array, "size", 1)
        out[name] = float(array) if size == 1 else array.tolist()
    return out

"""Keras callbacks, called as ``Model.fit`` calls them, and written to disk by the chief only.

tfgpu uses Keras's own ``CallbackList`` (History, the progress bar, and its dispatch of batch hooks
off the main thread when no callback needs the logs at once). Two things differ from ``fit``:

- Under several workers every worker runs the callbacks (their logs are the same global figures
  everywhere, so EarlyStopping, ReduceLROnPlateau and the like decide alike on every worker), but
  the callbacks that write files (ModelCheckpoint, CSVLogger, TensorBoard) run on the chief only:
  Keras's callbacks have no chief logic, and every worker would write the same path.
- ``BackupAndRestore`` is refused: tfgpu's ``checkpoint_dir`` does its job (kill and resume to the
  weights of an uninterrupted run, mid-epoch included) for every strategy.
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
                "BackupAndRestore is not supported: tfgpu's checkpoint_dir does its job, on every strategy",
                value=callback.backup_dir if hasattr(callback, "backup_dir") else None,
                fix="drop BackupAndRestore and pass checkpoint_dir=DIR (tfgpu train --checkpoint-dir DIR): "
                "a killed run started again resumes where it stopped",
            )
    if not is_chief:
        given = [c for c in given if not isinstance(c, _file_writers())]
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


_HOOKS = {
    "train": ("on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end"),
    "test": ("on_test_batch_begin", "on_test_batch_end"),
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

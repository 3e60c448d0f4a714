"""Checkpoints of model, optimizer, step and epoch, kept to the last K, resumable.

Under MultiWorkerMirroredStrategy every worker must save (the save is collective); only the chief
writes to the checkpoint directory, the others to a scratch directory deleted right after, as the
TensorFlow multi-worker guide prescribes.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HISTORY = "tfgpu-history.json"


class Checkpoints:
    def __init__(
        self, directory: str | None, *, objects: dict[str, Any], keep: int, is_chief: bool, worker: str
    ) -> None:
        import tensorflow as tf

        self.directory = Path(directory) if directory else None
        self.is_chief = is_chief
        self.checkpoint = tf.train.Checkpoint(**objects)
        self.manager = None
        if self.directory is not None:
            target = self.directory if is_chief else self.directory / f".{worker}-scratch"
            self.manager = tf.train.CheckpointManager(
                self.checkpoint, str(target), max_to_keep=keep if is_chief else 1
            )

    def latest(self) -> str | None:
        import tensorflow as tf

        return tf.train.latest_checkpoint(str(self.directory)) if self.directory else None

    def restore_latest(self) -> str | None:
        """Restore the chief's latest checkpoint, if any; returns its path."""
        path = self.latest()
        if path:
            try:
                self.checkpoint.restore(path).assert_existing_objects_matched()
            except (AssertionError, ValueError, NotImplementedError) as error:
                raise _not_this_models(self.directory, path, error) from error
        return path

    def save_history(self, epochs: list[KeptEpoch]) -> None:
        """Each finished epoch's logs beside the checkpoints (the chief's): a run started again
        after it finished gives its History back instead of an empty one (``history_kept``)."""
        if self.directory is None or not self.is_chief:
            return
        from tfgpu.files import write_json_atomic

        write_json_atomic(
            self.directory / HISTORY, {"epochs": [{"epoch": e.epoch, **e.logs} for e in epochs]}
        )

    def history_kept(self) -> list[KeptEpoch]:
        """The epochs ``save_history`` kept ([] when none, or unreadable: only a courtesy)."""
        import json

        path = self.directory / HISTORY if self.directory else None
        try:
            saved = json.loads(path.read_text())["epochs"] if path and path.exists() else []
            return [KeptEpoch(int(e.pop("epoch")), e) for e in saved if isinstance(e, dict) and "epoch" in e]
        except (OSError, ValueError, KeyError, TypeError):
            return []

    def save(self, step: int) -> str | None:
        if self.manager is None:
            return None
        path = self.manager.save(checkpoint_number=step)
        if not self.is_chief:
            shutil.rmtree(self.manager.directory, ignore_errors=True)
            return None
        return path


@dataclass(frozen=True)
class KeptEpoch:
    """A finished epoch's logs, as kept beside the checkpoints (``{"epoch": N, **logs}`` in the
    file, the JSON edge)."""

    epoch: int
    logs: dict[str, Any]


def _not_this_models(directory: Path | None, path: str, error: Exception) -> Exception:
    """A checkpoint directory holding another model's checkpoint (another script's, or this one's
    before its layers changed): resuming from it would mix two runs, so nothing trains."""
    from tfgpu.errors import InputError

    first = str(error).split(". Target variable")[0].splitlines()[0][:300]
    return InputError(
        f"The checkpoint in {directory} is not of this model, so this run cannot resume from it "
        f"({first or type(error).__name__})",
        value=path,
        fix="give this run its own checkpoint directory, or delete that one to start afresh",
    )

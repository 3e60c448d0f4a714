"""Checkpoints of model, optimizer, step and epoch, kept to the last K, resumable.

Under MultiWorkerMirroredStrategy every worker must save (the save is collective); only the chief
writes to the checkpoint directory, the others to a scratch directory deleted right after, as the
TensorFlow multi-worker guide prescribes.

Beside them the chief keeps the finished epochs' logs and the run's shape (global batch, replicas):
a run resumed on another number of workers (Ray Train's elastic group, a relaunch on fewer
machines) says so, and says when its global batch is not the one the checkpoint was trained with.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
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
        # a checkpoint saved before the metrics' state was kept restores without it
        self._without_metrics = tf.train.Checkpoint(**{k: v for k, v in objects.items() if k != "metrics"})
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
        import tensorflow as tf

        path = self.latest()
        if path:
            kept = any(name.startswith("metrics/") for name, _ in tf.train.list_variables(path))
            checkpoint = self.checkpoint if kept else self._without_metrics
            try:
                checkpoint.restore(path).assert_existing_objects_matched()
            except (AssertionError, ValueError, NotImplementedError) as error:
                raise _not_this_models(self.directory, path, error) from error
        return path

    def save_history(self, epochs: list[KeptEpoch], shape: RunShape) -> None:
        """Each finished epoch's logs and the run's shape beside the checkpoints (the chief's): a
        run started again after it finished gives its History back instead of an empty one
        (``history_kept``), and a resumed one compares its shape (``shape_kept``)."""
        if self.directory is None or not self.is_chief:
            return
        from tfgpu.files import write_json_atomic

        write_json_atomic(
            self.directory / HISTORY,
            {"epochs": [{"epoch": e.epoch, **e.logs} for e in epochs], **asdict(shape)},
        )

    def _kept(self) -> dict[str, Any]:
        import json

        path = self.directory / HISTORY if self.directory else None
        try:
            kept = json.loads(path.read_text()) if path and path.exists() else {}
        except (OSError, ValueError):
            return {}
        return kept if isinstance(kept, dict) else {}

    def history_kept(self) -> list[KeptEpoch]:
        """The epochs ``save_history`` kept ([] when none, or unreadable: only a courtesy)."""
        try:
            saved = self._kept().get("epochs", [])
            return [KeptEpoch(int(e.pop("epoch")), e) for e in saved if isinstance(e, dict) and "epoch" in e]
        except (ValueError, KeyError, TypeError, AttributeError):
            return []

    def shape_kept(self) -> RunShape | None:
        """The shape of the run that saved the checkpoints (None: saved before tfgpu kept it)."""
        kept = self._kept()
        try:
            batch = kept["global_batch"]
            return RunShape(
                global_batch=None if batch is None else int(batch), replicas=int(kept["replicas"])
            )
        except (KeyError, TypeError, ValueError):
            return None

    def save(self, step: int) -> str | None:
        if self.manager is None:
            return None
        path = self.manager.save(checkpoint_number=step)
        if not self.is_chief:
            shutil.rmtree(self.manager.directory, ignore_errors=True)
            return None
        return path


@dataclass(frozen=True)
class RunShape:
    """What a checkpoint's steps were counted in: the global batch (None: a Dataset's own
    batches) and the replicas that trained them."""

    global_batch: int | None
    replicas: int

    def resumed_as(self, now: RunShape) -> tuple[str, str | None]:
        """(what the resume line adds, a warning or None) for a run of shape ``now`` resuming
        from checkpoints of this shape. The same global batch on another number of replicas
        goes on as the run that was started (tfgpu's steps are one device's); another global
        batch does not, and the epoch's position is counted in the new run's steps."""
        if now == self:
            return "", None
        moved = f" (saved on {_replicas(self.replicas)}, now {now.replicas})"
        if now.global_batch == self.global_batch:
            return moved + ", the same global batches", None
        return moved, (
            f"the global batch is {now.global_batch}, the checkpoint's steps were of "
            f"{self.global_batch}: the run goes on as another run, not the one it resumes (its "
            "place in the epoch is counted in steps of the new batch); pass the same batch_size "
            "on any number of workers to go on as the run that was started"
        )


def _replicas(count: int) -> str:
    return f"{count} replica{'s' if count != 1 else ''}"


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

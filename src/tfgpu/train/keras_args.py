"""Keras's ``fit`` / ``evaluate`` arguments read as Keras reads them, and refused with their fix.

The shuffle seed Keras's ``fit`` follows, ``verbose``'s meanings, the steps a compiled call
takes where callbacks act on every batch, and the arguments a model cannot train with: what
``keras_fit`` asks before it hands a ``Task`` and ``TrainOptions`` to the Trainer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tfgpu import choices
from tfgpu.errors import ConfigError
from tfgpu.train.inputs import adapters
from tfgpu.train.pieces import callbacks as callback_setup


def check_arguments(model: Any, *, class_weight: Any, validation_freq: Any) -> None:
    """Keras's arguments this model can train with, each refused with its fix."""
    _check_class_weight(model, class_weight)
    _check_validation_freq(validation_freq)


def _check_class_weight(model: Any, class_weight: Any) -> None:
    if class_weight is not None and len(getattr(model, "outputs", None) or [None]) > 1:
        raise ConfigError(
            f"class_weight needs a model with one output, and this one has {len(model.outputs)}",
            value=class_weight,
            fix="pass sample weights per output in the data instead ((x, y, {output: weights}))",
        )


def _check_validation_freq(freq: Any) -> None:
    ok = (isinstance(freq, int) and freq >= 1) or (
        isinstance(freq, Sequence) and not isinstance(freq, str) and all(isinstance(e, int) for e in freq)
    )
    if not ok:
        raise ConfigError(
            "validation_freq must be a whole number of at least 1, or a list of epochs",
            value=freq,
            fix="pass validation_freq=1, or e.g. [1, 5, 10]",
        )


def check_auto_batch(batch_size: Any, train: adapters.Adapter) -> None:
    if batch_size == "auto" and train.batched:
        raise ConfigError(
            f"batch_size='auto' cannot batch a {train.kind}: its batches are made already",
            value=train.kind,
            fix="pass arrays (or a tfgpu dataset directory) with batch_size='auto', or an unbatched "
            "dataset's batch size yourself",
        )


def acting(model: Any, steps_per_execution: int | None, callbacks: Any) -> tuple[list[str], int | None]:
    """(the callbacks acting on every batch, the model's own steps a call when some do): with
    no ``steps_per_execution`` asked, such callbacks get Keras's batches (``say_per_batch``)."""
    acting = [] if steps_per_execution else callback_setup.acting_per_batch(callbacks or ())
    return acting, (int(getattr(model, "steps_per_execution", 1) or 1) if acting else None)


def say_per_batch(acting: list[str], per_batch: int | None, trained: Any) -> None:
    if not acting or compiled_steps(trained):
        return
    choices.record(
        "steps_per_execution",
        per_batch,
        f"{', '.join(sorted(set(acting)))} acts on every batch, as under Keras's fit "
        "(pass steps_per_execution=K for K steps a call: faster, batch hooks every K steps)",
    )


def compiled_steps(model: Any) -> int | None:
    steps = int(getattr(model, "steps_per_execution", 1) or 1)
    return steps if steps > 1 else None


def shuffle_seed(seed: int | None) -> int:
    """The seed arrays are shuffled with: the one given, else Keras's global seed when the user
    set one (``keras.utils.set_random_seed``: Keras's ``fit`` shuffles by it, so runs meant to
    differ, an ensemble's members, differ), else 0. A resumed run of the same script reads the
    same batches: it sets the same seed."""
    if seed is not None:
        return seed
    from keras.src.backend.common import global_state
    from keras.src.utils.rng_utils import GLOBAL_RANDOM_SEED

    found = global_state.get_global_attribute(GLOBAL_RANDOM_SEED)
    return int(found) if found is not None else 0


def verbose_of(verbose: Any) -> int:
    """Keras's ``verbose``: "auto" is 1 (a progress bar), 0 silent, 1 or 2 shown."""
    if verbose == "auto":
        return 1
    if verbose not in (0, 1, 2) or isinstance(verbose, bool):
        raise ConfigError("verbose must be 'auto', 0, 1 or 2", value=verbose, fix="pass verbose=0")
    return int(verbose)

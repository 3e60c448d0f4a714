"""Exception types.

Every tfgpu error tells the user three things: what went wrong, the value that was received, and
the fix. The CLI turns a :class:`TfgpuError` into one message on stderr and exit status 2 (bad usage
or input), without a traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import re


class TfgpuError(Exception):
    """Base class: a problem the user can fix, described as what / value / fix."""

    exit_code = 2

    def __init__(self, what: str, *, value: object = None, fix: str | None = None) -> None:
        self.what = what
        self.value = value
        self.fix = fix
        super().__init__(self.message)

    def __reduce__(self) -> tuple:
        # keep what / value / fix across processes (convert and predict run workers)
        return (_rebuild, (type(self), self.what, self.value, self.fix))

    @property
    def message(self) -> str:
        parts = [self.what.rstrip(".") + "."]
        if self.value is not None:
            parts.append(f"Received: {self.value!r}.")
        if self.fix:
            parts.append(f"Fix: {self.fix.rstrip('.')}.")
        return " ".join(parts)


RESUMABLE = 75  # a run stopped on request and saved: run it again to resume (sysexits' EX_TEMPFAIL)


class StoppedOnRequest(SystemExit):
    """A training run asked to stop (SIGTERM, or a signal named in TFGPU_STOP_SIGNALS) finished
    its call in flight, saved where it was (``checkpoint``: the path, None when it had no
    checkpoint_dir) and stopped. A ``SystemExit`` with status ``RESUMABLE``: a script that does
    not catch it exits with that status, which ``tfgpu launch``, Slurm's requeue and a
    Kubernetes pod failure policy read as "run me again"."""

    def __init__(self, message: str, *, checkpoint: str | None, step: int) -> None:
        super().__init__(RESUMABLE)
        self.message, self.checkpoint, self.step = message, checkpoint, step

    def __str__(self) -> str:
        return self.message


class ConfigError(TfgpuError, ValueError):
    """A setting (argument, flag or TFGPU_* variable) has a value tfgpu cannot use."""


class TooLateError(TfgpuError, RuntimeError):
    """A device setting was asked for after TensorFlow had already initialized its devices."""


class ClusterError(TfgpuError, ValueError):
    """TF_CONFIG or another cluster description is malformed or inconsistent."""


class InputError(TfgpuError, ValueError):
    """A file, record or other input the user named cannot be used."""


def refuse_unknown(given: object, known: object, *, what: str) -> None:
    """A ConfigError naming the names in ``given`` that are not in ``known``, and the known ones:
    options are frozen dataclasses whose field names are the only keywords taken."""
    unknown = sorted(set(given) - set(known))  # type: ignore[call-overload]
    if unknown:
        raise ConfigError(
            f"Unknown {what}",
            value=unknown,
            fix=f"use one of {', '.join(sorted(known))}",  # type: ignore[call-overload]
        )


def from_graph_assertion(exc: BaseException) -> InputError | None:
    """tfgpu's own in-graph check (a truncated TFRecord file, say) as an InputError; else None.

    Why: such checks run inside tf.data functions, so they reach the caller as a TensorFlow error
    whose message holds the check's parts in brackets, after a function-stack preamble.
    """
    text = str(getattr(exc, "message", exc))
    start = text.find("assertion failed: [tfgpu: ")
    if start < 0:
        return None
    line = text[start + len("assertion failed: ") :].splitlines()[0]
    sentence = " ".join(re.findall(r"\[([^\[\]]*)\]", line)).replace("\\'", "'")
    what, _, fix = sentence.removeprefix("tfgpu: ").partition(" Fix: ")
    return InputError(what, fix=fix or None)


def _rebuild(cls: type[TfgpuError], what: str, value: object, fix: str | None) -> TfgpuError:
    return cls(what, value=value, fix=fix)

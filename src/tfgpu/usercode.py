"""Errors raised by the user's own code (a task or dataset function, a file that does not import).

They are bad input, not tfgpu bugs: the CLI gives them one message (what failed, the user's file
and line, the original error in one line, the fix) and exit status 2 instead of a traceback.
``loader`` registers each file it loads; ``explain`` finds the user's innermost frame in an
exception's traceback, or, for a TensorFlow error raised while running the user's pipeline or
model (it carries no Python frame of theirs), the function tfgpu was running for them.
"""

from __future__ import annotations

import linecache
import re
import traceback
from pathlib import Path

from tfgpu.errors import InputError

_directories: set[Path] = set()
_references: list[str] = []  # FILE:FUNCTION references loaded, in order


class UserCodeError(InputError):
    """The user's code raised; the message names their file and line."""


def register(path: Path, reference: str) -> None:
    """Code from ``path`` (and its folder) is the user's; ``reference`` names what was loaded."""
    _directories.add(path.resolve().parent)
    _references.append(reference)


def _is_user_file(filename: str) -> bool:
    path = Path(filename)
    if not path.is_absolute() or "site-packages" in path.parts or "dist-packages" in path.parts:
        return False
    resolved = path.resolve()
    return any(resolved.is_relative_to(d) for d in _directories) and not _inside_tfgpu(resolved)


def _inside_tfgpu(path: Path) -> bool:
    return path.is_relative_to(Path(__file__).resolve().parent)


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and what caused it, outermost first."""
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def one_line(exc: BaseException) -> str:
    """``Type: the message's line that says what happened``, at most 300 characters."""
    text = str(getattr(exc, "message", None) or exc).strip()
    line = _tensorflow_reason(text) if _is_tensorflow_error(exc) else (text.splitlines() or [""])[0]
    return f"{type(exc).__name__}: {line[:300]}" if line else type(exc).__name__


_PREAMBLE = ("[[", "Detected at", "<stack", "Graph execution error", "File ")


_COUNTS = re.compile(r"^\d+ (root error\(s\) found|derived errors ignored|successful operations)\.?")
_ROOT = re.compile(r"^\(\d+\)\s+[A-Z_]+:\s*")


def _tensorflow_reason(text: str) -> str:
    """The cause in a TensorFlow runtime error: its last line that is not stack or node context,
    nor a count of errors (several replicas' errors end in "0 derived errors ignored", which was
    all a user saw of "Matrix size-incompatible: In[0]: [0,3]"), with the node it ran at."""
    lines = [line.strip() for line in text.splitlines()]
    reasons = (
        [line for line in lines if line and not line.startswith(_PREAMBLE) and not _COUNTS.match(line)]
        or lines
        or [""]
    )
    reason = re.sub(r"\s*(\[\[.*?\]\]|\[Op:[^\]]*\])", "", _ROOT.sub("", reasons[-1])).strip()
    node = next((line for line in lines if line.startswith("Detected at node ")), None)
    if node and reason:
        where = re.sub(r"^(?:while/body/_\d+/)?(?:while/)?", "", node.split()[3])
        reason = f"{reason} (at {where.rsplit('/', 1)[0]})"
    match = re.match(
        r"Error in user-defined function passed to (\w+?)(?:Dataset)?:\d+ transformation with iterator: \S+: (.*)",
        reason,
    )
    return f"in a tf.data {match.group(1).lower()} function: {match.group(2)}" if match else reason


def explain(exc: BaseException) -> UserCodeError | None:
    """A UserCodeError for an exception the user's code raised; None when it is not theirs."""
    if not _references:
        return None
    for link in _chain(exc):
        frames = [f for f in traceback.extract_tb(link.__traceback__) if _is_user_file(f.filename)]
        if isinstance(link, SyntaxError) and link.filename and _is_user_file(link.filename):
            return _error(link, f"{_short(link.filename)}:{link.lineno}", None)
        if frames:
            frame = frames[-1]
            where = f"{_short(frame.filename)}:{frame.lineno} in {frame.name}"
            return _error(
                link, where, (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
            )
    if _is_tensorflow_error(exc):
        return UserCodeError(
            f"TensorFlow failed while running your code ({', '.join(_references)}): {one_line(exc)}",
            fix="check the dtypes and shapes your dataset and model produce (tf.numpy_function and "
            "tf.py_function must return the dtypes they declare); run with --verbose for the full error",
        )
    return None


def _error(exc: BaseException, where: str, line: str | None) -> UserCodeError:
    source = f" ({line})" if line else ""
    return UserCodeError(
        f"Your code raised {one_line(exc)} at {where}{source}",
        fix="fix the error there; run with --verbose for the full traceback",
    )


def _short(filename: str) -> str:
    path = Path(filename)
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _is_tensorflow_error(exc: BaseException) -> bool:
    return any(type(link).__module__.startswith("tensorflow.") for link in _chain(exc))

"""Words in tfgpu's sentences that depend on a number, and an error's text in one line.

One place for it: the demo on one GPU printed "on 1 replicas" (H100, 2026-11-27), and the same
expression stood in seven f-strings.
"""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: "1 replica", "2 replicas", "0 rows"."""
    return f"{n} {noun}{'s' * (n != 1)}"


def error_line(exc: BaseException) -> str:
    """An error's text on one line, at most 400 characters, without Keras's terminal bold: what
    a message quotes of Keras's or TensorFlow's error."""
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()  # Keras's bold, for a terminal
    return " ".join(text.split())[:400] if text else type(exc).__name__

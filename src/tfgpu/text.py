"""Words in tfgpu's sentences that depend on a number.

One place for it: the demo on one GPU printed "on 1 replicas" (H100, 2026-11-27), and the same
expression stood in seven f-strings.
"""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: "1 replica", "2 replicas", "0 rows"."""
    return f"{n} {noun}{'s' * (n != 1)}"

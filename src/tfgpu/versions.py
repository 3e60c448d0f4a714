"""Version numbers and the compatibility tables tfgpu's checks rest on.

Sources: TensorFlow's tested build configurations (tensorflow/docs install/source.md) and the
tensorflow 2.21 wheel metadata; see ../shared/REFERENCE.md section 1.9.
"""

from __future__ import annotations

import re

Version = tuple[int, ...]


def parse_version(text: str) -> Version:
    """'2.21.0rc1' -> (2, 21, 0); only the leading numeric parts count."""
    parts = []
    for piece in text.strip().split("."):
        match = re.match(r"\d+", piece)
        if not match:
            break
        parts.append(int(match.group()))
    return tuple(parts) or (0,)


# TensorFlow minor version -> (lowest Python, highest Python) it ships wheels for.
PYTHON_SUPPORT: dict[tuple[int, int], tuple[tuple[int, int], tuple[int, int]]] = {
    (2, 21): ((3, 10), (3, 13)),
    (2, 20): ((3, 9), (3, 13)),
    (2, 19): ((3, 9), (3, 12)),
    (2, 18): ((3, 9), (3, 12)),
    (2, 17): ((3, 9), (3, 12)),
    (2, 16): ((3, 9), (3, 12)),
    (2, 15): ((3, 9), (3, 11)),
    (2, 14): ((3, 9), (3, 11)),
    (2, 13): ((3, 8), (3, 11)),
    (2, 12): ((3, 8), (3, 11)),
}

# The oldest Linux driver for each CUDA major (CUDA minor-version compatibility).
MIN_DRIVER_FOR_CUDA_MAJOR = {12: "525.60.13", 11: "450.80.02"}


def python_range(tf_version: str) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The Python versions a TensorFlow release supports; None when the table does not know it."""
    return PYTHON_SUPPORT.get(parse_version(tf_version)[:2])


def capability_support(cc: tuple[int, int], compiled: list[str]) -> tuple[str, str | None]:
    """How a GPU of compute capability ``cc`` runs TensorFlow's kernels.

    ``compiled`` is build_info's cuda_compute_capabilities, e.g. ["sm_60", ..., "compute_90"]:
    sm_XY is machine code that runs on X.Y' with the same major and Y' >= Y; compute_XY is PTX
    that the driver compiles at start-up for any X.Y' >= X.Y. Returns (native | ptx-jit |
    unsupported, the entry used).
    """
    sass, ptx = [], []
    for entry in compiled:
        match = re.fullmatch(r"(sm|compute)_(\d+)(\d)", entry.strip())
        if match:
            target = (int(match.group(2)), int(match.group(3)))
            (sass if match.group(1) == "sm" else ptx).append((target, entry))
    native = [e for t, e in sorted(sass) if t[0] == cc[0] and t[1] <= cc[1]]
    if native:
        return "native", native[-1]
    jit = [e for t, e in sorted(ptx) if t <= cc]
    if jit:
        return "ptx-jit", jit[-1]
    return "unsupported", None

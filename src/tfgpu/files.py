"""Writing files so that a reader never sees half of one: a temporary name, then a rename.

The temporary name carries the writer's process id, so concurrent writers (several workers of a
launch, say) never share one; a leftover one can be told from a live one by its process id.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tfgpu.errors import InputError


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, target)
    return target


def write_json_atomic(path: str | os.PathLike, data: Any, *, indent: int | None = 2) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=indent, default=str))


def check_output_directory(path: str | os.PathLike, *, command: str) -> Path:
    """``path`` as a Path; InputError when it is an existing file (commands write directories)."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise InputError(
            f"The output {path} is a file, but {command} writes a directory there",
            value=str(path),
            fix="pass a new or existing directory as OUTPUT",
        )
    return out

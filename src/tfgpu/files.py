"""Writing files so that a reader never sees half of one: a temporary name, then a rename.

The temporary name carries the writer's process id, so concurrent writers (several workers of a
launch, say) never share one; a leftover one can be told from a live one by its process id.
"""

from __future__ import annotations

import hashlib
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


def remove_leftover_temporaries(directory: str | os.PathLike) -> list[Path]:
    """Delete the temporary files (``NAME.tmp-PID``) in ``directory`` whose writer is gone.

    A process killed while writing leaves one; a live writer's (another worker of the same run)
    is kept. Returns what was deleted.
    """
    removed = []
    for path in Path(directory).glob("*.tmp-*"):
        pid = path.name.rsplit(".tmp-", 1)[1]
        if pid.isdigit() and not _alive(int(pid)):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


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


def fingerprint(path: str | os.PathLike, *, exclude: str | os.PathLike | None = None) -> dict[str, Any]:
    """What a file or a folder holds, cheaply: the count, total size and a hash of the listing of
    every file with its size and modification time (leaving out the folder ``exclude``). Why: a
    resumed run must be fed what the first one was, and reading gigabytes to hash them would cost
    more than the run saves."""
    listing = file_listing(path, exclude=exclude)
    digest = hashlib.sha256(json.dumps(listing).encode()).hexdigest()[:16]
    return {"files": len(listing), "bytes": sum(entry[1] for entry in listing), "listing_sha256": digest}


LISTING_KEPT = 10_000  # files: a larger source keeps only its fingerprint


def file_listing(path: str | os.PathLike, *, exclude: str | os.PathLike | None = None) -> list[list[Any]]:
    """[relative name, size, modification time in ns] of every file under ``path`` (or of the file)."""
    root = Path(path)
    skip = Path(exclude).resolve() if exclude is not None else None
    if root.is_file():
        files = [root]
    else:
        files = sorted(f for f in root.rglob("*") if f.is_file()) if root.is_dir() else []
        if skip is not None:
            files = [f for f in files if not f.resolve().is_relative_to(skip)]
    listing = []
    for file in files:
        stat = file.stat()
        listing.append(
            [file.name if file == root else str(file.relative_to(root)), stat.st_size, stat.st_mtime_ns]
        )
    return listing


def listing_changes(earlier: list[list[Any]], now: list[list[Any]], *, most: int = 5) -> str:
    """Which files were added, removed or modified between two listings, in words ("" if none)."""
    before = {name: (size, mtime) for name, size, mtime in earlier}
    after = {name: (size, mtime) for name, size, mtime in now}
    parts = []
    for label, names in (
        ("added", sorted(set(after) - set(before))),
        ("removed", sorted(set(before) - set(after))),
        ("modified", sorted(n for n in set(before) & set(after) if before[n] != after[n])),
    ):
        if names:
            shown = ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")
            parts.append(f"{label} {shown}")
    return "; ".join(parts)


def changed(earlier: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The keys whose values differ between two identities (nested dicts by dotted name)."""
    names = []
    for key in sorted(set(earlier) | set(now)):
        a, b = earlier.get(key), now.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            names += [f"{key}.{inner}" for inner in changed(a, b)]
        elif a != b:
            names.append(key)
    return names


def dig(data: dict[str, Any], dotted: str) -> Any:
    """``data["a"]["b"]`` for ``"a.b"`` (None where a key is missing)."""
    for key in dotted.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return data

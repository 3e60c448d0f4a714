"""The package's modules, read as text (neither tfgpu nor TensorFlow imported): for the tests of
its layering, its shapes and its call graph."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SRC = ROOT / "src"
PACKAGE = SRC / "tfgpu"


def module_name(path: Path) -> str:
    """``src/tfgpu/train/loop/training.py`` -> ``tfgpu.train.loop.training`` (a package's ``__init__`` is the package)."""
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(dotted: str) -> bool:
    """Whether ``dotted`` (tfgpu.x.y) is a module or package on disk, not a name inside one."""
    base = SRC.joinpath(*dotted.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def library_modules() -> list[tuple[str, Path]]:
    """Every module of the package: (dotted name, path), by path."""
    return [(module_name(p), p) for p in sorted(PACKAGE.rglob("*.py"))]

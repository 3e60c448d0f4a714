"""Where XLA finds what it compiles for an NVIDIA GPU with, looked for as TensorFlow looks.

XLA on a GPU needs a PTX compiler (``ptxas``) and libdevice (``nvvm/libdevice/libdevice.10.bc``):
from the pip package ``nvidia-cuda-nvcc-cu12`` (part of ``tensorflow[and-cuda]``) or a CUDA
toolkit. Without them ``jit_compile=True`` fails ("No PTX compilation provider is available",
openxla/xla ``assemble_compilation_provider.cc``) or falls back to the driver's compiler; Keras 3
turns XLA on by default on one GPU, so the default user meets it (tfgpu's own GPU bench did, on
2026-11-28: Keras's default ``fit`` never finished its warm-up). TensorFlow looks in the directory
``XLA_FLAGS=--xla_gpu_cuda_data_dir=...`` names, in the ``nvidia/cuda_nvcc`` package beside its
own, in the CUDA it was built against (``/usr/local/cuda``), and for ``ptxas`` on ``PATH``
(tsl ``cuda_root_path.cc``). Nothing here imports TensorFlow: doctor's probe calls ``find`` in
its child process, with that interpreter's site directories.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

LIBDEVICE = Path("nvvm") / "libdevice" / "libdevice.10.bc"
TOOLKIT = "/usr/local/cuda"  # where TensorFlow's builds expect a CUDA toolkit
FIX = (
    'pip install "nvidia-cuda-nvcc-cu12" (part of pip install "tfgpu[and-cuda]"), or point '
    "XLA_FLAGS=--xla_gpu_cuda_data_dir=<a CUDA toolkit> at one"
)


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """What was found (None: not found) and every place looked in."""

    ptxas: str | None
    libdevice: str | None
    searched: tuple[str, ...]

    def missing(self) -> list[str]:
        return [name for name, path in (("ptxas", self.ptxas), ("libdevice", self.libdevice)) if path is None]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def roots(environ: Mapping[str, str], *, site_dirs: Iterable[str], toolkits: Iterable[str]) -> list[Path]:
    """The CUDA roots XLA looks in, in its order."""
    found = []
    named = re.search(r"--xla_gpu_cuda_data_dir=(\S+)", environ.get("XLA_FLAGS", ""))
    if named:
        found.append(Path(named.group(1)))
    found += [Path(d) / "nvidia" / "cuda_nvcc" for d in site_dirs]
    found += [Path(t) for t in toolkits]
    unique: list[Path] = []
    for root in found:
        if root not in unique:
            unique.append(root)
    return unique


def find(
    environ: Mapping[str, str] | None = None,
    *,
    site_dirs: Iterable[str] | None = None,
    toolkits: Iterable[str] = (TOOLKIT,),
) -> Toolchain:
    """``ptxas`` and libdevice where XLA looks (``environ``'s PATH and XLA_FLAGS; the site
    directories: this interpreter's ``sys.path`` by default; the CUDA toolkits TensorFlow's
    builds expect)."""
    environ = os.environ if environ is None else environ
    toolkits = tuple(toolkits)
    candidates = roots(environ, site_dirs=sys.path if site_dirs is None else site_dirs, toolkits=toolkits)
    ptxas = next((str(r / "bin" / "ptxas") for r in candidates if (r / "bin" / "ptxas").is_file()), None)
    ptxas = ptxas or shutil.which("ptxas", path=environ.get("PATH", ""))
    libdevice = next((str(r / LIBDEVICE) for r in candidates if (r / LIBDEVICE).is_file()), None)
    named = re.search(r"--xla_gpu_cuda_data_dir=(\S+)", environ.get("XLA_FLAGS", ""))
    searched = (
        *([f"XLA_FLAGS's {named.group(1)}"] if named else []),
        "site-packages/nvidia/cuda_nvcc",
        *toolkits,
        "PATH",
    )
    return Toolchain(ptxas=ptxas, libdevice=libdevice, searched=searched)

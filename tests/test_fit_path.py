"""The way from ``tfgpu.fit`` to its compiled step (issue 55): a tuned fit traced in a child process
by ``bench/trace_fit.py`` (tests/test_layering.py holds the layers by reading imports; this one runs
the code), held to the issue's limits on the modules and pairs it walks through."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROOMS, DOORS, PATH = 20, 40, 6  # modules entered, module pairs crossed, modules from fit to a compiled call


@pytest.mark.process
def test_a_tuned_fit_walks_through_few_rooms(tmp_path):
    """``tfgpu.fit(tune=True)`` on one device, traced by ``bench/trace_fit.py``: inside
    ``tfgpu.train`` (the scope Keras's 12 modules and 16 pairs were counted in: its trainer, data
    adapters and callbacks), at most ``ROOMS`` modules entered and ``DOORS`` pairs crossed, and
    every path from ``keras_fit.fit`` to a compiled call (the loop's step, the tuner's trials) at
    most ``PATH`` modules long. When the issue was filed, the whole package read 43 modules and
    90 pairs, and the tuner's path 10 modules."""
    out = tmp_path / "trace.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "trace_fit.py"), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TFGPU_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(out.read_text())
    rooms = {m for m in found["modules"] if m.startswith("tfgpu.train")}
    doors = [
        (a, b) for a, b, _ in found["pairs"] if a.startswith("tfgpu.train") and b.startswith("tfgpu.train")
    ]
    assert len(rooms) <= ROOMS, sorted(rooms)
    assert len(doors) <= DOORS, sorted(doors)
    assert found["paths"] and all(len(path) <= PATH for path, _ in found["paths"]), found["paths"]
    assert any(path[-1] == "tfgpu.train.execution" for path, _ in found["paths"])  # the tuner's trials

#!/usr/bin/env bash
# The wheel as a user gets it: built from this repo, installed with no extras into a fresh virtual
# environment, run from a folder outside the repo. Catches a module missing from the wheel, a
# dependency missing from pyproject.toml, a file read relative to the repo.
# Usage: .ci/wheel_smoke.sh PYTHON BUILD_PYTHON   (BUILD_PYTHON has the `build` package)
set -euo pipefail
python=${1:-python3}
builder=${2:-python3}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$builder" -m build --wheel --outdir "$work/dist" "$repo" > "$work/build.log" 2>&1 || { tail -30 "$work/build.log"; exit 1; }
"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "$work"/dist/tfgpu-*.whl
cd "$work"
"$work/venv/bin/tfgpu" --version
# doctor exits 1 when a check fails (no GPU here is a warning, not a failure); 2 or more is a bug
status=0
"$work/venv/bin/tfgpu" doctor --json > doctor.json || status=$?
test "$status" -le 1 || { echo "tfgpu doctor exited $status"; exit 1; }
"$work/venv/bin/python" -c "import json; print('doctor: tfgpu', json.load(open('doctor.json'))['facts']['tfgpu'])"
# a CSV (pyarrow) converted and read back, an image folder (pillow), a plot (matplotlib)
"$work/venv/bin/python" - <<'PY'
import numpy as np
from PIL import Image
rng = np.random.default_rng(0)
with open("rows.csv", "w") as f:
    f.write("a,b,y\n" + "".join(f"{rng.normal():.4f},{rng.normal():.4f},{i % 2}\n" for i in range(64)))
for label in ("cat", "dog"):
    import os
    os.makedirs(f"images/{label}", exist_ok=True)
    for i in range(4):
        Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(f"images/{label}/{i}.jpg")
PY
"$work/venv/bin/tfgpu" convert rows.csv rows-ds --label y --json > /dev/null
"$work/venv/bin/tfgpu" convert images images-ds --json > /dev/null
"$work/venv/bin/python" -c "
import tfgpu.data, tfgpu.report.plots as p
assert tfgpu.data.load('rows-ds').total_rows == 64 and tfgpu.data.load('images-ds').total_rows == 8
assert p.lines({'a': [(0, 1.0), (1, 2.0)]}, title='t', xlabel='x', ylabel='y')
print('wheel smoke: ok')
"

#!/usr/bin/env bash
# The README's test command on a fresh clone of HEAD, with two busy TensorFlow jobs beside it
# (issue 44: the suite passes on a loaded machine). Prints make test's status and its seconds.
#   bash bench/loaded.sh [LOG]        (LOG default: /tmp/tfgpu-loaded.log)
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
log="${1:-/tmp/tfgpu-loaded.log}"
clone="$(mktemp -d)/tfgpu"
git clone -q "$repo" "$clone"
python="${PYTHON:-python3}"
# the busy jobs run from this checkout's venv (a fresh clone has none until make test makes it)
busy_python="$repo/.venv/bin/python"
pids=()
for _ in 1 2; do
  "$busy_python" "$repo/bench/busy.py" --for 10800 >/dev/null 2>&1 &
  pids+=($!)
done
started=$(date +%s)
(cd "$clone" && make test PYTHON="$python") >"$log" 2>&1
status=$?
ended=$(date +%s)
kill "${pids[@]}" 2>/dev/null
echo "make test on a fresh clone beside two busy TensorFlow jobs: exit $status in $((ended - started)) s (log: $log)"
exit $status

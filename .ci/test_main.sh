#!/usr/bin/env bash
# The main suite in two lanes side by side, each a pytest process per group of files:
#   lane 1: tests/test_[a-d]*.py, then tests/test_[l-z]*.py
#   lane 2: tests/test_[e-k]*.py
# A process per group: one process for the whole suite slowed as it went (tests that take 6 s
# alone took 144 s near its end, 790 tests of models and iterators in one heap). Two lanes at once:
# the suite passes beside two busy TensorFlow jobs (make test-loaded), so each lane beside the
# other is a load it holds, and the 2 cores are kept busy through each lane's process starts and
# waits. Each lane's output is printed when it ends; the status is the first failure's.
# AFTER, a command, runs in lane 2 after its tests (make test: the Estimator lane and the wheel,
# while lane 1, the longer, still runs).
#   bash .ci/test_main.sh PYTHON [AFTER]
set -uo pipefail
python="$1"
after="${2:-}"
logs="$(mktemp -d)"
run() {  # run GROUP...: each group's pytest in turn (all of them: one CI run shows every failure)
  local status=0 code
  for group in "$@"; do
    HYPOTHESIS_PROFILE=ci "$python" -m pytest -q --durations=10 $group
    code=$?
    if [ "$status" -eq 0 ]; then status=$code; fi
  done
  return $status
}
run "tests/test_[a-d]*.py" "tests/test_[l-z]*.py" >"$logs/1" 2>&1 &
one=$!
lane2() {
  local status=0 code
  run "tests/test_[e-k]*.py"
  status=$?
  if [ -n "$after" ]; then
    bash -c "$after"
    code=$?
    if [ "$status" -eq 0 ]; then status=$code; fi
  fi
  return $status
}
lane2 >"$logs/2" 2>&1 &
two=$!
wait $two; second=$?
echo "== lane 2: tests/test_[e-k]*.py${after:+, then $after} (exit $second)"; cat "$logs/2"
wait $one; first=$?
echo "== lane 1: tests/test_[a-d]*.py, tests/test_[l-z]*.py (exit $first)"; cat "$logs/1"
rm -rf "$logs"
if [ "$first" -ne 0 ]; then exit "$first"; fi
exit "$second"

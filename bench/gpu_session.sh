#!/bin/bash
# One lent GPU session's measurements, in order of what matters most (the gpu tests, the demo, the training bench first), each under its own timeout,
# logs under $OUT (../shared/gpu/README.md: run through .gpu/on_device.sh, which puts TensorFlow 2.21
# and this checkout's src/ on the path): the device seen, doctor, the training bench, the
# predict-on-arrays bench, the demo's time and the gpu-marked tests (about 12 minutes at most).
#   bash .gpu/on_device.sh bash bench/gpu_session.sh
#   STEPS="device gpu_tests demo" bash .gpu/on_device.sh bash bench/gpu_session.sh   (some of them)
set -u
STEPS=${STEPS:-device gpu_tests demo gpu_bench doctor predict_arrays}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
step() {  # step NAME SECONDS COMMAND...: the command's output to $OUT/NAME.log, its time and status to $OUT/steps.log
  local name=$1 limit=$2
  shift 2
  case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
  local start=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - start))s" | tee -a "$OUT/steps.log"
  tail -n 12 "$OUT/$name.log"
}
step device 60 sh -c 'nvidia-smi -L; python3 -c "import tensorflow as tf; print(tf.__version__, tf.config.list_physical_devices(\"GPU\"))"'
step gpu_tests 240 python3 -m pytest -q -x -m gpu tests/test_gpu.py -p no:cacheprovider
rm -rf /tmp/demo && mkdir -p /tmp/demo && (cd /tmp/demo && step demo 130 tfgpu demo)
step gpu_bench 220 python3 bench/gpu_bench.py --repeats 3
step doctor 60 tfgpu doctor
step predict_arrays 120 python3 bench/predict_arrays_bench.py --devices 1 --processes 1 --rounds 3

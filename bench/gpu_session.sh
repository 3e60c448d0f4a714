#!/bin/bash
# One lent GPU session's measurements, each under its own timeout,
# logs under $OUT (../shared/gpu/README.md: run through .gpu/on_device.sh, which puts TensorFlow 2.21
# and this checkout's src/ on the path): the device seen, doctor, the training bench, the
# predict-on-arrays bench, the demo's time and the gpu-marked tests.
# Issue 54 first, one command each (a command may run 10 minutes; the session has 15 in all):
#   STEPS="device ablation" bash .gpu/on_device.sh bash bench/gpu_session.sh   (about 5 minutes)
#   STEPS="resnet" bash .gpu/on_device.sh bash bench/gpu_session.sh            (up to 9)
#   STEPS="gpu_tests demo gpu_bench predict_arrays doctor" bash .gpu/on_device.sh bash bench/gpu_session.sh
set -u
STEPS=${STEPS:-device ablation}
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
step ablation 260 sh -c 'cd bench && python3 ablation_bench.py --repeats 3'
step resnet 560 python3 bench/resnet_bench.py --steps 50 --timeout 135
step gpu_tests 240 python3 -m pytest -q -x -m gpu tests/test_gpu.py -p no:cacheprovider
rm -rf /tmp/demo && mkdir -p /tmp/demo && (cd /tmp/demo && step demo 130 tfgpu demo)
step gpu_bench 220 python3 bench/gpu_bench.py --repeats 3
step doctor 60 tfgpu doctor
step predict_arrays 120 python3 bench/predict_arrays_bench.py --devices 1 --processes 1 --rounds 3

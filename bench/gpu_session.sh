#!/bin/bash
# One lent GPU session's measurements, each under its own timeout,
# logs under $OUT (../shared/gpu/README.md: run through .gpu/on_device.sh, which puts TensorFlow 2.21
# and this checkout's src/ on the path): the device seen, doctor, the training bench, the
# predict-on-arrays bench, the demo's time and the gpu-marked tests.
# Issue 54 first. On 2026-11-28 (H200) the 21 parts took 140 s of device time, the start included,
# and 760 s were left: with the last part, one call of about 520 s, then one of the rest:
#   mv .gpu/part20 /tmp/parts/ && BUDGET=515 STEPS="device ablation ptxas xla cnn resnet" bash .gpu/on_device.sh bash bench/gpu_session.sh
#   BUDGET=180 STEPS="predict_arrays demo" bash .gpu/on_device.sh bash bench/gpu_session.sh  (carry .gpu/on_device.sh again)
# Steps: device 12 s, ablation 143 s, demo 67 s, predict_arrays 36 s; cnn about 2 min and resnet
# up to 9 if XLA compiles there (it did not finish in 120 s that day: the xla step says why).
#   STEPS="gpu_tests gpu_bench doctor": the gpu-marked tests and issue 16's bench
#   Issue 65's ladder is the ablation step's first rows; its e2e step is the user's clock.
#   A session with less time: BUDGET=SECONDS cuts each step's timeout to what is left of it, and
#   skips a step with under 20 s left (the steps run in the order below, most wanted first).
set -u
STEPS=${STEPS:-device ablation}
BUDGET=${BUDGET:-100000}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
step() {  # step NAME SECONDS COMMAND...: the command's output to $OUT/NAME.log, its time and status to $OUT/steps.log
  local name=$1 limit=$2
  shift 2
  case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
  local left=$((BUDGET - SECONDS - 5))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 20 ]; then echo "$name skipped: ${left}s of the budget left" | tee -a "$OUT/steps.log"; return 0; fi
  local start=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - start))s" | tee -a "$OUT/steps.log"
  tail -n 12 "$OUT/$name.log"
}
step device 60 sh -c 'nvidia-smi -L; python3 -c "import tensorflow as tf; print(tf.__version__, tf.config.list_physical_devices(\"GPU\"))"'
step ablation 260 sh -c 'cd bench && python3 ablation_bench.py --repeats 3'
# XLA on this GPU, alone and loud (TensorFlow's own log on): the 2026-11-28 session's XLA variants
# never finished their warm-up, and the bundle carries no ptxas
step ptxas 10 sh -c 'which ptxas nvcc; ls -d /usr/local/cuda*/bin/ptxas /usr/local/cuda*/nvvm/libdevice 2>&1; ls /tmp/g/site/nvidia'
step xla 90 env TF_CPP_MIN_LOG_LEVEL=0 python3 -c 'import time, tensorflow as tf; t = time.time(); f = tf.function(lambda x: tf.nn.relu(x @ x), jit_compile=True); print("xla", f(tf.ones((256, 256))).shape, round(time.time() - t, 1), "s")'
step cnn 240 python3 bench/resnet_bench.py --model cnn --steps 200 --timeout 120
# issue 65: the user's clock (fresh processes, Keras against tfgpu.fit and tune=True), one round
step e2e 240 sh -c 'cd bench && python3 e2e_bench.py --rounds 1 --epochs 1,3'
step resnet 560 python3 bench/resnet_bench.py --steps 30 --timeout 130 --variants "keras fit default,tfgpu.fit default,keras fit expert,tfgpu.fit tune=all"
step gpu_tests 240 python3 -m pytest -q -x -m gpu tests/test_gpu.py -p no:cacheprovider
rm -rf /tmp/demo && mkdir -p /tmp/demo && (cd /tmp/demo && step demo 130 tfgpu demo)
step gpu_bench 220 python3 bench/gpu_bench.py --repeats 3
step doctor 60 tfgpu doctor
step predict_arrays 120 python3 bench/predict_arrays_bench.py --devices 1 --processes 1 --rounds 3

"""What TensorFlow itself says, asked in a child process.

Run as ``python -m tfgpu.doctor.tfprobe [--deep]``: prints one JSON object on stdout. The parent
(``run_probe``) keeps TensorFlow's log lines from stderr, because the reason TensorFlow skips a GPU
("Cannot dlopen some GPU libraries") is only ever printed there. Running in a child means doctor
never initializes TensorFlow's GPU runtime in the caller, so a program may call it before
``tfgpu.configure``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from typing import Any

from tfgpu import selfcheck
from tfgpu.doctor import xla_toolchain

DEEP_GPU_MB = 1024  # each of the two logical GPUs --deep makes of a single GPU

# TensorFlow log lines that explain why a GPU is not used.
LOG_PATTERNS = (
    r"Cannot dlopen some GPU libraries",
    r"Could not find cuda drivers",
    r"failed call to cuInit",
    r"Could not load dynamic library",
    r"Ignoring visible gpu device",
    r"minimum required Cuda capability",
    r"Skipping registering GPU devices",
    r"driver version is insufficient",
    r"CUDA_ERROR_\w+",
    r"Loaded runtime CuDNN library",
    r"TensorFlow was not built with CUDA",
    r"not built with CUDA kernel binaries compatible",  # a GPU newer than the build (Blackwell)
    r"PTX version [\d.]+ does not support",  # XLA on a GPU newer than its PTX (Blackwell)
)
_LOG_RE = re.compile("|".join(LOG_PATTERNS))


def interesting_lines(stderr: str, *, limit: int = 20) -> list[str]:
    """TensorFlow log lines that bear on GPU use, prefixes stripped, duplicates dropped."""
    seen: list[str] = []
    for line in stderr.splitlines():
        if _LOG_RE.search(line):
            text = re.sub(r"^[IWEF]\d{4} [\d:.]+\s+\d+\s+\S+\]\s*", "", line.strip())
            if text not in seen:
                seen.append(text)
    return seen[:limit]


def run_probe(*, deep: bool = False, timeout: float = 300.0) -> dict[str, Any]:
    """Run the probe in a child Python; always returns a dict (``ok`` False on failure)."""
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "0"  # the reasons are logged at INFO / WARNING
    env.pop("TF_CONFIG", None)  # probing must not try to join the user's cluster
    command = [sys.executable, "-m", "tfgpu.doctor.tfprobe"] + (["--deep"] if deep else [])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"the TensorFlow probe did not finish in {timeout:.0f} s"}
    return parse_output(done.stdout, done.stderr, deep=deep)


def parse_output(stdout: str, stderr: str, *, deep: bool) -> dict[str, Any]:
    """The probe's result from its output.

    The child prints its result once after the basic facts and again with --deep's results, so a
    deep step that kills the process (XLA's LLVM aborts on a GPU it does not know) still leaves the
    basic facts, and the crash is reported as the deep step's error.
    """
    tail = " | ".join(stderr.strip().splitlines()[-3:])
    results = [_json_object(line) for line in stdout.strip().splitlines()]
    results = [r for r in results if r is not None]
    if not results:
        result: dict[str, Any] = {"ok": False, "error": "the TensorFlow probe crashed: " + tail}
    else:
        result = results[-1]
        if deep and result.get("ok") and "deep" not in result:
            result["deep"] = {"errors": {"probe": "the deep probe crashed: " + tail}}
    result["log_lines"] = interesting_lines(stderr)
    return result


def _json_object(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _gather(tf: Any) -> dict[str, Any]:
    import keras

    gpus = tf.config.list_physical_devices("GPU")
    details = []
    for gpu in gpus:
        try:
            info = dict(tf.config.experimental.get_device_details(gpu))
        except Exception:  # details are a bonus
            info = {}
        cc = info.get("compute_capability")
        details.append(
            {
                "name": gpu.name,
                "device_name": info.get("device_name"),
                "compute_capability": list(cc) if cc else None,
            }
        )
    build = {k: (list(v) if isinstance(v, tuple) else v) for k, v in tf.sysconfig.get_build_info().items()}
    try:
        import tensorflow_estimator  # noqa: F401

        estimator_package = True
    except ImportError:
        estimator_package = False
    return {
        "ok": True,
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "legacy_keras": os.environ.get("TF_USE_LEGACY_KERAS", "") in ("1", "true", "True"),
        "cuda_build": bool(tf.test.is_built_with_cuda()),
        "build": build,
        "gpus": details,
        "estimator": hasattr(tf, "estimator") and hasattr(tf.estimator, "Estimator"),
        "estimator_package": estimator_package,
        "packages": sorted(name for name in ("tensorboard", "xprof") if importlib.util.find_spec(name)),
        # where XLA finds ptxas and libdevice, looked for in this interpreter where there is a GPU
        "xla_toolchain": xla_toolchain.find().to_dict() if gpus else None,
    }


def _matmul_rates(tf: Any) -> list[dict[str, Any]]:
    """GFLOP/s of a float32 matmul on each GPU (or on the CPU when there is none)."""
    devices = [d.name for d in tf.config.list_logical_devices("GPU")] or ["/device:CPU:0"]
    rates = []
    for device in devices:
        n = 4096 if "GPU" in device else 1024
        with tf.device(device):
            a = tf.random.uniform((n, n))
            b = tf.random.uniform((n, n))
            tf.reduce_sum(tf.matmul(a, b)).numpy()  # warm-up
            repeats = 5
            start = time.perf_counter()
            for _ in range(repeats):
                c = tf.matmul(a, b)
            tf.reduce_sum(c).numpy()
            seconds = time.perf_counter() - start
        rates.append({"device": device, "size": n, "gflops": round(2 * n**3 * repeats / seconds / 1e9, 1)})
    return rates


def _xla(tf: Any) -> dict[str, Any] | None:
    """Compile and run one small function with XLA on the first GPU (None without a GPU).

    On a GPU newer than TensorFlow's CUDA (Blackwell on a CUDA 12.5 build) this is the step that
    fails, while plain ops may still run through the driver's PTX JIT.
    """
    gpus = tf.config.list_logical_devices("GPU")
    if not gpus:
        return None
    with tf.device(gpus[0].name):
        double_sum = tf.function(lambda x: tf.reduce_sum(x * 2.0), jit_compile=True)
        ones = tf.ones((64, 64))
        started = time.perf_counter()
        value = float(double_sum(ones))  # the first call compiles
        compile_s = time.perf_counter() - started
    return {"device": gpus[0].name, "ok": value == 2.0 * 64 * 64, "compile_s": round(compile_s, 3)}


def _deep(tf: Any) -> dict[str, Any]:
    """--deep's measurements; a step that raises is reported under errors, the others still run."""
    steps = (("matmul", _matmul_rates), ("replicas", selfcheck.replica_agreement), ("xla", _xla))
    deep: dict[str, Any] = {"errors": {}}
    for name, step in steps:
        try:
            deep[name] = step(tf)
        except Exception as exc:  # data for the parent: which step failed, and TensorFlow's words
            deep["errors"][name] = f"{type(exc).__name__}: {exc}"[:2000]
    return deep


def _split_devices(tf: Any) -> None:
    """Two logical devices for the replica check, so it runs the GPU's (or CPU's) own path."""
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) == 1:
        half = tf.config.LogicalDeviceConfiguration(memory_limit=DEEP_GPU_MB)
        tf.config.set_logical_device_configuration(gpus[0], [half, half])
    elif not gpus:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)


def main(argv: list[str]) -> int:
    deep = "--deep" in argv
    try:
        import tensorflow as tf

        if deep:
            _split_devices(tf)
        result = _gather(tf)
    except Exception as exc:  # reported to the parent as data, not a crash
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}, default=str), flush=True)
        return 0
    print(json.dumps(result, default=str), flush=True)  # kept if a deep step kills the process
    if deep:
        result["deep"] = _deep(tf)
        print(json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

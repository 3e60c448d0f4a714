"""Doctor's checks: one function each, from gathered Facts to CheckResults.

A check never probes anything itself; it reads Facts (NVML, the TensorFlow child probe, the
environment), so every path, GPU ones included, is testable with made-up facts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from tfgpu import cluster, nvml, versions
from tfgpu.doctor import blackwell, known_issues, xla_toolchain
from tfgpu.doctor.estimator_help import GUIDE, install_line
from tfgpu.errors import ClusterError

OK, WARN, FAIL = "ok", "warn", "fail"
INSTALL_GPU_TF = 'pip install "tfgpu[and-cuda]"'  # pulls "tensorflow[and-cuda]"


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str  # ok | warn | fail
    finding: str
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Facts:
    """Everything doctor knows about this machine, gathered once."""

    python: tuple[int, int, int]
    cpu_count: int
    nvml: nvml.NvmlReport
    tf: dict[str, Any]
    environ: dict[str, str] = field(default_factory=dict)
    unknown_tfgpu_variables: list[str] = field(default_factory=list)
    public_addresses: list[tuple[str, str]] = field(default_factory=list)  # (interface, address)

    @property
    def tf_ok(self) -> bool:
        return bool(self.tf.get("ok"))

    @property
    def visible_gpus(self) -> tuple[nvml.GpuInfo, ...]:
        return nvml.visible(self.nvml, self.environ.get("CUDA_VISIBLE_DEVICES"))

    @property
    def tf_gpu_count(self) -> int:
        return len(self.tf.get("gpus") or [])

    @property
    def tf_messages(self) -> list[str]:
        """What TensorFlow said: its GPU-related log lines, then the errors of --deep's steps."""
        deep = self.tf.get("deep") or {}
        return list(self.tf.get("log_lines") or []) + list((deep.get("errors") or {}).values())

    def installed_versions(self) -> dict[str, str]:
        """The versions known issues are ranged over (see known_issues.PACKAGES); unknown ones left out."""
        found = {"python": ".".join(map(str, self.python))}
        if self.tf_ok:
            found["tensorflow"] = self.tf["tensorflow"]
            if self.tf.get("keras"):
                found["keras"] = self.tf["keras"]
        if self.nvml.available and self.nvml.driver_version:
            found["driver"] = self.nvml.driver_version
        return found

    def installed_packages(self) -> frozenset[str]:
        """Optional packages the TensorFlow probe found (tensorboard, xprof, tensorflow-estimator)."""
        names = set(self.tf.get("packages") or ())
        if self.tf.get("estimator_package"):
            names.add("tensorflow-estimator")
        return frozenset(names)

    def to_dict(self) -> dict[str, Any]:
        from tfgpu import __version__

        return {
            "tfgpu": __version__,
            "python": ".".join(map(str, self.python)),
            "cpu_count": self.cpu_count,
            "nvml": self.nvml.to_dict(),
            "tensorflow": self.tf,
            "environment": self.environ,
        }


def _py(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def check_python(f: Facts) -> CheckResult:
    current = f.python[:2]
    tf_version = f.tf.get("tensorflow") if f.tf_ok else None
    supported = versions.python_range(tf_version or "2.21")
    label = f"TensorFlow {tf_version}" if tf_version else "current TensorFlow (2.21)"
    if supported is None:
        return CheckResult("python", OK, f"Python {_py(current)} (no support table for {label})")
    low, high = supported
    if low <= current <= high:
        return CheckResult(
            "python", OK, f"Python {_py(current)}, supported by {label} ({_py(low)}-{_py(high)})"
        )
    return CheckResult(
        "python",
        FAIL,
        f"Python {_py(current)} is outside {label}'s supported {_py(low)}-{_py(high)}",
        f"use Python {_py(low)} to {_py(high)} in a new virtual environment",
    )


def check_tensorflow(f: Facts) -> CheckResult:
    if not f.tf_ok:
        return CheckResult(
            "tensorflow",
            FAIL,
            f"TensorFlow cannot be imported: {f.tf.get('error', 'unknown error')}",
            f"{INSTALL_GPU_TF} (Linux with an NVIDIA GPU) or pip install tensorflow",
        )
    version = f.tf["tensorflow"]
    if versions.parse_version(version) < (2, 16):
        return CheckResult(
            "tensorflow",
            WARN,
            f"TensorFlow {version}: older than 2.16 (Keras 2); tfgpu is tested on 2.21",
            "upgrade unless you need tf.estimator (then see tfgpu.estimator)",
        )
    return CheckResult("tensorflow", OK, f"TensorFlow {version}")


def check_build(f: Facts) -> CheckResult:
    if not f.tf_ok:
        return CheckResult("tensorflow-build", WARN, "unknown: TensorFlow cannot be imported")
    build = f.tf.get("build") or {}
    if f.tf.get("cuda_build"):
        caps = ", ".join(build.get("cuda_compute_capabilities") or []) or "?"
        return CheckResult(
            "tensorflow-build",
            OK,
            f"built for CUDA {build.get('cuda_version', '?')}, cuDNN {build.get('cudnn_version', '?')}, "
            f"compute capabilities {caps}",
        )
    if f.nvml.gpus:
        return CheckResult(
            "tensorflow-build",
            FAIL,
            f"this TensorFlow is a CPU-only build, but the machine has {len(f.nvml.gpus)} NVIDIA GPU(s)",
            f"pip uninstall tensorflow-cpu tensorflow; {INSTALL_GPU_TF}",
        )
    return CheckResult("tensorflow-build", OK, "CPU-only build (this machine has no NVIDIA GPU)")


def check_keras(f: Facts) -> CheckResult:
    if not f.tf_ok:
        return CheckResult("keras", WARN, "unknown: TensorFlow cannot be imported")
    version = f.tf.get("keras", "?")
    if f.tf.get("legacy_keras"):
        return CheckResult(
            "keras",
            WARN,
            f"TF_USE_LEGACY_KERAS is set: tf.keras is Keras 2 (tf_keras); tfgpu targets Keras 3 ({version})",
            "unset TF_USE_LEGACY_KERAS unless your code needs Keras 2",
        )
    if versions.parse_version(version) < (3,):
        return CheckResult("keras", WARN, f"Keras {version} (Keras 2)", "pip install 'keras>=3'")
    return CheckResult("keras", OK, f"Keras {version}")


_DRIVER_MISSING = {
    "library-not-found": (
        WARN,
        "no NVIDIA driver (the NVML library is not installed), so TensorFlow runs on the CPU",
        "if this machine has an NVIDIA GPU, install the NVIDIA driver (>= 525.60.13 for CUDA 12)",
    ),
    "driver-not-loaded": (
        FAIL,
        "the NVIDIA driver is installed but not loaded",
        "load it (sudo modprobe nvidia) or reboot after a kernel or driver update",
    ),
    "driver-library-mismatch": (
        FAIL,
        "the NVIDIA kernel driver and its user-space library differ in version",
        "reboot, or reinstall one driver version",
    ),
    "no-permission": (
        FAIL,
        "no permission to talk to the NVIDIA driver",
        "run as a user in the video group, or check the container's device mounts",
    ),
    "not-installed": (
        WARN,
        "nvidia-ml-py is not installed, so GPUs cannot be inspected",
        "pip install nvidia-ml-py",
    ),
}


def check_driver(f: Facts) -> CheckResult:
    report = f.nvml
    if report.available:
        cuda = f", supports CUDA up to {report.cuda_driver_version}" if report.cuda_driver_version else ""
        return CheckResult("nvidia-driver", OK, f"driver {report.driver_version}{cuda}")
    status, finding, fix = _DRIVER_MISSING.get(
        report.error_kind or "", (FAIL, f"NVML failed: {report.error}", "check the driver installation")
    )
    return CheckResult("nvidia-driver", status, finding, fix)


def check_gpus(f: Facts) -> list[CheckResult]:
    if not f.nvml.available:
        return []
    if not f.nvml.gpus:
        return [
            CheckResult(
                "gpus",
                WARN,
                "the driver is loaded but reports no GPU",
                "check the GPU is seated, or the container's --gpus flag",
            )
        ]
    results = []
    for gpu in f.nvml.gpus:
        name = f"gpu:{gpu.index}"
        finding = (
            f"{gpu.name}, compute capability {gpu.cc_text}, "
            f"{gpu.memory_used_mb:.0f}/{gpu.memory_total_mb:.0f} MiB used"
        )
        if gpu.mig_enabled:
            finding += ", MIG enabled"
            results.append(
                CheckResult(
                    name,
                    WARN,
                    finding,
                    "a process sees one MIG instance: set CUDA_VISIBLE_DEVICES=MIG-<uuid> per process (nvidia-smi -L lists them)",
                )
            )
            continue
        others = [p for p in gpu.processes if p.used_mb]
        if others and gpu.memory_used_mb > 0.5 * gpu.memory_total_mb:
            holders = ", ".join(f"pid {p.pid} {p.name} {p.used_mb:.0f} MiB" for p in others[:4])
            results.append(
                CheckResult(
                    name,
                    WARN,
                    f"{finding}; held by {holders}",
                    "stop those processes, or cap memory: tfgpu.configure(memory_limit_mb=...)",
                )
            )
            continue
        if gpu.processes:
            finding += f", {len(gpu.processes)} process(es)"
        results.append(CheckResult(name, OK, finding))
    return results


def check_driver_cuda(f: Facts) -> CheckResult | None:
    if not (f.nvml.available and f.nvml.cuda_driver_version and f.tf_ok and f.tf.get("cuda_build")):
        return None
    needed_text = str((f.tf.get("build") or {}).get("cuda_version", ""))
    if not needed_text:
        return None
    needed = versions.parse_version(needed_text)[:2]
    have = versions.parse_version(f.nvml.cuda_driver_version)[:2]
    minimum = versions.MIN_DRIVER_FOR_CUDA_MAJOR.get(needed[0], "a newer one")
    if have[0] < needed[0]:
        return CheckResult(
            "driver-cuda",
            FAIL,
            f"driver {f.nvml.driver_version} supports CUDA {f.nvml.cuda_driver_version}, "
            f"but TensorFlow was built for CUDA {needed_text}",
            f"install an NVIDIA driver >= {minimum} (CUDA {needed[0]}.x)",
        )
    if have < needed:
        return CheckResult(
            "driver-cuda",
            WARN,
            f"driver supports CUDA {f.nvml.cuda_driver_version}, older than TensorFlow's CUDA {needed_text}: "
            "it runs through minor-version compatibility, but JIT-compiling newer PTX (XLA) fails",
            f"update the driver to one that supports CUDA {needed[0]}.{needed[1]} or later",
        )
    return CheckResult(
        "driver-cuda", OK, f"driver's CUDA {f.nvml.cuda_driver_version} >= TensorFlow's CUDA {needed_text}"
    )


def check_compute_capability(f: Facts) -> list[CheckResult]:
    compiled = (f.tf.get("build") or {}).get("cuda_compute_capabilities") or []
    if not (compiled and f.tf.get("cuda_build")):
        return []
    results = []
    for gpu in f.visible_gpus:
        support, entry = versions.capability_support(gpu.compute_capability, compiled)
        name = f"gpu:{gpu.index}-kernels"
        if support == "native":
            results.append(
                CheckResult(name, OK, f"compute capability {gpu.cc_text} runs TensorFlow's {entry} kernels")
            )
        elif support == "ptx-jit":
            results.append(
                CheckResult(
                    name,
                    WARN,
                    f"no machine code for compute capability {gpu.cc_text}: the driver JIT-compiles {entry} PTX "
                    "at start-up (minutes the first time)",
                    "keep the JIT cache between runs: export CUDA_CACHE_MAXSIZE=4294967296",
                )
            )
        else:
            results.append(
                CheckResult(
                    name,
                    FAIL,
                    f"TensorFlow has no kernels for compute capability {gpu.cc_text} (built for {', '.join(compiled)})",
                    "use a GPU of compute capability >= 6.0, an older TensorFlow built for this GPU, or build from source",
                )
            )
    return results


def check_blackwell(f: Facts) -> list[CheckResult]:
    """Blackwell GPUs (compute capability >= 10.0) on a TensorFlow built before them: plain ops only
    through the driver's PTX JIT, XLA not at all (facts and sources in doctor.blackwell)."""
    build = f.tf.get("build") or {}
    if not (f.tf_ok and f.tf.get("cuda_build")):
        return []
    compiled = build.get("cuda_compute_capabilities") or []
    cuda = str(build.get("cuda_version") or "")
    results = []
    for gpu in f.visible_gpus:
        if not blackwell.is_blackwell(gpu.compute_capability):
            continue
        name = f"gpu:{gpu.index}-blackwell"
        if blackwell.built_for(gpu.compute_capability, compiled, cuda):
            finding = f"{gpu.name} (compute capability {gpu.cc_text}): TensorFlow is built for it (CUDA {cuda or '?'}, {', '.join(compiled)})"
            results.append(CheckResult(name, OK, finding))
            continue
        finding = (
            f"{gpu.name} (compute capability {gpu.cc_text}, Blackwell) is newer than this TensorFlow "
            f"(CUDA {cuda or '?'}, built for {', '.join(compiled) or '?'}): plain ops can run only through the "
            "driver's JIT of older PTX (slow first start; some kernels fail with CUDA_ERROR_INVALID_PTX), and "
            "XLA (jit_compile=True) fails: its PTX does not support this GPU"
        )
        logged = blackwell.cause_in(f.tf_messages)
        if logged:
            finding += f"; seen here: {logged[0]} (TensorFlow said: {logged[1][:160]})"
        results.append(CheckResult(name, FAIL if logged else WARN, finding, blackwell.FIX))
    return results


def check_cuda_visible_devices(f: Facts) -> CheckResult:
    value = f.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return CheckResult("cuda-visible-devices", OK, f"not set: all {len(f.nvml.gpus)} GPU(s) visible")
    visible = f.visible_gpus
    if f.nvml.gpus and not visible:
        return CheckResult(
            "cuda-visible-devices",
            FAIL,
            f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU ({len(f.nvml.gpus)} present)",
            "unset CUDA_VISIBLE_DEVICES, or set it to GPU indices such as 0,1",
        )
    entries = [e for e in value.split(",") if e.strip()]
    if f.nvml.gpus and len(visible) < len(entries):
        return CheckResult(
            "cuda-visible-devices",
            WARN,
            f"CUDA_VISIBLE_DEVICES={value!r}: CUDA stops at the first entry that matches no GPU, "
            f"so only {len(visible)} of {len(entries)} are visible",
            f"use indices from 0 to {len(f.nvml.gpus) - 1}, or GPU UUIDs",
        )
    return CheckResult(
        "cuda-visible-devices", OK, f"CUDA_VISIBLE_DEVICES={value!r}: {len(visible)} GPU(s) visible"
    )


# TensorFlow log line -> (cause, fix) for GPUs it skipped.
_LOG_CAUSES: tuple[tuple[str, str, str], ...] = (
    (
        "Cannot dlopen some GPU libraries",
        "TensorFlow cannot load the CUDA/cuDNN libraries",
        f'{INSTALL_GPU_TF} or pip install "tensorflow[and-cuda]" (pip installs matching CUDA libraries), '
        "or add the CUDA libraries to LD_LIBRARY_PATH",
    ),
    (
        "minimum required Cuda capability",
        "the GPU's compute capability is below TensorFlow's minimum",
        "use a newer GPU or an older TensorFlow",
    ),
    (
        "driver version is insufficient",
        "the NVIDIA driver is too old for TensorFlow's CUDA",
        "update the NVIDIA driver",
    ),
    (
        "failed call to cuInit",
        "CUDA could not initialize the driver",
        "check the driver loads (nvidia-smi), reboot after driver updates, and that the container has the GPUs",
    ),
    (
        "Could not find cuda drivers",
        "TensorFlow found no CUDA driver library (libcuda.so)",
        "install the NVIDIA driver, or mount it into the container (--gpus all)",
    ),
)


def _cause_from_logs(lines: list[str]) -> tuple[str, str] | None:
    for needle, cause, fix in _LOG_CAUSES:
        match = next((line for line in lines if needle in line), None)
        if match:
            return f"{cause} (TensorFlow logged: {match[:160]})", fix
    return None


def _blackwell_cause(f: Facts) -> tuple[str, str] | None:
    found = blackwell.cause_in(f.tf.get("log_lines") or [])
    if not found:
        return None
    return f"{found[0]} (TensorFlow logged: {found[1][:160]})", blackwell.FIX


def check_tensorflow_gpus(f: Facts) -> CheckResult:
    """The headline: is TensorFlow using the GPUs, and if not, why."""
    name = "tensorflow-gpus"
    if not f.tf_ok:
        return CheckResult(name, FAIL, "TensorFlow cannot be imported, so it uses no GPU", INSTALL_GPU_TF)
    seen, expected = f.tf_gpu_count, len(f.visible_gpus)
    if seen and seen >= expected:
        return CheckResult(name, OK, f"TensorFlow uses {seen} GPU(s)")
    if not f.nvml.gpus:
        why = _DRIVER_MISSING.get(f.nvml.error_kind or "", (None, "NVML reports no GPU", None))[1]
        if not f.tf.get("cuda_build"):
            why += "; this TensorFlow is also a CPU-only build"
        return CheckResult(
            name,
            WARN,
            f"TensorFlow is not using a GPU: {why}",
            "nothing to do on a machine without an NVIDIA GPU; TensorFlow runs on the CPU",
        )
    if not expected:
        value = f.environ.get("CUDA_VISIBLE_DEVICES")
        return CheckResult(
            name,
            FAIL,
            f"TensorFlow is not using a GPU: CUDA_VISIBLE_DEVICES={value!r} hides them all",
            "unset CUDA_VISIBLE_DEVICES",
        )
    if not f.tf.get("cuda_build"):
        return CheckResult(
            name, FAIL, f"TensorFlow sees 0 of {expected} GPU(s): it is a CPU-only build", INSTALL_GPU_TF
        )
    cause = _cause_from_logs(f.tf.get("log_lines") or []) or _blackwell_cause(f)
    finding = f"TensorFlow sees {seen} of the {expected} GPU(s) NVML reports"
    if cause:
        return CheckResult(name, FAIL, f"{finding}: {cause[0]}", cause[1])
    return CheckResult(
        name,
        FAIL,
        f"{finding}; TensorFlow logged no reason",
        "run: TF_CPP_MIN_LOG_LEVEL=0 python -c 'import tensorflow as tf; tf.config.list_physical_devices()' and read the log",
    )


def check_mixed_precision(f: Facts) -> CheckResult:
    gpus = f.visible_gpus
    if not gpus:
        return CheckResult(
            "mixed-precision", OK, "no GPU: float32 (precision='auto' keeps float32 on the CPU)"
        )
    lowest = min(g.compute_capability for g in gpus)
    cc = f"{lowest[0]}.{lowest[1]}"
    if lowest >= (8, 0):
        return CheckResult(
            "mixed-precision",
            OK,
            f"compute capability {cc}: bf16 and fp16 on Tensor Cores; precision='auto' picks bf16",
        )
    if lowest >= (7, 0):
        return CheckResult(
            "mixed-precision",
            OK,
            f"compute capability {cc}: fp16 on Tensor Cores (bf16 needs 8.0); precision='auto' picks fp16",
        )
    return CheckResult(
        "mixed-precision",
        WARN,
        f"compute capability {cc}: no Tensor Cores (fp16 needs 7.0), mixed precision will not speed up",
        "keep precision='fp32' on this GPU",
    )


def check_known_issues(f: Facts) -> list[CheckResult]:
    """Each known problem the installed versions have, with the range that makes it apply."""
    if not f.tf_ok:
        return []
    installed = f.installed_versions()
    results = []
    for issue in known_issues.applicable(installed, packages=f.installed_packages()):
        have = ", ".join(f"{a.package} {installed[a.package]}" for a in issue.affects)
        links = issue.source + (f"; fixed by {issue.fixed_by}" if issue.fixed_by else "")
        finding = f"{issue.title} [affects {issue.ranges()}; installed: {have}]"
        results.append(CheckResult(f"known:{issue.key}", WARN, finding, f"{issue.fix} (see {links})"))
    return results


def check_estimator(f: Facts) -> CheckResult | None:
    if not f.tf_ok:
        return None
    version = f.tf["tensorflow"]
    if f.tf.get("estimator"):
        return CheckResult(
            "estimator",
            OK,
            f"tf.estimator is available (TensorFlow {version}): tfgpu.estimator.run_config spreads it over "
            "every GPU and tfgpu.estimator.predict predicts on all of them; TensorFlow 2.16 removes it",
            f"plan the move to tfgpu.Trainer: {GUIDE}",
        )
    if versions.parse_version(version)[:2] < (2, 16):
        return CheckResult(
            "estimator",
            OK,
            f"tf.estimator is not installed with TensorFlow {version}",
            f"{install_line(version)} if you run Estimators",
        )
    return CheckResult(
        "estimator",
        OK,
        f"tf.estimator is absent (removed in TensorFlow 2.16): migrate Estimators to tfgpu.Trainer, see {GUIDE}",
    )


def _tf_config(f: Facts) -> tuple[Any, ClusterError | None]:
    """(the TF_CONFIG cluster spec or None, the error when it does not parse)."""
    try:
        return cluster.from_environ({"TF_CONFIG": f.environ.get("TF_CONFIG", "")}), None
    except ClusterError as exc:
        return None, exc


def check_environment(f: Facts) -> list[CheckResult]:
    results = []
    if f.unknown_tfgpu_variables:
        results.append(
            CheckResult(
                "tfgpu-variables",
                WARN,
                f"unknown TFGPU_* variables: {', '.join(f.unknown_tfgpu_variables)} (a typo?)",
                "see tfgpu.env for the variables tfgpu reads",
            )
        )
    if f.environ.get("TF_CONFIG"):
        spec, error = _tf_config(f)
        if error is not None:
            results.append(CheckResult("tf-config", FAIL, error.what, error.fix))
        else:
            if spec is not None:
                results.append(
                    CheckResult(
                        "tf-config",
                        OK,
                        f"TF_CONFIG: {spec.task_type} {spec.task_index} of {json.dumps({k: len(v) for k, v in spec.cluster.items()})}",
                    )
                )
    return results


def _deep_replicas(rep: dict[str, Any]) -> list[CheckResult]:
    if not rep:
        return []
    single, multi = rep.get("single", []), rep.get("replicated", [])
    if rep.get("finite") and rep.get("agree"):
        return [
            CheckResult(
                "replicas",
                OK,
                f"{rep.get('replicas', 2)} replicas ({', '.join(rep['devices'])}) match 1 over {len(single)} steps (last loss {single[-1]:.5f})",
            )
        ]
    return [
        CheckResult(
            "replicas",
            FAIL,
            f"2-replica losses {multi} differ from 1-replica losses {single}",
            "report it with `tfgpu doctor --deep --json`; train with tfgpu.Trainer and compare against one device",
        )
    ]


def _deep_errors(errors: dict[str, str]) -> list[CheckResult]:
    """A --deep step that raised (or killed the probe): TensorFlow's words, and the cause when known."""
    results = []
    for step, error in errors.items():
        known = blackwell.cause_in([error])
        finding = f"the --deep {step} step failed: {error[:300]}"
        if known:
            results.append(CheckResult(f"deep:{step}", FAIL, f"{finding}; cause: {known[0]}", blackwell.FIX))
        else:
            results.append(
                CheckResult(
                    f"deep:{step}", FAIL, finding, "report it with the output of `tfgpu doctor --deep --json`"
                )
            )
    return results


def check_xla_toolchain(f: Facts) -> CheckResult | None:
    """XLA's PTX compiler and libdevice where TensorFlow sees a GPU (``doctor.xla_toolchain``):
    without them XLA fails or falls back, and Keras turns XLA on by default on one GPU."""
    found = f.tf.get("xla_toolchain") if f.tf_ok and f.tf_gpu_count else None
    if not found:
        return None
    toolchain = xla_toolchain.Toolchain(found["ptxas"], found["libdevice"], tuple(found["searched"]))
    missing = toolchain.missing()
    if missing:
        return CheckResult(
            "xla-toolchain",
            FAIL,
            f"XLA cannot compile for the GPU: no {' and no '.join(missing)} where TensorFlow looks "
            f"({', '.join(toolchain.searched)}); jit_compile=True, which Keras turns on by default on "
            'one GPU, fails ("No PTX compilation provider is available") or falls back to the driver\'s '
            "slower compiler",
            xla_toolchain.FIX,
        )
    compiled = ((f.tf.get("deep") or {}).get("xla") or {}).get("compile_s")
    timed = f"; a small XLA function compiled and ran in {compiled:.2f} s" if compiled is not None else ""
    return CheckResult(
        "xla-toolchain", OK, f"XLA's ptxas {toolchain.ptxas}, libdevice {toolchain.libdevice}{timed}"
    )


def check_deep(f: Facts) -> list[CheckResult]:
    deep = f.tf.get("deep")
    if not deep:
        return []
    results = [
        CheckResult(
            f"matmul:{m['device'].split('device:')[-1]}",
            OK,
            f"{m['gflops']:.1f} GFLOP/s on a {m['size']}x{m['size']} float32 matmul",
        )
        for m in deep.get("matmul") or []
    ]
    results += _deep_replicas(deep.get("replicas") or {})
    xla = deep.get("xla")
    if xla:
        status = OK if xla.get("ok") else FAIL
        results.append(
            CheckResult(
                "xla",
                status,
                f"XLA (jit_compile=True) on {xla['device']}: "
                + ("compiles and gives the right answer" if xla.get("ok") else "wrong answer")
                + (
                    f" ({xla['compile_s']:.2f} s to compile and run)"
                    if xla.get("compile_s") is not None
                    else ""
                ),
            )
        )
    return results + _deep_errors(deep.get("errors") or {})


def check_exposure(f: Facts) -> CheckResult:
    """The TF_CONFIG cluster's addresses, and whether this host has a public address its
    TensorFlow server would listen on (every interface, unauthenticated: ``tfgpu.exposure``)."""
    from tfgpu import exposure

    spec, _ = _tf_config(f)  # a TF_CONFIG that does not parse: the tf-config check says so
    addresses = [a for role in (spec.cluster.values() if spec else []) for a in role]
    shown = ", ".join(addresses[:4]) + (f" and {len(addresses) - 4} more" if len(addresses) > 4 else "")
    cluster_part = f"TF_CONFIG cluster at {shown}; " if addresses else ""
    if not f.public_addresses:
        return CheckResult(
            "network",
            OK,
            f"{cluster_part}no public address on this host: a TensorFlow server here is reachable "
            "from its private networks only",
        )
    public = ", ".join(f"{address} ({name})" for name, address in f.public_addresses[:3])
    return CheckResult(
        "network",
        WARN,
        f"{cluster_part}this host has a public address, {public}: TensorFlow's servers (tfgpu launch, "
        "tfgpu data-service) listen on every interface, unauthenticated, and run any graph they are sent",
        f"fence the ports off (a firewall, a private network or VPC; on Kubernetes the NetworkPolicy "
        f"--emit writes): {exposure.DOCS}",
    )


CHECKS: tuple[Callable[[Facts], CheckResult | list[CheckResult] | None], ...] = (
    check_tensorflow_gpus,
    check_python,
    check_tensorflow,
    check_build,
    check_keras,
    check_driver,
    check_gpus,
    check_driver_cuda,
    check_compute_capability,
    check_blackwell,
    check_cuda_visible_devices,
    check_mixed_precision,
    check_xla_toolchain,
    check_environment,
    check_exposure,
    check_estimator,
    check_known_issues,
    check_deep,
)


def run_checks(f: Facts) -> list[CheckResult]:
    results: list[CheckResult] = []
    for check in CHECKS:
        out = check(f)
        if out is None:
            continue
        results.extend(out if isinstance(out, list) else [out])
    return results

"""Every doctor check, ok and failing, on fake NVML answers and TensorFlow probe results."""

from __future__ import annotations

import copy
import json

import pytest

from tfgpu import doctor, versions
from tfgpu.doctor.checks import run_checks
from tfgpu.doctor.tfprobe import interesting_lines
from tfgpu.testing.fake_nvml import profile

BUILD = {
    "cuda_compute_capabilities": ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"],
    "cuda_version": "12.5.1",
    "cudnn_version": "9",
    "is_cuda_build": True,
}


def probe(gpus: int = 0, cc: tuple[int, int] = (8, 0), **overrides) -> dict:
    """A TensorFlow probe result shaped like tfprobe's on TF 2.21."""
    result = {
        "ok": True,
        "tensorflow": "2.21.0",
        "keras": "3.15.1",
        "legacy_keras": False,
        "cuda_build": True,
        "build": copy.deepcopy(BUILD),
        "estimator": False,
        "estimator_package": False,
        "gpus": [
            {"name": f"/physical_device:GPU:{i}", "device_name": "GPU", "compute_capability": list(cc)}
            for i in range(gpus)
        ],
        "log_lines": [],
    }
    result.update(overrides)
    return result


def checks(machine: str, tf: dict, environ: dict | None = None) -> dict:
    report = doctor.run(nvml_module=profile(machine), tf_probe=tf, environ=environ or {})
    return {c.name: c for c in report.checks} | {"_report": report}


def test_cpu_machine_says_plainly_why_there_is_no_gpu():
    found = checks("no-driver", probe())
    head = found["tensorflow-gpus"]
    assert head.status == "warn"
    assert "not using a GPU" in head.finding and "no NVIDIA driver" in head.finding
    assert found["nvidia-driver"].status == "warn"
    assert found["_report"].exit_code == 0
    assert found["_report"].headline == head.finding


def test_two_h100s_used_by_tensorflow():
    found = checks("h100x2", probe(gpus=2, cc=(9, 0)))
    assert found["tensorflow-gpus"].status == "ok"
    assert found["tensorflow-gpus"].finding == "TensorFlow uses 2 GPU(s)"
    assert found["gpu:0"].status == "ok" and "NVIDIA H100 80GB HBM3" in found["gpu:0"].finding
    assert "compute capability 9.0" in found["gpu:0"].finding
    assert found["driver-cuda"].status == "warn"  # driver 12.4 < TF's 12.5.1
    assert found["gpu:0-kernels"].status == "warn" and "compute_90" in found["gpu:0-kernels"].finding
    assert "bf16" in found["mixed-precision"].finding
    assert found["_report"].exit_code == 0


def test_missing_cuda_libraries_read_from_tensorflow_log():
    logs = [
        "Cannot dlopen some GPU libraries. Please make sure the missing libraries mentioned above are installed properly"
    ]
    found = checks("a100", probe(gpus=0, log_lines=logs))
    head = found["tensorflow-gpus"]
    assert head.status == "fail"
    assert "sees 0 of the 1 GPU(s)" in head.finding and "cannot load the CUDA/cuDNN libraries" in head.finding
    assert "tensorflow[and-cuda]" in head.fix and 'pip install "tfgpu[and-cuda]"' in head.fix
    assert found["_report"].exit_code == 1


def test_gpu_skipped_without_a_logged_reason():
    found = checks("a100", probe(gpus=0))
    assert found["tensorflow-gpus"].status == "fail"
    assert "logged no reason" in found["tensorflow-gpus"].finding


def test_cuda_visible_devices_hiding_every_gpu():
    found = checks("h100x2", probe(gpus=0), {"CUDA_VISIBLE_DEVICES": ""})
    assert found["cuda-visible-devices"].status == "fail"
    assert "hides every GPU" in found["cuda-visible-devices"].finding
    assert found["tensorflow-gpus"].status == "fail"
    assert "CUDA_VISIBLE_DEVICES" in found["tensorflow-gpus"].finding


def test_cuda_visible_devices_partly_wrong():
    found = checks("h100x2", probe(gpus=1, cc=(9, 0)), {"CUDA_VISIBLE_DEVICES": "1,7"})
    assert found["cuda-visible-devices"].status == "warn"
    assert "only 1 of 2" in found["cuda-visible-devices"].finding
    assert found["tensorflow-gpus"].status == "ok"


def test_cuda_visible_devices_by_uuid():
    found = checks("h100x2", probe(gpus=1, cc=(9, 0)), {"CUDA_VISIBLE_DEVICES": "GPU-00000001"})
    assert found["cuda-visible-devices"].status == "ok"
    assert "1 GPU(s) visible" in found["cuda-visible-devices"].finding


def test_driver_too_old_for_tensorflow_cuda():
    found = checks(
        "old-driver", probe(gpus=0, log_lines=["failed call to cuInit: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"])
    )
    assert found["driver-cuda"].status == "fail"
    assert "supports CUDA 11.4" in found["driver-cuda"].finding
    assert "525.60.13" in found["driver-cuda"].fix
    assert "could not initialize the driver" in found["tensorflow-gpus"].finding


def test_driver_recent_enough():
    tf = probe(gpus=1, cc=(8, 0))
    tf["build"]["cuda_version"] = "12.2"
    found = checks("a100", tf)
    assert found["driver-cuda"].status == "ok"
    assert found["gpu:0-kernels"].status == "ok" and "sm_80" in found["gpu:0-kernels"].finding


def test_gpu_too_old_for_tensorflow_kernels():
    found = checks(
        "k80",
        probe(
            gpus=0,
            log_lines=[
                "Ignoring visible gpu device (device: 0, name: Tesla K80) with Cuda compute capability 3.7. The minimum required Cuda capability is 6.0."
            ],
        ),
    )
    assert found["gpu:0-kernels"].status == "fail"
    assert "no kernels for compute capability 3.7" in found["gpu:0-kernels"].finding
    assert found["mixed-precision"].status == "warn"
    assert "below TensorFlow's minimum" in found["tensorflow-gpus"].finding


def test_new_gpu_runs_through_ptx_jit():
    found = checks("rtx5090", probe(gpus=1, cc=(12, 0)))
    assert found["gpu:0-kernels"].status == "warn"
    assert "JIT" in found["gpu:0-kernels"].finding and "CUDA_CACHE_MAXSIZE" in found["gpu:0-kernels"].fix


def test_cpu_only_build_on_a_gpu_machine():
    found = checks("t4", probe(cuda_build=False, build={"is_cuda_build": False}))
    assert found["tensorflow-build"].status == "fail"
    assert found["tensorflow-gpus"].status == "fail" and "CPU-only build" in found["tensorflow-gpus"].finding


def test_cpu_only_build_without_gpu_is_fine():
    found = checks("no-driver", probe(cuda_build=False, build={"is_cuda_build": False}))
    assert found["tensorflow-build"].status == "ok"
    assert "CPU-only build" in found["tensorflow-gpus"].finding


def test_tensorflow_not_importable():
    found = checks("no-driver", {"ok": False, "error": "ModuleNotFoundError: No module named 'tensorflow'"})
    assert found["tensorflow"].status == "fail"
    assert "No module named 'tensorflow'" in found["tensorflow"].finding
    assert found["_report"].exit_code == 1


def test_old_tensorflow_and_legacy_keras_warn():
    found = checks("no-driver", probe(tensorflow="2.15.1", keras="2.15.0", legacy_keras=False))
    assert found["tensorflow"].status == "warn"
    assert found["keras"].status == "warn"
    assert not any(name.startswith("known:keras") for name in found)  # Keras 3 issues do not apply
    legacy = checks("no-driver", probe(legacy_keras=True))
    assert legacy["keras"].status == "warn" and "TF_USE_LEGACY_KERAS" in legacy["keras"].finding


def test_python_outside_supported_range():
    facts = doctor.gather_facts(nvml_module=profile("no-driver"), tf_probe=probe(), environ={})
    facts.python = (3, 9, 18)
    found = {c.name: c for c in run_checks(facts)}
    assert found["python"].status == "fail"
    assert "outside TensorFlow 2.21.0's supported 3.10-3.13" in found["python"].finding
    facts.python = (3, 12, 1)
    assert {c.name: c for c in run_checks(facts)}["python"].status == "ok"


@pytest.mark.parametrize(("machine", "status"), [("driver-not-loaded", "fail"), ("no-driver", "warn")])
def test_driver_states(machine, status):
    assert checks(machine, probe())["nvidia-driver"].status == status


def test_mig_and_busy_gpus_warn():
    mig = checks("mig", probe(gpus=1))
    assert mig["gpu:0"].status == "warn" and "MIG" in mig["gpu:0"].finding
    busy = checks("busy", probe(gpus=1, cc=(7, 5)))
    assert busy["gpu:0"].status == "warn" and "pid 4242 python3" in busy["gpu:0"].finding
    assert "fp16" in busy["mixed-precision"].finding


def test_known_issues_from_the_table():
    found = checks("no-driver", probe(estimator_package=True))
    assert found["known:keras#20585"].status == "warn"
    assert "github.com/keras-team/keras/issues/20585" in found["known:keras#20585"].fix
    assert "known:tf-estimator-removed" in found
    assert "known:tensorflow#63341" not in found
    older = checks("no-driver", probe(tensorflow="2.16.1"))
    assert "known:tensorflow#63341" in older
    # TensorBoard missing from TensorFlow 2.21's dependencies: said only when it is not installed
    assert "known:tf-2.21-no-tensorboard" in found
    assert "known:tf-2.21-no-tensorboard" not in checks("no-driver", probe(packages=["tensorboard"]))


def test_estimator_presence_reported():
    assert "absent" in checks("no-driver", probe())["estimator"].finding
    assert "migrating-from-estimator.md" in checks("no-driver", probe())["estimator"].finding
    present = checks("no-driver", probe(tensorflow="2.15.1", estimator=True))["estimator"]
    assert "available" in present.finding and "tfgpu.estimator.run_config" in present.finding
    missing = checks("no-driver", probe(tensorflow="2.15.1"))["estimator"]
    assert "not installed" in missing.finding and "tensorflow-estimator==2.15.*" in missing.fix


def test_environment_problems():
    found = checks(
        "no-driver",
        probe(),
        {
            "TF_CONFIG": '{"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}}',
            "TFGPU_MEMORY_GROWHT": "1",
        },
    )
    assert found["tf-config"].status == "fail" and "host:port" in found["tf-config"].finding
    # the headline names what failed, not the GPU question that passed (issue 17)
    assert found["_report"].headline.startswith("tf-config: ") and "host:port" in found["_report"].headline
    assert (
        found["tfgpu-variables"].status == "warn"
        and "TFGPU_MEMORY_GROWHT" in found["tfgpu-variables"].finding
    )
    good = checks(
        "no-driver",
        probe(),
        {"TF_CONFIG": '{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}'},
    )
    assert good["tf-config"].status == "ok"


def test_deep_results():
    deep = {
        "matmul": [{"device": "/device:GPU:0", "size": 4096, "gflops": 51234.5}],
        "replicas": {
            "devices": ["GPU:0", "GPU:1"],
            "replicas": 2,
            "single": [1.0, 0.5],
            "replicated": [1.0, 0.5],
            "finite": True,
            "agree": True,
        },
    }
    found = checks("h100x2", probe(gpus=2, cc=(9, 0), deep=deep))
    assert found["matmul:GPU:0"].status == "ok" and "51234.5 GFLOP/s" in found["matmul:GPU:0"].finding
    assert found["replicas"].status == "ok"
    bad = copy.deepcopy(deep)
    bad["replicas"].update(replicated=[1.0, float("nan")], finite=False, agree=False)
    found = checks("h100x2", probe(gpus=2, cc=(9, 0), deep=bad))
    assert found["replicas"].status == "fail"
    assert found["_report"].exit_code == 1


def test_report_json_shape():
    data = checks("h100x2", probe(gpus=2, cc=(9, 0)))["_report"].to_dict()
    json.dumps(data)
    assert set(data) == {"headline", "ok", "checks", "facts"}
    assert set(data["checks"][0]) == {"name", "status", "finding", "fix"}
    assert json.loads(json.dumps(data))["facts"]["nvml"]["gpus"][0]["compute_capability"] == [9, 0]


def test_log_line_extraction():
    stderr = "\n".join(
        [
            "I0000 00:00:1795256116.396151    2122 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.",
            "W0000 00:00:1.0 1 gpu_device.cc:2344] Cannot dlopen some GPU libraries. Please make sure ...",
            "W0000 00:00:1.0 1 gpu_device.cc:2344] Cannot dlopen some GPU libraries. Please make sure ...",
            "I0000 unrelated line",
        ]
    )
    assert interesting_lines(stderr) == [
        "Could not find cuda drivers on your machine, GPU will not be used.",
        "Cannot dlopen some GPU libraries. Please make sure ...",
    ]


@pytest.mark.parametrize(
    ("cc", "support", "entry"),
    [
        ((8, 6), "native", "sm_80"),
        ((8, 9), "native", "sm_89"),
        ((7, 5), "native", "sm_70"),
        ((9, 0), "ptx-jit", "compute_90"),
        ((10, 0), "ptx-jit", "compute_90"),
        ((5, 2), "unsupported", None),
    ],
)
def test_capability_support(cc, support, entry):
    assert versions.capability_support(cc, BUILD["cuda_compute_capabilities"]) == (support, entry)

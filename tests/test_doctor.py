"""Every doctor check, ok and failing, on fake NVML answers and TensorFlow probe results."""

from __future__ import annotations

import copy
import json
import re

import pytest

from support.probes import BUILD, probe
from tfgpu import doctor, versions
from tfgpu.doctor import blackwell, known_issues
from tfgpu.doctor.checks import run_checks
from tfgpu.doctor.tfprobe import interesting_lines, parse_output
from tfgpu.testing.fake_nvml import profile


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
    assert "model.evaluate" in found["known:keras#20585"].finding  # evaluate fails too, predict works
    assert "no fixed release; still seen on Keras 3.15.1" in found["known:keras#20585"].finding
    assert "installed: keras 3.15.1" in found["known:keras#20585"].finding
    # Keras 3.15.1 has the fix of keras#21061 (PR #21072, Keras 3.10.0): no warning about it
    assert "known:keras#21061" not in found
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


# -- known issues: every entry's range, checked at both ends --------------------------------------

# (key, installed versions, optional packages, whether the issue applies): for each entry, the
# versions just below and at the first affected one, one inside, and just below and at the fix.
KNOWN_ISSUE_CASES = [
    ("keras#20585", {"keras": "2.15.0"}, (), False),
    ("keras#20585", {"keras": "3.0.0"}, (), True),
    ("keras#20585", {"keras": "3.15.1"}, (), True),
    ("keras#20585", {"keras": "3.16.0.dev2025110403"}, (), True),  # unfixed on keras-nightly
    ("keras-fit-parameter-server", {"keras": "2.15.0"}, (), False),
    ("keras-fit-parameter-server", {"keras": "3.0.0"}, (), True),
    ("keras-fit-parameter-server", {"keras": "3.16.0.dev2025110403"}, (), True),
    ("keras#21061", {"keras": "2.15.0"}, (), False),
    ("keras#21061", {"keras": "3.0.0"}, (), True),
    ("keras#21061", {"keras": "3.9.2"}, (), True),
    ("keras#21061", {"keras": "3.10.0rc0"}, (), True),  # a pre-release of the fix: not yet fixed
    ("keras#21061", {"keras": "3.10.0"}, (), False),  # PR #21072 shipped in 3.10.0
    ("keras#21061", {"keras": "3.15.1"}, (), False),
    ("keras#20582", {"keras": "3.0.5"}, (), False),  # gradient_accumulation_steps arrived in 3.1.0
    ("keras#20582", {"keras": "3.1.0"}, (), True),
    ("keras#20582", {"keras": "3.16.0.dev2025110403"}, (), True),
    ("keras#21207", {"keras": "3.8.0"}, (), False),  # keras.RematScope arrived in 3.9.0
    ("keras#21207", {"keras": "3.9.0"}, (), True),
    ("keras#21207", {"keras": "3.15.1"}, (), True),
    ("keras-auto-jit-distribute", {"keras": "3.0.2"}, (), False),  # the rule arrived in 3.0.3
    ("keras-auto-jit-distribute", {"keras": "3.0.3"}, (), True),
    ("keras-auto-jit-distribute", {"keras": "3.15.1"}, (), True),
    ("tf-estimator-removed", {"tensorflow": "2.15.1"}, ("tensorflow-estimator",), False),
    ("tf-estimator-removed", {"tensorflow": "2.16.0rc0"}, ("tensorflow-estimator",), True),
    ("tf-estimator-removed", {"tensorflow": "2.21.0"}, ("tensorflow-estimator",), True),
    ("tf-estimator-removed", {"tensorflow": "2.21.0"}, (), False),
    ("tensorflow#63341", {"tensorflow": "2.15.1"}, (), False),
    ("tensorflow#63341", {"tensorflow": "2.16.1"}, (), True),
    ("tensorflow#63341", {"tensorflow": "2.17.0rc0"}, (), True),
    ("tensorflow#63341", {"tensorflow": "2.17.0"}, (), False),
    ("tf-2.21-no-tensorboard", {"tensorflow": "2.20.0"}, (), False),
    ("tf-2.21-no-tensorboard", {"tensorflow": "2.21.0rc1"}, (), True),
    ("tf-2.21-no-tensorboard", {"tensorflow": "2.21.0"}, (), True),
    ("tf-2.21-no-tensorboard", {"tensorflow": "2.21.0"}, ("tensorboard",), False),
]


@pytest.mark.parametrize(
    ("key", "installed", "packages", "applies"),
    KNOWN_ISSUE_CASES,
    ids=[f"{k}-{'-'.join(v.values())}-{'+'.join(p) or 'bare'}" for k, v, p, _ in KNOWN_ISSUE_CASES],
)
def test_known_issue_range(key, installed, packages, applies):
    found = known_issues.applicable(installed, packages=frozenset(packages))
    assert (key in {issue.key for issue in found}) is applies


def test_every_known_issue_has_a_range_a_source_and_cases_on_both_sides():
    for issue in known_issues.KNOWN_ISSUES:
        assert issue.affects and issue.source.startswith("https://"), issue.key
        outcomes = {applies for key, _, _, applies in KNOWN_ISSUE_CASES if key == issue.key}
        assert outcomes == {True, False}, f"{issue.key} needs cases inside and outside its range"


def test_known_issue_needs_every_version_it_names():
    # without a Keras version doctor cannot show a Keras bug applies, so it says nothing
    found = known_issues.applicable({"tensorflow": "2.21.0", "python": "3.12.1"})
    assert not [i.key for i in found if any(a.package == "keras" for a in i.affects)]


def test_known_issue_range_refuses_a_fix_before_the_first_affected_version():
    with pytest.raises(ValueError, match=re.escape("fixed='3.0.0' is not after first='3.1.0'")):
        known_issues.Affected("keras", "3.1.0", "3.0.0")
    with pytest.raises(ValueError, match="'numpy' is unknown"):
        known_issues.Affected("numpy", "1.0", None)


def test_known_issue_versions_compare_numerically():
    assert known_issues.Affected("keras", "3.9.0", "3.10.0").contains("3.9.10")  # not "3.9.10" > "3.10"
    assert not known_issues.Affected("tensorflow", "2.16.0", "2.17.0").contains("2.17.0+nv25.02")
    assert known_issues.version("2.21.0-custom_build") == known_issues.version("2.21.0")


def test_fixed_known_issue_reported_with_its_fix_below_the_fix_version():
    found = checks("no-driver", probe(keras="3.9.2"))
    issue = found["known:keras#21061"]
    assert issue.status == "warn" and "fixed in 3.10.0" in issue.finding
    assert "keras>=3.10" in issue.fix and "https://github.com/keras-team/keras/pull/21072" in issue.fix


# -- Blackwell (compute capability 10.x / 12.x) on TensorFlow 2.21's CUDA 12.5 build ---------------

BLACKWELL_BUILD = {
    "cuda_compute_capabilities": ["sm_80", "sm_90", "sm_100", "sm_120", "compute_120"],
    "cuda_version": "12.8.1",
    "cudnn_version": "9",
    "is_cuda_build": True,
}
NOT_BUILT_FOR = (
    "TensorFlow was not built with CUDA kernel binaries compatible with compute capability 12.0. "
    "CUDA kernels will be jit-compiled from PTX, which could take 30 minutes or longer."
)
INVALID_PTX = "'cuModuleLoadData(&module, data)' failed with 'CUDA_ERROR_INVALID_PTX'"
XLA_PTX = (
    "LLVM ERROR: PTX version 8.5 does not support target 'sm_120' (or 'sm_120a'). "
    "Minimum required PTX version is 8.7"
)


def test_blackwell_gpu_on_tensorflow_2_21_says_what_works_and_what_does_not():
    found = checks("rtx5090", probe(gpus=1, cc=(12, 0)))
    finding = found["gpu:0-blackwell"]
    assert finding.status == "warn"
    assert "NVIDIA GeForce RTX 5090 (compute capability 12.0, Blackwell)" in finding.finding
    assert "CUDA 12.5.1" in finding.finding and "compute_90" in finding.finding
    assert "JIT" in finding.finding and "XLA (jit_compile=True) fails" in finding.finding
    assert "jit_compile=False" in finding.fix and "CUDA_CACHE_MAXSIZE" in finding.fix
    assert "sm_120" in finding.fix and "CUDA >= 12.8" in finding.fix and "NGC" in finding.fix
    assert "tensorflow/tensorflow#89272" in finding.fix and "#111958" in finding.fix
    assert found["tensorflow-gpus"].status == "ok"  # TensorFlow does list the GPU


def test_b200_is_blackwell_too():
    found = checks("b200x2", probe(gpus=2, cc=(10, 0)))
    assert found["gpu:0-blackwell"].status == "warn" and found["gpu:1-blackwell"].status == "warn"
    assert "NVIDIA B200 (compute capability 10.0" in found["gpu:0-blackwell"].finding


@pytest.mark.parametrize(("machine", "cc"), [("h100x2", (9, 0)), ("a100", (8, 0))])
def test_hopper_and_ampere_get_no_blackwell_finding(machine, cc):
    found = checks(machine, probe(gpus=len(profile(machine).gpus), cc=cc))
    assert not [name for name in found if name.endswith("-blackwell")]
    assert found["tensorflow-gpus"].status == "ok"


def test_blackwell_gpu_on_a_build_for_it_is_fine():
    found = checks("rtx5090", probe(gpus=1, cc=(12, 0), build=copy.deepcopy(BLACKWELL_BUILD)))
    assert found["gpu:0-blackwell"].status == "ok"
    assert "built for it (CUDA 12.8.1" in found["gpu:0-blackwell"].finding
    # sm_120 machine code from a CUDA too old to know it cannot exist; PTX-only 9.0 is not enough
    assert not blackwell.built_for((12, 0), ["sm_89", "compute_90"], "12.8.1")
    assert not blackwell.built_for((12, 0), ["sm_120"], "12.5.1")
    assert blackwell.built_for((12, 0), ["sm_90", "compute_100"], "12.8.0")


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        (NOT_BUILT_FOR, "no machine code for this GPU"),
        (INVALID_PTX, "refused to JIT-compile TensorFlow's PTX"),
        (XLA_PTX, "XLA emits a PTX version too old for this GPU"),
    ],
)
def test_blackwell_messages_from_tensorflow_name_the_cause(line, cause):
    found = checks("rtx5090", probe(gpus=1, cc=(12, 0), log_lines=[line]))
    finding = found["gpu:0-blackwell"]
    assert finding.status == "fail"
    assert cause in finding.finding and line[:60] in finding.finding
    # the same words on an H100 are not blamed on Blackwell
    assert not [n for n in checks("h100x2", probe(gpus=2, cc=(9, 0), log_lines=[line])) if "blackwell" in n]


def test_blackwell_log_lines_are_kept_from_tensorflow_stderr():
    stderr = "\n".join(
        [
            f"W0000 00:00:1755011248.049012     142 gpu_device.cc:2447] {NOT_BUILT_FOR}",
            f"W tensorflow/compiler/mlir/tools/kernel_gen/tf_gpu_runtime_wrappers.cc:40] {INVALID_PTX}",
            XLA_PTX,
        ]
    )
    lines = interesting_lines(stderr)
    assert lines[0] == NOT_BUILT_FOR and XLA_PTX in lines and any(INVALID_PTX in line for line in lines)


def test_gpu_skipped_with_a_blackwell_message_names_it_in_the_headline():
    found = checks("rtx5090", probe(gpus=0, log_lines=[NOT_BUILT_FOR]))
    head = found["tensorflow-gpus"]
    assert head.status == "fail" and "no machine code for this GPU" in head.finding
    assert "CUDA_CACHE_MAXSIZE" in head.fix


def test_deep_probe_killed_by_xla_keeps_the_basic_facts_and_names_the_cause():
    basic = json.dumps(probe(gpus=1, cc=(12, 0)) | {"log_lines": None})
    result = parse_output(basic + "\n", f"some warning\n{XLA_PTX}\n", deep=True)
    assert result["ok"] and result["tensorflow"] == "2.21.0"
    assert XLA_PTX in result["deep"]["errors"]["probe"] and result["log_lines"] == [XLA_PTX]
    found = checks("rtx5090", result)
    assert found["deep:probe"].status == "fail" and "XLA emits a PTX version" in found["deep:probe"].finding
    assert found["gpu:0-blackwell"].status == "fail"
    assert found["tensorflow"].status == "ok"  # the crash is not mistaken for a broken install


def test_probe_output_without_a_result_is_a_crash():
    result = parse_output("", "Segmentation fault\n", deep=False)
    assert not result["ok"] and "crashed: Segmentation fault" in result["error"]


def test_deep_xla_step_reported():
    deep = {"matmul": None, "xla": {"device": "/device:GPU:0", "ok": True}, "errors": {}}
    found = checks("h100x2", probe(gpus=2, cc=(9, 0), deep=deep))
    assert found["xla"].status == "ok" and "/device:GPU:0" in found["xla"].finding
    failed = copy.deepcopy(deep) | {"xla": None, "errors": {"xla": f"InternalError: {INVALID_PTX}"}}
    found = checks("rtx5090", probe(gpus=1, cc=(12, 0), deep=failed))
    assert found["deep:xla"].status == "fail" and "refused to JIT-compile" in found["deep:xla"].finding
    other = copy.deepcopy(deep) | {"xla": None, "errors": {"replicas": "ResourceExhaustedError: OOM"}}
    assert "OOM" in checks("h100x2", probe(gpus=2, cc=(9, 0), deep=other))["deep:replicas"].finding


# -- layering ---------------------------------------------------------------------------------------


def test_doctor_does_not_import_estimator():
    """doctor reads the environment; tfgpu.estimator pulls in the runtime. Read doctor's imports."""
    import ast
    from pathlib import Path

    for path in Path(doctor.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            assert not [n for n in names if n == "tfgpu.estimator"], f"{path.name} imports tfgpu.estimator"


def toolchain_dirs(tmp_path, *, ptxas=True, libdevice=True):
    """A site directory holding the nvidia-cuda-nvcc-cu12 package's files (or some of them)."""
    root = tmp_path / "site" / "nvidia" / "cuda_nvcc"
    if ptxas:
        (root / "bin").mkdir(parents=True)
        (root / "bin" / "ptxas").write_text("")
    if libdevice:
        (root / "nvvm" / "libdevice").mkdir(parents=True)
        (root / "nvvm" / "libdevice" / "libdevice.10.bc").write_text("")
    return str(tmp_path / "site")


def test_xla_toolchain_is_found_where_tensorflow_looks(tmp_path):
    """Issue 69 item 1: the nvidia-cuda-nvcc-cu12 package beside TensorFlow, the directory
    XLA_FLAGS names, ptxas on PATH; what is missing is named."""
    from tfgpu.doctor import xla_toolchain

    site = toolchain_dirs(tmp_path)
    found = xla_toolchain.find({"PATH": ""}, site_dirs=[site], toolkits=())
    assert found.ptxas.endswith("nvidia/cuda_nvcc/bin/ptxas") and found.libdevice.endswith("libdevice.10.bc")
    assert found.missing() == []
    toolkit = tmp_path / "toolkit"
    (toolkit / "nvvm" / "libdevice").mkdir(parents=True)
    (toolkit / "nvvm" / "libdevice" / "libdevice.10.bc").write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ptxas").write_text("")
    (bin_dir / "ptxas").chmod(0o755)
    flags = {"XLA_FLAGS": f"--xla_gpu_cuda_data_dir={toolkit}", "PATH": str(bin_dir)}
    found = xla_toolchain.find(flags, site_dirs=[], toolkits=())
    assert found.libdevice == str(toolkit / "nvvm" / "libdevice" / "libdevice.10.bc")
    assert found.ptxas == str(bin_dir / "ptxas") and found.searched[0] == f"XLA_FLAGS's {toolkit}"
    bare = xla_toolchain.find(
        {"PATH": ""}, site_dirs=[toolchain_dirs(tmp_path / "b", ptxas=False)], toolkits=()
    )
    assert bare.missing() == ["ptxas"] and bare.libdevice is not None


def test_doctor_says_what_xla_lacks_on_a_gpu_machine_and_exits_1(tmp_path):
    """A GPU TensorFlow uses, no PTX compiler where it looks: one line naming what is missing
    and the one command that fixes it, exit status 1. With it: ok, with the compile's seconds
    when --deep compiled one function. A CPU machine is not asked."""
    from tfgpu.doctor import xla_toolchain

    lacking = xla_toolchain.find(
        {"PATH": ""}, site_dirs=[toolchain_dirs(tmp_path / "a", ptxas=False)], toolkits=()
    )
    found = checks("h100x2", probe(gpus=2, cc=(9, 0), xla_toolchain=lacking.to_dict()))
    line = found["xla-toolchain"]
    assert line.status == "fail" and "no ptxas" in line.finding and "libdevice" not in line.finding
    assert "nvidia-cuda-nvcc-cu12" in line.fix and found["_report"].exit_code == 1
    whole = xla_toolchain.find({"PATH": ""}, site_dirs=[toolchain_dirs(tmp_path / "b")], toolkits=())
    deep = {"errors": {}, "xla": {"device": "/device:GPU:0", "ok": True, "compile_s": 0.412}}
    found = checks("h100x2", probe(gpus=2, cc=(9, 0), xla_toolchain=whole.to_dict(), deep=deep))
    assert found["xla-toolchain"].status == "ok" and "0.41 s" in found["xla-toolchain"].finding
    assert "0.41 s to compile and run" in found["xla"].finding
    assert found["_report"].exit_code == 0
    assert "xla-toolchain" not in checks("no-driver", probe())

"""configure() before and after initialization, and every strategy rule (real TensorFlow)."""

from __future__ import annotations

import json

import pytest

import tfgpu
from tfgpu import choices, cluster, runtime
from tfgpu.distribute import choose
from tfgpu.errors import ConfigError, TooLateError
from tfgpu.testing import ProcessFailed, run_cluster, run_on_logical_cpus

# -- configure ---------------------------------------------------------------------------------


@pytest.mark.process
def test_configure_before_initialization_applies_everything():
    result = run_on_logical_cpus("bodies:configure_fresh", 1, env={"TFGPU_LOGICAL_CPUS": ""})
    assert result["same"] and not result["initialized_before_op"]
    assert result["devices"] == 2
    assert (result["intra"], result["inter"]) == (2, 1)
    assert result["policy"] == "mixed_bfloat16"
    assert result["allocator"] == "cuda_malloc_async"
    again = run_on_logical_cpus("bodies:configure_fresh", 1, env={"TFGPU_LOGICAL_CPUS": ""})
    assert again["draw"] == result["draw"]  # seed applied


@pytest.mark.process
def test_configure_reads_tfgpu_variables_and_explicit_wins():
    result = run_on_logical_cpus("bodies:configure_from_environment", 2, env={"TFGPU_INTER_OP_THREADS": "1"})
    assert result["devices"] == 2
    assert result["inter"] == 3
    assert result["config"]["logical_cpus"] == 2


def test_configure_after_initialization_names_the_settings_it_could_not_apply():
    import tensorflow as tf

    tf.constant(1.0)  # initializes the devices (3 logical CPUs, from conftest)
    assert runtime.devices_initialized()
    with pytest.raises(TooLateError) as info:
        tfgpu.configure(logical_cpus=2, intra_op_threads=5)
    message = info.value.message
    assert "logical_cpus=2" in message and "intra_op_threads=5" in message
    assert "before any TensorFlow op" in message
    # settings already in force are harmless after initialization
    tfgpu.configure(logical_cpus=3)
    with pytest.raises(TooLateError, match="allocator"):
        tfgpu.configure(allocator="cuda_malloc_async")


@pytest.mark.parametrize(
    ("machine", "asked", "flags", "kept"),
    [
        ("h100x2", None, "", "nvidia-h100"),  # on by default where there are GPUs
        ("no-driver", None, "", None),  # a CPU-only machine: only when asked
        ("no-driver", True, "", "cpu-"),
        ("h100x2", False, "", None),
        ("h100x2", None, "--tf_xla_persistent_cache_directory=/mine", None),  # the user's own
        ("h100x2", None, "--tf_xla_auto_jit=2", "nvidia-h100"),  # kept beside other flags
    ],
)
def test_xla_s_persistent_cache_is_put_under_tfgpu_s_cache_before_the_devices_start(
    monkeypatch, tmp_path, machine, asked, flags, kept
):
    import tensorflow as tf

    from tfgpu.config import RuntimeConfig
    from tfgpu.testing.fake_nvml import profile

    monkeypatch.setenv("TFGPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TF_XLA_FLAGS", flags)
    probe = runtime.nvml.probe
    monkeypatch.setattr(runtime.nvml, "probe", lambda: probe(profile(machine)))
    monkeypatch.setattr(runtime, "devices_initialized", lambda: False)
    assert runtime._xla_cache(tf, RuntimeConfig(xla_cache=asked)) == []
    now = runtime.os.environ["TF_XLA_FLAGS"]
    if kept is None:
        assert now == flags
        return
    assert now.startswith(flags) and now.count("--tf_xla_persistent_cache_directory=") == 1
    directory = now.split("--tf_xla_persistent_cache_directory=")[1]
    assert directory.startswith(str(tmp_path / "xla" / f"tf-{tf.__version__}-{kept}"))


def test_xla_s_cache_asked_by_name_after_the_devices_started_is_said_to_be_too_late(monkeypatch):
    import tensorflow as tf

    from tfgpu.config import RuntimeConfig

    monkeypatch.setenv("TF_XLA_FLAGS", "")
    monkeypatch.setattr(runtime, "devices_initialized", lambda: True)
    assert runtime._xla_cache(tf, RuntimeConfig(xla_cache=True)) == ["xla_cache=True"]
    assert runtime._xla_cache(tf, RuntimeConfig()) == []  # the default: nothing to say
    assert runtime.os.environ["TF_XLA_FLAGS"] == ""


def test_configure_rejects_gpu_index_that_does_not_exist():
    with pytest.raises(ConfigError, match="TensorFlow sees 0 GPU"):
        tfgpu.configure(visible_gpus=[0], logical_cpus=3)


def test_precision_auto_resolves_from_compute_capability(clean_choices):
    assert runtime.resolve_precision([]) == ("fp32", "no GPU")
    assert runtime.resolve_precision([(9, 0), (8, 0)])[0] == "bf16"
    assert runtime.resolve_precision([(7, 5)])[0] == "fp16"
    assert runtime.resolve_precision([(8, 0), (7, 0)])[0] == "fp16"
    assert runtime.resolve_precision([(6, 1)])[0] == "fp32"
    import keras

    try:
        tfgpu.configure(logical_cpus=3, precision="auto")
        assert keras.mixed_precision.dtype_policy().name == "float32"
        assert choices.as_dict()["precision"] == {"value": "fp32", "reason": "no GPU"}
    finally:
        keras.mixed_precision.set_dtype_policy("float32")


# -- strategy rules (pure) ---------------------------------------------------------------------

PS = cluster.build_cluster(
    hosts={"chief": ["a:1"], "worker": ["b:2"], "ps": ["c:3"]}, task_type="chief", task_index=0
)
TWO = cluster.build_cluster(hosts={"worker": ["a:1", "b:2"]}, task_type="worker", task_index=1)
ONE = cluster.build_cluster(hosts={"worker": ["a:1"]}, task_type="worker", task_index=0)


@pytest.mark.parametrize(
    ("name", "spec", "gpus", "cpus", "kind", "devices"),
    [
        (None, PS, 4, 1, "parameter-server", ()),
        (None, TWO, 4, 1, "multi-worker", ()),
        (None, ONE, 2, 1, "mirrored", ("/gpu:0", "/gpu:1")),
        (None, None, 2, 1, "mirrored", ("/gpu:0", "/gpu:1")),
        (None, None, 1, 1, "one-device", ("/gpu:0",)),
        (None, None, 0, 3, "mirrored", ("/cpu:0", "/cpu:1", "/cpu:2")),
        (None, None, 0, 1, "one-device", ("/cpu:0",)),
        ("one-device", None, 2, 1, "one-device", ("/gpu:0",)),
        ("mirrored", None, 0, 1, "mirrored", ("/cpu:0",)),
        ("multi-worker", ONE, 0, 1, "multi-worker", ()),
        ("default", None, 2, 1, "default", ()),
    ],
)
def test_strategy_rules(name, spec, gpus, cpus, kind, devices):
    picked = choose(name=name, spec=spec, gpus=gpus, logical_cpus=cpus)
    assert (picked.kind, picked.devices) == (kind, devices)
    assert picked.reason


@pytest.mark.parametrize(
    ("name", "spec", "needle"),
    [
        ("mirroredd", None, "Unknown strategy name"),
        ("multi-worker", None, "needs a cluster"),
        ("parameter-server", TWO, "needs 'ps' tasks"),
    ],
)
def test_strategy_rule_errors(name, spec, needle):
    with pytest.raises(ConfigError, match=needle):
        choose(name=name, spec=spec, gpus=0, logical_cpus=1)


# -- strategy() on real TensorFlow -------------------------------------------------------------


def test_strategy_picks_mirrored_over_logical_cpus(clean_choices):
    strategy = tfgpu.strategy(environ={})
    assert type(strategy).__name__ == "MirroredStrategy"
    assert strategy.num_replicas_in_sync == 3
    assert "strategy=MirroredStrategy x3 (3 logical CPU devices)" in choices.summary_line()


def test_strategy_name_and_environment_force_a_choice(clean_choices):
    forced = tfgpu.strategy("one-device", environ={})
    assert type(forced).__name__ == "OneDeviceStrategy"
    from_env = tfgpu.strategy(environ={"TFGPU_STRATEGY": "one-device"})
    assert from_env.num_replicas_in_sync == 1


def test_malformed_tf_config_is_reported_by_strategy():
    with pytest.raises(tfgpu.ClusterError, match=r"task\.index"):
        tfgpu.strategy(
            environ={
                "TF_CONFIG": json.dumps(
                    {"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}
                )
            }
        )


@pytest.mark.slow
def test_multi_worker_strategy_with_two_real_processes():
    results = run_cluster("bodies:multi_worker_strategy", workers=2, timeout=240)
    assert set(results) == {"worker:0", "worker:1"}
    for result in results.values():
        assert result["is_mwms"]
        assert result["replicas"] == 2
        assert result["sum"] == 3.0  # 1 + 2: the all-reduce crossed both processes
        assert result["choice"] == {
            "value": "MultiWorkerMirroredStrategy x2",
            "reason": "TF_CONFIG has 2 tasks",
        }


@pytest.mark.slow
def test_parameter_server_strategy_with_chief_ps_and_worker():
    results = run_cluster("bodies:parameter_server_strategy", workers=1, chief=True, ps=1, timeout=240)
    chief = results["chief:0"]
    assert chief["is_ps"]
    assert chief["counter"] == 3.0
    assert "/job:ps" in chief["variable_device"]


@pytest.mark.process
def test_harness_reports_which_process_failed():
    with pytest.raises(ProcessFailed, match="process exited with status 1") as info:
        run_on_logical_cpus("bodies:fail_on_purpose", 2)
    assert "this body fails on purpose" in str(info.value)


@pytest.mark.process
def test_harness_gives_each_child_its_logical_devices():
    assert run_on_logical_cpus("bodies:logical_device_count", 4) == 4

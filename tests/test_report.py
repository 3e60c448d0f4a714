"""Reports from recorded runs, and the NVML monitor behind the GPU utilization plot."""

from __future__ import annotations

import time

import pytest

from tfgpu.errors import InputError
from tfgpu.monitor import Monitor
from tfgpu.report.runs import load_run, save_run, sections_for, write_report
from tfgpu.testing.fake_nvml import profile

TRAIN = {
    "steps": 4,
    "epochs": 1,
    "global_batch": 64,
    "replicas": 2,
    "seconds": 1.0,
    "examples_per_s": 256.0,
    "input_wait_fraction": 0.3,
    "bottleneck": "input",
    "input_bound": "highly",
    "verdict": "HIGHLY input-bound: 30% of step time waiting for input",
    "history": [{"epoch": 1, "loss": 0.9, "steps": 4, "val_loss": 0.8, "val_accuracy": 0.7}],
    "timeline": [
        {"t": 0.1 * i, "step": i + 1, "loss": 1.0 - 0.1 * i, "examples_per_s": 250.0, "input_wait": 0.3}
        for i in range(4)
    ],
    "gpu_utilization": [
        {"t": 0.1 * i, "gpu": g, "utilization": 90, "memory_used_mb": 1000.0}
        for i in range(4)
        for g in (0, 1)
    ],
}


def test_recorded_train_run_renders_with_gpu_utilization(tmp_path):
    save_run(tmp_path, "train", TRAIN)
    record = load_run(tmp_path)
    [section] = sections_for(record)
    assert section.title == "Training" and section.verdict.startswith("HIGHLY")
    assert len(section.images) == 5  # loss, eval accuracy, throughput, device busy, GPU utilization
    page = write_report(tmp_path).read_text()
    assert page.count("data:image/png;base64,") == 5 and "tfgpu train report" in page


@pytest.mark.parametrize(("replicas", "said"), [(1, "on 1 replica:"), (2, "on 2 replicas:")])
def test_the_replica_count_reads_as_english(tmp_path, replicas, said):
    """The demo on one GPU said "on 1 replicas" (H100, 2026-11-27)."""
    save_run(tmp_path, "train", {**TRAIN, "replicas": replicas})
    assert said in write_report(tmp_path).read_text()


def test_without_gpu_samples_there_is_no_gpu_plot(tmp_path):
    save_run(tmp_path, "train", {**TRAIN, "gpu_utilization": []})
    assert len(sections_for(load_run(tmp_path))[0].images) == 4


def test_a_tuned_run_has_a_tuning_section_before_training(tmp_path):
    """The trials of tune=True as a table and a plot, the default's and the choice's rates."""
    from tfgpu.train.tuning import Config, Trial, Tuning

    trial = Trial(
        knob="together",
        baseline=Config(1).label(),
        candidate=Config(64, input=True).label(),
        baseline_examples_per_s=1000.0,
        candidate_examples_per_s=1900.0,
        ratio=1.9,
        spread=(1.8, 2.0),
    )
    tuned = Tuning(12.0, {"steps_per_execution": 64, "input": True}, {"steps_per_execution": 1.9}, [trial])
    save_run(tmp_path, "train", {**TRAIN, "tuning": tuned.to_dict()})
    first, training = sections_for(load_run(tmp_path))
    assert first.title == "Tuning" and training.title == "Training"
    assert first.verdict.startswith("tfgpu tuned in 12 s (1,000 -> 1,900 examples/s)")
    assert "Before: 1,000 examples/s" in first.paragraphs[0] and len(first.images) == 1
    assert first.tables[0][1][0][:3] == ["together", "K=1", "K=64 +input"]
    kept = Tuning(0.0, {"steps_per_execution": 100}, {}, reused="/k.json").to_dict()
    save_run(tmp_path, "train", {**TRAIN, "tuning": kept})
    section = sections_for(load_run(tmp_path))[0]
    assert section.images == [] and "kept" in section.paragraphs[0]


def test_bad_run_records(tmp_path):
    with pytest.raises(InputError, match="No tfgpu run record"):
        load_run(tmp_path)
    (tmp_path / "run.json").write_text('{"kind": "lunch", "data": {}}')
    with pytest.raises(InputError, match="not a tfgpu run record"):
        load_run(tmp_path)


def test_monitor_samples_fake_gpus():
    with Monitor(interval_s=0.01, nvml_module=profile("busy")) as monitor:
        deadline = time.monotonic() + 60  # only a hang reaches it: the sampler waits for the GIL
        while len(monitor.samples) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(monitor.samples) >= 3 and {s.utilization for s in monitor.samples} == {97}
    assert monitor.mean_utilization() == 97.0
    assert monitor.samples[0].memory_used_mb == 14000.0


def test_monitor_without_driver_records_nothing():
    with Monitor(interval_s=0.01, nvml_module=profile("no-driver")) as monitor:
        time.sleep(0.03)
    assert monitor.samples == [] and monitor.mean_utilization() is None

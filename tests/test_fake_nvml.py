"""The fake NVML is checked against the real pynvml: same functions, same errors, same shapes."""

from __future__ import annotations

import inspect

import pynvml

from tfgpu import nvml
from tfgpu.testing.fake_nvml import FakeNvml, profile


def test_fake_offers_the_real_functions_with_compatible_signatures():
    for name, member in inspect.getmembers(FakeNvml, inspect.isfunction):
        if not name.startswith("nvml"):
            continue
        real = getattr(pynvml, name)
        real_params = [p for p in inspect.signature(real).parameters.values()]
        fake_params = list(inspect.signature(member).parameters.values())[1:]  # drop self
        required_real = [p for p in real_params if p.default is inspect.Parameter.empty]
        assert len(fake_params) >= len(required_real), name


def test_fake_raises_the_real_error_classes():
    fake = profile("no-driver")
    try:
        fake.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound as exc:
        assert exc.value == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    else:
        raise AssertionError("nvmlInit should fail")


def test_fake_no_driver_matches_this_machine_when_it_has_no_driver():
    real = nvml.probe()
    if real.available:  # a machine with a GPU: compare the shapes instead
        assert all(isinstance(g.compute_capability, tuple) for g in real.gpus)
        return
    fake = nvml.probe(profile("no-driver"))
    assert (fake.available, fake.error, fake.error_kind) == (real.available, real.error, real.error_kind)


def test_probe_leaves_nvml_shut_down():
    fake = profile("h100x2")
    report = nvml.probe(fake)
    assert report.available and len(report.gpus) == 2
    assert fake.initialized == 0
    assert report.cuda_driver_version == "12.4"
    assert report.gpus[0].mig_enabled is False


def test_visible_follows_cuda_rules():
    report = nvml.probe(profile("h100x2"))
    assert [g.index for g in nvml.visible(report, None)] == [0, 1]
    assert [g.index for g in nvml.visible(report, "1")] == [1]
    assert [g.index for g in nvml.visible(report, "1,5,0")] == [1]  # stops at the first bad entry
    assert nvml.visible(report, "") == ()
    assert nvml.visible(report, "-1") == ()


def test_blackwell_machines_report_their_compute_capability_and_an_r570_driver():
    for machine, cc, cuda in (("rtx5090", (12, 0), "12.9"), ("b200x2", (10, 0), "12.8")):
        report = nvml.probe(profile(machine))
        assert {g.compute_capability for g in report.gpus} == {cc}, machine
        assert report.cuda_driver_version == cuda
        assert int(report.driver_version.split(".")[0]) >= 570  # the first branch that runs Blackwell

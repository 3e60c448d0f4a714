"""``tfgpu demo``: the whole tool on a built-in example workload, on any machine.

Today it runs doctor, configures the devices the way tfgpu would for this machine (2 logical CPU
devices when there is no GPU, so the distributed path runs), picks the strategy, and checks that
training on every replica matches one device. Later stages (diagnose, train, predict, the report)
are added here as they land.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from tfgpu import choices, distribute, doctor, nvml, runtime

log = logging.getLogger(__name__)


@dataclass
class DemoResult:
    doctor: doctor.DoctorReport
    choices: dict[str, dict[str, str]] = field(default_factory=dict)
    replica_check: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        check = self.replica_check
        return bool(check.get("finite") and check.get("agree"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "doctor": self.doctor.to_dict(),
            "choices": self.choices,
            "replica_check": self.replica_check,
        }


def run_demo() -> DemoResult:
    """Run the demo stages in order and return what each found."""
    report = doctor.run()
    has_gpu = bool(nvml.probe().gpus) and report.facts.tf_gpu_count > 0
    runtime.configure(logical_cpus=None if has_gpu else 2, precision="auto")
    if not has_gpu:
        choices.record("devices", "2 logical CPU devices", "no GPU: exercise the distributed path")
    chosen = distribute.strategy()
    import tensorflow as tf

    from tfgpu import selfcheck

    check = selfcheck.replica_agreement(tf, chosen)
    choices.announce()
    return DemoResult(doctor=report, choices=choices.as_dict(), replica_check=check)

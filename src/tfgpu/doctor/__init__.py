"""``tfgpu doctor``: is TensorFlow using the GPU, and if not, exactly why and what to do.

``run()`` gathers facts (NVML in this process, TensorFlow in a child process) and applies the
checks in :mod:`tfgpu.doctor.checks`. It never initializes TensorFlow's GPU runtime in the caller.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfgpu import env, host, nvml
from tfgpu.doctor.checks import FAIL, WARN, CheckResult, Facts, run_checks
from tfgpu.doctor.tfprobe import run_probe

__all__ = ["CheckResult", "DoctorReport", "Facts", "gather_facts", "run"]

_ENV_SHOWN = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "TF_CONFIG",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_GPU_ALLOCATOR",
    "TF_GPU_THREAD_MODE",
    "TF_USE_LEGACY_KERAS",
    "TF_XLA_FLAGS",
    "LD_LIBRARY_PATH",
)


@dataclass
class DoctorReport:
    facts: Facts
    checks: list[CheckResult]

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == FAIL]

    @property
    def warnings(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == WARN]

    @property
    def headline(self) -> str:
        """Whether TensorFlow uses the GPUs (the first check), unless another check failed: then
        that failure, since it is what stops the user."""
        if not self.checks:
            return "no checks ran"
        first, failed = self.checks[0], self.failed
        if failed and first.status != FAIL:
            return f"{failed[0].name}: {failed[0].finding}"
        return first.finding

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "headline": self.headline,
            "ok": not self.failed,
            "checks": [c.to_dict() for c in self.checks],
            "facts": self.facts.to_dict(),
        }


def gather_facts(
    *,
    deep: bool = False,
    nvml_module: Any | None = None,
    tf_probe: dict[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    interfaces: Mapping[str, Any] | None = None,
) -> Facts:
    """Collect the facts the checks read. Tests pass a fake NVML, a recorded probe and made-up
    network interfaces."""
    from tfgpu import exposure

    environ = os.environ if environ is None else environ
    report = nvml.probe(nvml_module)
    probe = tf_probe if tf_probe is not None else run_probe(deep=deep)
    return Facts(
        python=tuple(sys.version_info[:3]),  # type: ignore[arg-type]
        cpu_count=host.cores(),
        nvml=report,
        tf=probe,
        environ={k: environ[k] for k in _ENV_SHOWN if k in environ},
        unknown_tfgpu_variables=env.unknown_variables(environ),
        public_addresses=exposure.public_addresses(interfaces),
    )


def run(
    *,
    deep: bool = False,
    nvml_module: Any | None = None,
    tf_probe: dict[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> DoctorReport:
    """Gather facts and run every check."""
    facts = gather_facts(deep=deep, nvml_module=nvml_module, tf_probe=tf_probe, environ=environ)
    return DoctorReport(facts=facts, checks=run_checks(facts))

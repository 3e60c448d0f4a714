"""Known problems of particular TensorFlow / Keras versions, as data.

Each entry names the package versions it applies to (the first affected version and the first
fixed one, or none when no release fixes it) and the source that establishes both. doctor reports
an entry only when every package it names is installed at a version inside its range, so a user on
a fixed release is never warned about a bug they do not have. Add a row when a new problem is
confirmed, with its source, and a case in ``tests/test_doctor.py`` that checks both ends of its range.

Versions compare as PEP 440 versions (``packaging.version``, a dependency of tensorflow, keras and
matplotlib). A pre-release of the first affected version counts as affected; a pre-release of the
fix version counts as not yet fixed (a nightly may or may not carry the fix, so doctor warns).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from tfgpu.doctor.estimator_help import GUIDE
from tfgpu.versions import parse_version

# What the ranges can name; doctor's check_known_issues supplies each from the gathered facts.
PACKAGES = ("tensorflow", "keras", "python", "driver")

# The newest releases the unfixed Keras entries were re-checked on (DESIGN.md, "Facts this design
# rests on"): TensorFlow 2.21 with Keras 3.15.1, and keras-nightly 3.16.0.dev.
LAST_CHECKED = "Keras 3.15.1 and keras-nightly 3.16.0.dev (November 2026)"


def version(text: str) -> Version:
    """A comparable version; a string PEP 440 refuses ('2.21.0-custom_build') keeps its numeric part."""
    try:
        return Version(text.strip())
    except InvalidVersion:
        return Version(".".join(map(str, parse_version(text))))


@dataclass(frozen=True)
class Affected:
    """The versions of one package an issue applies to: from ``first`` up to, not including, ``fixed``.

    Attributes:
        package: one of PACKAGES.
        first: the lowest affected version.
        fixed: the first version with the fix; None while no release fixes it.
    """

    package: str
    first: str
    fixed: str | None

    def __post_init__(self) -> None:
        if self.package not in PACKAGES:
            raise ValueError(f"Affected.package={self.package!r} is unknown; use one of {PACKAGES}")
        if self.fixed is not None and version(self.fixed) <= version(self.first):
            raise ValueError(
                f"Affected({self.package!r}): fixed={self.fixed!r} is not after first={self.first!r}; "
                "fixed is the first release without the problem"
            )

    def contains(self, installed: str) -> bool:
        """Whether ``installed`` is inside [first, fixed); see the module docstring for pre-releases."""
        have = version(installed)
        if Version(have.base_version) < version(self.first):
            return False
        return self.fixed is None or have < version(self.fixed)

    def describe(self) -> str:
        if self.fixed is None:
            return f"{self.package} >= {self.first}, no fixed release"
        return f"{self.package} {self.first} up to {self.fixed} (fixed in {self.fixed})"


@dataclass(frozen=True)
class KnownIssue:
    """One confirmed problem: what it is, where it is established, which versions have it, what to do.

    Attributes:
        key: short stable name; the check is reported as ``known:<key>``.
        title: what goes wrong, as the user sees it.
        source: the issue, pull request, release note or source file that establishes it.
        affects: the version range of each package the problem depends on (all must match).
        fix: what to do about it.
        fixed_by: the change that fixed it, where one has (it shipped in the ``fixed`` version).
        checked_on: for an unfixed problem, the newest releases it was re-checked on.
        needs_package: applies only when this package is installed (e.g. tensorflow-estimator).
        unless_package: applies only when this package is not installed.
    """

    key: str
    title: str
    source: str
    affects: tuple[Affected, ...]
    fix: str
    fixed_by: str | None = None
    checked_on: str | None = None
    needs_package: str | None = None
    unless_package: str | None = None

    def __post_init__(self) -> None:
        links = [self.source] + ([self.fixed_by] if self.fixed_by else [])
        if not (all(link.startswith("https://") for link in links) and self.affects):
            raise ValueError(
                f"KnownIssue {self.key!r}: source={self.source!r}, fixed_by={self.fixed_by!r}, "
                f"affects={self.affects!r}; every entry needs https links and at least one version range"
            )

    def applies(self, installed: Mapping[str, str], *, packages: frozenset[str] = frozenset()) -> bool:
        """Whether these installed versions (and packages) have the problem.

        A package whose version is unknown does not match: doctor warns only about what it can show.
        """
        if self.needs_package and self.needs_package not in packages:
            return False
        if self.unless_package and self.unless_package in packages:
            return False
        return all(a.package in installed and a.contains(installed[a.package]) for a in self.affects)

    def ranges(self) -> str:
        text = "; ".join(a.describe() for a in self.affects)
        return f"{text}; still seen on {self.checked_on}" if self.checked_on else text


KERAS_TF_TRAINER = "https://github.com/keras-team/keras/blob/master/keras/src/backend/tensorflow/trainer.py"

KNOWN_ISSUES: tuple[KnownIssue, ...] = (
    KnownIssue(
        key="keras#20585",
        title="Keras 3 model.fit and model.evaluate fail under MultiWorkerMirroredStrategy with "
        "'ValueError: Attempt to convert a value (PerReplica:...)'; model.predict works",
        source="https://github.com/keras-team/keras/issues/20585",
        affects=(Affected("keras", "3.0.0", None),),
        checked_on=LAST_CHECKED,
        fix="train and evaluate multi-worker with tfgpu.Trainer (a strategy.run loop), not model.fit / "
        "model.evaluate; model.predict is fine",
    ),
    KnownIssue(
        key="keras-fit-parameter-server",
        title="Keras 3 model.fit does not support ParameterServerStrategy: its TensorFlow trainer has "
        "no ClusterCoordinator path",
        source=KERAS_TF_TRAINER,
        affects=(Affected("keras", "3.0.0", None),),
        checked_on=LAST_CHECKED,
        fix="use MultiWorkerMirroredStrategy with tfgpu.Trainer, or Keras 2 (tf_keras with "
        "TF_USE_LEGACY_KERAS=1), whose fit drives a ClusterCoordinator",
    ),
    KnownIssue(
        key="keras#21061",
        title="Keras 3 model.fit under MirroredStrategy can report NaN losses and metrics "
        "(metric variables were synchronized on write; fixed by keras PR #21072)",
        source="https://github.com/keras-team/keras/issues/21061",
        fixed_by="https://github.com/keras-team/keras/pull/21072",
        affects=(Affected("keras", "3.0.0", "3.10.0"),),
        fix="pip install 'keras>=3.10', or compare multi-GPU losses with one GPU (`tfgpu doctor --deep`)",
    ),
    KnownIssue(
        key="keras#20582",
        title="an optimizer's gradient_accumulation_steps fails under MirroredStrategy "
        "(the option exists since Keras 3.1.0)",
        source="https://github.com/keras-team/keras/issues/20582",
        affects=(Affected("keras", "3.1.0", None),),
        checked_on=LAST_CHECKED,
        fix="train with tfgpu.fit, which accumulates under every strategy (the optimizer's "
        "gradient_accumulation_steps as set), or leave it unset under Keras's own fit",
    ),
    KnownIssue(
        key="keras#21207",
        title="a model built in keras.RematScope (added in Keras 3.9.0) fails in a compiled model.fit, "
        "even on one device",
        source="https://github.com/keras-team/keras/issues/21207",
        affects=(Affected("keras", "3.9.0", None),),
        checked_on=LAST_CHECKED,
        fix="train with tfgpu.fit, which runs a model built in keras.RematScope (and remat= for "
        "one that is not), or wrap the block in tf.recompute_grad under Keras's own fit",
    ),
    KnownIssue(
        key="keras-auto-jit-distribute",
        title="jit_compile='auto' (Keras' default) turns XLA off under any tf.distribute strategy, "
        "by design (Trainer._resolve_auto_jit_compile, since Keras 3.0.3)",
        source="https://github.com/keras-team/keras/blob/master/keras/src/trainers/trainer.py",
        affects=(Affected("keras", "3.0.3", None),),
        checked_on=LAST_CHECKED,
        fix="pass jit_compile=True to model.compile to keep XLA under a strategy (Keras then checks the "
        "model's layers support it)",
    ),
    KnownIssue(
        key="tf-estimator-removed",
        title="tf.estimator was removed in TensorFlow 2.16, but tensorflow-estimator is installed",
        source="https://github.com/tensorflow/tensorflow/releases/tag/v2.16.1",
        affects=(Affected("tensorflow", "2.16.0", None),),
        fix=f"pin tensorflow==2.15.* to keep Estimators, or migrate ({GUIDE})",
        needs_package="tensorflow-estimator",
    ),
    KnownIssue(
        key="tensorflow#63341",
        title="TensorFlow 2.16 does not find the pip-installed CUDA libraries "
        "('Cannot dlopen some GPU libraries')",
        source="https://github.com/tensorflow/tensorflow/issues/63341",
        affects=(Affected("tensorflow", "2.16.0", "2.17.0"),),
        fix="upgrade to tensorflow[and-cuda]>=2.17, or add the nvidia/*/lib folders to LD_LIBRARY_PATH",
    ),
    KnownIssue(
        key="tf-2.21-no-tensorboard",
        title="TensorFlow 2.21 no longer installs TensorBoard, so profiler traces need it added",
        source="https://github.com/tensorflow/tensorflow/releases/tag/v2.21.0",
        affects=(Affected("tensorflow", "2.21.0", None),),
        fix="pip install tensorboard xprof to view `tfgpu profile` traces",
        unless_package="tensorboard",
    ),
)


def applicable(installed: Mapping[str, str], *, packages: frozenset[str] = frozenset()) -> list[KnownIssue]:
    """The known issues these installed versions have.

    Args:
        installed: package -> version for the keys of PACKAGES that are known (others are left out).
        packages: names of optional packages found installed (tensorboard, tensorflow-estimator, ...).
    """
    return [issue for issue in KNOWN_ISSUES if issue.applies(installed, packages=packages)]

"""Known problems of particular TensorFlow / Keras versions, as data.

Each entry applies when the installed versions fall in its ranges. Add a row when a new problem is
confirmed (with its upstream link); the doctor reports each one that applies, with its workaround.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfgpu.estimator import GUIDE
from tfgpu.versions import Version, parse_version


@dataclass(frozen=True)
class KnownIssue:
    key: str
    title: str
    link: str
    tensorflow: tuple[str, str]  # [low, high) version range
    keras: tuple[str, str] = ("0", "999")
    fix: str = ""
    only_with_estimator_package: bool = False
    only_without_package: str | None = None  # applies only when this package is not installed

    def applies(
        self,
        tf_version: Version,
        keras_version: Version | None,
        *,
        estimator_package: bool,
        installed: frozenset[str] = frozenset(),
    ) -> bool:
        if self.only_with_estimator_package and not estimator_package:
            return False
        if self.only_without_package and self.only_without_package in installed:
            return False
        in_tf = parse_version(self.tensorflow[0]) <= tf_version < parse_version(self.tensorflow[1])
        if keras_version is None:
            return in_tf
        return in_tf and parse_version(self.keras[0]) <= keras_version < parse_version(self.keras[1])


KNOWN_ISSUES: tuple[KnownIssue, ...] = (
    KnownIssue(
        key="keras#20585",
        title="Keras 3 model.fit under MultiWorkerMirroredStrategy fails with "
        "'ValueError: Attempt to convert a value (PerReplica:...)'",
        link="https://github.com/keras-team/keras/issues/20585",
        tensorflow=("2.16", "999"),
        keras=("3.0", "4.0"),
        fix="train multi-worker with tfgpu.Trainer (a strategy.run loop), not model.fit",
    ),
    KnownIssue(
        key="keras#21061",
        title="Keras 3 model.fit under MirroredStrategy has shipped NaN-loss regressions",
        link="https://github.com/keras-team/keras/issues/21061",
        tensorflow=("2.16", "999"),
        keras=("3.0", "4.0"),
        fix="check multi-GPU losses against one GPU (`tfgpu doctor --deep`), or use tfgpu.Trainer",
    ),
    KnownIssue(
        key="tf-estimator-removed",
        title="tf.estimator was removed in TensorFlow 2.16, but tensorflow-estimator is installed",
        link="https://github.com/tensorflow/tensorflow/releases/tag/v2.16.1",
        tensorflow=("2.16", "999"),
        fix=f"pin tensorflow==2.15.* to keep Estimators, or migrate ({GUIDE})",
        only_with_estimator_package=True,
    ),
    KnownIssue(
        key="tensorflow#63341",
        title="TensorFlow 2.16 does not find the pip-installed CUDA libraries "
        "('Cannot dlopen some GPU libraries')",
        link="https://github.com/tensorflow/tensorflow/issues/63341",
        tensorflow=("2.16", "2.17"),
        fix="upgrade to tensorflow[and-cuda]>=2.17, or add the nvidia/*/lib folders to LD_LIBRARY_PATH",
    ),
    KnownIssue(
        key="tf-2.21-no-tensorboard",
        title="TensorFlow 2.21 no longer installs TensorBoard, so profiler traces need it added",
        link="https://github.com/tensorflow/tensorflow/releases/tag/v2.21.0",
        tensorflow=("2.21", "999"),
        fix="pip install tensorboard xprof to view `tfgpu profile` traces",
        only_without_package="tensorboard",
    ),
)


def applicable(
    tf_version: str,
    keras_version: str | None,
    *,
    estimator_package: bool = False,
    installed: frozenset[str] = frozenset(),
) -> list[KnownIssue]:
    """The known issues that affect these installed versions (and packages)."""
    tfv = parse_version(tf_version)
    kv = parse_version(keras_version) if keras_version else None
    return [
        i
        for i in KNOWN_ISSUES
        if i.applies(tfv, kv, estimator_package=estimator_package, installed=installed)
    ]

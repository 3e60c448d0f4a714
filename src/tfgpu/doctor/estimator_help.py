"""Where Estimator users are pointed: the migration guide and the pip line that restores tf.estimator.

Both ``tfgpu doctor`` and :mod:`tfgpu.estimator` say these words. They live here, in a module that
imports nothing from tfgpu but :mod:`tfgpu.versions`, so doctor does not import ``tfgpu.estimator``
(which imports the runtime and strategy modules) to read two strings.
"""

from __future__ import annotations

from tfgpu.versions import parse_version

GUIDE = "docs/migrating-from-estimator.md"


def install_line(tf_version: str) -> str:
    """The pip command that adds tf.estimator to TensorFlow <= 2.15 (the minor versions must match)."""
    major, minor = (*parse_version(tf_version), 0)[:2]
    return f"pip install 'tensorflow-estimator=={major}.{minor}.*'"

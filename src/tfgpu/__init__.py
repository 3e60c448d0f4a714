"""tfgpu: keep every accelerator busy for TensorFlow work.

``import tfgpu`` is cheap and does not import TensorFlow: the public names below load their modules
on first use, so ``tfgpu doctor`` and ``tfgpu.configure`` can run before TensorFlow touches a GPU.
One exception: under a TF_CONFIG that tfgpu trains on with MultiWorkerMirroredStrategy (``tfgpu
launch``), it sets the process up as its cluster task before TensorFlow's first op
(``tfgpu.distribute.prepare_multi_worker``), so a script that builds its data and model before
``tfgpu.fit``, as written, runs there too.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> (module, attribute); attribute None exports the module itself
_EXPORTS: dict[str, tuple[str, str | None]] = {
    "configure": ("tfgpu.runtime", "configure"),
    "RuntimeConfig": ("tfgpu.config", "RuntimeConfig"),
    "strategy": ("tfgpu.distribute", "strategy"),
    "doctor": ("tfgpu.doctor", None),
    "data": ("tfgpu.data", None),
    "Task": ("tfgpu.train", "Task"),
    "Trainer": ("tfgpu.train", "Trainer"),
    "fit": ("tfgpu.train.keras_fit", "fit"),
    "evaluate": ("tfgpu.train.keras_fit", "evaluate"),
    "TrainOptions": ("tfgpu.train", "TrainOptions"),
    "find_batch_size": ("tfgpu.train", "find_batch_size"),
    "memory": ("tfgpu.train.step.footprint", "memory"),
    "predict": ("tfgpu.predict", None),  # the package, callable: tfgpu.predict(...) (callable_module)
    "estimator": ("tfgpu.estimator", None),
    "ray": ("tfgpu.ray", None),  # Ray Train glue: imports Ray (pip install "tfgpu[ray]")
    "diagnose": ("tfgpu.diagnose", None),  # the package, callable: tfgpu.diagnose(...)
    "choices": ("tfgpu.choices", None),
    "TfgpuError": ("tfgpu.errors", "TfgpuError"),
    "ConfigError": ("tfgpu.errors", "ConfigError"),
    "TooLateError": ("tfgpu.errors", "TooLateError"),
    "ClusterError": ("tfgpu.errors", "ClusterError"),
    "InputError": ("tfgpu.errors", "InputError"),
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tfgpu' has no attribute {name!r}")
    module_name, attribute = _EXPORTS[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


def _prepare_multi_worker() -> None:
    import os

    if "cluster" in os.environ.get("TF_CONFIG", ""):  # no cluster: nothing to import
        from tfgpu import distribute

        distribute.prepare_multi_worker()


_prepare_multi_worker()

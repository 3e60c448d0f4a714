"""Packages that are also functions: ``tfgpu.predict(...)`` and ``tfgpu.diagnose(...)``.

``tfgpu.predict`` names both a subpackage (``tfgpu.predict.PredictOptions``) and the function most
users call. Once anything imports ``tfgpu.predict.<module>``, Python binds the subpackage as the
attribute ``tfgpu.predict`` and the lazy export of the function is never consulted, so whether
``tfgpu.predict(model, x)`` worked depended on import order. Making the package itself callable
gives one object that is both, whatever was imported first.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any


def make_callable(module_name: str, function: Callable[..., Any]) -> None:
    """Calling the module ``module_name`` calls ``function`` (its docstring shows in help())."""

    class CallableModule(types.ModuleType):
        __call__ = staticmethod(function)

    module = sys.modules[module_name]
    module.__class__ = CallableModule

"""Load a user function named FILE_OR_MODULE:FUNCTION (``tasks.py:make_task``, ``pkg.mod:fn``)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfgpu import usercode
from tfgpu.errors import InputError


def check_references(*references: str | None) -> None:
    """Each FILE_OR_MODULE:FUNCTION reference's form, and its file where it names one (None: an
    option not given), checked before anything is imported: the commands check theirs before
    TensorFlow's import (4 s here), so a typo is said at once."""
    for reference in references:
        if reference is not None:
            _check_reference(reference)


def _check_reference(reference: str) -> None:
    target, sep, name = reference.rpartition(":")
    if not sep or not target or not name:
        raise InputError(
            "Expected FILE_OR_MODULE:FUNCTION",
            value=reference,
            fix="write it like tasks.py:make_task or mypkg.tasks:make_task",
        )
    if _names_file(target) and not Path(target).exists():
        raise InputError(f"File {target} does not exist", value=reference, fix="check the path")


def _names_file(target: str) -> bool:
    return target.endswith(".py") or "/" in target


def load_function(reference: str) -> Callable[..., Any]:
    """The function a FILE_OR_MODULE:FUNCTION reference names; InputError naming what is missing."""
    _check_reference(reference)
    target, _, name = reference.rpartition(":")
    if _names_file(target):
        path = Path(target)
        module_name = f"tfgpu_user_{path.stem}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        sys.path.insert(0, str(path.resolve().parent))
        usercode.register(path, reference)
        _run_user_import(lambda: spec.loader.exec_module(module), reference)
    else:
        if os.getcwd() not in sys.path:  # as `python -m` does: modules in the current folder import
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            if exc.name and target.startswith(exc.name):
                raise InputError(
                    f"Module {target!r} cannot be imported ({exc})",
                    value=reference,
                    fix="check the name and PYTHONPATH",
                ) from None
            raise _import_failed(exc, reference) from exc
        except Exception as exc:
            raise _import_failed(exc, reference) from exc
        if getattr(module, "__file__", None):
            usercode.register(Path(module.__file__), reference)
    function = getattr(module, name, None)
    if not callable(function):
        found = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))[:12]
        raise InputError(
            f"{target} has no function {name!r}", value=reference, fix=f"use one of: {', '.join(found)}"
        )
    return function


def _run_user_import(run: Callable[[], Any], reference: str) -> None:
    try:
        run()
    except Exception as exc:  # a syntax or import error, or any error at import time
        raise _import_failed(exc, reference) from exc


def _import_failed(exc: BaseException, reference: str) -> InputError:
    explained = usercode.explain(exc)
    what = explained.what if explained else f"Your code raised {usercode.one_line(exc)}"
    return usercode.UserCodeError(
        f"Importing {reference.rpartition(':')[0]} failed: {what.removeprefix('Your code raised ')}",
        fix="fix the error there; run with --verbose for the full traceback",
    )

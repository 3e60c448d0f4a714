"""How far ``tfgpu.fit`` walks through tfgpu to reach its compiled step (issue 55's measure).

Traced with ``sys.setprofile`` (and ``threading.setprofile``) on one device: a small MLP on arrays,
``tfgpu.fit(model, x, y, tune=True)`` in a fresh tuning cache, after one untuned fit has imported
everything (a module's import is not counted: its ``<module>`` frame is skipped). Printed:

- the tfgpu modules whose functions ran, and the distinct (caller module, callee module) pairs
  crossed, with call counts;
- each distinct path of tfgpu modules from ``keras_fit.fit`` to a call of a compiled
  ``tf.function`` (the loop's step and the tuner's trials), modules in the order first entered.

Usage: python bench/trace_fit.py [--no-tune] [--devices N] [--json OUT]
``--devices 2``: the fit on 2 logical CPU devices, where ``tfgpu.fit`` moves the model (made
outside any scope, as most code makes it) into MirroredStrategy: the walk through placement.
Keras's own ``fit``, traced the same way over its trainer, data adapters and callbacks, entered
12 modules and crossed 16 pairs (issue 55). That count leaves Keras's backend, ops and utils out;
the second line printed is tfgpu's in the same scope, its training package (``tfgpu.train``),
without the base modules a fit also calls (``env``, ``files``, ``errors``, ``host``, ...).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import threading
from typing import Any

COMPILED = "tensorflow.python.eager.polymorphic_function.polymorphic_function"


def _data() -> tuple[Any, Any]:
    import numpy as np

    x = np.random.default_rng(0).normal(size=(512, 8)).astype("float32")
    return x, x.sum(axis=1, keepdims=True)


def _model() -> Any:
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    return model


class Tracer:
    def __init__(self) -> None:
        self.modules: collections.Counter = collections.Counter()
        self.pairs: collections.Counter = collections.Counter()
        self.paths: collections.Counter = collections.Counter()

    @staticmethod
    def _module(frame: Any) -> str | None:
        name = frame.f_globals.get("__name__", "")
        return name if name.startswith("tfgpu") and frame.f_code.co_name != "<module>" else None

    def _caller(self, frame: Any) -> str | None:
        caller = frame.f_back
        while caller is not None and self._module(caller) is None:
            caller = caller.f_back
        return None if caller is None else self._module(caller)

    def _path(self, frame: Any) -> tuple[str, ...]:
        chain: list[str] = []
        while frame is not None:
            module = self._module(frame)
            if module and (not chain or chain[-1] != module):
                chain.append(module)
            frame = frame.f_back
        chain.reverse()
        seen: list[str] = []
        for module in chain:
            if module not in seen:
                seen.append(module)
        return tuple(seen)

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        if frame.f_globals.get("__name__") == COMPILED and frame.f_code.co_name == "__call__":
            path = self._path(frame)
            if path:
                self.paths[path] += 1
            return
        module = self._module(frame)
        if module is None:
            return
        self.modules[module] += 1
        caller = self._caller(frame)
        if caller is not None and caller != module:
            self.pairs[(caller, module)] += 1


def trace(*, tune: bool, devices: int = 1) -> Tracer:
    import tfgpu

    if devices > 1:
        tfgpu.configure(logical_cpus=devices)

    x, y = _data()
    tfgpu.fit(_model(), x, y, epochs=1, verbose=0)  # imports everything
    os.environ["TFGPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="tfgpu-trace-")  # no kept tuning
    model = _model()
    tracer = Tracer()
    sys.setprofile(tracer)
    threading.setprofile(tracer)
    try:
        tfgpu.fit(model, x, y, epochs=1, verbose=0, tune=True if tune else None)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return tracer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-tune", action="store_true", help="trace an untuned fit")
    parser.add_argument("--devices", type=int, default=1, help="logical CPU devices (default 1)")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    found = trace(tune=not args.no_tune, devices=args.devices)
    print(f"modules entered: {len(found.modules)}, module pairs crossed: {len(found.pairs)}")
    inside = [pair for pair in found.pairs if all(m.startswith("tfgpu.train") for m in pair)]
    print(
        f"inside tfgpu.train (the scope of Keras's 12 and 16: its trainer, data adapters and callbacks, "
        f"not its backend, ops or utils): {len({m for m in found.modules if m.startswith('tfgpu.train')})} "
        f"modules, {len(inside)} pairs"
    )
    for module, calls in sorted(found.modules.items()):
        print(f"  {module}: {calls} calls")
    print("paths from fit to a compiled call (modules in the order entered):")
    for path, calls in sorted(found.paths.items(), key=lambda item: -len(item[0])):
        print(f"  {len(path)} modules ({calls} calls): {' -> '.join(m.removeprefix('tfgpu.') for m in path)}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(
                {
                    "modules": dict(found.modules),
                    "pairs": [[a, b, n] for (a, b), n in sorted(found.pairs.items())],
                    "paths": [[list(p), n] for p, n in found.paths.items()],
                },
                handle,
                indent=1,
            )


if __name__ == "__main__":
    main()

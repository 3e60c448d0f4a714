"""The call path of one ``tfgpu.fit(model, x, y, epochs=2, tune=True)``: the tfgpu modules it passes
through and its cross-module calls, counted as issue 45 counted them (a call is a distinct pair
caller function -> callee function whose modules differ, both in tfgpu, the caller the callee's
immediate Python caller).

    python bench/call_path.py [--json]

Run on two commits to compare a refactor's seams (the model, data and budget are fixed here).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys


def traced_fit() -> tuple[set[str], set[tuple[str, str]]]:
    import keras
    import numpy as np

    import tfgpu

    tfgpu.configure(logical_cpus=2)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2048, 16)).astype("float32")
    y = (x.sum(1) > 0).astype("float32")
    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="binary_crossentropy")
    modules: set[str] = set()
    calls: set[tuple[str, str]] = set()

    def profile(frame, event, arg):
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("tfgpu"):
            return
        modules.add(module)
        caller = frame.f_back
        if caller is None:
            return
        from_module = caller.f_globals.get("__name__", "")
        if from_module.startswith("tfgpu") and from_module != module:
            calls.add((f"{from_module}.{caller.f_code.co_name}", f"{module}.{frame.f_code.co_name}"))

    sys.setprofile(profile)
    try:
        tfgpu.fit(model, x, y, batch_size=64, epochs=2, tune=True, tune_budget_s=4, verbose=0)
    finally:
        sys.setprofile(None)
    return modules, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    modules, calls = traced_fit()
    seams = collections.Counter(
        (a.rsplit(".", 1)[0], b.rsplit(".", 1)[0]) for a, b in calls if ".train." in a and ".train." in b
    )
    summary = {
        "modules": len(modules),
        "cross_module_calls": len(calls),
        "train_modules": sorted(m for m in modules if m.startswith("tfgpu.train")),
        "train_seams": {f"{a} -> {b}": n for (a, b), n in sorted(seams.items())},
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"{summary['modules']} modules, {summary['cross_module_calls']} cross-module calls")
    for seam, n in summary["train_seams"].items():
        print(f"  {n:3d}  {seam}")


if __name__ == "__main__":
    main()

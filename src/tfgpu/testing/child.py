"""Child side of :mod:`tfgpu.testing.processes`: ``python -m tfgpu.testing.child TARGET ARGS RESULT``.

Applies TFGPU_* settings (logical CPU devices) before anything else, then calls TARGET with the
pickled arguments and pickles its result.
"""

from __future__ import annotations

import importlib
import os
import pickle
import sys


def main(argv: list[str]) -> int:
    target, args_path, result_path = argv
    if os.environ.get("TFGPU_LOGICAL_CPUS"):
        from tfgpu import runtime

        runtime.configure()
    module_name, _, function_name = target.partition(":")
    function = getattr(importlib.import_module(module_name), function_name)
    with open(args_path, "rb") as handle:
        args = pickle.load(handle)
    result = function(*args)
    tmp = result_path + ".tmp"
    with open(tmp, "wb") as handle:
        pickle.dump(result, handle)
    os.replace(tmp, result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

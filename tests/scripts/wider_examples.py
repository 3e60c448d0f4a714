"""The five examples of tests/wider_examples.py with tfgpu's methods, under `tfgpu launch
--nproc 2`: each worker pickles each example's results.

Usage: wider_examples.py OUT
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the examples' module

from types import SimpleNamespace

import launched

import tfgpu  # sets the launched task up before TensorFlow starts
import wider_examples

TFGPU = SimpleNamespace(name="tfgpu", fit=tfgpu.fit, evaluate=tfgpu.evaluate, predict=tfgpu.predict)


def main() -> None:
    out = sys.argv[1]
    for name, example in wider_examples.EXAMPLES.items():
        launched.keep(out, name, example(TFGPU))
    launched.keep_strategy(out)


if __name__ == "__main__":
    main()

"""The five examples of tests/wider_examples.py with tfgpu's methods, under `tfgpu launch
--nproc 2`: each worker pickles each example's results.

Usage: wider_examples.py OUT
"""

import json
import os
import pickle
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the examples' module

from types import SimpleNamespace

import tfgpu  # sets the launched task up before TensorFlow starts
import wider_examples

TFGPU = SimpleNamespace(name="tfgpu", fit=tfgpu.fit, evaluate=tfgpu.evaluate, predict=tfgpu.predict)


def main() -> None:
    out = sys.argv[1]
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    for name, example in wider_examples.EXAMPLES.items():
        results = example(TFGPU)
        with open(os.path.join(out, f"{task['type']}-{task['index']}-{name}.pkl"), "wb") as handle:
            pickle.dump(results, handle)
    with open(os.path.join(out, f"{task['type']}-{task['index']}-strategy.json"), "w") as handle:
        json.dump(tfgpu.choices.as_dict().get("strategy"), handle)


if __name__ == "__main__":
    main()

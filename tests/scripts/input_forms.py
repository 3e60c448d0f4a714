"""Three input forms (arrays, a PyDataset, a generator) given to tfgpu.fit and tfgpu.predict as
written, under `tfgpu launch --nproc 2`: each worker pickles its results.

Usage: input_forms.py OUT
"""

import json
import os
import pickle
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the forms' module

import tfgpu  # sets the launched task up before TensorFlow starts
from input_forms import FORMS, LAUNCHED, data, run, small_model


def main() -> None:
    out = sys.argv[1]
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    x, y, w = data(37)
    results = {}
    for verb, form in LAUNCHED:
        results[f"{verb}-{form}"] = run(verb, form, small_model(FORMS[form][0]), x, y, w, 8, ours=True)
    with open(os.path.join(out, f"{task['type']}-{task['index']}.pkl"), "wb") as handle:
        pickle.dump(results, handle)
    with open(os.path.join(out, f"{task['type']}-{task['index']}-strategy.json"), "w") as handle:
        json.dump(tfgpu.choices.as_dict().get("strategy"), handle)


if __name__ == "__main__":
    main()

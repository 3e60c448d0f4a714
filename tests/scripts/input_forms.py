"""Three input forms (arrays, a PyDataset, a generator) given to tfgpu.fit and tfgpu.predict as
written, under `tfgpu launch --nproc 2`: each worker pickles its results.

Usage: input_forms.py OUT
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the forms' module

import launched

import tfgpu  # noqa: F401  (sets the launched task up before TensorFlow starts)
from input_forms import FORMS, LAUNCHED, data, run, small_model


def main() -> None:
    out = sys.argv[1]
    x, y, w = data(37)
    results = {}
    for verb, form in LAUNCHED:
        results[f"{verb}-{form}"] = run(verb, form, small_model(FORMS[form][0]), x, y, w, 8, ours=True)
    launched.keep(out, "forms", results)
    launched.keep_strategy(out)


if __name__ == "__main__":
    main()

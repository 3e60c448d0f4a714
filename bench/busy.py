"""A busy TensorFlow job: trains a small Keras model over and over until killed or ``--for`` ends.

The suite must pass on a machine that other TensorFlow jobs share (issue 44). ``bench/loaded.sh``
starts two of these beside a fresh clone's ``make test``; run alone, this is the load::

    python bench/busy.py --for 3600

Each process trains with TensorFlow's default thread pools, as a user's job would, so two of
them keep both cores of a 2-core machine busy and compete with the suite's own threads.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--for", dest="seconds", type=float, default=3600.0, help="seconds to run (default 3600)"
    )
    args = parser.parse_args()

    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(4096, 64)).astype("float32")
    y = rng.normal(size=(4096, 1)).astype("float32")
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    ends = time.monotonic() + args.seconds
    while time.monotonic() < ends:
        model.fit(x, y, batch_size=64, epochs=1, verbose=0)


if __name__ == "__main__":
    main()

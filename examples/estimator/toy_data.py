"""The toy data both halves of the migration example use: 4 features, 2 classes."""

from __future__ import annotations

import numpy as np

WEIGHTS = np.array([1.0, -2.0, 0.5, 3.0], dtype=np.float32)


def arrays(rows: int = 2048, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(seed).normal(size=(rows, 4)).astype(np.float32)
    return x, (x @ WEIGHTS > 0).astype(np.int64)

"""Aggregation rules shared by methods."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np


def weighted_average(
    arrays: Sequence[Mapping[str, np.ndarray]], weights: Sequence[float] | np.ndarray
) -> dict[str, np.ndarray]:
    """FedAvg: ``Σ_i n_i·w_i / Σ_i n_i`` per named array (McMahan et al. 2017, Alg. 1).

    Accumulates in float64 and casts back to each array's dtype.
    """
    if not arrays:
        raise ValueError("weighted_average needs at least one set of arrays")
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (len(arrays),) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"weights must be {len(arrays)} non-negative numbers with a positive sum, got {weights}")
    w = w / w.sum()
    names = list(arrays[0])
    for i, a in enumerate(arrays):
        if list(a) != names:
            raise ValueError(f"array set {i} has fields {list(a)}, expected {names}")
    return {
        n: sum(wi * np.asarray(a[n], dtype=np.float64) for wi, a in zip(w, arrays)).astype(arrays[0][n].dtype)
        for n in names
    }

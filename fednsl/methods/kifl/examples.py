"""Example knowledge models written as plain Python functions (the ``callable:`` interface of KIFL configs).

A P-KM callable takes the viewed rows ``x`` (n, d) float64 plus its config ``kwargs`` and returns class ids (n,)
or scores (n, k); an R-KM callable returns a (n, k) bool / 0-1 mask. Reference them as
``"fednsl.methods.kifl.examples:linear_score_pkm"``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["interval_range_km", "linear_grade_pkm", "linear_score_pkm"]


def linear_score_pkm(x: np.ndarray, weights: Sequence[Sequence[float]], bias: Sequence[float]) -> np.ndarray:
    """A formula P-KM: scores ``x Wᵀ + b`` of shape (n, k) (the client's argmax is its prediction)."""
    return np.asarray(x, dtype=np.float64) @ np.asarray(weights, dtype=np.float64).T + np.asarray(bias)


def linear_grade_pkm(x: np.ndarray, weights: Sequence[float], intercept: float, num_classes: int) -> np.ndarray:
    """The coal-blending P-KM shape of §6 / FedMech.jl: ``round(c + wᵀx)`` clipped to the grades 0..k-1."""
    grade = np.rint(intercept + np.asarray(x, dtype=np.float64) @ np.asarray(weights, dtype=np.float64))
    return np.clip(grade, 0, num_classes - 1).astype(np.int64)


def interval_range_km(
    x: np.ndarray, feature: int, cuts: Sequence[float], sets: Sequence[Sequence[int]], num_classes: int
) -> np.ndarray:
    """An R-KM from one feature's intervals: ``cuts`` c_1 < ... < c_r split the line into r+1 intervals
    (-∞, c_1], (c_1, c_2], ..., (c_r, ∞); row i admits ``sets[interval of x_i[feature]]``."""
    if len(sets) != len(cuts) + 1:
        raise ValueError(f"interval_range_km: {len(cuts)} cuts need {len(cuts) + 1} sets, got {len(sets)}")
    which = np.searchsorted(np.asarray(cuts, dtype=np.float64), np.asarray(x)[:, feature], side="left")
    table = np.zeros((len(sets), num_classes), dtype=bool)
    for i, s in enumerate(sets):
        table[i, list(s)] = True
    return table[which]

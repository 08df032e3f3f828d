"""Naive seasonal forecasts (no training): the reference every learned forecaster must beat.

For input ``x (n, L)`` and horizon ``H`` with seasonal period ``P`` (24 h), target step ``t`` (hour
``L + t``) has the same phase as the input hours ``L + t − d·P`` for ``d = ⌈(t+1)/P⌉, …`` while they
are ≥ 0:

* :func:`seasonal_mean` — mean over all those input days ("mean of the input days"; with L = 120,
  H = 24: the mean of the 5 input days at the same hour);
* :func:`last_period` — the most recent one, ``x[L + t − ⌈(t+1)/P⌉·P]`` ("last day").

On the shipped FHWA set these reach MSE ≈ 0.00024 and 0.00041 (per-day z-scores; spec §4), below
every number the papers report (shared/data/README.md).
"""

from __future__ import annotations

import numpy as np

from fednsl.tasks.timeseries.data import PERIOD


def _lags(input_len: int, horizon: int, period: int) -> list[np.ndarray]:
    """Per target step, the input indices of the same phase (most recent first)."""
    out = []
    for t in range(horizon):
        first = -(-(t + 1) // period)  # ceil((t+1)/P)
        idx = input_len + t - period * np.arange(first, first + input_len // period + 1)
        idx = idx[idx >= 0]
        if idx.size == 0:
            raise ValueError(f"input_len={input_len} holds no full period ({period}) before target step {t}")
        out.append(idx)
    return out


def seasonal_mean(x: np.ndarray, horizon: int, period: int = PERIOD) -> np.ndarray:
    """Mean of the input values of the same phase: ``(n, L) → (n, H)``."""
    x = np.asarray(x)
    return np.stack([x[:, idx].mean(axis=1) for idx in _lags(x.shape[1], horizon, period)], axis=1)


def last_period(x: np.ndarray, horizon: int, period: int = PERIOD) -> np.ndarray:
    """The most recent input value of the same phase: ``(n, L) → (n, H)``."""
    x = np.asarray(x)
    return np.stack([x[:, idx[0]] for idx in _lags(x.shape[1], horizon, period)], axis=1)


NAIVE = {"naive_mean": seasonal_mean, "naive_last": last_period}

__all__ = ["NAIVE", "last_period", "seasonal_mean"]

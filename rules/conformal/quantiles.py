"""Client- and server-side order statistics of the quantile-of-quantiles estimator (Eq 12, 17, 18).

Only what these functions return leaves a client: a local quantile (scalar or length-H
vector). Both reduce along axis 0 and keep any trailing axes, so a batch of independent
calibrations can be processed at once (scores of shape (n, *batch)).
"""

from __future__ import annotations

import operator

import numpy as np

__all__ = ["order_statistic", "local_quantile", "aggregate_quantiles"]


def order_statistic(values: np.ndarray, k: int) -> np.ndarray:
    """k-th smallest (1-based) along axis 0: (n, ...) -> (...). Rejects NaN (it would sort last)."""
    v = np.asarray(values, dtype=float)
    k = operator.index(k)
    if v.ndim == 0 or v.shape[0] == 0:
        raise ValueError(f"need a non-empty array with the sample on axis 0, got shape {v.shape}")
    if not 1 <= k <= v.shape[0]:
        raise ValueError(f"rank {k} out of range 1..{v.shape[0]}")
    if np.isnan(v).any():
        raise ValueError("scores contain NaN; drop or impute those calibration points first")
    return np.partition(v, k - 1, axis=0)[k - 1]


def local_quantile(scores: np.ndarray, ell: int, scale: np.ndarray | None = None) -> np.ndarray:
    """Client side: ell-th smallest of the client's n scores (inner Q_(ell) of Eq 12).

    scores: (n,) scalar scores -> shape (); (n, H) per-step scores -> (H,) column-wise; any
    (n, *rest) -> rest. scale: optional σ of shape (H,) (or (*rest, H)); the result then gains a
    trailing H axis: Eq 17, ℓ_τ = σ_τ · Q_(ell)(R) for normalised scores R of shape (n,).
    """
    q = order_statistic(scores, ell)
    if scale is None:
        return q
    sigma = np.asarray(scale, dtype=float)
    if sigma.ndim == 0:
        return q * sigma
    return q[..., None] * sigma


def aggregate_quantiles(local: np.ndarray, kappa: int) -> np.ndarray:
    """Server side: kappa-th smallest of the m clients' local quantiles (outer Q_(kappa), Eq 12/18).

    local: (m,) -> (); (m, H) -> (H,), i.e. Eq 18 per horizon step τ; (m, *rest) -> rest.
    """
    return order_statistic(local, kappa)

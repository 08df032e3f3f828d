"""Nonconformity scores and multi-horizon normalisation (LogiCP Eq 13, 15, 16; Zhao et al. 2024).

Residuals are e = Y - Ŷ with the horizon τ on the LAST axis: (n, H), or (n,) for one step.
Normalisation: σ_τ = max_j |e_jτ| on a normalisation set D_nor disjoint from D_cal (Eq 15),
then one score per sample R_j = max_τ |e_jτ| / σ_τ (Eq 16). A single threshold q̂ on R
covers all H steps jointly: {max_τ |e_τ|/σ_τ <= q̂} = {|e_τ| <= σ_τ q̂ for every τ}, so
Q̂_τ = σ_τ · q̂ (Eq 17–18) is a joint band whose width follows the error scale per step.
"""

from __future__ import annotations

import numpy as np

__all__ = ["absolute_residuals", "horizon_scale", "aggregate_scales", "normalized_scores", "SCALE_AGGREGATES"]

SCALE_AGGREGATES = ("max", "mean", "median")


def absolute_residuals(y: np.ndarray, y_hat: np.ndarray) -> np.ndarray:
    """|Y - Ŷ|, the absolute-residual nonconformity score (Eq 13); any matching shapes."""
    y, y_hat = np.asarray(y, dtype=float), np.asarray(y_hat, dtype=float)
    if y.shape != y_hat.shape:
        raise ValueError(f"targets {y.shape} and predictions {y_hat.shape} differ in shape")
    return np.abs(y - y_hat)


def horizon_scale(residuals: np.ndarray, eps: float = 1e-8) -> np.ndarray:
    """Eq 15, client side: σ_τ = max_j |e_jτ| over D_nor; (n_nor, H) -> (H,), floored at eps.

    (n_nor, *batch, H) -> (*batch, H). The floor guards a step with zero error (spec §6.10)."""
    e = np.abs(np.asarray(residuals, dtype=float))
    if e.ndim < 2 or e.shape[0] == 0:
        raise ValueError(f"normalisation residuals must be (n_nor >= 1, ..., H), got shape {e.shape}")
    if np.isnan(e).any():
        raise ValueError("normalisation residuals contain NaN")
    return np.maximum(e.max(axis=0), eps)


def aggregate_scales(sigmas: np.ndarray, how: str = "max") -> np.ndarray:
    """Server side: one cluster-wide σ from the clients' σ vectors (m, H) -> (H,).

    "max" equals Eq 15 applied to the cluster's pooled D_nor. Any function of D_nor alone keeps
    the calibration and test scores exchangeable, so the coverage guarantee is unaffected."""
    s = np.asarray(sigmas, dtype=float)
    if s.ndim < 1 or s.shape[0] == 0:
        raise ValueError(f"need at least one client's σ vector, got shape {s.shape}")
    if how == "max":
        return s.max(axis=0)
    if how == "mean":
        return s.mean(axis=0)
    if how == "median":
        return np.median(s, axis=0)
    raise ValueError(f"unknown scale aggregate {how!r}; choose one of {SCALE_AGGREGATES}")


def normalized_scores(residuals: np.ndarray, sigma: np.ndarray | float | None = None) -> np.ndarray:
    """Eq 16: R_j = max_τ |e_jτ| / σ_τ; (n, H) -> (n,), (n, *batch, H) -> (n, *batch).

    One-dimensional residuals (n,) are a single step: R_j = |e_j| / σ. sigma=None means σ ≡ 1
    (joint max-abs score without normalisation)."""
    e = np.abs(np.asarray(residuals, dtype=float))
    if e.ndim == 0:
        raise ValueError("residuals must have a sample axis")
    if sigma is not None:
        s = np.asarray(sigma, dtype=float)
        if (s <= 0).any():
            raise ValueError("σ must be positive (use the eps floor of horizon_scale)")
        e = e / s
    return e if e.ndim == 1 else e.max(axis=-1)

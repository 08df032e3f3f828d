"""Prediction intervals, coverage and width metrics for (multi-horizon) conformal regions.

Region (Eq 13 per step): C_τ(X) = [Ŷ_τ - Q̂_τ, Ŷ_τ + Q̂_τ], horizon on the last axis.
Coverage is reported two ways (spec §6.8):
* joint    — share of samples whose *whole* horizon lies inside; what the normalised max score
             guarantees (>= 1 - alpha);
* per-step — share inside at each step τ (vector), and its mean ``marginal`` = share of
             (sample, step) pairs inside, which is what the LogiCP tables/code count (>= joint).
Width: mean over steps of 2·Q̂_τ, in the model's (normalised) units and, given the data
scaler's unit per step (e.g. max - min for min-max scaling), in original units.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["interval", "Coverage", "coverage", "Width", "interval_width"]


def interval(
    pred: np.ndarray, qhat: np.ndarray | float, scale: np.ndarray | float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) = Ŷ ∓ half, half = qhat · scale (scale = σ_τ when qhat is a normalised q̂).

    pred (n, H) or (n,); qhat scalar or (H,); scale None (=1), scalar or (H,)."""
    p = np.asarray(pred, dtype=float)
    half = np.asarray(qhat, dtype=float) * (1.0 if scale is None else np.asarray(scale, dtype=float))
    if (half < 0).any():
        raise ValueError("interval half-width must be non-negative")
    return p - half, p + half


@dataclass(frozen=True)
class Coverage:
    """joint: all steps inside; per_step: (H,) share inside per step; marginal: mean of per_step."""

    joint: float
    per_step: np.ndarray
    marginal: float
    n: int

    def to_dict(self) -> dict:
        return {"joint": self.joint, "per_step": self.per_step.tolist(), "marginal": self.marginal, "n": self.n}


def coverage(y: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> Coverage:
    """Empirical joint and per-step coverage of [lower, upper] for targets y (n, H) or (n,)."""
    y = np.asarray(y, dtype=float)
    lo, hi = np.broadcast_arrays(np.asarray(lower, dtype=float), np.asarray(upper, dtype=float))
    if y.ndim == 1:
        y, lo, hi = y[:, None], lo.reshape(-1, 1), hi.reshape(-1, 1)
    if y.shape != lo.shape:
        raise ValueError(f"targets {y.shape} and interval bounds {lo.shape} differ in shape")
    if y.shape[0] == 0:
        raise ValueError("no test samples")
    inside = (lo <= y) & (y <= hi)
    per_step = inside.mean(axis=0)
    return Coverage(float(inside.all(axis=1).mean()), per_step, float(per_step.mean()), int(y.shape[0]))


@dataclass(frozen=True)
class Width:
    """normalized: mean_τ 2·Q̂_τ in model units; original: same after the data unit (or None)."""

    normalized: float
    original: float | None
    per_step: np.ndarray

    def to_dict(self) -> dict:
        return {"normalized": self.normalized, "original": self.original, "per_step": self.per_step.tolist()}


def interval_width(qhat: np.ndarray | float, unit_scale: np.ndarray | float | None = None) -> Width:
    """Width = mean over steps of 2·Q̂_τ; original units multiply step τ by unit_scale_τ.

    unit_scale: the data scaler's unit (max - min for min-max, std for z-score), scalar or (H,)."""
    per_step = 2.0 * np.atleast_1d(np.asarray(qhat, dtype=float))
    original = None
    if unit_scale is not None:
        original = float(np.mean(per_step * np.asarray(unit_scale, dtype=float)))
    return Width(float(per_step.mean()), original, per_step)

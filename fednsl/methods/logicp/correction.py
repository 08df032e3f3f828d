"""Runtime validation and correction (LogiCP §4.6 and §6.5, Eq. 23–25).

Validation Ψ(ŷ; φ, t) ∈ {⊤, ⊥} (Eq. 23–25): ⊤ iff the forecast satisfies the client's mined band
property at step t, i.e. ``lower_t ≤ ŷ_t ≤ upper_t``.

Correction: the conformal region at runtime is the interval ``[ŷ_t − Q̂_t, ŷ_t + Q̂_t]`` centred on the
forecast (§6.5), so the forecast never violates it.  When ŷ_t violates the property band:

* the band and the CP interval overlap → move ŷ_t to the nearest band bound (inside both regions);
* they do not overlap → **CP priority** (the paper's choice): move only to the CP edge facing the band.

Both cases are ``ȳ_t = clamp(clamp(ŷ_t, lower_t, upper_t), ŷ_t − Q̂_t, ŷ_t + Q̂_t)``: the point of the
CP interval closest to the band (ties: closest to ŷ_t).  The reference code writes it as
``ŷ > up: ȳ = max(ŷ − Q̂, up)``; ``ŷ < lo: ȳ = min(ŷ + Q̂, lo)``.  Paper example: ŷ = 5, Q̂ = 2, band
[8, 12] → ȳ = 7.  ``priority="stl"`` (ablation "LogiCP-STL", Table 6) always moves to the band
(FedSTL's teacher projection).  Q̂ = +∞ (no finite region) makes both the same projection.
"""

from __future__ import annotations

import torch

PRIORITIES = ("cp", "stl")


def validate(pred: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    """Ψ per step (Eq. 24/25): bool, shape of ``pred`` ``(B, T)``; bounds ``(T,)`` or ``(B, T)``."""
    return (pred >= lower) & (pred <= upper)


def correct(
    pred: torch.Tensor, qhat: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor, priority: str = "cp"
) -> torch.Tensor:
    """Corrected forecast ȳ (module docstring); ``pred (B, T)``, ``qhat (T,)`` (or ``(B, T)``)."""
    if priority not in PRIORITIES:
        raise ValueError(f"correction priority must be one of {PRIORITIES}, got {priority!r}")
    lo, up = lower.to(pred.dtype), upper.to(pred.dtype)
    projected = torch.maximum(torch.minimum(pred, up), lo)
    if priority == "stl":
        return projected
    q = torch.as_tensor(qhat, dtype=pred.dtype)
    if (q < 0).any():
        raise ValueError("conformal half-widths Q̂ must be non-negative")
    return torch.maximum(torch.minimum(projected, pred + q), pred - q)


def conflicts(pred: torch.Tensor, qhat: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    """Steps where the forecast violates the band and the band does not meet the CP interval (the
    case where the two priorities differ), bool ``(B, T)``."""
    q = torch.as_tensor(qhat, dtype=pred.dtype)
    return (pred + q < lower) | (pred - q > upper)


__all__ = ["PRIORITIES", "conflicts", "correct", "validate"]

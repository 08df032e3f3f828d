"""LogiCP training objective (He, An, Ma, JAIR 2026, §4.4, Eq. 19–22).

    L = ω1·L_MSE(Y, Ŷ) + ω2·L_STL(φ_i, Ŷ) + (1 − ω1 − ω2)·L_CP(ρ_k, Ŷ)          (Eq. 19)

* L_MSE (Eq. 20): mean over the batch and the T steps of (Y_τ − Ŷ_τ)².
* L_STL (Eq. 21): (1/T)·Σ_τ g(φ_i, Ŷ, τ), g = LogiCP's violation degree (Eq. 9).  For the band
  (operational-range) properties the clients mine, the constraint active at step τ is
  ``lower_τ ≤ ŷ_τ ≤ upper_τ`` and g at τ is ``max(0, ŷ_τ − upper_τ, lower_τ − ŷ_τ)`` — the distance of
  ŷ_τ to the band, i.e. ``|ŷ − clamp(ŷ, lower, upper)|`` (kind ``"l1"``, the paper's reading and the
  default; checked against :func:`rules.stl.violation` in the tests).  ``"squared"`` is the reference
  code's ``MSE(ŷ, clamp(ŷ))``; ``"violation"`` is g of the whole mined formula at start 0 (any template).
* L_CP (Eq. 22): (1/T)·Σ_τ max(0, |Ŷ_τ − Y_τ| − Q̂_τ) (kind ``"hinge"``, default); the reference code
  squares the hinge (``"squared"``).  Q̂ = +∞ (no finite conformal region yet) gives 0.

Shapes: ``pred, y (B, T)``; ``lower, upper`` ``(T,)`` or per sample ``(B, T)`` (a cluster's batch mixes
its members' properties); ``qhat`` ``(T,)`` or ``(B, T)``.  Every term is a mean over the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fednsl.tasks.timeseries.properties import ClientProperty

STL_KINDS = ("l1", "squared", "violation")
CP_KINDS = ("hinge", "squared")


def mse_loss(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Eq. 20: mean of (Y_τ − Ŷ_τ)² over batch and steps."""
    return (pred - y).pow(2).mean()


def band_gap(pred: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    """Per-step violation g_τ = ŷ_τ − clamp(ŷ_τ, lower_τ, upper_τ) (signed), shape of ``pred``."""
    return pred - torch.maximum(torch.minimum(pred, upper), lower)


def stl_loss(
    pred: torch.Tensor,
    lower: torch.Tensor | None = None,
    upper: torch.Tensor | None = None,
    kind: str = "l1",
    prop: ClientProperty | None = None,
) -> torch.Tensor:
    """Eq. 21 for a batch ``(B, T)``: ``"l1"`` mean_τ g_τ, ``"squared"`` mean_τ g_τ², ``"violation"``
    mean over the batch of g(φ, ŷ) at start 0 (needs ``prop``)."""
    if kind == "violation":
        if prop is None:
            raise ValueError("stl_loss kind 'violation' needs the client's property (prop=)")
        return prop.template.violation(pred[None], prop.params)[0].mean()
    if kind not in STL_KINDS:
        raise ValueError(f"stl_loss kind must be one of {STL_KINDS}, got {kind!r}")
    if lower is None or upper is None:
        if prop is None or prop.lower is None or prop.upper is None:
            raise ValueError(f"stl_loss kind {kind!r} needs a band (lower/upper) or a band property")
        lower, upper = prop.lower, prop.upper
    gap = band_gap(pred, lower.to(pred.dtype), upper.to(pred.dtype))
    return gap.abs().mean() if kind == "l1" else gap.pow(2).mean()


def cp_loss(pred: torch.Tensor, y: torch.Tensor, qhat: torch.Tensor, kind: str = "hinge") -> torch.Tensor:
    """Eq. 22: mean over batch and steps of max(0, |Ŷ_τ − Y_τ| − Q̂_τ) (``"squared"``: hinge²)."""
    if kind not in CP_KINDS:
        raise ValueError(f"cp_loss kind must be one of {CP_KINDS}, got {kind!r}")
    q = torch.as_tensor(qhat, dtype=pred.dtype)
    excess = torch.clamp((pred - y).abs() - q, min=0.0)
    return excess.mean() if kind == "hinge" else excess.pow(2).mean()


@dataclass(frozen=True)
class LossWeights:
    """ω1 (MSE), ω2 (STL); the CP term gets 1 − ω1 − ω2 (Eq. 19)."""

    mse: float = 1.0 / 3.0
    stl: float = 1.0 / 3.0

    def __post_init__(self) -> None:
        if self.mse < 0 or self.stl < 0 or self.mse + self.stl > 1.0 + 1e-12:
            raise ValueError(
                f"LogiCP loss weights need ω1, ω2 >= 0 and ω1 + ω2 <= 1, got ω1={self.mse}, "
                f"ω2={self.stl} (method_kwargs.omega_mse / omega_stl)"
            )

    @property
    def cp(self) -> float:
        return max(0.0, 1.0 - self.mse - self.stl)


def logicp_loss(
    pred: torch.Tensor,
    y: torch.Tensor,
    *,
    lower: torch.Tensor | None,
    upper: torch.Tensor | None,
    qhat: torch.Tensor | None,
    weights: LossWeights = LossWeights(),
    stl_kind: str = "l1",
    cp_kind: str = "hinge",
    prop: ClientProperty | None = None,
) -> torch.Tensor:
    """Eq. 19.  ``qhat=None`` (no conformal region yet) drops the CP term; terms with weight 0 are
    not computed."""
    total = weights.mse * mse_loss(pred, y) if weights.mse > 0 else pred.sum() * 0.0
    if weights.stl > 0:
        total = total + weights.stl * stl_loss(pred, lower, upper, stl_kind, prop)
    if weights.cp > 0 and qhat is not None:
        total = total + weights.cp * cp_loss(pred, y, qhat, cp_kind)
    return total


__all__ = ["CP_KINDS", "LossWeights", "STL_KINDS", "band_gap", "cp_loss", "logicp_loss", "mse_loss", "stl_loss"]

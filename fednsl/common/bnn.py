"""Mean-field Gaussian MLP for pFedBayes: weights w ~ N(μ, σ²), σ = softplus(ρ); layout x @ W + b.

Parameter names: ``mu.<layer>``, ``rho.<layer>`` for layers W1 (D, H), b1 (H,), W2 (H, K), b2 (K,).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

LAYERS = ("W1", "b1", "W2", "b2")


def layer_shapes(features: int, hidden: int, classes: int) -> list[tuple[int, ...]]:
    return [(features, hidden), (hidden,), (hidden, classes), (classes,)]


def init_distribution(
    features: int, hidden: int, classes: int, weight_scale: float, rho_offset: float, seed: int
) -> dict[str, np.ndarray]:
    """μ ~ N(0, weight_scale²), ρ = rho_offset (pFedBayes ``pBNN.__init__``), as named float32 arrays."""
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, np.ndarray] = {}
    for name, shape in zip(LAYERS, layer_shapes(features, hidden, classes)):
        out[f"mu.{name}"] = (torch.randn(shape, generator=gen) * weight_scale).numpy()
    for name, shape in zip(LAYERS, layer_shapes(features, hidden, classes)):
        out[f"rho.{name}"] = np.full(shape, rho_offset, dtype=np.float32)
    return out


def sigma(rho: torch.Tensor) -> torch.Tensor:
    return F.softplus(rho)


def forward(x: torch.Tensor, params: Sequence[torch.Tensor]) -> torch.Tensor:
    """ReLU MLP logits for sampled weights [W1, b1, W2, b2]."""
    w1, b1, w2, b2 = params
    return F.relu(x @ w1 + b1) @ w2 + b2


def sample(
    mus: Sequence[torch.Tensor], rhos: Sequence[torch.Tensor], eps_std: float, gen: torch.Generator
) -> list[torch.Tensor]:
    """w = μ + softplus(ρ)·ε, ε ~ N(0, eps_std²) (reparameterised, differentiable in μ and ρ)."""
    return [m + sigma(r) * (torch.randn(m.shape, generator=gen) * eps_std) for m, r in zip(mus, rhos)]


def gaussian_kl(
    mu_q: Sequence[torch.Tensor],
    sig_q: Sequence[torch.Tensor],
    mu_p: Sequence[torch.Tensor],
    sig_p: Sequence[torch.Tensor],
) -> torch.Tensor:
    """Σ over all weights of KL(N(μ_q, σ_q²) ‖ N(μ_p, σ_p²))
    = log(σ_p/σ_q) + (σ_q² + (μ_q − μ_p)²) / (2σ_p²) − ½."""
    total = torch.zeros(())
    for mq, sq, mp, sp in zip(mu_q, sig_q, mu_p, sig_p):
        total = total + (torch.log(sp / sq) + (sq**2 + (mq - mp) ** 2) / (2 * sp**2) - 0.5).sum()
    return total

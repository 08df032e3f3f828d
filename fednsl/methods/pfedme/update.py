"""pFedMe's two local update rules (Dinh et al. 2020, Alg. 1 lines 6–7), on lists of tensors.

Inner step (one of K gradient steps on the Moreau-envelope subproblem h_i(θ; w) = f̃_i(θ; D) + λ/2 ‖θ − w‖²):

    θ ← θ − ν · (∇f̃_i(θ; D) + λ (θ − w_{i,r}) + μ θ)          (ν = personal learning rate; μ = 0 in the paper)

Outer step (after the K inner steps, θ̂ ≈ θ̂_i(w_{i,r})):

    w_{i,r+1} = w_{i,r} − η λ (w_{i,r} − θ̂)
"""

from __future__ import annotations

from typing import Sequence

import torch


def moreau_inner_step(
    theta: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor],
    anchor: Sequence[torch.Tensor],
    lr: float,
    lamda: float,
    mu: float = 0.0,
) -> list[torch.Tensor]:
    return [t - lr * (g + lamda * (t - a) + mu * t) for t, g, a in zip(theta, grads, anchor)]


def moreau_outer_step(
    w: Sequence[torch.Tensor], theta: Sequence[torch.Tensor], eta: float, lamda: float
) -> list[torch.Tensor]:
    return [wi - eta * lamda * (wi - ti) for wi, ti in zip(w, theta)]

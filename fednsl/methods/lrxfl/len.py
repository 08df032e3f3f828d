"""The entropy-based Logic Explained Network LR-XFL trains on each client (Barbiero et al. 2022's
``EntropyLinear`` as in maple1606/LR-XFL ``entropy_lens/nn/logic.py`` and ``models/explainer.py``).

EntropyLinear (per class k, concepts c ∈ [0, 1]^C):

    γ_k = ‖W_k‖₁ over hidden units (C,),  α_k = softmax(γ_k / T),  α̃_k = α_k / max α_k,
    h_k = (c ⊙ α̃_k) W_kᵀ + b_k        → (batch, K, hidden);   concept mask: α̃_k > 0.5.

Explainer: EntropyLinear → LeakyReLU → Linear(hidden, 1) → one score per class; the model output is the
sigmoid of the scores, and the training loss is ``CrossEntropyLoss`` applied to those sigmoid outputs plus
``l1`` × the entropy of α (``entropy_logic_loss``), exactly as the reference.
"""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import nn

from kg.seeding import isolated_global_rng


class EntropyLinear(nn.Module):
    def __init__(
        self,
        in_features: int,
        out_features: int,
        n_classes: int,
        temperature: float,
        gen: torch.Generator | None = None,
    ):
        super().__init__()
        self.temperature = temperature
        self.weight = nn.Parameter(torch.empty(n_classes, out_features, in_features))
        self.bias = nn.Parameter(torch.empty(n_classes, 1, out_features))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5), generator=gen)
        bound = 1 / math.sqrt(out_features * in_features)  # fan_in of the 3-D weight as torch computes it
        nn.init.uniform_(self.bias, -bound, bound, generator=gen)
        self.alpha: torch.Tensor | None = None
        self.alpha_norm: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gamma = self.weight.norm(dim=1, p=1)  # (K, C)
        self.alpha = torch.softmax(gamma / self.temperature, dim=1)
        self.alpha_norm = self.alpha / self.alpha.max(dim=1)[0].unsqueeze(1)
        h = x.unsqueeze(0) * self.alpha_norm.unsqueeze(1)  # (K, B, C)
        h = h.matmul(self.weight.permute(0, 2, 1)) + self.bias  # (K, B, H)
        return h.permute(1, 0, 2)  # (B, K, H)

    def concept_mask(self) -> torch.Tensor:
        """bool (K, C): concepts the class relies on (α̃ > 0.5)."""
        with torch.no_grad():
            gamma = self.weight.norm(dim=1, p=1)
            alpha = torch.softmax(gamma / self.temperature, dim=1)
            return alpha / alpha.max(dim=1)[0].unsqueeze(1) > 0.5

    def alphas(self) -> torch.Tensor:
        with torch.no_grad():
            return torch.softmax(self.weight.norm(dim=1, p=1) / self.temperature, dim=1)


@isolated_global_rng
def make_len(n_concepts: int, n_classes: int, hidden: int, temperature: float, seed: int) -> nn.Sequential:
    """EntropyLinear → LeakyReLU → Linear(hidden, 1); call ``len_scores`` for (batch, K) scores."""
    gen = torch.Generator().manual_seed(seed)
    head = nn.Linear(hidden, 1)
    bound = 1 / math.sqrt(hidden)
    with torch.no_grad():
        nn.init.kaiming_uniform_(head.weight, a=math.sqrt(5), generator=gen)
        head.bias.uniform_(-bound, bound, generator=gen)
    return nn.Sequential(EntropyLinear(n_concepts, hidden, n_classes, temperature, gen), nn.LeakyReLU(), head)


def len_outputs(model: nn.Sequential, concepts: torch.Tensor) -> torch.Tensor:
    """σ(scores): the Explainer's forward, (batch, K) in (0, 1)."""
    return torch.sigmoid(model(concepts).squeeze(-1))


def entropy_layer(model: nn.Sequential) -> EntropyLinear:
    """The EntropyLinear layer of an Explainer (its first layer, :func:`make_len`)."""
    return cast(EntropyLinear, model[0])


def entropy_logic_loss(model: nn.Sequential) -> torch.Tensor:
    """−Σ α log α of the (first) EntropyLinear layer; call after a forward pass."""
    alpha = entropy_layer(model).alpha
    assert alpha is not None, "entropy_logic_loss needs a forward pass first"
    return -(alpha * torch.log(alpha)).sum()


def len_loss(model: nn.Sequential, concepts: torch.Tensor, y: torch.Tensor, l1: float) -> torch.Tensor:
    out = len_outputs(model, concepts)
    return nn.functional.cross_entropy(out, y) + l1 * entropy_logic_loss(model)

"""The local update rules of the forecasting baselines, as small functions (unit-tested by hand).

* :func:`proximal_term` — FedProx (Li et al. 2020, Eq. 2) and Ditto (Li et al. 2021, Eq. 2):
  ``μ/2·Σ_p ‖p − p_ref‖²``; its gradient is ``μ·(p − p_ref)``, so one plain SGD step is
  ``p ← p − η(∇f(p) + μ(p − p_ref))``.
* :func:`fedrep_update` — FedRep (Collins et al. 2021, Alg. 1): ``head_epochs`` epochs on the head with
  the body frozen, then ``body_epochs`` on the body with the head frozen.
* :func:`ifca_select` — IFCA (Ghosh et al. 2020, Alg. 1 line 5): ``argmin_j F_i(θ_j)`` over the
  cluster models (lowest loss on the client's data; ties → lowest index).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch import nn

from fednsl.tasks.timeseries.models import Forecaster
from fednsl.tasks.timeseries.training import Objective, mse_objective, predict, sgd_epochs


def proximal_term(
    params: Sequence[nn.Parameter], reference: Sequence[torch.Tensor], mu: float
) -> Callable[[], torch.Tensor]:
    """A regulariser closure ``μ/2·Σ‖p − ref‖²`` (``reference`` detached copies)."""
    refs = [r.detach().clone() for r in reference]
    if len(refs) != len(params):
        raise ValueError(f"{len(params)} parameters but {len(refs)} reference tensors")

    def reg() -> torch.Tensor:
        return 0.5 * mu * sum(((p - r).pow(2).sum() for p, r in zip(params, refs)), torch.zeros(()))

    return reg


def fedrep_update(
    model: Forecaster,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    head_epochs: int,
    body_epochs: int,
    gen: torch.Generator,
    objective: Objective = mse_objective,
    **sgd: Any,
) -> tuple[float, float]:
    """FedRep's alternating local update; returns (head-phase loss, body-phase loss)."""
    head_loss = sgd_epochs(
        model, x, y, epochs=head_epochs, gen=gen, params=model.head_parameters(), objective=objective, **sgd
    )
    body_loss = sgd_epochs(
        model, x, y, epochs=body_epochs, gen=gen, params=model.shared_parameters(), objective=objective, **sgd
    )
    return head_loss, body_loss


@torch.no_grad()
def cluster_losses(models: Sequence[nn.Module], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """MSE of each model on ``(x, y)`` → ``(K,)``."""
    return torch.stack([(predict(m, x) - y).pow(2).mean() for m in models])


def ifca_select(models: Sequence[nn.Module], x: torch.Tensor, y: torch.Tensor) -> int:
    """IFCA cluster identity: the index of the model with the lowest MSE on ``(x, y)``."""
    return int(torch.argmin(cluster_losses(models, x, y)))


__all__ = ["cluster_losses", "fedrep_update", "ifca_select", "proximal_term"]

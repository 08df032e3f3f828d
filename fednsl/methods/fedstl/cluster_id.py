"""FedSTL Alg. 1 (CLUSTER_ID) on the server: score every cluster model against every participating
client's property and assign clients by property alignment.

Inputs are what the cluster devices hold: the clients' desensitised samples ``D_i^s`` (windows) and
their mined properties φ_i (parameter vectors).  :func:`alignment_losses` builds the ``(K, N)`` matrix
``L[j, i] = L_p(φ_i, S_j(D_i^s))`` (Alg. 1 lines 5–9); :func:`assign` applies line 10 with
``rules.stl.clustering``: ``"argmin"`` (each client joins its lowest-loss cluster; the paper) or
``"balanced"`` (greedy global minimum with capacity; the code).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from fednsl.tasks.timeseries.properties import ClientProperty, stack_bands
from fednsl.tasks.timeseries.training import predict
from rules import stl


def cluster_predictions(models: Sequence[torch.nn.Module], x: torch.Tensor) -> torch.Tensor:
    """Each cluster model's forecasts for every client's sample: ``x (N, S, L)`` → ``(K, N, S, H)``."""
    n, s, length = x.shape
    flat = x.reshape(n * s, length)
    return torch.stack([predict(m, flat).reshape(n, s, -1) for m in models])


def alignment_losses(
    preds: torch.Tensor, props: Sequence[ClientProperty], measure: str = "lp", lp: str = "l1"
) -> torch.Tensor:
    """``(K, N)`` loss of cluster ``j``'s forecasts ``preds (K, N, S, H)`` under client ``i``'s property.

    ``measure="lp"``: the L_p of FedSTL Eq. 2 averaged over the sample — for band properties
    ``mean |ŷ − clamp(ŷ, lower_i, upper_i)|`` (``lp="l1"``) or its square (``"squared"``), else the
    violation degree; other measures go to :func:`rules.stl.alignment_matrix` (``"violation"``: LogiCP
    g, ``"robustness"``: −mean ρ, ``"unsatisfied"``: share of violating forecasts)."""
    if preds.dim() != 4 or preds.shape[1] != len(props):
        raise ValueError(f"preds must be (K, N={len(props)}, S, H), got {tuple(preds.shape)}")
    template = props[0].template
    if measure == "lp" and lp in ("l1", "squared") and props[0].lower is not None:
        lower, upper = stack_bands(props)  # (N, H)
        gap = preds - torch.maximum(torch.minimum(preds, upper[None, :, None]), lower[None, :, None])
        per = gap.abs() if lp == "l1" else gap.pow(2)
        return per.mean(dim=(-1, -2))
    params = {p: torch.cat([q.params[p] for q in props]) for p in template.params}
    stl_measure = "violation" if measure == "lp" else measure
    return stl.alignment_matrix(template, params, preds, measure=stl_measure)


def assign(loss: torch.Tensor, rule: str = "argmin", capacity: int | None = None) -> np.ndarray:
    """Alg. 1 line 10: cluster index per client ``(N,)`` from ``loss (K, N)``."""
    if rule == "argmin":
        return np.asarray(stl.assign_argmin(loss.detach().cpu().numpy()))
    if rule == "balanced":
        return np.asarray(stl.assign_balanced(loss.detach().cpu().numpy(), capacity))
    raise ValueError(f"rule must be 'argmin' or 'balanced', got {rule!r}")


def cluster_id(
    models: Sequence[torch.nn.Module],
    x: torch.Tensor,
    props: Sequence[ClientProperty],
    *,
    rule: str = "argmin",
    capacity: int | None = None,
    measure: str = "lp",
    lp: str = "l1",
) -> tuple[np.ndarray, torch.Tensor]:
    """CLUSTER_ID for samples ``x (N, S, L)``: returns (assignment ``(N,)``, loss matrix ``(K, N)``)."""
    loss = alignment_losses(cluster_predictions(models, x), props, measure, lp)
    return assign(loss, rule, capacity), loss


__all__ = ["alignment_losses", "assign", "cluster_id", "cluster_predictions"]

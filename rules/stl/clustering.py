"""Clustering clients by property alignment (FedSTL Alg. 1 CLUSTER_ID; LogiCP §4.2).

Pure functions.  The server-side inputs are the clients' mined properties (template + per-client
parameters, or one formula per client) and each cluster model's predictions on each client's
small sample ``D_i^s``; the output is a cluster index per client.

* :func:`alignment_matrix` — loss ``L[k, i]`` of cluster ``k``'s predictions against client
  ``i``'s property.  Default measure: LogiCP's violation degree g (Eq. 9) averaged over the
  client's samples (R_STL, Eq. 10; lower = better aligned).
* :func:`assign_argmin` — the papers' rule: each client joins the cluster with the lowest loss
  (P2 §4.2; P1 Alg. 1 line 10).  Clusters may end up empty (callers keep their previous model).
* :func:`assign_balanced` — FedSTL's code: repeatedly take the global minimum of the loss matrix
  over unassigned clients and non-full clusters (capacity ``ceil(N / K)`` unless given).

Ties are broken by the lowest cluster index (argmin) and by row-major order of ``L`` (balanced),
which is what ``numpy.argmin`` on the matrix gives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .robustness import holds, robustness, violation
from .syntax import Formula
from .templates import Template

MEASURES = ("violation", "robustness", "unsatisfied")
RULES = ("argmin", "balanced")


def _per_sample(f: Formula, signals: Any, params: Any, measure: str) -> torch.Tensor:
    if measure == "violation":
        return violation(f, signals, params)
    if measure == "robustness":
        return -robustness(f, signals, params)
    if measure == "unsatisfied":
        return (~holds(f, signals, params)).to(torch.get_default_dtype())
    raise ValueError(f"measure must be one of {MEASURES}, got {measure!r}")


def alignment_matrix(
    template: Template,
    params: Mapping[str, Any],
    predictions: torch.Tensor | Mapping[str, torch.Tensor],
    *,
    measure: str = "violation",
) -> torch.Tensor:
    """Loss of each cluster model on each client's property, shape ``(K, N)``.

    ``predictions``: ``(K, N, S, T)`` — cluster ``k``'s predictions for client ``i``'s ``S``
    samples (a mapping signal → tensor for multi-signal templates), ``T ≥ template.length``;
    ``params``: the clients' mined parameters ``{name: (N,)}``.  The template is evaluated at
    start time 0 of each predicted trace and averaged over samples:

    * ``"violation"``: mean g (LogiCP Eq. 9–10), ≥ 0, 0 when all samples satisfy the property;
    * ``"robustness"``: −mean ρ (FedSTL Def. 5);
    * ``"unsatisfied"``: share of samples violating the property (1 − FedSTL's ρ%).
    """
    preds = predictions if isinstance(predictions, Mapping) else {template.signals[0]: predictions}
    if len(template.signals) > 1 and not isinstance(predictions, Mapping):
        raise ValueError(f"template uses signals {list(template.signals)}: pass a mapping")
    sig = {}
    for n in template.signals:
        t = torch.as_tensor(preds[n])
        if t.dim() != 4:
            raise ValueError(f"predictions for {n!r} must be shaped (K, N, S, T), got {tuple(t.shape)}")
        if t.shape[-1] < template.length:
            raise ValueError(f"predictions have {t.shape[-1]} steps, template needs {template.length}")
        sig[n] = t[..., : template.length]
    n_clients = next(iter(sig.values())).shape[1]
    par: dict[str, float | torch.Tensor] = {}
    for p in template.params:
        v = torch.as_tensor(params[p])
        if v.dim() == 0:
            par[p] = float(v)
        elif v.shape != (n_clients,):
            raise ValueError(f"parameter {p!r} must be shaped ({n_clients},), got {tuple(v.shape)}")
        else:
            par[p] = v[None, :, None]  # (1, N, 1) against batch (K, N, S)
    if measure == "violation":
        per_sample = template.at_start("violation", sig, par)
    elif measure == "robustness":
        per_sample = -template.at_start("robustness", sig, par)
    elif measure == "unsatisfied":
        per_sample = (~template.at_start("holds", sig, par)).to(torch.get_default_dtype())
    else:
        raise ValueError(f"measure must be one of {MEASURES}, got {measure!r}")
    return per_sample.mean(-1)


def alignment_matrix_from_formulas(
    formulas: Sequence[Formula],
    predictions: torch.Tensor | Mapping[str, torch.Tensor],
    *,
    params: Sequence[Mapping[str, Any]] | None = None,
    measure: str = "violation",
) -> torch.Tensor:
    """Like :func:`alignment_matrix` for arbitrary per-client formulas (a loop over clients):
    client ``i``'s formula on ``predictions[:, i]`` ``(K, S, T)``, averaged over samples and over
    the valid start times (Eq. 10; one start time when ``T = horizon + 1``).  Returns ``(K, N)``."""
    cols = []
    for i, f in enumerate(formulas):
        sig: dict[str, torch.Tensor] | torch.Tensor
        if isinstance(predictions, Mapping):
            sig = {n: torch.as_tensor(predictions[n])[:, i] for n in f.signals()}
        else:
            sig = torch.as_tensor(predictions)[:, i]
        p = params[i] if params is not None else None
        cols.append(_per_sample(f, sig, p, measure).mean(dim=(-1, -2)))
    return torch.stack(cols, dim=1)


def _as_numpy(loss: Any) -> tuple[np.ndarray, bool]:
    is_torch = isinstance(loss, torch.Tensor)
    arr = loss.detach().cpu().numpy() if is_torch else np.asarray(loss)
    if arr.ndim != 2 or arr.shape[0] < 1:
        raise ValueError(f"loss matrix must be shaped (K, N) with K >= 1, got {arr.shape}")
    if np.isnan(arr).any():
        raise ValueError("loss matrix contains NaN")
    return arr, is_torch


def _wrap(out: np.ndarray, is_torch: bool) -> Any:
    return torch.from_numpy(out) if is_torch else out


def assign_argmin(loss: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
    """Per-client argmin over clusters of ``loss (K, N)`` → cluster index ``(N,)`` (int64);
    torch in → torch out, numpy in → numpy out."""
    arr, is_torch = _as_numpy(loss)
    return _wrap(arr.argmin(axis=0).astype(np.int64), is_torch)


def assign_balanced(loss: torch.Tensor | np.ndarray, capacity: int | None = None) -> torch.Tensor | np.ndarray:
    """Balanced greedy assignment (FedSTL code): visit the entries of ``loss (K, N)`` in
    increasing order (one stable sort, row-major ties) and put client ``i`` in cluster ``k`` when
    ``i`` is unassigned and ``k`` has fewer than ``capacity`` members (default ``ceil(N / K)``).
    Equivalent to repeatedly taking the global argmin of the masked matrix.  Returns ``(N,)``."""
    arr, is_torch = _as_numpy(loss)
    n_k, n = arr.shape
    cap = math.ceil(n / n_k) if capacity is None else int(capacity)
    if cap * n_k < n:
        raise ValueError(f"capacity {cap} x {n_k} clusters cannot hold {n} clients")
    order = np.argsort(arr, axis=None, kind="stable")
    out = np.full(n, -1, dtype=np.int64)
    fill = np.zeros(n_k, dtype=np.int64)
    left = n
    for flat in order.tolist():
        k, i = divmod(flat, n)
        if out[i] < 0 and fill[k] < cap:
            out[i] = k
            fill[k] += 1
            left -= 1
            if left == 0:
                break
    return _wrap(out, is_torch)


def cluster_members(assignment: torch.Tensor | np.ndarray, num_clusters: int) -> list[np.ndarray]:
    """Client indices of each cluster (possibly empty arrays)."""
    a = np.asarray(assignment.cpu() if isinstance(assignment, torch.Tensor) else assignment)
    return [np.flatnonzero(a == k) for k in range(num_clusters)]


@dataclass(frozen=True)
class ClusterResult:
    """Output of :func:`cluster_id`."""

    assignment: torch.Tensor  # (N,) cluster index per client
    loss: torch.Tensor  # (K, N) alignment matrix
    params: dict[str, torch.Tensor]  # mined per-client parameters {name: (N,)}


def cluster_id(
    template: Template,
    client_signals: torch.Tensor | Mapping[str, torch.Tensor],
    predictions: torch.Tensor | Mapping[str, torch.Tensor],
    *,
    rule: str = "argmin",
    capacity: int | None = None,
    measure: str = "violation",
    params: Mapping[str, torch.Tensor] | None = None,
    **mine_kwargs: Any,
) -> ClusterResult:
    """FedSTL Alg. 1: mine each client's property on its sample ``client_signals``
    ``(N, S, T)`` (lines 2–4; skipped when ``params`` are given), score every cluster model's
    predictions ``(K, N, S, T)`` against it (lines 5–9) and assign clients (line 10) by
    ``rule`` = ``"argmin"`` (paper) or ``"balanced"`` (code)."""
    from .mining import mine

    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if params is None:
        params = mine(template, client_signals, **mine_kwargs)
    loss = alignment_matrix(template, params, predictions, measure=measure)
    assign = assign_argmin(loss) if rule == "argmin" else assign_balanced(loss, capacity)
    return ClusterResult(torch.as_tensor(assign), loss, dict(params))


__all__ = [
    "ClusterResult",
    "MEASURES",
    "RULES",
    "alignment_matrix",
    "alignment_matrix_from_formulas",
    "assign_argmin",
    "assign_balanced",
    "cluster_id",
    "cluster_members",
]

"""SAFRAN-style non-redundant noisy-OR over a head's rules (Ott, Meilicke, Samwald, AKBC 2021, §3).

Rules that fire on the same evidence are counted many times by a sum or a noisy-OR. SAFRAN clusters a head's
rules by the overlap of what they predict and aggregates with the max inside a cluster and noisy-OR across
clusters. For a query with candidate e, rule confidences c_j and clusters K_1..K_m:

    NR(e) = 1 − Π_k (1 − max_{j ∈ K_k, f_j(e) > 0} c_j)

(:func:`nonredundant_evidence` returns −log(1 − NR(e)) = Σ_k −log(1 − max_{j ∈ K_k} c_j), additive over clusters).
:func:`with_evidence` puts it beside a fitted model's logits: added with a weight β, or (β = ∞) in their place,
the logits breaking its ties — SAFRAN's ranking, with the model instead of AnyBURL's next-best rule. The overlap of rules i, j is the Jaccard index of the sets of
(query, candidate) cells they reach on the training queries (:class:`Overlap`); the clusters at threshold τ are
the connected components of the graph joining rules with overlap ≥ τ (:func:`clusters`; τ > 1: every rule alone,
plain noisy-OR over rules; τ ≤ 0: one cluster, AnyBURL's max). SAFRAN chooses τ per relation on valid; so does
``RulePredictor`` (``PredictorConfig.nonredundant``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components

__all__ = [
    "TIE_BREAK",
    "NonRedundant",
    "Overlap",
    "clusters",
    "nonredundant_evidence",
    "smoothed_confidence",
    "with_evidence",
]

#: with β = ∞ the fitted logits, scaled per query to [0, 1], enter times this: they order candidates of (almost)
#: equal evidence only
TIE_BREAK = 1e-4
#: Overlap.update multiplies a batch's (rules × cells) incidence densely up to this many entries (64 MiB)
_DENSE_CELLS = 1 << 24


class Overlap:
    """Accumulates the (J, J) intersections and (J,) sizes of the rules' reached-cell sets over query batches.

    Each batch names its grounding entries as (cell, rule) with cells unique to the batch (query row · E +
    entity), so intersections add up over batches."""

    def __init__(self, num_rules: int) -> None:
        self.inter = np.zeros((num_rules, num_rules), dtype=np.float64)

    def update(self, cell: np.ndarray, rule: np.ndarray) -> None:
        """cell (nnz,) int64, rule (nnz,) int64 in 0..J-1: one batch's grounding entries."""
        J = self.inter.shape[0]
        if cell.size == 0 or J == 0:
            return
        cells, col = np.unique(cell, return_inverse=True)
        if J * cells.size <= _DENSE_CELLS:  # one dense product (exact: counts < 2²⁴) beats a sparse one
            fired = torch.zeros(J, cells.size)
            fired[torch.from_numpy(rule), torch.from_numpy(col)] = 1.0  # a (cell, rule) pair counts once
            self.inter += (fired @ fired.T).double().numpy()
            return
        m = sp.csr_matrix((np.ones(cell.size, dtype=np.float64), (rule, col)), shape=(J, cells.size))
        m.data[:] = 1.0  # a (cell, rule) pair counts once
        self.inter += (m @ m.T).toarray()

    def jaccard(self) -> np.ndarray:
        """(J, J) |A_i ∩ A_j| / |A_i ∪ A_j| (0 where both are empty)."""
        size = np.diag(self.inter)
        union = size[:, None] + size[None, :] - self.inter
        return np.divide(self.inter, union, out=np.zeros_like(self.inter), where=union > 0)


def clusters(jaccard: np.ndarray, threshold: float) -> np.ndarray:
    """(J,) cluster label per rule: connected components of {(i, j): jaccard[i, j] ≥ threshold}."""
    J = jaccard.shape[0]
    if J == 0:
        return np.zeros(0, dtype=np.int64)
    _, labels = connected_components(sp.csr_matrix(jaccard >= threshold), directed=False)
    return labels.astype(np.int64)


def smoothed_confidence(hits: np.ndarray, reached: np.ndarray, smoothing: float) -> np.ndarray:
    """(J,) hits / (reached + smoothing): AnyBURL's confidence with its pessimistic correction (a rule seen
    reaching few pairs is not trusted at face value)."""
    return np.asarray(hits, dtype=np.float64) / (np.asarray(reached, dtype=np.float64) + float(smoothing))


def nonredundant_evidence(
    flat: torch.Tensor, rule: torch.Tensor, confidence: torch.Tensor, labels: torch.Tensor, num_cells: int
) -> torch.Tensor:
    """(num_cells,) float64 −log(1 − NR) per cell: Σ over clusters of −log(1 − the cluster's best firing c_j).

    flat (nnz,) cell index of each grounding entry, rule (nnz,) its rule, confidence (J,) in [0, 1), labels (J,)
    cluster ids (:func:`clusters`). Cells no rule reaches get 0."""
    out = torch.zeros(num_cells, dtype=torch.float64)
    if flat.numel() == 0:
        return out
    width = int(labels.max()) + 1
    key = flat * width + labels[rule]
    uniq, inverse = torch.unique(key, return_inverse=True)
    conf = confidence.double()[rule].clamp(0.0, 1.0 - 1e-9)
    best = torch.zeros(uniq.numel(), dtype=torch.float64).scatter_reduce(
        0, inverse, conf, reduce="amax", include_self=True
    )
    return out.index_add(0, uniq // width, -torch.log1p(-best))


def with_evidence(logits: torch.Tensor, evidence: torch.Tensor, beta: float) -> torch.Tensor:
    """(B, E) float64 scores from a model's logits (B, E) and −log(1 − NR) (B, E): logits + β · evidence, or for
    β = ∞ evidence + :data:`TIE_BREAK` · the logits min-max scaled per row."""
    logits, evidence = logits.double(), evidence.double()
    if not math.isinf(beta):
        return logits + beta * evidence
    lo = logits.min(1, keepdim=True).values
    span = (logits.max(1, keepdim=True).values - lo).clamp(min=1e-12)
    return evidence + TIE_BREAK * (logits - lo) / span


@dataclass
class NonRedundant:
    """A head's non-redundant noisy-OR term, chosen on valid: s(e) += beta · −log(1 − NR(e))."""

    confidence: torch.Tensor  # (J,) smoothed confidences of the head's rules (path bodies, then constants)
    labels: torch.Tensor  # (J,) int64 cluster of each rule
    threshold: float  # the Jaccard threshold the clusters were cut at
    beta: float  # weight of the term beside the fitted model's logits (∞: in their place, they break its ties)
    valid_mrr: float  # the head's valid MRR with the term (the fitted model alone scored less)

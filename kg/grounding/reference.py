"""LogiRE's PathScorer (rudongyu/LogiRE, logire.py), re-implemented as the reference for tests and bench/grounding.

LogiRE works in log space: transitions T = log σ(logits) for relations, their transposes for inverses, and a stay
channel with 0 on the diagonal and -1000 elsewhere; padded entities are -1000. For every body step it broadcasts
over the intermediate entity, T[..., b_k] as [B, N, N, 1, Nc] + [B, 1, N, N, Nc] → [B, N, N, N, Nc], and takes the
max over the intermediate axis (max-plus dynamic programming). φ = exp(score). LogiRE runs all Nc bodies at once;
``chunk_size`` splits the bodies so the [B, N, N, N, chunk] tensor fits in memory (same arithmetic).
"""

from __future__ import annotations

import torch

LOGIRE_FLOOR = -1000.0


def to_log_transitions(values: torch.Tensor, floor: float = LOGIRE_FLOOR) -> torch.Tensor:
    """Probabilities (B, N, N, C) → LogiRE log-space transitions, log(x) floored at -1000 (LogiRE's fill value)."""
    return torch.log(values).clamp_min(floor)


def logire_path_scores(transitions: torch.Tensor, chains: torch.Tensor, chunk_size: int | None = None) -> torch.Tensor:
    """LogiRE max-plus path scores.

    Args:
        transitions: (B, N, N, C) log-space transition scores.
        chains: (Nc, L) int64 bodies.
        chunk_size: bodies per broadcast (None = all at once, as LogiRE).

    Returns:
        (B, N, N, Nc) max-plus scores (LogiRE's layout); exp() gives max-product path values.
    """
    n_chains, length = chains.shape
    chains = chains.to(transitions.device)
    step = n_chains if chunk_size is None else max(1, chunk_size)
    parts = []
    for c0 in range(0, n_chains, step):
        ch = chains[c0 : c0 + step]
        if length == 1:
            parts.append(transitions.index_select(-1, ch[:, 0]))
            continue
        scores = torch.max(
            transitions.index_select(-1, ch[:, 0]).unsqueeze(-2) + transitions.index_select(-1, ch[:, 1]).unsqueeze(-4),
            dim=2,
        ).values  # [B, N, N, chunk]
        for i in range(2, length):
            scores = torch.max(
                scores.unsqueeze(-2) + transitions.index_select(-1, ch[:, i]).unsqueeze(-4), dim=2
            ).values
        parts.append(scores)
    if not parts:
        b, n = transitions.shape[:2]
        return transitions.new_empty(b, n, n, 0)
    return torch.cat(parts, dim=-1)

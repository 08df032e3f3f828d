"""The knowledge-injected combination T_{λ,g_p,g_r} (Fan et al. 2022, Def. 5.1, eqs. 2-3) and its loss (eq. 5).

Eq. (2)::

    T(f)(x) = (1 - λ) · softmax(f(x) + ∞·(g_r(x) - 1)) + λ · g_p(x)

i.e. the logits are set to -∞ outside the R-KM's admissible set, soft-maxed, and mixed with the P-KM's one-hot.
Rows where the P-KM abstains (class -1) use λ = 0 (f^m is then the masked softmax). Proposition 5.1 holds for
every θ: rows lie in the simplex (a), ⟨f^m, g_p⟩ ≥ λ (b), f^m = 0 outside the admissible set (c), and
∇_θ f^m = (1-λ)(diag s - s sᵀ) ∇_θ f with s the masked softmax (d; the paper prints "sᵀs").

Assumption 5.1 (supp g_p ⊆ supp g_r) is enforced by :func:`resolve_conflicts`.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

__all__ = [
    "CONFLICT_POLICIES",
    "knowledge_injected",
    "knowledge_injected_numpy",
    "masked_softmax",
    "nll",
    "percentage_of_violations",
    "resolve_conflicts",
]

ConflictPolicy = Literal["drop_pkm", "union", "error"]
CONFLICT_POLICIES = ("drop_pkm", "union", "error")


def masked_softmax(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """softmax(f + ∞·(g_r - 1)): (n, k) with exact zeros where ``allowed`` is False (each row needs one True)."""
    return torch.softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)


def knowledge_injected(
    logits: torch.Tensor, allowed: torch.Tensor, pkm: torch.Tensor, lam: float | torch.Tensor
) -> torch.Tensor:
    """Eq. (2): (n, k) probabilities from logits (n, k), admissible mask (n, k) bool, P-KM ids (n,) (-1 = none).

    ``lam`` is a scalar λ^m in [0, 1] or a (n,) tensor of per-row weights.
    """
    s = masked_softmax(logits, allowed)
    has = pkm >= 0
    onehot = torch.nn.functional.one_hot(pkm.clamp(min=0), logits.shape[-1]).to(s.dtype)
    lam_row = torch.as_tensor(lam, dtype=s.dtype, device=s.device) * has.to(s.dtype)
    lam_row = lam_row.expand(len(pkm)) if lam_row.dim() == 0 else lam_row
    return (1.0 - lam_row)[:, None] * s + lam_row[:, None] * onehot


def nll(probs: torch.Tensor, y: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Eq. (5) cross-entropy on probabilities: mean of -log(f^m(x)_y + eps).

    ``eps`` keeps the loss finite when a label lies outside the admissible set (f^m_y = 0 exactly); such a row
    then contributes a constant and no gradient.
    """
    return -torch.log(probs.gather(1, y[:, None]).squeeze(1) + eps).mean()


def knowledge_injected_numpy(logits: np.ndarray, allowed: np.ndarray, pkm: np.ndarray, lam: float) -> np.ndarray:
    """Independent float64 reference of eq. (2), written row by row from the definition."""
    logits = np.asarray(logits, dtype=np.float64)
    out = np.zeros_like(logits)
    for i in range(logits.shape[0]):
        z = np.where(allowed[i], logits[i], -np.inf)
        e = np.where(allowed[i], np.exp(z - z[allowed[i]].max()), 0.0)
        s = e / e.sum()
        li = lam if pkm[i] >= 0 else 0.0
        g = np.zeros(logits.shape[1])
        if pkm[i] >= 0:
            g[pkm[i]] = 1.0
        out[i] = (1 - li) * s + li * g
    return out


def resolve_conflicts(
    allowed: np.ndarray, pkm: np.ndarray, policy: str, client: str = "?"
) -> tuple[np.ndarray, np.ndarray, int]:
    """Enforce Assumption 5.1 on rows where the P-KM class is not admissible.

    ``drop_pkm``: the row's P-KM is dropped (λ = 0 there), so the R-KM stays a hard constraint (Req. 5.1b);
    ``union``: the P-KM class is added to the admissible set; ``error``: raise. Returns (allowed, pkm, #conflicts).
    """
    from fednsl.methods.kifl.knowledge import KnowledgeModelError

    if policy not in CONFLICT_POLICIES:
        raise ValueError(f"conflict policy must be one of {CONFLICT_POLICIES}, got {policy!r}")
    rows = np.flatnonzero(pkm >= 0)
    bad = rows[~allowed[rows, pkm[rows]]]
    if len(bad) == 0:
        return allowed, pkm, 0
    if policy == "error":
        i = int(bad[0])
        raise KnowledgeModelError(
            client,
            "P-KM vs R-KM",
            f"Assumption 5.1 violated on {len(bad)} rows (first: row "
            f"{i}, P-KM class {int(pkm[i])} not in the admissible set "
            f"{np.flatnonzero(allowed[i]).tolist()})",
        )
    allowed, pkm = allowed.copy(), pkm.copy()
    if policy == "drop_pkm":
        pkm[bad] = -1
    else:
        allowed[bad, pkm[bad]] = True
    return allowed, pkm, int(len(bad))


def percentage_of_violations(pred: np.ndarray, allowed: np.ndarray) -> float:
    """Eq. (7): share of rows whose predicted class lies outside the R-KM's admissible set."""
    if len(pred) == 0:
        return 0.0
    return float(np.mean(~allowed[np.arange(len(pred)), pred]))

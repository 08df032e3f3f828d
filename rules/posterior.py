"""The E-step of FedNSL (paper Eq. 9–11; spec §8.1–8.3): rule posteriors and the KL toward the server prior, in
the two forms the clients use — per labelled instance on documents, in closed form per head on knowledge graphs.

**Documents** (``fednsl``'s scorer), batched over triples. Shapes: T triples (rule-head categories), J_max candidate bodies per triple (padded, ``mask`` (T, J) marks real
bodies), M query instances (one labelled (document, head entity, tail entity, relation) cell each), ``tri`` (M,)
the triple of each instance.

Per instance i of triple t and body j (spec §8.1, the LogiRE / RNNLogic per-rule reading of Eq. 9):

    H_ij = ½ · y_i · (w_tj · φ_ij / c_tj + b_t / J_t) + log T_θ(j | t)                       (Eq. 9)
    q_i(j) ∝ m_tj · exp(H_ij)      over the real bodies j of t                              (Eq. 10)

with y_i = ±1 the label, φ_ij the max-product path value of body j (Eq. 8), J_t the number of real bodies, and
``count_correction`` (LogiRE ``get_posterior``): c = m = n_tj (multiplicity of body j among the N ancestral
samples, Eq. 5) when on, c = m = 1 when off. The triple's posterior is the mean over its instances
q_t(j) = Σ_i ω_i q_i(j) / Σ_i ω_i (ω_i instance weights, 1 by default) — the expectation of LogiRE's one
Categorical draw per instance.

KL regulariser (Eq. 11, spec §8.3; the multinomial constant N folded into λ):

    reverse (default):  KL(q_t ‖ p_t) = Σ_j q_t(j) [log q_t(j) − log p_t(j)]
    forward:            KL(p_t ‖ q_t) = Σ_j p_t(j) [log p_t(j) − log q_t(j)]

with the prior p_t(j) = n_tj / Σ_j n_tj ("counts", the empirical Mu_θ of Eq. 5) or T_θ renormalised over the J_t
bodies ("renormalised"). Everything is differentiable in (w, b) through H (the bias cancels in the softmax).

**Knowledge graphs** (``fednsl-kg``'s predictor, :func:`posterior_from_scores`), one head at a time: the
client's evidence for body j is the fitted predictor's rule score s_j (RNNLogic's H(rule)), so

    H_j = s̃_j / τ + w · log p_θ(j)                                                        (Eq. 9, RNNLogic's H)
    q = argmin_q −E_q[H] − entropy(q) + λ · KL(q ‖ p_θ) = softmax((H + λ · log p_θ) / (1 + λ))  (Eq. 2 with Eq. 11)

with s̃ the scores z-scored over the head's bodies (optional) and p_θ the server's prior over the proposal.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

PriorSource = Literal["counts", "renormalised"]
KLDirection = Literal["reverse", "forward"]

__all__ = [
    "PriorSource",
    "KLDirection",
    "prior_distribution",
    "score_h",
    "instance_log_posterior",
    "triple_posterior",
    "kl_divergence",
    "normalise_rows",
    "posterior_from_scores",
    "NEG_LOGIT",
]

#: The score of a masked (padding) body: exp() of it is exactly 0 next to any real body's score.
NEG_LOGIT = -1e30


def _check(mask: torch.Tensor, *arrays: torch.Tensor) -> None:
    for a in arrays:
        if a.shape != mask.shape:
            raise ValueError(f"expected shape {tuple(mask.shape)} (T, J) like the mask, got {tuple(a.shape)}")


def prior_distribution(
    log_prior: torch.Tensor, counts: torch.Tensor, mask: torch.Tensor, source: PriorSource = "counts"
) -> torch.Tensor:
    """p_t(j) (T, J): n_j / Σ n ("counts") or softmax of log T_θ over the real bodies ("renormalised").

    Masked entries are 0; a triple without real bodies gets an all-zero row.
    """
    _check(mask, log_prior, counts)
    if source == "counts":
        c = torch.where(mask, counts.to(torch.float64), torch.zeros((), dtype=torch.float64))
        tot = c.sum(-1, keepdim=True)
        return torch.where(tot > 0, c / tot.clamp_min(1e-300), torch.zeros_like(c)).to(log_prior.dtype)
    if source == "renormalised":
        lp = torch.where(mask, log_prior, torch.full_like(log_prior, NEG_LOGIT))
        p = torch.softmax(lp, dim=-1)
        return torch.where(mask, p, torch.zeros_like(p))
    raise ValueError(f"prior source must be 'counts' or 'renormalised', got {source!r}")


def score_h(
    phi: torch.Tensor,
    tri: torch.Tensor,
    y_sign: torch.Tensor,
    weights: torch.Tensor,
    bias: torch.Tensor,
    log_prior: torch.Tensor,
    counts: torch.Tensor,
    mask: torch.Tensor,
    count_correction: bool = True,
) -> torch.Tensor:
    """H (M, J), Eq. 9: ½·y_i·(w_tj φ_ij / c_tj + b_t / J_t) + log T_θ(j|t); masked bodies get −1e30.

    phi (M, J) path values aligned with the triple's body order; tri (M,) long; y_sign (M,) ±1;
    weights (T, J); bias (T,); log_prior, counts, mask (T, J).
    """
    _check(mask, weights, log_prior, counts)
    m = mask[tri]
    c = counts[tri].to(phi.dtype).clamp_min(1.0) if count_correction else torch.ones_like(phi)
    n_bodies = mask.sum(-1).clamp_min(1).to(phi.dtype)  # J_t
    inner = weights[tri] * phi / c + (bias / n_bodies)[tri][:, None]
    h = 0.5 * y_sign[:, None].to(phi.dtype) * inner + log_prior[tri].to(phi.dtype)
    return torch.where(m, h, torch.full_like(h, NEG_LOGIT))


def instance_log_posterior(
    h: torch.Tensor, tri: torch.Tensor, counts: torch.Tensor, mask: torch.Tensor, count_correction: bool = True
) -> torch.Tensor:
    """log q_i(j) (M, J), Eq. 10: log-softmax over the real bodies of H_ij (+ log n_j with count correction).

    Masked entries are −1e30 (q = 0 exactly after ``exp``).
    """
    m = mask[tri]
    logits = h + (torch.log(counts[tri].to(h.dtype).clamp_min(1.0)) if count_correction else 0.0)
    logits = torch.where(m, logits, torch.full_like(logits, NEG_LOGIT))
    out = torch.log_softmax(logits, dim=-1)
    return torch.where(m, out, torch.full_like(out, NEG_LOGIT))


def triple_posterior(
    log_q: torch.Tensor, tri: torch.Tensor, num_triples: int, weight: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(q_t (T, J), instances (T,)): weighted mean of exp(log q_i) over each triple's instances.

    ``weight`` (M,) instance multiplicities (default 1). Triples without instances get an all-zero row and
    instance weight 0.
    """
    q = torch.exp(log_q)
    w = torch.ones(q.shape[0], dtype=q.dtype, device=q.device) if weight is None else weight.to(q.dtype)
    tot = torch.zeros(num_triples, dtype=q.dtype, device=q.device).index_add(0, tri, w)
    acc = torch.zeros(num_triples, q.shape[1], dtype=q.dtype, device=q.device).index_add(0, tri, q * w[:, None])
    post = acc / tot.clamp_min(1e-300)[:, None]
    return torch.where(tot[:, None] > 0, post, torch.zeros_like(post)), tot


def kl_divergence(
    q: torch.Tensor, p: torch.Tensor, mask: torch.Tensor, direction: KLDirection = "reverse", eps: float = 1e-12
) -> torch.Tensor:
    """Per-triple KL (T,), Eq. 11 read as spec §8.3: "reverse" KL(q‖p) (default) or "forward" KL(p‖q).

    Sums over real bodies only, with 0·log 0 = 0; ``eps`` guards log of tiny probabilities.
    """
    _check(mask, q, p)
    if direction == "reverse":
        a, b = q, p
    elif direction == "forward":
        a, b = p, q
    else:
        raise ValueError(f"kl_direction must be 'reverse' or 'forward', got {direction!r}")
    term = a * (torch.log(a.clamp_min(eps)) - torch.log(b.clamp_min(eps)))
    term = torch.where(mask & (a > 0), term, torch.zeros_like(term))
    return term.sum(-1)


def normalise_rows(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Rows of ``x`` (masked to 0) divided by their sums (float64); all-zero rows stay 0."""
    x = torch.where(mask, x.to(torch.float64), torch.zeros((), dtype=torch.float64))
    tot = x.sum(-1, keepdim=True)
    return torch.where(tot > 0, x / tot.clamp_min(1e-300), torch.zeros_like(x))


def posterior_from_scores(
    scores: np.ndarray,
    log_prior: np.ndarray,
    *,
    temperature: float,
    prior_weight: float,
    kl_weight: float,
    standardize: bool = True,
) -> np.ndarray:
    """The closed-form E-step of one head: scores (J,) and log p_θ (J,) → q (J,), a distribution.

    H_j = s̃_j / τ + w · log p_θ(j), s̃ the scores standardised over the head's J bodies when ``standardize``
    (RNNLogic's H is averaged over the head's queries, so its raw scale shrinks with the graph; the z-score makes τ
    mean the same on every KG); q = softmax((H + λ · log p_θ) / (1 + λ)), the minimiser of
    −E_q[H] − entropy(q) + λ · KL(q ‖ p_θ). ``log_prior`` all 0 = no prior.
    """
    s = np.asarray(scores, dtype=np.float64)
    if standardize and s.size > 1:
        sd = s.std()
        s = (s - s.mean()) / sd if sd > 0 else np.zeros_like(s)
    h = s / temperature + prior_weight * log_prior
    z = (h + kl_weight * log_prior) / (1.0 + kl_weight)
    z = z - z.max()
    q = np.exp(z)
    return q / q.sum()

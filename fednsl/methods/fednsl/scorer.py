"""The client's rule scorer: per-triple rule weights fitted by BCE + λ·KL (paper Eq. 2, 8, 11; spec §2 step 2).

Logit of an instance i (document, head h, tail t, relation r) of triple t (LogiRE RuleScorer, spec §8.4):

    s_i = Σ_j w_tj · φ_ij + u_t · x_r(h, t) + b_t

φ_ij = max-product path value of candidate body j (Eq. 8); x_r(h, t) = the backbone's own value of the head
relation, i.e. the length-1 body [r] kept as a fixed *pass-through* feature (``pass_through=False`` drops it);
w (T, J_max) masked to the real bodies, u (T,), b (T,). Weights are re-initialised every round (App. A.6) as
LogiRE does: w, b ~ U(−1, 1) (kaiming_uniform with a=√5 on a (J,1) tensor is U(−1, 1)), u ~ U(−1, 1).

Loss (Eq. 2 with the exact likelihood of Eq. 8, spec §8.4):

    L(w) = Σ_i ω_i BCE(σ(s_i), y_i) / Σ_i ω_i  +  λ · mean_{t active} KL_t(q_t(w), p_t)

with q_t the triple posterior of Eq. 9–10 (:mod:`.posterior`) over the posterior instances (all labelled cells,
as LogiRE, or only the positive ones), minimised by full-batch Adam.

Triples without local instances cannot be fitted; for them (e.g. every triple of the unseen combo) the client
uses the *transfer scorer*, three parameters fitted on the same local instances:

    s_i = κ · Σ_j p_tj φ_ij + κ_u · x_r(h, t) + β           (prior-weighted rule evidence, p = server prior)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from fednsl.methods.fednsl.messages import RuleSet, ScorerOptions
from fednsl.methods.fednsl.posterior import (
    instance_log_posterior,
    kl_divergence,
    score_h,
    triple_posterior,
)

__all__ = [
    "Instances",
    "FittedScorer",
    "TransferScorer",
    "fit_scorer",
    "fit_transfer",
    "posterior_of",
    "predict_logits",
    "transfer_features",
]


@dataclass
class Instances:
    """Labelled query cells of one client.

    phi (M, J) path values (0 at masked bodies); passthrough (M,) backbone value x_r(h, t); tri (M,) long;
    y (M,) float 0/1; weight (M,) float multiplicities or None.
    """

    phi: torch.Tensor
    passthrough: torch.Tensor
    tri: torch.Tensor
    y: torch.Tensor
    weight: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.tri.shape[0])

    def subset(self, keep: torch.Tensor) -> Instances:
        return Instances(
            self.phi[keep],
            self.passthrough[keep],
            self.tri[keep],
            self.y[keep],
            None if self.weight is None else self.weight[keep],
        )

    def counts_per_triple(self, num_triples: int) -> torch.Tensor:
        w = torch.ones(len(self), dtype=torch.float64) if self.weight is None else self.weight.double()
        return torch.zeros(num_triples, dtype=torch.float64).index_add(0, self.tri, w)


@dataclass
class FittedScorer:
    """Fitted weights w (T, J), pass-through u (T,), bias b (T,), fitted (T,) bool (triples with instances)."""

    weights: torch.Tensor
    passthrough: torch.Tensor
    bias: torch.Tensor
    fitted: torch.Tensor
    history: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class TransferScorer:
    """κ (prior-weighted rule evidence), κ_top (best top-k prior body), κ_u (pass-through), β (bias), shared
    by all triples."""

    kappa: float = 1.0
    kappa_top: float = 0.0
    kappa_pass: float = 1.0
    beta: float = 0.0


def _logits(inst: Instances, w: torch.Tensor, u: torch.Tensor, b: torch.Tensor, pass_through: bool) -> torch.Tensor:
    s = (inst.phi * w[inst.tri]).sum(-1) + b[inst.tri]
    if pass_through:
        s = s + u[inst.tri] * inst.passthrough
    return s


def _bce(logits: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    loss = F.binary_cross_entropy_with_logits(logits, y.to(logits.dtype), reduction="none")
    if weight is None:
        return loss.mean()
    w = weight.to(logits.dtype)
    return (loss * w).sum() / w.sum().clamp_min(1e-12)


def _posterior_instances(inst: Instances, opts: ScorerOptions) -> Instances:
    if opts.posterior_instances == "all":
        return inst
    if opts.posterior_instances == "positive":
        return inst.subset(inst.y > 0.5)
    raise ValueError(f"posterior_instances must be 'all' or 'positive', got {opts.posterior_instances!r}")


def posterior_of(
    inst: Instances, rules: RuleSet, w: torch.Tensor, b: torch.Tensor, opts: ScorerOptions
) -> tuple[torch.Tensor, torch.Tensor]:
    """(q (T, J), instances (T,)): Eq. 9–10 averaged over the posterior instances (differentiable)."""
    pi = _posterior_instances(inst, opts)
    y_sign = pi.y * 2.0 - 1.0
    h = score_h(
        pi.phi, pi.tri, y_sign, w, b, rules.log_prior.to(w.dtype), rules.counts, rules.mask, opts.count_correction
    )
    log_q = instance_log_posterior(h, pi.tri, rules.counts, rules.mask, opts.count_correction)
    return triple_posterior(log_q, pi.tri, rules.num_triples, pi.weight)


def fit_scorer(
    inst: Instances, rules: RuleSet, opts: ScorerOptions, generator: torch.Generator, dtype: torch.dtype = torch.float32
) -> FittedScorer:
    """Minimise BCE + λ·KL over (w, u, b) from a fresh initialisation: w, u ~ U(−1, 1) from ``generator``;
    b at the logit of the triple's local positive rate (``bias_init="base_rate"``) or U(−1, 1) (LogiRE)."""
    T, J = rules.num_triples, rules.num_bodies
    mask = rules.mask
    w0 = (torch.rand(T, J, generator=generator, dtype=torch.float64) * 2 - 1) * mask
    u0 = torch.rand(T, generator=generator, dtype=torch.float64) * 2 - 1
    b0 = torch.rand(T, generator=generator, dtype=torch.float64) * 2 - 1
    if opts.bias_init == "base_rate" and len(inst):
        # start each fitted triple's bias at the logit of its local positive rate (fewer steps to calibrate)
        w_inst = torch.ones(len(inst), dtype=torch.float64) if inst.weight is None else inst.weight.double()
        pos = torch.zeros(T, dtype=torch.float64).index_add(0, inst.tri, w_inst * inst.y.double())
        tot = torch.zeros(T, dtype=torch.float64).index_add(0, inst.tri, w_inst)
        rate = (pos / tot.clamp_min(1e-12)).clamp(1e-4, 1 - 1e-4)
        b0 = torch.where(tot > 0, torch.log(rate / (1 - rate)), b0)
    elif opts.bias_init not in ("uniform", "base_rate"):
        raise ValueError(f"bias_init must be 'uniform' or 'base_rate', got {opts.bias_init!r}")
    w = w0.to(dtype).requires_grad_(True)
    u = u0.to(dtype).requires_grad_(True)
    b = b0.to(dtype).requires_grad_(True)
    n_per = inst.counts_per_triple(T)
    fitted = n_per > 0
    history: dict[str, list[float]] = {"loss": [], "bce": [], "kl": []}
    if len(inst) == 0:
        return FittedScorer(w.detach(), u.detach(), b.detach(), fitted, history)
    inst = Instances(
        inst.phi.to(dtype),
        inst.passthrough.to(dtype),
        inst.tri,
        inst.y.to(dtype),
        None if inst.weight is None else inst.weight.to(dtype),
    )
    prior = rules.prior(opts.prior_source).to(dtype)
    maskf = mask.to(dtype)
    params = [w, u, b] if opts.pass_through else [w, b]
    opt = torch.optim.Adam(params, lr=opts.lr, weight_decay=opts.weight_decay)
    use_kl = opts.kl_weight > 0
    for _ in range(max(0, opts.steps)):
        opt.zero_grad()
        wm = w * maskf
        bce = _bce(_logits(inst, wm, u, b, opts.pass_through), inst.y, inst.weight)
        loss = bce
        kl_val = torch.zeros((), dtype=dtype)
        if use_kl:
            q, n_post = posterior_of(inst, rules, wm, b, opts)
            active = n_post > 0
            if bool(active.any()):
                kl_val = kl_divergence(q, prior, mask, opts.kl_direction)[active].mean()
                loss = bce + opts.kl_weight * kl_val
        loss.backward()
        opt.step()
        history["loss"].append(float(loss.detach()))
        history["bce"].append(float(bce.detach()))
        history["kl"].append(float(kl_val.detach()))
    return FittedScorer((w * maskf).detach(), u.detach(), b.detach(), fitted, history)


def transfer_features(inst: Instances, prior: torch.Tensor, top: int) -> torch.Tensor:
    """(M, 2) float64: Σ_j p_tj φ_ij and max_j φ_ij over the ``top`` bodies of highest prior p_tj."""
    p = prior.double()[inst.tri]
    phi = inst.phi.double()
    k = max(1, min(top, p.shape[1])) if p.shape[1] else 0
    if k == 0:
        return torch.zeros(len(inst), 2, dtype=torch.float64)
    idx = torch.topk(prior.double(), k, dim=1).indices[inst.tri]
    keep = torch.gather(p, 1, idx) > 0
    best = torch.where(keep, torch.gather(phi, 1, idx), torch.zeros((), dtype=torch.float64)).amax(1)
    return torch.stack([(phi * p).sum(-1), best], 1)


def fit_transfer(inst: Instances, rules: RuleSet, opts: ScorerOptions) -> TransferScorer:
    """Fit (κ, κ_top, κ_u, β) by BCE with L-BFGS from (1, 0, 1, 0) (deterministic; no randomness)."""
    if len(inst) == 0:
        return TransferScorer()
    prior = rules.prior(opts.prior_source)
    f = transfer_features(inst, prior, opts.transfer_top)
    x = inst.passthrough.double() if opts.pass_through else torch.zeros(len(inst), dtype=torch.float64)
    X = torch.cat([f, x[:, None]], 1)
    y = inst.y.double()
    wt = None if inst.weight is None else inst.weight.double()
    theta = torch.tensor([1.0, 0.0, 1.0 if opts.pass_through else 0.0], dtype=torch.float64, requires_grad=True)
    beta = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([theta, beta], lr=1.0, max_iter=max(1, opts.transfer_steps), line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = _bce(X @ theta + beta, y, wt) + 1e-4 * (theta**2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    k = theta.detach()
    b = float(beta.detach())
    if not (bool(torch.isfinite(k).all()) and math.isfinite(b)):
        return TransferScorer()
    return TransferScorer(float(k[0]), float(k[1]), float(k[2]) if opts.pass_through else 0.0, b)


def predict_logits(
    inst: Instances,
    rules: RuleSet,
    fitted: FittedScorer | None,
    transfer: TransferScorer,
    opts: ScorerOptions,
    personalised: bool = True,
) -> torch.Tensor:
    """Logits (M,) float64: the fitted per-triple scorer where the triple was fitted (and ``personalised``),
    else the transfer scorer."""
    prior = rules.prior(opts.prior_source)
    f = transfer_features(inst, prior, opts.transfer_top)
    s_transfer = transfer.kappa * f[:, 0] + transfer.kappa_top * f[:, 1] + transfer.beta
    if opts.pass_through:
        s_transfer = s_transfer + transfer.kappa_pass * inst.passthrough.double()
    if fitted is None or not personalised:
        return s_transfer
    s_fit = _logits(
        Instances(inst.phi.double(), inst.passthrough.double(), inst.tri, inst.y),
        fitted.weights.double(),
        fitted.passthrough.double(),
        fitted.bias.double(),
        opts.pass_through,
    )
    return torch.where(fitted.fitted[inst.tri], s_fit, s_transfer)

"""The client's rule scorer: per-triple rule weights fitted by BCE + λ·KL (paper Eq. 2, 8, 11; spec §2 step 2).

Logit of an instance i (document, head h, tail t, relation r) of triple t (LogiRE RuleScorer, spec §8.4):

    s_i = Σ_j w_tj · φ_ij + u_t · x_r(h, t) + b_t

φ_ij = max-product path value of candidate body j (Eq. 8); x_r(h, t) = the backbone's own value of the head
relation, i.e. the length-1 body [r] kept as a fixed *pass-through* feature (``pass_through=False`` drops it);
w (T, J_max) masked to the real bodies, u (T,), b (T,). Weights are re-initialised every round (App. A.6) as
LogiRE does: w, b ~ U(−1, 1) (kaiming_uniform with a=√5 on a (J,1) tensor is U(−1, 1)), u ~ U(−1, 1).

Loss (Eq. 2 with the exact likelihood of Eq. 8, spec §8.4; the fixed Eq. 11 of issue 17):

    L(w) = Σ_i ω_i BCE(σ(s_i), y_i) / Σ_i ω_i  +  λ · Σ_t n_t KL_t(q_t(w), p_t) / Σ_t n_t  +  ½ δ (‖w‖² + ‖u‖²)

with q_t the triple posterior of Eq. 9–10 (:mod:`.posterior`) over the posterior instances (all labelled cells,
as LogiRE, or only the positive ones) and n_t the triple's training cells, so that the KL, like the BCE, is a
mean over cells (``kl_scale="per_cell"``; ``"per_triple"`` = the old mean over active triples). The prior p_t
is the same in Eq. 9 and in the KL (``prior_source``: renormalised T_θ, n_j/N, or ``"mixed"`` = the old
log T_θ in Eq. 9 with n_j/N in the KL). Minimised by L-BFGS (strong Wolfe) to a gradient tolerance
(``optimizer="lbfgs"``, iterations reported) or by a fixed number of full-batch Adam steps.

Triples without local instances cannot be fitted; for them (e.g. every triple of the unseen combo) the client
uses the *transfer scorer*, a few parameters fitted on the same local instances, over a distribution G over the
bodies that the server sent (the aggregated posterior for ``transfer: prior``):

    s_i = κ · Σ_j G_tj φ_ij + κ_top · max_{j ∈ top-k(G_t)} φ_ij + κ_u · x_r(h, t) + β

(the κ_u·x_r term is kept with or without ``pass_through``: the backbone's own value is never diluted by G)

or, with ``transfer: published``, the owners' mean scorer s_i = Σ_j W̄_tj φ_ij + b̄_t (:func:`published_logits`).
The recalibration-only baseline (:func:`fit_recalibration`) is this same fit with φ zeroed: s_i = u_t·x_r(h, t)
+ b_t per triple, the same BCE, ½δ u_t² and optimizer; under ``transfer: published`` its unseen cells use the
owners' mean (ū_t, b̄_t), the route the rule weights take (:func:`recalibration_logits`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from fednsl.methods.fednsl.messages import ScorerOptions
from fednsl.tasks.rule_learning import Proposal
from rules.posterior import (
    NEG_LOGIT,
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
    "Recalibration",
    "fit_recalibration",
    "recalibration_logits",
    "published_logits",
    "kl_prior",
    "posterior_log_prior",
    "scorer_objective",
    "reference_objective",
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
    iterations: int = 0  # optimiser iterations (L-BFGS) or steps (Adam)
    converged: bool = False  # L-BFGS: max |gradient| <= tol at the end; Adam: never claimed


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


def _posterior_rows(inst: Instances, opts: ScorerOptions) -> torch.Tensor | None:
    """(M,) bool: the cells the posterior is taken over (``posterior_instances``); None for all of them."""
    if opts.posterior_instances == "all":
        return None
    if opts.posterior_instances == "positive":
        return inst.y > 0.5
    raise ValueError(f"posterior_instances must be 'all' or 'positive', got {opts.posterior_instances!r}")


def _posterior_instances(inst: Instances, opts: ScorerOptions) -> Instances:
    rows = _posterior_rows(inst, opts)
    return inst if rows is None else inst.subset(rows)


def kl_prior(rules: Proposal, opts: ScorerOptions) -> torch.Tensor:
    """p_t (T, J) of the KL (Eq. 11): renormalised T_θ, or n_j/N for ``counts`` and ``mixed``."""
    return rules.prior("renormalised" if opts.prior_source == "renormalised" else "counts")


def posterior_log_prior(rules: Proposal, opts: ScorerOptions) -> torch.Tensor:
    """The log prior of Eq. 9 (T, J): log T_θ (its renormalisation is a per-triple constant that cancels in
    Eq. 10) for ``renormalised`` and ``mixed``, log(n_j/N) for ``counts`` — so that, except under ``mixed``,
    the posterior and the KL use the same p_t."""
    if opts.prior_source == "counts":
        return torch.log(rules.prior("counts").clamp_min(1e-300))
    return rules.log_prior.double()


def posterior_of(
    inst: Instances, rules: Proposal, w: torch.Tensor, b: torch.Tensor, opts: ScorerOptions
) -> tuple[torch.Tensor, torch.Tensor]:
    """(q (T, J), instances (T,)): Eq. 9–10 averaged over the posterior instances (differentiable)."""
    pi = _posterior_instances(inst, opts)
    y_sign = pi.y * 2.0 - 1.0
    lp = posterior_log_prior(rules, opts).to(w.dtype)
    h = score_h(pi.phi, pi.tri, y_sign, w, b, lp, rules.counts, rules.mask, opts.count_correction)
    log_q = instance_log_posterior(h, pi.tri, rules.counts, rules.mask, opts.count_correction)
    return triple_posterior(log_q, pi.tri, rules.num_heads, pi.weight)


def fit_scorer(
    inst: Instances,
    rules: Proposal,
    opts: ScorerOptions,
    generator: torch.Generator,
    dtype: torch.dtype = torch.float32,
) -> FittedScorer:
    """Minimise BCE + λ·KL (+ L2) over (w, u, b) from a fresh initialisation: w, u ~ U(−1, 1) from ``generator``;
    b at the logit of the triple's local positive rate (``bias_init="base_rate"``) or U(−1, 1) (LogiRE).
    L-BFGS runs in float64 (``dtype`` applies to Adam)."""
    T, J = rules.num_heads, rules.num_bodies
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
    if opts.optimizer == "lbfgs":
        dtype = torch.float64
    elif opts.optimizer != "adam":
        raise ValueError(f"optimizer must be 'lbfgs' or 'adam', got {opts.optimizer!r}")
    w = w0.to(dtype).requires_grad_(True)
    u = u0.to(dtype).requires_grad_(True)
    b = b0.to(dtype).requires_grad_(True)
    n_per = inst.counts_per_triple(T)
    fitted = n_per > 0
    history: dict[str, list[float]] = {"loss": [], "bce": [], "kl": []}
    if len(inst) == 0:
        return FittedScorer(w.detach(), u.detach(), b.detach(), fitted, history)
    terms = _fit_terms(inst, rules, opts, dtype)
    maskf = mask.to(dtype)
    params = [w, u, b] if opts.pass_through else [w, b]
    lbfgs = opts.optimizer == "lbfgs"

    def objective() -> torch.Tensor:
        loss, bce, kl_val = _objective(terms, rules, w * maskf, u, b, opts, l2=lbfgs)
        history["loss"].append(float(loss.detach()))
        history["bce"].append(float(bce.detach()))
        history["kl"].append(float(kl_val.detach()))
        return loss

    iterations, converged = 0, False
    if lbfgs and opts.steps > 0:
        opt = torch.optim.LBFGS(
            params,
            lr=1.0,
            max_iter=opts.steps,
            max_eval=opts.steps * 2,
            tolerance_grad=opts.tol,
            tolerance_change=1e-12,
            history_size=20,
            line_search_fn="strong_wolfe",
        )

        # the tolerance applies to the summed-over-cells loss (the same minimiser): on the mean, a triple with
        # n_t of M cells has gradients ~n_t/M and would meet any fixed tolerance at once
        scale = float(n_per.sum())

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = objective() * scale
            loss.backward()
            return loss

        opt.step(closure)
        iterations = int(opt.state[opt._params[0]].get("n_iter", 0))
        opt.zero_grad()
        (objective() * scale).backward()
        grads = [p.grad for p in params if p.grad is not None]
        converged = bool(max(float(g.abs().max()) for g in grads) <= opts.tol * 10) if grads else True
    elif opts.steps > 0:
        opt_adam = torch.optim.Adam(params, lr=opts.lr, weight_decay=opts.weight_decay)
        for _ in range(opts.steps):
            opt_adam.zero_grad()
            objective().backward()
            opt_adam.step()
        iterations = opts.steps
    return FittedScorer(
        (w * maskf).detach(), u.detach(), b.detach(), fitted, history, iterations=iterations, converged=converged
    )


@dataclass(frozen=True)
class _FitTerms:
    """The parts of the client objective that do not depend on (w, u, b), gathered once per fit.

    Over the P posterior instances (all cells, or the positive ones) whose triple has a body (the others add 0
    to the posterior): ``keep`` (P,) their rows in ``inst`` (None = all rows), ``tri`` (P,), ``half_y`` (P, 1)
    ½·y_i, ``inv_count`` (P, J) 1/c_tj or None, ``offset`` (P, J) log p_t(j) (+ log n_tj with count correction;
    −1e30 at masked bodies), ``weight`` (P, 1) ω_i or None; ``total`` (T,) Σ_i ω_i over all posterior
    instances; ``kl_target`` (T, J) the KL's p_t and ``kl_share`` (T,) each triple's weight in the KL term.
    """

    inst: Instances
    keep: torch.Tensor | None
    tri: torch.Tensor
    half_y: torch.Tensor
    inv_count: torch.Tensor | None
    offset: torch.Tensor
    weight: torch.Tensor | None
    total: torch.Tensor
    kl_target: torch.Tensor
    kl_share: torch.Tensor


def _fit_terms(inst: Instances, rules: Proposal, opts: ScorerOptions, dtype: torch.dtype) -> _FitTerms:
    if opts.kl_scale not in ("per_cell", "per_triple"):
        raise ValueError(f"kl_scale must be 'per_cell' or 'per_triple', got {opts.kl_scale!r}")
    T = rules.num_heads
    inst = Instances(
        inst.phi.to(dtype),
        inst.passthrough.to(dtype),
        inst.tri,
        inst.y.to(dtype),
        None if inst.weight is None else inst.weight.to(dtype),
    )
    selected = _posterior_rows(inst, opts)
    rows = torch.ones(len(inst), dtype=torch.bool) if selected is None else selected
    ones = torch.ones(len(inst), dtype=dtype)
    omega = torch.where(rows, ones if inst.weight is None else inst.weight, torch.zeros((), dtype=dtype))
    total = torch.zeros(T, dtype=dtype).index_add(0, inst.tri, omega)
    active = total > 0  # a triple with posterior instances, even without bodies (its posterior row is 0)
    rows &= rules.mask.any(1)[inst.tri]
    keep = None if bool(rows.all()) else torch.nonzero(rows).squeeze(1)
    tri = inst.tri if keep is None else inst.tri[keep]
    y = inst.y if keep is None else inst.y[keep]
    m = rules.mask[tri]
    counts = rules.counts[tri].to(dtype).clamp_min(1.0)
    offset = posterior_log_prior(rules, opts).to(dtype)[tri]
    if opts.count_correction:
        offset = offset + torch.log(counts)
    offset = torch.where(m, offset, torch.full((), NEG_LOGIT, dtype=dtype))
    w_post = None
    if inst.weight is not None:
        w_post = inst.weight if keep is None else inst.weight[keep]
    if opts.kl_scale == "per_cell":
        n_per = inst.counts_per_triple(T).to(dtype)
        share = torch.where(active, n_per / n_per.sum().clamp_min(1e-12), torch.zeros((), dtype=dtype))
    else:
        share = active.to(dtype) / active.sum().clamp_min(1)
    return _FitTerms(
        inst,
        keep,
        tri,
        (0.5 * (2.0 * y - 1.0))[:, None],
        1.0 / counts if opts.count_correction else None,
        offset,
        None if w_post is None else w_post[:, None],
        total,
        kl_prior(rules, opts).to(dtype),
        share,
    )


def _objective(
    terms: _FitTerms, rules: Proposal, w: torch.Tensor, u: torch.Tensor, b: torch.Tensor, opts: ScorerOptions, l2: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`scorer_objective` on prepared terms. One product A = φ · w[tri] (M, J) serves the logits and Eq. 9;
    the bias term of Eq. 9 is dropped (it is the same for every body of an instance and cancels in Eq. 10)."""
    inst = terms.inst
    evidence = inst.phi * w[inst.tri]
    logits = evidence.sum(-1) + b[inst.tri]
    if opts.pass_through:
        logits = logits + u[inst.tri] * inst.passthrough
    bce = _bce(logits, inst.y, inst.weight)
    loss = bce
    kl_val = torch.zeros((), dtype=w.dtype)
    if opts.kl_weight > 0 and bool((terms.kl_share > 0).any()):
        a = evidence if terms.keep is None else evidence[terms.keep]
        if terms.inv_count is not None:
            a = a * terms.inv_count
        q_i = torch.softmax(a * terms.half_y + terms.offset, dim=-1)  # Eq. 9-10
        if terms.weight is not None:
            q_i = q_i * terms.weight
        acc = torch.zeros(rules.num_heads, rules.num_bodies, dtype=w.dtype).index_add(0, terms.tri, q_i)
        q = acc / terms.total.clamp_min(1e-300)[:, None]
        kl_t = kl_divergence(q, terms.kl_target, rules.mask, opts.kl_direction)
        kl_val = (kl_t * terms.kl_share).sum()
        loss = bce + opts.kl_weight * kl_val
    if l2 and opts.weight_decay > 0:
        reg = (w**2).sum() + ((u**2).sum() if opts.pass_through else 0.0)
        loss = loss + 0.5 * opts.weight_decay * reg
    return loss, bce, kl_val


def scorer_objective(
    inst: Instances,
    rules: Proposal,
    w: torch.Tensor,
    u: torch.Tensor,
    b: torch.Tensor,
    opts: ScorerOptions,
    l2: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, BCE, KL term) of the client fit (module docstring): BCE mean over cells + λ·KL on the
    ``kl_scale`` (per_cell: Σ_t n_t KL_t / Σ_t n_t) + ½ δ (‖w‖² + ‖u‖²) when ``l2`` (L-BFGS; Adam applies δ as
    its own weight decay). ``w`` (T, J) masked weights, ``u`` (T,), ``b`` (T,); differentiable. The posterior
    is the one of :func:`posterior_of`, fused with the logits (the fit evaluates this many times)."""
    return _objective(_fit_terms(inst, rules, opts, w.dtype), rules, w, u, b, opts, l2)


def reference_objective(
    inst: Instances,
    rules: Proposal,
    w: torch.Tensor,
    u: torch.Tensor,
    b: torch.Tensor,
    opts: ScorerOptions,
) -> torch.Tensor:
    """The loss of :func:`scorer_objective` (with L2) assembled step by step from the per-equation functions of
    :mod:`.posterior` through :func:`posterior_of` — slower; the reference the fused objective is tested and
    benchmarked against (``bench/fednsl_scorer.py``)."""
    bce = _bce(_logits(inst, w, u, b, opts.pass_through), inst.y, inst.weight)
    q, n_post = posterior_of(inst, rules, w, b, opts)
    kl_t = kl_divergence(q, kl_prior(rules, opts).to(w.dtype), rules.mask, opts.kl_direction)
    active = n_post > 0
    if opts.kl_scale == "per_cell":
        n = inst.counts_per_triple(rules.num_heads).to(w.dtype)
        kl = (kl_t * active * n).sum() / n.sum().clamp_min(1e-12)
    else:
        kl = kl_t[active].mean() if bool(active.any()) else torch.zeros((), dtype=w.dtype)
    reg = (w**2).sum() + ((u**2).sum() if opts.pass_through else 0.0)
    return bce + opts.kl_weight * kl + 0.5 * opts.weight_decay * reg


@dataclass
class Recalibration:
    """Recalibration only (φ zeroed): the scorer's own fit of s_i = u_t·x_r(h, t) + b_t per triple — slope u (T,),
    bias b (T,), fitted (T,) bool — and one pooled (u, b) over all the client's cells (the fallback where no
    per-triple or published pair exists)."""

    slope: torch.Tensor
    intercept: torch.Tensor
    fitted: torch.Tensor
    pooled: tuple[float, float] = (1.0, 0.0)

    def logits(self, inst: Instances, per_triple: bool = True) -> torch.Tensor:
        """Logits (M,) float64: u_t·x + b_t where fitted (and ``per_triple``), else the pooled u·x + b."""
        x = inst.passthrough.double()
        pooled = self.pooled[0] * x + self.pooled[1]
        if not per_triple or len(inst) == 0:
            return pooled
        own = self.slope.double()[inst.tri] * x + self.intercept.double()[inst.tri]
        return torch.where(self.fitted[inst.tri], own, pooled)


def _passthrough_only(inst: Instances, tri: torch.Tensor) -> Instances:
    """The instances with φ zeroed (one empty body column) on triple ids ``tri``."""
    return Instances(torch.zeros(len(inst), 1), inst.passthrough, tri, inst.y, inst.weight)


def fit_recalibration(
    inst: Instances, rules: Proposal, opts: ScorerOptions, generator: torch.Generator | None = None
) -> Recalibration:
    """Recalibration-only baseline: :func:`fit_scorer` itself with φ zeroed and the pass-through feature on
    (s_i = u_t·x_r + b_t), the same BCE mean, the same ½δ‖u‖² (Eq. 2 without rules, hence without the KL of
    Eq. 11), the same optimizer, tolerance and bias start; plus one pooled (u, b) fitted the same way with every
    cell on one triple."""
    T = rules.num_heads
    fitted = inst.counts_per_triple(T) > 0
    if len(inst) == 0:
        return Recalibration(torch.ones(T, dtype=torch.float64), torch.zeros(T, dtype=torch.float64), fitted)
    gen = torch.Generator().manual_seed(0) if generator is None else generator
    ropts = dataclasses.replace(opts, pass_through=True, kl_weight=0.0)
    none = Proposal(
        rules.heads,
        torch.zeros(T, 1, rules.bodies.shape[2], dtype=rules.bodies.dtype),
        torch.zeros(T, 1, dtype=torch.float64),
        torch.zeros(T, 1, dtype=rules.counts.dtype),
        torch.zeros(T, 1, dtype=torch.bool),
    )
    per = fit_scorer(_passthrough_only(inst, inst.tri), none, ropts, gen)
    one = Proposal(none.heads[:1], none.bodies[:1], none.log_prior[:1], none.counts[:1], none.mask[:1])
    pooled = fit_scorer(_passthrough_only(inst, torch.zeros_like(inst.tri)), one, ropts, gen)
    u, b = per.passthrough.double(), per.bias.double()
    if not (bool(torch.isfinite(u).all()) and bool(torch.isfinite(b).all())):
        u, b = torch.nan_to_num(u), torch.nan_to_num(b)
    return Recalibration(u, b, fitted, (float(pooled.passthrough[0]), float(pooled.bias[0])))


def recalibration_logits(inst: Instances, slope: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Logits (M,) float64 of a published recalibration: u_t·x_r + b_t (the owners' mean (u_t, b_t))."""
    if len(inst) == 0:
        return torch.zeros(0, dtype=torch.float64)
    return slope.double()[inst.tri] * inst.passthrough.double() + bias.double()[inst.tri]


def published_logits(inst: Instances, weights: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Logits (M,) float64 of the owners' published scorer: Σ_j W_tj φ_ij + b_t (``transfer: published``)."""
    if len(inst) == 0:
        return torch.zeros(0, dtype=torch.float64)
    return (inst.phi.double() * weights.double()[inst.tri]).sum(-1) + bias.double()[inst.tri]


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


def fit_transfer(
    inst: Instances, rules: Proposal, opts: ScorerOptions, dist: torch.Tensor | None = None
) -> TransferScorer:
    """Fit (κ, κ_top, κ_u, β) by BCE with L-BFGS from (1, 0, 1, 0) (deterministic; no randomness). ``dist``
    (T, J): the distribution G over bodies (default: the KL prior of the round's rule set).

    The backbone's own value x_r keeps its term κ_u·x_r whatever ``pass_through`` says: with ``pass_through:
    false`` x_r reaches the per-triple scorer as the body [r], but here it would only count with the weight G_t of
    [r] inside κ·Σ_j G_tj φ_ij — diluted by the other bodies' evidence, which is what put the ``prior`` route
    below the backbone on unseen cells (issue 33)."""
    if len(inst) == 0:
        return TransferScorer()
    prior = kl_prior(rules, opts) if dist is None else dist.double()
    f = transfer_features(inst, prior, opts.transfer_top)
    X = torch.cat([f, inst.passthrough.double()[:, None]], 1)
    y = inst.y.double()
    wt = None if inst.weight is None else inst.weight.double()
    theta = torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64, requires_grad=True)
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
    return TransferScorer(float(k[0]), float(k[1]), float(k[2]), b)


def predict_logits(
    inst: Instances,
    rules: Proposal,
    fitted: FittedScorer | None,
    transfer: TransferScorer,
    opts: ScorerOptions,
    personalised: bool = True,
    dist: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logits (M,) float64: the fitted per-triple scorer where the triple was fitted (and ``personalised``),
    else the transfer scorer over ``dist`` (default: the KL prior of the round's rule set)."""
    prior = kl_prior(rules, opts) if dist is None else dist.double()
    f = transfer_features(inst, prior, opts.transfer_top)
    s_transfer = transfer.kappa * f[:, 0] + transfer.kappa_top * f[:, 1] + transfer.beta
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

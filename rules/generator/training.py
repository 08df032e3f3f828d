"""Eq. (6): teacher-forced training of T_θ on weighted chains from the server's rule pool
(:func:`train_generator`, LogiRE's MixRuleDataset sampling)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from kg.seeding import seeded_global_rng
from rules import progress
from rules.generator.config import GeneratorConfig
from rules.generator.constraints import TypeConstraints
from rules.generator.masks import _Validity, check_bodies
from rules.generator.model import RuleGenerator, _seed_from

if TYPE_CHECKING:  # pragma: no cover
    from rules.pool import RulePool


Chains = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def chain_sampling_probs(triples: torch.Tensor, weights: torch.Tensor, uniform_mix: float = 0.1) -> torch.Tensor:
    """Per-chain sampling probability (M,) of LogiRE's MixRuleDataset.

    P(chain m) = 1/T · [(1−u)·w_m / Σ_{m'∈t} w_{m'} + u / J_t] with t the chain's triple, T the number of
    distinct triples, J_t its number of chains, u = ``uniform_mix`` (LogiRE: 0.1).
    """
    if not 0.0 <= uniform_mix <= 1.0:
        raise ValueError(f"uniform_mix must be in [0, 1], got {uniform_mix}")
    w = weights.double()
    if (w < 0).any() or not torch.isfinite(w).all():
        raise ValueError("chain weights must be finite and >= 0")
    _, inv = torch.unique(triples, dim=0, return_inverse=True)
    t_count = int(inv.max()) + 1 if inv.numel() else 0
    total = torch.zeros(t_count, dtype=torch.float64, device=w.device).index_add_(0, inv, w)
    if (total <= 0).any():
        raise ValueError("every triple needs a positive total chain weight")
    j = torch.bincount(inv, minlength=t_count).double()
    return ((1 - uniform_mix) * w / total[inv] + uniform_mix / j[inv]) / t_count


def train_generator(
    model: RuleGenerator,
    pool_or_chains: RulePool | Chains,
    epochs: int = 50,
    batch_size: int = 32,
    lr: float = 1e-3,
    samples_per_epoch: int = 100_000,
    generator: torch.Generator | None = None,
    *,
    uniform_mix: float = 0.1,
    lr_gamma: float = 0.9,
    constraints: TypeConstraints | None = None,
) -> list[float]:
    """Eq. (6): fit T_θ to the rule pool by teacher-forced cross-entropy; returns the mean loss of each epoch.

    ``pool_or_chains``: a ``RulePool`` or (triples (M,3), bodies (M,L), weights (M,)). Each epoch draws
    ``samples_per_epoch`` chains with replacement from ``chain_sampling_probs`` (LogiRE MixRuleDataset) and runs
    Adam(lr) over batches; StepLR(step 1, ``lr_gamma``) per epoch (LogiRE: lr 1e-3, γ 0.9, batch 32, 100k/epoch).
    ``generator`` (default seed 0) drives both the chain sampling and dropout (via a forked, seeded RNG, so the
    global RNG state is unchanged). With ``constraints`` the loss uses the masked distribution; chains that
    violate it raise.
    """
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    c = model.config
    device = next(model.parameters()).device
    if hasattr(pool_or_chains, "chains"):
        triples, bodies, weights = pool_or_chains.chains()  # type: ignore[union-attr]
    else:
        triples, bodies, weights = pool_or_chains
    triples = torch.as_tensor(triples, dtype=torch.long)
    bodies = torch.as_tensor(bodies, dtype=torch.long)
    weights = torch.as_tensor(weights)
    if triples.shape[0] == 0:
        raise ValueError("train_generator: the rule pool is empty")
    if bodies.shape != (triples.shape[0], c.max_body_len) or weights.shape != (triples.shape[0],):
        raise ValueError(
            f"chains must be triples (M,3), bodies (M,{c.max_body_len}), weights (M,); got "
            f"{tuple(triples.shape)}, {tuple(bodies.shape)}, {tuple(weights.shape)}"
        )
    bad = ~check_bodies(bodies, c.num_relations)
    if bad.any():
        raise ValueError(f"{int(bad.sum())} malformed bodies in the training chains, e.g. {bodies[bad][0].tolist()}")
    model._check_triples(triples)
    if constraints is not None:
        with torch.no_grad():
            ok = _constraint_ok(triples, bodies, c, constraints)
        if not ok.all():
            raise ValueError(
                f"{int((~ok).sum())} training chains violate the type constraints, e.g. "
                f"triple {triples[~ok][0].tolist()} body {bodies[~ok][0].tolist()}"
            )
        constraints = constraints.to(device)
    probs = chain_sampling_probs(triples, weights, uniform_mix)
    triples, bodies = triples.to(device), bodies.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=lr_gamma)
    losses: list[float] = []
    was_training = model.training
    model.train()
    fork_devices = [device] if device.type == "cuda" else []
    steps = epochs * -(-samples_per_epoch // batch_size)
    try:
        with (
            seeded_global_rng(_seed_from(generator), fork_devices),
            progress.bar(steps, "rule generator", "batch") as pb,
        ):
            for epoch in range(epochs):
                idx = _multinomial(probs, samples_per_epoch, generator).to(device)
                total, batches = 0.0, 0
                for start in range(0, samples_per_epoch, batch_size):
                    b = idx[start : start + batch_size]
                    loss = model.loss(triples[b], bodies[b], constraints)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    total += float(loss.detach())
                    batches += 1
                    pb.update(1)
                    pb.set_postfix_str(f"epoch {epoch + 1}/{epochs} loss {total / batches:.3f}", refresh=False)
                losses.append(total / max(batches, 1))
                sched.step()
    finally:
        model.train(was_training)
    return losses


def _multinomial(probs: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """n indices with replacement ∝ probs (works beyond torch.multinomial's 2^24 category limit)."""
    cdf = torch.cumsum(probs.double().cpu(), 0)
    u = torch.rand(n, generator=generator, device=generator.device, dtype=torch.float64).cpu() * cdf[-1]
    return torch.searchsorted(cdf, u, right=True).clamp_(max=probs.shape[0] - 1)


def _constraint_ok(
    triples: torch.Tensor, bodies: torch.Tensor, c: GeneratorConfig, tc: TypeConstraints
) -> torch.Tensor:
    state = _Validity(triples, c.max_body_len, c.num_relations, tc)
    ok = torch.ones(triples.shape[0], dtype=torch.bool)
    for k in range(c.max_body_len):
        allow = state.mask()
        ok &= allow.gather(1, bodies[:, k : k + 1]).squeeze(1)
        state.advance(bodies[:, k])
    return ok


def num_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)

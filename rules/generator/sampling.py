"""Eq. (5): all T×N ancestral samples at once (:func:`sample_rules`), reduced to unique bodies with
log T_θ(body | triple) and multiplicities n_j (:class:`SampledRules`)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from rules.generator.constraints import TypeConstraints
from rules.generator.masks import _Validity
from rules.generator.model import RuleGenerator


@dataclass
class SampledRules:
    """Multinomial rule distribution Mu_θ(N, T_θ(·|t)) per triple (Eq. 5), padded to Jmax bodies.

    bodies (T, Jmax, L) int64 padded with stay; log_prior (T, Jmax) log T_θ(body|t) (−inf where masked);
    counts (T, Jmax) int64 multiplicities n_j (Σ_j n_j = N for every completable triple); mask (T, Jmax) bool.
    Within a triple, bodies are ordered by count (descending), then lexicographically.
    ``uncompletable``: indices of triples for which no type-consistent body exists (they get no bodies).
    """

    bodies: torch.Tensor
    log_prior: torch.Tensor
    counts: torch.Tensor
    mask: torch.Tensor
    uncompletable: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))

    @property
    def num_triples(self) -> int:
        return self.bodies.shape[0]

    def per_triple(self) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """[(bodies (J_t, L), log_prior (J_t,), counts (J_t,))] for every triple t (J_t may be 0)."""
        out = []
        for t in range(self.num_triples):
            m = self.mask[t]
            out.append((self.bodies[t][m], self.log_prior[t][m], self.counts[t][m]))
        return out

    def to(self, device: torch.device | str) -> SampledRules:
        return SampledRules(
            *(getattr(self, f).to(device) for f in ("bodies", "log_prior", "counts", "mask", "uncompletable"))
        )


def _gumbel(shape: tuple[int, ...], generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """Gumbel(0,1) noise drawn on the generator's device (so results do not depend on the model's device)."""
    u = torch.rand(shape, generator=generator, device=generator.device).clamp_(min=torch.finfo(torch.float32).tiny)
    return (-torch.log(-torch.log(u))).to(device)


def _prepare_triples(model: RuleGenerator, triples: torch.Tensor | Sequence[Sequence[int]]) -> torch.Tensor:
    device = next(model.parameters()).device
    t = torch.as_tensor(triples, dtype=torch.long, device=device)
    if t.numel() == 0:
        t = t.reshape(0, 3)
    model._check_triples(t)
    return t


def _finish(
    row_triple: torch.Tensor,
    bodies: torch.Tensor,
    logp: torch.Tensor,
    num_triples: int,
    num_samples: int,
    pad: int,
    uncompletable: torch.Tensor,
) -> SampledRules:
    """Reduce N samples per triple to unique bodies with counts and log-prior (vectorised)."""
    device = bodies.device
    length = bodies.shape[1]
    keep = ~torch.isin(row_triple, uncompletable)
    row_triple, bodies, logp = row_triple[keep], bodies[keep], logp[keep]
    key = torch.cat([row_triple[:, None], bodies], 1)
    if key.shape[0]:
        uniq, inv, cnt = torch.unique(key, dim=0, return_inverse=True, return_counts=True)  # sorted by (t, body)
    else:
        uniq, inv, cnt = (
            key,
            torch.zeros(0, dtype=torch.long, device=device),
            torch.zeros(0, dtype=torch.long, device=device),
        )
    u_logp = torch.zeros(uniq.shape[0], dtype=logp.dtype, device=device).scatter_(0, inv, logp)
    tri = uniq[:, 0]
    order = torch.sort(tri * (num_samples + 1) + (num_samples - cnt), stable=True).indices
    uniq, cnt, u_logp, tri = uniq[order], cnt[order], u_logp[order], tri[order]
    per = torch.bincount(tri, minlength=num_triples)
    jmax = int(per.max()) if per.numel() else 0
    start = torch.cumsum(per, 0) - per
    pos = torch.arange(tri.shape[0], device=device) - start[tri]
    out_b = torch.full((num_triples, jmax, length), pad, dtype=torch.long, device=device)
    out_lp = torch.full((num_triples, jmax), float("-inf"), dtype=logp.dtype, device=device)
    out_c = torch.zeros(num_triples, jmax, dtype=torch.long, device=device)
    out_m = torch.zeros(num_triples, jmax, dtype=torch.bool, device=device)
    out_b[tri, pos] = uniq[:, 1:]
    out_lp[tri, pos] = u_logp
    out_c[tri, pos] = cnt
    out_m[tri, pos] = True
    return SampledRules(out_b, out_lp, out_c, out_m, uncompletable.cpu())


def _report_uncompletable(triples: torch.Tensor, idx: torch.Tensor) -> None:
    if idx.numel():
        rows = triples[idx].tolist()
        warnings.warn(
            f"{len(rows)} triple(s) admit no type-consistent body of length <= L and get no bodies: "
            f"(relation, head type, tail type) = {rows[:10]}{' …' if len(rows) > 10 else ''}",
            stacklevel=3,
        )


@torch.no_grad()
def sample_rules(
    model: RuleGenerator,
    triples: torch.Tensor | Sequence[Sequence[int]],
    num_samples: int = 50,
    generator: torch.Generator | None = None,
    constraints: TypeConstraints | None = None,
) -> SampledRules:
    """Eq. (5): N ancestral samples per triple for ALL triples at once → unique bodies, log-prior, counts.

    One decoder position per step over the *distinct* (triple, prefix) rows only (all N samples of a triple share
    the empty prefix, most share short prefixes), with cross-attention keys/values computed once per triple and
    self-attention keys/values reused from the prefix row (``RuleGenerator.decode_step``).
    Tokens are drawn by Gumbel-max from the masked log-softmax with noise of shape (T, N, V) per step taken from
    ``generator`` (default: seed 0) → deterministic, and identical to ``sample_rules_reference``.
    The model is put in eval mode for sampling and its previous mode restored.
    """
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    c = model.config
    tri = _prepare_triples(model, triples)
    t_count, n, length, v = tri.shape[0], num_samples, c.max_body_len, c.vocab_size
    device = tri.device
    if t_count == 0:
        empty = torch.zeros(0, dtype=torch.long, device=device)
        return _finish(empty, empty.reshape(0, length), empty.float(), 0, n, c.pad, empty)
    was_training = model.training
    model.eval()
    try:
        cache = model.init_cache(model.encode(tri))
        row_triple = torch.arange(t_count, device=device).repeat_interleave(n)
        state = _Validity(tri[row_triple], length, c.num_relations, constraints)
        tokens = torch.zeros(t_count * n, 0, dtype=torch.long, device=device)
        logp = torch.zeros(t_count * n, device=device)
        uncompletable = torch.zeros(0, dtype=torch.long, device=device)
        prev_inv: torch.Tensor | None = None
        for step in range(length):
            allow = state.mask()
            if step == 0:
                dead = ~allow.any(1)
                uncompletable = torch.unique(row_triple[dead])
                allow[dead, c.pad] = True
            # distinct (triple, prefix) rows; each extends the cached row of its prefix without the last token
            key = torch.cat([row_triple[:, None], tokens], 1)
            uniq, inv = torch.unique(key, dim=0, return_inverse=True)
            parent = None
            if prev_inv is not None:
                parent = torch.empty(uniq.shape[0], dtype=torch.long, device=device).scatter_(0, inv, prev_inv)
            last = uniq[:, -1] if step > 0 else None
            logits_u, cache = model.decode_step(cache, parent, uniq[:, 0], last)
            logits = logits_u[inv]
            prev_inv = inv
            step_lp = torch.log_softmax(logits.float().masked_fill(~allow, float("-inf")), dim=-1)
            noise = _gumbel((t_count, n, v), generator, device).view(-1, v)
            choice = (step_lp + noise).argmax(-1)
            if not bool(allow.gather(1, choice[:, None]).all()):
                raise RuntimeError("sample_rules drew a masked token; this is a bug")
            logp = logp + step_lp.gather(1, choice[:, None]).squeeze(1)
            tokens = torch.cat([tokens, choice[:, None]], 1)
            state.advance(choice)
    finally:
        model.train(was_training)
    _report_uncompletable(tri, uncompletable)
    return _finish(row_triple, tokens, logp, t_count, n, c.pad, uncompletable)

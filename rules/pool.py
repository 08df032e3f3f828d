"""The server's rule-chain pool (spec §2 step 5, §8.8–8.9): per triple a probability distribution over bodies.

Bodies are stored unpadded as tuples of real tokens (c < 2R); ``chains()`` pads them with the stay token 2R to
length L for ``rules.generator.train_generator``. A triple is (head relation, head type, tail type).

- Round 0 (§8.8): ``RulePool.from_distributions`` with the clients' uploaded co-occurrence distributions,
  aggregated by ``aggregate_distributions`` (§8.9: union of bodies, clients weighted by their number of local
  instances of the triple).
- Later rounds: ``update(posteriors, mode, ratio)``
  * "momentum" — LogiRE ``ERuleDataset.update``: for every body of the posterior q,
    p ← (1−ρ)·p + ρ·q if it is in the pool, p ← ρ·q if new; every pool body absent from q: p ← (1−ρ)·p
    (ρ = 0.1 in LogiRE). Since p and q each sum to 1, the result sums to 1.
  * "mixture" — App. A.10 "inclusion ratio ρ of posterior samples" (and §"the server samples new data from
    these probabilities"): the server draws ``num_samples`` chains per triple from q, and the pool becomes
    (1−ρ)·p + ρ·q̂ with q̂ the empirical distribution of those samples; ρ ∈ [0.1, 0.9] in the paper's sweep.
  Choices where LogiRE is silent or breaks (documented deviations): a triple with no posterior (no client had
  an instance) is left unchanged (LogiRE would scale it to total 1−ρ); a triple new to the pool takes q itself;
  zero-probability posterior bodies are ignored (LogiRE's posteriors are sample counts, never zero).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import torch

__all__ = ["Triple", "Body", "RulePool", "aggregate_distributions", "distributions_from_padded", "canonical_body"]

Triple = tuple[int, int, int]
Body = tuple[int, ...]
Distribution = Mapping[Body, float]


def canonical_body(body: Iterable[int], num_relations: int, max_body_len: int) -> Body:
    """Strip trailing stay tokens and validate: 1..L real tokens in [0, 2R), nothing after a pad."""
    pad = 2 * num_relations
    toks = [int(x) for x in body]
    while toks and toks[-1] == pad:
        toks.pop()
    if not toks or len(toks) > max_body_len or any(not 0 <= x < pad for x in toks):
        raise ValueError(f"malformed rule body {list(body)} (R={num_relations}, L={max_body_len})")
    return tuple(toks)


def _canonical_triple(triple: Iterable[int]) -> Triple:
    t = tuple(int(x) for x in triple)
    if len(t) != 3:
        raise ValueError(f"a triple is (relation, head type, tail type), got {t}")
    return t


def _normalised(dist: Distribution, num_relations: int, max_body_len: int, what: str) -> dict[Body, float]:
    out: dict[Body, float] = {}
    for body, p in dist.items():
        p = float(p)
        if not p >= 0 or p == float("inf"):
            raise ValueError(f"{what}: probability of body {body} must be finite and >= 0, got {p}")
        if p > 0:
            b = canonical_body(body, num_relations, max_body_len)
            out[b] = out.get(b, 0.0) + p
    total = sum(out.values())
    return {b: p / total for b, p in sorted(out.items())} if total > 0 else {}


def aggregate_distributions(
    dists: Sequence[Mapping[Triple, Distribution]],
    weights: Sequence[Mapping[Triple, float]] | None = None,
) -> dict[Triple, dict[Body, float]]:
    """Weighted average of per-triple body distributions over clients (spec §8.9), union of bodies.

    q_t(b) = Σ_i ω_{i,t} q_{i,t}(b) / Σ_i ω_{i,t}, ω_{i,t} = ``weights[i][t]`` (e.g. client i's number of local
    instances of triple t; default 1). Each client distribution is normalised first; clients with ω = 0 or an
    empty distribution for t are skipped.
    """
    if weights is not None and len(weights) != len(dists):
        raise ValueError(f"aggregate_distributions: {len(dists)} distributions but {len(weights)} weight maps")
    acc: dict[Triple, dict[Body, float]] = {}
    wsum: dict[Triple, float] = {}
    for i, client in enumerate(dists):
        for triple, dist in client.items():
            t = _canonical_triple(triple)
            w = 1.0 if weights is None else float(weights[i].get(t, weights[i].get(triple, 0.0)))
            if w < 0:
                raise ValueError(f"aggregate_distributions: negative weight {w} for client {i}, triple {t}")
            total = sum(float(p) for p in dist.values())
            if w == 0 or total <= 0:
                continue
            slot = acc.setdefault(t, {})
            for body, p in dist.items():
                body_t = tuple(int(x) for x in body)
                slot[body_t] = slot.get(body_t, 0.0) + w * float(p) / total
            wsum[t] = wsum.get(t, 0.0) + w
    return {t: {b: p / wsum[t] for b, p in sorted(acc[t].items())} for t in sorted(acc)}


def distributions_from_padded(
    triples: torch.Tensor, bodies: torch.Tensor, probs: torch.Tensor, mask: torch.Tensor | None = None
) -> dict[Triple, dict[Body, float]]:
    """Padded tensors (T,3), (T,J,L), (T,J), mask (T,J) → {triple: {unpadded body: prob}} (raw, unnormalised).

    Bodies are kept with their padding here; ``RulePool`` strips it (``canonical_body``).
    """
    if mask is None:
        mask = torch.ones(probs.shape, dtype=torch.bool)
    out: dict[Triple, dict[Body, float]] = {}
    for t, b, p, m in zip(triples.tolist(), bodies.tolist(), probs.tolist(), mask.tolist()):
        d = out.setdefault(_canonical_triple(t), {})
        for body, prob, keep in zip(b, p, m):
            if keep:
                d[tuple(body)] = d.get(tuple(body), 0.0) + float(prob)
    return out


class RulePool:
    """Per-triple distributions over rule bodies: the server's training pool for the generator (Eq. 6)."""

    def __init__(self, num_relations: int, max_body_len: int = 3) -> None:
        if num_relations < 1 or max_body_len < 1:
            raise ValueError(
                f"RulePool needs num_relations >= 1 and max_body_len >= 1, got {num_relations}, {max_body_len}"
            )
        self.num_relations = num_relations
        self.max_body_len = max_body_len
        self._dist: dict[Triple, dict[Body, float]] = {}

    # ---- construction ----------------------------------------------------------------------------------------
    @classmethod
    def from_distributions(
        cls, dists: Mapping[Triple, Distribution], num_relations: int, max_body_len: int = 3
    ) -> RulePool:
        """Pool from per-triple body distributions (e.g. aggregated round-0 co-occurrence uploads); normalised."""
        pool = cls(num_relations, max_body_len)
        for triple, dist in dists.items():
            t = _canonical_triple(triple)
            d = _normalised(dist, num_relations, max_body_len, f"triple {t}")
            if d:
                pool._dist[t] = d
        return pool

    # ---- access ----------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._dist)

    def __contains__(self, triple: object) -> bool:
        return triple in self._dist

    @property
    def triples(self) -> list[Triple]:
        """Triples held, sorted."""
        return sorted(self._dist)

    @property
    def num_chains(self) -> int:
        return sum(len(d) for d in self._dist.values())

    def distribution(self, triple: Triple) -> dict[Body, float]:
        """A copy of the body distribution of ``triple`` (sums to 1)."""
        return dict(self._dist[_canonical_triple(triple)])

    def distributions(self) -> dict[Triple, dict[Body, float]]:
        return {t: dict(self._dist[t]) for t in self.triples}

    def chains(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Training chains: triples (M,3) int64, bodies (M,L) int64 padded with 2R, weights (M,) float64.

        Weights are the pool probabilities p(body | triple) (they sum to 1 within each triple). Order: triples
        sorted, bodies sorted within a triple.
        """
        pad = 2 * self.num_relations
        trip, bods, wts = [], [], []
        for t in self.triples:
            for body, p in sorted(self._dist[t].items()):
                trip.append(t)
                bods.append(list(body) + [pad] * (self.max_body_len - len(body)))
                wts.append(p)
        return (
            torch.tensor(trip, dtype=torch.long).reshape(-1, 3),
            torch.tensor(bods, dtype=torch.long).reshape(-1, self.max_body_len),
            torch.tensor(wts, dtype=torch.float64),
        )

    # ---- updates ---------------------------------------------------------------------------------------------
    def update(
        self,
        posteriors: Mapping[Triple, Distribution],
        mode: Literal["momentum", "mixture"] = "momentum",
        ratio: float = 0.1,
        *,
        num_samples: int | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        """Mix aggregated client posteriors q into the pool (see module docstring for the two modes).

        ``num_samples`` and ``generator`` are needed by mode="mixture" only (samples drawn per triple).
        """
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"RulePool.update: ratio must be in [0, 1], got {ratio}")
        if mode == "mixture":
            if num_samples is None or num_samples < 1 or generator is None:
                raise ValueError("RulePool.update(mode='mixture') needs num_samples >= 1 and a torch.Generator")
        elif mode != "momentum":
            raise ValueError(f"RulePool.update: mode must be 'momentum' or 'mixture', got {mode!r}")
        canon = {_canonical_triple(t): d for t, d in posteriors.items()}
        for t in sorted(canon):
            q = _normalised(canon[t], self.num_relations, self.max_body_len, f"posterior of triple {t}")
            if not q:
                continue
            if mode == "mixture":
                q = self._sample_empirical(q, num_samples, generator)  # type: ignore[arg-type]
            old = self._dist.get(t)
            if old is None:
                self._dist[t] = q
                continue
            new = {b: (1.0 - ratio) * p for b, p in old.items()}
            for b, qb in q.items():
                new[b] = new.get(b, 0.0) + ratio * qb
            self._dist[t] = {b: p for b, p in sorted(new.items()) if p > 0}

    @staticmethod
    def _sample_empirical(q: dict[Body, float], n: int, generator: torch.Generator) -> dict[Body, float]:
        bodies = list(q)
        probs = torch.tensor([q[b] for b in bodies], dtype=torch.float64)
        draws = torch.multinomial(probs, n, replacement=True, generator=generator)
        counts = torch.bincount(draws, minlength=len(bodies)).tolist()
        return {b: c / n for b, c in zip(bodies, counts) if c > 0}

    # ---- checkpoints -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Tensors + ints only (loadable with ``torch.load(weights_only=True)``)."""
        triples, bodies, weights = self.chains()
        return {
            "num_relations": self.num_relations,
            "max_body_len": self.max_body_len,
            "triples": triples,
            "bodies": bodies,
            "weights": weights,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replace the pool's contents with ``state`` (from ``state_dict``); weights are restored exactly."""
        self.num_relations = int(state["num_relations"])
        self.max_body_len = int(state["max_body_len"])
        self._dist = {}
        for t, b, w in zip(state["triples"].tolist(), state["bodies"].tolist(), state["weights"].tolist()):
            body = canonical_body(b, self.num_relations, self.max_body_len)
            self._dist.setdefault(_canonical_triple(t), {})[body] = float(w)

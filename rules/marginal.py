"""What each rule explains beyond the rules above it: the order in which rule lists are read.

A KG rule ``q(X, Y) <- body`` *explains* a training fact ``q(h, t)`` when a ``body`` walk leads from ``h`` to ``t``
on the training graph without the fact itself (leave-one-out: a body never explains a fact through the fact's
own edge). Its confidence ``c_j`` is the share of (query, candidate) pairs it reaches, on the same walks, whose
candidate is a known answer of the query (AMIE's standard confidence counted over the head's training queries).

Rules that fire on the same evidence explain the same facts (SAFRAN's redundancy: Ott, Meilicke, Samwald 2021).
:func:`marginal_order` ranks them greedily by their noisy-OR marginal gain: with ``ρ_f`` the probability that
fact ``f`` is still unexplained by the rules picked so far (``ρ_f = Π_k (1 − c_k · hit_kf)``), the next rule is

    j* = argmax_j  c_j · Σ_f hit_jf · ρ_f,

the expected number of facts it newly explains; shorter bodies first among equal gains (within
:data:`EQUAL_GAIN` of the best), then the caller's tie key (e.g. the posterior). A rule that only repeats what is
above it gains (almost) nothing and sinks, however probable the generator found it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from kg.grounding.sparse import SparseGraph

__all__ = ["EQUAL_GAIN", "Contribution", "contributions", "marginal_order", "rule_hits"]

#: gains within this share of the best count as equal, and the shortest body among them goes first (Occam: a
#: longer body that explains 1 % more facts through a detour does not outrank the textbook rule)
EQUAL_GAIN = 0.05


@dataclass(frozen=True)
class Contribution:
    """Per body j (the caller's order): ``gain[j]`` facts it newly explains when its turn comes (noisy-OR,
    0 when it adds nothing), ``hits[j]`` facts it explains alone, ``confidence[j]`` its leave-one-out
    confidence; ``order`` the reading order; ``facts`` the training facts counted."""

    order: tuple[int, ...]  # every body: by tier, then by gain (greedy), then those without gain by ``tie``
    gain: np.ndarray
    hits: np.ndarray
    confidence: np.ndarray
    facts: int


def rule_hits(
    graph: SparseGraph, head: int, bodies: Sequence[Sequence[int]], facts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(hit, correct, reached)`` of each body j over the training ``facts`` (n, 2) [h, t] of ``head`` (a query
    relation 0..2R-1; an inverse head leaves out the forward edge it mirrors), each fact (h, head, t) left out
    of the graph while its row is walked: hit (J, n) bool, whether body j leads from h to t; reached (J,) the
    (query, candidate) pairs it reaches; correct (J,) those whose candidate is a known answer of the query
    (any of the facts' tails for that h), summed over the facts: correct / reached is AMIE's standard
    confidence counted on the training queries, without the fact a query asks about."""
    facts = np.asarray(facts, dtype=np.int64).reshape(-1, 2)
    R, E = graph.num_relations, graph.num_entities
    J, n = len(bodies), facts.shape[0]
    hit = np.zeros((J, n), dtype=bool)
    correct = np.zeros(J, dtype=np.int64)
    reached = np.zeros(J, dtype=np.int64)
    if J == 0 or n == 0:
        return hit, correct, reached
    if head < R:
        exclude = np.stack([facts[:, 0], np.full(n, head), facts[:, 1]], axis=1)
    else:
        exclude = np.stack([facts[:, 1], np.full(n, head - R), facts[:, 0]], axis=1)
    # known[i, x]: x answers the query (facts[i, 0], head), as sorted keys i·E + x
    starts, row_of = np.unique(facts[:, 0], return_inverse=True)
    answers = sp.csr_matrix((np.ones(n), (row_of, facts[:, 1])), shape=(starts.size, E))
    known = answers[row_of].tocoo()
    known_keys = np.unique(known.row.astype(np.int64) * E + known.col)
    # all bodies in one call where they are batched (small dense graphs), else one body's entries at a time
    step = J if graph.stacks_bodies else 1
    for lo in range(0, J, step):
        paths = graph.path_entries(bodies[lo : lo + step], facts[:, 0], exclude)
        body = paths.body + lo
        at_answer = paths.col == facts[paths.row, 1]
        hit[body[at_answer], paths.row[at_answer]] = True
        reached += np.bincount(body, minlength=J)
        keys = paths.row * E + paths.col
        pos = np.searchsorted(known_keys, keys).clip(max=max(known_keys.size - 1, 0))
        is_known = (known_keys[pos] == keys) if known_keys.size else np.zeros(keys.size, dtype=bool)
        correct += np.bincount(body[is_known], minlength=J)
    return hit, correct, reached


def marginal_order(
    hit: np.ndarray,
    confidence: np.ndarray,
    lengths: Sequence[int],
    tie: Sequence[float] | None = None,
    tiers: Sequence[int] | None = None,
) -> Contribution:
    """Greedy noisy-OR order of the module doc. hit (J, n) bool; confidence (J,) in [0, 1]; lengths (J,) body
        lengths; tie (J,) larger first among equal gains and lengths (default: the input order); tiers (J,) listed
        lowest tier first (e.g. 1 for detours, 2 for head-using rules), each tier's rules ranked by what they add to
        the rules of the tiers above. Within a tier, the rules that add nothing follow the others, by ``tie``; after
    ``max_picks`` greedy picks the rest follow by ``tie`` too (their gain left 0)."""
    hit = np.asarray(hit, dtype=bool)
    conf = np.clip(np.asarray(confidence, dtype=np.float64), 0.0, 1.0)
    J, n = hit.shape
    tie_key = np.zeros(J) if tie is None else np.asarray(tie, dtype=np.float64)
    tier = np.zeros(J, dtype=np.int64) if tiers is None else np.asarray(tiers, dtype=np.int64)
    H = hit.astype(np.float64)
    residual = np.ones(n)
    gain = np.zeros(J)
    order: list[int] = []
    for level in np.unique(tier).tolist():
        left = tier == level
        while left.any():
            g = np.where(left, conf * (H @ residual), 0.0)
            best = float(g.max())
            if best <= 1e-9:
                break
            near = np.flatnonzero(left & (g >= best * (1 - EQUAL_GAIN)))
            j = int(min(near.tolist(), key=lambda k: (int(lengths[k]), -float(tie_key[k]), k)))
            order.append(j)
            gain[j] = g[j]
            left[j] = False
            residual *= 1.0 - conf[j] * H[j]
        order += sorted(np.flatnonzero(left).tolist(), key=lambda k: (-float(tie_key[k]), int(lengths[k]), k))
    return Contribution(tuple(order), gain, hit.sum(1), conf, n)


def contributions(
    graph: SparseGraph,
    head: int,
    bodies: Sequence[Sequence[int]],
    facts: np.ndarray,
    *,
    max_facts: int | None = 2000,
    seed: int = 0,
    tie: Sequence[float] | None = None,
    tiers: Sequence[int] | None = None,
) -> Contribution:
    """:func:`marginal_order` of ``bodies`` for ``head`` on the training ``facts`` (n, 2) [h, t] (at most
    ``max_facts`` of them, sampled with ``seed``), confidences from the same leave-one-out walks."""
    facts = np.asarray(facts, dtype=np.int64).reshape(-1, 2)
    if max_facts is not None and facts.shape[0] > max_facts:
        pick = np.sort(np.random.default_rng(seed).choice(facts.shape[0], size=max_facts, replace=False))
        facts = facts[pick]
    hit, correct, reached = rule_hits(graph, head, bodies, facts)
    confidence = correct / np.maximum(reached, 1)
    return marginal_order(hit, confidence, [len(b) for b in bodies], tie, tiers)

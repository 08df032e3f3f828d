"""rules.marginal: leave-one-out hits and confidences against brute-force path enumeration, and the greedy
noisy-OR order against an exhaustive recomputation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kg.grounding.sparse import SparseGraph
from rules.marginal import EQUAL_GAIN, contributions, marginal_order, rule_hits


def _walks(triples: set[tuple[int, int, int]], R: int, body: tuple[int, ...], h: int, E: int) -> set[int]:
    """Entities reached from h along body by enumerating every path (tokens >= R walk an edge backwards)."""
    frontier = {h}
    for tok in body:
        nxt = set()
        for u in frontier:
            for v in range(E):
                if (tok < R and (u, tok, v) in triples) or (tok >= R and (v, tok - R, u) in triples):
                    nxt.add(v)
        frontier = nxt
    return frontier


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("max_batch_bytes", [256 << 20, 1 << 12])  # bodies batched densely, then one by one
def test_hits_and_confidence_match_path_enumeration(seed: int, max_batch_bytes: int) -> None:
    rng = np.random.default_rng(seed)
    E, R = 9, 3
    triples = np.unique(np.stack([rng.integers(0, E, 40), rng.integers(0, R, 40), rng.integers(0, E, 40)], 1), axis=0)
    graph = SparseGraph.from_triples(triples, E, R, max_batch_bytes=max_batch_bytes)
    assert graph.stacks_bodies == (max_batch_bytes > 1 << 12)
    bodies = [b for L in (1, 2) for b in itertools.product(range(2 * R), repeat=L)][:30]
    head = 1
    facts = triples[triples[:, 1] == head][:, [0, 2]]
    hit, correct, reached = rule_hits(graph, head, bodies, facts)
    every = {tuple(int(x) for x in t) for t in triples}
    answers = {(int(h), int(t)) for h, t in facts}
    for j, body in enumerate(bodies):
        want_hit, want_correct, want_reached = [], 0, 0
        for h, t in facts.tolist():
            kept = every - {(h, head, t)}  # the fact left out while its own query is walked
            ends = _walks(kept, R, body, h, E)
            want_hit.append(t in ends)
            want_reached += len(ends)
            want_correct += sum((h, x) in answers for x in ends)
        assert hit[j].tolist() == want_hit, body
        assert (correct[j], reached[j]) == (want_correct, want_reached), body
    # an inverse head (queries (t, ~head) answered by h) leaves out the forward fact (h, head, t) it mirrors
    hit_inv, _, _ = rule_hits(graph, head + R, bodies, facts[:, ::-1])
    for j, body in enumerate(bodies):
        want = [h in _walks(every - {(h, head, t)}, R, body, t, E) for h, t in facts.tolist()]
        assert hit_inv[j].tolist() == want, body


def _brute_order(hit: np.ndarray, conf: np.ndarray, lengths: list[int]) -> list[int]:
    order: list[int] = []
    left = list(range(len(conf)))
    while left:

        def gain(j: int) -> float:
            residual = np.prod([1 - conf[k] * hit[k] for k in order], axis=0) if order else np.ones(hit.shape[1])
            return float(conf[j] * (hit[j] * residual).sum())

        gains = {j: gain(j) for j in left}
        best = max(gains.values())
        if best <= 1e-9:
            break
        near = [j for j in left if gains[j] >= best * (1 - EQUAL_GAIN)]
        j = min(near, key=lambda k: (lengths[k], k))
        order.append(j)
        left.remove(j)
    return order + left


@pytest.mark.parametrize("seed", range(5))
def test_greedy_order_matches_exhaustive_recomputation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    hit = rng.random((8, 30)) < 0.3
    hit[7] = False  # explains nothing: last
    conf = rng.random(8)
    lengths = rng.integers(1, 4, 8).tolist()
    c = marginal_order(hit, conf, lengths)
    assert list(c.order) == _brute_order(hit, conf, lengths)
    assert c.order[-1] == 7 and c.gain[7] == 0
    assert np.isclose(c.gain.sum(), (1 - np.prod(1 - conf[:, None] * hit, axis=0)).sum())  # noisy-OR adds up


def test_a_redundant_copy_sinks_and_the_shorter_rule_wins_near_ties() -> None:
    hit = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 0], [0, 0, 0, 0, 1], [1, 1, 1, 1, 1]], dtype=bool)
    conf = np.array([1.0, 1.0, 0.5, 0.99])
    c = marginal_order(hit, conf, [3, 1, 2, 3], tie=[0.9, 0.1, 0.5, 0.0])
    # body 3 explains 4.95 facts, body 1 (length 1) 4 — not within EQUAL_GAIN, so body 3 first; then the rest
    assert c.order[0] == 3
    c = marginal_order(hit[:3], conf[:3], [3, 1, 2], tie=[0.9, 0.1, 0.5])
    assert c.order[0] == 1 and c.gain[0] == 0 and c.order[-1] == 0  # equal gains: the shorter; its copy adds 0
    tiered = marginal_order(hit[:3], conf[:3], [3, 1, 2], tiers=[0, 1, 0])
    assert tiered.order[:2] == (0, 2)  # a later tier comes after, whatever it explains


def test_contributions_samples_facts_with_the_seed() -> None:
    rng = np.random.default_rng(0)
    triples = np.unique(
        np.stack([rng.integers(0, 30, 300), rng.integers(0, 2, 300), rng.integers(0, 30, 300)], 1), axis=0
    )
    graph = SparseGraph.from_triples(triples, 30, 2)
    facts = triples[triples[:, 1] == 0][:, [0, 2]]
    a = contributions(graph, 0, [(1,), (2,), (1, 3)], facts, max_facts=20, seed=3)
    b = contributions(graph, 0, [(1,), (2,), (1, 3)], facts, max_facts=20, seed=3)
    assert a.facts == 20 and a.order == b.order and np.array_equal(a.gain, b.gain)

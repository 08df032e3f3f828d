"""Rules with constants: mined counts and firing against a brute-force enumeration over the triples."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from kg.grounding.sparse import SparseGraph
from rules.kg_constant_rules import mine_constant_rules
from rules.kg_mining import directed_triples
from rules.kg_predictor import PredictorConfig, RulePredictor

E, R = 12, 3


def random_kg(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    trip = {(int(rng.integers(E)), int(rng.integers(R)), int(rng.integers(E))) for _ in range(60)}
    return np.array(sorted(trip), dtype=np.int64)


def brute_counts(triples: np.ndarray, head: int) -> dict[tuple[int, int, int], tuple[int, int]]:
    """{(b, d, c): (support, body size)} by enumeration; d = -1 for the dangling body b(X, _)."""
    edges = {tuple(e) for e in directed_triples(triples, R).tolist()}
    facts = [(x, c) for (x, r, c) in edges if r == head]
    out: dict[tuple[int, int, int], tuple[int, int]] = {}
    for b, d, c in itertools.product(range(2 * R), range(-1, E), range(E)):

        def body(x: int, own: tuple[int, int, int] | None) -> bool:
            alive = edges - {own} if own else edges
            if d < 0:
                return any(s == x and r == b for (s, r, _) in alive)
            return (x, b, d) in alive

        support = sum(body(x, (x, head, cc)) for x, cc in facts if cc == c)
        size = sum(body(x, None) for x in range(E))
        if support:
            out[(b, d, c)] = (support, size)
    return out


@pytest.mark.parametrize("seed,head", [(0, 0), (1, 4), (2, 2)])
def test_mined_counts_equal_brute_force(seed: int, head: int) -> None:
    triples = random_kg(seed)
    graph = SparseGraph.from_triples(triples, E, R)
    facts = directed_triples(triples, R)
    facts = facts[facts[:, 1] == head][:, [0, 2]]
    rules = mine_constant_rules(graph, head, facts, max_rules=10_000, min_support=1)
    got = {
        (int(b), int(d), int(c)): (int(s), int(n))
        for b, d, c, s, n in zip(rules.relation, rules.constant, rules.answer, rules.support, rules.body_size)
    }
    assert got == brute_counts(triples, head)
    assert (head, -1, -1) not in got
    assert all(not (b == head and d == c) for b, d, c in got)  # q(X, c) <- q(X, c) never counts


def test_ranking_and_min_support() -> None:
    triples = random_kg(3)
    graph = SparseGraph.from_triples(triples, E, R)
    facts = directed_triples(triples, R)
    facts = facts[facts[:, 1] == 1][:, [0, 2]]
    everything = mine_constant_rules(graph, 1, facts, max_rules=10_000, min_support=1)
    top = mine_constant_rules(graph, 1, facts, max_rules=5, min_support=2)
    assert len(top) == min(5, int((everything.support >= 2).sum()))
    score = top.support / (top.body_size + 5.0)
    assert np.all(np.diff(score) <= 1e-12)
    assert np.all(top.support >= 2)


def test_fires_equals_brute_force_with_and_without_own_edge() -> None:
    triples = random_kg(4)
    graph = SparseGraph.from_triples(triples, E, R)
    facts = directed_triples(triples, R)
    head = 3
    facts = facts[facts[:, 1] == head][:, [0, 2]]
    rules = mine_constant_rules(graph, head, facts, max_rules=10_000, min_support=1)
    edges = {tuple(e) for e in directed_triples(triples, R).tolist()}
    starts = np.arange(E)
    answer_of = {int(x): int(c) for x, c in facts}  # one real fact per start that has one, else -1
    own_facts = np.array([answer_of.get(i, -1) for i in range(E)])
    assert (own_facts >= 0).sum() >= 3
    for own in (None, own_facts):
        got = rules.fires(graph, starts, own).toarray()
        for i, k in itertools.product(range(E), range(len(rules))):
            alive = edges - {(i, head, int(own[i]))} if own is not None else edges
            b, d = int(rules.relation[k]), int(rules.constant[k])
            want = any(s == i and r == b for (s, r, _) in alive) if d < 0 else (i, b, d) in alive
            assert got[i, k] == float(want), (i, k)


@pytest.mark.parametrize("init", ["confidence", "amie"])
def test_predictor_learns_a_constant_answer_that_no_path_reaches(init: str) -> None:
    """lives_in(x, city_k) for k = x mod 3 with country(x) = the city's country: the answer of country(x, ?) is
    the constant behind its city, which no closed path reaches (the country entities are never linked to the
    cities). Constant rules find it; path rules alone stay at the entity bias."""
    people = np.arange(60)
    city = 60 + people % 3
    country = 63 + people % 3
    train = np.concatenate(
        [np.stack([people, np.zeros(60, int), city], 1), np.stack([people[:45], np.ones(45, int), country[:45]], 1)]
    ).astype(np.int64)
    test = np.stack([people[45:], np.ones(15, int), country[45:]], 1).astype(np.int64)
    cfg = PredictorConfig(epochs=30, eval_every=5, lr=0.1, batch_size=16, init=init)
    base = RulePredictor({1: [(0,)]}, 66, num_relations=2, config=cfg)
    base.fit(train, train)
    const = RulePredictor(
        {1: [(0,)]}, 66, num_relations=2, config=PredictorConfig(**{**cfg.__dict__, "constant_rules": 20})
    )
    const.fit(train, train)
    q = torch.from_numpy(test[:, [0, 1]])
    assert torch.equal(const.score(q).argmax(1), torch.from_numpy(test[:, 2]))
    assert not torch.equal(base.score(q).argmax(1), torch.from_numpy(test[:, 2]))
    assert len(const.constants[1]) > 0
    assert const.rule_weights()[1].shape == (1,)  # path bodies only
    assert const.rule_scores()[1].shape == (1,)

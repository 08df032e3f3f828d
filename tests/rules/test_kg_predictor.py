"""RulePredictor on tiny planted KGs: exact rule ranks first, the own edge must not leak, shapes, determinism."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from rules.kg_predictor import PredictorConfig, RulePredictor, expected_reciprocal_rank


def family(n_families: int = 12, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Chains a -parent-> b -parent-> c with grandparent(a, c); relation 0 = parent, 1 = grandparent, plus noise
    facts of relation 2. Returns (train, test) where test holds grandparent facts of the last 3 families."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for k in range(n_families):
        a, b, c = 3 * k, 3 * k + 1, 3 * k + 2
        train += [(a, 0, b), (b, 0, c)]
        (test if k >= n_families - 3 else train).append((a, 1, c))
    n = 3 * n_families
    for _ in range(n_families):
        train.append((int(rng.integers(n)), 2, int(rng.integers(n))))
    return np.array(train, dtype=np.int64), np.array(test, dtype=np.int64)


CFG = PredictorConfig(epochs=40, eval_every=5, lr=0.1, entity_bias=False)


def test_planted_answer_ranks_first() -> None:
    train, test = family()
    bodies = {1: [(0, 0), (2,), (0, 2), (5, 2)], 4: [(3, 3), (2,)]}
    p = RulePredictor(bodies, 36, num_relations=3, config=CFG)
    p.fit(train, train)
    scores = p.score(torch.from_numpy(test[:, [0, 1]]))
    assert scores.shape == (3, 36)
    assert torch.equal(scores.argmax(1), torch.from_numpy(test[:, 2]))
    # head queries are asked as tail queries of the inverse relation (c, 1 + R, ?) -> a
    inv = p.score(torch.tensor([[c, 4] for c in test[:, 2]]))
    assert torch.equal(inv.argmax(1), torch.from_numpy(test[:, 0]))


def test_own_edge_is_removed_while_training() -> None:
    """Body [grandparent] only fires through the training query's own fact: it must get no weight and a lower
    H(rule) than the real rule. If the edge leaked, [1] would fit every training query perfectly."""
    train, _ = family()
    bodies = {1: [(0, 0), (1,), (2, 2, 2), (0, 2)]}
    p = RulePredictor(bodies, 36, num_relations=3, config=CFG)
    p.fit(train, train)
    w = p.rule_weights()[1]
    assert abs(w[1]) < 1e-6
    assert w[0] > 0.5
    h = p.rule_scores()[1]
    assert h[0] > h[1]
    assert h[1] == 0.0


def test_leaking_graph_changes_the_fit() -> None:
    """Control for the test above: grounding on a graph where the identity rule fires legitimately (a copy of
    relation 1 as relation 2) gives that body a large weight, so the zero weight above is the exclusion's doing."""
    train, _ = family()
    copy = train[train[:, 1] == 1].copy()
    copy[:, 1] = 2
    graph = np.concatenate([train[train[:, 1] != 2], copy])
    p = RulePredictor({1: [(0, 0), (2,)]}, 36, num_relations=3, config=CFG)
    p.fit(graph, train)
    assert p.rule_weights()[1][1] > 0.5


@pytest.mark.parametrize("aggregator", ["sum", "max", "noisy-or"])
def test_aggregators_rank_planted_answer_and_shapes(aggregator) -> None:
    train, test = family()
    p = RulePredictor({1: [(0, 0), (2,)], 4: [(3, 3)]}, 36, aggregator, num_relations=3, config=CFG)
    p.fit(train, train)
    q = torch.tensor([[test[0, 0], 1], [test[1, 0], 1], [0, 0], [test[0, 2], 4]])
    s = p.score(q)
    assert s.shape == (4, 36) and s.dtype == torch.float32
    assert int(s[0].argmax()) == test[0, 2] and int(s[1].argmax()) == test[1, 2]
    assert int(s[3].argmax()) == test[0, 0]
    # a relation without rules gives tied scores (bias only: equal logits for every unseen candidate pattern)
    assert torch.isfinite(s).all()


def test_determinism_with_seed() -> None:
    train, test = family(seed=1)
    rng = np.random.default_rng(0)
    noisy = np.concatenate([train, np.stack([rng.integers(0, 36, 30), np.full(30, 1), rng.integers(0, 36, 30)], 1)])
    valid = test[:2]

    def run(seed: int) -> torch.Tensor:
        cfg = PredictorConfig(epochs=10, eval_every=2, lr=0.1, batch_size=4, seed=seed, max_train_queries=20)
        p = RulePredictor({1: [(0, 0), (2,), (0, 2), (2, 0)], 4: [(3, 3)]}, 36, num_relations=3, config=cfg)
        p.fit(noisy, noisy, valid_triples=valid)
        return p.score(torch.from_numpy(test[:, [0, 1]]))

    a, b = run(3), run(3)
    assert torch.equal(a, b)
    assert not torch.equal(a, run(4))


def test_valid_early_stopping_logs() -> None:
    train, test = family()
    p = RulePredictor({1: [(0, 0), (2,)]}, 36, num_relations=3, config=CFG)
    log = p.fit(train, train, valid_fn=lambda pred: 0.25, valid_triples=test)
    head = log["heads"][1]
    assert head["best_valid_mrr"] == pytest.approx(1.0)
    assert head["history"] and log["valid"] == 0.25


def test_rule_counts_real_confidence() -> None:
    train, _ = family()
    p = RulePredictor({1: [(0, 0), (2,)]}, 36, num_relations=3, config=CFG)
    p.set_graph(train)
    stats = p.rule_counts()[1]
    assert stats.head_size == 9
    assert stats.support[0] == 9 and stats.body_size[0] == 12  # 12 chains, 9 with a train grandparent fact
    assert stats.confidence[0] == pytest.approx(0.75)


def test_expected_reciprocal_rank_matches_tie_permutations() -> None:
    scores = torch.tensor([[3.0, 1.0, 1.0, 1.0, 0.5, 5.0]])
    answers = torch.tensor([2])
    mask = torch.tensor([[False, False, False, False, False, True]])  # another known answer is filtered
    got = float(expected_reciprocal_rank(scores, answers, mask)[0])
    # candidates left: 3.0 > answer, tie block {1, 2, 3}: ranks 2, 3, 4 equally likely
    want = np.mean([1 / r for r in (2, 3, 4)])
    assert got == pytest.approx(want)
    # brute force over all orderings of the tie block
    perms = list(itertools.permutations([1, 2, 3]))
    brute = np.mean([1 / (1 + 1 + perm.index(2)) for perm in perms])
    assert got == pytest.approx(brute)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="aggregator"):
        RulePredictor({1: [(0,)]}, 3, "mean")  # type: ignore[arg-type]
    p = RulePredictor({1: [(7,)]}, 3, num_relations=2)
    with pytest.raises(ValueError, match="outside"):
        p.set_graph(np.array([[0, 0, 1]]))
    with pytest.raises(RuntimeError, match="graph"):
        RulePredictor({1: [(0,)]}, 3, num_relations=2).score(torch.tensor([[0, 1]]))

"""RulePool: construction, LogiRE momentum update and A.10 mixture vs hand-computed values, chains, checkpoints."""

from __future__ import annotations

import io

import pytest
import torch

from rules.pool import RulePool, aggregate_distributions, canonical_body, distributions_from_padded

R = 3  # tokens 0..5 real, 6 = stay
T1, T2, T3 = (0, 0, 1), (1, 1, 0), (2, 0, 0)


def make_pool() -> RulePool:
    return RulePool.from_distributions({T1: {(0,): 3.0, (1, 4): 1.0}, T2: {(2, 2, 2): 1.0}}, num_relations=R)


def test_from_distributions_normalises_and_strips_padding() -> None:
    pool = RulePool.from_distributions({T1: {(0, 6, 6): 1.0, (0,): 1.0, (1, 4): 2.0}}, num_relations=R)
    assert pool.distribution(T1) == {(0,): 0.5, (1, 4): 0.5}
    with pytest.raises(ValueError, match="malformed"):
        RulePool.from_distributions({T1: {(6, 0): 1.0}}, num_relations=R)
    with pytest.raises(ValueError, match="malformed"):
        RulePool.from_distributions({T1: {(0, 1, 2, 3): 1.0}}, num_relations=R)
    assert canonical_body([5, 6, 6], R, 3) == (5,)


def test_momentum_update_matches_logire_by_hand() -> None:
    pool = make_pool()
    # posterior for T1: old rule (0,) with q=0.5, new rule (2,) with q=0.5; (1,4) unseen → ×0.9
    pool.update({T1: {(0,): 1.0, (2,): 1.0}}, mode="momentum", ratio=0.1)
    d = pool.distribution(T1)
    assert d[(0,)] == pytest.approx(0.9 * 0.75 + 0.1 * 0.5)
    assert d[(1, 4)] == pytest.approx(0.9 * 0.25)
    assert d[(2,)] == pytest.approx(0.1 * 0.5)
    assert sum(d.values()) == pytest.approx(1.0)
    assert pool.distribution(T2) == {(2, 2, 2): 1.0}  # no posterior → unchanged
    pool.update({T3: {(1,): 1.0}})  # triple new to the pool → takes q
    assert pool.distribution(T3) == {(1,): 1.0}


def test_momentum_equals_literal_logire_update() -> None:
    """Port of LogiRE ERuleDataset.update on lists; compare after two rounds."""
    old_rules, old_probs = [(0,), (1, 4)], [0.75, 0.25]
    pool = make_pool()
    for q in ({(0,): 0.2, (2,): 0.8}, {(2,): 0.5, (3, 3): 0.5}):
        visited = []
        for rule, nprob in q.items():
            if rule in old_rules:
                ci = old_rules.index(rule)
                visited.append(ci)
                old_probs[ci] = 0.9 * old_probs[ci] + 0.1 * nprob
            else:
                visited.append(len(old_rules))
                old_rules.append(rule)
                old_probs.append(nprob * 0.1)
        for ci in range(len(old_rules)):
            if ci not in visited:
                old_probs[ci] *= 0.9
        pool.update({T1: q}, ratio=0.1)
    d = pool.distribution(T1)
    assert set(d) == set(old_rules)
    for rule, p in zip(old_rules, old_probs):
        assert d[rule] == pytest.approx(p)


def test_mixture_update_uses_posterior_samples() -> None:
    pool = make_pool()
    # a point-mass posterior gives the same samples whatever the generator: (1-ρ)p + ρ·1
    pool.update({T1: {(1, 4): 1.0}}, mode="mixture", ratio=0.7, num_samples=10, generator=torch.Generator().manual_seed(0))
    d = pool.distribution(T1)
    assert d[(0,)] == pytest.approx(0.3 * 0.75) and d[(1, 4)] == pytest.approx(0.3 * 0.25 + 0.7)
    # a two-body posterior: the added mass is ρ·k/n with integer sample counts k, and deterministic
    pools = [make_pool(), make_pool()]
    for p in pools:
        p.update({T2: {(0,): 0.5, (1,): 0.5}}, "mixture", 0.4, num_samples=20, generator=torch.Generator().manual_seed(5))
    assert pools[0].distribution(T2) == pools[1].distribution(T2)
    d2 = pools[0].distribution(T2)
    assert d2[(2, 2, 2)] == pytest.approx(0.6)
    k = [round(d2.get(b, 0.0) / 0.4 * 20, 9) for b in [(0,), (1,)]]
    assert sum(k) == pytest.approx(20) and all(float(x).is_integer() for x in k)
    with pytest.raises(ValueError, match="num_samples"):
        pool.update({T1: {(0,): 1.0}}, mode="mixture", ratio=0.5)


def test_chains_and_state_dict_roundtrip() -> None:
    pool = make_pool()
    pool.update({T1: {(0,): 1.0, (2,): 1.0}})
    triples, bodies, weights = pool.chains()
    assert triples.tolist() == [list(T1)] * 3 + [list(T2)]
    assert bodies.tolist() == [[0, 6, 6], [1, 4, 6], [2, 6, 6], [2, 2, 2]]
    assert weights.dtype == torch.float64
    assert weights[:3].sum().item() == pytest.approx(1.0)
    buf = io.BytesIO()
    torch.save(pool.state_dict(), buf)
    buf.seek(0)
    other = RulePool(num_relations=1)
    other.load_state_dict(torch.load(buf, weights_only=True))
    assert other.distributions() == pool.distributions() and other.num_relations == R


def test_aggregate_distributions_weighted_by_instances() -> None:
    a = {T1: {(0,): 1.0}, T2: {(1,): 2.0, (2,): 2.0}}
    b = {T1: {(0,): 1.0, (1,): 1.0}}
    agg = aggregate_distributions([a, b], [{T1: 1, T2: 4}, {T1: 3}])
    assert agg[T1] == pytest.approx({(0,): (1 * 1.0 + 3 * 0.5) / 4, (1,): 3 * 0.5 / 4})
    assert agg[T2] == pytest.approx({(1,): 0.5, (2,): 0.5})
    assert aggregate_distributions([a, b])[T1] == pytest.approx({(0,): 0.75, (1,): 0.25})


def test_distributions_from_padded() -> None:
    triples = torch.tensor([list(T1), list(T2)])
    bodies = torch.tensor([[[0, 6, 6], [1, 4, 6]], [[2, 6, 6], [0, 0, 0]]])
    probs = torch.tensor([[0.25, 0.75], [1.0, 0.0]])
    mask = torch.tensor([[True, True], [True, False]])
    d = distributions_from_padded(triples, bodies, probs, mask)
    pool = RulePool.from_distributions(d, num_relations=R)
    assert pool.distribution(T1) == {(0,): 0.25, (1, 4): 0.75} and pool.distribution(T2) == {(2,): 1.0}

"""Non-redundant noisy-OR (SAFRAN): overlaps, clusters and the aggregate against brute force; the predictor's
choice on valid, head by head."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import torch

from rules import kg_nonredundant
from rules.kg_nonredundant import (
    TIE_BREAK,
    Overlap,
    clusters,
    nonredundant_evidence,
    smoothed_confidence,
    with_evidence,
)
from rules.kg_predictor import PredictorConfig, RulePredictor, expected_reciprocal_rank


def _entries(rng: np.random.Generator, J: int, cells: int, nnz: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct random (cell, rule) grounding entries."""
    pairs = rng.choice(J * cells, size=nnz, replace=False)
    return pairs // J, pairs % J


@pytest.mark.parametrize("dense_cells", [1 << 24, 0])  # the dense product, then the sparse one
def test_jaccard_equals_set_overlaps_summed_over_batches(dense_cells: int, monkeypatch) -> None:
    monkeypatch.setattr(kg_nonredundant, "_DENSE_CELLS", dense_cells)
    rng = np.random.default_rng(0)
    J = 5
    sets: list[set[tuple[int, int]]] = [set() for _ in range(J)]
    overlap = Overlap(J)
    for batch in range(3):  # cells of different batches are different (query rows)
        cell, rule = _entries(rng, J, 30, 60)
        overlap.update(cell, rule)
        for c, j in zip(cell.tolist(), rule.tolist()):
            sets[j].add((batch, c))
    got = overlap.jaccard()
    for i in range(J):
        for j in range(J):
            union = len(sets[i] | sets[j])
            want = len(sets[i] & sets[j]) / union if union else 0.0
            assert got[i, j] == pytest.approx(want)


def test_clusters_are_the_connected_components_over_the_threshold() -> None:
    rng = np.random.default_rng(1)
    jac = rng.random((8, 8))
    jac = (jac + jac.T) / 2
    np.fill_diagonal(jac, 1.0)
    for t in (1.01, 0.8, 0.5, 0.0):
        labels = clusters(jac, t)
        g = nx.Graph()
        g.add_nodes_from(range(8))
        g.add_edges_from((i, j) for i in range(8) for j in range(8) if i != j and jac[i, j] >= t)
        want = {frozenset(c) for c in nx.connected_components(g)}
        got = {frozenset(np.flatnonzero(labels == k).tolist()) for k in np.unique(labels)}
        assert got == want
    assert len(set(clusters(jac, 1.01).tolist())) == 8 and len(set(clusters(jac, 0.0).tolist())) == 1


def test_evidence_is_noisy_or_across_clusters_of_the_max_inside() -> None:
    rng = np.random.default_rng(2)
    J, cells = 6, 40
    cell, rule = _entries(rng, J, cells, 90)
    conf = rng.random(J) * 0.9
    labels = np.array([0, 0, 1, 2, 2, 2])
    got = nonredundant_evidence(
        torch.from_numpy(cell), torch.from_numpy(rule), torch.from_numpy(conf), torch.from_numpy(labels), cells
    ).numpy()
    for c in range(cells):
        fired = rule[cell == c]
        nr = 1.0 - math.prod(1.0 - max(conf[j] for j in fired if labels[j] == k) for k in set(labels[fired]))
        want = -math.log(1.0 - nr) if fired.size else 0.0
        assert got[c] == pytest.approx(want, abs=1e-12)


def test_smoothed_confidence_is_pessimistic() -> None:
    np.testing.assert_allclose(
        smoothed_confidence(np.array([2.0, 200.0]), np.array([2.0, 200.0]), 5.0), [2 / 7, 200 / 205]
    )


def _kg(
    seed: int = 0, valid_every: int = 4, noise: int = 40, noisy_parent: bool = False
) -> tuple[np.ndarray, np.ndarray, int]:
    """Families a -parent-> b -parent-> c with grandparent(a, c) (relation 1), a noisy copy of parent (relation 2)
    and ``noise`` random facts of relation 2 (and of parent too with ``noisy_parent``); valid holds the grandparent
    facts of every ``valid_every``-th family."""
    rng = np.random.default_rng(seed)
    train: list[tuple[int, int, int]] = []
    valid: list[tuple[int, int, int]] = []
    n = 30
    for k in range(n):
        a, b, c = 3 * k, 3 * k + 1, 3 * k + 2
        train += [(a, 0, b), (b, 0, c)]
        if rng.random() < 0.7:
            train += [(a, 2, b)]
        (valid if k % valid_every == 0 else train).append((a, 1, c))
    for _ in range(noise):
        train.append((int(rng.integers(3 * n)), 2, int(rng.integers(3 * n))))
        if noisy_parent:
            train.append((int(rng.integers(3 * n)), 0, int(rng.integers(3 * n))))
    return np.array(train, dtype=np.int64), np.array(valid, dtype=np.int64), 3 * n


#: a barely fitted model (zero start, a tiny step: the term helps) and a fitted one (every valid answer first)
BARELY = {"epochs": 2, "eval_every": 1, "lr": 1e-4, "init": "zero"}
FITTED = {"epochs": 20, "eval_every": 5, "lr": 0.1, "entity_bias": False}


def _fit(nonredundant: bool, options: dict) -> RulePredictor:
    train, valid, E = _kg()
    cfg = PredictorConfig(nonredundant=nonredundant, nr_betas=(0.5, 8.0, math.inf), **options)
    p = RulePredictor({1: [(0, 0), (2, 0), (0, 2), (2, 2), (0, 5)]}, E, num_relations=3, config=cfg)
    p.fit(train, train, valid_triples=valid)
    return p


@pytest.mark.parametrize("options", [BARELY, FITTED], ids=["barely-fitted", "fitted"])
def test_the_predictor_keeps_the_term_only_where_it_beats_the_fitted_model_on_valid(options: dict) -> None:
    plain, nr = _fit(False, options), _fit(True, options)
    train, valid, E = _kg()
    queries = torch.from_numpy(np.stack([valid[:, 0], valid[:, 1]], 1))
    torch.testing.assert_close(plain.models[1].weights, nr.models[1].weights)  # the fit itself is unchanged
    chosen = nr.models[1].nonredundant
    known = {(h, t) for h, r, t in np.concatenate([train, valid]).tolist() if r == 1}

    def valid_mrr(scores: torch.Tensor) -> float:
        mask = torch.zeros_like(scores, dtype=torch.bool)
        for i, (h, t) in enumerate(valid[:, [0, 2]].tolist()):
            for h2, t2 in known:
                if h2 == h and t2 != t:
                    mask[i, t2] = True
        return float(expected_reciprocal_rank(scores, torch.from_numpy(valid[:, 2]), mask).mean())

    fitted = valid_mrr(plain.score(queries))
    if options is FITTED:  # the fitted model ranks every valid answer first: nothing to gain
        assert fitted == pytest.approx(1.0) and chosen is None
        torch.testing.assert_close(nr.score(queries), plain.score(queries))
        return
    assert chosen is not None
    assert chosen.valid_mrr > fitted
    assert valid_mrr(nr.score(queries)) == pytest.approx(chosen.valid_mrr, abs=1e-6)
    # the test-time score is the fitted logits plus beta times the brute-force evidence
    batch = next(nr._batches(1, np.stack([valid[:, 0], np.full(len(valid), -1)], 1), None, exclude_own=False))
    ev = nonredundant_evidence(batch.flat, batch.rule, chosen.confidence, chosen.labels, batch.size * E)
    logits = plain.score(queries).double()
    ev = ev.view(batch.size, E)
    if math.isinf(chosen.beta):
        lo, hi = logits.min(1, keepdim=True).values, logits.max(1, keepdim=True).values
        want = ev + TIE_BREAK * (logits - lo) / (hi - lo)
    else:
        want = logits + chosen.beta * ev
    torch.testing.assert_close(nr.score(queries), want.float())


def test_in_place_of_the_logits_evidence_ranks_first_and_logits_break_its_ties() -> None:
    logits = torch.tensor([[5.0, -3.0, 2.0, 9.0]])
    evidence = torch.tensor([[0.7, 0.7, 0.0, 0.2]])
    order = with_evidence(logits, evidence, math.inf).argsort(1, descending=True)
    assert order.tolist() == [[0, 1, 3, 2]]
    torch.testing.assert_close(with_evidence(logits, evidence, 2.0), (logits + 2 * evidence).double())


def _directed_valid_mrr(p: RulePredictor, train: np.ndarray, valid: np.ndarray, R: int, head: int) -> float:
    """Filtered valid MRR (expectation over ties) of head relation ``head``'s valid queries (both directions of
    the valid facts, inverses as r + R), brute force."""
    known: dict[tuple[int, int], set[int]] = {}
    for h, r, t in np.concatenate([train, valid]).tolist():
        known.setdefault((h, r), set()).add(t)
        known.setdefault((t, r + R), set()).add(h)
    rows = [(h, r, t) for h, r, t in valid.tolist()] + [(t, r + R, h) for h, r, t in valid.tolist()]
    rows = [row for row in rows if row[1] == head]
    queries = torch.tensor([[h, q] for h, q, _ in rows])
    scores = p.score(queries)
    mask = torch.zeros_like(scores, dtype=torch.bool)
    for i, (h, q, t) in enumerate(rows):
        mask[i, [e for e in known[(h, q)] if e != t]] = True
    return float(expected_reciprocal_rank(scores, torch.tensor([t for _, _, t in rows]), mask).mean())


def _noisy_kg() -> tuple[np.ndarray, np.ndarray, int]:
    """Noise on parent too, a third of the grandparent facts in valid: the clustering threshold changes the valid
    MRR."""
    return _kg(seed=2, valid_every=3, noise=80, noisy_parent=True)


def test_each_head_takes_the_option_best_on_its_own_valid_queries() -> None:
    """Per head, the chosen (τ, β) is the best of the grid on that head's valid queries, brute force: each option
    alone, scored through ``score`` and ranked with its own filter."""
    train, valid, E = _noisy_kg()
    bodies = {1: [(0, 0), (2, 0), (0, 2), (2, 2), (0, 5)], 4: [(3, 3), (3, 5), (5, 3), (5, 5), (2, 3)]}
    grid = {"nr_thresholds": (1.01, 0.3), "nr_betas": (0.5, math.inf)}

    def fit(**options: object) -> RulePredictor:
        cfg = PredictorConfig(nonredundant=True, **{**BARELY, **grid, **options})  # type: ignore[arg-type]
        p = RulePredictor(bodies, E, num_relations=3, config=cfg)
        p.fit(train, train, valid_triples=valid)
        return p

    chosen = fit()
    alone = {}
    for t in grid["nr_thresholds"]:
        for b in grid["nr_betas"]:
            p = fit(nr_thresholds=(t,), nr_betas=(b,))
            alone[(t, b)] = {q: _directed_valid_mrr(p, train, valid, 3, head=q) for q in bodies}
    spread = max(max(v[q] for v in alone.values()) - min(v[q] for v in alone.values()) for q in bodies)
    assert spread > 0.05  # the choice matters
    for q in bodies:
        by_option = {o: v[q] for o, v in alone.items()}
        nr = chosen.models[q].nonredundant
        assert nr is not None
        assert by_option[(nr.threshold, nr.beta)] == pytest.approx(max(by_option.values()), abs=1e-9)
        assert nr.valid_mrr == pytest.approx(by_option[(nr.threshold, nr.beta)], abs=1e-6)

"""RulePredictor on tiny planted KGs: exact rule ranks first, the own edge must not leak, shapes, determinism."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

from rules.kg_mining import directed_triples
from rules.kg_predictor import (
    PredictorConfig,
    RulePredictor,
    expected_reciprocal_rank,
    head_shares,
    reached_reciprocal_rank,
)
from rules.workers import MIN_PARALLEL_WORK


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


@pytest.mark.parametrize("seed", range(5))
def test_reached_reciprocal_rank_equals_the_dense_ranking(seed: int) -> None:
    """Counting rivals against the sorted prior and correcting at reached and filtered cells gives the dense
    (B, E) ranking's E[1/rank] to the bit: small integer scores, so ties are everywhere; answers reached or not,
    filtered cells reached or not."""
    rng = np.random.default_rng(seed)
    B, E = 7, 30
    prior = torch.from_numpy(rng.integers(-2, 3, E).astype(np.float32) / 4)
    cells = np.unique(rng.choice(B * E, size=80, replace=False))
    reached = torch.from_numpy(rng.integers(-2, 4, cells.size).astype(np.float32) / 4)
    answers = torch.from_numpy(rng.integers(0, E, B))
    answers[0] = int(cells[0] % E) if cells[0] // E == 0 else answers[0]
    flat = np.setdiff1d(rng.choice(B * E, size=40, replace=False), np.arange(B) * E + answers.numpy())
    flat = np.concatenate([flat, flat[:3]])  # a repeated entry is filtered once
    dense = torch.zeros(B * E).index_copy(0, torch.from_numpy(cells), reached).view(B, E) + prior
    mask = torch.zeros(B * E, dtype=torch.bool)
    mask[torch.from_numpy(flat)] = True
    want = expected_reciprocal_rank(dense, answers, mask.view(B, E))
    got = reached_reciprocal_rank(prior, torch.from_numpy(cells), reached, answers, torch.from_numpy(flat))
    assert torch.equal(got, want)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="aggregator"):
        RulePredictor({1: [(0,)]}, 3, "mean")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="paths must be one of"):
        RulePredictor({1: [(0,)]}, 3, config=PredictorConfig(paths="trails"))  # type: ignore[arg-type]
    p = RulePredictor({1: [(7,)]}, 3, num_relations=2)
    with pytest.raises(ValueError, match="outside"):
        p.set_graph(np.array([[0, 0, 1]]))
    with pytest.raises(RuntimeError, match="graph"):
        RulePredictor({1: [(0,)]}, 3, num_relations=2).score(torch.tensor([[0, 1]]))


def _brute_paths(triples: np.ndarray, E: int, R: int, body: tuple[int, ...], start: int) -> np.ndarray:
    """(E,) walk counts along ``body`` from ``start`` by enumerating walks edge by edge (no matrices)."""
    edges = [(h, r, t) for h, r, t in triples.tolist()] + [(t, r + R, h) for h, r, t in triples.tolist()]
    frontier = {start: 1.0}
    for q in body:
        nxt: dict[int, float] = {}
        for u, n in frontier.items():
            for h, r, t in edges:
                if h == u and r == q:
                    nxt[t] = nxt.get(t, 0.0) + n
        frontier = nxt
    out = np.zeros(E)
    for e, n in frontier.items():
        out[e] = n
    return out


@pytest.mark.parametrize("feature", ["log1p", "count+indicator"])
def test_sum_scores_equal_brute_force_sum_over_rules(feature: str) -> None:
    """The sparse mat-vec score b[e] + Σ_j Σ_k w_jk φ_k(f_j(e)) equals the same sum over enumerated walks."""
    train, _ = family(n_families=6, seed=3)
    E, R = 18, 3
    bodies = [(0, 0), (2,), (0, 2), (5, 2), (3, 0)]
    cfg = PredictorConfig(epochs=3, eval_every=1, lr=0.1, feature=feature, batch_size=4)
    p = RulePredictor({1: bodies}, E, num_relations=R, config=cfg)
    p.fit(train, train)
    w = p.models[1].weights.numpy()
    bias = p.models[1].bias.numpy()
    starts = list(range(E))
    got = p.score(torch.tensor([[s, 1] for s in starts])).numpy()
    for s in starts:
        want = bias.copy()
        for j, body in enumerate(bodies):
            f = _brute_paths(train, E, R, body, s)
            phis = {"log1p": np.log1p(f), "count": f, "indicator": (f > 0).astype(float)}
            for k, name in enumerate(feature.split("+")):
                want += w[j, k] * phis[name]
        np.testing.assert_allclose(got[s], want, rtol=1e-5, atol=1e-5)


def test_sparse_linear_gradient_matches_dense() -> None:
    """The scipy-backed linear map has the gradient of the dense product Φ · vec(w)."""
    import scipy.sparse as sp

    from rules.kg_predictor import _SparseLinear

    rng = np.random.default_rng(0)
    dense = (rng.random((7, 6)) * (rng.random((7, 6)) < 0.5)).astype(np.float32)
    phi = sp.csr_matrix(dense)
    w = torch.randn(3, 2, requires_grad=True)
    g = torch.randn(7)
    (_SparseLinear.apply(w, phi) * g).sum().backward()
    w2 = w.detach().clone().requires_grad_(True)
    (torch.from_numpy(dense) @ w2.reshape(-1) * g).sum().backward()
    torch.testing.assert_close(w.grad, w2.grad)


def test_max_fanout_drops_wide_groundings_only() -> None:
    """A rule reaching more than max_fanout candidates from a query contributes nothing to that query; narrower
    groundings are unchanged."""
    train, _ = family(n_families=6, seed=3)
    E, R = 18, 3
    hub = np.array([(17, 2, e) for e in range(10)], dtype=np.int64)  # entity 17 links to 10 entities
    graph = np.concatenate([train, hub])
    bodies = {1: [(0, 0), (5, 2)]}  # (5, 2): parent⁻¹ then noise — fans out through the hub
    base = RulePredictor(bodies, E, num_relations=R, config=PredictorConfig(entity_bias=False))
    capped = RulePredictor(bodies, E, num_relations=R, config=PredictorConfig(entity_bias=False, max_fanout=3))
    for p in (base, capped):
        p.set_graph(graph)
        p.models[1] = p._new_model(1)
        p.models[1].weights[:] = torch.tensor([[1.0], [1.0]])
    starts = torch.tensor([[s, 1] for s in range(E)])
    full, cut = base.score(starts).numpy(), capped.score(starts).numpy()
    for s in range(E):
        wide = [b for b in bodies[1] if (_brute_paths(graph, E, R, b, s) > 0).sum() > 3]
        want = sum(np.log1p(_brute_paths(graph, E, R, b, s)) for b in bodies[1] if b not in wide)
        np.testing.assert_allclose(cut[s], want if len(wide) < 2 else np.zeros(E), atol=1e-6)
        if not wide:
            np.testing.assert_allclose(cut[s], full[s], atol=1e-6)
    assert any((_brute_paths(graph, E, R, (5, 2), s) > 0).sum() > 3 for s in range(E))


@pytest.mark.parametrize("feature", ["log1p", "count+indicator"])
def test_h_scores_equal_the_per_grounding_definition(feature: str) -> None:
    """H(rule) = mean over training queries of y_rule(answer) − mean_{e ∈ A} y_rule(e), computed entry by entry from
    the groundings (y_rule(e) = Σ_k w_k φ_k(f(e)), A = candidates any rule reaches), equals the predictor's."""
    from rules.kg_predictor import _known

    rng = np.random.default_rng(0)
    E, R = 40, 3
    tr = np.unique(np.stack([rng.integers(0, E, 300), rng.integers(0, R, 300), rng.integers(0, E, 300)], 1), axis=0)
    bodies = {1: [(0, 0), (2,), (0, 2), (5, 2), (3, 0), (0,)]}
    cfg = PredictorConfig(epochs=3, eval_every=1, feature=feature, batch_size=16)
    p = RulePredictor(bodies, E, num_relations=R, config=cfg)
    p.fit(tr, tr)
    got = p.rule_scores()[1]
    queries = tr[tr[:, 1] == 1][:, [0, 2]]
    w = p.models[1].weights.numpy()
    H = np.zeros(len(bodies[1]))
    for batch in p._batches(1, queries, _known(directed_triples(tr, R)), True):
        phi = p._phi(batch).numpy()
        contrib = (phi * w[batch.rule.numpy()]).sum(1)
        row, col = batch.flat.numpy() // E, batch.flat.numpy() % E
        for i in range(batch.size):
            here = row == i
            size = len(set(col[here].tolist()))
            for j in range(len(bodies[1])):
                mine = here & (batch.rule.numpy() == j)
                H[j] += contrib[mine & (col == int(batch.answers[i]))].sum() - contrib[mine].sum() / max(size, 1)
    np.testing.assert_allclose(got, H / len(queries), atol=1e-8)


@pytest.mark.parametrize(("type_prior", "smoothing"), [(False, 0.0), (True, 0.0), (False, 0.2), (True, 0.5)])
def test_reached_cell_loss_equals_dense_cross_entropy_and_gradients(type_prior: bool, smoothing: float) -> None:
    """The sparse-batch loss (reached cells only) and the dense-logits loss both equal a reference cross-entropy
    over all E candidates — value and gradients of rule weights, entity bias and type-prior weights — including
    answers no rule reaches and other known answers that rules reach. Reference: smoothing 0 = the other known
    answers filtered; s > 0 = RNNLogic's trainer, target t = onehot(answer) + s·(other known answers), unfiltered,
    loss = −Σ t·log_softmax / Σ t over the batch."""
    from rules.kg_predictor import _known

    rng = np.random.default_rng(1)
    E, R = 300, 4
    tr = np.stack([rng.integers(0, E, 500), rng.integers(0, R, 500), rng.integers(0, E, 500)], 1)
    multi = [(h, 1, h + k) for h in range(20) for k in (30, 60, 90)]  # queries with several known answers
    tr = np.unique(np.concatenate([tr, np.array(multi)]), axis=0)
    bodies = {1: [(0, 0), (2,), (0, 2), (5, 2), (3, 0), (0,), (1,)]}  # (1,) reaches the other known answers
    cfg = PredictorConfig(feature="log1p+indicator", batch_size=64, type_prior=type_prior, smoothing=smoothing)
    p = RulePredictor(bodies, E, num_relations=R, config=cfg)
    p.set_graph(tr)
    model = p._new_model(1)
    with torch.no_grad():
        model.weights.copy_(torch.randn(model.weights.shape) * 2)
        model.bias.copy_(torch.randn(E) * 3)
        if type_prior:
            model.type_weights.copy_(torch.randn(2 * R))
    params = model.parameters()[:1] + model.parameters()[2:]  # all but the max / noisy-or scale
    queries = tr[tr[:, 1] == 1][:, [0, 2]]
    batches = list(p._batches(1, queries, _known(directed_triples(tr, R)), True))
    assert any(b.filter_flat.numel() for b in batches)
    unreached = filtered_reached = 0
    for batch in batches:
        cells = p._design(batch)[0]
        unreached += int((~torch.isin(torch.arange(batch.size) * E + batch.answers, cells)).sum())
        filtered_reached += int(torch.isin(batch.filter_flat, cells).sum())
        grads = []
        for fn in (p._reached_loss, p._dense_loss, None):
            for t in params:
                t.requires_grad_(True)
                t.grad = None
            if fn is None:
                logits = p._logits(model, batch).view(-1)
                target = torch.zeros_like(logits)
                if smoothing == 0:
                    logits = logits.index_fill(0, batch.filter_flat, float("-inf"))
                else:
                    target[batch.filter_flat] = smoothing
                target[torch.arange(batch.size) * E + batch.answers] = 1.0
                logp = torch.log_softmax(logits.view(batch.size, -1), dim=1).view(-1)
                keep = target > 0
                loss = -(logp[keep] * target[keep]).sum() / target.sum()
            else:
                loss = fn(model, batch)
            loss.backward()
            grads.append((float(loss.detach()), [t.grad.clone() for t in params]))
        (l_ref, g_ref) = grads[-1]
        assert len(g_ref) == 2 + type_prior
        for loss_value, g in grads[:-1]:
            assert loss_value == pytest.approx(l_ref, rel=1e-5)
            for a, b in zip(g, g_ref):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert unreached > 0 and filtered_reached > 0


def test_cells_equal_numpy_unique() -> None:
    """The marker count (cells dense enough) and np.unique (sparse) give np.unique's cells and inverse."""
    from rules.kg_predictor import _cells

    rng = np.random.default_rng(0)
    for n, size in [(0, 5), (1, 1), (50, 40), (5000, 3000), (5000, 10**8)]:  # the last one by np.unique
        flat = rng.integers(0, size, n)
        cells, inverse = _cells(flat, size)
        want_cells, want_inverse = np.unique(flat, return_inverse=True)
        np.testing.assert_array_equal(cells, want_cells)
        np.testing.assert_array_equal(inverse, want_inverse)


@pytest.mark.parametrize("batch_nnz", [8_000_000, 40])
def test_design_is_the_canonical_csr_of_the_groundings(batch_nnz: int) -> None:
    """Φ built by counting rows equals scipy's canonical CSR of the (cell, rule·F + k) entries — same indptr,
    indices and data — with constant rules sharing cells and batches split by query (small ``batch_nnz``)."""
    import scipy.sparse as sp

    from rules.kg_predictor import _known

    train, _ = family(n_families=10, seed=4)
    cfg = PredictorConfig(
        feature="log1p+indicator", batch_size=8, batch_nnz=batch_nnz, constant_rules=20, constant_min_support=1
    )
    p = RulePredictor({1: [(0, 0), (2,), (0, 2), (5, 2), (2, 5)]}, 30, num_relations=3, config=cfg)
    p.set_graph(train)
    tr = directed_triples(train, 3)
    from rules.kg_constant_rules import mine_constant_rules

    assert p.graph is not None
    p.constants[1] = mine_constant_rules(p.graph, 1, tr[tr[:, 1] == 1][:, [0, 2]], 20, min_support=1)
    assert len(p.constants[1]) > 1
    queries = np.stack([np.arange(30), np.zeros(30, dtype=np.int64)], 1)
    batches = list(p._batches(1, queries, _known(tr), exclude_own=False))
    assert len(batches) > (1 if batch_nnz < 1000 else 0)
    for batch in batches:
        cells, phi = p._design(batch)
        want_cells, inverse = np.unique(batch.flat.numpy(), return_inverse=True)
        cols = batch.rule.numpy()[:, None] * 2 + np.arange(2)[None, :]
        feats = p._phi(batch).numpy()
        want = sp.csr_matrix(
            (feats.ravel(), (np.repeat(inverse, 2), cols.ravel())), shape=phi.shape, dtype=np.float32
        )
        np.testing.assert_array_equal(cells.numpy(), want_cells)
        assert phi.has_canonical_format
        for a, b in [(phi.indptr, want.indptr), (phi.indices, want.indices), (phi.data, want.data)]:
            np.testing.assert_array_equal(a, b)


def test_batch_nnz_splits_batches_by_query_without_changing_groundings() -> None:
    """With a small ``batch_nnz`` a chunk's groundings are split by query row: every batch holds at most batch_nnz
    entries (or one query), and the per-query entries, answers and filters equal those of the unsplit batch."""
    from rules.kg_predictor import _known

    rng = np.random.default_rng(1)
    E, R = 30, 3
    tr = np.unique(np.stack([rng.integers(0, E, 200), rng.integers(0, R, 200), rng.integers(0, E, 200)], 1), axis=0)
    bodies = {1: [(0, 0), (2,), (0, 2), (5, 2), (3, 0), (0,)]}
    queries = directed_triples(tr, R)
    queries = queries[queries[:, 1] == 1][:, [0, 2]]
    known = _known(directed_triples(tr, R))

    def per_query(p: RulePredictor) -> tuple[list[tuple[int, ...]], int]:
        out, n = [], 0
        for batch in p._batches(1, queries, known, True):
            assert batch.nnz <= p.config.batch_nnz or batch.size == 1
            row = batch.flat.numpy() // E
            for i in range(batch.size):
                here = row == i
                cells = sorted(zip(batch.flat.numpy()[here] % E, batch.rule.numpy()[here], batch.count.numpy()[here]))
                filt = sorted(batch.filter_flat.numpy()[batch.filter_flat.numpy() // E == i] % E)
                out.append((int(batch.answers[i]), *map(tuple, cells), "filter", *filt))
            n += 1
        return out, n

    whole = RulePredictor(bodies, E, num_relations=R, config=PredictorConfig())
    split = RulePredictor(bodies, E, num_relations=R, config=PredictorConfig(batch_nnz=40, batch_size=16))
    for p in (whole, split):
        p.set_graph(tr)
    (a, n_whole), (b, n_split) = per_query(whole), per_query(split)
    assert a == b and n_whole == 1 and n_split > queries.shape[0] // 16 + 1
    whole.fit(tr, tr)
    split.models = whole.models
    starts = torch.tensor([[s, 1] for s in range(E)])
    torch.testing.assert_close(split.score(starts), whole.score(starts))


def test_type_prior_equals_brute_force_sum_over_relation_types_without_the_head() -> None:
    """prior(e) = b_e + Σ_b u_b · 1[e has an edge of b], over b in 0..2R-1 (inverses = in-edges) except the head
    q and q⁻¹, counted from the triples directly."""
    rng = np.random.default_rng(3)
    E, R, q = 40, 3, 4  # head 4 = relation 1 inverse
    tr = np.unique(np.stack([rng.integers(0, E, 60), rng.integers(0, R, 60), rng.integers(0, E, 60)], 1), axis=0)
    p = RulePredictor({q: [(0,)]}, E, num_relations=R, config=PredictorConfig(type_prior=True))
    p.set_graph(tr)
    model = p._new_model(q)
    with torch.no_grad():
        model.type_weights.copy_(torch.randn(2 * R))
        model.bias.copy_(torch.randn(E))
    u = model.type_weights.numpy()
    expect = model.bias.numpy().astype(np.float64).copy()
    for b in range(2 * R):
        if b in (q, q - R):
            continue
        has = {int(h) for h, r, _ in tr if r == b} if b < R else {int(t) for _, r, t in tr if r == b - R}
        for e in has:
            expect[e] += u[b]
    np.testing.assert_allclose(p._prior(model).numpy(), expect, rtol=1e-5, atol=1e-6)


def test_type_prior_ranks_unseen_answers_of_the_answer_type() -> None:
    """No rule reaches the answers of head 0, which are always 'typed' entities (those with a relation-1 edge).
    Test answers are typed entities never seen as answers in training: the entity bias alone ties them with every
    untyped entity; the type prior ranks the typed ones first."""
    rng = np.random.default_rng(0)
    E, typed = 60, np.arange(30, 60)
    tr = [(int(e), 1, int(rng.integers(0, 30))) for e in typed]  # typed entities have a relation-1 edge
    seen, unseen = typed[:20], typed[20:]
    tr += [(int(rng.integers(0, 30)), 0, int(t)) for t in seen for _ in range(3)]
    te = np.array([(int(rng.integers(0, 30)), 0, int(t)) for t in unseen], dtype=np.int64)
    train = np.unique(np.array(tr, dtype=np.int64), axis=0)
    mrr = {}
    for prior in (False, True):
        cfg = PredictorConfig(epochs=30, lr=0.1, type_prior=prior)
        p = RulePredictor({0: [(2,)]}, E, num_relations=2, config=cfg)
        p.fit(train, train)
        scores = p.score(torch.from_numpy(te[:, :2]))
        known = torch.zeros_like(scores, dtype=torch.bool)
        known[:, torch.from_numpy(seen)] = True  # filter the training answers
        mrr[prior] = float(expected_reciprocal_rank(scores, torch.from_numpy(te[:, 2]), known).mean())
    assert mrr[True] > 2 * mrr[False]
    assert mrr[True] > 0.25  # a tie among the 10 unseen typed entities: H_10 / 10 = .29 (untyped: H_40 / 40 = .11)


def _walks(train: np.ndarray, body: tuple[int, ...], start: int, drop: tuple[int, int, int], R: int) -> set[int]:
    """Brute force: the entities a body reaches from ``start`` on ``train`` without the fact ``drop`` (both ways)."""
    edges = [(h, r, t) for h, r, t in train.tolist() if (h, r, t) != drop]
    step = {(h, r): set() for h, r, _ in edges} | {(t, r + R): set() for _, r, t in edges}
    for h, r, t in edges:
        step[(h, r)].add(t)
        step[(t, r + R)].add(h)
    here = {start}
    for tok in body:
        here = set().union(*(step.get((e, tok), set()) for e in here))
    return here


def test_rule_evidence_is_the_leave_one_out_hit_and_reach_count() -> None:
    """hits = #training queries whose answer the body reaches with the query's own fact removed, reached = #(query,
    candidate) pairs; the confidence start is their ratio (and additive over clients)."""
    train, _ = family(n_families=6)
    R, bodies = 3, [(0, 0), (2,), (0, 2)]
    p = RulePredictor({1: bodies}, 18, num_relations=R, config=PredictorConfig(epochs=1, entity_bias=False))
    p.fit(train, train)
    hits, reached = p.rule_evidence()[1]
    queries = [(h, t) for h, r, t in train.tolist() if r == 1]
    for j, body in enumerate(bodies):
        reach = [_walks(train, body, h, (h, 1, t), R) for h, t in queries]
        assert hits[j] == sum(t in s for (_, t), s in zip(queries, reach))
        assert reached[j] == sum(len(s) for s in reach)


def test_given_confidence_and_weights_start_the_first_bodies_only() -> None:
    """A start given for the server's J bodies leaves bodies appended after them (a client's own) at their local
    start; NaN keeps the local value; eval_init evaluates the start on valid (epoch 0)."""
    train, test = family(n_families=8)
    bodies = [(0, 0), (2,), (0, 2)]
    local = RulePredictor({1: bodies}, 24, num_relations=3, config=PredictorConfig(epochs=0, entity_bias=False))
    local.fit(train, train)
    given = RulePredictor(
        {1: bodies},
        24,
        num_relations=3,
        config=PredictorConfig(epochs=0, entity_bias=False),
        init_confidence={1: np.array([0.25, np.nan])},
    )
    given.fit(train, train)
    w0, w1 = local.rule_weights()[1], given.rule_weights()[1]
    assert w1[0] == pytest.approx(10 * 0.25) and w1[1:] == pytest.approx(w0[1:])
    start = RulePredictor(
        {1: bodies},
        24,
        num_relations=3,
        config=PredictorConfig(epochs=5, eval_every=5, entity_bias=False, eval_init=True),
        init_weights={1: np.array([3.0, np.nan, -1.0])},
    )
    log = start.fit(train, train, valid_triples=test)
    assert log["heads"][1]["history"][0][0] == 0  # the start was scored on valid before training


@pytest.mark.parametrize(("constants", "paths"), [(0, "walks"), (5, "walks"), (0, "auto")])
def test_worker_processes_fit_the_same_weights_as_one_process(
    constants: int, paths: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("rules.workers.MIN_PARALLEL_WORK", 0)  # this small fit too goes to the workers
    train, test = family(seed=2)
    valid = test[:2]

    def run(workers: int) -> tuple[RulePredictor, dict]:
        cfg = PredictorConfig(
            epochs=6,
            eval_every=2,
            lr=0.1,
            batch_size=4,
            max_train_queries=20,
            constant_rules=constants,
            constant_min_support=1,
            workers=workers,
            paths=paths,  # type: ignore[arg-type]
        )
        p = RulePredictor({1: [(0, 0), (2,), (0, 2)], 4: [(3, 3), (2,)], 0: [(1, 3)]}, 36, num_relations=3, config=cfg)
        log = p.fit(train, train, valid_triples=valid)
        return p, log

    torch.set_num_threads(1)
    (one, log1), (two, log2) = run(1), run(2)
    assert (log1["workers"], log2["workers"]) == (1, 2)
    assert sorted(one.models) == sorted(two.models)
    for q, m in one.models.items():
        for a, b in zip(m.parameters(), two.models[q].parameters()):
            assert torch.equal(a, b), q
        np.testing.assert_array_equal(m.h_score, two.models[q].h_score)
    assert {q: len(c) for q, c in one.constants.items()} == {q: len(c) for q, c in two.constants.items()}
    assert log1.get("constant_rules") == log2.get("constant_rules")
    assert log1.get("paths") == log2.get("paths") and {m.paths for m in two.models.values()} <= {log2.get("paths", paths)}
    queries = torch.from_numpy(np.concatenate([test[:, [0, 1]], test[:, [2, 1]] + [0, 3]]))
    assert torch.equal(one.score(queries), two.score(queries))
    for q in log1["heads"]:  # the same log, apart from the time each head took
        assert log1["heads"][q].pop("seconds", 0.0) >= 0 and log2["heads"][q].pop("seconds", 0.0) >= 0
        assert log1["heads"][q] == log2["heads"][q]


def test_a_small_fit_stays_in_one_process() -> None:
    """Below MIN_PARALLEL_WORK (training query, body) pairs, ``workers`` is not used: starting them costs more."""
    train, test = family(seed=2)
    bodies = {1: [(0, 0), (2,), (0, 2)], 4: [(3, 3), (2,)], 0: [(1, 3)]}
    cfg = PredictorConfig(epochs=2, eval_every=2, max_train_queries=5, workers=2)
    log = RulePredictor(bodies, 36, num_relations=3, config=cfg).fit(train, train, valid_triples=test[:2])
    per_head = np.bincount(directed_triples(train, 3)[:, 1], minlength=6)
    assert log["work"] == sum(min(int(per_head[q]), 5) * len(b) for q, b in bodies.items())
    assert log["workers"] == 1 and log["work"] < MIN_PARALLEL_WORK


def test_a_one_head_fit_stays_in_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """One head cannot be split over processes, however large its fit (``rules.workers.workers_pay``)."""
    monkeypatch.setattr("rules.workers.MIN_PARALLEL_WORK", 0)
    train, test = family(seed=2)
    cfg = PredictorConfig(epochs=2, eval_every=2, max_train_queries=5, workers=2)
    log = RulePredictor({1: [(0, 0), (2,)]}, 36, num_relations=3, config=cfg).fit(train, train, valid_triples=test[:2])
    assert log["workers"] == 1 and log["work"] > 0


def test_workers_out_of_range_are_refused() -> None:
    for bad in (0, 65):
        with pytest.raises(ValueError, match="workers must be 1..64"):
            RulePredictor({0: [(1,)]}, 4, num_relations=2, config=PredictorConfig(workers=bad))


def test_auto_paths_keep_the_way_with_the_better_pooled_valid_mrr() -> None:
    """paths="auto" fits every head on simple paths and on walks and keeps, for all heads, the way whose valid MRR
    pooled over the heads' valid queries is higher (simple on a tie): the pooled MRRs equal those of the two
    one-way fits, and every head's model and scores equal the chosen one-way fit's."""
    from kg.grounding.sparse import SparseGraph
    from kg.kg_sources import load_kg
    from rules.kg_mining import mine_chain_rules

    kg = load_kg("synthetic:0")
    E, R = kg.num_entities, kg.num_relations
    bodies = mine_chain_rules(SparseGraph.from_triples(kg.train, E, R), kg.train, 3, max_rules_per_head=12, seed=0)
    fits = {}
    for paths in ("walks", "simple", "auto"):
        p = RulePredictor(bodies, E, num_relations=R, config=PredictorConfig(epochs=10, eval_every=5, paths=paths))
        fits[paths] = (p, p.fit(kg.train, kg.train, valid_triples=kg.valid))
    auto, log = fits["auto"]
    pooled = {}
    for way in ("simple", "walks"):
        heads = [h for h in fits[way][1]["heads"].values() if h.get("valid_queries")]
        pooled[way] = sum(h["best_valid_mrr"] * h["valid_queries"] for h in heads) / sum(h["valid_queries"] for h in heads)
    assert log["paths_valid_mrr"] == pytest.approx(pooled)
    want = "simple" if pooled["simple"] >= pooled["walks"] else "walks"
    assert log["paths"] == want
    queries = torch.from_numpy(np.stack([kg.test[:, 0], kg.test[:, 1]], 1))
    for q, head in log["heads"].items():
        assert auto.models[q].paths == want
        torch.testing.assert_close(auto.models[q].weights, fits[want][0].models[q].weights)
        if head.get("valid_queries"):
            assert head["paths_valid_mrr"] == pytest.approx(
                {w: fits[w][1]["heads"][q]["best_valid_mrr"] for w in ("simple", "walks")}
            )
    torch.testing.assert_close(auto.score(queries), fits[want][0].score(queries))


@pytest.mark.parametrize("splits", [("train", "valid"), ("train", "valid", "test")])
def test_early_stopping_ranks_valid_with_the_given_filter(splits: tuple[str, ...]) -> None:
    """Each head's best valid MRR, pooled over the heads' valid queries, is the filtered valid MRR of the kept
    weights as kg.linkpred ranks it with the same filter (train ∪ valid by default, every split when
    ``filter_triples`` holds them all)."""
    from kg.grounding.sparse import SparseGraph
    from kg.kg_sources import load_kg
    from kg.linkpred import evaluate_link_prediction, known_answers
    from rules.kg_mining import mine_chain_rules

    kg = load_kg("synthetic:0")
    E, R = kg.num_entities, kg.num_relations
    bodies = mine_chain_rules(SparseGraph.from_triples(kg.train, E, R), kg.train, 3, max_rules_per_head=12, seed=0)
    assert set(bodies) == set(range(2 * R))  # every head is fitted and logged
    known = known_answers(kg, splits)
    p = RulePredictor(bodies, E, num_relations=R, config=PredictorConfig(epochs=10, eval_every=5))
    given = known.triples() if "test" in splits else None
    log = p.fit(kg.train, kg.train, valid_triples=kg.valid, filter_triples=given)
    heads = [h for h in log["heads"].values() if h.get("valid_queries")]
    pooled = sum(h["best_valid_mrr"] * h["valid_queries"] for h in heads) / sum(h["valid_queries"] for h in heads)
    assert pooled == pytest.approx(evaluate_link_prediction(p.score, kg, "valid", filter_with=known).compute()["mrr"])


@pytest.mark.parametrize("paths", ["walks", "auto"])
def test_auto_constants_keep_the_way_with_the_better_pooled_valid_mrr(paths: str) -> None:
    """constants="auto" fits every head without and with its rules with constants and keeps, for all heads, the
    way whose valid MRR pooled over the heads' valid queries is higher (without on a tie), jointly with paths
    "auto": the pooled MRRs equal those of the one-way fits, and the scores equal the chosen one-way fit's."""
    from kg.grounding.sparse import SparseGraph
    from kg.kg_sources import load_kg
    from rules.kg_mining import mine_chain_rules

    kg = load_kg("synthetic:0")
    E, R = kg.num_entities, kg.num_relations
    bodies = mine_chain_rules(SparseGraph.from_triples(kg.train, E, R), kg.train, 3, max_rules_per_head=8, seed=0)
    base = PredictorConfig(epochs=10, eval_every=5, constant_rules=30)
    ways = ["simple", "walks"] if paths == "auto" else [paths]
    pooled, fits = {}, {}
    for k, suffix in ((0, ""), (30, "+constants")):  # the predictor's order of preference on a tie
        for way in ways:
            name = way + suffix
            p = RulePredictor(bodies, E, num_relations=R, config=replace(base, paths=way, constant_rules=k))
            fits[name] = (p, p.fit(kg.train, kg.train, valid_triples=kg.valid))
            heads = [h for h in fits[name][1]["heads"].values() if h.get("valid_queries")]
            pooled[name] = sum(h["best_valid_mrr"] * h["valid_queries"] for h in heads) / sum(
                h["valid_queries"] for h in heads
            )
    auto = RulePredictor(bodies, E, num_relations=R, config=replace(base, paths=paths, constants="auto"))
    log = auto.fit(kg.train, kg.train, valid_triples=kg.valid)
    assert log["trials_valid_mrr"] == pytest.approx(pooled)
    want = max(pooled, key=pooled.__getitem__)  # dict order: without constants first, simple first
    assert log["constants"] == ("on" if want.endswith("+constants") else "off")
    way = want.split("+")[0]
    assert log["constants_valid_mrr"] == pytest.approx({"off": pooled[way], "on": pooled[f"{way}+constants"]})
    if paths == "auto":
        assert log["paths"] == way
    assert (log["constant_rules"] > 0) == want.endswith("+constants")
    chosen = fits[want][0]
    assert {q: auto.num_rules(q) for q in auto.bodies} == {q: chosen.num_rules(q) for q in auto.bodies}
    queries = torch.from_numpy(np.stack([kg.test[:, 0], kg.test[:, 1]], 1))
    torch.testing.assert_close(auto.score(queries), chosen.score(queries))


@pytest.mark.parametrize("workers", [1, 2])
def test_a_deadline_keeps_the_ways_fitted_before_it(workers: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a deadline the ways are fitted one after the other and a further one only if, by the longest so far, it
    ends in time: a deadline already passed keeps the first way (simple paths, without constants) and names the
    others in ``ways_skipped``; its heads stop training after ``eval_every`` epochs, the least a cut leaves
    (``budget_cut_epoch`` 2), so the fit equals that way's two-epoch fit. A far deadline fits all four as without
    one and cuts no head."""
    import time

    from kg.grounding.sparse import SparseGraph
    from kg.kg_sources import load_kg
    from rules.kg_mining import mine_chain_rules

    monkeypatch.setattr("rules.workers.MIN_PARALLEL_WORK", 0)
    kg = load_kg("synthetic:0")
    E, R = kg.num_entities, kg.num_relations
    bodies = mine_chain_rules(SparseGraph.from_triples(kg.train, E, R), kg.train, 3, max_rules_per_head=8, seed=0)
    base = PredictorConfig(epochs=6, eval_every=2, patience=9, constant_rules=30, workers=workers)
    auto = replace(base, paths="auto", constants="auto")

    def fit(cfg: PredictorConfig, deadline: float | None = None) -> tuple[RulePredictor, dict]:
        p = RulePredictor(bodies, E, num_relations=R, config=cfg)
        return p, p.fit(kg.train, kg.train, valid_triples=kg.valid, deadline=deadline)

    cut, log = fit(auto, deadline=time.perf_counter() - 1.0)
    assert log["ways_skipped"] == ["walks", "simple+constants", "walks+constants"]
    assert (log["paths"], log["constants"], log["constant_rules"]) == ("simple", "off", 0)
    assert list(log["trials_valid_mrr"]) == ["simple"] and list(log["constants_valid_mrr"]) == ["off"]
    trained = [q for q, h in log["heads"].items() if h["train_queries"]]
    assert trained and log["heads_cut"] == len(trained)
    assert all(log["heads"][q]["budget_cut_epoch"] == 2 for q in trained)
    one, one_log = fit(replace(base, paths="simple", constant_rules=0, epochs=2))
    assert "heads_cut" not in one_log
    queries = torch.from_numpy(np.stack([kg.test[:, 0], kg.test[:, 1]], 1))
    assert torch.equal(cut.score(queries), one.score(queries))
    full, log = fit(auto, deadline=time.perf_counter() + 3600.0)
    assert "ways_skipped" not in log and len(log["trials_valid_mrr"]) == 4 and log["heads_cut"] == 0
    free, free_log = fit(auto)
    assert log["trials_valid_mrr"] == free_log["trials_valid_mrr"]
    assert torch.equal(full.score(queries), free.score(queries))


def test_a_head_stops_after_the_epoch_that_passes_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a fake clock that advances 1 s per training batch (one batch an epoch), a lone head with the deadline
    at 2.5 s passes it in epoch 3: it is evaluated there although evaluations come every 2 epochs, and stops, so
    the fit equals a three-epoch fit. Before epoch ``eval_every`` no cut is made, however late it is."""
    from kg.grounding.sparse import SparseGraph
    from kg.kg_sources import load_kg
    from rules.kg_mining import mine_chain_rules

    kg = load_kg("synthetic:0")
    E, R = kg.num_entities, kg.num_relations
    bodies = mine_chain_rules(SparseGraph.from_triples(kg.train, E, R), kg.train, 3, max_rules_per_head=8, seed=0)
    q = max((h for h in bodies if h < R), key=lambda h: int((kg.train[:, 1] == h).sum()))  # the largest head
    cfg = PredictorConfig(paths="simple", epochs=8, eval_every=2, patience=9, batch_size=100_000)

    class Clock:
        now = 0.0

        @staticmethod
        def perf_counter() -> float:
            return Clock.now

    loss = RulePredictor._loss

    def ticking_loss(self: RulePredictor, model: Any, batch: Any) -> torch.Tensor:
        Clock.now += 1.0
        return loss(self, model, batch)

    def fit(epochs: int, deadline: float | None) -> tuple[RulePredictor, dict]:
        Clock.now = 0.0
        p = RulePredictor({q: bodies[q]}, E, num_relations=R, config=replace(cfg, epochs=epochs))
        return p, p.fit(kg.train, kg.train, valid_triples=kg.valid, heads=[q], deadline=deadline)

    monkeypatch.setattr("rules.kg_predictor.time", Clock)
    monkeypatch.setattr(RulePredictor, "_loss", ticking_loss)
    cut, log = fit(8, 2.5)
    assert log["heads"][q]["budget_cut_epoch"] == 3 and log["heads_cut"] == 1
    assert [e for e, _ in log["heads"][q]["history"]] == [2, 3]
    three, three_log = fit(3, None)
    assert [e for e, _ in three_log["heads"][q]["history"]] == [2, 3]
    torch.testing.assert_close(cut.models[q].weights, three.models[q].weights, rtol=0, atol=0)
    _, late = fit(8, -10.0)  # long past: still trained up to the first evaluation
    assert late["heads"][q]["budget_cut_epoch"] == 2


def test_head_shares_give_each_head_its_part_of_the_time_left() -> None:
    """A head's share of the time left when it starts: its work over the work from it on, times the processes, at
    most 1; the last head may take all that is left, and a head without work is not bounded by its share."""
    assert head_shares([30, 10, 10], 1) == pytest.approx([0.6, 0.5, 1.0])
    assert head_shares([30, 10, 10, 10], 2) == pytest.approx([1.0, 2 / 3, 1.0, 1.0])
    assert head_shares([0, 5], 1) == [1.0, 1.0]
    # one process: after heads that each take exactly their share, the time left is shared out by work
    work, left, spent = [40, 30, 20, 10], 100.0, []
    for share in head_shares(work, 1):
        spent.append(share * left)
        left -= spent[-1]
    assert spent == pytest.approx([40.0, 30.0, 20.0, 10.0]) and left == pytest.approx(0.0)


def test_auto_constants_need_constant_rules() -> None:
    with pytest.raises(ValueError, match="needs constant_rules > 0"):
        RulePredictor({0: [(1,)]}, 4, num_relations=2, config=PredictorConfig(constants="auto"))
    with pytest.raises(ValueError, match="constants must be one of"):
        RulePredictor({0: [(1,)]}, 4, num_relations=2, config=PredictorConfig(constants="on", constant_rules=5))  # type: ignore[arg-type]


@pytest.mark.parametrize("aggregator", ["sum", "noisy-or"])
def test_max_length_fits_as_if_the_longer_bodies_were_not_given(aggregator: str) -> None:
    """Bodies longer than ``max_length`` are never grounded and weigh nothing: the scores, the kept bodies'
    weights and their rule scores equal those of a predictor given only the bodies up to that length."""
    from kg.grounding.sparse import SparseGraph
    from kg.kg_sources import load_kg
    from rules.kg_mining import mine_chain_rules

    kg = load_kg("synthetic:0")
    E, R = kg.num_entities, kg.num_relations
    bodies = mine_chain_rules(SparseGraph.from_triples(kg.train, E, R), kg.train, 3, max_rules_per_head=12, seed=0)
    assert any(len(b) == 3 for bs in bodies.values() for b in bs)
    cfg = PredictorConfig(epochs=10, eval_every=5, aggregator=aggregator)  # type: ignore[arg-type]
    capped = RulePredictor(bodies, E, aggregator, num_relations=R, config=replace(cfg, max_length=2))
    capped.fit(kg.train, kg.train, valid_triples=kg.valid)
    short = {q: [b for b in bs if len(b) <= 2] for q, bs in bodies.items()}
    alone = RulePredictor(short, E, aggregator, num_relations=R, config=cfg)
    alone.fit(kg.train, kg.train, valid_triples=kg.valid)
    queries = torch.from_numpy(np.stack([kg.test[:, 0], kg.test[:, 1]], 1))
    torch.testing.assert_close(capped.score(queries), alone.score(queries))
    weights, scores = capped.rule_weights(), capped.rule_scores()
    off = 0.0 if aggregator == "sum" else float(torch.logit(torch.tensor(1e-3)))
    for q, bs in bodies.items():
        kept = [j for j, b in enumerate(bs) if len(b) <= 2]
        left = [j for j, b in enumerate(bs) if len(b) > 2]
        if kept:
            np.testing.assert_allclose(weights[q][kept], alone.rule_weights()[q], rtol=1e-6)
            np.testing.assert_allclose(scores[q][kept], alone.rule_scores()[q], rtol=1e-6)
        np.testing.assert_allclose(weights[q][left], off, rtol=1e-6)
        assert not np.any(scores[q][left])
    with pytest.raises(ValueError, match="max_length"):
        replace(cfg, max_length=0).check()
    with pytest.raises(ValueError, match="lengths"):
        replace(cfg, lengths="sometimes").check()  # type: ignore[arg-type]


@pytest.mark.parametrize("max_length", [None, 2])
def test_auto_lengths_keep_the_shorter_bodies_only_where_the_pooled_valid_mrr_is_higher(max_length: int | None) -> None:
    """lengths="auto" fits every head with and then without its longest bodies (on the way chosen first) and
    keeps, for all heads, the rules whose valid MRR pooled over the heads' valid queries is higher (the longer on
    a tie): the pooled MRRs equal those of the one-length fits, and the scores equal the chosen fit's."""
    from kg.grounding.sparse import SparseGraph
    from kg.kg_sources import load_kg
    from rules.kg_mining import mine_chain_rules

    kg = load_kg("synthetic:0")
    E, R = kg.num_entities, kg.num_relations
    bodies = mine_chain_rules(SparseGraph.from_triples(kg.train, E, R), kg.train, 3, max_rules_per_head=12, seed=0)
    base = PredictorConfig(epochs=10, eval_every=5, paths="simple", max_length=max_length)
    longest = 3 if max_length is None else max_length
    pooled, fits = {}, {}
    for cap in (max_length, longest - 1):
        p = RulePredictor(bodies, E, num_relations=R, config=replace(base, max_length=cap))
        fits[cap] = (p, p.fit(kg.train, kg.train, valid_triples=kg.valid))
        heads = [h for h in fits[cap][1]["heads"].values() if h.get("valid_queries")]
        pooled[cap] = sum(h["best_valid_mrr"] * h["valid_queries"] for h in heads) / sum(
            h["valid_queries"] for h in heads
        )
    auto = RulePredictor(bodies, E, num_relations=R, config=replace(base, lengths="auto"))
    log = auto.fit(kg.train, kg.train, valid_triples=kg.valid)
    assert log["max_length_valid_mrr"] == pytest.approx(
        {str(longest): pooled[max_length], str(longest - 1): pooled[longest - 1]}
    )
    want = longest - 1 if pooled[longest - 1] > pooled[max_length] else max_length
    assert log["max_length"] == (longest if want is None else want)
    assert all(m.max_length == want for m in auto.models.values())
    queries = torch.from_numpy(np.stack([kg.test[:, 0], kg.test[:, 1]], 1))
    torch.testing.assert_close(auto.score(queries), fits[want][0].score(queries))


def test_auto_lengths_with_one_atom_bodies_only_fit_once() -> None:
    train, _ = family()
    p = RulePredictor({1: [(2,), (5,)]}, 36, num_relations=3, config=replace(CFG, lengths="auto"))
    log = p.fit(train, train, valid_triples=train[:4])
    assert log["max_length"] == 1
    assert log["max_length_valid_mrr"] == {"1": pytest.approx(log["trials_valid_mrr"]["walks"])}


def test_auto_lengths_keep_the_shorter_fit_when_it_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the shorter rules' pooled valid MRR is the higher (made so here by raising it in the pooling), every
    head keeps its fit without the longest bodies: the log says the shorter length, and the scores equal those of
    a fit with that ``max_length``, which later rounds use (the client fixes it)."""
    from kg.grounding.sparse import SparseGraph
    from kg.kg_sources import load_kg
    from rules.kg_mining import mine_chain_rules

    kg = load_kg("synthetic:0")
    E, R = kg.num_entities, kg.num_relations
    bodies = mine_chain_rules(SparseGraph.from_triples(kg.train, E, R), kg.train, 3, max_rules_per_head=12, seed=0)
    base = PredictorConfig(epochs=10, eval_every=5, paths="simple")
    pooled = RulePredictor._pooled

    def favour_shorter(*args: object) -> dict[str, float]:
        return {k: v + (1.0 if "+length<=" in k else 0.0) for k, v in pooled(*args).items()}  # type: ignore[arg-type]

    monkeypatch.setattr(RulePredictor, "_pooled", staticmethod(favour_shorter))
    auto = RulePredictor(bodies, E, num_relations=R, config=replace(base, lengths="auto"))
    log = auto.fit(kg.train, kg.train, valid_triples=kg.valid)
    assert log["max_length"] == 2 and set(log["max_length_valid_mrr"]) == {"3", "2"}
    assert {m.max_length for m in auto.models.values()} == {2}
    monkeypatch.undo()
    two = RulePredictor(bodies, E, num_relations=R, config=replace(base, max_length=2))
    two.fit(kg.train, kg.train, valid_triples=kg.valid)
    queries = torch.from_numpy(np.stack([kg.test[:, 0], kg.test[:, 1]], 1))
    torch.testing.assert_close(auto.score(queries), two.score(queries))

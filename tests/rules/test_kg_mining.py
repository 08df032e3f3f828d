"""Closed-path mining against brute-force simple-path enumeration; AMIE counts against explicit pair sets."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rules.kg_mining as km
from kg.grounding.sparse import SparseGraph
from rules.kg_mining import (
    directed_triples,
    mine_chain_rule_support,
    mine_chain_rules,
    rank_heads_bodies,
    rule_statistics,
    supported_pool,
)


def brute_support(triples: np.ndarray, n_rel: int, max_len: int) -> dict[int, Counter]:
    facts = sorted({tuple(int(x) for x in row) for row in triples})
    edges = {(h, r, t) for h, r, t in facts} | {(t, r + n_rel, h) for h, r, t in facts}
    out: dict[int, Counter] = defaultdict(Counter)
    for h, q, t in sorted({tuple(x) for x in directed_triples(np.array(facts), n_rel).tolist()}):
        inv_q = q + n_rel if q < n_rel else q - n_rel
        usable = edges - {(h, q, t), (t, inv_q, h)}
        adj: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for u, r, v in usable:
            adj[u].append((r, v))
        found: set[tuple[int, ...]] = set()
        stack = [(h, (), (h,))]
        while stack:
            node, body, seen = stack.pop()
            for r, v in adj[node]:
                if v == t:
                    found.add(body + (r,))
                elif v not in seen and len(body) + 1 < max_len:
                    stack.append((v, body + (r,), seen + (v,)))
        for b in found:
            out[q][b] += 1
    return out


@st.composite
def kgs(draw: st.DrawFn) -> tuple[np.ndarray, int, int]:
    n_ent = draw(st.integers(2, 8))
    n_rel = draw(st.integers(1, 3))
    rows = draw(st.lists(st.tuples(st.integers(0, n_ent - 1), st.integers(0, n_rel - 1), st.integers(0, n_ent - 1)),
                         min_size=1, max_size=25, unique=True))
    return np.array(rows, dtype=np.int64), n_ent, n_rel


@settings(max_examples=60, deadline=None)
@given(kgs(), st.integers(1, 3))
def test_support_matches_brute_force(case, max_len) -> None:
    triples, n_ent, n_rel = case
    # self-loop facts make "simple path" ambiguous at the endpoints; the brute force and the miner agree off them
    triples = triples[triples[:, 0] != triples[:, 2]]
    if triples.size == 0:
        return
    g = SparseGraph.from_triples(triples, n_ent, n_rel)
    got = mine_chain_rule_support(g, triples, max_len, samples_per_relation=10_000, max_neighbors=10_000)
    want = brute_support(triples, n_rel, max_len)
    for q in range(2 * n_rel):
        assert got.get(q, {}) == dict(want.get(q, {})), q


def test_own_edge_never_a_body_and_planted_rule_found() -> None:
    # grandparent (1) = parent (0) ∘ parent (0) on chains a -> b -> c
    rows = []
    for k in range(10):
        a, b, c = 3 * k, 3 * k + 1, 3 * k + 2
        rows += [(a, 0, b), (b, 0, c), (a, 1, c)]
    triples = np.array(rows)
    g = SparseGraph.from_triples(triples, 30, 2)
    bodies = mine_chain_rules(g, triples, 3)
    assert bodies[1][0] == (0, 0)
    assert bodies[3][0] == (2, 2)  # inverse head: grandchild = child ∘ child
    for q, bs in bodies.items():
        assert (q,) not in bs


def test_mining_is_deterministic_and_seeded() -> None:
    rng = np.random.default_rng(0)
    triples = np.unique(np.stack([rng.integers(0, 40, 600), rng.integers(0, 4, 600), rng.integers(0, 40, 600)], 1), axis=0)
    g = SparseGraph.from_triples(triples, 40, 4)
    a = mine_chain_rule_support(g, triples, 3, samples_per_relation=20, max_neighbors=5, seed=1)
    b = mine_chain_rule_support(g, triples, 3, samples_per_relation=20, max_neighbors=5, seed=1)
    c = mine_chain_rule_support(g, triples, 3, samples_per_relation=20, max_neighbors=5, seed=2)
    assert a == b
    assert a != c



def _body_pairs(edges: set[tuple[int, int, int]], body: tuple[int, ...], n: int) -> set[tuple[int, int]]:
    """Pairs (x, y) joined by a walk along ``body`` over directed ``edges``, by set composition."""
    pairs = {(x, x) for x in range(n)}
    for q in body:
        pairs = {(x, v) for x, u in pairs for (a, r, v) in edges if a == u and r == q}
    return pairs


def test_rule_statistics_against_pair_sets() -> None:
    rng = np.random.default_rng(3)
    triples = np.unique(np.stack([rng.integers(0, 12, 60), rng.integers(0, 2, 60), rng.integers(0, 12, 60)], 1), axis=0)
    g = SparseGraph.from_triples(triples, 12, 2)
    edges = {(h, r, t) for h, r, t in triples.tolist()} | {(t, r + 2, h) for h, r, t in triples.tolist()}
    bodies = [(0,), (1, 2), (0, 3, 1)]
    stats = rule_statistics(g, 1, bodies, batch_size=5)
    head_pairs = {(h, t) for h, r, t in edges if r == 1}
    for j, body in enumerate(bodies):
        pairs = _body_pairs(edges, body, 12)
        assert stats.body_size[j] == len(pairs)
        assert stats.support[j] == len(pairs & head_pairs)
    assert stats.head_size == len(head_pairs)
    np.testing.assert_allclose(stats.confidence, stats.support / np.maximum(stats.body_size, 1))


def test_rank_by_confidence_orders_by_amie_confidence() -> None:
    rng = np.random.default_rng(5)
    triples = np.unique(np.stack([rng.integers(0, 15, 90), rng.integers(0, 3, 90), rng.integers(0, 15, 90)], 1), axis=0)
    g = SparseGraph.from_triples(triples, 15, 3)
    by_conf = mine_chain_rules(g, triples, 2, rank_by="confidence", max_rules_per_head=None, min_support=1)
    by_sup = mine_chain_rules(g, triples, 2, rank_by="support", max_rules_per_head=None, min_support=1)
    for q in range(6):
        assert sorted(by_conf[q]) == sorted(by_sup[q])
        if by_conf[q]:
            conf = rule_statistics(g, q, by_conf[q]).confidence
            assert np.all(np.diff(conf) <= 1e-12)


def test_supported_pool_takes_the_best_supported_of_each_length() -> None:
    ranked = [(1, 2, 3), (4, 5, 6), (1,), (2, 2), (0, 0, 0), (3, 3), (2,), (5, 5)]
    assert supported_pool(ranked, 2) == [(1, 2, 3), (4, 5, 6)]
    assert supported_pool(ranked, 2, by_length=True) == [(1, 2, 3), (4, 5, 6), (1,), (2, 2), (3, 3), (2,)]
    assert supported_pool(ranked, 10, by_length=True) == ranked


def test_pool_by_length_lets_a_confident_short_body_past_better_supported_long_ones() -> None:
    """A pool of 2 filled by support holds the two length-2 bodies; by length it also counts the length-1 body,
    whose confidence (1.0) puts it first, as brute force over the pair sets says."""
    rng = np.random.default_rng(7)
    triples = np.unique(np.stack([rng.integers(0, 15, 90), rng.integers(0, 3, 90), rng.integers(0, 15, 90)], 1), axis=0)
    head = 0
    facts = triples[triples[:, 1] == head]
    copy = np.stack([facts[:, 0], np.full(len(facts), 3), facts[:, 2]], 1)  # relation 3 mirrors the head
    g = SparseGraph.from_triples(np.concatenate([triples, copy]), 15, 4)
    support = {(1, 2): 50, (2, 5): 40, (3,): 5}
    by_support = rank_heads_bodies(g, {head: support}, pool_per_head=2)[head]
    by_length = rank_heads_bodies(g, {head: support}, pool_per_head=2, pool_by_length=True)[head]
    assert sorted(by_support) == [(1, 2), (2, 5)]
    assert by_length[0] == (3,) and sorted(by_length) == [(1, 2), (2, 5), (3,)]
    conf = rule_statistics(g, head, by_length).confidence
    assert conf[0] == 1.0 and np.all(np.diff(conf) <= 1e-12)


def test_dense_rule_statistics_equal_sparse() -> None:
    """The batched dense products (small graphs) give the sparse path's counts exactly, bodies of mixed length."""
    rng = np.random.default_rng(11)
    triples = np.unique(np.stack([rng.integers(0, 20, 150), rng.integers(0, 3, 150), rng.integers(0, 20, 150)], 1),
                        axis=0)
    g = SparseGraph.from_triples(triples, 20, 3)
    bodies = [(0,), (4, 1), (2, 5), (0, 3, 1), (5, 5, 5), (1,), (3, 0, 4)]
    for q in range(6):
        sparse = rule_statistics(g, q, bodies, batch_size=7, dense=False)
        dense = rule_statistics(g, q, bodies, dense=True)
        np.testing.assert_array_equal(dense.support, sparse.support)
        np.testing.assert_array_equal(dense.body_size, sparse.body_size)
        assert dense.head_size == sparse.head_size and dense.bodies == sparse.bodies
    assert rule_statistics(g, 0, bodies).body_size.tolist() == rule_statistics(g, 0, bodies, dense=False).body_size.tolist()


def test_dense_rule_statistics_equal_sparse_on_simple_paths() -> None:
    """On a graph with paths="simple" (self-loops included) the dense products give the sparse counts, and the
    body size is the number of pairs (x, y) joined by a simple path, enumerated."""
    rng = np.random.default_rng(12)
    triples = np.unique(np.stack([rng.integers(0, 9, 60), rng.integers(0, 2, 60), rng.integers(0, 9, 60)], 1), axis=0)
    g = SparseGraph.from_triples(triples, 9, 2, paths="simple")
    bodies = [(0,), (2, 1), (0, 2), (0, 3, 1), (2, 0, 2), (3, 3, 3), (1, 2, 0)]
    edges = {(int(h), int(r), int(t)) for h, r, t in triples} | {(int(t), int(r) + 2, int(h)) for h, r, t in triples}
    for q in range(4):
        sparse = rule_statistics(g, q, bodies, batch_size=4, dense=False)
        dense = rule_statistics(g, q, bodies, dense=True)
        np.testing.assert_array_equal(dense.support, sparse.support)
        np.testing.assert_array_equal(dense.body_size, sparse.body_size)
    for j, body in enumerate(bodies):
        pairs = {
            (nodes[0], nodes[-1])
            for nodes in itertools.permutations(range(9), len(body) + 1)
            if all((nodes[k], b, nodes[k + 1]) in edges for k, b in enumerate(body))
        }
        assert dense.body_size[j] == len(pairs), body


@pytest.mark.parametrize("paths", ["walks", "simple"])
def test_head_statistics_ground_each_body_once_for_all_heads(paths, monkeypatch) -> None:
    """head_statistics over several heads' pools (overlapping) equals each head's sparse rule_statistics, and
    on the dense path each distinct body is counted once, whatever the number of pools holding it."""
    from rules import kg_mining

    rng = np.random.default_rng(13)
    triples = np.unique(np.stack([rng.integers(0, 12, 90), rng.integers(0, 3, 90), rng.integers(0, 12, 90)], 1), axis=0)
    g = SparseGraph.from_triples(triples, 12, 3, paths=paths)
    pools = {0: [(1,), (2, 4), (0, 3, 1)], 2: [(2, 4), (5, 5, 5), (1,)], 4: [(0, 3, 1), (3,)], 5: []}
    seen: list[int] = []
    counted = kg_mining.dense_body_statistics

    def spy(adjacency, inverse, bodies, heads, simple, max_bytes):
        seen.append(len(bodies))
        return counted(adjacency, inverse, bodies, heads, simple, max_bytes)

    monkeypatch.setattr(kg_mining, "dense_body_statistics", spy)
    shared = kg_mining.head_statistics(g, pools, dense=True)
    assert seen == [5]  # 8 (head, body) pairs, 5 distinct bodies, one call
    for q, pool in pools.items():
        want = rule_statistics(g, q, pool, dense=False)
        np.testing.assert_array_equal(shared[q].support, want.support)
        np.testing.assert_array_equal(shared[q].body_size, want.body_size)
        assert shared[q].bodies == want.bodies and shared[q].head_size == want.head_size


def test_sampled_starts_count_only_the_sampled_subjects() -> None:
    """rule_statistics(max_starts=k) equals the pair-set counts restricted to k sampled subjects x; with k at
    least the number of candidate subjects it is exact; the sample is fixed by (seed, head)."""
    rng = np.random.default_rng(3)
    triples = np.unique(np.stack([rng.integers(0, 30, 200), rng.integers(0, 2, 200), rng.integers(0, 30, 200)], 1),
                        axis=0)
    g = SparseGraph.from_triples(triples, 30, 2)
    edges = {(h, r, t) for h, r, t in triples.tolist()} | {(t, r + 2, h) for h, r, t in triples.tolist()}
    bodies = [(0,), (0, 2), (2, 1)]
    exact = rule_statistics(g, 1, bodies, dense=False)
    full = rule_statistics(g, 1, bodies, dense=False, max_starts=10_000)
    np.testing.assert_array_equal(full.support, exact.support)
    np.testing.assert_array_equal(full.body_size, exact.body_size)
    sampled = rule_statistics(g, 1, bodies, dense=False, max_starts=6, seed=4)
    again = rule_statistics(g, 1, bodies, dense=False, max_starts=6, seed=4)
    np.testing.assert_array_equal(sampled.body_size, again.body_size)
    head_pairs = {(h, t) for h, r, t in edges if r == 1}
    pair_sets = [_body_pairs(edges, body, 30) for body in bodies]
    # the documented sample: 6 of the subjects with an edge of some body's first relation, drawn by rng((seed, head))
    firsts = {b[0] for b in bodies}
    subjects = np.array(sorted({h for h, r, _ in edges if r in firsts}))
    chosen = set(np.random.default_rng([4, 1]).choice(subjects, size=6, replace=False).tolist())
    for j, pairs in enumerate(pair_sets):
        assert sampled.body_size[j] == sum(1 for x, _ in pairs if x in chosen)
        assert sampled.support[j] == sum(1 for x, _ in pairs & head_pairs if x in chosen)
    assert sampled.body_size.sum() < exact.body_size.sum()


def _drawn_reference(triples: np.ndarray, n_ent: int, n_rel: int, max_len: int, cap: int, seed: int) -> dict:
    """Supports by sets over the drawn edges: per head q, rng((seed, q)); per fact (in (h, t) order) h's out-edges
    (by relation, then entity) are drawn first, then t's: ``cap`` of them, sorted, where there are more."""
    facts = np.unique(directed_triples(triples, n_rel), axis=0)
    out_edges: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for h, r, t in sorted({(h, r, t) for h, r, t in facts.tolist()}):
        out_edges[h].append((r, t))
    inv = lambda r: r + n_rel if r < n_rel else r - n_rel  # noqa: E731
    result: dict[int, Counter] = {}
    for q in range(2 * n_rel):
        rng = np.random.default_rng([seed, q])
        support: Counter = Counter()
        for h, _, t in facts[facts[:, 1] == q].tolist():
            drawn = []
            for u in (h, t):
                edges = sorted(out_edges[u])
                if len(edges) > cap:
                    edges = [edges[i] for i in np.sort(rng.choice(len(edges), size=cap, replace=False))]
                drawn.append(edges)
            found = {(r,) for r, v in out_edges[h] if v == t and r != q}
            if max_len >= 2:
                ends = [(inv(r), z) for r, z in drawn[1] if z not in (h, t)]
                for r1, y in drawn[0]:
                    if y in (h, t):
                        continue
                    found |= {(r1, r3) for r3, z in ends if z == y}
                    if max_len >= 3:
                        found |= {(r1, b2, r3) for b2, z in out_edges[y] if z != y for r3, z3 in ends if z3 == z}
            support.update(found)
        result[q] = dict(support)
    return result


@pytest.mark.parametrize("max_len", [1, 2, 3])
def test_capped_neighbours_match_sets_over_the_drawn_edges(max_len: int) -> None:
    """With h's and t's neighbours capped (drawn by the documented rng order), the supports equal set-based path
    enumeration over the drawn edges (a middle entity's edges all count)."""
    rng = np.random.default_rng(11)
    triples = np.unique(np.stack([rng.integers(0, 25, 400), rng.integers(0, 3, 400), rng.integers(0, 25, 400)], 1), axis=0)
    triples = triples[triples[:, 0] != triples[:, 2]]
    g = SparseGraph.from_triples(triples, 25, 3)
    got = mine_chain_rule_support(g, triples, max_len, samples_per_relation=10_000, max_neighbors=4, seed=5)
    want = _drawn_reference(triples, 25, 3, max_len, cap=4, seed=5)
    for q in range(6):
        assert got[q] == want[q], q


def test_closed_path_kernel_compiled_plain_and_sorted_agree() -> None:
    """The compiled kernel, its plain-Python form, and both without the table of seen codes (the distinct-by-sorting
    path large KGs take) give each triple the same distinct codes."""
    rng = np.random.default_rng(2)
    triples = np.unique(np.stack([rng.integers(0, 20, 300), rng.integers(0, 3, 300), rng.integers(0, 20, 300)], 1), axis=0)
    g = SparseGraph.from_triples(triples, 20, 3)
    out = km._OutEdges(g)
    facts = np.unique(directed_triples(triples, 3), axis=0)[:60]
    inv = np.array([3, 4, 5, 0, 1, 2], dtype=np.int64)
    sides = [np.arange(out.ptr[u], out.ptr[u + 1]) for h, _, t in facts.tolist() for u in (h, t)]
    side_ptr = np.concatenate([[0], np.cumsum([s.size for s in sides])]).astype(np.int64)
    args = (out.ptr, out.rel, out.dst, inv, facts[:, 0].copy(), facts[:, 2].copy(), 1, side_ptr, np.concatenate(sides))
    runs = []
    for kernel in (km._closed_paths, km._closed_path_kernel):
        for seen in (np.zeros(7**3, np.int32), np.zeros(0, np.int32)):
            codes, n = kernel(*args, 3, 7, seen)
            runs.append(np.sort(codes[:n]))
    assert runs[0].size > 100
    for other in runs[1:]:
        np.testing.assert_array_equal(other, runs[0])


@pytest.mark.parametrize("compiled", [True, False])
def test_walk_counts_by_sets_equal_pair_sets(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """rule_statistics on walks without dense products counts by sets in one loop (compiled, or its plain-Python
    form): support and body size equal the pair-set counts, over all starts and over a sample of them."""
    if not compiled:
        monkeypatch.setattr(km, "_reach", km._reach_kernel)
    rng = np.random.default_rng(8)
    triples = np.unique(np.stack([rng.integers(0, 20, 120), rng.integers(0, 3, 120), rng.integers(0, 20, 120)], 1), axis=0)
    g = SparseGraph.from_triples(triples, 20, 3)
    edges = {(h, r, t) for h, r, t in triples.tolist()} | {(t, r + 3, h) for h, r, t in triples.tolist()}
    bodies = [(0,), (0, 3), (0, 3, 1), (0, 4, 2), (5,), (5, 5, 5), (1, 4), (0, 3)]  # (0, 3) twice: both counted
    head_pairs = {(h, t) for h, r, t in edges if r == 2}
    pair_sets = [_body_pairs(edges, b, 20) for b in bodies]
    stats = rule_statistics(g, 2, bodies, dense=False)
    for j, pairs in enumerate(pair_sets):
        assert stats.body_size[j] == len(pairs), bodies[j]
        assert stats.support[j] == len(pairs & head_pairs), bodies[j]
    sampled = rule_statistics(g, 2, bodies, dense=False, max_starts=5, seed=1)
    starts = g.sources([b[0] for b in bodies])
    chosen = set(np.random.default_rng([1, 2]).choice(starts, size=5, replace=False).tolist())
    for j, pairs in enumerate(pair_sets):
        assert sampled.body_size[j] == sum(1 for x, _ in pairs if x in chosen)
        assert sampled.support[j] == sum(1 for x, _ in pairs & head_pairs if x in chosen)
    assert stats.support.sum() > 0


def test_walk_counts_by_sets_refuse_relations_out_of_range() -> None:
    g = SparseGraph.from_triples(np.array([[0, 0, 1], [1, 0, 2]]), 3, 1)
    with pytest.raises(ValueError, match="outside"):
        rule_statistics(g, 0, [(0, 2)], dense=False)


def test_counting_by_sets_takes_walks_only() -> None:
    triples = np.array([[0, 0, 1], [1, 0, 2]])
    walks = SparseGraph.from_triples(triples, 3, 1)
    by_products = rule_statistics(walks, 0, [(0, 0), (1,)], dense=False, by_sets=False)
    by_sets = rule_statistics(walks, 0, [(0, 0), (1,)], dense=False, by_sets=True)
    np.testing.assert_array_equal(by_sets.body_size, by_products.body_size)
    with pytest.raises(ValueError, match="simple paths"):
        rule_statistics(SparseGraph.from_triples(triples, 3, 1, paths="simple"), 0, [(0,)], dense=False, by_sets=True)

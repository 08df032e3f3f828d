"""SparseGraph path counts against brute-force walk enumeration on small random graphs."""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kg.grounding.sparse import SparseGraph, SparseGraphError


def _facts(
    triples: np.ndarray, num_relations: int, exclude: tuple[int, int, int] | None
) -> set[tuple[int, ...]]:
    """The distinct facts of ``triples``, less the excluded one (named forwards or through its inverse relation)."""
    facts = {tuple(int(x) for x in row) for row in triples}
    if exclude is not None:
        h, r, t = exclude
        if r >= num_relations:  # an inverse-relation triple names the fact (t, r - R, h)
            h, r, t = t, r - num_relations, h
        facts.discard((h, r, t))
    return facts


def brute_counts(
    triples: np.ndarray, num_relations: int, body: tuple[int, ...], start: int, num_entities: int,
    exclude: tuple[int, int, int] | None = None,
) -> np.ndarray:
    """Walk counts by explicit path expansion over a dict adjacency (facts deduplicated, inverses added)."""
    facts = _facts(triples, num_relations, exclude)
    adj: dict[tuple[int, int], list[int]] = defaultdict(list)
    for h, r, t in facts:
        adj[(h, r)].append(t)
        adj[(t, r + num_relations)].append(h)
    walks = {start: 1}
    for q in body:
        nxt: dict[int, int] = defaultdict(int)
        for node, n in walks.items():
            for v in adj[(node, q)]:
                nxt[v] += n
        walks = nxt
    out = np.zeros(num_entities)
    for node, n in walks.items():
        out[node] = n
    return out


def brute_simple_counts(
    triples: np.ndarray, num_relations: int, body: tuple[int, ...], start: int, num_entities: int,
    exclude: tuple[int, int, int] | None = None,
) -> np.ndarray:
    """Simple-path counts by enumerating every sequence of pairwise different entities start, z_1, ..., z_L."""
    facts = _facts(triples, num_relations, exclude)
    edges = facts | {(t, r + num_relations, h) for h, r, t in facts}
    out = np.zeros(num_entities)
    for rest in itertools.permutations([e for e in range(num_entities) if e != start], len(body)):
        nodes = (start, *rest)
        if all((nodes[k], q, nodes[k + 1]) in edges for k, q in enumerate(body)):
            out[nodes[-1]] += 1
    return out


@st.composite
def graphs(draw: st.DrawFn) -> tuple[np.ndarray, int, int, list[tuple[int, ...]], np.ndarray]:
    n_ent = draw(st.integers(2, 9))
    n_rel = draw(st.integers(1, 3))
    n_tri = draw(st.integers(1, 30))
    rows = draw(
        st.lists(
            st.tuples(st.integers(0, n_ent - 1), st.integers(0, n_rel - 1), st.integers(0, n_ent - 1)),
            min_size=n_tri, max_size=n_tri,
        )
    )
    bodies = draw(
        st.lists(st.lists(st.integers(0, 2 * n_rel - 1), min_size=1, max_size=3).map(tuple), min_size=1, max_size=6)
    )
    starts = np.array(draw(st.lists(st.integers(0, n_ent - 1), min_size=1, max_size=6)), dtype=np.int64)
    return np.array(rows, dtype=np.int64), n_ent, n_rel, bodies, starts


@settings(max_examples=60, deadline=None)
@given(graphs(), st.sampled_from(["scipy", "torch"]))
def test_path_counts_match_brute_force(case, backend) -> None:
    triples, n_ent, n_rel, bodies, starts = case
    g = SparseGraph.from_triples(triples, n_ent, n_rel)
    for body in bodies:
        got = g.path_counts(body, torch.as_tensor(starts), backend=backend, batch_size=2).numpy()
        want = np.stack([brute_counts(triples, n_rel, body, int(s), n_ent) for s in starts])
        np.testing.assert_allclose(got, want)


@settings(max_examples=60, deadline=None)
@given(graphs(), st.sampled_from(["scipy", "torch"]), st.data())
def test_exclusion_matches_brute_force(case, backend, data) -> None:
    """Row i drops the fact excluded for it (both directions), other rows keep it."""
    triples, n_ent, n_rel, bodies, starts = case
    g = SparseGraph.from_triples(triples, n_ent, n_rel)
    # exclude, per start, one existing fact (possibly named through its inverse relation) or a missing one
    picks = data.draw(st.lists(st.integers(0, len(triples) - 1), min_size=starts.size, max_size=starts.size))
    flips = data.draw(st.lists(st.booleans(), min_size=starts.size, max_size=starts.size))
    excl = []
    for p, flip in zip(picks, flips):
        h, r, t = (int(x) for x in triples[p])
        excl.append((t, r + n_rel, h) if flip else (h, r, t))
    excl_arr = np.array(excl, dtype=np.int64)
    for body in bodies:
        got = g.path_counts(body, starts, exclude=excl_arr, backend=backend, batch_size=4).numpy()
        want = np.stack(
            [brute_counts(triples, n_rel, body, int(s), n_ent, exclude=e) for s, e in zip(starts, excl)]
        )
        np.testing.assert_allclose(got, want)
    # the trie-sharing iterator gives the same numbers
    for dense_max_bytes in (0, 1 << 20):  # sparse products, then the dense path for small graphs
        g = SparseGraph.from_triples(triples, n_ent, n_rel, dense_max_bytes=dense_max_bytes)
        assert g.uses_dense == (dense_max_bytes > 0)
        for j, mat in g.iter_path_counts(bodies, starts, exclude=excl_arr):
            want = np.stack(
                [brute_counts(triples, n_rel, bodies[j], int(s), n_ent, exclude=e) for s, e in zip(starts, excl)]
            )
            np.testing.assert_allclose(mat.toarray(), want)


@settings(max_examples=60, deadline=None)
@given(graphs(), st.data())
def test_simple_paths_match_brute_force(case, data) -> None:
    """paths="simple" counts the paths on which no entity repeats, with each row's own fact excluded, on the
    sparse and the dense products, through iter_path_counts and path_counts alike."""
    triples, n_ent, n_rel, bodies, starts = case
    picks = data.draw(st.lists(st.integers(0, len(triples) - 1), min_size=starts.size, max_size=starts.size))
    excl = [(int(s), int(triples[p][1]), int(triples[p][2])) for s, p in zip(starts, picks)]
    for exclude in (None, excl):
        want = [
            np.stack([brute_simple_counts(triples, n_rel, b, int(s), n_ent, None if exclude is None else e)
                      for s, e in zip(starts, excl)])
            for b in bodies
        ]
        arr = None if exclude is None else np.array(exclude, dtype=np.int64)
        for dense_max_bytes in (0, 1 << 20):
            g = SparseGraph.from_triples(triples, n_ent, n_rel, dense_max_bytes=dense_max_bytes, paths="simple")
            for j, mat in g.iter_path_counts(bodies, starts, exclude=arr):
                np.testing.assert_allclose(mat.toarray(), want[j])
        for j, body in enumerate(bodies):
            np.testing.assert_allclose(g.path_counts(body, starts, exclude=arr, batch_size=2).numpy(), want[j])


@settings(max_examples=80, deadline=None)
@given(graphs(), st.sampled_from(["walks", "simple"]), st.sampled_from([None, 1, 3]), st.data())
def test_path_entries_match_brute_force(case, paths, max_fanout, data) -> None:
    """path_entries gives every body's non-zero counts, each row's own fact excluded, a row reaching more than
    ``max_fanout`` entities left out, row totals beside them: batched over the trie's levels and body by body
    alike, batched in the documented order (bodies in trie order, then row, then entity)."""
    triples, n_ent, n_rel, bodies, starts = case
    picks = data.draw(st.lists(st.integers(0, len(triples) - 1), min_size=starts.size, max_size=starts.size))
    excl = [(int(s), int(triples[p][1]), int(triples[p][2])) for s, p in zip(starts, picks)]
    brute = brute_simple_counts if paths == "simple" else brute_counts
    want = []
    for j in sorted(range(len(bodies)), key=lambda j: bodies[j]):
        counts = np.stack([brute(triples, n_rel, bodies[j], int(s), n_ent, e) for s, e in zip(starts, excl)])
        if max_fanout is not None:
            counts[(counts != 0).sum(1) > max_fanout] = 0
        for i, e in zip(*np.nonzero(counts)):
            want.append((j, i, e, counts[i, e], counts[i].sum()))
    g = SparseGraph.from_triples(triples, n_ent, n_rel, paths=paths)
    for batched in (True, False):  # batched dense products, then body by body
        got = g.path_entries(bodies, starts, np.array(excl, dtype=np.int64), max_fanout, batched=batched)
        rows = sorted(zip(got.body, got.row, got.col, got.count, got.total), key=lambda x: (bodies[x[0]], x[0], x[1], x[2]))
        assert [tuple(float(v) for v in r) for r in rows] == [tuple(float(v) for v in r) for r in want]
        if batched:
            assert [tuple(r) for r in zip(got.body, got.row, got.col)] == [tuple(r[:3]) for r in rows]


def test_only_small_dense_graphs_stack_bodies() -> None:
    """Batched dense products where frontiers fill (≥ E²/10 directed edges) and the dense adjacencies are small."""
    full = np.array([(h, 0, t) for h in range(8) for t in range(8) if h != t])
    assert SparseGraph.from_triples(full, 8, 1).stacks_bodies
    assert SparseGraph.from_triples(full[:4], 8, 1).stacks_bodies  # 8 directed edges ≥ 64 / 10
    assert not SparseGraph.from_triples(full[:3], 8, 1).stacks_bodies  # 6 < 64 / 10
    assert not SparseGraph.from_triples(full, 8, 1, max_batch_bytes=1024).stacks_bodies  # 2·64·4 > 1024 / 4


def test_simple_paths_never_return_through_a_detour() -> None:
    """0 -r-> 1 <-r- 2 -r-> 3: the body (r, ~r, r) walks from 0 back to 1 (0 -> 1 -> 0 -> 1) and on to 3;
    as a simple path it reaches 3 only. A body longer than 3 is refused under simple paths."""
    triples = np.array([[0, 0, 1], [2, 0, 1], [2, 0, 3]])
    body = (0, 1, 0)
    walks = SparseGraph.from_triples(triples, 4, 1).path_counts(body, [0]).numpy()
    simple = SparseGraph.from_triples(triples, 4, 1, paths="simple").path_counts(body, [0]).numpy()
    assert walks.tolist() == [[0, 2, 0, 1]] and simple.tolist() == [[0, 0, 0, 1]]
    with pytest.raises(SparseGraphError, match="length ≤ 3"):
        SparseGraph.from_triples(triples, 4, 1, paths="simple").path_counts((0, 1, 0, 1), [0])
    with pytest.raises(SparseGraphError, match="paths must be one of"):
        SparseGraph.from_triples(triples, 4, 1, paths="trails")  # type: ignore[arg-type]


def test_exclusion_removes_both_directions_and_only_its_row() -> None:
    # 0 -r0-> 1 -r0-> 2 ; body [r0, r0] from 0 reaches 2 once; [r0, r0^-1] from 0 returns to 0 once
    g = SparseGraph.from_triples(np.array([[0, 0, 1], [1, 0, 2]]), 3, 1)
    starts = np.array([0, 0])
    excl = np.array([[0, 0, 1], [-1, -1, -1]])
    two = g.path_counts([0, 0], starts, exclude=excl)
    assert two.tolist() == [[0, 0, 0], [0, 0, 1]]
    back = g.path_counts([1], np.array([1, 1]), exclude=np.array([[0, 0, 1], [-1, -1, -1]]))
    assert back.tolist() == [[0, 0, 0], [1, 0, 0]]
    # a fact that is not in the graph excludes nothing
    assert g.path_counts([0], np.array([0]), exclude=np.array([[0, 0, 2]])).tolist() == [[0, 1, 0]]


def test_duplicate_facts_count_once_and_memory_bound() -> None:
    g = SparseGraph.from_triples(np.array([[0, 0, 1], [0, 0, 1]]), 2, 1, max_batch_bytes=1 << 20)
    assert g.num_edges == 2
    assert g.path_counts([0], np.array([0])).tolist() == [[0, 1]]
    b = g.default_batch_size()
    assert g.memory_estimate(b) <= g.graph_bytes() + (1 << 20)
    assert g.memory_estimate(2 * b) > g.memory_estimate(b)


@pytest.mark.parametrize(
    "kwargs",
    [{"body": [2]}, {"body": []}, {"body": [0], "starts": [5]}, {"body": [0], "starts": [0], "exclude": [[0, 0, 1]] * 2}],
)
def test_bad_input_raises(kwargs) -> None:
    g = SparseGraph.from_triples(np.array([[0, 0, 1]]), 2, 1)
    starts = kwargs.pop("starts", [0])
    with pytest.raises(SparseGraphError):
        g.path_counts(kwargs["body"], np.array(starts), exclude=kwargs.get("exclude"))


def test_from_triples_rejects_inverse_ids() -> None:
    with pytest.raises(SparseGraphError, match="relation id"):
        SparseGraph.from_triples(np.array([[0, 1, 1]]), 2, 1)


def test_sources_are_the_entities_with_an_out_edge_of_the_relations() -> None:
    triples = np.array([[0, 0, 1], [2, 0, 1], [3, 1, 4]])
    g = SparseGraph.from_triples(triples, 6, 2)
    assert g.sources([0]).tolist() == [0, 2]
    assert g.sources([2]).tolist() == [1]  # inverse of relation 0: tails of its facts
    assert g.sources([0, 1, 0]).tolist() == [0, 2, 3]
    assert g.sources([]).tolist() == []


def test_relation_types_mark_each_entity_with_the_relations_of_its_edges() -> None:
    """relation_types()[e, b] = 1 iff e has an out-edge of b (in-edges of r appear as its inverse r + R)."""
    rng = np.random.default_rng(0)
    E, R = 12, 3
    triples = np.unique(np.stack([rng.integers(0, E, 20), rng.integers(0, R, 20), rng.integers(0, E, 20)], 1), axis=0)
    g = SparseGraph.from_triples(triples, E, R)
    expect = np.zeros((E, 2 * R), dtype=np.float32)
    for h, r, t in triples:
        expect[h, r] = expect[t, r + R] = 1.0
    np.testing.assert_array_equal(g.relation_types().toarray(), expect)
    assert g.relation_types() is g.relation_types()  # cached

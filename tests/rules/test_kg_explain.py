"""KG explanations: the bounded grounding search against brute-force enumeration and the sparse path counts, head
names (~r, inv_r, ids), path text, and explanations built on a small store."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kg.grounding.sparse import SparseGraph
from rules.fol import RelationVocab, UnknownRelationError
from rules.kg_explain import explain_kg, format_path, groundings, parse_head
from rules.measures import RuleCounts
from rules.store import RuleStore

FAMILY = ("parent_of", "sibling_of", "grandparent_of")
NAMES = ("anna", "bob", "carl", "dora", "eve")


def brute_force(triples: np.ndarray, R: int, body: tuple[int, ...], h: int, t: int, E: int, leave_out=()):
    """Every walk h -body-> t over all (E^(L-1)) middle-entity tuples, in lexicographic order."""
    edges = {(int(a), int(r), int(b)) for a, r, b in triples} | {(int(b), int(r) + R, int(a)) for a, r, b in triples}
    for a, r, b in leave_out:
        edges -= {(a, r, b), (b, r + R, a)}
    out = []
    for mids in itertools.product(range(E), repeat=len(body) - 1):
        path = (h, *mids, t)
        if all((path[k], body[k], path[k + 1]) in edges for k in range(len(body))):
            out.append(path)
    return out


@settings(max_examples=80, deadline=None)
@given(
    st.integers(2, 6),
    st.integers(1, 3),
    st.integers(0, 2**32 - 1),
    st.lists(st.integers(0, 5), min_size=1, max_size=3),
    st.tuples(st.integers(0, 5), st.integers(0, 5)),
    st.sampled_from([None, 1, 2, 1000]),
    st.booleans(),
    st.sampled_from(["walks", "simple"]),
)
def test_groundings_match_brute_force(E, R, seed, raw_body, pair, limit, leave, paths) -> None:
    """Walks, or on a graph with paths="simple" the walks on which no entity repeats."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 3 * E * R))
    triples = np.stack([rng.integers(0, E, n), rng.integers(0, R, n), rng.integers(0, E, n)], 1).reshape(-1, 3)
    graph = SparseGraph.from_triples(triples, E, R, paths=paths)
    body = tuple(b % (2 * R) for b in raw_body)
    h, t = pair[0] % E, pair[1] % E
    leave_out = [(h, 0, t)] if leave else []
    expected = brute_force(triples, R, body, h, t, E, leave_out)
    if paths == "simple":
        expected = [p for p in expected if len(set(p)) == len(p)]
    total, paths = groundings(graph, body, h, t, limit, leave_out)
    assert total == len(expected)
    assert paths == expected[: limit if limit is not None else None]
    if not leave_out:  # the same walks the predictor counts
        counts = graph.path_counts(body, np.array([h]))
        assert total == int(np.asarray(counts.todense() if hasattr(counts, "todense") else counts)[0, t])


def test_parse_head_names_inverses_and_ids() -> None:
    v = RelationVocab(("parent_of", "inv_x", "sibling_of"))
    assert parse_head(v, "parent_of") == (0, False)
    assert parse_head(v, "~parent_of") == (0, True) == parse_head(v, "inv_parent_of") == parse_head(v, "3")
    assert parse_head(v, "inv_x") == (1, False)  # a relation's own name wins over the prefix reading
    assert parse_head(v, 2) == (2, False)
    with pytest.raises(UnknownRelationError, match="did you mean 'parent_of'"):
        parse_head(v, "~parnt_of")
    with pytest.raises(ValueError, match="outside"):
        parse_head(v, "6")


def test_format_path_prints_each_fact_in_its_direction() -> None:
    v = RelationVocab(FAMILY)
    ent = NAMES.__getitem__
    assert format_path((0, 1, 2), (0, 0), v, ent) == "anna -parent_of-> bob -parent_of-> carl"
    assert format_path((2, 1, 0), (3, 3), v, ent) == "carl <-parent_of- bob <-parent_of- anna"


def family_store() -> tuple[RuleStore, SparseGraph]:
    """anna -> bob -> {carl, dora}; bob, eve siblings; grandparent_of(anna, dora) known, (anna, carl) asked."""
    R = len(FAMILY)
    triples = np.array([[0, 0, 1], [1, 0, 2], [1, 0, 3], [0, 0, 4], [1, 1, 4], [4, 1, 1], [0, 2, 3]])
    graph = SparseGraph.from_triples(triples, len(NAMES), R)
    store = RuleStore(FAMILY, meta={"method": "fednsl-kg"})
    S = 2 * R
    bodies = [[0, 0, S], [0, S, S], [2, S, S], [0, 1, 0], [R + 1, S, S], [S, S, S]]
    store.add_triple((2, 0, 0), bodies, [0.3, 0.2, 0.2, 0.1, 0.1, 0.1])
    store.record_client((2, 0, 0), "c0", [0.6, 0.05, 0.2, 0.1, 0.04, 0.01], n_instances=2)
    store.triples[(2, 0, 0)].counts = RuleCounts([1, 0, 0, 1, 0, 0], [2, 3, 1, 1, 2, 5], [2, 1, 1, 1, 1, 1], [1] * 6)
    return store, graph


def test_explanation_names_the_middle_entity() -> None:
    store, graph = family_store()
    ex = explain_kg(store, graph, "grandparent_of", (0, 2), limit=5)
    assert ex.score_name == "global posterior" and ex.num_rules == 5 and not ex.left_out
    assert [it.rule for it in ex.items] == [
        "grandparent_of <- parent_of, parent_of",
        "grandparent_of <- parent_of, sibling_of, parent_of",
    ]
    top = ex.items[0]
    assert top.paths == [(0, 1, 2)] and top.groundings == 1 and top.score == pytest.approx(0.6)
    assert top.std_confidence == pytest.approx(0.5) and top.support == 1
    text = ex.format(store.vocab, NAMES.__getitem__)
    assert "grandparent_of(anna, carl): " in text and "anna -parent_of-> bob -parent_of-> carl" in text
    assert "ranked by global posterior" in text
    assert "anna -parent_of-> eve -sibling_of-> bob -parent_of-> carl" in text


def test_the_explained_fact_is_left_out_and_inverse_heads_read_backwards() -> None:
    store, graph = family_store()
    ex = explain_kg(store, graph, "grandparent_of", (0, 3))  # grandparent_of(anna, dora) is in the graph
    assert ex.left_out and "grandparent_of <- grandparent_of" not in [it.rule for it in ex.items]
    kept = explain_kg(store, graph, "grandparent_of", (0, 3), leave_out_fact=False)
    assert [it.rule for it in ex.items] == [
        "grandparent_of <- parent_of, parent_of",
        "grandparent_of <- parent_of, sibling_of, parent_of",
    ]
    assert [it.score for it in kept.items] == pytest.approx([0.6, 0.2, 0.1]) and not kept.left_out
    shown = replace(ex, evidence="the graph").format(store.vocab, NAMES.__getitem__)
    assert "evidence: the graph; the fact itself left out" in shown
    inv = explain_kg(store, graph, "~grandparent_of", (2, 0), client="c0")
    assert inv.inverse and inv.score_name == "posterior of client c0"
    assert inv.items[0].rule == "~grandparent_of <- ~parent_of, ~parent_of" and inv.items[0].paths == [(2, 1, 0)]
    text = inv.format(store.vocab, NAMES.__getitem__)
    assert "carl <-parent_of- bob <-parent_of- anna" in text
    data = inv.to_json(store.vocab, NAMES.__getitem__)
    assert data["items"][0]["paths"][0]["names"] == ["carl", "bob", "anna"]


def test_no_rule_fires_and_unknown_client_falls_back() -> None:
    store, graph = family_store()
    ex = explain_kg(store, graph, "grandparent_of", (4, 0), client="c9")
    assert ex.items == [] and "client c9 holds no posterior" in ex.notes[0]
    assert ex.format(store.vocab, NAMES.__getitem__).startswith("grandparent_of(eve, anna): 0 of 5 rules fire")
    empty = explain_kg(store, graph, "parent_of", (0, 1))
    assert empty.num_rules == 0 and "holds no rules for parent_of" in empty.notes[0]


def test_client_weights_rank_when_stored() -> None:
    store, graph = family_store()
    store.record_client((2, 0, 0), "c1", [0.2] * 5 + [0.0], weights=[0.5, 0.0, 0.0, 2.0, 0.0, 0.0], n_instances=1)
    ex = explain_kg(store, graph, "grandparent_of", (0, 2), client="c1")
    assert ex.score_name == "weight of client c1"
    assert [(it.rule, it.score) for it in ex.items] == [
        ("grandparent_of <- parent_of, sibling_of, parent_of", 2.0),
        ("grandparent_of <- parent_of, parent_of", 0.5),
    ]
    assert "  weight     std" in ex.format(store.vocab, NAMES.__getitem__)

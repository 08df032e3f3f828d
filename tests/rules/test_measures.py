"""AMIE confidence measures and LogiRE logic accuracy against brute-force path enumeration."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rules.fol import Rule
from rules.measures import (
    GraphDoc,
    RuleCounts,
    as_graph_doc,
    body_matrix,
    confidence,
    count_bodies,
    count_rules,
    logic_accuracy,
)

# --- brute force ------------------------------------------------------------------------------


def _edge(edges: set[tuple[int, int, int]], tok: int, a: int, b: int, R: int) -> bool:
    if tok == 2 * R:
        return a == b
    if tok < R:
        return (a, tok, b) in edges
    return (b, tok - R, a) in edges


def _holds(edges: set, tokens: tuple[int, ...], x: int, y: int, N: int, R: int) -> bool:
    """Some entity path x = z0, z1, ..., zL = y follows the body tokens."""
    for mids in itertools.product(range(N), repeat=len(tokens) - 1):
        path = (x, *mids, y)
        if all(_edge(edges, tokens[k], path[k], path[k + 1], R) for k in range(len(tokens))):
            return True
    return False


def brute_counts(head: int, tokens: tuple[int, ...], docs: list[GraphDoc], R: int, pair_types=None) -> dict[str, int]:
    out = dict(support=0, body_size=0, pca_body_size=0, head_size=0)
    for doc in docs:
        N = doc.n_entities
        edges = {tuple(int(v) for v in f) for f in doc.facts}

        def ok(x: int, y: int) -> bool:
            return pair_types is None or (doc.entity_types[x] == pair_types[0] and doc.entity_types[y] == pair_types[1])

        heads = {(x, y) for x in range(N) for y in range(N) if ok(x, y) and (x, head, y) in edges}
        out["head_size"] += len(heads)
        for x, y in itertools.product(range(N), repeat=2):
            if ok(x, y) and _holds(edges, tokens, x, y, N, R):
                out["body_size"] += 1
                out["support"] += (x, y) in heads
                out["pca_body_size"] += any((x, y2) in heads for y2 in range(N))
    return out


@st.composite
def graphs_and_rules(draw: st.DrawFn):
    R = draw(st.integers(1, 3))
    docs = []
    for d in range(draw(st.integers(1, 3))):
        N = draw(st.integers(0, 5))
        if N:
            facts = draw(
                st.lists(st.tuples(st.integers(0, N - 1), st.integers(0, R - 1), st.integers(0, N - 1)), max_size=12)
            )
        else:
            facts = []
        types = draw(st.lists(st.integers(0, 1), min_size=N, max_size=N))
        arr = np.array(facts, dtype=np.int64).reshape(-1, 3)
        docs.append(GraphDoc(arr, N, np.array(types, dtype=np.int64), f"d{d}"))
    J = draw(st.integers(1, 6))
    heads = draw(st.lists(st.integers(0, R - 1), min_size=J, max_size=J))
    bodies = draw(st.lists(st.lists(st.integers(0, 2 * R), min_size=3, max_size=3), min_size=J, max_size=J))
    pair_types = draw(st.none() | st.tuples(st.integers(0, 1), st.integers(0, 1)))
    return R, docs, heads, bodies, pair_types


@settings(max_examples=120, deadline=None)
@given(graphs_and_rules(), st.sampled_from(["dense", "sparse"]))
def test_counts_match_brute_force(data, backend: str) -> None:
    R, docs, heads, bodies, pair_types = data
    counts = count_bodies(heads, bodies, docs, R, pair_types=pair_types, backend=backend, chunk=2)
    for j, (h, body) in enumerate(zip(heads, bodies)):
        expected = brute_counts(h, tuple(body), docs, R, pair_types)
        got = {f: int(getattr(counts, f)[j]) for f in RuleCounts.FIELDS}
        assert got == expected, (h, body)
        m = counts.measures(j)
        for name, num, den in [
            ("std_confidence", "support", "body_size"),
            ("pca_confidence", "support", "pca_body_size"),
            ("head_coverage", "support", "head_size"),
        ]:
            if expected[den]:
                assert m[name] == pytest.approx(expected[num] / expected[den])
            else:
                assert math.isnan(m[name])


def test_hand_example() -> None:
    """parent_of(X,Y) <- ~child_of(X,Y) on two documents (R = 2: parent_of, child_of)."""
    R = 2
    d1 = (np.array([[0, 0, 1], [1, 1, 0], [2, 1, 0], [3, 0, 2]]), 4)  # 0 parent of 1; 1,2 children of 0; 3 parent of 2
    d2 = (np.array([[0, 1, 1]]), 2)  # 0 child of 1, parent fact missing
    m = confidence(Rule(0, (R + 1,)), [d1, d2], R)
    # body pairs: (0,1), (0,2) in d1; (1,0) in d2. support: (0,1). head facts: 2. PCA body: x with a parent_of fact: 0
    assert (m["support"], m["body_size"], m["pca_body_size"], m["head_size"]) == (1, 3, 2, 2)
    assert (m["std_confidence"], m["pca_confidence"], m["head_coverage"]) == (1 / 3, 0.5, 0.5)


def test_stay_token_is_identity_anywhere() -> None:
    R = 2
    doc = (np.array([[0, 0, 1], [1, 1, 2]]), 3)
    S = 2 * R
    base = body_matrix((0, 1), doc, R)
    for tokens in [(0, 1, S), (0, S, 1), (S, 0, 1)]:
        np.testing.assert_array_equal(body_matrix(tokens, doc, R), base)
    np.testing.assert_array_equal(body_matrix((S, S, S), doc, R), np.eye(3, dtype=bool))


def test_count_rules_and_sum_over_documents() -> None:
    rng = np.random.default_rng(5)
    R = 3
    docs = [
        GraphDoc(np.stack([rng.integers(0, 7, 15), rng.integers(0, R, 15), rng.integers(0, 7, 15)], 1), 7)
        for _ in range(5)
    ]
    rules = [Rule(0, (1, 2)), Rule(2, (R + 0,)), Rule(1, (0, R + 2, 1))]
    whole = count_rules(rules, docs, R)
    parts = [count_rules(rules, [d], R) for d in docs]
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    assert whole.to_dict() == total.to_dict()
    assert RuleCounts.from_dict(whole.to_dict()).to_dict() == whole.to_dict()
    assert whole.take([2, 0]).to_dict()["support"] == [whole.support[2], whole.support[0]]
    assert len(count_rules([], docs, R)) == 0


def test_large_graph_uses_sparse_engine_consistently() -> None:
    rng = np.random.default_rng(0)
    R, N, F = 4, 3000, 6000
    doc = GraphDoc(np.stack([rng.integers(0, N, F), rng.integers(0, R, F), rng.integers(0, N, F)], 1), N)
    heads = np.array([0, 1, 2])
    bodies = np.array([[1, 2, 8], [4, 3, 0], [0, 8, 8]])
    auto = count_bodies(heads, bodies, [doc], R)  # 9 tokens * N^2 > limit: scipy.sparse
    small = [GraphDoc(doc.facts[(doc.facts[:, 0] < 60) & (doc.facts[:, 2] < 60)], 60)]
    assert count_bodies(heads, bodies, small, R, backend="sparse").to_dict() == count_bodies(
        heads, bodies, small, R, backend="dense"
    ).to_dict()
    assert auto.head_size.tolist() == [int((doc.facts[:, 1] == h).sum()) - _dupes(doc.facts, h) for h in heads]


def _dupes(facts: np.ndarray, h: int) -> int:
    sel = facts[facts[:, 1] == h]
    return len(sel) - len({tuple(f) for f in sel.tolist()})


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ((np.array([[0, 0, 5]]), 3), "document 0: field 'facts' has entity ids outside"),
        ((np.array([[0, 7, 1]]), 3), "relation ids outside"),
        ((np.array([[0, 0]]), 3), r"shape \(F, 3\)"),
        ((np.array([[0.5, 0, 1]]), 3), "integers"),
        ((np.array([[0, 0, 1]]), 3, [0, 1]), "entity_types"),
        ({"facts": np.zeros((0, 3), int)}, "expected GraphDoc"),
    ],
)
def test_document_errors(doc, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        as_graph_doc(doc, 0, num_relations=2)


def test_document_duck_typing() -> None:
    class Doc:
        facts = torch.tensor([[0, 1, 1]])
        num_entities = 2
        types = [0, 1]
        title = "DW_1"

    d = as_graph_doc(Doc(), 3)
    assert d.name == "DW_1" and d.n_entities == 2 and d.entity_types.tolist() == [0, 1]
    assert as_graph_doc({"facts": [[0, 0, 1]], "N": 2}).n_entities == 2
    with pytest.raises(ValueError, match="document DW_1: pair_types given but"):
        count_bodies(0, [[0, 4, 4]], [GraphDoc(np.array([[0, 0, 1]]), 2, None, "DW_1")], 2, pair_types=(0, 0))


def test_kg_documents_and_vocab() -> None:
    """kg.documents.Document works as a document and kg.documents.Vocab as the relation names."""
    from kg.documents import Document, Vocab
    from rules.fol import RelationVocab
    from rules.store import RuleStore

    doc = Document("DW_1", ["ann", "bob"], np.array([0, 0]), np.array([[0, 0, 1], [1, 1, 0]]))
    m = confidence(Rule(0, (3,)), [doc], 2, pair_types=(0, 0))
    assert (m["support"], m["body_size"], m["head_size"]) == (1, 1, 1)
    names = Vocab(("parent_of", "child_of"), kind="relation")
    assert RelationVocab(names).names == RuleStore(names).relations == ("parent_of", "child_of")


def test_token_range_errors() -> None:
    doc = (np.array([[0, 0, 1]]), 2)
    with pytest.raises(ValueError, match="head ids"):
        count_bodies(2, [[0, 4, 4]], [doc], 2)
    with pytest.raises(ValueError, match="body tokens"):
        count_bodies(0, [[0, 5, 4]], [doc], 2)


# --- logic accuracy ---------------------------------------------------------------------------


def brute_logic(preds: list[np.ndarray], rules: list[Rule]) -> tuple[list[int], list[int]]:
    totals, correct = [], []
    for rule in rules:
        t = c = 0
        for p in preds:
            N, _, R = p.shape
            edges = {(a, r, b) for a, b, r in zip(*np.nonzero(p))}
            for x, y in itertools.product(range(N), repeat=2):
                if _holds(edges, rule.body, x, y, N, R):
                    t += 1
                    c += bool(p[x, y, rule.head])
        totals.append(t)
        correct.append(c)
    return totals, correct


@st.composite
def predictions_and_rules(draw: st.DrawFn):
    R = draw(st.integers(1, 3))
    preds = []
    for _ in range(draw(st.integers(1, 3))):
        N = draw(st.integers(1, 4))
        bits = draw(st.lists(st.booleans(), min_size=N * N * R, max_size=N * N * R))
        preds.append(np.array(bits, dtype=bool).reshape(N, N, R))
    rules = draw(
        st.lists(
            st.builds(
                Rule, st.integers(0, R - 1), st.lists(st.integers(0, 2 * R - 1), min_size=1, max_size=3).map(tuple)
            ),
            min_size=1,
            max_size=5,
        )
    )
    return preds, rules


@settings(max_examples=100, deadline=None)
@given(predictions_and_rules())
def test_logic_accuracy_matches_brute_force(data) -> None:
    preds, rules = data
    res = logic_accuracy(preds, rules)
    totals, correct = brute_logic(preds, rules)
    assert res.body_counts.tolist() == totals
    assert res.correct_counts.tolist() == correct
    ratios = [c / t for c, t in zip(correct, totals) if t > 0]
    if ratios:
        assert res.value == pytest.approx(float(np.mean(ratios)))
    else:
        assert math.isnan(res.value)


def test_logic_accuracy_logire_index_rules_and_torch() -> None:
    """LogiRE's [head, [body ids]] rules on torch predictions; sums go over documents before the ratio."""
    R = 2  # 0 spouse_of, 1 child_of
    p1 = torch.zeros(3, 3, R, dtype=torch.bool)
    p1[0, 1, 0] = p1[1, 0, 0] = True  # symmetric spouse pair
    p1[1, 2, 0] = True  # spouse_of(1,2) without its inverse
    p2 = torch.zeros(2, 2, R, dtype=torch.bool)
    p2[0, 1, 0] = True
    res = logic_accuracy([p1, p2], [[0, [R + 0]], [1, [R + 1, 1]]])
    # rule 0: body ~spouse_of holds on (1,0),(0,1),(2,1) in doc 1 and (1,0) in doc 2; head holds on 2 of 4
    assert res.body_counts.tolist() == [4, 0] and res.correct_counts.tolist() == [2, 0]
    assert res.value == 0.5 and math.isnan(res.per_rule[1])


def test_logic_accuracy_errors() -> None:
    with pytest.raises(ValueError, match=r"\(N, N, R\)"):
        logic_accuracy([np.zeros((2, 3, 1), bool)], [Rule(0, (0,))])
    with pytest.raises(ValueError, match="outside the R=1"):
        logic_accuracy([np.zeros((2, 2, 1), bool)], [Rule(1, (0,))])
    with pytest.raises(ValueError, match="has 2 relations"):
        logic_accuracy([np.zeros((2, 2, 1), bool), np.zeros((2, 2, 2), bool)], [Rule(0, (0,))])

"""Exact best-path search against brute-force enumeration, and explanations built on a store."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rules.explain import expand_values, explain
from rules.store import RuleStore
from tests.rules.conftest import RELATIONS, TYPES


def brute_best(values: np.ndarray, tokens: list[int], x: int, y: int) -> float:
    N = values.shape[0]
    best = 0.0
    for mids in itertools.product(range(N), repeat=len(tokens) - 1):
        path = (x, *mids, y)
        best = max(best, float(np.prod([values[path[k], path[k + 1], tokens[k]] for k in range(len(tokens))])))
    return best


@settings(max_examples=50, deadline=None)
@given(
    st.integers(1, 5),
    st.integers(1, 3),
    st.integers(0, 2**32 - 1),
    st.lists(st.lists(st.integers(0, 6), min_size=3, max_size=3), min_size=1, max_size=5),
    st.tuples(st.integers(0, 4), st.integers(0, 4)),
)
def test_explained_paths_are_exact(N: int, R: int, seed: int, raw_bodies: list[list[int]], pair) -> None:
    """Every body's value is the brute-force max over entity paths, and the reported path attains it."""
    rng = np.random.default_rng(seed)
    x = rng.random((N, N, R)) * (rng.random((N, N, R)) < 0.6)
    values = expand_values(x, R).numpy()
    bodies = [[t % (2 * R + 1) for t in b] for b in raw_bodies]
    store = RuleStore(tuple(f"r{i}" for i in range(R)))
    store.add_triple((0, 0, 0), bodies, np.full(len(bodies), 1 / len(bodies)))
    a, b = pair[0] % N, pair[1] % N
    res = explain(x, store, 0, (a, b))
    assert len(res.items) == len(bodies)
    for it in res.items:
        tokens = bodies[it.index]
        assert it.value == pytest.approx(brute_best(values, tokens, a, b), abs=1e-12)
        assert it.path[0] == a and it.path[-1] == b and len(it.path) == 4
        assert it.edge_values == pytest.approx([values[it.path[k], it.path[k + 1], tokens[k]] for k in range(3)])
        assert np.prod(it.edge_values) == pytest.approx(it.value, abs=1e-12)


def test_expand_values() -> None:
    x = np.arange(2 * 2 * 3, dtype=float).reshape(2, 2, 3) / 12
    v = expand_values(x, 3).numpy()
    assert v.shape == (2, 2, 7)
    np.testing.assert_array_equal(v[:, :, 4], x[:, :, 1].T)
    np.testing.assert_array_equal(v[:, :, 6], np.eye(2))
    np.testing.assert_array_equal(expand_values(v, 3).numpy(), v)
    with pytest.raises(ValueError, match="channels"):
        expand_values(x, 2)


def _doc_values() -> tuple[np.ndarray, np.ndarray]:
    """4 entities (0..2 persons, 3 a location); child_of(1,0)=0.9, spouse_of(2,0)=0.8, parent_of(2,1)=0.7,
    lives_in(0,3)=0.6, everything else 0.05."""
    x = np.full((4, 4, 4), 0.05)
    x[1, 0, 1] = 0.9
    x[2, 0, 2] = 0.8
    x[2, 1, 0] = 0.7
    x[0, 3, 3] = 0.6
    return x, np.array([0, 0, 0, 1])


def test_explain_weights_and_paths(small_store: RuleStore) -> None:
    x, types = _doc_values()
    res = explain(x, small_store, "parent_of", (0, 1), client=0, entity_types=types)
    assert [it.triple for it in res.items] == [(0, 0, 0)] * 3
    top = res.items[0]
    assert top.rule == "parent_of <- ~child_of" and top.value == pytest.approx(0.9)
    assert top.path == (0, 1, 1, 1) and top.weight == 2.0
    assert top.contribution == pytest.approx(1.8)
    w = small_store.triples[(0, 0, 0)].clients["0"].weights
    phis = {it.index: it.value for it in res.items}
    logit = sum(w[j] * phis[j] for j in phis) - 1.0
    assert res.logits[(0, 0, 0)] == pytest.approx(logit)
    assert res.probabilities[(0, 0, 0)] == pytest.approx(1 / (1 + np.exp(-logit)))
    # the identity body scores 0 for a pair of distinct entities
    assert next(it for it in res.items if it.rule.endswith("<stay>")).value == 0.0
    text = res.format(small_store, ["ann", "bob", "cy", "rome"])
    assert "ann#0 -~child_of(0.9)-> bob#1" in text
    assert res.to_json()["items"][0]["path"] == [0, 1, 1, 1]


def test_explain_without_client_uses_posterior(small_store: RuleStore) -> None:
    x, _ = _doc_values()
    res = explain(x, small_store, 3, (2, 3), top=2)  # lives_in: all triples of the head
    assert len(res.items) == 2 and res.logits == {}
    best = res.items[0]
    assert best.rule == "lives_in <- spouse_of, lives_in"
    assert best.path == (2, 0, 3, 3) and best.value == pytest.approx(0.8 * 0.6)
    assert best.posterior == pytest.approx(0.45) and best.contribution == pytest.approx(0.45 * 0.48)


def test_explain_errors(small_store: RuleStore) -> None:
    x, types = _doc_values()
    with pytest.raises(ValueError, match="outside the document's 4 entities"):
        explain(x, small_store, "parent_of", (0, 9))
    with pytest.raises(ValueError, match="no stored triple for spouse_of"):
        explain(x, small_store, "spouse_of", (0, 1))
    with pytest.raises(ValueError, match="triples of this head: \\['lives_in\\[person->location\\]'\\]"):
        explain(x, small_store, "lives_in", (0, 1), types=("person", "person"))
    with pytest.raises(ValueError, match="client '0' has no posterior"):
        explain(x, small_store, "lives_in", (0, 3), client=0)


def test_explain_errors_name_the_entity_types(small_store: RuleStore) -> None:
    """Types read as names (as the store names its triples), however they were given or looked up."""
    x, types = _doc_values()
    with pytest.raises(ValueError, match=r"lives_in with types person->person; triples of this head"):
        explain(x, small_store, "lives_in", (0, 1), entity_types=types)  # ids looked up from the document
    with pytest.raises(ValueError, match=r"lives_in with types person->person; triples"):
        explain(x, small_store, "lives_in", (0, 1), types=(0, "person"))
    with pytest.raises(ValueError, match=r"client '0' has no posterior .* lives_in with types any$"):
        explain(x, small_store, "lives_in", (0, 3), client=0)


def test_explain_on_fresh_store_with_type_names() -> None:
    store = RuleStore(RELATIONS, TYPES)
    store.add_triple((3, 0, 1), [[3]], [1.0])
    x, _ = _doc_values()
    res = explain(x, store, "lives_in", (0, 3), types=("person", "location"))
    assert res.items[0].value == pytest.approx(0.6) and res.items[0].posterior is None
    assert res.items[0].contribution == pytest.approx(0.6)  # prior 1.0 x value

"""Document graphs and dense relation tensors, checked against the facts element by element."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kg.documents import DataError, Document
from kg.graph import (
    batch_dgl,
    batch_relation_tensors,
    channel_to_etype,
    etype_names,
    facts_from_tensor,
    relation_tensor,
    to_dgl,
)
from kg.synthetic import generate

R = 3


def _doc(doc_id: str, n: int, facts: list[tuple[int, int, int]]) -> Document:
    return Document(doc_id, [f"e{i}" for i in range(n)], np.arange(n) % 2, facts)


DOCS = [_doc("a", 4, [(0, 0, 1), (1, 2, 3), (3, 1, 3), (2, 0, 1)]), _doc("b", 2, [(1, 1, 0)]), _doc("c", 3, [])]


def test_gold_tensor_matches_facts() -> None:
    for doc in DOCS:
        t = relation_tensor(doc, R)
        n = doc.num_entities
        assert t.shape == (n, n, 2 * R + 1) and t.dtype == torch.float32
        facts = {tuple(f) for f in doc.facts.tolist()}
        for i in range(n):
            for j in range(n):
                for r in range(R):
                    assert t[i, j, r] == float((i, r, j) in facts)
                    assert t[i, j, R + r] == float((j, r, i) in facts)
                assert t[i, j, 2 * R] == float(i == j)
        assert np.array_equal(facts_from_tensor(t, R), doc.facts)


def test_fuzzy_values() -> None:
    doc = DOCS[0]
    g = torch.Generator().manual_seed(0)
    v = torch.rand((4, 4, R), generator=g)
    t = relation_tensor(doc, R, values=v)
    assert torch.equal(t[..., :R], v)
    assert torch.equal(t[..., R:2 * R], v.transpose(0, 1))
    assert torch.equal(t[..., 2 * R], torch.eye(4))
    with pytest.raises(DataError, match=r"expected \(N, N, R\)"):
        relation_tensor(doc, R, values=v[:3])
    with pytest.raises(DataError, match=r"probabilities in \[0, 1\]"):
        relation_tensor(doc, R, values=v * 3)


def test_batch_pads_with_zeros_and_mask() -> None:
    t, mask = batch_relation_tensors(DOCS, R)
    assert t.shape == (3, 4, 4, 2 * R + 1)
    assert mask.tolist() == [[True] * 4, [True, True, False, False], [True, True, True, False]]
    for b, doc in enumerate(DOCS):
        n = doc.num_entities
        assert torch.equal(t[b, :n, :n], relation_tensor(doc, R))
        assert not t[b, n:].any() and not t[b, :, n:].any()  # padded entities are zero, stay channel included
    vals = [torch.full((d.num_entities,) * 2 + (R,), 0.5) for d in DOCS]
    tv, _ = batch_relation_tensors(DOCS, R, values=vals)
    assert float(tv[1, :2, :2, :2 * R].min()) == 0.5 and not tv[1, 2:].any()


def test_to_dgl_edges_equal_facts() -> None:
    names = ("in0", "gpe0", "spouse_of")
    g = to_dgl(DOCS[0], R, names)
    assert set(g.etypes) == set(etype_names(R, names)) and len(g.etypes) == 2 * R
    assert g.nodes["entity"].data["type"].tolist() == DOCS[0].entity_types.tolist()
    got = set()
    for r, name in enumerate(names):
        s, d = g.edges(etype=name)
        got |= {(int(a), r, int(b)) for a, b in zip(s, d)}
        si, di = g.edges(etype="~" + name)
        assert sorted(zip(di.tolist(), si.tolist())) == sorted(zip(s.tolist(), d.tolist()))
    assert got == {tuple(f) for f in DOCS[0].facts.tolist()}
    bg = batch_dgl(DOCS, R, names)
    assert bg.batch_size == 3 and bg.num_nodes() == 9
    assert channel_to_etype(R + 1, R, names) == "~gpe0" and channel_to_etype(2 * R, R, names) is None


def test_metapath_walk_grounds_a_planted_rule() -> None:
    """Walks along a planted body on a synthetic document end at entities the body reaches."""
    from kg.dgl_compat import import_dgl

    dgl = import_dgl()
    corpus, rules = generate(seed=1)
    rule = next(r for r in rules if len(r.body) == 3)
    names = corpus.relations.names
    r_ = len(names)
    metapath = [channel_to_etype(c, r_, names) for c in rule.channels(corpus.relations)]
    completed = 0
    for doc in corpus.documents[:20]:
        g = to_dgl(doc, r_, names)
        t = relation_tensor(doc, r_).numpy() > 0
        reach = np.eye(doc.num_entities, dtype=bool)
        for c in rule.channels(corpus.relations):
            reach = (reach.astype(int) @ t[..., c].astype(int)) > 0
        torch.manual_seed(0)
        starts = torch.arange(doc.num_entities).repeat(5)
        traces, _ = dgl.sampling.random_walk(g, starts, metapath=metapath)
        for trace in traces.tolist():
            if trace[-1] >= 0:
                assert reach[trace[0], trace[-1]]
                completed += 1
    assert completed > 0

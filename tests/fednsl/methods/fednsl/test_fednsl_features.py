"""Query cells and the φ engine of a FedNSL client against kg.grounding.path_scores (Eq. 8, App. A.8)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fednsl.methods.fednsl.features import CellTable, Part, PhiCache, max_edge_at_cells, phi_at_cells
from kg.documents import Document
from kg.grounding import path_scores, with_inverse_and_stay
from kg.split import Combo

R = 4


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def random_doc(i: int, n: int, rng: np.random.Generator) -> tuple[Document, np.ndarray]:
    types = rng.integers(0, 2, n)
    facts = np.stack([rng.integers(0, n, 8), rng.integers(0, R, 8), rng.integers(0, n, 8)], 1)
    facts = facts[facts[:, 0] != facts[:, 2]]
    return Document(f"d{i}", [f"e{k}" for k in range(n)], types, facts), rng.random((n, n, R)).astype(np.float32) ** 3


COMBO = Combo(0, 1, frozenset({0}), frozenset({1}), "AB")


def bodies_all_lengths(rng: np.random.Generator, k: int = 25) -> torch.Tensor:
    b = torch.as_tensor(rng.integers(0, 2 * R, (k, 3)))
    b[:6, 1:] = 2 * R
    b[6:12, 2] = 2 * R
    return b


def test_phi_at_cells_equals_path_scores() -> None:
    rng = np.random.default_rng(0)
    doc, x = random_doc(0, 9, rng)
    V = with_inverse_and_stay(torch.from_numpy(x)[None])[0]
    bodies = bodies_all_lengths(rng)
    ref = path_scores(V[None], bodies)[0]
    canon = [tuple(t for t in row if t != 2 * R) for row in bodies.tolist()]
    h, t = torch.tensor([0, 1, 2, 8, 3]), torch.tensor([5, 5, 6, 0, 3])
    np.testing.assert_allclose(phi_at_cells(V, canon, h, t, 2 * R).numpy(), ref[:, h, t].numpy(), rtol=1e-6)
    edge = max_edge_at_cells(V, canon, h, t)
    assert torch.all(edge >= ref[:, h, t] - 1e-6)  # a relaxation (upper bound)
    np.testing.assert_allclose(edge[:6].numpy(), ref[:6, h, t].numpy(), rtol=1e-6)  # exact for length 1


def make_table(rng: np.random.Generator, n_docs: int = 4) -> CellTable:
    docs, values = zip(*[random_doc(i, int(rng.integers(5, 9)), rng) for i in range(n_docs)])
    empty = Document("empty", [], np.zeros(0, np.int64), np.zeros((0, 3), np.int64))
    docs = [*docs, empty]
    values = [*values, np.zeros((0, 0, R), np.float32)]
    return CellTable(Part("test", list(docs), COMBO, list(values)), R,
                     train_facts={(docs[0].entity_names[int(f[0])], int(f[1]), docs[0].entity_names[int(f[2])])
                                  for f in docs[0].facts})


def test_cell_table_groups_labels_and_empty_docs() -> None:
    rng = np.random.default_rng(1)
    table = make_table(rng)
    assert table.empty_docs == 1
    for (a, b), g in table.groups.items():
        assert (a, b) == (0, 1)
        for k in range(len(g)):
            doc = table.part.docs[g.doc[k]]
            h, t = g.head[k], g.tail[k]
            assert doc.entity_types[h] == 0 and doc.entity_types[t] == 1 and h != t
            for r in range(R):
                has = bool(((doc.facts[:, 0] == h) & (doc.facts[:, 1] == r) & (doc.facts[:, 2] == t)).any())
                assert g.gold[k, r] == has
                assert g.x[k, r] == table.part.values[g.doc[k]][h, t, r]
            if g.doc[k] == 0:
                assert np.array_equal(g.in_train[k], g.gold[k])  # doc 0's facts are the "training" facts


@pytest.mark.parametrize("mode", ["graph", "cached_path", "max_edge"])
def test_phi_cache_modes(mode: str) -> None:
    rng = np.random.default_rng(2)
    table = make_table(rng)
    ab = (0, 1)
    g = table.groups[ab]
    cache = PhiCache(table, mode, fast_after=2)
    bodies = bodies_all_lengths(rng, 12)
    exact = []
    for d in sorted(g.doc_slices):
        V = with_inverse_and_stay(torch.from_numpy(table.part.values[d])[None])[0]
        sl = g.doc_slices[d]
        exact.append(path_scores(V[None], bodies)[0][:, torch.from_numpy(g.head[sl]), torch.from_numpy(g.tail[sl])])
    exact = torch.cat(exact, 1)
    first = cache.features(ab, bodies[:6], rnd=1)  # before the switch: graph search
    np.testing.assert_allclose(first.numpy(), exact[:6].numpy(), rtol=1e-6)
    later = cache.features(ab, bodies, rnd=2)  # after the switch
    seen_before = later[:6]
    new = later[6:]
    if mode == "graph":
        np.testing.assert_allclose(later.numpy(), exact.numpy(), rtol=1e-6)
    elif mode == "cached_path":
        np.testing.assert_allclose(seen_before.numpy(), exact[:6].numpy(), rtol=1e-6)  # cached graph values
        assert torch.all(new >= exact[6:] - 1e-6)  # new bodies: max_edge relaxation
    else:
        assert torch.all(later >= exact - 1e-6)
    computed = cache.computed
    cache.features(ab, bodies, rnd=3)
    assert cache.computed == computed  # everything cached
    # cached_path resume: bodies grounded before the switch are restored as graph bodies
    if mode == "cached_path":
        fresh = PhiCache(table, mode, fast_after=2)
        fresh.allow_graph(cache.graph_bodies())
        np.testing.assert_allclose(fresh.features(ab, bodies, rnd=5).numpy(), later.numpy(), rtol=1e-6)

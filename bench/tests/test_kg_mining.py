"""The mining benchmark's reference (the per-triple search) counts what the library counts."""

from __future__ import annotations

import numpy as np
import pytest

from bench.kg_mining import reference_support, run_dataset
from kg.grounding.sparse import SparseGraph
from rules.kg_mining import mine_chain_rule_support


@pytest.mark.parametrize("max_len", [2, 3])
def test_reference_equals_library_with_capped_neighbours(max_len: int) -> None:
    rng = np.random.default_rng(4)
    triples = np.unique(
        np.stack([rng.integers(0, 30, 500), rng.integers(0, 4, 500), rng.integers(0, 30, 500)], 1), axis=0
    )
    graph = SparseGraph.from_triples(triples, 30, 4)
    want = reference_support(graph, triples, max_len, samples=40, max_neighbors=5, seed=2)
    got = mine_chain_rule_support(graph, triples, max_len, samples_per_relation=40, max_neighbors=5, seed=2)
    assert got == want
    assert sum(len(t) for t in got.values()) > 50


def test_run_on_the_embedded_kg_reports_equal_supports() -> None:
    row = run_dataset("synthetic", samples=50, repeats=1, confidences=True, heads=4)
    assert row is not None and row["supports_equal"] and row["bodies"] > 0
    assert row["seconds"]["ours"] > 0 and row["seconds"]["reference"] > 0
    assert row["confidences"]["heads"] == 4 and row["confidences"]["counts_equal"]

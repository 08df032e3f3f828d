"""Fixtures for the rule-layer tests: a small vocabulary, random documents and a small rule store."""

from __future__ import annotations

import numpy as np
import pytest

from rules.fol import RelationVocab
from rules.measures import GraphDoc
from rules.store import RuleStore

RELATIONS = ("parent_of", "child_of", "spouse_of", "lives_in")
TYPES = ("person", "location")


def random_docs(seed: int, n_docs: int = 4, n_entities: int = 6, n_facts: int = 12, R: int = 4) -> list[GraphDoc]:
    rng = np.random.default_rng(seed)
    docs = []
    for d in range(n_docs):
        facts = np.stack(
            [rng.integers(0, n_entities, n_facts), rng.integers(0, R, n_facts), rng.integers(0, n_entities, n_facts)], 1
        )
        docs.append(GraphDoc(facts, n_entities, rng.integers(0, 2, n_entities), name=f"doc{d}"))
    return docs


@pytest.fixture
def vocab() -> RelationVocab:
    return RelationVocab(RELATIONS)


def build_store() -> RuleStore:
    """Three triples, two clients; client '0' has weights and counts, client '1' only posteriors."""
    store = RuleStore(RELATIONS, TYPES, meta={"method": "fednsl", "seed": 0})
    v = store.vocab
    R, S = v.num_relations, v.stay
    # parent_of[person->person]: ~child_of, spouse_of.parent_of, identity
    store.add_triple(
        (0, 0, 0),
        [[R + 1, S, S], [2, 0, S], [S, S, S]],
        [0.5, 0.3, 0.2],
        log_prior=np.log([0.5, 0.3, 0.2]),
        sample_counts=[25, 15, 10],
        round=2,
    )
    store.add_triple((1, 0, 0), [[R + 0, S, S], [1, 2, S]], [0.7, 0.3], round=2)
    store.add_triple(
        (3, 0, 1), [[0, 3, S], [2, 3, S], [R + 0, 3, S]], [0.2, 0.5, 0.3], log_prior=[-1.6, -0.7, -np.inf], round=2
    )
    docs = [GraphDoc(np.array([[0, 0, 1], [1, 1, 0], [2, 2, 0], [2, 0, 1], [1, 3, 3]]), 4, np.array([0, 0, 0, 1]))]
    store.record_client((0, 0, 0), 0, [0.8, 0.15, 0.05], weights=[2.0, 0.5, -0.1], bias=-1.0, n_instances=30)
    store.record_client((0, 0, 0), 1, [0.1, 0.6, 0.3], n_instances=10)
    store.record_client((1, 0, 0), 0, [0.9, 0.1], weights=[1.5, 0.2], bias=-0.5, n_instances=5)
    store.record_client((3, 0, 1), 1, [0.3, 0.4, 0.3], n_instances=3)
    store.record_global((3, 0, 1), [0.25, 0.45, 0.3])
    store.compute_counts(docs, client=0, triples=[(0, 0, 0), (1, 0, 0)])
    store.compute_counts(docs, triples=[(3, 0, 1)])
    return store


@pytest.fixture
def small_store() -> RuleStore:
    return build_store()

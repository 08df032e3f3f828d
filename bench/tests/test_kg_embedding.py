"""bench.kg_embedding: the id layout handed to pykeen and the scorer handed to kg.linkpred (no pykeen needed)."""

from __future__ import annotations

import numpy as np
import torch

from bench.kg_embedding import inverse_augmented, make_scorer
from kg.kg_synthetic import planted_kg
from kg.linkpred import evaluate_link_prediction


def test_inverse_augmented_matches_head_query_layout() -> None:
    tr = np.array([[0, 1, 2], [3, 0, 4]])
    out = inverse_augmented(tr, 2)
    assert out.tolist() == [[0, 1, 2], [3, 0, 4], [2, 3, 0], [4, 2, 3]]


class _Oracle:
    """A stand-in for a pykeen model: score_t puts 1 on the test answers of (h, r) (inverse relations included)."""

    def __init__(self, triples: np.ndarray, E: int, R: int) -> None:
        self.table = torch.zeros(E, 2 * R, E)
        for h, r, t in inverse_augmented(triples, R).tolist():
            self.table[h, r, t] = 1.0

    def eval(self) -> None:
        pass

    def score_t(self, hr_batch: torch.Tensor) -> torch.Tensor:
        return self.table[hr_batch[:, 0], hr_batch[:, 1]]


def test_scorer_feeds_our_evaluator_head_and_tail() -> None:
    kg, _ = planted_kg(seed=0, num_families=3)
    oracle = _Oracle(kg.test, kg.num_entities, kg.num_relations)
    m = evaluate_link_prediction(make_scorer(oracle), kg, "test").compute()
    # the filter removes the other test answers, so every answer is alone at the top: MRR 1 over 2 queries a triple
    assert m["mrr"] == 1.0 and m["hits@1"] == 1.0
    blind = _Oracle(np.zeros((0, 3), dtype=np.int64), kg.num_entities, kg.num_relations)
    assert evaluate_link_prediction(make_scorer(blind), kg, "test").compute()["mrr"] < 0.2

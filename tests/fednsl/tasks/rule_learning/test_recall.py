"""Golden/planted rule ranks in the server pool (``rule_ranks``, ``rule_recall``)."""

from __future__ import annotations

import math

from fednsl.tasks.rule_learning import rule_ranks, rule_recall

# head 0 has two triples; head 1 one; [head] is the pass-through body, left out of the ranking
POOL = {
    (0, 0, 1): {(0,): 0.5, (2, 3): 0.2, (4,): 0.2, (5, 6): 0.1},
    (0, 1, 1): {(0,): 0.1, (5, 6): 0.6, (2, 3): 0.3},
    (1, 0, 0): {(1,): 0.9, (7,): 0.1},
}


def test_best_rank_over_the_heads_triples_without_the_pass_through() -> None:
    rules = [(0, (2, 3)), (0, (4,)), (0, (5, 6)), (0, (7,)), (1, (7,)), (1, (1,)), (2, (2, 3))]
    # (2, 3) and (4,) tie at 0.2 in the first triple: ties break by body tokens, so (2, 3) is 1st and (4,) 2nd;
    # (5, 6) is 3rd there but 1st in the second triple; (7,) is not a body of head 0; [1] is never ranked
    assert rule_ranks(POOL, rules) == [1, 2, 1, None, 1, None, None]


def test_recall_is_the_share_of_ranks_within_k() -> None:
    rules = [(0, (2, 3)), (0, (4,)), (0, (7,)), (1, (7,))]
    assert rule_recall(POOL, rules, 1) == (0.5, [True, False, False, True])
    assert rule_recall(POOL, rules, 2) == (0.75, [True, True, False, True])
    recall, hits = rule_recall(POOL, [], 5)
    assert math.isnan(recall) and hits == []

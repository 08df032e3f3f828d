"""rules.reading_order: the reading order measured once and recorded in the store reads back as measured."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rules.reading_order import (
    DEFAULT_THRESHOLD,
    Training,
    grouped,
    record_order,
    recorded_equivalences,
    recorded_groups,
)
from rules.store import RuleStore
from rules.workers import spawn_map


def _store_and_training() -> tuple[RuleStore, Training]:
    """parent_of / child_of, child_of the inverse of parent_of on the data; head child_of with the bodies
    child_of (uses the head), ~parent_of (the same rule on the data) and parent_of (explains nothing)."""
    pairs = [(0, 1), (0, 2), (1, 3), (2, 4), (5, 6)]
    triples = np.array([(a, 0, b) for a, b in pairs] + [(b, 1, a) for a, b in pairs], dtype=np.int64)
    store = RuleStore(("parent_of", "child_of"), meta={"method": "fednsl-kg"})
    S = store.vocab.stay
    store.add_triple((1, 0, 0), [[1, S, S], [2, S, S], [0, S, S]], [0.5, 0.3, 0.2], round=1)
    store.add_triple((0, 0, 0), [[3, S, S]], [1.0], round=1)
    return store, Training.of(triples, 7, 2)


def test_recorded_order_reads_back_as_measured() -> None:
    store, data = _store_and_training()
    eq = {0: 0, 1: 1, 2: 1, 3: 0, 4: 4}  # ~parent_of = child_of, ~child_of = parent_of
    measured = grouped(store, store.rows(), eq, None, data)
    assert recorded_equivalences(store, DEFAULT_THRESHOLD) is None  # nothing recorded yet
    done = record_order(store, data)
    assert done["rules"] == 3 and done["training_triples"] == 10 and store.ranked
    assert store.reading_order is not None and store.reading_order["equivalences"] == [0, 1, 1, 0, 4]
    child = store.triples[(1, 0, 0)].ranked
    assert child is not None and [r.bodies for r in child] == [(1, 0), (2,)]  # ~parent_of shown, child_of its form
    assert (child[0].explains, child[0].loo_conf, child[0].uses_head) == (1.0, 1.0, False)
    assert child[1].explains == 0.0
    assert recorded_groups(store, store.rows(), None) == measured
    rows, groups = recorded_groups(store, store.rows(head="child_of"), 1)
    assert [r.rule for r in rows] == ["child_of <- ~parent_of"] and groups[0].variant_rules == ["child_of <- child_of"]
    assert groups[0].of == 2
    assert recorded_equivalences(store, DEFAULT_THRESHOLD) == eq and recorded_equivalences(store, 0.9) is None
    again = RuleStore.from_json(store.to_json())
    assert recorded_groups(again, again.rows(), None) == measured


def test_order_measured_in_worker_processes_equals_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """``workers: 2`` measures the heads in worker processes once they hold MIN_PARALLEL_WORK (fact, rule) pairs
    (here forced to 0): the same recorded order; below the threshold nothing is spawned."""
    calls: list[int] = []

    def counted(fn: Any, items: Any, workers: int, shared: Any, work: Any = None) -> Any:
        calls.append(len(items))
        return spawn_map(fn, items, workers, shared, work)

    monkeypatch.setattr("rules.reading_order.spawn_map", counted)
    one, data = _store_and_training()
    record_order(one, data, workers=2)
    assert calls == []  # 2 heads, a few facts: one process
    monkeypatch.setattr("rules.workers.MIN_PARALLEL_WORK", 0)
    two, _ = _store_and_training()
    record_order(two, data, workers=2)
    assert calls == [2]
    assert two.to_json() == one.to_json() and two.triples[(1, 0, 0)].ranked

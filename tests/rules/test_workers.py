"""rules.workers: spawn_map gives the same results, in item order, as a loop in one process; workers_pay decides
when worker processes are used."""

from __future__ import annotations

import operator
import time

import numpy as np
import pytest

import rules.workers
from rules.workers import spawn_map, workers_pay


def test_spawn_map_equals_a_loop_in_item_order() -> None:
    shared = np.arange(50) * 7  # sent once to each worker
    items = [49, 3, 0, 17, 17, 8, 31, 2]
    got = spawn_map(operator.getitem, items, 2, shared)
    assert got == [shared[i] for i in items]
    assert spawn_map(operator.mul, [], 2, 3) == []


def _stamped(shared: int, item: int) -> tuple[int, int]:
    return shared * item, time.monotonic_ns()


def test_spawn_map_takes_the_largest_work_first_and_answers_in_item_order() -> None:
    items = [1, 2, 3, 4, 5]
    work = [10, 50, 10, 40, 0]
    got = spawn_map(_stamped, items, 1, 3, work)  # one worker: it takes the items in the order they were given
    assert [v for v, _ in got] == [3 * i for i in items]
    done_at = [t for _, t in got]
    assert sorted(range(len(items)), key=done_at.__getitem__) == [1, 3, 0, 2, 4]  # by work, ties in item order


def test_workers_pay_only_for_several_items_several_workers_and_enough_work(monkeypatch: pytest.MonkeyPatch) -> None:
    big = rules.workers.MIN_PARALLEL_WORK
    assert workers_pay([big // 2, big // 2], 2)
    assert not workers_pay([big // 2, big // 2 - 1], 2)  # too little work to pay for starting workers
    assert not workers_pay([big, big], 1) and not workers_pay([2 * big], 2) and not workers_pay([], 2)
    monkeypatch.setattr("rules.workers.MIN_PARALLEL_WORK", 0)
    assert workers_pay([0, 0], 2)

"""rules.workers.spawn_map: the same results, in item order, as a loop in one process."""

from __future__ import annotations

import operator

import numpy as np

from rules.workers import spawn_map


def test_spawn_map_equals_a_loop_in_item_order() -> None:
    shared = np.arange(50) * 7  # sent once to each worker
    items = [49, 3, 0, 17, 17, 8, 31, 2]
    got = spawn_map(operator.getitem, items, 2, shared)
    assert got == [shared[i] for i in items]
    assert spawn_map(operator.mul, [], 2, 3) == []

"""One function mapped over items in spawned worker processes, with one shared argument sent once per process.

The KG predictor fits its head relations this way (``PredictorConfig.workers``) and the fednsl-kg client mines its
relations this way (``method_kwargs.mining.workers``): the items are independent, each seeded on its own, so the
results equal a loop in one process.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

import torch

__all__ = ["spawn_map"]

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")

_SHARED: dict[str, Any] = {}  # in a worker process: the shared argument


def _init(shared: Any) -> None:
    torch.set_num_threads(1)
    _SHARED["shared"] = shared


def _call(task: tuple[Callable[[Any, Any], Any], Any]) -> Any:
    fn, item = task
    return fn(_SHARED["shared"], item)


def spawn_map(fn: Callable[[S, T], R], items: Sequence[T], workers: int, shared: S) -> list[R]:
    """[fn(shared, item) for item in items], computed in ``workers`` spawned processes of one torch thread each,
    which take the items in order as they become free. ``fn`` must be a module-level function; ``shared`` is
    pickled once per process."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, ctx, initializer=_init, initargs=(shared,)) as pool:
        return list(pool.map(_call, [(fn, item) for item in items]))

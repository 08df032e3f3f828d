"""One function mapped over items in spawned worker processes, with one shared argument sent once per process.

The KG predictor fits its head relations this way (``PredictorConfig.workers``), the fednsl-kg client mines its
relations (``method_kwargs.mining.workers``) and ranks its test relations this way, and a run's reading order
measures its heads this way: the items are independent, each seeded on its own, so the results equal a loop in
one process.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Generic, TypeVar

import torch

__all__ = ["MIN_PARALLEL_WORK", "WorkerPool", "spawn_map", "workers_pay"]

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")

#: worker processes are used when a job holds at least this many (query or fact, rule) pairs: a worker takes 2–3 s
#: to start, more than a smaller job saves (fednsl_kg_own's first fit: the planted KG's 1.8·10⁵ (training query,
#: body) pairs take 4 s in one process, both paths; pykeen's UMLS split's 2.3·10⁶ take 22 s, simple paths)
MIN_PARALLEL_WORK = 1_000_000

_SHARED: dict[str, Any] = {}  # in a worker process: the shared argument


def _init(shared: Any) -> None:
    torch.set_num_threads(1)
    _SHARED["shared"] = shared


def _call(task: tuple[Callable[[Any, Any], Any], Any]) -> Any:
    fn, item = task
    return fn(_SHARED["shared"], item)


def workers_pay(work: Sequence[int], workers: int) -> bool:
    """Whether jobs of this ``work`` (one count per item, (query or fact, rule) pairs) are worth ``workers``
    processes: more than one of each, and :data:`MIN_PARALLEL_WORK` pairs or more in all."""
    return workers > 1 and len(work) > 1 and sum(work) >= MIN_PARALLEL_WORK


class WorkerPool(Generic[S]):
    """``workers`` spawned processes of one torch thread each, holding one ``shared`` argument (pickled once per
    process), for several :meth:`map` calls; a context manager (the processes end on exit)."""

    def __init__(self, workers: int, shared: S):
        ctx = multiprocessing.get_context("spawn")
        self.workers = workers
        self.pool = ProcessPoolExecutor(workers, ctx, initializer=_init, initargs=(shared,))

    def __enter__(self) -> WorkerPool[S]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.shutdown()

    def map(self, fn: Callable[[S, T], R], items: Sequence[T], work: Sequence[int] | None = None) -> list[R]:
        """[fn(shared, item) for item in items]: the processes take the items as they become free, in order or the
        largest ``work`` first (ties in order); the results come back in item order either way. ``fn`` must be a
        module-level function."""
        order = list(range(len(items)))
        if work is not None:
            order.sort(key=lambda i: -work[i])
        done = list(self.pool.map(_call, [(fn, items[i]) for i in order]))
        out: list[R] = [None] * len(items)  # type: ignore[list-item]
        for i, r in zip(order, done, strict=True):
            out[i] = r
        return out


def spawn_map(
    fn: Callable[[S, T], R], items: Sequence[T], workers: int, shared: S, work: Sequence[int] | None = None
) -> list[R]:
    """[fn(shared, item) for item in items] in a :class:`WorkerPool` of ``workers`` processes (:meth:`WorkerPool.map`)."""
    with WorkerPool(workers, shared) as pool:
        return pool.map(fn, items, work)

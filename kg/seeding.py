"""Seeded use of torch's *global* RNG, safe when several runs share one process.

Dropout and ``nn.Module`` constructors draw from torch's global generator, which is process-wide: two seeded runs
in threads of one process (a reference run beside a Flower ServerApp, a notebook running two configs) would
interleave their draws and stop being reproducible. :func:`seeded_global_rng` forks the global RNG, seeds it and
restores it afterwards, holding a process-wide lock so that such blocks never overlap.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import ParamSpec, TypeVar

import torch

__all__ = ["isolated_global_rng", "seeded_global_rng"]

P = ParamSpec("P")
R = TypeVar("R")

_GLOBAL_RNG_LOCK = threading.RLock()


@contextlib.contextmanager
def seeded_global_rng(seed: int | None, devices: Sequence[torch.device | int] = ()) -> Iterator[None]:
    """Run a block with torch's global RNG forked (CPU and ``devices``) and seeded with ``seed`` (None: left as
    it was forked); the previous state is restored on exit. Blocks from concurrent threads run one at a time."""
    with _GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=list(devices)):
        if seed is not None:
            torch.manual_seed(seed)
        yield


def isolated_global_rng(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorator for model builders that re-initialise parameters from their own seed: the default
    initialisations drawn by ``nn`` constructors go to a forked copy of the global RNG (under the lock), so they
    neither disturb nor are disturbed by a seeded block running in another thread."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with seeded_global_rng(None):
            return fn(*args, **kwargs)

    return wrapper

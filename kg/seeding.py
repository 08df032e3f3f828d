"""Seeded use of torch's *global* RNG, safe when several runs share one process.

Dropout and ``nn.Module`` constructors draw from torch's global generator, which is process-wide: two seeded runs
in threads of one process (a reference run beside a Flower ServerApp, a notebook running two configs) would
interleave their draws and stop being reproducible. :func:`seeded_global_rng` forks the global RNG, seeds it and
restores it afterwards, holding a process-wide lock so that such blocks never overlap.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence

import torch

__all__ = ["seeded_global_rng"]

_GLOBAL_RNG_LOCK = threading.RLock()


@contextlib.contextmanager
def seeded_global_rng(seed: int | None, devices: Sequence[torch.device | int] = ()) -> Iterator[None]:
    """Run a block with torch's global RNG forked (CPU and ``devices``) and seeded with ``seed`` (None: left as
    it was forked); the previous state is restored on exit. Blocks from concurrent threads run one at a time."""
    with _GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=list(devices)):
        if seed is not None:
            torch.manual_seed(seed)
        yield

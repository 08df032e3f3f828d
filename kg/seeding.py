"""Seeded use of torch's *global* RNG, safe when several runs share one process.

Dropout and ``nn.Module`` constructors draw from torch's global generator, which is process-wide: two seeded runs
in threads of one process (a reference run beside a Flower ServerApp, a notebook running two configs) would
interleave their draws and stop being reproducible. :func:`seeded_global_rng` forks the global RNG, seeds it and
restores it afterwards, holding a process-wide lock so that such blocks never overlap.

Seeds for a purpose are derived from the run seed in one way only, :func:`derive_seed` (an int for a
``torch.Generator``), :func:`derive_rng` (a numpy ``Generator``) and :func:`seed_sequence` (to ``spawn``
children), all over the same entropy: the run seed followed by the purpose parts, integers as they are and
strings as their CRC-32. This module is the lowest layer (``kg``), so ``rules`` and ``fednsl`` use it too.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import ParamSpec, TypeVar

import numpy as np
import torch

__all__ = ["derive_rng", "derive_seed", "isolated_global_rng", "seed_sequence", "seeded_global_rng"]

Purpose = int | str

P = ParamSpec("P")
R = TypeVar("R")

_GLOBAL_RNG_LOCK = threading.RLock()


def seed_entropy(seed: int, *purpose: Purpose) -> list[int]:
    """``[seed, p_1, …]`` with each string part replaced by its CRC-32 (UTF-8); every part must be >= 0."""
    out = [int(seed)]
    for p in purpose:
        if isinstance(p, str):
            out.append(zlib.crc32(p.encode()))
        elif isinstance(p, (int, np.integer)) and not isinstance(p, bool):
            out.append(int(p))
        else:
            raise TypeError(f"seed purpose parts must be int or str, got {type(p).__name__} {p!r}")
    if min(out) < 0:
        raise ValueError(f"seed and purpose integers must be >= 0, got {out}")
    return out


def seed_sequence(seed: int, *purpose: Purpose) -> np.random.SeedSequence:
    """The numpy ``SeedSequence`` of (seed, purpose…)."""
    return np.random.SeedSequence(seed_entropy(seed, *purpose))


def derive_seed(seed: int, *purpose: Purpose) -> int:
    """A 32-bit seed for (``seed``, ``purpose``…), e.g. ``derive_seed(run_seed, rnd, "sample")``: the first word
    of ``SeedSequence([seed, *purpose])`` (strings as CRC-32). Distinct purposes give independent streams."""
    return int(seed_sequence(seed, *purpose).generate_state(1, dtype=np.uint32)[0])


def derive_rng(seed: int, *purpose: Purpose) -> np.random.Generator:
    """A numpy ``Generator`` for (``seed``, ``purpose``…), i.e. ``default_rng([seed, *purpose])``."""
    return np.random.default_rng(seed_sequence(seed, *purpose))


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

"""Where known rules (planted or golden) rank in a rule pool: the rule-recall measures of every rule learner."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["rule_ranks", "rule_recall"]

Pool = Mapping[tuple[int, int, int], Mapping[tuple[int, ...], float]]


def rule_ranks(pool: Pool, rules: Sequence[tuple[int, Sequence[int]]]) -> list[int | None]:
    """Best 1-based rank of each rule's body (head, body tokens) among the bodies of the pool heads of its relation,
    or None when no head of the relation holds it (the body never entered the pool).

    The trivial pass-through body [head] is left out of the ranking (on documents it is always on top: every
    labelled fact is its own length-1 path). Ties are broken by body tokens, as in the pool's listing.
    """
    out: list[int | None] = []
    for head, body in rules:
        body = tuple(int(b) for b in body)
        best: int | None = None
        for (h, _, _), dist in pool.items():
            if h != head or body not in dist or body == (head,):
                continue
            ranked = [b for b, _ in sorted(dist.items(), key=lambda kv: (-kv[1], kv[0])) if b != (head,)]
            rank = ranked.index(body) + 1
            best = rank if best is None else min(best, rank)
        out.append(best)
    return out


def rule_recall(pool: Pool, rules: Sequence[tuple[int, Sequence[int]]], k: int) -> tuple[float, list[bool]]:
    """Share of ``rules`` whose body is among the top-k bodies of some pool head of its relation
    (:func:`rule_ranks`). Returns (recall, per-rule hits); NaN recall when ``rules`` is empty."""
    hits = [r is not None and r <= k for r in rule_ranks(pool, rules)]
    return (float(np.mean(hits)) if hits else math.nan), hits

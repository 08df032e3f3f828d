"""Seeded random STL formulas (for property tests, fuzzing and benchmarks)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .syntax import (
    Always,
    And,
    Eventually,
    Formula,
    Implies,
    Not,
    Or,
    Predicate,
    Release,
    Until,
)

ALL_OPS = ("not", "and", "or", "implies", "always", "eventually", "until", "release")


def random_predicate(
    rng: np.random.Generator, signals: Sequence[str], params: Sequence[str] = (), p_diff: float = 0.2
) -> Predicate:
    """``x ~ c`` or ``x1 - x2 ~ c`` with c ∈ [-1, 1] rounded to 2 decimals (or a parameter)."""
    sig = str(rng.choice(list(signals)))
    minus = None
    if len(signals) > 1 and rng.random() < p_diff:
        minus = str(rng.choice([s for s in signals if s != sig]))
    op = str(rng.choice(["<", "<=", ">", ">="]))
    thr: float | str = round(float(rng.uniform(-1, 1)), 2)
    if params and rng.random() < 0.5:
        thr = str(rng.choice(list(params)))
    return Predicate(sig, op, thr, minus)


def random_formula(
    rng: np.random.Generator,
    signals: Sequence[str] = ("x", "y"),
    depth: int = 3,
    max_window: int = 3,
    ops: Sequence[str] = ALL_OPS[:-1],
    params: Sequence[str] = (),
    p_leaf: float = 0.25,
) -> Formula:
    """A random formula of nesting depth ≤ ``depth`` using the connectives in ``ops``
    (release excluded by default: rtamt lacks it); windows ``[lo, hi] ⊆ [0, max_window]``."""
    if depth <= 0 or rng.random() < p_leaf:
        return random_predicate(rng, signals, params)
    op = str(rng.choice(list(ops)))

    def sub() -> Formula:
        return random_formula(rng, signals, depth - 1, max_window, ops, params, p_leaf)

    def window() -> tuple[int, int]:
        lo = int(rng.integers(0, max_window + 1))
        return lo, int(rng.integers(lo, max_window + 1))

    if op == "not":
        return Not(sub())
    if op in ("and", "or"):
        n = int(rng.integers(2, 4))
        return (And if op == "and" else Or)(tuple(sub() for _ in range(n)))
    if op == "implies":
        return Implies(sub(), sub())
    if op in ("always", "eventually"):
        return (Always if op == "always" else Eventually)(*window(), sub())
    if op in ("until", "release"):
        return (Until if op == "until" else Release)(*window(), sub(), sub())
    raise ValueError(f"unknown connective {op!r}; known: {ALL_OPS}")


__all__ = ["ALL_OPS", "random_formula", "random_predicate"]

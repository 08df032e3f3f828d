"""Boolean concepts, rules as truth tables, and LR-XFL's rule scoring.

Concepts: c_j(x) = [x_d > t] for every feature d and threshold t (``ConceptSpace``); their fuzzy version
σ((x_d − t)/τ) is the LEN input. With C concepts a boolean input is one of 2^C *cells* (cell index
Σ_j b_j 2^j), and any formula over the concepts is a truth table over the cells (bool (2^C,)). LR-XFL's local
explanations are minterm conjunctions joined by AND/OR; here they are kept as truth tables, so joining,
equality and scoring are exact and the server can score a formula on pooled per-cell label counts.

Scoring is LR-XFL's ``test_explanation``: scikit-learn's macro F1 of the formula's prediction against
[y == class] (labels present in either vector) — :func:`f1_macro_from_counts` is the same number computed from
(cell, label) counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, cast

import numpy as np


@dataclass(frozen=True)
class ConceptSpace:
    """Threshold concepts on each input feature, in model-input units."""

    thresholds: tuple[tuple[float, ...], ...]  # per feature, ascending
    names: tuple[str, ...]

    @classmethod
    def from_raw(cls, raw_thresholds: Sequence[float], center: Sequence[float], scale: float) -> "ConceptSpace":
        ts = sorted(float(t) for t in raw_thresholds)
        thr = tuple(tuple((t - c) / scale for t in ts) for c in center)
        names = tuple(f"x{d + 1}>{t:g}" for d in range(len(center)) for t in ts)
        return cls(thr, names)

    @property
    def size(self) -> int:
        return sum(len(t) for t in self.thresholds)

    @property
    def cells(self) -> int:
        return 1 << self.size

    def fuzzy(self, x: np.ndarray, temperature: float) -> np.ndarray:
        """σ((x_d − t)/τ) for all concepts: (n, C) float32."""
        cols = [1.0 / (1.0 + np.exp(-(x[:, d] - t) / temperature)) for d, ts in enumerate(self.thresholds) for t in ts]
        return np.stack(cols, axis=1).astype(np.float32)

    def boolean(self, x: np.ndarray) -> np.ndarray:
        cols = [x[:, d] > t for d, ts in enumerate(self.thresholds) for t in ts]
        return np.stack(cols, axis=1)

    def realizable(self) -> np.ndarray:
        """bool (2^C,): cells some input can produce (per feature, x > t implies x > every smaller t)."""
        bits = cell_bits(self.size)
        ok = np.ones(self.cells, dtype=bool)
        j = 0
        for ts in self.thresholds:
            for i in range(1, len(ts)):
                ok &= ~(bits[:, j + i] & ~bits[:, j + i - 1])
            j += len(ts)
        return ok


def cell_bits(n_concepts: int) -> np.ndarray:
    """bool (2^C, C): the concept values of every cell."""
    idx = np.arange(1 << n_concepts)
    return ((idx[:, None] >> np.arange(n_concepts)[None]) & 1).astype(bool)


def cell_index(bits: np.ndarray) -> np.ndarray:
    """Rows of boolean concepts (n, C) → cell indices (n,)."""
    return (np.asarray(bits, dtype=np.int64) << np.arange(bits.shape[1])[None]).sum(1)


def term_table(pos: Sequence[int], neg: Sequence[int], n_concepts: int) -> np.ndarray:
    """Truth table of the conjunction ∧_{j∈pos} c_j ∧ ∧_{j∈neg} ¬c_j (empty conjunction = True)."""
    bits = cell_bits(n_concepts)
    out = np.ones(len(bits), dtype=bool)
    for j in pos:
        out &= bits[:, j]
    for j in neg:
        out &= ~bits[:, j]
    return out


def join(tables: Sequence[np.ndarray], connector: str) -> np.ndarray:
    """AND / OR of formulas given as truth tables."""
    stack = np.stack(tables)
    return cast(np.ndarray, stack.all(0) if connector == "AND" else stack.any(0))  # (cells,): an array


def f1_macro_from_counts(pred: np.ndarray, pos: np.ndarray, neg: np.ndarray) -> float:
    """sklearn ``f1_score(y, ŷ, average='macro')`` for binary y from per-cell counts.

    ``pred`` bool (cells,) is the formula; ``pos`` / ``neg`` (cells,) count samples of the target class / of
    other classes in each cell. Labels absent from both y and ŷ are left out of the mean (as scikit-learn).
    """
    pred = np.asarray(pred, dtype=bool)
    tp, fp = float(pos[pred].sum()), float(neg[pred].sum())
    fn, tn = float(pos[~pred].sum()), float(neg[~pred].sum())
    scores = []
    if tp + fn > 0 or tp + fp > 0:
        scores.append(2 * tp / (2 * tp + fp + fn))
    if tn + fp > 0 or tn + fn > 0:
        scores.append(2 * tn / (2 * tn + fn + fp))
    return float(np.mean(scores)) if scores else 0.0


def f1_macro(pred_table: np.ndarray, cells: np.ndarray, target: np.ndarray) -> float:
    """Macro F1 of a formula on samples (cell indices ``cells``, bool ``target`` = [y == class])."""
    n = len(pred_table)
    pos = np.bincount(cells[target], minlength=n)
    neg = np.bincount(cells[~target], minlength=n)
    return f1_macro_from_counts(pred_table, pos, neg)


def cell_intervals(space: ConceptSpace) -> np.ndarray:
    """int (2^C, D): per cell and feature, how many of the feature's thresholds are exceeded (its interval)."""
    bits = cell_bits(space.size)
    cols, j = [], 0
    for ts in space.thresholds:
        cols.append(bits[:, j : j + len(ts)].sum(1))
        j += len(ts)
    return np.stack(cols, axis=1)


def to_dnf(table: np.ndarray, space: ConceptSpace, raw_thresholds: Sequence[float] | None = None) -> str:
    """A readable DNF of a truth table: the realizable true cells as boxes, adjacent boxes merged greedily.

    Each term bounds some features, e.g. ``(x1>4 & x1<=8 & x2>16)``; unrealizable cells are ignored.
    ``raw_thresholds`` (ascending, data units) names the bounds; default: the model-space thresholds.
    """
    real = space.realizable()
    on = np.flatnonzero(np.asarray(table, bool) & real)
    if len(on) == 0:
        return "False"
    if np.all(np.asarray(table, bool)[real]):
        return "True"
    iv = cell_intervals(space)
    boxes = {tuple((int(i), int(i)) for i in iv[c]) for c in on}
    merged = True
    while merged:
        merged = False
        for a in sorted(boxes):
            for b in sorted(boxes):
                if a == b:
                    continue
                diff = [d for d in range(len(a)) if a[d] != b[d]]
                if len(diff) == 1:
                    d = diff[0]
                    first, second = sorted([a[d], b[d]])  # the two intervals along d
                    if second[0] <= first[1] + 1:
                        new = tuple(
                            (min(first[0], second[0]), max(first[1], second[1])) if k == d else a[k]
                            for k in range(len(a))
                        )
                        boxes -= {a, b}
                        boxes.add(new)
                        merged = True
                        break
            if merged:
                break
    terms = []
    for box in sorted(boxes):
        lits = []
        for d, (lo, hi) in enumerate(box):
            ts = list(raw_thresholds) if raw_thresholds is not None else list(space.thresholds[d])
            if lo > 0:
                lits.append(f"x{d + 1}>{ts[lo - 1]:g}")
            if hi < len(ts):
                lits.append(f"x{d + 1}<={ts[hi]:g}")
        terms.append("(" + " & ".join(lits) + ")" if lits else "True")
    return " | ".join(terms)

"""Filtered link-prediction ranking with ties by expectation, and mergeable metric state.

Protocol (spec ``kg_completion.md``, "Protocol"):

- Every test triple (h, r, t) asks two queries, both as tail queries: (h, r, ?) with answer t and
  (t, r + R, ?) with answer h. No query is ever skipped.
- Filtered setting: every other entity that is a known answer of the query in train ∪ valid ∪ test
  (with inverses) is removed from the candidates; the answer itself always stays.
- Ties: let ``higher`` be the number of remaining candidates scoring strictly above the answer and
  ``n`` the size of the tied block (the answer plus the remaining candidates with exactly its score).
  Under a uniformly random order of the tied block the answer's rank is uniform on
  ``higher + 1 .. higher + n``. The headline metrics are the exact expectations over those positions,
  as RNNLogic computes them (``RNNLogic+/src/trainer.py``, ``evaluate(expectation=True)``):
  ``E[1/rank] = (H(higher + n) - H(higher)) / n`` (H the harmonic numbers), ``E[rank] = higher + (n + 1) / 2``,
  ``E[rank <= k] = clip(k - higher, 0, n) / n``. The pessimistic rank ``higher + n`` is reported beside.
  An answer no rule reaches scores like every other unreached candidate (often 0) and so gets the
  expectation over that whole tied block. (RNNLogic instead gives an unreached answer a uniform rank over
  all E entities, ignoring the candidates that rules do reach; we rank it only among those it ties with.)
- NaN scores count as -inf.

:class:`RankingMetrics` keeps sums, not means, in exact fixed-point integers, so merging the states
of several clients gives bit-for-bit the metrics of one evaluation over the union of their queries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from kg.triples import SPLITS, KnowledgeGraph

__all__ = [
    "FilterIndex",
    "RankingMetrics",
    "evaluate_link_prediction",
    "expected_metrics",
    "filtered_ranks",
    "known_answers",
    "link_prediction_queries",
]

_FRAC_BITS = 96  # fixed-point scale of the exact sums: every summed float64 is an integer multiple of 2**-96
_HARMONIC = np.zeros(1, dtype=np.float64)  # _HARMONIC[k] = sum_{i=1..k} 1/i, grown on demand


def _harmonic(upto: int) -> np.ndarray:
    global _HARMONIC
    if len(_HARMONIC) <= upto:
        size = max(upto + 1, 2 * len(_HARMONIC))
        _HARMONIC = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, size, dtype=np.float64))])
    return _HARMONIC


# ------------------------------------------------------------------------------------------ filter set
class FilterIndex:
    """Known answers of every (entity, relation) query, relations ``0..2R-1`` (inverses included).

    Stored as sorted keys ``entity * 2R + relation`` with their answers; lookups are vectorised.
    """

    def __init__(self, triples: np.ndarray, num_entities: int, num_relations: int) -> None:
        """``triples``: (n, 3) over relations ``0..R-1``; their inverses are added here. ``num_relations`` = R."""
        triples = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
        self.num_entities = int(num_entities)
        self.num_relations = int(num_relations)
        heads = np.concatenate([triples[:, 0], triples[:, 2]])
        rels = np.concatenate([triples[:, 1], triples[:, 1] + num_relations])
        tails = np.concatenate([triples[:, 2], triples[:, 0]])
        keys = heads * (2 * num_relations) + rels
        pairs = np.unique(np.stack([keys, tails], axis=1), axis=0) if len(keys) else np.zeros((0, 2), np.int64)
        self._keys = np.ascontiguousarray(pairs[:, 0])
        self._answers = np.ascontiguousarray(pairs[:, 1])

    def __len__(self) -> int:
        """Number of distinct (entity, relation, answer) facts, inverses counted."""
        return len(self._keys)

    def triples(self) -> np.ndarray:
        """(n, 3) the known facts over relations ``0..R-1`` (each fact once; the inverses are implied)."""
        R2 = 2 * self.num_relations
        entity, relation = self._keys // R2, self._keys % R2
        forward = relation < self.num_relations
        return np.stack([entity[forward], relation[forward], self._answers[forward]], axis=1)

    def _ranges(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        keys = queries[:, 0] * (2 * self.num_relations) + queries[:, 1]
        return np.searchsorted(self._keys, keys, "left"), np.searchsorted(self._keys, keys, "right")

    def answers(self, entity: int, relation: int) -> np.ndarray:
        """Sorted known answers of (entity, relation, ?)."""
        lo, hi = self._ranges(np.asarray([[entity, relation]], dtype=np.int64))
        return self._answers[lo[0] : hi[0]].copy()

    def pairs(self, queries: torch.Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(B, 2) queries -> (rows, cols): query index and known answer of every known fact, int64 (m,)."""
        q = np.asarray(queries.cpu() if isinstance(queries, torch.Tensor) else queries, dtype=np.int64).reshape(-1, 2)
        lo, hi = self._ranges(q)
        counts = hi - lo
        rows = np.repeat(np.arange(len(q)), counts)
        offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]) if len(q) else lo
        cols = self._answers[np.repeat(lo - offsets, counts) + np.arange(counts.sum())]
        return rows, cols

    def mask(self, queries: torch.Tensor | np.ndarray, device: torch.device | str | None = None) -> torch.Tensor:
        """(B, 2) queries [entity, relation] -> (B, E) bool, True at every known answer."""
        rows, cols = self.pairs(queries)
        out = torch.zeros((len(queries), self.num_entities), dtype=torch.bool)
        out[torch.from_numpy(rows), torch.from_numpy(cols)] = True
        return out.to(device) if device is not None else out


def known_answers(
    kg_or_parts: KnowledgeGraph | Sequence[KnowledgeGraph], splits: Sequence[str] = SPLITS
) -> FilterIndex:
    """The filter set: known answers from the named splits (default train ∪ valid ∪ test), with inverses.

    ``kg_or_parts``: one KG, or the parts of a federated KG (same vocabularies; the union is used).
    """
    parts = [kg_or_parts] if isinstance(kg_or_parts, KnowledgeGraph) else list(kg_or_parts)
    if not parts:
        raise ValueError("known_answers needs at least one knowledge graph")
    first = parts[0]
    for p in parts[1:]:
        if p.num_entities != first.num_entities or p.num_relations != first.num_relations:
            raise ValueError(
                f"{p.name}: vocabulary ({p.num_entities} entities, {p.num_relations} relations) "
                f"differs from {first.name}'s ({first.num_entities}, {first.num_relations})"
            )
    triples = np.concatenate([p.all_triples(splits) for p in parts], axis=0)
    return FilterIndex(triples, first.num_entities, first.num_relations)


# ---------------------------------------------------------------------------------------------- ranks
def filtered_ranks(
    scores: torch.Tensor, answers: torch.Tensor, filter_mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Expected and pessimistic filtered ranks of each answer.

    ``scores``: (B, E), higher is better; ``answers``: (B,) entity ids; ``filter_mask``: (B, E) bool, True at
    known answers to drop (the answer itself is always kept), or None for the raw setting.
    Returns ``(expected, pessimistic)``: (B,) float64 ``higher + (n + 1) / 2`` and (B,) int64 ``higher + n``,
    with ``n`` the tied block including the answer.
    """
    if scores.dim() != 2 or answers.shape != (scores.shape[0],):
        raise ValueError(
            f"scores must be (B, E) and answers (B,); got {tuple(scores.shape)} and {tuple(answers.shape)}"
        )
    scores = torch.nan_to_num(scores, nan=-float("inf"))
    answers = answers.to(device=scores.device, dtype=torch.long)
    rows = torch.arange(scores.shape[0], device=scores.device)
    target = scores[rows, answers].unsqueeze(1)
    keep = torch.ones_like(scores, dtype=torch.bool) if filter_mask is None else ~filter_mask.to(scores.device)
    keep[rows, answers] = False  # counted separately below
    higher = ((scores > target) & keep).sum(1)
    tied = ((scores == target) & keep).sum(1) + 1
    return higher.double() + (tied.double() + 1) / 2, higher + tied


def _filtered_ranks_sparse(
    scores: torch.Tensor, answers: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`filtered_ranks` with the filter given as (rows, cols) pairs: two dense passes instead of six."""
    if bool(torch.isnan(scores).any()):
        scores = torch.nan_to_num(scores, nan=-float("inf"))
    answers = answers.to(device=scores.device, dtype=torch.long)
    target = scores.gather(1, answers.unsqueeze(1))
    higher = (scores > target).sum(1, dtype=torch.int32).long()  # int32 sums are ~2x faster on CPU
    tied = (scores == target).sum(1, dtype=torch.int32).long()  # includes the answer itself
    drop = cols != answers[rows]
    rows, cols = rows[drop], cols[drop]
    known = scores[rows, cols]
    t = target[rows, 0]
    higher = higher - torch.bincount(rows[known > t], minlength=len(answers))
    tied = tied - torch.bincount(rows[known == t], minlength=len(answers))
    return higher.double() + (tied.double() + 1) / 2, higher + tied


def _higher_and_tied(expected: torch.Tensor, pessimistic: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    exp = np.asarray(torch.as_tensor(expected).detach().cpu(), dtype=np.float64).reshape(-1)
    pes = np.asarray(torch.as_tensor(pessimistic).detach().cpu(), dtype=np.float64).reshape(-1)
    if exp.shape != pes.shape:
        raise ValueError(f"expected and pessimistic ranks differ in length ({exp.shape[0]} vs {pes.shape[0]})")
    tied2 = 2 * (pes - exp) + 1
    tied = np.rint(tied2).astype(np.int64)
    higher = np.rint(pes).astype(np.int64) - tied
    if len(exp) and (np.any(np.abs(tied2 - tied) > 1e-6) or tied.min() < 1 or higher.min() < 0):
        raise ValueError("ranks are not (higher + (n+1)/2, higher + n) pairs with n >= 1, higher >= 0")
    return higher, tied


def expected_metrics(
    higher: np.ndarray, tied: np.ndarray, hits_at: Iterable[int] = (1, 3, 10)
) -> dict[str, np.ndarray]:
    """Per-query expectations over the tied block (module doc): ``rr``, ``rank``, ``hits@k``; float64 (B,)."""
    higher = np.asarray(higher, dtype=np.int64)
    tied = np.asarray(tied, dtype=np.int64)
    n = tied.astype(np.float64)
    top = int((higher + tied).max()) if len(higher) else 0
    harm = _harmonic(top)
    rr = np.where(tied == 1, 1.0 / (higher + 1), (harm[higher + tied] - harm[higher]) / n)
    out = {"rr": rr, "rank": higher + (n + 1) / 2}
    for k in hits_at:
        out[f"hits@{k}"] = np.clip(k - higher, 0, tied) / n
    return out


def _fixed(values: np.ndarray) -> int:
    """Exact sum of float64 values as an integer multiple of 2**-96."""
    scaled = np.ldexp(np.asarray(values, dtype=np.float64), _FRAC_BITS)
    return sum(int(v) for v in scaled.tolist())


class RankingMetrics:
    """torchmetrics-style ranking state: ``update`` / ``merge`` / ``compute``; sums across clients exactly.

    ``compute()`` keys: ``mrr``, ``mr``, ``hits@k`` (expectation over ties), the same with ``_pessimistic``,
    and ``count`` (number of queries).
    """

    def __init__(self, hits_at: Sequence[int] = (1, 3, 10)) -> None:
        self.hits_at = tuple(int(k) for k in hits_at)
        self.reset()

    def _names(self) -> list[str]:
        base = ["rr", "rank", *(f"hits@{k}" for k in self.hits_at)]
        return base + [f"{b}_pessimistic" for b in base]

    def reset(self) -> None:
        self.count = 0
        self.sums: dict[str, int] = dict.fromkeys(self._names(), 0)

    def update(self, ranks_expected: torch.Tensor, ranks_pessimistic: torch.Tensor) -> None:
        """Add queries given their ranks from :func:`filtered_ranks`."""
        higher, tied = _higher_and_tied(ranks_expected, ranks_pessimistic)
        self.update_counts(higher, tied)

    def update_counts(self, higher: np.ndarray, tied: np.ndarray) -> None:
        """Add queries given ``higher`` (strictly better candidates) and ``tied`` (block size incl. the answer)."""
        higher = np.asarray(higher, dtype=np.int64).reshape(-1)
        tied = np.asarray(tied, dtype=np.int64).reshape(-1)
        for name, vals in expected_metrics(higher, tied, self.hits_at).items():
            self.sums[name] += _fixed(vals)
        pess = (higher + tied).astype(np.float64)
        self.sums["rr_pessimistic"] += _fixed(1.0 / pess)
        self.sums["rank_pessimistic"] += _fixed(pess)
        for k in self.hits_at:
            self.sums[f"hits@{k}_pessimistic"] += int((pess <= k).sum()) << _FRAC_BITS
        self.count += len(higher)

    def merge(self, other: RankingMetrics) -> RankingMetrics:
        """Add ``other``'s queries into this state (in place) and return self."""
        if other.hits_at != self.hits_at:
            raise ValueError(f"cannot merge metrics with hits_at {other.hits_at} into {self.hits_at}")
        for name in self.sums:
            self.sums[name] += other.sums[name]
        self.count += other.count
        return self

    def __add__(self, other: RankingMetrics) -> RankingMetrics:
        return self.copy().merge(other)

    def violations(self, num_entities: int) -> list[str]:
        """The sums no ranking of ``count`` queries over ``num_entities`` candidates can give (a reply to refuse):
        every reciprocal rank and hit lies in [0, 1], every rank in [1, E]."""
        n, one = self.count, 1 << _FRAC_BITS
        bad = [] if n >= 0 else ["count"]
        for name, value in self.sums.items():
            low, high = (n * one, n * num_entities * one) if name.startswith("rank") else (0, n * one)
            if not low <= value <= high:
                bad.append(name)
        return bad

    def copy(self) -> RankingMetrics:
        out = RankingMetrics(self.hits_at)
        out.count, out.sums = self.count, dict(self.sums)
        return out

    def compute(self) -> dict[str, float]:
        """Means over all queries seen (NaN when none); see the class doc for the keys."""
        out: dict[str, float] = {}
        for name, total in self.sums.items():
            key = name.replace("rr", "mrr", 1) if name.startswith("rr") else name.replace("rank", "mr", 1)
            out[key] = total / (self.count << _FRAC_BITS) if self.count else float("nan")
        out["count"] = float(self.count)
        return out

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe state (sums as decimal strings of the fixed-point integers)."""
        return {"hits_at": list(self.hits_at), "count": self.count, "sums": {k: str(v) for k, v in self.sums.items()}}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> RankingMetrics:
        out = cls(state["hits_at"])
        out.count = int(state["count"])
        out.sums = {k: int(state["sums"][k]) for k in out._names()}
        return out

    def __repr__(self) -> str:
        if not self.count:
            return "RankingMetrics(count=0)"
        m = self.compute()
        return f"RankingMetrics(count={self.count}, mrr={m['mrr']:.4f}, mr={m['mr']:.1f}, hits@10={m.get('hits@10', float('nan')):.4f})"


# --------------------------------------------------------------------------------------- batched eval
def link_prediction_queries(
    triples: np.ndarray, num_relations: int, directions: Sequence[str] = ("tail", "head")
) -> tuple[np.ndarray, np.ndarray]:
    """(n, 3) triples -> queries (m, 2) [entity, relation in 0..2R-1] and answers (m,).

    ``tail``: (h, r) -> t; ``head``: asked as (t, r + R) -> h. Tail queries first, then head queries.
    """
    triples = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
    qs, ans = [], []
    for d in directions:
        if d == "tail":
            qs.append(triples[:, :2])
            ans.append(triples[:, 2])
        elif d == "head":
            qs.append(np.stack([triples[:, 2], triples[:, 1] + num_relations], axis=1))
            ans.append(triples[:, 0])
        else:
            raise ValueError(f"unknown direction {d!r}; expected 'tail' or 'head'")
    if not qs:
        return np.zeros((0, 2), np.int64), np.zeros(0, np.int64)
    return np.concatenate(qs), np.concatenate(ans)


def evaluate_link_prediction(
    score_fn: Callable[[torch.Tensor], torch.Tensor],
    kg: KnowledgeGraph,
    split: str = "test",
    batch_size: int | None = None,
    filter_with: FilterIndex | KnowledgeGraph | Sequence[KnowledgeGraph] | None = None,
    *,
    directions: Sequence[str] = ("tail", "head"),
    max_memory_bytes: int = 256 << 20,
    metrics: RankingMetrics | None = None,
    triples: np.ndarray | None = None,
    device: torch.device | str | None = None,
) -> RankingMetrics:
    """Filtered ranking of every query of ``kg``'s ``split`` (or of ``triples``) under ``score_fn``.

    ``score_fn(queries)``: (B, 2) LongTensor [entity, relation in 0..2R-1] -> (B, E) scores.
    ``filter_with``: the filter set (default: ``kg``'s train ∪ valid ∪ test); a KG or a list of parts builds one.
    ``batch_size``: queries per call; by default as many as keep the (B, E) scores and masks under
    ``max_memory_bytes`` (about 16 bytes a candidate). ``metrics``: a state to add into (returned).
    """
    if filter_with is None:
        index = known_answers(kg)
    elif isinstance(filter_with, FilterIndex):
        index = filter_with
    else:
        index = known_answers(filter_with)
    if index.num_entities != kg.num_entities or index.num_relations != kg.num_relations:
        raise ValueError(
            f"{kg.name}: the filter set's vocabulary ({index.num_entities} entities, "
            f"{index.num_relations} relations) differs from the KG's"
        )
    queries, answers = link_prediction_queries(
        kg.split(split) if triples is None else triples, kg.num_relations, directions
    )
    # grouped by query relation: a rule-based score_fn grounds each relation's bodies once per batch, so a batch
    # spanning hundreds of relations costs hundreds of small sparse products (FB15k-237: most of the evaluation
    # time); the metric sums are exact integers, so the order cannot change them
    order = np.argsort(queries[:, 1], kind="stable")
    queries, answers = queries[order], answers[order]
    num_e = kg.num_entities
    if batch_size is None:
        batch_size = max(1, int(max_memory_bytes // (16 * max(num_e, 1))))
    out = RankingMetrics() if metrics is None else metrics
    with torch.no_grad():
        for start in range(0, len(queries), batch_size):
            q = torch.from_numpy(queries[start : start + batch_size])
            a = torch.from_numpy(answers[start : start + batch_size])
            if device is not None:
                q, a = q.to(device), a.to(device)
            scores = score_fn(q)
            if not isinstance(scores, torch.Tensor) or tuple(scores.shape) != (len(q), num_e):
                shape = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
                raise ValueError(f"score_fn returned {shape} for {len(q)} queries; expected ({len(q)}, {num_e})")
            rows, cols = index.pairs(q)
            expected, pessimistic = _filtered_ranks_sparse(
                scores, a, torch.from_numpy(rows).to(scores.device), torch.from_numpy(cols).to(scores.device)
            )
            out.update(expected, pessimistic)
    return out

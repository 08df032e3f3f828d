"""Rules with constants for one head relation of a KG: AnyBURL's acyclic rules of length 1.

For a head relation q (0..2R-1) and a candidate answer c (a constant):

    q(X, c) <- b(X, d)     body constant d (AnyBURL's AC1):       fires for a query (x, q, ?) when x -b-> d
    q(X, c) <- b(X, _)     dangling body, d = -1 (AnyBURL's AC2):  fires when x has any b-edge

A fired rule points at the one candidate c. They hold what closed-path bodies cannot: "people born in Paris are
French", "synsets with a hypernym edge to `entity` are nouns". Counted on training facts (x, q, c) with the fact's
own edge x -q-> c removed, so ``q(X, c) <- q(X, c)`` never counts:

    support(rule)   = #facts (x, q, c) whose x satisfies the body without its own edge
    body_size(rule) = #entities x satisfying the body on the graph
    confidence      = support / (body_size + unseen)      (AnyBURL's confidence with ``unseen`` pessimistic
                                                            negatives, 5 by default; ranks rules, never scores them)

The rules of a head are local statistics of one client's graph: the constants are entity ids, so they are never
part of a federation message.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from kg.grounding.sparse import SparseGraph

__all__ = ["ConstantRules", "mine_constant_rules"]


@dataclass(frozen=True)
class ConstantRules:
    """The constant rules of head ``head``, arrays aligned by rule k (ranked by smoothed confidence)."""

    head: int
    relation: np.ndarray  # (K,) int64 body relation b in 0..2R-1
    constant: np.ndarray  # (K,) int64 body constant d, -1 for a dangling body
    answer: np.ndarray  # (K,) int64 head constant c
    support: np.ndarray  # (K,) int64
    body_size: np.ndarray  # (K,) int64

    def __len__(self) -> int:
        return int(self.answer.size)

    @property
    def confidence(self) -> np.ndarray:
        """(K,) standard confidence support / body_size."""
        return self.support / np.maximum(self.body_size, 1)

    def fires(self, graph: SparseGraph, starts: np.ndarray, own_answers: np.ndarray | None = None) -> sp.csr_matrix:
        """(B, K) 0/1 CSR: rule k fires for the query (starts[i], head, ?). ``own_answers`` (B,): the query's own
        fact (starts[i], head, own_answers[i]) is removed from the graph first (-1: nothing removed)."""
        rows = _rows_without_own_edge(graph, self.head, starts, own_answers)
        feats = sp.hstack([rows, _dangling(rows, graph)], format="csr")  # (B, 2R·E + 2R)
        width = 2 * graph.num_relations * graph.num_entities
        cols = np.where(self.constant >= 0, self.relation * graph.num_entities + self.constant, width + self.relation)
        out = sp.csr_matrix(feats[:, cols])  # column k = rule k's body feature (no (2R·E, K) selector is ever built)
        out.eliminate_zeros()
        return out


def _rows_without_own_edge(
    graph: SparseGraph, head: int, starts: np.ndarray, own_answers: np.ndarray | None
) -> sp.csr_matrix:
    """(B, 2R·E) neighbourhood rows of ``starts`` with each row's own edge start -head-> own_answer removed."""
    rows = sp.csr_matrix(graph.neighbourhood()[np.asarray(starts, dtype=np.int64)])
    if own_answers is None:
        return rows
    own = np.asarray(own_answers, dtype=np.int64)
    keep = own >= 0
    if not keep.any():
        return rows
    E = graph.num_entities
    mask = sp.csr_matrix(
        (np.ones(int(keep.sum()), dtype=np.float32), (np.flatnonzero(keep), head * E + own[keep])), shape=rows.shape
    )
    rows = sp.csr_matrix(rows - rows.multiply(mask))
    rows.eliminate_zeros()
    return rows


def _dangling(rows: sp.csr_matrix, graph: SparseGraph) -> sp.csr_matrix:
    """(B, 2R) 0/1: whether each row has any edge of relation b (the dangling bodies b(X, _))."""
    E = graph.num_entities
    row_of = np.repeat(np.arange(rows.shape[0]), np.diff(rows.indptr))
    out = sp.csr_matrix(
        (np.ones(rows.nnz, dtype=np.float32), (row_of, rows.indices // E)),
        shape=(rows.shape[0], 2 * graph.num_relations),
    )
    out.data[:] = 1.0  # duplicates were summed: an indicator
    return out


def mine_constant_rules(
    graph: SparseGraph,
    head: int,
    facts: np.ndarray,
    max_rules: int,
    *,
    min_support: int = 2,
    unseen: float = 5.0,
    dangling: bool = True,
    max_facts: int | None = None,
    seed: int = 0,
) -> ConstantRules:
    """The ``max_rules`` best constant rules of ``head`` from its training ``facts`` (n, 2) [x, c] on ``graph``.

    Every (body, c) with support ≥ ``min_support`` is a candidate; they are ranked by support / (body_size +
    ``unseen``), ties by support then by id. ``max_facts``: count on a uniform sample of at most this many facts
    (seeded by ``(seed, head)``). Cost: one sparse product over the facts' neighbourhoods, Σ_x deg(x) entries.
    """
    E = graph.num_entities
    arr = np.asarray(facts, dtype=np.int64).reshape(-1, 2)
    if max_facts is not None and arr.shape[0] > max_facts:
        rng = np.random.default_rng([seed, head])
        arr = arr[np.sort(rng.choice(arr.shape[0], size=max_facts, replace=False))]
    empty = np.zeros(0, dtype=np.int64)
    if arr.shape[0] == 0 or max_rules <= 0:
        return ConstantRules(head, empty, empty, empty, empty, empty)
    rows = _rows_without_own_edge(graph, head, arr[:, 0], arr[:, 1])
    answers = sp.csr_matrix(
        (np.ones(arr.shape[0], dtype=np.float32), (np.arange(arr.shape[0]), arr[:, 1])), (arr.shape[0], E)
    )
    blocks = [(rows.T @ answers).tocoo()]  # (2R·E, E): support of q(X, c) <- b(X, d) at [b·E + d, c]
    nbr = graph.neighbourhood()
    sizes = [np.bincount(nbr.indices, minlength=nbr.shape[1])]  # #x with x -b-> d, per column b·E + d
    if dangling:
        blocks.append((_dangling(rows, graph).T @ answers).tocoo())  # (2R, E)
        sizes.append(np.asarray(graph.relation_types().sum(axis=0), dtype=np.int64).ravel())  # #x with any b-edge
    rel, const, ans, sup, size = [], [], [], [], []
    for i, (blk, body_sizes) in enumerate(zip(blocks, sizes)):
        ok = blk.data >= min_support
        feat, c, s = blk.row[ok].astype(np.int64), blk.col[ok].astype(np.int64), blk.data[ok].astype(np.int64)
        rel.append(feat // E if i == 0 else feat)
        const.append(feat % E if i == 0 else np.full(feat.size, -1, dtype=np.int64))
        ans.append(c)
        sup.append(s)
        size.append(body_sizes[feat].astype(np.int64))
    r_, d_, c_, s_, b_ = (np.concatenate(x) for x in (rel, const, ans, sup, size))
    score = s_ / (b_ + unseen)
    order = np.lexsort((d_, r_, c_, -s_, -score))[:max_rules]
    return ConstantRules(head, r_[order], d_[order], c_[order], s_[order], b_[order])

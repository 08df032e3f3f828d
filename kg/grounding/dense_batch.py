"""Path counts of many bodies at once on a small graph, as COO entries.

:meth:`SparseGraph.iter_path_counts <kg.grounding.sparse.SparseGraph.iter_path_counts>` walks the bodies' prefix
trie one body at a time, so on a small dense graph (UMLS: 135 entities) its cost is the per-body overhead of
sparse products, not arithmetic. Here the trie is walked one level at a time instead: the frontiers of all the
level's prefixes form one dense (N, B, E) tensor, advanced by one batched product with the prefixes' last
relations (``torch.bmm`` with the (N, E, E) dense adjacencies), so a level costs one call whatever N is.

The counts are those of ``iter_path_counts``, term for term:

    walks    X_k = X_{k-1} · A_{b_k}, less X_{k-1}[i, u] at (i, v) for each edge u -b_k-> v excluded for row i
    simple   the corrections of ``SparseGraph._simple_step`` applied to each step, batched over the prefixes

Every count is an integer held exactly in float32 (below 2²⁴), so the entries equal the sparse ones exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["Excluded", "PathEntries", "dense_body_statistics", "dense_path_entries", "prefix_levels"]

#: (N, B, E) float32 tensors alive at once per level, at most (frontiers, the product, the gathered parents,
#: the simple-path corrections): bounds the bodies taken per chunk.
_TENSORS_PER_PREFIX = 8


@dataclass(frozen=True)
class PathEntries:
    """The non-zero path counts of bodies from a batch of starts: entry k is body ``body[k]``'s count ``count[k]``
    of paths from start row ``row[k]`` to entity ``col[k]``; ``total[k]`` is that body's count summed over every
    entity of the row. Entries are in the bodies' trie order (sorted bodies), then by row, then by entity."""

    body: np.ndarray  # (nnz,) int64 index into the bodies given
    row: np.ndarray  # (nnz,) int64 start row
    col: np.ndarray  # (nnz,) int64 entity
    count: np.ndarray  # (nnz,) float32
    total: np.ndarray  # (nnz,) float32

    @classmethod
    def empty(cls) -> PathEntries:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, z, np.zeros(0, np.float32), np.zeros(0, np.float32))

    @classmethod
    def concat(cls, parts: Sequence[PathEntries]) -> PathEntries:
        if not parts:
            return cls.empty()
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("body", "row", "col", "count", "total")))


@dataclass(frozen=True)
class Excluded:
    """Directed edges removed per start row: row i loses src -rel-> dst (relations 0..2R-1)."""

    row: np.ndarray  # (m,) int64
    src: np.ndarray  # (m,) int64
    rel: np.ndarray  # (m,) int64
    dst: np.ndarray  # (m,) int64

    def for_relation(self, q: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row, src, dst) of the removed edges of relation q."""
        sel = self.rel == q
        return self.row[sel], self.src[sel], self.dst[sel]


def _exclude(y: torch.Tensor, x: torch.Tensor | None, last: torch.Tensor, starts: torch.Tensor, ex: Excluded) -> None:
    """Subtract, in place, the paths of ``y`` = x · A_last that used an excluded edge of their row: for each
    prefix n and excluded edge u -last[n]-> v of row i, y[n, i, v] -= x[n, i, u] (x None: the one-hot starts)."""
    n, e = torch.nonzero(last[:, None] == torch.from_numpy(ex.rel)[None, :], as_tuple=True)
    if not n.numel():
        return
    row, src, dst = (torch.from_numpy(a)[e] for a in (ex.row, ex.src, ex.dst))
    vals = (starts[row] == src).to(y.dtype) if x is None else x[n, row, src]
    y.index_put_((n, row, dst), -vals, accumulate=True)


def dense_path_entries(
    adjacency: torch.Tensor,
    inverse: torch.Tensor,
    bodies: Sequence[tuple[int, ...]],
    starts: np.ndarray,
    excluded: Excluded | None,
    simple: bool,
    max_bytes: int,
    max_fanout: int | None = None,
) -> PathEntries:
    """Entries of every body's (B, E) path counts from ``starts`` (B,).

    adjacency: (2R, E, E) float32 dense A_q; inverse: (2R,) int64 the inverse of each relation; bodies: checked
    relation tuples (length ≤ 3 when ``simple``); excluded: edges dropped per row; simple: count simple paths
    (no entity twice) instead of walks; max_bytes: working memory per chunk of bodies; max_fanout: a row of a
    body reaching more than this many entities is dropped (all its entries)."""
    J = len(bodies)
    B = int(starts.size)
    E = int(adjacency.shape[-1])
    if J == 0 or B == 0:
        return PathEntries.empty()
    order = sorted(range(J), key=lambda j: bodies[j])
    chunk = max(1, max_bytes // (_TENSORS_PER_PREFIX * B * E * 4))
    s = torch.from_numpy(np.ascontiguousarray(starts, dtype=np.int64))
    parts = [
        _chunk_entries(adjacency, inverse, bodies, order[lo : lo + chunk], s, excluded, simple, max_fanout)
        for lo in range(0, J, chunk)
    ]
    return PathEntries.concat(parts)


def _two_cycles(adj: torch.Tensor, b: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(N, E) cyc[n, y] = #z ≠ y with y -b[n]-> z -q[n]-> y, computed once per distinct (b, q) pair."""
    pairs, where = torch.unique(torch.stack([b, q], 1), dim=0, return_inverse=True)
    ab, aq = adj[pairs[:, 0]], adj[pairs[:, 1]]
    cyc = (ab * aq.transpose(1, 2)).sum(2) - torch.diagonal(ab, dim1=1, dim2=2) * torch.diagonal(aq, dim1=1, dim2=2)
    return cyc[where]


def prefix_levels(bodies: Sequence[tuple[int, ...]]) -> list[list[tuple[int, ...]]]:
    """The prefix trie of ``bodies`` by level: level k holds the distinct prefixes of length k + 1, sorted (so the
    children of one prefix are consecutive)."""
    depth = max((len(b) for b in bodies), default=0)
    return [sorted({b[: k + 1] for b in bodies if len(b) > k}) for k in range(depth)]


def _level_frontiers(
    adj: torch.Tensor,
    inverse: torch.Tensor,
    bodies: Sequence[tuple[int, ...]],
    s: torch.Tensor,
    ex: Excluded | None,
    simple: bool,
) -> tuple[list[list[tuple[int, ...]]], list[torch.Tensor]]:
    """The prefix trie of ``bodies`` by level (level k: the distinct prefixes of length k + 1, sorted) and each
    level's (N_k, B, E) path counts from the starts ``s``, one batched product a level."""
    B = int(s.numel())
    rows = torch.arange(B)
    levels = prefix_levels(bodies)
    frontiers: list[torch.Tensor] = []
    for k, prefixes in enumerate(levels):
        last = torch.tensor([p[k] for p in prefixes], dtype=torch.long)
        a = adj[last]  # (N, E, E)
        x: torch.Tensor | None
        if k == 0:
            x = None
            y = a[:, s, :]  # one-hot starts times A
        else:
            where = {p: i for i, p in enumerate(levels[k - 1])}
            x = frontiers[k - 1][torch.tensor([where[p[:k]] for p in prefixes], dtype=torch.long)]
            y = torch.bmm(x, a)
        if ex is not None:
            _exclude(y, x, last, s, ex)
        if simple:
            loops = torch.diagonal(a, dim1=1, dim2=2)  # (N, E) self-loops of each last relation (rare)
            looped = torch.nonzero(loops.any(1)).ravel()
            if x is not None and looped.numel():
                y[looped] -= x[looped] * loops[looped, None, :]
            if k == 2:
                roots = {p: i for i, p in enumerate(levels[0])}
                first = frontiers[0][torch.tensor([roots[p[:1]] for p in prefixes], dtype=torch.long)]
                b2 = torch.tensor([p[1] for p in prefixes], dtype=torch.long)
                via_start = adj[inverse[b2][:, None], s[None, :]] * adj[last[:, None], s[None, :]]  # (N, B, E)
                y -= first * (_two_cycles(adj, b2, last)[:, None, :] - via_start)
            y[:, rows, s] = 0.0
        frontiers.append(y)
    return levels, frontiers


def _chunk_entries(
    adj: torch.Tensor,
    inverse: torch.Tensor,
    bodies: Sequence[tuple[int, ...]],
    ids: list[int],
    s: torch.Tensor,
    ex: Excluded | None,
    simple: bool,
    max_fanout: int | None,
) -> PathEntries:
    """:func:`dense_path_entries` for the bodies ``ids`` (consecutive in trie order)."""
    levels, frontiers = _level_frontiers(adj, inverse, [bodies[j] for j in ids], s, ex, simple)
    parts = []
    for k, prefixes in enumerate(levels):
        index = {p: i for i, p in enumerate(prefixes)}
        mine = [j for j in ids if len(bodies[j]) == k + 1]
        if not mine:
            continue
        counts = frontiers[k][torch.tensor([index[bodies[j]] for j in mine], dtype=torch.long)]
        if max_fanout is not None:
            counts[(counts != 0).sum(2) > max_fanout] = 0.0
        totals = counts.sum(2)
        n, r, c = torch.nonzero(counts, as_tuple=True)
        parts.append(
            PathEntries(
                np.asarray(mine, dtype=np.int64)[n.numpy()],
                r.numpy(),
                c.numpy(),
                counts[n, r, c].numpy(),
                totals[n, r].numpy(),
            )
        )
    out = PathEntries.concat(parts)
    rank = np.empty(len(bodies), dtype=np.int64)
    rank[ids] = np.arange(len(ids))
    keep = np.argsort(rank[out.body], kind="stable")  # trie order; each body's entries stay row-major
    return PathEntries(out.body[keep], out.row[keep], out.col[keep], out.count[keep], out.total[keep])


def dense_body_statistics(
    adjacency: torch.Tensor,
    inverse: torch.Tensor,
    bodies: Sequence[tuple[int, ...]],
    heads: torch.Tensor,
    simple: bool,
    max_bytes: int,
) -> tuple[np.ndarray, np.ndarray]:
    """AMIE's counts of every body against several heads at once, no edge removed: body_size (J,) the pairs
    (x, y) the body connects, and support (J, H) those that are also facts of head h (``heads``: (H, E, E) 0/1
    float32 head adjacencies). Each body's E × E path matrix is computed once (all start entities, trie levels as
    in :func:`dense_path_entries`), whatever the number of heads whose pools hold it."""
    J = len(bodies)
    E = int(adjacency.shape[-1])
    H = int(heads.shape[0])
    support = np.zeros((J, H), dtype=np.int64)
    body_size = np.zeros(J, dtype=np.int64)
    if J == 0:
        return body_size, support
    order = sorted(range(J), key=lambda j: bodies[j])
    chunk = max(1, max_bytes // (_TENSORS_PER_PREFIX * E * E * 4))
    s = torch.arange(E)
    flat_heads = heads.reshape(H, E * E).T  # (E·E, H)
    for lo in range(0, J, chunk):
        ids = order[lo : lo + chunk]
        levels, frontiers = _level_frontiers(adjacency, inverse, [bodies[j] for j in ids], s, None, simple)
        for k, prefixes in enumerate(levels):
            index = {p: i for i, p in enumerate(prefixes)}
            mine = [j for j in ids if len(bodies[j]) == k + 1]
            if not mine:
                continue
            fires = (frontiers[k][torch.tensor([index[bodies[j]] for j in mine], dtype=torch.long)] > 0).float()
            fires = fires.reshape(len(mine), E * E)
            body_size[mine] = fires.sum(1).long().numpy()
            support[mine] = (fires @ flat_heads).round().long().numpy()  # counts ≤ E² < 2²⁴: exact in float32
    return body_size, support

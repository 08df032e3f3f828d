"""Query cells and path-value features φ of one client's data part (paper Eq. 8, 21–22; spec §8.5–8.6).

A *part* is a list of documents with their backbone values x (N, N, R) ∈ [0, 1] and one head–tail combo
(:class:`kg.split.Combo`): its query cells are the entity pairs (h, t), h ≠ t, whose types fall in the combo.
:class:`CellTable` groups the cells by entity-type pair (a, b) — a triple (r, a, b) scores exactly the cells
of its type pair — and keeps per cell the gold labels (c, R), the backbone values x_r(h, t) (c, R) and, for
Ign-F1, whether the fact (name_h, r, name_t) occurs among the client's training facts.

:class:`PhiCache` computes φ_j over the cells of a type pair for any bodies and caches them by body: the
backbone values are fixed during the FedNSL rounds, so a body's φ never changes (spec: "precompute φ once per
round per client for all bodies; only J and docs matter"). Graph scoring (Eq. 8) evaluates all distinct body
prefixes once per document with :func:`kg.grounding.path_scores` (max-product, prefix trie)
— in practice the union of a document's new bodies goes through one :func:`kg.grounding.path_scores` call (prefix
trie shared by all bodies, numba kernel) and the cells are gathered from it (stay tokens dropped: the stay channel
is the identity on real entities). Fast-FedNSL (App. A.8) adds:

- ``max_edge`` (spec §8.6(b), "the maximum fuzzy value along the trajectory of the rule body"), read as the
  graph-free relaxation φ̃_j(h, t) = max_z x_{b_1}(h, z) · Π_{1<k<L} max x_{b_k} · max_z x_{b_L}(z, t)
  (exact for length-1 bodies, an upper bound of φ otherwise, O(N²) per token instead of O(N³));
- ``cached_path`` (spec §8.6(a)): bodies grounded by the graph search in rounds < I keep their argmax-path
  value; since the backbone values do not change between rounds, Π x along the cached argmax path equals the
  cached φ, so the cache is reused as is, and bodies first seen at round ≥ I fall back to ``max_edge``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from kg.documents import Document
from kg.grounding import path_scores, with_inverse_and_stay
from kg.split import Combo, query_mask

__all__ = [
    "Part",
    "TypeCells",
    "CellTable",
    "PhiCache",
    "phi_at_cells",
    "document_phi",
    "max_edge_at_cells",
    "PathScore",
]

PathScore = Literal["graph", "cached_path", "max_edge"]


@dataclass
class Part:
    """Documents of one role (train / holdout / seen_test / unseen_test) queried on one combo.

    values: one (N, N, R) float32 array in [0, 1] per document (the backbone's fuzzy relation values).
    """

    name: str
    docs: list[Document]
    combo: Combo
    values: list[np.ndarray]


@dataclass
class TypeCells:
    """Query cells of one entity-type pair (a, b), ordered by document.

    doc, head, tail (c,) int64; gold (c, R) bool; x (c, R) float32 backbone values; in_train (c, R) bool;
    doc_slices: {document index: slice into the cells}.
    """

    doc: np.ndarray
    head: np.ndarray
    tail: np.ndarray
    gold: np.ndarray
    x: np.ndarray
    in_train: np.ndarray
    doc_slices: dict[int, slice] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.doc.shape[0])


class CellTable:
    """The query cells of a :class:`Part`, grouped by entity-type pair (see module docstring).

    ``train_facts``: set of (head name, relation id, tail name) of the client's training facts, for the
    Ign-F1 ``in_train`` flags (None: all False). Documents without entities or query pairs are counted.
    """

    def __init__(self, part: Part, num_relations: int, train_facts: set[tuple[str, int, str]] | None = None):
        self.part = part
        self.num_relations = R = num_relations
        self.empty_docs = 0
        self.docs_without_queries = 0
        buckets: dict[tuple[int, int], list[tuple[int, np.ndarray, np.ndarray]]] = {}
        for d, doc in enumerate(part.docs):
            if doc.num_entities == 0:
                self.empty_docs += 1
                continue
            m = query_mask(doc, part.combo)
            h, t = np.nonzero(m)
            if h.size == 0:
                self.docs_without_queries += 1
                continue
            types = doc.entity_types
            key = types[h] * 100_000 + types[t]
            for k in np.unique(key):
                sel = key == k
                buckets.setdefault((int(k // 100_000), int(k % 100_000)), []).append((d, h[sel], t[sel]))
        self.groups: dict[tuple[int, int], TypeCells] = {}
        for ab, items in sorted(buckets.items()):
            docs_idx, heads, tails, golds, xs, ins = [], [], [], [], [], []
            slices: dict[int, slice] = {}
            start = 0
            for d, h, t in items:
                doc = part.docs[d]
                gold = np.zeros((doc.num_entities, doc.num_entities, R), dtype=bool)
                if doc.num_facts:
                    gold[doc.facts[:, 0], doc.facts[:, 2], doc.facts[:, 1]] = True
                x = part.values[d]
                docs_idx.append(np.full(len(h), d, dtype=np.int64))
                heads.append(h.astype(np.int64))
                tails.append(t.astype(np.int64))
                golds.append(gold[h, t])
                xs.append(np.asarray(x[h, t], dtype=np.float32))
                it = np.zeros((len(h), R), dtype=bool)
                if train_facts:
                    names = doc.entity_names
                    for i, (hh, tt) in enumerate(zip(h.tolist(), t.tolist())):
                        for r in np.flatnonzero(gold[hh, tt]).tolist():
                            it[i, r] = (names[hh], r, names[tt]) in train_facts
                ins.append(it)
                slices[d] = slice(start, start + len(h))
                start += len(h)
            self.groups[ab] = TypeCells(
                np.concatenate(docs_idx),
                np.concatenate(heads),
                np.concatenate(tails),
                np.concatenate(golds),
                np.concatenate(xs),
                np.concatenate(ins),
                slices,
            )

    @property
    def num_cells(self) -> int:
        return sum(len(g) for g in self.groups.values())

    def gold_facts(self, relations: Iterable[int] | None = None) -> int:
        """Number of gold (cell, relation) facts over all cells (restricted to ``relations`` when given)."""
        rel = None if relations is None else np.asarray(sorted(set(relations)), dtype=np.int64)
        total = 0
        for g in self.groups.values():
            total += int(g.gold.sum() if rel is None else g.gold[:, rel].sum())
        return total


def _canonical(bodies: torch.Tensor, stay: int) -> list[tuple[int, ...]]:
    return [tuple(t for t in row if t != stay) for row in bodies.tolist()]


def phi_at_cells(
    values: torch.Tensor, bodies: Sequence[tuple[int, ...]], heads: torch.Tensor, tails: torch.Tensor, stay: int
) -> torch.Tensor:
    """Max-product φ (K, c) of K canonical bodies (stay-free token tuples) at c cells of one document.

    values: (N, N, C) channel tensor (relations, inverses, stay); heads, tails (c,) long. Uses
    :func:`kg.grounding.path_scores` (prefix trie, numba kernel) on the whole document, then gathers the cells.
    """
    K, c = len(bodies), int(heads.shape[0])
    if K == 0 or c == 0:
        return values.new_zeros(K, c)
    return document_phi(values, bodies, stay)[:, heads, tails]


def document_phi(values: torch.Tensor, bodies: Sequence[tuple[int, ...]], stay: int) -> torch.Tensor:
    """(K, N, N) max-product path values of canonical bodies over every entity pair of one document."""
    width = max(len(b) for b in bodies)
    padded = torch.full((len(bodies), width), stay, dtype=torch.long)
    for i, b in enumerate(bodies):
        padded[i, : len(b)] = torch.tensor(b, dtype=torch.long)
    return path_scores(values[None], padded, validate=False)[0]


def max_edge_at_cells(
    values: torch.Tensor, bodies: Sequence[tuple[int, ...]], heads: torch.Tensor, tails: torch.Tensor
) -> torch.Tensor:
    """Graph-free relaxation φ̃ (K, c) of Fast-FedNSL (module docstring): exact for length 1."""
    K, c = len(bodies), int(heads.shape[0])
    out = values.new_zeros(K, c)
    if K == 0 or c == 0:
        return out
    row_max = values.amax(dim=1)  # (N, C): best edge out of each entity
    col_max = values.amax(dim=0)  # (N, C): best edge into each entity
    glob = values.amax(dim=(0, 1))  # (C,)
    for k, body in enumerate(bodies):
        if len(body) == 1:
            out[k] = values[heads, tails, body[0]]
            continue
        v = row_max[heads, body[0]] * col_max[tails, body[-1]]
        for tok in body[1:-1]:
            v = v * glob[tok]
        out[k] = v
    return out


class PhiCache:
    """φ of bodies over the cells of a :class:`CellTable`, cached per (type pair, body) (module docstring).

    ``mode``: how bodies first requested at round ≥ ``fast_after`` are scored ("graph": always the graph search;
    "cached_path": cached graph values, new bodies by ``max_edge``; "max_edge": every body by ``max_edge``).
    """

    def __init__(self, table: CellTable, mode: PathScore = "graph", fast_after: int = 3):
        if mode not in ("graph", "cached_path", "max_edge"):
            raise ValueError(f"path_score must be 'graph', 'cached_path' or 'max_edge', got {mode!r}")
        self.table = table
        self.mode = mode
        self.fast_after = fast_after
        R = table.num_relations
        self.stay = 2 * R
        self._values: dict[int, torch.Tensor] = {}
        self._rows: dict[tuple[tuple[int, int], str], dict[tuple[int, ...], int]] = {}
        self._mats: dict[tuple[tuple[int, int], str], list[np.ndarray]] = {}
        self.computed = 0  # bodies × cells grounded (for the time report)
        self._graph_allowed: set[tuple[tuple[int, int], tuple[int, ...]]] = set()

    def channels(self, d: int) -> torch.Tensor:
        """(N, N, 2R+1) channel tensor of document d (built once)."""
        if d not in self._values:
            x = torch.from_numpy(np.ascontiguousarray(self.table.part.values[d], dtype=np.float32))
            self._values[d] = with_inverse_and_stay(x[None])[0].contiguous()
        return self._values[d]

    def _kind(self, rnd: int) -> str:
        if self.mode == "graph" or rnd < self.fast_after:
            return "graph"
        return self.mode

    def features(self, ab: tuple[int, int], bodies: torch.Tensor, rnd: int) -> torch.Tensor:
        """φ (K, c_ab) float32 for K padded bodies (K, L) at the cells of type pair ``ab``."""
        canon = _canonical(bodies, self.stay)
        self.ensure({ab: canon}, rnd)
        return torch.from_numpy(self._gather(ab, canon, rnd))

    def _store_key(self, ab: tuple[int, int], kind: str) -> tuple[tuple[int, int], str]:
        return (ab, "graph" if kind in ("graph", "cached_path") else kind)

    def _gather(self, ab: tuple[int, int], canon: list[tuple[int, ...]], rnd: int) -> np.ndarray:
        kind = self._kind(rnd)
        c = len(self.table.groups[ab]) if ab in self.table.groups else 0
        out = np.zeros((len(canon), c), dtype=np.float32)
        if c == 0:
            return out
        graph_rows, graph_mat = self._rows.get((ab, "graph"), {}), self._mats.get((ab, "graph"), [])
        edge_rows, edge_mat = self._rows.get((ab, "max_edge"), {}), self._mats.get((ab, "max_edge"), [])
        for k, body in enumerate(canon):
            if kind in ("graph", "cached_path") and body in graph_rows:
                out[k] = graph_mat[graph_rows[body]]
            else:
                out[k] = edge_mat[edge_rows[body]]
        return out

    def ensure(self, requests: dict[tuple[int, int], list[tuple[int, ...]]], rnd: int) -> None:
        """Compute and cache every (type pair, body) of ``requests`` not cached yet (one pass over documents)."""
        kind = self._kind(rnd)
        todo: dict[tuple[int, int], dict[str, list[tuple[int, ...]]]] = {}
        for ab, bodies in requests.items():
            if ab not in self.table.groups:
                continue
            graph_rows = self._rows.setdefault((ab, "graph"), {})
            edge_rows = self._rows.setdefault((ab, "max_edge"), {})
            for body in dict.fromkeys(bodies):
                if kind == "graph" or (
                    kind == "cached_path" and (body in graph_rows or (ab, body) in self._graph_allowed)
                ):
                    if body not in graph_rows:
                        todo.setdefault(ab, {}).setdefault("graph", []).append(body)
                elif body not in edge_rows:
                    todo.setdefault(ab, {}).setdefault("max_edge", []).append(body)
        if not todo:
            return
        new = {
            (ab, k): np.zeros((len(b), len(self.table.groups[ab])), dtype=np.float32)
            for ab, kinds in todo.items()
            for k, b in kinds.items()
        }
        docs = sorted({d for ab in todo for d in self.table.groups[ab].doc_slices})
        for d in docs:
            V = self.channels(d)
            wanted = [
                (ab, k, b)
                for ab, kinds in todo.items()
                for k, b in kinds.items()
                if d in self.table.groups[ab].doc_slices
            ]
            graph_bodies = sorted({body for ab, k, b in wanted if k == "graph" for body in b})
            full = document_phi(V, graph_bodies, self.stay) if graph_bodies else None
            row_of = {body: i for i, body in enumerate(graph_bodies)}
            for ab, k, b in wanted:
                g = self.table.groups[ab]
                sl = g.doc_slices[d]
                h = torch.from_numpy(g.head[sl])
                t = torch.from_numpy(g.tail[sl])
                if k == "graph":
                    assert full is not None
                    rows = torch.tensor([row_of[body] for body in b], dtype=torch.long)
                    vals = full[rows][:, h, t]
                else:
                    vals = max_edge_at_cells(V, b, h, t)
                new[(ab, k)][:, sl] = vals.numpy()
                self.computed += len(b) * (sl.stop - sl.start)
        for (ab, k), mat in new.items():
            index = self._rows[self._store_key(ab, k)]
            mats = self._mats.setdefault(self._store_key(ab, k), [])
            for body, row in zip(todo[ab][k], mat):
                index[body] = len(mats)
                mats.append(row)

    def graph_bodies(self) -> list[list[int]]:
        """[a, b, *body] of every body grounded by the graph search (for checkpoints)."""
        out = {(ab, body) for (ab, kind), rows in self._rows.items() if kind == "graph" for body in rows}
        out |= self._graph_allowed
        return sorted([int(ab[0]), int(ab[1]), *map(int, body)] for ab, body in out)

    def allow_graph(self, items: Iterable[Sequence[int]]) -> None:
        """Mark bodies as graph-grounded before the fast switch (restored from a checkpoint)."""
        for it in items:
            self._graph_allowed.add(((int(it[0]), int(it[1])), tuple(int(x) for x in it[2:])))

    def cached_bodies(self) -> int:
        return sum(len(r) for r in self._rows.values())

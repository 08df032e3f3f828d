"""Path counting for chain-rule bodies on one large knowledge graph, with sparse matrix products.

A KG with E entities and R relations becomes 2R adjacency matrices A_q (E, E), A_q[u, v] = 1 iff the fact
(u, q, v) is in the graph; relation q + R is the inverse of q (A_{q+R} = A_q^T). Duplicate facts count once.
For a body (b1, ..., bL) and a batch of start entities s_1..s_B, the path counts are

    C = S · A_{b1} · A_{b2} · ... · A_{bL}        S = one-hot rows of the starts, shape (B, E)

so C[i, e] = number of walks s_i -b1-> z1 -b2-> ... -bL-> e (RNNLogic's grounding, Neural-LP's operator chain).
With ``paths="simple"`` C[i, e] counts simple paths instead: s_i, z1, ..., e pairwise different (AnyBURL's and
AMIE's object identity), so ``~p, p`` cannot return to the start and a body of length 3 cannot shrink to one of
length 1. Each step subtracts the walks that revisit an entity from the walk product (exact for L ≤ 3, see
``SparseGraph._simple_step``); the cost is a few element-wise products beside each sparse product.

Two backends (``bench/kg_grounding.py`` measures both):

- ``"scipy"``: the frontier S·A_{b1}··· stays a scipy CSR matrix (sparse × sparse products). Work and memory
  scale with the number of non-zero path counts, so it wins on sparse graphs (WN18RR) and short bodies.
- ``"torch"``: the frontier is a dense (E, B) tensor multiplied by the transposed CSR adjacency
  (torch.sparse.mm). Work is nnz(A_b) · B per step whatever the frontier's sparsity.

On small dense graphs :meth:`SparseGraph.path_entries` counts many bodies at once instead
(:mod:`kg.grounding.dense_batch`).

Edge exclusion (``exclude``): row i may drop its own facts — the (h, r, t) of a training query — in both
directions (u -q-> v and v -(q±R)-> u), as RNNLogic removes a training query's edge from the graph while grounding
it. It is exact and cheap: at a step with relation q the product of row i loses X[i, u] on column v for each
excluded directed edge u -q-> v that is in the graph (A' = A − e_u e_vᵀ is linear in A).

Memory bound (documented, asserted by ``memory_estimate``): the graph holds 2 · nnz · (4 + 4) bytes of CSR data
and indices (+ row pointers); one call on a batch of B starts holds at most three frontiers of B · E entries at
12 bytes per stored entry (scipy: float32 data + int32/int64 index; torch: 4 bytes dense) plus the dense (B, E)
float32 output, so ``path_counts`` splits the starts into batches of ``batch_size`` (default: the largest B with
B · E · 48 bytes ≤ ``max_batch_bytes``, 256 MiB by default).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
import torch

from kg.grounding.dense_batch import Excluded, PathEntries, dense_path_entries

__all__ = ["Backend", "PathEntries", "Paths", "SparseGraph", "SparseGraphError"]

Backend = Literal["scipy", "torch"]
_BACKENDS = ("scipy", "torch")
Paths = Literal["walks", "simple"]
_PATHS = ("walks", "simple")
_BYTES_PER_FRONTIER_ENTRY = 12  # float32 value + index (worst case)
_FRONTIERS = 3  # previous frontier, product, correction/output
_OUTPUT_BYTES = 4


class SparseGraphError(ValueError):
    """Raised on malformed triples, bodies, starts or exclusions handed to :class:`SparseGraph`."""


def _as_triples(triples: np.ndarray | torch.Tensor | Sequence[Sequence[int]], name: str) -> np.ndarray:
    if isinstance(triples, torch.Tensor):
        triples = triples.detach().cpu().numpy()
    arr = np.asarray(triples)
    if arr.size == 0:
        return np.zeros((0, 3), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise SparseGraphError(f"{name} must have shape (n, 3), got {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise SparseGraphError(f"{name} must hold integer ids, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _scale_columns(m: sp.csr_matrix, v: np.ndarray) -> sp.csr_matrix:
    """m · diag(v) for a CSR m (B, E) and a dense v (E,), without broadcasting v to (B, E)."""
    out = sp.csr_matrix(m, copy=True)
    out.data = out.data * v[out.indices]
    out.eliminate_zeros()
    return out


class SparseGraph:
    """One KG as 2R sparse adjacency matrices (relations 0..R-1 and their inverses R..2R-1).

    Build with :meth:`from_triples`. ``path_counts(body, starts)`` -> (B, E) walk counts along ``body``, or
    simple-path counts (no entity twice on a path: AnyBURL's and AMIE's object identity) with ``paths="simple"``.
    """

    def __init__(
        self,
        adjacency: list[sp.csr_matrix],
        num_entities: int,
        num_relations: int,
        edge_keys: np.ndarray,
        *,
        backend: Backend = "scipy",
        max_batch_bytes: int = 256 << 20,
        dense_max_bytes: int = 0,
        paths: Paths = "walks",
    ) -> None:
        if backend not in _BACKENDS:
            raise SparseGraphError(f"backend must be one of {_BACKENDS}, got {backend!r}")
        if paths not in _PATHS:
            raise SparseGraphError(f"paths must be one of {_PATHS}, got {paths!r}")
        if len(adjacency) != 2 * num_relations:
            raise SparseGraphError(f"expected {2 * num_relations} adjacency matrices, got {len(adjacency)}")
        self.num_entities = int(num_entities)
        self.num_relations = int(num_relations)
        self.adjacency = adjacency
        self.edge_keys = edge_keys  # sorted int64 keys (q * E + u) * E + v of every directed edge
        self.backend: Backend = backend
        self.max_batch_bytes = int(max_batch_bytes)
        self.dense_max_bytes = int(dense_max_bytes)
        self.paths: Paths = paths
        self._diagonal: dict[int, np.ndarray | None] = {}  # per relation: its self-loops (None: it has none)
        self._cycles: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}  # 2-cycles per relation pair
        self._torch_t: list[torch.Tensor] | None = None
        self._dense: list[np.ndarray | None] = [None] * len(adjacency)
        self._stack: torch.Tensor | None = None  # (2R, E, E) float32 for path_entries on small graphs
        self._neighbourhood: sp.csr_matrix | None = None
        self._relation_csr: tuple[np.ndarray, np.ndarray] | None = None
        self._relation_types: sp.csr_matrix | None = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_triples(
        cls,
        triples: np.ndarray | torch.Tensor,
        num_entities: int,
        num_relations: int,
        *,
        backend: Backend = "scipy",
        max_batch_bytes: int = 256 << 20,
        dense_max_bytes: int = 0,
        paths: Paths = "walks",
    ) -> SparseGraph:
        """Graph of ``triples`` (n, 3) int64 (head, relation in 0..R-1, tail) plus their inverses (t, r+R, h)."""
        arr = _as_triples(triples, "triples")
        if num_entities <= 0 or num_relations <= 0:
            raise SparseGraphError(
                f"num_entities and num_relations must be positive, got {num_entities}, {num_relations}"
            )
        if arr.size:
            if arr[:, [0, 2]].min() < 0 or arr[:, [0, 2]].max() >= num_entities:
                raise SparseGraphError(f"triples hold an entity id outside [0, {num_entities})")
            if arr[:, 1].min() < 0 or arr[:, 1].max() >= num_relations:
                raise SparseGraphError(
                    f"triples hold a relation id outside [0, {num_relations}) (inverses are added, not read)"
                )
        E, R = int(num_entities), int(num_relations)
        heads = np.concatenate([arr[:, 0], arr[:, 2]])
        rels = np.concatenate([arr[:, 1], arr[:, 1] + R])
        tails = np.concatenate([arr[:, 2], arr[:, 0]])
        keys = np.unique((rels * E + heads) * E + tails)
        rels_u = keys // (E * E)
        rest = keys % (E * E)
        src, dst = rest // E, rest % E
        bounds = np.searchsorted(rels_u, np.arange(2 * R + 1))
        adjacency = []
        for q in range(2 * R):
            lo, hi = bounds[q], bounds[q + 1]
            data = np.ones(hi - lo, dtype=np.float32)
            mat = sp.csr_matrix((data, (src[lo:hi], dst[lo:hi])), shape=(E, E))
            mat.sum_duplicates()
            adjacency.append(mat)
        return cls(
            adjacency,
            E,
            R,
            keys,
            backend=backend,
            max_batch_bytes=max_batch_bytes,
            dense_max_bytes=dense_max_bytes,
            paths=paths,
        )

    def with_paths(self, paths: Paths) -> SparseGraph:
        """The same graph (its adjacency shared, not copied) counting ``paths`` instead."""
        return SparseGraph(
            self.adjacency,
            self.num_entities,
            self.num_relations,
            self.edge_keys,
            backend=self.backend,
            max_batch_bytes=self.max_batch_bytes,
            dense_max_bytes=self.dense_max_bytes,
            paths=paths,
        )

    # ------------------------------------------------------------------ facts about the graph
    @property
    def num_edges(self) -> int:
        """Directed edges, inverses included (2 × distinct facts)."""
        return int(self.edge_keys.size)

    def has_edges(self, src: np.ndarray, rel: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """(m,) bool: whether each directed edge src -rel-> dst is in the graph."""
        E = self.num_entities
        keys = (np.asarray(rel, dtype=np.int64) * E + np.asarray(src, dtype=np.int64)) * E + np.asarray(
            dst, dtype=np.int64
        )
        pos = np.searchsorted(self.edge_keys, keys)
        pos = np.minimum(pos, max(self.edge_keys.size - 1, 0))
        return (self.edge_keys.size > 0) & (self.edge_keys[pos] == keys)

    def sources(self, relations: Sequence[int]) -> np.ndarray:
        """Sorted entities with at least one out-edge of any of ``relations`` (0..2R-1): the only starts from which
        a body beginning with one of them can fire."""
        rows = [np.flatnonzero(np.diff(self.adjacency[int(q)].indptr)) for q in set(relations)]
        return np.unique(np.concatenate(rows)) if rows else np.zeros(0, dtype=np.int64)

    def relation_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """Every relation's adjacency as one CSR, cached: ``indptr`` (2R, E + 1) int32 and ``indices`` (edges,)
        int32, relation q's row u being ``indices[indptr[q, u]:indptr[q, u + 1]]`` (sorted targets)."""
        if self._relation_csr is None:  # edge_keys are sorted by (q, u, v): the CSR is read off them
            E = self.num_entities
            rows = np.arange(len(self.adjacency))[:, None] * E + np.arange(E + 1)[None, :]
            indptr = np.searchsorted(self.edge_keys // E, rows)
            self._relation_csr = indptr.astype(np.int32), (self.edge_keys % E).astype(np.int32)
        return self._relation_csr

    def neighbourhood(self) -> sp.csr_matrix:
        """(E, 2R·E) 0/1 CSR, cached: row x has a 1 at column b·E + d for every directed edge x -b-> d (the
        constant-body features of AnyBURL-style rules ``r(X, c) <- b(X, d)``)."""
        if self._neighbourhood is None:
            E = self.num_entities
            keys = self.edge_keys
            src = (keys // E) % E
            col = (keys // (E * E)) * E + keys % E
            data = np.ones(keys.size, dtype=np.float32)
            self._neighbourhood = sp.csr_matrix((data, (src, col)), shape=(E, 2 * self.num_relations * E))
        return self._neighbourhood

    def relation_types(self) -> sp.csr_matrix:
        """(E, 2R) 0/1 CSR, cached: row e has a 1 at column b when e has an out-edge of relation b (an in-edge of r
        is an out-edge of its inverse) — the dangling bodies ``b(X, _)`` of AnyBURL-style rules."""
        if self._relation_types is None:
            ents = [np.flatnonzero(np.diff(a.indptr)) for a in self.adjacency]
            rows = np.concatenate(ents) if ents else np.zeros(0, dtype=np.int64)
            cols = np.repeat(np.arange(len(ents)), [e.size for e in ents])
            self._relation_types = sp.csr_matrix(
                (np.ones(rows.size, dtype=np.float32), (rows, cols)), shape=(self.num_entities, len(ents))
            )
        return self._relation_types

    def inverse_ids(self) -> torch.Tensor:
        """(2R,) int64: the inverse of each relation id."""
        R = self.num_relations
        return torch.cat([torch.arange(R, 2 * R), torch.arange(R)])

    def inverse(self, q: int) -> int:
        """Id of the inverse of relation ``q`` (0..2R-1)."""
        R = self.num_relations
        return q + R if q < R else q - R

    def default_batch_size(self) -> int:
        """Largest B with B · E · (3 frontiers · 12 + 4 output bytes) ≤ ``max_batch_bytes`` (at least 1)."""
        per_row = self.num_entities * (_FRONTIERS * _BYTES_PER_FRONTIER_ENTRY + _OUTPUT_BYTES)
        return max(1, self.max_batch_bytes // per_row)

    def graph_bytes(self) -> int:
        """Bytes held by the adjacency (CSR data, indices, row pointers) and the edge-key index."""
        total = self.edge_keys.nbytes
        for mat in self.adjacency:
            total += mat.data.nbytes + mat.indices.nbytes + mat.indptr.nbytes
        if self._torch_t is not None:
            for t in self._torch_t:
                total += t.values().nbytes + t.col_indices().nbytes + t.crow_indices().nbytes
        return int(total)

    def memory_estimate(self, batch_size: int | None = None) -> int:
        """Upper bound (bytes) on what ``path_counts`` needs: the graph plus one batch's working set,
        ``graph_bytes() + B · E · (3 · 12 + 4)`` with B = ``batch_size`` or :meth:`default_batch_size`."""
        b = self.default_batch_size() if batch_size is None else int(batch_size)
        return self.graph_bytes() + b * self.num_entities * (_FRONTIERS * _BYTES_PER_FRONTIER_ENTRY + _OUTPUT_BYTES)

    # ------------------------------------------------------------------ validation
    def _check_body(self, body: Sequence[int]) -> tuple[int, ...]:
        out = tuple(int(q) for q in body)
        if not out:
            raise SparseGraphError("a body needs at least one relation")
        for q in out:
            if not 0 <= q < 2 * self.num_relations:
                raise SparseGraphError(f"body relation {q} is outside [0, {2 * self.num_relations})")
        return out

    def _check_starts(self, starts: torch.Tensor | np.ndarray | Sequence[int]) -> np.ndarray:
        if isinstance(starts, torch.Tensor):
            starts = starts.detach().cpu().numpy()
        arr = np.asarray(starts)
        if arr.ndim != 1:
            raise SparseGraphError(f"starts must be 1-D, got shape {arr.shape}")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise SparseGraphError(f"starts must hold integer entity ids, got dtype {arr.dtype}")
        arr = arr.astype(np.int64, copy=False)
        if arr.size and (arr.min() < 0 or arr.max() >= self.num_entities):
            raise SparseGraphError(f"a start entity is outside [0, {self.num_entities})")
        return arr

    def _exclusion(self, exclude: np.ndarray | torch.Tensor | None, n_rows: int) -> Excluded | None:
        """Directed edges to drop per row from ``exclude`` (n_rows, 3) triples with relations in 0..2R-1
        (a row of -1s excludes nothing); each fact is dropped in both directions, only if it is in the graph."""
        if exclude is None:
            return None
        arr = _as_triples(exclude, "exclude")
        if arr.shape[0] != n_rows:
            raise SparseGraphError(f"exclude must have one triple per start ({n_rows}), got {arr.shape[0]}")
        rows = np.arange(n_rows, dtype=np.int64)
        keep = arr[:, 1] >= 0
        rows, arr = rows[keep], arr[keep]
        if arr.size and (
            arr[:, 1].max() >= 2 * self.num_relations
            or arr[:, [0, 2]].min() < 0
            or arr[:, [0, 2]].max() >= self.num_entities
        ):
            raise SparseGraphError("exclude holds an id outside the graph's entities or relations 0..2R-1")
        inv = np.where(arr[:, 1] < self.num_relations, arr[:, 1] + self.num_relations, arr[:, 1] - self.num_relations)
        row = np.concatenate([rows, rows])
        src = np.concatenate([arr[:, 0], arr[:, 2]])
        rel = np.concatenate([arr[:, 1], inv])
        dst = np.concatenate([arr[:, 2], arr[:, 0]])
        present = self.has_edges(src, rel, dst)
        row, src, rel, dst = row[present], src[present], rel[present], dst[present]
        if row.size:
            E = self.num_entities
            key = ((row * (2 * self.num_relations) + rel) * E + src) * E + dst
            _, first = np.unique(key, return_index=True)
            row, src, rel, dst = row[first], src[first], rel[first], dst[first]
        return Excluded(row, src, rel, dst)

    # ------------------------------------------------------------------ products
    def _torch_transposed(self) -> list[torch.Tensor]:
        if self._torch_t is None:
            mats = []
            for mat in self.adjacency:
                t = mat.T.tocsr()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
                    mats.append(
                        torch.sparse_csr_tensor(
                            torch.from_numpy(t.indptr.astype(np.int64)),
                            torch.from_numpy(t.indices.astype(np.int64)),
                            torch.from_numpy(t.data.astype(np.float32)),
                            size=t.shape,
                            check_invariants=False,
                        )
                    )
            self._torch_t = mats
        return self._torch_t

    def _step_scipy(self, x: sp.csr_matrix, q: int, excl: Excluded | None) -> sp.csr_matrix:
        y = x @ self.adjacency[q]
        if excl is not None:
            row, src, dst = excl.for_relation(q)
            if row.size:
                vals = np.asarray(x[row, src]).ravel()
                nz = vals != 0
                if nz.any():
                    corr = sp.csr_matrix((vals[nz], (row[nz], dst[nz])), shape=y.shape, dtype=y.dtype)
                    y = y - corr
                    y.eliminate_zeros()
        return y

    def _step_torch(self, xt: torch.Tensor, q: int, excl: Excluded | None) -> torch.Tensor:
        yt = torch.sparse.mm(self._torch_transposed()[q], xt)
        if excl is not None:
            row, src, dst = excl.for_relation(q)
            if row.size:
                r = torch.from_numpy(row)
                vals = xt[torch.from_numpy(src), r]
                yt.index_put_((torch.from_numpy(dst), r), -vals, accumulate=True)
        return yt

    @property
    def uses_dense(self) -> bool:
        """Small graphs (all 2R dense E × E float32 matrices within ``dense_max_bytes``) are multiplied densely
        in :meth:`iter_path_counts`. Off by default (``dense_max_bytes=0``): on the shared 2-core machine numpy's
        threaded BLAS made the dense path slower than sparse products on Kinship (mining 272 s vs ~20-100 s)."""
        return 2 * self.num_relations * self.num_entities**2 * 4 <= self.dense_max_bytes

    def _dense_adj(self, q: int) -> np.ndarray:
        mat = self._dense[q]
        if mat is None:
            mat = self._dense[q] = self.adjacency[q].toarray()
        return mat

    def _step_dense(self, x: np.ndarray, q: int, excl: Excluded | None) -> np.ndarray:
        y = x @ self._dense_adj(q)
        if excl is not None:
            row, src, dst = excl.for_relation(q)
            if row.size:
                np.subtract.at(y, (row, dst), x[row, src])
        return y

    # ------------------------------------------------------------------ simple paths (object identity)
    def _self_loops(self, q: int) -> np.ndarray | None:
        """(E,) float32 diagonal of A_q, cached; None when relation q has no self-loop (the usual case)."""
        if q not in self._diagonal:
            d = np.asarray(self.adjacency[q].diagonal(), dtype=np.float32)
            self._diagonal[q] = d if d.any() else None
        return self._diagonal[q]

    def _two_cycles(self, b: int, q: int) -> np.ndarray:
        """(E,) float32 cyc[y] = #z ≠ y with y -b-> z -q-> y, from a cached sparse copy."""
        key = (b, q)
        if key not in self._cycles:
            cyc = np.asarray(self.adjacency[b].multiply(self.adjacency[q].T).sum(axis=1), dtype=np.float32).ravel()
            db, dq = self._self_loops(b), self._self_loops(q)
            if db is not None and dq is not None:
                cyc = cyc - db * dq
            nz = np.flatnonzero(cyc)
            self._cycles[key] = (nz, cyc[nz])
        idx, val = self._cycles[key]
        out = np.zeros(self.num_entities, dtype=np.float32)
        out[idx] = val
        return out

    def _simple_step(self, y: Any, x: Any, first: Any, prefix: tuple[int, ...], q: int, starts: np.ndarray) -> Any:
        """Turn the walk counts ``y`` = step(x, q) of ``prefix + (q,)`` into simple-path counts (every variable
        bound to a different entity, AnyBURL's object identity), given that ``x`` (the frontier of ``prefix``) and
        ``first`` (that of its first relation) already count simple paths. With D = the walks of the step:

            y = D − x ∘ diag(A_q)                                   the new entity differs from the last one
                − [len(prefix) = 2] first ∘ (cyc_{b2,q} − A_{b2}ᵀ[s] ∘ A_q[s])   ... and from the first hop's
            y[i, s_i] = 0                                           ... and from the start

        where cyc_{b2,q}[y] counts the 2-cycles y -b2-> z -q-> y with z ≠ y, and the subtracted A_{b2}ᵀ[s] ∘ A_q[s]
        those through z = s_i (already excluded, since the middle entity differs from the start). Dense arrays or
        CSR matrices (B, E); bodies of length ≤ 3 (longer ones would need more inclusion–exclusion terms)."""
        dense = isinstance(y, np.ndarray)
        diag = self._self_loops(q)
        if prefix and diag is not None:
            y = y - (x * diag[None, :] if dense else _scale_columns(x, diag))
        if len(prefix) == 2:
            b2 = prefix[1]
            via_start = self.adjacency[self.inverse(b2)][starts].multiply(self.adjacency[q][starts])
            if dense:
                y = y - first * (self._two_cycles(b2, q)[None, :] - via_start.toarray())
            else:
                y = y - _scale_columns(first, self._two_cycles(b2, q)) + first.multiply(via_start)
        if dense:
            y[np.arange(starts.size), starts] = 0.0
            return y
        y = sp.csr_matrix(y)
        rows = np.repeat(np.arange(starts.size), np.diff(y.indptr))
        y.data[y.indices == starts[rows]] = 0.0
        y.eliminate_zeros()
        return y

    def _one_hot(self, starts: np.ndarray) -> sp.csr_matrix:
        b = starts.size
        return sp.csr_matrix(
            (np.ones(b, dtype=np.float32), starts, np.arange(b + 1, dtype=np.int64)), shape=(b, self.num_entities)
        )

    def iter_path_counts(
        self,
        bodies: Sequence[Sequence[int]],
        starts: torch.Tensor | np.ndarray | Sequence[int],
        exclude: np.ndarray | torch.Tensor | None = None,
    ) -> Iterator[tuple[int, sp.csr_matrix]]:
        """Yield ``(j, C_j)`` for every body j: C_j (B, E) scipy CSR float32 walk counts from all ``starts`` at once
        (no batching: the caller bounds B, see :meth:`default_batch_size`), or simple-path counts when
        :attr:`paths` is ``"simple"`` (:meth:`_simple_step`). Bodies sharing a prefix share its products
        (depth-first over the prefix trie, so at most ``max_len`` frontiers are alive). Uses the scipy backend, or
        dense numpy products on small graphs (:attr:`uses_dense`). ``exclude``: optional (B, 3) triple per row
        removed from the graph for that row (both directions).
        """
        checked = [self._check_body(b) for b in bodies]
        s = self._check_starts(starts)
        excl = self._exclusion(exclude, s.size)
        simple = self.paths == "simple"
        if simple and any(len(b) > 3 for b in checked):
            raise SparseGraphError("simple-path counts (paths='simple') take bodies of length ≤ 3")
        order = sorted(range(len(checked)), key=lambda j: checked[j])
        dense = self.uses_dense
        start: Any = self._one_hot(s)
        if dense:
            start = start.toarray()
        stack: list[tuple[tuple[int, ...], Any]] = [((), start)]
        for j in order:
            body = checked[j]
            while len(stack) > 1 and body[: len(stack[-1][0])] != stack[-1][0]:
                stack.pop()
            prefix, x = stack[-1]
            for q in body[len(prefix) :]:
                y = self._step_dense(x, q, excl) if dense else self._step_scipy(x, q, excl)
                if simple:
                    y = self._simple_step(y, x, stack[1][1] if len(stack) > 1 else None, prefix, q, s)
                x = y
                prefix = prefix + (q,)
                stack.append((prefix, x))
            out = stack[-1][1]
            yield j, sp.csr_matrix(out) if dense else out

    @property
    def stacks_bodies(self) -> bool:
        """Whether :meth:`path_entries` advances many bodies at once through dense products
        (:mod:`kg.grounding.dense_batch`): on a small dense graph, where all 2R dense E × E float32 adjacencies
        take at most a quarter of ``max_batch_bytes`` and there are at least E²/10 directed edges, so frontiers
        fill within a hop or two. Kinship (0.59 E² edges) and UMLS (RNNLogic's split 0.21 E², pykeen's 0.57 E²)
        qualify, and there the batched products ground mined bodies 1.4–2.3× faster (``bench/kg_dense_batch.py``);
        on the sparse planted KG (0.05 E²) they were no faster (0.9×); WN18RR and FB15k-237 are too large."""
        E = self.num_entities
        return 2 * self.num_relations * E * E * 4 <= self.max_batch_bytes // 4 and 10 * self.num_edges >= E * E

    def dense_adjacency(self) -> torch.Tensor:
        """(2R, E, E) float32 dense A_q, cached (small graphs only: 2R · E² · 4 bytes)."""
        if self._stack is None:
            self._stack = torch.from_numpy(np.stack([a.toarray() for a in self.adjacency]).astype(np.float32))
        return self._stack

    def path_entries(
        self,
        bodies: Sequence[Sequence[int]],
        starts: torch.Tensor | np.ndarray | Sequence[int],
        exclude: np.ndarray | torch.Tensor | None = None,
        max_fanout: int | None = None,
        batched: bool | None = None,
    ) -> PathEntries:
        """The non-zero counts of :meth:`iter_path_counts` (same bodies, starts, exclusion, paths) as entries in
        the same order, bodies in trie order; ``max_fanout``: a body's row reaching more than this many entities
        is left out. ``batched`` (default :attr:`stacks_bodies`, small graphs): count all the bodies of a trie
        level in one batched dense product; otherwise body by body through :meth:`iter_path_counts`."""
        checked = [self._check_body(b) for b in bodies]
        s = self._check_starts(starts)
        if self.paths == "simple" and any(len(b) > 3 for b in checked):
            raise SparseGraphError("simple-path counts (paths='simple') take bodies of length ≤ 3")
        if self.stacks_bodies if batched is None else batched:
            ex = self._exclusion(exclude, s.size)
            return dense_path_entries(
                self.dense_adjacency(),
                self.inverse_ids(),
                checked,
                s,
                ex,
                self.paths == "simple",
                self.max_batch_bytes,
                max_fanout,
            )
        parts = []
        for j, mat in self.iter_path_counts(checked, s, exclude):
            mat = sp.csr_matrix(mat)
            if max_fanout is not None:
                wide = np.diff(mat.indptr) > max_fanout
                if wide.any():
                    mat = sp.csr_matrix(sp.diags((~wide).astype(mat.dtype)) @ mat)
            coo = mat.tocoo()
            total = np.asarray(mat.sum(axis=1), dtype=np.float32).ravel()
            parts.append(
                PathEntries(
                    np.full(coo.nnz, j, dtype=np.int64),
                    coo.row.astype(np.int64),
                    coo.col.astype(np.int64),
                    coo.data.astype(np.float32),
                    total[coo.row],
                )
            )
        return PathEntries.concat(parts)

    def path_counts(
        self,
        body: Sequence[int],
        starts: torch.Tensor | np.ndarray | Sequence[int],
        exclude: np.ndarray | torch.Tensor | None = None,
        *,
        batch_size: int | None = None,
        backend: Backend | None = None,
    ) -> torch.Tensor:
        """(B, E) float32: number of ``body``-walks from each start entity to every entity (simple paths when
        :attr:`paths` is ``"simple"``: those are counted by :meth:`iter_path_counts`, whatever ``backend``).

        body: relation ids in 0..2R-1 (length ≥ 1); starts: (B,) entity ids; exclude: optional (B, 3) triple
        per start removed (both directions) while counting that row. Starts are processed in batches of
        ``batch_size`` (default :meth:`default_batch_size`), so the working memory stays within
        :meth:`memory_estimate` apart from the (B, E) result itself.
        """
        b = self._check_body(body)
        s = self._check_starts(starts)
        backend = self.backend if backend is None else backend
        if backend not in _BACKENDS:
            raise SparseGraphError(f"backend must be one of {_BACKENDS}, got {backend!r}")
        excl_all = None if exclude is None else _as_triples(exclude, "exclude")
        if excl_all is not None and excl_all.shape[0] != s.size:
            raise SparseGraphError(f"exclude must have one triple per start ({s.size}), got {excl_all.shape[0]}")
        step = self.default_batch_size() if batch_size is None else max(1, int(batch_size))
        out = torch.zeros(s.size, self.num_entities, dtype=torch.float32)
        for lo in range(0, s.size, step):
            chunk = s[lo : lo + step]
            if self.paths == "simple":
                ex = None if excl_all is None else excl_all[lo : lo + step]
                out[lo : lo + chunk.size] = torch.from_numpy(self.path_counts_sparse(b, chunk, ex).toarray())
                continue
            excl = self._exclusion(None if excl_all is None else excl_all[lo : lo + step], chunk.size)
            if backend == "scipy":
                x = self._one_hot(chunk)
                for q in b:
                    x = self._step_scipy(x, q, excl)
                out[lo : lo + chunk.size] = torch.from_numpy(x.toarray())
            else:
                xt = torch.zeros(self.num_entities, chunk.size, dtype=torch.float32)
                xt[torch.from_numpy(chunk), torch.arange(chunk.size)] = 1.0
                for q in b:
                    xt = self._step_torch(xt, q, excl)
                out[lo : lo + chunk.size] = xt.T
        return out

    def path_counts_sparse(
        self,
        body: Sequence[int],
        starts: torch.Tensor | np.ndarray | Sequence[int],
        exclude: np.ndarray | torch.Tensor | None = None,
    ) -> sp.csr_matrix:
        """Like :meth:`path_counts` for all ``starts`` at once, as a scipy CSR (B, E) float32 (scipy backend)."""
        return next(iter(self.iter_path_counts([body], starts, exclude)))[1]

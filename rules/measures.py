"""Confidence measures of chain rules on sets of documents, and LogiRE logic accuracy (spec §5.5).

A body ``b1..bL`` holds for an entity pair (x, y) of a document iff an entity path x -b1-> z1 -b2-> ... -> y
exists: the boolean composition ``A_b1 ∘ A_b2 ∘ ... ∘ A_bL`` of per-token adjacency matrices, where an inverse
token is the transposed matrix and the stay token (2R) is the identity. Measures follow AMIE
(Galárraga, Teflioudi, Hose, Suchanek: "AMIE: Association Rule Mining under Incomplete Evidence in Ontological
Knowledge Bases", WWW 2013, §4; "Fast rule mining in ontological knowledge bases with AMIE+", VLDB J. 2015, §2):

    support(B => r)       = #{(x,y) : B(x,y) ∧ r(x,y)}
    std conf              = support / #{(x,y) : B(x,y)}
    PCA conf              = support / #{(x,y) : B(x,y) ∧ ∃y' r(x,y')}
    head coverage         = support / #{(x',y') : r(x',y')}

Pairs live inside one document; every count is a sum over documents (pairs of different documents never
join). With ``pair_types=(t_h, t_t)`` every pair -- including the head facts and the PCA witness y' -- is
restricted to x of type t_h and y of type t_t (the rule-head category "triple" of spec §2).

Two engines give identical counts: dense batched boolean matrix products for small documents (all bodies of a
chunk at once, bodies using a relation absent from the document skipped) and ``scipy.sparse`` products with a
prefix cache for large graphs (one KG with thousands of entities).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np
import scipy.sparse as sp

from rules.fol import MAX_BODY_LENGTH, Rule

__all__ = [
    "GraphDoc",
    "LogicAccuracy",
    "RuleCounts",
    "as_graph_doc",
    "body_matrix",
    "confidence",
    "count_bodies",
    "count_rules",
    "logic_accuracy",
]

Backend = Literal["auto", "dense", "sparse"]
_DENSE_LIMIT = 1 << 23  # (#tokens used) * N * N cells above which "auto" switches to scipy.sparse


# --- documents --------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphDoc:
    """A small KG: ``facts`` (F,3) rows (head_entity, relation_id, tail_entity) over ``n_entities`` entities,
    optional ``entity_types`` (N,) type ids."""

    facts: np.ndarray
    n_entities: int
    entity_types: np.ndarray | None = None
    name: str = ""


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _first_attr(obj: Any, names: Sequence[str]) -> Any:
    for n in names:
        if isinstance(obj, Mapping):
            if n in obj:
                return obj[n]
        elif hasattr(obj, n):
            return getattr(obj, n)
    return None


def as_graph_doc(doc: Any, index: int = 0, num_relations: int | None = None) -> GraphDoc:
    """Coerce a document: a :class:`GraphDoc`, a tuple ``(facts, n_entities[, entity_types])``, or any
    mapping/object with ``facts`` and ``n_entities`` (or ``num_entities``/``N``), optional ``entity_types``
    (or ``types``) and ``name``/``title``. Facts are validated (error names the document and field)."""
    if isinstance(doc, GraphDoc):
        facts, n, types, name = doc.facts, doc.n_entities, doc.entity_types, doc.name
    elif isinstance(doc, tuple | list) and 2 <= len(doc) <= 3:
        facts, n = doc[0], doc[1]
        types = doc[2] if len(doc) == 3 else None
        name = ""
    else:
        facts = _first_attr(doc, ("facts",))
        n = _first_attr(doc, ("n_entities", "num_entities", "N"))
        types = _first_attr(doc, ("entity_types", "types"))
        name = _first_attr(doc, ("name", "title", "doc_id")) or ""
        if facts is None or n is None:
            raise TypeError(
                f"document {index}: expected GraphDoc, (facts, n_entities) or an object with 'facts' and "
                f"'n_entities'; got {type(doc).__name__}"
            )
    label = f"document {name or index}"
    facts = _to_numpy(facts)
    if facts.size == 0:
        facts = facts.reshape(0, 3)
    if facts.ndim != 2 or facts.shape[1] != 3:
        raise ValueError(f"{label}: field 'facts' must have shape (F, 3), got {facts.shape}")
    if not np.issubdtype(facts.dtype, np.integer):
        raise ValueError(f"{label}: field 'facts' must hold integers, got {facts.dtype}")
    facts = facts.astype(np.int64, copy=False)
    n = int(n)
    if n < 0:
        raise ValueError(f"{label}: field 'n_entities' is negative ({n})")
    if len(facts):
        ents = facts[:, [0, 2]]
        if ents.min() < 0 or ents.max() >= n:
            raise ValueError(f"{label}: field 'facts' has entity ids outside [0, {n})")
        if facts[:, 1].min() < 0 or (num_relations is not None and facts[:, 1].max() >= num_relations):
            raise ValueError(f"{label}: field 'facts' has relation ids outside [0, {num_relations})")
    if types is not None:
        types = _to_numpy(types).astype(np.int64).reshape(-1)
        if types.shape != (n,):
            raise ValueError(f"{label}: field 'entity_types' must have shape ({n},), got {types.shape}")
    return GraphDoc(facts, n, types, str(name))


# --- counts -----------------------------------------------------------------------------------


def _safe_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    out = np.full(np.broadcast(num, den).shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


@dataclass
class RuleCounts:
    """Additive AMIE counts for J rules (sum them over documents or clients with ``+``).

    support (J,) = #(x,y) body ∧ head; body_size (J,) = #(x,y) body;
    pca_body_size (J,) = #(x,y) body ∧ ∃y' head(x,y');
    head_size (J,) = #head facts. Ratios are NaN where their denominator is 0.
    """

    support: np.ndarray
    body_size: np.ndarray
    pca_body_size: np.ndarray
    head_size: np.ndarray

    FIELDS = ("support", "body_size", "pca_body_size", "head_size")
    MEASURES = ("std_confidence", "pca_confidence", "head_coverage")

    def __post_init__(self) -> None:
        for f in self.FIELDS:
            setattr(self, f, np.asarray(getattr(self, f), dtype=np.int64).reshape(-1))
        sizes = {len(getattr(self, f)) for f in self.FIELDS}
        if len(sizes) != 1:
            raise ValueError(f"RuleCounts fields have different lengths: {sizes}")

    @classmethod
    def zeros(cls, n: int) -> RuleCounts:
        z = np.zeros(n, dtype=np.int64)
        return cls(z, z.copy(), z.copy(), z.copy())

    def __len__(self) -> int:
        return len(self.support)

    def __add__(self, other: RuleCounts) -> RuleCounts:
        if len(self) != len(other):
            raise ValueError(f"cannot add counts of {len(self)} and {len(other)} rules")
        return RuleCounts(*(getattr(self, f) + getattr(other, f) for f in self.FIELDS))

    @property
    def std_confidence(self) -> np.ndarray:
        return _safe_ratio(self.support, self.body_size)

    @property
    def pca_confidence(self) -> np.ndarray:
        return _safe_ratio(self.support, self.pca_body_size)

    @property
    def head_coverage(self) -> np.ndarray:
        return _safe_ratio(self.support, self.head_size)

    def measures(self, j: int) -> dict[str, float]:
        """Counts and ratios of rule ``j`` as plain numbers."""
        out: dict[str, float] = {f: int(getattr(self, f)[j]) for f in self.FIELDS}
        out.update({m: float(getattr(self, m)[j]) for m in self.MEASURES})
        return out

    def take(self, idx: Sequence[int] | np.ndarray) -> RuleCounts:
        idx = np.asarray(idx, dtype=np.int64)
        return RuleCounts(*(getattr(self, f)[idx] for f in self.FIELDS))

    def to_dict(self) -> dict[str, list[int]]:
        return {f: getattr(self, f).tolist() for f in self.FIELDS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Sequence[int]]) -> RuleCounts:
        missing = [f for f in cls.FIELDS if f not in data]
        if missing:
            raise ValueError(f"rule counts lack fields {missing}")
        return cls(*(np.asarray(data[f], dtype=np.int64) for f in cls.FIELDS))


# --- engines ----------------------------------------------------------------------------------


@dataclass
class _Stack:
    """Boolean matrices of the tokens used, stacked (U,N,N) float32 (0/1), with token -> slot."""

    mats: np.ndarray
    slot: np.ndarray
    present: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.present = cast(np.ndarray, self.mats.reshape(len(self.mats), -1).any(axis=1))  # (U,) bool


def _stack_from_facts(doc: GraphDoc, used: np.ndarray, R: int) -> _Stack:
    N = doc.n_entities
    slot = np.full(2 * R + 1, -1, dtype=np.int64)
    slot[used] = np.arange(len(used))
    mats = np.zeros((len(used), N, N), dtype=np.float32)
    h, r, t = doc.facts.T
    fwd = slot[r]
    keep = fwd >= 0
    mats[fwd[keep], h[keep], t[keep]] = 1.0
    inv = slot[r + R]
    keep = inv >= 0
    mats[inv[keep], t[keep], h[keep]] = 1.0
    if slot[2 * R] >= 0:
        mats[slot[2 * R]] = np.eye(N, dtype=np.float32)
    return _Stack(mats, slot)


def _stack_from_dense(pred: np.ndarray, used: np.ndarray, R: int) -> _Stack:
    N = pred.shape[0]
    slot = np.full(2 * R + 1, -1, dtype=np.int64)
    slot[used] = np.arange(len(used))
    mats = np.zeros((len(used), N, N), dtype=np.float32)
    for tok in used.tolist():
        if tok < R:
            mats[slot[tok]] = pred[:, :, tok]
        elif tok < 2 * R:
            mats[slot[tok]] = pred[:, :, tok - R].T
        else:
            mats[slot[tok]] = np.eye(N, dtype=np.float32)
    return _Stack(mats, slot)


def _dense_body(stack: _Stack, bodies: np.ndarray, stay: int) -> np.ndarray:
    """(K,N,N) bool truth of K bodies (tokens (K,L)) by batched boolean products."""
    M = stack.mats[stack.slot[bodies[:, 0]]].copy()
    for k in range(1, bodies.shape[1]):
        tok = bodies[:, k]
        move = tok != stay
        if move.any():
            M[move] = (np.matmul(M[move], stack.mats[stack.slot[tok[move]]]) > 0).astype(np.float32)
    return M > 0


def _pair_mask(doc: GraphDoc, pair_types: tuple[int, int] | None, index: int) -> np.ndarray | None:
    if pair_types is None:
        return None
    if doc.entity_types is None:
        raise ValueError(f"document {doc.name or index}: pair_types given but the document has no 'entity_types'")
    th, tt = pair_types
    return (doc.entity_types == th)[:, None] & (doc.entity_types == tt)[None, :]


def _dense_counts(
    stack: _Stack, heads: np.ndarray, bodies: np.ndarray, stay: int, mask: np.ndarray | None, chunk: int
) -> RuleCounts:
    J = len(heads)
    out = RuleCounts.zeros(J)
    # head sizes for every rule (per distinct head)
    for h in np.unique(heads):
        H = stack.mats[stack.slot[h]] > 0
        if mask is not None:
            H = H & mask
        out.head_size[heads == h] = int(H.sum())
    ok = np.flatnonzero(stack.present[stack.slot[bodies]].all(axis=1))
    for start in range(0, len(ok), chunk):
        idx = ok[start : start + chunk]
        B = _dense_body(stack, bodies[idx], stay)
        H = stack.mats[stack.slot[heads[idx]]] > 0
        if mask is not None:
            B = B & mask
            H = H & mask
        out.support[idx] = (B & H).sum(axis=(1, 2))
        out.body_size[idx] = B.sum(axis=(1, 2))
        out.pca_body_size[idx] = (B & H.any(axis=2)[:, :, None]).sum(axis=(1, 2))
    return out


class _SparseDoc:
    """Per-token CSR adjacency of one document with a cache of body-prefix products."""

    def __init__(self, doc: GraphDoc, R: int):
        self.N, self.R = doc.n_entities, R
        self.facts = doc.facts
        self.adj: dict[int, sp.csr_matrix] = {}
        self.prefix: dict[tuple[int, ...], sp.csr_matrix] = {}

    def token(self, tok: int) -> sp.csr_matrix:
        if tok not in self.adj:
            R, N = self.R, self.N
            if tok == 2 * R:
                m = sp.identity(N, dtype=bool, format="csr")
            else:
                rel = tok % R
                sel = self.facts[:, 1] == rel
                h, t = self.facts[sel, 0], self.facts[sel, 2]
                if tok >= R:
                    h, t = t, h
                m = sp.csr_matrix((np.ones(len(h), dtype=bool), (h, t)), shape=(N, N))
                m.sum_duplicates()
            self.adj[tok] = m
        return self.adj[tok]

    def body(self, tokens: tuple[int, ...]) -> sp.csr_matrix:
        """Truth matrix of a stay-free body; the empty body is the identity."""
        if not tokens:
            return self.token(2 * self.R)
        if tokens not in self.prefix:
            m = self.token(tokens[0]) if len(tokens) == 1 else self.body(tokens[:-1]) @ self.token(tokens[-1])
            self.prefix[tokens] = sp.csr_matrix(m, dtype=bool)
        return self.prefix[tokens]


def _sparse_counts(
    sdoc: _SparseDoc, heads: np.ndarray, bodies: np.ndarray, stay: int, rows: np.ndarray | None, cols: np.ndarray | None
) -> RuleCounts:
    J = len(heads)
    out = RuleCounts.zeros(J)

    def restrict(m: sp.csr_matrix) -> sp.csr_matrix:
        if rows is None:
            return m
        return sp.diags(rows, dtype=bool, format="csr") @ m @ sp.diags(cols, dtype=bool, format="csr")

    head_cache: dict[int, tuple[sp.csr_matrix, np.ndarray]] = {}
    for j in range(J):
        h = int(heads[j])
        if h not in head_cache:
            H = restrict(sdoc.token(h))
            head_cache[h] = (H, (H.getnnz(axis=1) > 0).astype(bool))
        H, has_head = head_cache[h]
        out.head_size[j] = H.count_nonzero()
        B = restrict(sdoc.body(tuple(int(t) for t in bodies[j] if t != stay)))
        nb = B.count_nonzero()
        if nb == 0:
            continue
        out.body_size[j] = nb
        out.support[j] = B.multiply(H).count_nonzero()
        out.pca_body_size[j] = (sp.diags(has_head, dtype=bool, format="csr") @ B).count_nonzero()
    return out


# --- public API -------------------------------------------------------------------------------


def _check_tokens(heads: np.ndarray, bodies: np.ndarray, R: int) -> None:
    if bodies.ndim != 2 or bodies.shape[1] < 1:
        raise ValueError(f"bodies must be (J, L) token ids, got shape {bodies.shape}")
    if heads.shape != (bodies.shape[0],):
        raise ValueError(f"heads must have shape ({bodies.shape[0]},), got {heads.shape}")
    if len(heads) and (heads.min() < 0 or heads.max() >= R):
        raise ValueError(f"head ids must be relations in [0, R={R})")
    if bodies.size and (bodies.min() < 0 or bodies.max() > 2 * R):
        raise ValueError(f"body tokens must lie in [0, 2R+1={2 * R + 1})")


def count_bodies(
    heads: int | Sequence[int] | np.ndarray,
    bodies: Sequence[Sequence[int]] | np.ndarray,
    docs: Iterable[Any],
    num_relations: int,
    *,
    pair_types: tuple[int, int] | None = None,
    backend: Backend = "auto",
    chunk: int = 256,
) -> RuleCounts:
    """AMIE counts of J chain rules ``heads[j] <- bodies[j]`` summed over ``docs``.

    heads: (J,) relation ids or one id for all; bodies: (J, L) tokens in [0, 2R] (2R = stay = identity, may
    appear anywhere; an all-stay body is the identity relation X = Y). See module docstring for the equations.
    """
    R = int(num_relations)
    bodies = np.asarray(bodies, dtype=np.int64)
    if bodies.ndim == 1:
        bodies = bodies[None, :]
    head_ids = np.broadcast_to(np.asarray(heads, dtype=np.int64), (bodies.shape[0],)).copy()
    _check_tokens(head_ids, bodies, R)
    stay = 2 * R
    used = np.unique(np.concatenate([bodies.ravel(), head_ids, [stay]]))
    total = RuleCounts.zeros(len(head_ids))
    for i, raw in enumerate(docs):
        doc = as_graph_doc(raw, i, R)
        if doc.n_entities == 0:
            continue
        use_dense = backend == "dense" or (backend == "auto" and len(used) * doc.n_entities**2 <= _DENSE_LIMIT)
        if use_dense:
            stack = _stack_from_facts(doc, used, R)
            total = total + _dense_counts(stack, head_ids, bodies, stay, _pair_mask(doc, pair_types, i), chunk)
        else:
            mask_rows: np.ndarray | None = None
            mask_cols: np.ndarray | None = None
            if pair_types is not None:
                _pair_mask(doc, pair_types, i)  # validates entity types
                types = doc.entity_types
                assert types is not None  # else _pair_mask raised
                mask_rows = types == pair_types[0]
                mask_cols = types == pair_types[1]
            total = total + _sparse_counts(_SparseDoc(doc, R), head_ids, bodies, stay, mask_rows, mask_cols)
    return total


def count_rules(
    rules: Sequence[Rule],
    docs: Iterable[Any],
    num_relations: int,
    *,
    pair_types: tuple[int, int] | None = None,
    backend: Backend = "auto",
) -> RuleCounts:
    """:func:`count_bodies` for :class:`Rule` objects."""
    R = int(num_relations)
    if not rules:
        return RuleCounts.zeros(0)
    bodies = np.array([r.body + (2 * R,) * (MAX_BODY_LENGTH - len(r.body)) for r in rules], dtype=np.int64)
    heads = np.array([r.head for r in rules], dtype=np.int64)
    return count_bodies(heads, bodies, docs, R, pair_types=pair_types, backend=backend)


def confidence(
    rule: Rule, docs: Iterable[Any], num_relations: int, *, pair_types: tuple[int, int] | None = None
) -> dict[str, float]:
    """Support, body sizes, head size, std/PCA confidence and head coverage of one rule over ``docs``."""
    return count_rules([rule], docs, num_relations, pair_types=pair_types).measures(0)


def body_matrix(tokens: Sequence[int], doc: Any, num_relations: int) -> np.ndarray:
    """(N,N) bool truth of one body on one document (dense; for inspection and tests)."""
    R = int(num_relations)
    d = as_graph_doc(doc, 0, R)
    body = np.asarray([list(tokens)], dtype=np.int64)
    _check_tokens(np.zeros(1, dtype=np.int64), body, R)
    used = np.unique(np.concatenate([body.ravel(), [2 * R]]))
    return _dense_body(_stack_from_facts(d, used, R), body, 2 * R)[0]


# --- logic accuracy (LogiRE evaluation.py: check_rules / get_ret) ----------------------------


@dataclass(frozen=True)
class LogicAccuracy:
    """logic = mean over rules with #body > 0 of logic_rule = Σ_docs #(body ∧ head) / Σ_docs #body (spec §5.5).

    value is NaN when no rule body holds anywhere; per_rule (K,) is NaN for those rules.
    """

    value: float
    per_rule: np.ndarray
    body_counts: np.ndarray
    correct_counts: np.ndarray


def logic_accuracy(
    predictions: Iterable[Any], rules: Sequence[Rule] | Sequence[tuple[int, Sequence[int]]]
) -> LogicAccuracy:
    """LogiRE logic accuracy of thresholded predictions.

    predictions: per document an (N,N,R) bool array/tensor (relation r predicted for (e1,e2)); rules: golden
    chain rules (token ids with inverse = id + R, read as the transpose). Body truth is the boolean
    composition of the body's matrices; counts are summed over documents before the ratio.
    """
    parsed = [r if isinstance(r, Rule) else Rule(int(r[0]), tuple(int(b) for b in r[1])) for r in rules]
    K = len(parsed)
    body_tot = np.zeros(K, dtype=np.int64)
    correct = np.zeros(K, dtype=np.int64)
    R: int | None = None
    for i, raw in enumerate(predictions):
        pred = _to_numpy(raw)
        if pred.ndim != 3 or pred.shape[0] != pred.shape[1]:
            raise ValueError(f"prediction {i}: expected an (N, N, R) array, got shape {pred.shape}")
        if R is None:
            R = pred.shape[2]
            for r in parsed:
                if r.head >= R or max(r.body) > 2 * R:
                    raise ValueError(f"rule {r} uses ids outside the R={R} relations of the predictions")
            bodies = np.array([r.body + (2 * R,) * (MAX_BODY_LENGTH - len(r.body)) for r in parsed], dtype=np.int64)
            heads = np.array([r.head for r in parsed], dtype=np.int64)
            used = np.unique(np.concatenate([bodies.ravel(), heads, [2 * R]]))
        elif pred.shape[2] != R:
            raise ValueError(f"prediction {i}: has {pred.shape[2]} relations, earlier ones {R}")
        if pred.shape[0] == 0 or K == 0:
            continue
        stack = _stack_from_dense(pred.astype(bool), used, R)
        counts = _dense_counts(stack, heads, bodies, 2 * R, None, chunk=256)
        body_tot += counts.body_size
        correct += counts.support
    per_rule = _safe_ratio(correct, body_tot)
    valid = body_tot > 0
    value = float(per_rule[valid].mean()) if valid.any() else math.nan
    return LogicAccuracy(value, per_rule, body_tot, correct)

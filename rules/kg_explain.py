"""Why a knowledge-graph rule learner (``fednsl-kg``) predicts ``head(h, t)``: the stored rules of the head whose
bodies ground on the pair in an evidence graph, ranked by their stored score, each with its groundings.

A body b_1..b_L (L ≤ 3; tokens as in :class:`rules.fol.RelationVocab`: r, and r+R for ``~r``) grounds on (h, t)
when a walk h = z_0 -b_1-> z_1 -b_2-> ... -b_L-> z_L = t exists in the graph; a step ``-~r->`` follows a fact
r(z_k, z_{k-1}) backwards. These are the groundings the predictor counts
(:meth:`kg.grounding.sparse.SparseGraph.path_counts`: walks, an entity may repeat; on a graph built with
``paths="simple"``, as a run with ``predictor.paths: simple`` grounds, only the walks on which no entity repeats).

The search (:func:`groundings`) is bounded by the body: backward sets B_L = {t}, B_{k-1} = {u : u -b_k-> v for
some v in B_k} (with the number of walks from each u to t) prune a forward depth-first search from h, so every
branch it enters ends at t: the total number of groundings is exact and the first ``limit`` walks (in entity-id
order) cost O(limit · L · degree).

The fact explained is left out of the evidence (both directions; as the predictor grounds a training query), so
``grandparent_of <- grandparent_of`` never explains ``grandparent_of(h, t)`` by itself. The inverse head ``~r`` is
explained with r's rules read backwards (``~r <- ~b_L, ..., ~b_1``; the KG learner stores forward heads only).

Path text (:func:`format_path`): every arrow is a fact in its stored direction, ``anna -parent_of-> bob
-parent_of-> carl``; a step along an inverse token prints that fact reversed: ``bob <-parent_of- carl`` is the step
bob -~parent_of-> carl, i.e. the fact parent_of(carl, bob).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rules.fol import INVERSE_PREFIX, RelationVocab, UnknownRelationError

if TYPE_CHECKING:
    from kg.grounding.sparse import SparseGraph
    from rules.store import ClientRecord, RuleStore

__all__ = [
    "INVERSE_PREFIXES",
    "GroundingSearch",
    "KGExplanation",
    "RuleEvidence",
    "explain_kg",
    "format_path",
    "groundings",
    "parse_head",
]

#: prefixes naming the inverse of a relation: rules.fol's ``~r`` and kg.triples' ``inv_r``
INVERSE_PREFIXES = (INVERSE_PREFIX, "inv_")

Edge = tuple[int, int, int]  # (source, token, destination)


def parse_head(vocab: RelationVocab, text: str | int) -> tuple[int, bool]:
    """(relation id, inverse) of a head given as ``r``, ``~r``, ``inv_r`` or an id (0..R-1: r, R..2R-1: ~r).

    A name that is itself a relation wins over its prefix reading (a relation called ``inv_x`` is that relation).
    Raises :class:`rules.fol.UnknownRelationError` (close names suggested) or ``ValueError`` for an id outside 0..2R-1.
    """
    R = vocab.num_relations
    if isinstance(text, int) or text.strip().lstrip("-").isdigit():
        tok = int(text)
        if not 0 <= tok < 2 * R:
            raise ValueError(f"relation id {tok} outside [0, {2 * R}) (R..2R-1 are the inverses)")
        return (tok, False) if tok < R else (tok - R, True)
    name = text.strip()
    if name in vocab.names:
        return vocab.relation_id(name), False
    for prefix in INVERSE_PREFIXES:
        if name.startswith(prefix) and name[len(prefix) :] in vocab.names:
            return vocab.relation_id(name[len(prefix) :]), True
    base = name
    for prefix in INVERSE_PREFIXES:
        base = base.removeprefix(prefix)
    raise UnknownRelationError(name if base == name else base, vocab.names)


# --- grounding search ---------------------------------------------------------------------------------------------


class GroundingSearch:
    """Neighbour lists of a :class:`~kg.grounding.sparse.SparseGraph` (tokens 0..2R-1) minus a few left-out facts.

    ``leave_out``: facts (head entity, relation 0..R-1, tail entity) removed in both directions.
    """

    def __init__(self, graph: SparseGraph, leave_out: Sequence[Edge] = ()) -> None:
        self.graph = graph
        R = graph.num_relations
        self.excluded: set[Edge] = set()
        for a, r, b in leave_out:
            self.excluded.add((int(a), int(r), int(b)))
            self.excluded.add((int(b), int(r) + R, int(a)))
        # the left-out edges by (source, token) and by (destination, token), for the two neighbour lookups
        self._from: dict[tuple[int, int], list[int]] = {}
        self._to: dict[tuple[int, int], list[int]] = {}
        for u, q, v in self.excluded:
            self._from.setdefault((u, q), []).append(v)
            self._to.setdefault((v, q), []).append(u)

    @staticmethod
    def _row(mat: Any, i: int, drop: list[int] | None) -> np.ndarray:
        row = np.sort(mat.indices[mat.indptr[i] : mat.indptr[i + 1]]).astype(np.int64)
        return row if drop is None else row[~np.isin(row, drop)]

    def out(self, token: int, u: int) -> np.ndarray:
        """Sorted v with u -token-> v (left-out edges dropped)."""
        return self._row(self.graph.adjacency[token], u, self._from.get((u, token)))

    def into(self, token: int, v: int) -> np.ndarray:
        """Sorted u with u -token-> v (left-out edges dropped)."""
        return self._row(self.graph.adjacency[self.graph.inverse(token)], v, self._to.get((v, token)))

    def reach_counts(self, body: Sequence[int], tail: int) -> list[dict[int, int]]:
        """``counts[k][u]``: the number of walks from u (as z_k) to ``tail`` along ``body[k:]``; ``counts[L] = {tail: 1}``."""
        L = len(body)
        counts: list[dict[int, int]] = [{} for _ in range(L + 1)]
        counts[L] = {int(tail): 1}
        for k in range(L, 0, -1):
            level: dict[int, int] = {}
            for v, n in counts[k].items():
                for u in self.into(int(body[k - 1]), v).tolist():
                    level[u] = level.get(u, 0) + n
            counts[k - 1] = level
        return counts

    def groundings(
        self, body: Sequence[int], head: int, tail: int, limit: int | None
    ) -> tuple[int, list[tuple[int, ...]]]:
        """(number of walks head -body-> tail, the first ``limit`` of them in entity-id order; None: all). On a
        graph with ``paths="simple"``: simple paths (no entity twice), all of them enumerated to be counted."""
        body = tuple(int(t) for t in body)
        counts = self.reach_counts(body, tail)
        total = counts[0].get(int(head), 0)
        paths: list[tuple[int, ...]] = []
        simple = self.graph.paths == "simple"
        if total == 0 or (limit == 0 and not simple):
            return total, paths
        L = len(body)
        found = 0

        def walk(prefix: tuple[int, ...]) -> None:
            nonlocal found
            k = len(prefix) - 1
            if k == L:
                found += 1
                if limit is None or len(paths) < limit:
                    paths.append(prefix)
                return
            for v in self.out(body[k], prefix[-1]).tolist():
                if not simple and limit is not None and len(paths) >= limit:
                    return
                if v in counts[k + 1] and not (simple and v in prefix):
                    walk((*prefix, v))

        walk((int(head),))
        return (found if simple else total), paths


def groundings(
    graph: SparseGraph,
    body: Sequence[int],
    head: int,
    tail: int,
    limit: int | None = None,
    leave_out: Sequence[Edge] = (),
) -> tuple[int, list[tuple[int, ...]]]:
    """(number of groundings, up to ``limit`` of them) of ``body`` (tokens 0..2R-1, no stay) on (head, tail)."""
    return GroundingSearch(graph, leave_out).groundings(body, head, tail, limit)


def format_path(path: Sequence[int], body: Sequence[int], vocab: RelationVocab, entity: Callable[[int], str]) -> str:
    """``anna -parent_of-> bob <-child_of- carl``: each arrow a stored fact, inverse steps printed reversed."""
    out = entity(int(path[0]))
    for k, tok in enumerate(body):
        rel, inverse = vocab.base(int(tok))
        name = vocab.names[rel]
        nxt = entity(int(path[k + 1]))
        out += f" <-{name}- {nxt}" if inverse else f" -{name}-> {nxt}"
    return out


# --- explanations -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleEvidence:
    """One stored rule that fires for the pair: its score, confidence and groundings."""

    triple: tuple[int, int, int]
    index: int  # body j of the triple in the store
    body: tuple[int, ...]  # tokens as read for the explained head (mirrored for an inverse head), no stay
    rule: str
    score: float | None  # the ranking score (KGExplanation.score_name)
    prior: float
    posterior: float | None
    support: int | None
    std_confidence: float | None
    pca_confidence: float | None
    groundings: int
    paths: list[tuple[int, ...]] = field(default_factory=list)

    def to_json(self, vocab: RelationVocab, entity: Callable[[int], str]) -> dict[str, Any]:
        out: dict[str, Any] = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "paths"}
        out["triple"] = list(self.triple)
        out["body"] = list(self.body)
        for k in ("score", "posterior", "std_confidence", "pca_confidence"):
            v = out[k]
            out[k] = None if v is None or math.isnan(v) else v
        out["paths"] = [
            {"entities": list(p), "names": [entity(e) for e in p], "text": format_path(p, self.body, vocab, entity)}
            for p in self.paths
        ]
        return out


@dataclass(frozen=True)
class KGExplanation:
    """The rules of ``head_name`` that fire for ``pair`` in the evidence graph, best score first."""

    head: int  # relation id 0..R-1
    inverse: bool  # explained as ~head (the forward rules read backwards)
    head_name: str
    pair: tuple[int, int]
    score_name: str  # what ranks the rules: "global posterior", "posterior of client c0", "prior", ...
    items: list[RuleEvidence]
    num_rules: int  # rules of the head considered (identity bodies not counted)
    limit: int | None  # groundings shown per rule
    left_out: bool  # the explained fact was in the evidence and was left out
    evidence: str = ""  # what the evidence graph is (set by the caller)
    notes: list[str] = field(default_factory=list)

    def format(self, vocab: RelationVocab, entity: Callable[[int], str]) -> str:
        h, t = self.pair
        fires = f"{len(self.items)} of {self.num_rules} rules fire"
        lines = [f"{self.head_name}({entity(h)}, {entity(t)}): {fires}"]
        if self.evidence:
            fact = "; the fact itself left out" if self.left_out else ""
            lines.append(f"evidence: {self.evidence}{fact}")
        lines.extend(self.notes)
        if not self.items:
            return "\n".join(lines) + "\n"
        shown = "all" if self.limit is None else f"at most {self.limit}"
        lines.append(
            f"ranked by {self.score_name}; std/pca: AMIE confidence of the rule; paths: groundings, {shown} shown"
        )
        score_col = self.score_name.split(" of ")[0].replace("global ", "")[:9]
        lines.append(f"  {score_col:>9} {'std':>7} {'pca':>7} {'paths':>6}  rule")
        for it in self.items:
            lines.append(
                f"  {_num(it.score, 9)} {_num(it.std_confidence, 7)} {_num(it.pca_confidence, 7)} "
                f"{it.groundings:>6}  {it.rule}"
            )
            for p in it.paths:
                lines.append(f"  {'':34}{format_path(p, it.body, vocab, entity)}")
            if it.groundings > len(it.paths):
                lines.append(f"  {'':34}... {it.groundings - len(it.paths)} more")
        return "\n".join(lines) + "\n"

    def to_json(self, vocab: RelationVocab, entity: Callable[[int], str]) -> dict[str, Any]:
        h, t = self.pair
        return {
            "head": self.head,
            "inverse": self.inverse,
            "head_name": self.head_name,
            "pair": [h, t],
            "pair_names": [entity(h), entity(t)],
            "score": self.score_name,
            "rules_considered": self.num_rules,
            "fact_left_out": self.left_out,
            "evidence": self.evidence,
            "notes": list(self.notes),
            "items": [it.to_json(vocab, entity) for it in self.items],
        }


def _num(x: float | None, width: int) -> str:
    if x is None or math.isnan(x):
        return f"{'-':>{width}}"
    return f"{x:>{width}.4g}"


def close_names(name: str, names: Sequence[str], n: int = 3) -> list[str]:
    """Up to ``n`` names of ``names`` closest to ``name`` (difflib ratio)."""
    return difflib.get_close_matches(name, list(names), n=n, cutoff=0.5)


def _scores(kind: str, prior: np.ndarray, post: np.ndarray | None, crec: ClientRecord | None) -> np.ndarray:
    """The ranking scores of one triple's bodies: a client's weights or posterior, the global posterior, the prior."""
    if kind in ("weight", "client"):
        assert crec is not None
        chosen = crec.weights if kind == "weight" else crec.posterior
        assert chosen is not None
        return chosen
    if kind == "global":
        assert post is not None
        return post
    return prior


def explain_kg(
    store: RuleStore,
    graph: SparseGraph,
    head: str | int,
    pair: tuple[int, int],
    *,
    client: str | None = None,
    limit: int | None = 10,
    leave_out_fact: bool = True,
) -> KGExplanation:
    """The rules of ``head`` (``r``, ``~r``/``inv_r`` or an id) that ground on ``pair`` (entity ids) in ``graph``.

    Score (the ranking, named in :attr:`KGExplanation.score_name`): with ``client``, that client's scorer weight
    when the store holds it, else its posterior; otherwise (or when the client holds no record of the head) the
    global posterior, else the server prior. Confidence: the client's counts with ``client`` when it reported
    some, else the global counts (AMIE std and PCA confidence of the forward rule). Ties: more groundings first.
    """
    vocab = store.vocab
    R = vocab.num_relations
    if graph.num_relations != R:
        raise ValueError(f"the evidence graph has {graph.num_relations} relations, the rule store {R}")
    rel, inverse = parse_head(vocab, head)
    x, y = int(pair[0]), int(pair[1])
    E = graph.num_entities
    if not (0 <= x < E and 0 <= y < E):
        raise ValueError(f"entity pair {pair} outside the graph's {E} entities")
    fact = (y, rel, x) if inverse else (x, rel, y)
    in_graph = bool(graph.has_edges(np.array([fact[0]]), np.array([rel]), np.array([fact[2]]))[0])
    search = GroundingSearch(graph, [fact] if leave_out_fact else [])
    triples = store.find_triples(rel)
    c = None if client is None else str(client)
    recs = [store.triples[t] for t in triples]
    notes: list[str] = []
    if not recs:
        notes.append(f"note: the rule store holds no rules for {vocab.names[rel]}")
    if c is not None and recs and all(c in r.clients for r in recs):
        has_weights = all(r.clients[c].weights is not None for r in recs)
        kind = "weight" if has_weights else "client"
        score_name = f"{'weight' if has_weights else 'posterior'} of client {c}"
    else:
        if c is not None and recs:
            notes.append(f"note: client {c} holds no posterior for {vocab.names[rel]}: ranked by the global one")
        if recs and all(r.global_posterior() is not None for r in recs):
            kind, score_name = "global", "global posterior"
        else:
            kind, score_name = "prior", "prior"
    head_name = (INVERSE_PREFIX if inverse else "") + vocab.names[rel]
    items: list[RuleEvidence] = []
    considered = 0
    for t, rec in zip(triples, recs):
        crec = rec.clients.get(c) if c is not None else None
        counts = crec.counts if crec is not None and crec.counts is not None else rec.global_counts()
        post = rec.global_posterior()
        scores = _scores(kind, rec.prior, post, crec)
        for j in range(rec.num_bodies):
            fwd = vocab.strip(rec.bodies[j])
            if not fwd:
                continue  # an identity body is no chain rule
            considered += 1
            body = tuple(vocab.inverse(tok) for tok in reversed(fwd)) if inverse else fwd
            total, paths = search.groundings(body, x, y, limit)
            if total == 0:
                continue
            m = counts.measures(j) if counts is not None else None
            items.append(
                RuleEvidence(
                    triple=t,
                    index=j,
                    body=body,
                    rule=f"{head_name} <- {vocab.format_body(body)}",
                    score=float(scores[j]),
                    prior=float(rec.prior[j]),
                    posterior=None if post is None else float(post[j]),
                    support=None if m is None else int(m["support"]),
                    std_confidence=None if m is None else m["std_confidence"],
                    pca_confidence=None if m is None else m["pca_confidence"],
                    groundings=total,
                    paths=paths,
                )
            )
    items.sort(key=lambda it: (-(it.score if it.score is not None else -math.inf), -it.groundings, it.rule))
    return KGExplanation(
        head=rel,
        inverse=inverse,
        head_name=head_name,
        pair=(x, y),
        score_name=score_name,
        items=items,
        num_rules=considered,
        limit=limit,
        left_out=leave_out_fact and in_graph,
        notes=notes,
    )

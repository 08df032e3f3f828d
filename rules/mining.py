"""Rule-prior data from gold facts: LogiRE ``reader.ERuleReader`` co-occurrence mining (spec §5.3, §8.8).

For every labelled fact (h, r, t) of a document, enumerate the paths h → t of length ≤ L (default 3) over the
document's gold edges, both directions (fact (a, r, b) gives edge a→b with token r and b→a with token r+R),
collect the SET of body token tuples of those paths, and add 1 to count[(r, type_h, type_t)][body] for each
body in the set. Probabilities = counts / total per triple.

Followed exactly from LogiRE's reader.py (``read_raw`` and ``append_chain``), including:
- the length-1 path consisting of the labelled edge itself IS included: every triple's bodies contain the
  identity rule [r] (plus every other relation between h and t, e.g. [r'] or [r''+R] for a fact (t, r'', h));
- path nodes h = v_0, v_1, …, v_k = t must satisfy: v_1..v_k pairwise distinct and v_2..v_k ≠ h (LogiRE keeps
  the visited-node list without the start node and separately skips steps ending at h). This equals "simple
  path" except that a first edge may be a self-loop (v_1 = h) when the document has a fact (h, r, h);
- a fact row that appears twice in a document counts twice (LogiRE iterates the label list);
- only facts whose head relation is a real relation start a count (inverse edges are path steps only).
Facts with an unknown (negative) entity type are kept as path edges but start no count (LogiRE has no such
facts); ``CooccurrenceRules.skipped_untyped`` reports how many.

Also: ``triples_from_documents`` (rule-head categories observed in data; LogiRE ``get_r2epair``) and
``type_constraints_from_documents`` (entity-type transitions per token for the generator's validity mask).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import torch

from rules.generator import TypeConstraints

__all__ = [
    "DocumentLike",
    "CooccurrenceRules",
    "path_bodies",
    "mine_cooccurrence",
    "triples_from_documents",
    "type_constraints_from_documents",
]

Triple = tuple[int, int, int]
Body = tuple[int, ...]


class DocumentLike(Protocol):
    """What mining reads from a document (``kg.documents.Document`` satisfies it)."""

    facts: Any  # (F, 3) int64 rows (head entity, relation id, tail entity); numpy array or torch tensor
    entity_types: Any  # (N,) int64 type id per entity (negative = unknown)
    num_entities: int


def _array(x: Any, name: str, doc_name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{doc_name}: field {name!r} must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _doc_arrays(doc: DocumentLike, index: int, num_relations: int | None) -> tuple[np.ndarray, np.ndarray]:
    name = f"document {getattr(doc, 'doc_id', None) or getattr(doc, 'title', None) or index}"
    facts = _array(doc.facts, "facts", name).reshape(-1, 3) if np.size(doc.facts) else np.zeros((0, 3), np.int64)
    types = _array(doc.entity_types, "entity_types", name).reshape(-1)
    n = int(doc.num_entities)
    if types.shape[0] != n:
        raise ValueError(f"{name}: entity_types has {types.shape[0]} entries but num_entities = {n}")
    if facts.size:
        ents = facts[:, [0, 2]]
        if ents.min() < 0 or ents.max() >= n:
            raise ValueError(f"{name}: field 'facts' has an entity id outside [0, {n})")
        if facts[:, 1].min() < 0 or (num_relations is not None and facts[:, 1].max() >= num_relations):
            raise ValueError(f"{name}: field 'facts' has a relation id outside [0, {num_relations})")
    return facts, types


def _adjacency(facts: np.ndarray, num_relations: int) -> dict[int, list[tuple[int, int]]]:
    adj: dict[int, set[tuple[int, int]]] = defaultdict(set)
    for a, r, b in facts.reshape(-1, 3).tolist():
        adj[a].add((r, b))
        adj[b].add((r + num_relations, a))
    return {k: sorted(v) for k, v in adj.items()}


def _walk(adj: dict[int, list[tuple[int, int]]], source: int, max_len: int) -> dict[int, set[Body]]:
    out: dict[int, set[Body]] = defaultdict(set)

    def step(node: int, tokens: Body, visited: tuple[int, ...]) -> None:
        for tok, nxt in adj.get(node, ()):
            if tokens and (nxt == source or nxt in visited):
                continue
            body = tokens + (tok,)
            out[nxt].add(body)
            if len(body) < max_len:
                step(nxt, body, visited + (nxt,))

    step(source, (), ())
    return dict(out)


def path_bodies(
    facts: np.ndarray | Sequence[Sequence[int]], num_relations: int, source: int, max_len: int = 3
) -> dict[int, set[Body]]:
    """All LogiRE path bodies from ``source``: {end node: set of token tuples of length ≤ max_len}.

    Edges: fact (a, r, b) → a→b token r and b→a token r+R. Node rule (module docstring): v_1..v_k distinct,
    v_2..v_k ≠ source. Exact depth-first enumeration (O(deg^max_len) per source).
    """
    return _walk(_adjacency(np.asarray(facts, dtype=np.int64), num_relations), source, max_len)


@dataclass
class CooccurrenceRules:
    """Mined co-occurrence counts per triple (r, type_h, type_t).

    counts[t][body] = number of labelled facts of triple t whose h→t paths include ``body``;
    instances[t] = number of labelled facts of triple t (the client-weighting count of spec §8.9).
    """

    counts: dict[Triple, Counter[Body]] = field(default_factory=dict)
    instances: dict[Triple, int] = field(default_factory=dict)
    skipped_untyped: int = 0

    def distributions(self) -> dict[Triple, dict[Body, float]]:
        """{triple: {body: count / total}} (LogiRE triple2probs), triples and bodies sorted."""
        out = {}
        for t in sorted(self.counts):
            total = sum(self.counts[t].values())
            out[t] = {b: c / total for b, c in sorted(self.counts[t].items())}
        return out


def mine_cooccurrence(docs: Iterable[DocumentLike], num_relations: int, max_len: int = 3) -> CooccurrenceRules:
    """LogiRE ERuleReader co-occurrence mining over documents' gold facts (module docstring)."""
    result = CooccurrenceRules()
    for i, doc in enumerate(docs):
        facts, types = _doc_arrays(doc, i, num_relations)
        if not facts.size:
            continue
        adj = _adjacency(facts, num_relations)
        by_source: dict[int, dict[int, set[Body]]] = {}
        for h, r, t in facts.tolist():
            th, tt = int(types[h]), int(types[t])
            if th < 0 or tt < 0:
                result.skipped_untyped += 1
                continue
            if h not in by_source:
                by_source[h] = _walk(adj, h, max_len)
            triple = (r, th, tt)
            result.counts.setdefault(triple, Counter()).update(by_source[h].get(t, set()))
            result.instances[triple] = result.instances.get(triple, 0) + 1
    return result


def triples_from_documents(docs: Iterable[DocumentLike]) -> torch.Tensor:
    """Rule-head categories observed in the documents' facts: LongTensor (T, 3) of (r, type_h, type_t), sorted.

    Facts with an unknown (negative) entity type are ignored.
    """
    seen: set[Triple] = set()
    for i, doc in enumerate(docs):
        facts, types = _doc_arrays(doc, i, None)
        if facts.size:
            th, tt = types[facts[:, 0]], types[facts[:, 2]]
            ok = (th >= 0) & (tt >= 0)
            seen.update(zip(facts[ok, 1].tolist(), th[ok].tolist(), tt[ok].tolist()))
    return torch.tensor(sorted(seen), dtype=torch.long).reshape(-1, 3)


def type_constraints_from_documents(
    docs: Iterable[DocumentLike],
    num_relations: int,
    num_types: int | None = None,
    unobserved: Literal["any", "forbid"] = "any",
) -> TypeConstraints:
    """``TypeConstraints`` from the (relation, head type, tail type) of every fact with known types.

    Inverse tokens swap the pairs, stay keeps the type. ``num_types`` defaults to 1 + the largest type id seen.
    ``unobserved``: how relations with no typed fact are treated ("any" = unconstrained, "forbid").
    """
    docs = list(docs)
    triples = triples_from_documents(docs)
    if num_types is None:
        max_type = -1
        for i, doc in enumerate(docs):
            _, types = _doc_arrays(doc, i, None)
            if types.size:
                max_type = max(max_type, int(types.max()))
        num_types = max_type + 1
    if num_types < 1:
        raise ValueError("type_constraints_from_documents: no entity types found; pass num_types")
    return TypeConstraints.from_pairs(triples.tolist(), num_relations, num_types, unobserved)

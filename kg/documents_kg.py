"""Document graphs as one typed knowledge graph: every annotated fact of a corpus (DWIE, docred-style, the
synthetic set) as a ``head<TAB>relation<TAB>tail`` triple, with each entity's type in ``entity_types``.

Entities stay document-scoped (``<doc_id>/<index>:<name>``: the same name in two documents is two entities, as in
the documents themselves), so rules ground within one document's graph. The facts — not the documents — are split
into train, valid and test by one seeded permutation (``shares``), so a test fact's document is in training; the
corpus's own document split is not used. Entities without any fact, and types without such an entity, are left
out (a KG lists only entities that occur in a triple).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kg.documents import Corpus
from kg.triples import SPLITS, KnowledgeGraph

__all__ = ["corpus_to_kg"]


def _entity_name(doc_id: str, index: int, name: str) -> str:
    return f"{doc_id}/{index}:{' '.join(name.split())}"  # tabs and newlines would break a triples line


def corpus_to_kg(corpus: Corpus, seed: int = 0, shares: Sequence[float] = (0.8, 0.1, 0.1)) -> KnowledgeGraph:
    """The corpus's facts as a typed KG, split by fact (module doc). Ids by first appearance over the facts in
    document order; re-reading the folder :func:`kg.triples.write_triples` makes of it renumbers them (train,
    valid, test order) with the same names and types."""
    w = np.asarray(shares, dtype=np.float64)
    if w.shape != (3,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w[0] <= 0:
        raise ValueError(f"shares must be 3 non-negative numbers (train, valid, test), train > 0; got {list(shares)}")
    entities: dict[str, int] = {}
    types: list[int] = []
    rows: list[tuple[int, int, int]] = []
    for doc in corpus.documents:
        local: dict[int, int] = {}
        for h, r, t in doc.facts.tolist():
            for e in (h, t):
                if e not in local:
                    key = _entity_name(doc.doc_id, e, doc.entity_names[e])
                    local[e] = entities.setdefault(key, len(entities))
                    if local[e] == len(types):
                        types.append(int(doc.entity_types[e]))
            rows.append((local[h], r, local[t]))
    facts = np.asarray(rows, dtype=np.int64).reshape(-1, 3)
    present, type_ids = np.unique(np.asarray(types, dtype=np.int64), return_inverse=True)  # types with an entity
    order = np.random.default_rng(seed).permutation(len(facts))
    bounds = np.rint(np.cumsum(w) / w.sum() * len(facts)).astype(np.int64)
    pieces = dict(zip(SPLITS, np.split(order, bounds[:-1])))
    return KnowledgeGraph(
        name=corpus.name or "documents",
        entities=tuple(entities),
        relations=tuple(corpus.relations.names),
        train=facts[np.sort(pieces["train"])],
        valid=facts[np.sort(pieces["valid"])],
        test=facts[np.sort(pieces["test"])],
        entity_types=type_ids.astype(np.int64),
        type_names=tuple(corpus.entity_types.names[t] for t in present.tolist()),
    )

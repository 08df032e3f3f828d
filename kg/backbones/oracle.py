"""Noisy-oracle backbone: gold edges with configurable drops and noise, for controlled experiments (spec §8.7 iii).

For a document with gold facts, every cell (h, t, r) gets a value drawn independently (seeded by the run seed
and the document id, so a document's values do not depend on which client holds it):

- gold fact, kept (probability 1 − drop_r):   x = 1 − |ε|,      ε ~ N(0, sigma²), clipped to [0, 1]
- gold fact, dropped (probability drop_r):   x = |ε|           (the backbone misses it)
- no fact, false positive (prob. false_rate): x = U(0.5, 1)
- no fact otherwise:                          x = |ε|

``drop_r`` is ``drop_by_relation[name]`` when given, else ``drop``. This is an *oracle*: it reads the gold facts
of every document, test documents included, by design (it stands in for a perfect-but-noisy extractor).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kg.backbones.base import Backbone, ClientDocs, register_backbone
from kg.documents import Document, Vocab
from kg.seeding import derive_rng

__all__ = ["OracleOptions", "NoisyOracle"]


@dataclass
class OracleOptions:
    drop: float = 0.3
    false_rate: float = 0.0
    sigma: float = 0.1
    drop_by_relation: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, p in [("drop", self.drop), ("false_rate", self.false_rate), *self.drop_by_relation.items()]:
            if not 0.0 <= float(p) <= 1.0:
                raise ValueError(f"oracle backbone: {name} must be a probability in [0, 1], got {p}")
        if self.sigma < 0:
            raise ValueError(f"oracle backbone: sigma must be >= 0, got {self.sigma}")


@register_backbone("oracle", OracleOptions, doc="gold edges with drops and noise (controlled experiments)")
class NoisyOracle(Backbone):
    name = "oracle"

    def __init__(self, options: OracleOptions | None = None):
        self.options = options or OracleOptions()
        self.seed = 0
        self.drop: np.ndarray | None = None

    def prepare(
        self,
        clients: Sequence[ClientDocs],
        relations: Vocab,
        entity_types: Vocab,
        seed: int,
        documents: Sequence[Document] = (),
    ) -> dict[str, Any]:
        self.seed = int(seed)
        num_relations, relation_names = len(relations), tuple(relations.names)
        drop = np.full(num_relations, float(self.options.drop))
        if self.options.drop_by_relation:
            for name, p in self.options.drop_by_relation.items():
                if name not in relation_names:
                    raise ValueError(f"oracle backbone: drop_by_relation names unknown relation {name!r}")
                drop[relation_names.index(name)] = float(p)
        self.drop = drop
        return {
            "backbone": self.name,
            "drop": float(self.options.drop),
            "sigma": self.options.sigma,
            "false_rate": self.options.false_rate,
        }

    def values(self, client: ClientDocs | None, doc: Document) -> np.ndarray:
        if self.drop is None:
            raise RuntimeError("oracle backbone: call prepare() first")
        R = len(self.drop)
        n = doc.num_entities
        rng = derive_rng(self.seed, doc.doc_id)
        o = self.options
        noise = np.abs(rng.normal(0.0, o.sigma, size=(n, n, R)))
        gold = np.zeros((n, n, R), dtype=bool)
        if doc.num_facts:
            gold[doc.facts[:, 0], doc.facts[:, 2], doc.facts[:, 1]] = True
        kept = gold & (rng.random((n, n, R)) >= self.drop[None, None, :])
        false = ~gold & (rng.random((n, n, R)) < o.false_rate)
        x = np.where(kept, 1.0 - noise, noise)
        x = np.where(false, rng.uniform(0.5, 1.0, size=(n, n, R)), x)
        return np.clip(x, 0.0, 1.0).astype(np.float32)

"""The backbone interface: fuzzy relation values x_r(h, t) ∈ [0, 1] for every entity pair of a document.

FedNSL scores rule bodies over "pre-trained" fuzzy edge values (paper Eq. 8; spec §8.7). A backbone turns a
document into an (N, N, R) float32 array of such values (σ of a relation classifier's logits). Backbones are
chosen by name from config (``backbone: {name: federated-features, ...}``) through :data:`BACKBONES`.

Life cycle, driven by the method builder:

1. ``backbone = build_backbone(name, options)``;
2. ``backbone.prepare(clients, relations, entity_types, seed, documents)`` — train or load (a federated backbone runs its
   own FedAvg phase here on the clients' *training* documents; nothing in ``ClientDocs.test`` or ``.holdout``
   is ever used for fitting);
3. per client, ``backbone.values(client, doc)`` for each of its documents (client-local inference).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kg.documents import Document, Vocab
from kg.split import Combo

__all__ = [
    "ClientDocs",
    "Backbone",
    "BACKBONES",
    "register_backbone",
    "build_backbone",
    "backbone_names",
    "cache_dir",
    "check_values",
]


@dataclass
class ClientDocs:
    """What a backbone may know of one client: its id, seen combo, and documents by role.

    ``train``: the documents whose seen-combo labels the client trains on; ``holdout``: its threshold hold-out
    (not used for fitting); ``test``: never used for fitting.
    """

    cid: str
    combo: Combo
    train: list[Document]
    holdout: list[Document]
    test: list[Document]

    @property
    def documents(self) -> list[Document]:
        return self.train + self.holdout + self.test


class Backbone(ABC):
    """Produces fuzzy relation values for documents (see module docstring)."""

    name: str = "backbone"

    def prepare(
        self,
        clients: Sequence[ClientDocs],
        relations: Vocab,
        entity_types: Vocab,
        seed: int,
        documents: Sequence[Document] = (),
    ) -> dict[str, Any]:
        """Fit or load the backbone; returns a JSON-able summary (default: nothing to do).

        ``documents``: the whole corpus in reader order, for backbones that look values up by position
        (a dump); a trained backbone must only fit on ``ClientDocs.train``.
        """
        return {}

    @abstractmethod
    def values(self, client: ClientDocs, doc: Document) -> np.ndarray:
        """(N, N, R) float32 values in [0, 1] for ``doc`` as computed on ``client``."""


_REGISTRY: dict[str, tuple[Callable[..., Backbone], type | None, str]] = {}


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def register_backbone(
    name: str, options: type | None = None, doc: str = ""
) -> Callable[[Callable[..., Backbone]], Callable[..., Backbone]]:
    """Register a backbone factory ``factory(options) -> Backbone`` with its options dataclass."""

    def deco(factory: Callable[..., Backbone]) -> Callable[..., Backbone]:
        key = _norm(name)
        if key in _REGISTRY and _REGISTRY[key][0] is not factory:
            raise ValueError(f"backbone {name!r} registered twice")
        _REGISTRY[key] = (factory, options, doc)
        return factory

    return deco


BACKBONES = _REGISTRY


def backbone_names() -> list[str]:
    return sorted(_REGISTRY)


def build_backbone(name: str, options: Mapping[str, Any] | None = None, where: str = "backbone") -> Backbone:
    """Instantiate a registered backbone; unknown names or option keys raise a ValueError listing valid ones."""
    key = _norm(name)
    if key not in _REGISTRY:
        raise ValueError(f"{where}: unknown backbone {name!r}; known: {', '.join(backbone_names())}")
    factory, opt_cls, _ = _REGISTRY[key]
    options = dict(options or {})
    if opt_cls is not None and is_dataclass(opt_cls):
        valid = {f.name for f in fields(opt_cls)}
        unknown = sorted(set(options) - valid)
        if unknown:
            raise ValueError(f"{where} ({name}): unknown option(s) {unknown}; valid: {sorted(valid)}")
        return factory(opt_cls(**options))
    return factory(options)


def cache_dir(*parts: str) -> Path:
    """``$FEDNSL_CACHE`` (default ``~/.cache/fednsl``) / parts, created."""
    root = Path(os.environ.get("FEDNSL_CACHE", Path.home() / ".cache" / "fednsl"))
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def check_values(values: np.ndarray, doc: Document, num_relations: int, source: str) -> np.ndarray:
    """Validate an (N, N, R) value array for ``doc``: shape, finite, in [0, 1]; returns float32."""
    n = doc.num_entities
    arr = np.asarray(values, dtype=np.float32)
    if arr.shape != (n, n, num_relations):
        raise ValueError(
            f"{source}: document {doc.doc_id}: values have shape {arr.shape}, expected "
            f"(N, N, R) = ({n}, {n}, {num_relations})"
        )
    if arr.size and (not np.isfinite(arr).all() or arr.min() < 0 or arr.max() > 1):
        raise ValueError(f"{source}: document {doc.doc_id}: values must be finite probabilities in [0, 1]")
    return arr

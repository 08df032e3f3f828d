"""Federated KGs: seeded relation-, triple- and entity-partitions of any KG, and FedLU's client folders.

Every part keeps the full entity and relation vocabularies of the KG it came from (and its entity types, if
any), so ids are global: entity ``e`` and relation ``r`` mean the same thing on every client and on the server.

- ``by="relation"`` (FedE, FedLU's R-splits): the relations are shuffled with ``seed`` and dealt round-robin,
  so the clients hold disjoint relation sets of sizes differing by at most one; each client gets every
  train/valid/test triple of its relations.
- ``by="triple"`` (FedR): each split's triples are shuffled with ``seed`` and cut into ``num_clients`` parts of
  sizes differing by at most one — or, with ``shares`` (one positive weight per client), of sizes proportional to
  the shares (a data-rich client and data-poor ones: ``shares=[0.8, 0.1, 0.1]``).
- ``by="entity"`` (institutions that each hold their own entities under one relation schema): the entities are
  shuffled with ``seed`` and cut into ``num_clients`` sets, of sizes differing by at most one or proportional to
  ``shares`` (:func:`entity_owners`); each client keeps every train/valid/test triple whose head *and* tail are
  its own entities. A triple between two clients' entities belongs to nobody and is **dropped**, so the parts
  do not cover the KG: :func:`partition_report` counts what each split keeps and drops. For such a split the
  centralised bound is the union of the clients' triples (:func:`union_kg` of the parts), not the KG it came
  from: a centralised learner sees exactly the triples the federation holds.

All three give disjoint parts; :func:`write_federated_kg` writes them in FedLU's folder layout, which
:func:`read_federated_kg` reads back.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from kg.triples import SPLITS, TYPES_FILE, KnowledgeGraph, TriplesError, read_folder_types, read_splits, write_triples

__all__ = [
    "client_relations",
    "entity_owners",
    "partition_kg",
    "partition_report",
    "read_federated_kg",
    "union_kg",
    "write_federated_kg",
]

PARTITIONS = ("relation", "triple", "entity")


def _weights(shares: Sequence[float], num_clients: int) -> np.ndarray:
    """``shares`` as a float array after checking it holds ``num_clients`` positive finite numbers."""
    w = np.asarray(shares, dtype=float)
    if w.shape != (num_clients,) or not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError(f"shares must be {num_clients} positive numbers (one per client), got {list(shares)}")
    return w


def _cut(order: np.ndarray, num_clients: int, w: np.ndarray | None) -> list[np.ndarray]:
    """``order`` cut into ``num_clients`` consecutive pieces: sizes within one of each other, or proportional to
    the weights ``w`` (each size within one of its exact share)."""
    if w is None:
        return np.array_split(order, num_clients)
    bounds = np.rint(np.cumsum(w) / w.sum() * len(order)).astype(np.int64)
    return np.split(order, bounds[:-1])


def entity_owners(
    num_entities: int, num_clients: int, seed: int = 0, shares: Sequence[float] | None = None
) -> np.ndarray:
    """The owning client (0..num_clients-1) of each entity under ``by="entity"``: the entity ids shuffled with
    ``seed`` and cut into ``num_clients`` sets (sizes within one of each other, or proportional to ``shares``)."""
    if num_clients < 1:
        raise ValueError(f"num_clients must be at least 1, got {num_clients}")
    if num_clients > num_entities:
        raise ValueError(
            f"cannot split {num_entities} entities over {num_clients} clients by entity "
            f"(num_clients must be at most {num_entities})"
        )
    w = None if shares is None else _weights(shares, num_clients)
    pieces = _cut(np.random.default_rng(seed).permutation(num_entities), num_clients, w)
    empty = [c for c, idx in enumerate(pieces) if not len(idx)]
    if empty:
        raise ValueError(
            f"shares {list(shares or ())} leave client {empty[0]} no entity of {num_entities}; "
            "give it a larger share or use fewer clients"
        )
    owner = np.empty(num_entities, dtype=np.int64)
    for c, idx in enumerate(pieces):
        owner[idx] = c
    return owner


def partition_kg(
    kg: KnowledgeGraph,
    num_clients: int,
    by: Literal["relation", "triple", "entity"] = "relation",
    seed: int = 0,
    shares: Sequence[float] | None = None,
) -> list[KnowledgeGraph]:
    """Split ``kg`` into ``num_clients`` disjoint parts (module doc): relation and triple partitions cover all its
    triples; the entity partition drops the triples between two clients' entities (:func:`partition_report`)."""
    if num_clients < 1:
        raise ValueError(f"num_clients must be at least 1, got {num_clients}")
    if by not in PARTITIONS:
        raise ValueError(f"unknown partition {by!r}; expected 'relation', 'triple' or 'entity'")
    w = None
    if shares is not None:
        if by == "relation":
            raise ValueError("shares apply to the triple and entity partitions only (partition: triple or entity)")
        w = _weights(shares, num_clients)
    rng = np.random.default_rng(seed)
    if by == "relation":
        if num_clients > kg.num_relations:
            raise ValueError(
                f"{kg.name}: cannot split {kg.num_relations} relations over {num_clients} clients "
                "by relation (use by='triple' or fewer clients)"
            )
        owner = np.empty(kg.num_relations, dtype=np.int64)
        owner[rng.permutation(kg.num_relations)] = np.arange(kg.num_relations) % num_clients
        pieces = {
            split: [kg.split(split)[owner[kg.split(split)[:, 1]] == c] for c in range(num_clients)] for split in SPLITS
        }
    elif by == "triple":
        pieces = {}
        for split in SPLITS:
            arr = kg.split(split)
            cuts = _cut(rng.permutation(len(arr)), num_clients, w)
            pieces[split] = [arr[np.sort(idx)] for idx in cuts]
    else:
        try:
            owner = entity_owners(kg.num_entities, num_clients, seed, shares)
        except ValueError as exc:
            raise ValueError(f"{kg.name}: {exc}") from None
        pieces = {}
        for split in SPLITS:
            arr = kg.split(split)
            head, tail = owner[arr[:, 0]], owner[arr[:, 2]]
            pieces[split] = [arr[(head == c) & (tail == c)] for c in range(num_clients)]
    return [kg.replace(name=f"{kg.name}/client{c}", **{s: pieces[s][c] for s in SPLITS}) for c in range(num_clients)]


def partition_report(kg: KnowledgeGraph, parts: Sequence[KnowledgeGraph]) -> dict[str, dict[str, int]]:
    """Per split of ``kg``: ``kept`` (the parts' triples together) and ``dropped`` (``kg``'s triples no part
    holds: the cross-client triples of an entity partition; 0 for the relation and triple partitions)."""
    out = {}
    for split in SPLITS:
        kept = sum(len(p.split(split)) for p in parts)
        out[split] = {"kept": kept, "dropped": len(kg.split(split)) - kept}
    return out


def client_relations(parts: Sequence[KnowledgeGraph]) -> list[np.ndarray]:
    """Sorted relation ids (0..R-1) present in each part's train ∪ valid ∪ test."""
    return [np.unique(p.all_triples()[:, 1]) for p in parts]


def union_kg(parts: Sequence[KnowledgeGraph], name: str | None = None) -> KnowledgeGraph:
    """The centralised KG: each split is the concatenation of the parts' splits (same vocabularies required)."""
    if not parts:
        raise ValueError("union_kg needs at least one part")
    first = parts[0]
    for p in parts[1:]:
        if p.entities != first.entities or p.relations != first.relations:
            raise ValueError(f"{p.name}: vocabulary differs from {first.name}'s; parts must share ids")
    return first.replace(
        name=name or first.name.split("/")[0], **{s: np.concatenate([p.split(s) for p in parts]) for s in SPLITS}
    )


def write_federated_kg(parts: Sequence[KnowledgeGraph], folder: str | Path, gz: bool = False) -> list[Path]:
    """Write ``parts`` in FedLU's layout: ``folder/clientK/{train,valid,test}.txt[.gz]`` (names, tab-separated)
    and, when the parts are typed, one ``folder/entity_types.txt[.gz]`` for all clients (the entities some client's
    triples mention); returns the files. :func:`read_federated_kg` reads the folder back (ids by first appearance,
    so an entity no triple mentions is not in the re-read vocabulary)."""
    if not parts:
        raise ValueError("write_federated_kg needs at least one part")
    union = union_kg(parts)  # checks the shared vocabularies
    folder = Path(folder)
    written = []
    for k, part in enumerate(parts):
        untyped = part.replace(entity_types=None, type_names=(), types_skipped=0)
        written += write_triples(untyped, folder / f"client{k}", gz=gz)
    if union.entity_types is not None:
        used = np.unique(union.all_triples()[:, [0, 2]])
        used = used[np.argsort(union.entity_types[used], kind="stable")]  # types first appear in id order
        text = "".join(f"{union.entities[e]}\t{union.type_names[union.entity_types[e]]}\n" for e in used.tolist())
        target = folder / f"{TYPES_FILE}.txt{'.gz' if gz else ''}"
        data = text.encode("utf-8")
        target.write_bytes(gzip.compress(data, mtime=0) if gz else data)
        written.append(target)
    return written


def read_federated_kg(folder: str | Path) -> list[KnowledgeGraph]:
    """FedLU's layout ``folder/clientK/{train,valid,test}.txt[.gz]`` -> one KG per client, ordered by K.

    One vocabulary for all clients: ids by first appearance over client0's train, valid, test, then client1's,
    and so on; every client's KG carries the full vocabularies, and the entity types of ``folder/entity_types``
    when that file exists (:func:`kg.triples.read_folder_types`).
    """
    folder = Path(folder)
    clients = []
    for sub in folder.iterdir() if folder.is_dir() else ():
        match = re.fullmatch(r"client(\d+)", sub.name)
        if match and sub.is_dir():
            clients.append((int(match.group(1)), sub))
    if not clients:
        raise TriplesError(
            f"{folder}: no client<K>/ folders with train/valid/test triples (FedLU layout)", file=str(folder)
        )
    clients.sort()
    ids = [k for k, _ in clients]
    if ids != list(range(len(ids))):
        raise TriplesError(
            f"{folder}: client folders are {', '.join(f'client{k}' for k in ids)}; expected "
            f"client0..client{len(ids) - 1}",
            file=str(folder),
        )
    entities: dict[str, int] = {}
    relations: dict[str, int] = {}
    arrays = [read_splits(sub, entities, relations) for _, sub in clients]
    ents, rels = tuple(entities), tuple(relations)
    types, type_names, skipped = read_folder_types(folder, entities)
    return [
        KnowledgeGraph(
            name=f"{folder.name}/client{k}",
            entities=ents,
            relations=rels,
            train=arr["train"],
            valid=arr["valid"],
            test=arr["test"],
            entity_types=types,
            type_names=type_names,
            types_skipped=skipped,
        )
        for (k, _), arr in zip(clients, arrays)
    ]

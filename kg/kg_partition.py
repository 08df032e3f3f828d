"""Federated KGs: seeded relation- and triple-partitions of any KG, and FedLU's client folders.

Every part keeps the full entity and relation vocabularies of the KG it came from, so ids are global:
entity ``e`` and relation ``r`` mean the same thing on every client and on the server.

- ``by="relation"`` (FedE, FedLU's R-splits): the relations are shuffled with ``seed`` and dealt round-robin,
  so the clients hold disjoint relation sets of sizes differing by at most one; each client gets every
  train/valid/test triple of its relations.
- ``by="triple"`` (FedR): each split's triples are shuffled with ``seed`` and cut into ``num_clients`` parts of
  sizes differing by at most one — or, with ``shares`` (one positive weight per client), of sizes proportional to
  the shares (a data-rich client and data-poor ones: ``shares=[0.8, 0.1, 0.1]``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from kg.triples import SPLITS, KnowledgeGraph, TriplesError, read_folder_types, read_splits

__all__ = ["client_relations", "partition_kg", "read_federated_kg", "union_kg"]


def partition_kg(
    kg: KnowledgeGraph,
    num_clients: int,
    by: Literal["relation", "triple"] = "relation",
    seed: int = 0,
    shares: Sequence[float] | None = None,
) -> list[KnowledgeGraph]:
    """Split ``kg`` into ``num_clients`` disjoint parts covering all its triples (module doc)."""
    if num_clients < 1:
        raise ValueError(f"num_clients must be at least 1, got {num_clients}")
    if shares is not None:
        w = np.asarray(shares, dtype=float)
        if by != "triple":
            raise ValueError("shares apply to the triple partition only (partition: triple)")
        if w.shape != (num_clients,) or not np.all(np.isfinite(w)) or np.any(w <= 0):
            raise ValueError(f"shares must be {num_clients} positive numbers (one per client), got {list(shares)}")
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
            order = rng.permutation(len(arr))
            if shares is None:
                cuts = np.array_split(order, num_clients)
            else:
                bounds = np.rint(np.cumsum(w) / w.sum() * len(arr)).astype(np.int64)
                cuts = np.split(order, bounds[:-1])
            pieces[split] = [arr[np.sort(idx)] for idx in cuts]
    else:
        raise ValueError(f"unknown partition {by!r}; expected 'relation' or 'triple'")
    return [kg.replace(name=f"{kg.name}/client{c}", **{s: pieces[s][c] for s in SPLITS}) for c in range(num_clients)]


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

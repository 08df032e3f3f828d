"""Relation-, triple- and entity-partitions of a KG, and FedLU's federated folders."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from kg.kg_partition import (
    client_relations,
    entity_owners,
    partition_kg,
    partition_report,
    read_federated_kg,
    union_kg,
    write_federated_kg,
)
from kg.kg_sources import load_kg
from kg.kg_synthetic import planted_kg
from kg.triples import SPLITS, KnowledgeGraph, TriplesError


def _rows(arr: np.ndarray) -> list[tuple[int, ...]]:
    return sorted(map(tuple, arr.tolist()))


@pytest.mark.parametrize("by", ["relation", "triple"])
@pytest.mark.parametrize("clients", [1, 3, 8])
def test_parts_are_disjoint_cover_and_keep_vocabularies(by: str, clients: int) -> None:
    kg, _ = planted_kg(seed=2)
    parts = partition_kg(kg, clients, by=by, seed=7)
    assert len(parts) == clients
    for split in SPLITS:
        together = np.concatenate([p.split(split) for p in parts])
        assert _rows(together) == _rows(kg.split(split))  # a multiset cover: disjoint and complete
    for p in parts:
        assert p.entities == kg.entities and p.relations == kg.relations and p.name.startswith(kg.name)
    union = union_kg(parts)
    assert all(_rows(union.split(s)) == _rows(kg.split(s)) for s in SPLITS)


def test_relation_partition_gives_disjoint_balanced_relation_sets() -> None:
    kg, _ = planted_kg(seed=0)
    parts = partition_kg(kg, 3, by="relation", seed=1)
    rels = client_relations(parts)
    assert sum(len(r) for r in rels) == kg.num_relations == len(set(np.concatenate(rels)))
    assert max(map(len, rels)) - min(map(len, rels)) <= 1


def test_triple_partition_sizes_differ_by_at_most_one() -> None:
    kg, _ = planted_kg(seed=0)
    parts = partition_kg(kg, 4, by="triple", seed=1)
    for split in SPLITS:
        sizes = [len(p.split(split)) for p in parts]
        assert max(sizes) - min(sizes) <= 1


def test_triple_partition_with_shares_has_proportional_sizes_and_covers_all() -> None:
    kg, _ = planted_kg(seed=0)
    parts = partition_kg(kg, 3, by="triple", seed=2, shares=[0.8, 0.1, 0.1])
    for split in SPLITS:
        n = len(kg.split(split))
        sizes = [len(p.split(split)) for p in parts]
        assert sum(sizes) == n
        assert abs(sizes[0] - 0.8 * n) <= 1 and all(abs(k - 0.1 * n) <= 1 for k in sizes[1:])
        joined = np.concatenate([p.split(split) for p in parts])
        assert np.array_equal(np.unique(joined, axis=0), np.unique(kg.split(split), axis=0))
    with pytest.raises(ValueError, match="triple and entity partitions only"):
        partition_kg(kg, 3, by="relation", shares=[1, 1, 1])
    with pytest.raises(ValueError, match="3 positive numbers"):
        partition_kg(kg, 3, by="triple", shares=[1, 0, 1])


@pytest.mark.parametrize("by", ["relation", "triple", "entity"])
def test_same_seed_same_partition_other_seed_other(by: str) -> None:
    kg, _ = planted_kg(seed=0)
    a, b, c = (partition_kg(kg, 4, by=by, seed=s) for s in (5, 5, 6))
    assert all(np.array_equal(x.train, y.train) for x, y in zip(a, b))
    assert not all(np.array_equal(x.train, y.train) for x, y in zip(a, c))


def test_bad_partitions() -> None:
    kg, _ = planted_kg(seed=0)
    with pytest.raises(ValueError, match="cannot split 8 relations over 9 clients"):
        partition_kg(kg, 9, by="relation")
    with pytest.raises(ValueError, match="at least 1"):
        partition_kg(kg, 0)
    with pytest.raises(ValueError, match="unknown partition"):
        partition_kg(kg, 2, by="node")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot split 196 entities over 197 clients by entity"):
        partition_kg(kg, 197, by="entity")
    for shares in ([1, 1], [1, 0, 1], [1, -1, 1], [1, float("nan"), 1]):
        with pytest.raises(ValueError, match="shares must be 3 positive numbers"):
            partition_kg(kg, 3, by="entity", shares=shares)
    with pytest.raises(ValueError, match="leave client 1 no entity of 196"):
        partition_kg(kg, 3, by="entity", shares=[1000, 1, 1000])


def _typed(kg: KnowledgeGraph) -> KnowledgeGraph:
    """``kg`` with two entity types (even and odd ids)."""
    return kg.replace(entity_types=np.arange(kg.num_entities) % 2, type_names=("even", "odd"))


@pytest.mark.parametrize(
    "clients, shares", [(1, None), (3, None), (4, None), (3, [0.7, 0.15, 0.15]), (4, [0.1, 0.2, 0.3, 0.4])]
)
def test_entity_partition_matches_a_brute_force_reference(clients: int, shares: list[float] | None) -> None:
    kg = _typed(planted_kg(seed=2)[0])
    parts = partition_kg(kg, clients, by="entity", seed=3, shares=shares)
    owner = entity_owners(kg.num_entities, clients, seed=3, shares=shares)
    assert owner.shape == (kg.num_entities,) and set(owner.tolist()) == set(range(clients))
    w = np.ones(clients) if shares is None else np.asarray(shares)
    sizes = np.bincount(owner, minlength=clients)  # shares respected within one entity
    assert np.all(np.abs(sizes - w / w.sum() * kg.num_entities) <= 1) and sizes.sum() == kg.num_entities
    holder: dict[int, int] = {}
    for c, p in enumerate(parts):  # every kept triple has both ends owned by its client; no entity on two clients
        for h, _, t in p.all_triples().tolist():
            assert owner[h] == owner[t] == c
            assert holder.setdefault(h, c) == c and holder.setdefault(t, c) == c
    report = partition_report(kg, parts)
    for split in SPLITS:
        expected: list[list[tuple[int, ...]]] = [[] for _ in range(clients)]
        dropped = 0
        for h, r, t in kg.split(split).tolist():
            if owner[h] == owner[t]:
                expected[owner[h]].append((h, r, t))
            else:
                dropped += 1
        for c, p in enumerate(parts):  # kept exactly once, in the KG's order
            assert list(map(tuple, p.split(split).tolist())) == expected[c]
        assert report[split] == {"kept": sum(map(len, expected)), "dropped": dropped}
        assert len(union_kg(parts).split(split)) == report[split]["kept"]  # the centralised bound of the split
    for p in parts:  # full vocabularies and the types, ids global
        assert p.entities == kg.entities and p.relations == kg.relations and p.type_names == kg.type_names
        assert np.array_equal(p.entity_types, kg.entity_types)
    if clients == 1:
        assert report["train"]["dropped"] == 0 and np.array_equal(parts[0].train, kg.train)


def test_entity_owners_is_the_partitions_seeded_cut() -> None:
    a, b, c = (entity_owners(50, 4, seed=s) for s in (1, 1, 2))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert sorted(np.bincount(a).tolist()) == [12, 12, 13, 13]
    assert np.bincount(entity_owners(100, 3, seed=0, shares=[0.7, 0.15, 0.15])).tolist() == [70, 15, 15]
    with pytest.raises(ValueError, match="num_clients must be at most 50"):
        entity_owners(50, 51)


@pytest.mark.parametrize("gz", [False, True])
def test_write_federated_kg_reads_back(tmp_path: Path, gz: bool) -> None:
    kg = _typed(planted_kg(seed=1)[0])
    parts = partition_kg(kg, 3, by="entity", seed=0)
    written = write_federated_kg(parts, tmp_path / "fed", gz=gz)
    suffix = ".txt.gz" if gz else ".txt"
    assert {f.relative_to(tmp_path / "fed").as_posix() for f in written} == {
        f"client{k}/{s}{suffix}" for k in range(3) for s in SPLITS
    } | {f"entity_types{suffix}"}
    back = read_federated_kg(tmp_path / "fed")
    assert len(back) == 3 and back[0].type_names == ("even", "odd") and back[0].types_skipped == 0

    def named(p: KnowledgeGraph, split: str) -> list[tuple[str, ...]]:
        return [(p.entities[h], p.relations[r], p.entities[t]) for h, r, t in p.split(split).tolist()]

    for p, q in zip(parts, back):
        assert all(named(p, s) == named(q, s) for s in SPLITS)
        for e, name in enumerate(q.entities):  # each entity read back keeps its type
            assert q.type_names[q.entity_types[e]] == kg.type_names[kg.entity_types[kg.entities.index(name)]]
    with pytest.raises(ValueError, match="vocabulary differs"):
        write_federated_kg([parts[0], planted_kg(seed=3)[0]], tmp_path / "bad")


def _client(folder: Path, k: int, lines: dict[str, str]) -> None:
    sub = folder / f"client{k}"
    sub.mkdir(parents=True)
    for split, text in lines.items():
        (sub / f"{split}.txt.gz").write_bytes(gzip.compress(text.encode()))


def test_read_federated_kg_shares_one_vocabulary(tmp_path: Path) -> None:
    _client(tmp_path / "fed", 1, {"train": "c\ts\ta\n", "valid": "", "test": "d\ts\tc\n"})
    _client(tmp_path / "fed", 0, {"train": "a\tr\tb\n", "valid": "b\tr\tc\n", "test": ""})
    parts = read_federated_kg(tmp_path / "fed")
    assert [p.name for p in parts] == ["fed/client0", "fed/client1"]
    assert parts[0].entities == parts[1].entities == ("a", "b", "c", "d")
    assert parts[1].relations == ("r", "s")
    np.testing.assert_array_equal(parts[1].train, [[2, 1, 0]])
    union = load_kg(tmp_path / "fed")  # a federated folder loads as the centralised union
    assert (len(union.train), len(union.valid), len(union.test)) == (2, 1, 1) and union.name == "fed"
    (tmp_path / "fed" / "client3").mkdir()
    with pytest.raises(TriplesError, match="expected client0..client2"):
        read_federated_kg(tmp_path / "fed")
    with pytest.raises(TriplesError, match="no client<K>"):
        read_federated_kg(tmp_path / "fed" / "client0")


def test_fedlu_r10(shared_data: Path) -> None:
    folder = shared_data / "kg" / "fb15k237_fedlu_r10"
    if not (folder / "client0" / "train.txt.gz").is_file():
        pytest.skip(f"FedLU R10 not found at {folder}")
    parts = read_federated_kg(folder)
    assert len(parts) == 10 and parts[0].num_entities == 14541 and parts[0].num_relations == 237
    rels = client_relations(parts)
    assert all(23 <= len(r) <= 30 for r in rels) and len(set(np.concatenate(rels))) == sum(map(len, rels)) == 237
    for p in parts:  # each client splits its triples 80/10/10
        assert len(p.valid) == len(p.test) and abs(len(p.train) / len(p.all_triples()) - 0.8) < 0.01
    assert sum(len(p.all_triples()) for p in parts) == 272115 + 17535 + 20466


def test_federated_folder_reads_the_shared_types_file(tmp_path: Path) -> None:
    for k, (train, test) in enumerate([("a\tr\tb\n", "b\tr\ta\n"), ("c\ts\ta\n", "a\ts\tc\n")]):
        sub = tmp_path / "fed" / f"client{k}"
        sub.mkdir(parents=True)
        for split, text in (("train", train), ("valid", ""), ("test", test)):
            (sub / f"{split}.txt").write_text(text)
    (tmp_path / "fed" / "entity_types.txt").write_text("a\tt1\nb\tt2\nc\tt1\n")
    parts = read_federated_kg(tmp_path / "fed")
    assert all(p.type_names == ("t1", "t2") for p in parts)
    np.testing.assert_array_equal(parts[1].entity_types, [0, 1, 0])
    assert union_kg(parts).type_names == ("t1", "t2")

"""Client split: 799 eligible DWIE documents, 200/200/200/199, 3:1, hold-out, seen/unseen combos."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kg.documents import DataError
from kg.split import (
    DWIE_DEFAULT_GROUPS,
    NerGroupSplit,
    eligible_documents,
    neighbour_cycle,
    partition_stats,
    query_mask,
    shared_sizes,
    split_clients,
    split_sizes,
)
from kg.synthetic import PlantedRuleConfig, generate
from tests.kg import _data


def test_neighbour_cycle_two_groups() -> None:
    assert neighbour_cycle(2) == [(0, 0), (0, 1), (1, 1), (1, 0)]  # AA -> AB -> BB -> BA -> AA


@pytest.mark.parametrize("g", [2, 3, 4, 5])
def test_neighbour_cycle_general(g: int) -> None:
    cyc = neighbour_cycle(g)
    assert sorted(cyc) == [(i, j) for i in range(g) for j in range(g)]
    for a, b in zip(cyc, cyc[1:] + cyc[:1]):
        assert (a[0] == b[0]) != (a[1] == b[1])  # exactly one group differs


def test_split_sizes() -> None:
    assert split_sizes(799, 4) == [200, 200, 200, 199]
    assert split_sizes(10, 3) == [4, 3, 3]


@pytest.mark.data
def test_dwie_default_split(dwie_dir: Path) -> None:
    corpus = _data.dwie(dwie_dir)
    kept, excluded = eligible_documents(corpus)
    assert len(kept) == 799
    assert [d for d, _ in excluded] == ["DW_19492126", "DW_38763222", "DW_39718698"]
    parts = split_clients(corpus, 4, seed=0)
    assert NerGroupSplit.for_corpus(corpus).groups == DWIE_DEFAULT_GROUPS
    assert [len(p.documents) for p in parts] == [200, 200, 200, 199]
    assert [len(p.test) for p in parts] == [50, 50, 50, 50]
    assert [len(p.seen_train) for p in parts] == [150, 150, 150, 149]
    assert [len(p.holdout) for p in parts] == [15, 15, 15, 15]
    assert [(p.seen.name, p.unseen.name) for p in parts] == [("AA", "AB"), ("AB", "BB"), ("BB", "BA"), ("BA", "AA")]
    ids = [d.doc_id for p in parts for d in p.documents]
    assert len(ids) == len(set(ids)) == 799
    for p in parts:
        assert not {d.doc_id for d in p.seen_train} & {d.doc_id for d in p.test}
        assert not {d.doc_id for d in p.train} & {d.doc_id for d in p.holdout}
        # unseen combo pairs never appear among the seen-train queries (nor seen-test ones)
        for d in p.documents:
            assert not (query_mask(d, p.seen) & query_mask(d, p.unseen)).any()
        stats = partition_stats(p)
        assert stats["seen_train_facts"] > 0 and stats["unseen_test_facts"] > 0
    # all four combos together cover every off-diagonal pair exactly once
    d = parts[0].test[0]
    total = sum(query_mask(d, p.seen).astype(int) for p in parts)
    assert np.array_equal(total, 1 - np.eye(d.num_entities, dtype=int))
    again = split_clients(corpus, 4, seed=0)
    assert [p.doc_ids("test") for p in again] == [p.doc_ids("test") for p in parts]
    other = split_clients(corpus, 4, seed=1)
    assert [p.doc_ids("test") for p in other] != [p.doc_ids("test") for p in parts]


def test_query_mask_brute_force() -> None:
    corpus, _ = generate(PlantedRuleConfig(num_documents=5), seed=0)
    split = NerGroupSplit.for_corpus(corpus)
    tg = split.type_groups(corpus.entity_types)
    for combo in split.combos(corpus.entity_types):
        for d in corpus:
            m = query_mask(d, combo)
            for h in range(d.num_entities):
                for t in range(d.num_entities):
                    want = (h != t and tg[d.entity_types[h]] == combo.head_group
                            and tg[d.entity_types[t]] == combo.tail_group)
                    assert m[h, t] == want


def test_general_k_and_groups() -> None:
    corpus, _ = generate(PlantedRuleConfig(num_documents=41), seed=0)
    groups = (("location",), ("organization",), ("person", "event"))
    parts = split_clients(corpus, 5, groups, seed=2, test_ratio=0.2, holdout=0.0)
    assert [len(p.documents) for p in parts] == [9, 8, 8, 8, 8]
    assert [len(p.test) for p in parts] == [2, 2, 2, 2, 2] and all(not p.holdout for p in parts)
    cyc = neighbour_cycle(3)
    assert [(p.seen.head_group, p.seen.tail_group) for p in parts] == cyc[:5]
    assert [(p.unseen.head_group, p.unseen.tail_group) for p in parts] == cyc[1:6]


def test_bad_groups() -> None:
    corpus, _ = generate(PlantedRuleConfig(num_documents=8), seed=0)
    with pytest.raises(DataError, match="unknown entity type 'planet'"):
        split_clients(corpus, 2, (("planet",), ("person",)))
    with pytest.raises(DataError, match="in groups 0 and 1"):
        NerGroupSplit((("person",), ("person",)))
    with pytest.raises(DataError, match="at least 2"):
        NerGroupSplit((("person",),))
    assert NerGroupSplit.parse("a,b|c").groups == (("a", "b"), ("c",))


def test_shared_split_gives_every_combo_a_rich_and_a_poor_owner() -> None:
    corpus, _ = generate(PlantedRuleConfig(num_documents=103), seed=0)
    parts = split_clients(corpus, 8, seed=3, scheme="shared", poor_share=0.2)
    assert shared_sizes(103, 4, 0.2) == [21, 5, 21, 5, 21, 5, 20, 5]
    assert [len(p.documents) for p in parts] == shared_sizes(103, 4, 0.2)
    cyc = neighbour_cycle(2)
    owners: dict[tuple[int, int], list[str]] = {}
    for c, p in enumerate(parts):
        owners.setdefault((p.seen.head_group, p.seen.tail_group), []).append(p.meta["role"])
        assert p.meta["role"] == ("rich" if c % 2 == 0 else "poor") and p.meta["scheme"] == "shared"
        k = cyc.index((p.seen.head_group, p.seen.tail_group))
        assert (p.unseen.head_group, p.unseen.tail_group) == cyc[(k + 1) % 4]
    assert {k: sorted(v) for k, v in owners.items()} == {c: ["poor", "rich"] for c in cyc}
    # every document exactly once; deterministic in the seed; the paper split is unchanged by the option
    ids = [d.doc_id for p in parts for d in p.documents]
    assert len(ids) == len(set(ids)) == 103
    again = split_clients(corpus, 8, seed=3, scheme="shared", poor_share=0.2)
    assert [[d.doc_id for d in p.documents] for p in again] == [[d.doc_id for d in p.documents] for p in parts]
    paper = split_clients(corpus, 4, seed=3)
    assert [[d.doc_id for d in p.documents] for p in paper] == [
        [d.doc_id for d in p.documents] for p in split_clients(corpus, 4, seed=3, scheme="paper")]
    assert all(p.meta["role"] == "all" for p in paper)


def test_shared_split_bad_options() -> None:
    corpus, _ = generate(PlantedRuleConfig(num_documents=40), seed=0)
    with pytest.raises(DataError, match="num_clients = 2 x 4 combos = 8"):
        split_clients(corpus, 6, scheme="shared")
    with pytest.raises(ValueError, match="split scheme"):
        split_clients(corpus, 4, scheme="lopsided")
    with pytest.raises(ValueError, match="poor_share"):
        shared_sizes(40, 4, 0.7)

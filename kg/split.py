"""Client split of FedNSL's DWIE experiment (paper §4.1.2, spec §4 and §8.11), generalised.

1. Eligible documents: those with at least one entity. On DWIE this excludes exactly three of the 802
   documents — DW_19492126 and DW_38763222 (train) and DW_39718698 (test) have no concept with a mention —
   leaving the 799 of LogiRE's preprocessing (its 98 dev + 99 test files, and its training-fact reference
   ``ref/train_annotated.fact`` is reproduced exactly by the remaining 602 training documents).
2. Documents (sorted by id, then a seeded permutation) are dealt to ``K`` clients in contiguous blocks of
   sizes as equal as possible, larger first: 799 → 200/200/200/199.
3. Within a client ``round(n · test_ratio)`` documents are test (3:1 train/test by default) and a seeded
   ``round(n_train · holdout)`` of the train documents are held out for threshold selection (spec §8.12).
4. Entity types are split into groups (default for DWIE A = {location, organization, time, role, money},
   B = {person, other, misc, event, ethnicity}); a head–tail combo is a pair of groups (AA, AB, ...). The
   combos are ordered in a neighbour cycle where consecutive combos differ in exactly one group
   (two groups: AA → AB → BB → BA → AA). Client ``c`` gets combo ``cycle[c mod |cycle|]`` as its seen
   combo and the next one in the cycle as its unseen combo: seen-train / seen-test queries are the entity
   pairs of its own combo in its train / test documents; unseen-test queries are the neighbour combo's
   pairs in its own test documents (never trained on by that client).

``scheme="shared"`` (beyond the paper; issue 17): every combo has two owners, so every rule-head triple is
fitted by at least two clients and the server's KL term has something to carry between them. The documents
are dealt to the ``|cycle|`` combos in equal blocks; each block is split into a data-rich client (share
``1 - poor_share``) and a data-poor client (share ``poor_share``), clients ``2k`` (rich) and ``2k + 1`` (poor)
of combo ``cycle[k]``; both are tested on the next combo in the cycle as their unseen set. ``meta["role"]``
says which is which. Needs ``num_clients == 2 · |cycle|``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kg.documents import Corpus, DataError, Document, Vocab

__all__ = [
    "DWIE_DEFAULT_GROUPS",
    "Combo",
    "NerGroupSplit",
    "ClientPartition",
    "neighbour_cycle",
    "eligible_documents",
    "balanced_groups",
    "split_sizes",
    "shared_sizes",
    "split_clients",
    "query_mask",
    "partition_stats",
]

#: Spec §8.11's balanced grouping of DWIE's ten coarse types (gold facts AA 4745, AB 3977, BA 7368, BB 3403).
DWIE_DEFAULT_GROUPS: tuple[tuple[str, ...], ...] = (
    ("location", "organization", "time", "role", "money"),
    ("person", "other", "misc", "event", "ethnicity"),
)


@dataclass(frozen=True)
class Combo:
    """A head–tail group combo: queries are pairs (h, t) with type(h) in ``head_types``, type(t) in ``tail_types``."""

    head_group: int
    tail_group: int
    head_types: frozenset[int]
    tail_types: frozenset[int]
    name: str


def neighbour_cycle(num_groups: int) -> list[tuple[int, int]]:
    """All ``G²`` (head group, tail group) combos in a cycle whose neighbours differ in exactly one group.

    Row ``i`` (head group ``i``) starts at tail group ``i`` and ends at ``i + 1 (mod G)``; the next row starts
    in that same column, and the last row ends in column 0, the first row's start. ``G = 2``:
    ``[(0,0), (0,1), (1,1), (1,0)]`` = AA → AB → BB → BA.
    """
    if num_groups < 2:
        raise ValueError(f"need at least 2 entity-type groups, got {num_groups}")
    g = num_groups
    cycle: list[tuple[int, int]] = []
    for i in range(g):
        start, end = i % g, (i + 1) % g
        middle = [(start + k) % g for k in range(1, g) if (start + k) % g != end]
        cycle.extend((i, j) for j in [start, *middle, end])
    return cycle


@dataclass(frozen=True)
class NerGroupSplit:
    """A partition of entity-type names into groups (``group_names`` default ``A, B, C, ...``)."""

    groups: tuple[tuple[str, ...], ...]
    group_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        groups = tuple(tuple(str(t) for t in g) for g in self.groups)
        object.__setattr__(self, "groups", groups)
        if len(groups) < 2:
            raise DataError(f"need at least 2 entity-type groups, got {len(groups)}")
        seen: dict[str, int] = {}
        for k, g in enumerate(groups):
            if not g:
                raise DataError(f"entity-type group {k} is empty")
            for t in g:
                if t in seen:
                    raise DataError(f"entity type {t!r} is in groups {seen[t]} and {k}")
                seen[t] = k
        names = self.group_names or tuple(chr(ord("A") + k) for k in range(len(groups)))
        if len(names) != len(groups):
            raise DataError(f"{len(names)} group names for {len(groups)} groups")
        object.__setattr__(self, "group_names", tuple(names))

    @classmethod
    def parse(cls, text: str) -> NerGroupSplit:
        """``"location,organization|person,event"`` → two groups."""
        return cls(tuple(tuple(t.strip() for t in g.split(",") if t.strip()) for g in text.split("|")))

    @classmethod
    def for_corpus(cls, corpus: Corpus) -> NerGroupSplit:
        """The corpus's own groups (``meta['ner_groups']``, e.g. synthetic), DWIE's default for DWIE's ten
        types, else :func:`balanced_groups`."""
        if corpus.meta.get("ner_groups"):
            return cls(tuple(tuple(g) for g in corpus.meta["ner_groups"]))
        if set(corpus.entity_types.names) == {t for g in DWIE_DEFAULT_GROUPS for t in g}:
            return cls(DWIE_DEFAULT_GROUPS)
        return balanced_groups(corpus)

    def type_groups(self, types: Vocab) -> np.ndarray:
        """(T,) int64: group of each type id, ``-1`` for types in no group (never part of a query)."""
        out = np.full(len(types), -1, dtype=np.int64)
        for k, g in enumerate(self.groups):
            for t in g:
                out[types.index(t)] = k
        return out

    def combos(self, types: Vocab) -> list[Combo]:
        """The combos in :func:`neighbour_cycle` order."""
        tg = self.type_groups(types)
        members = [frozenset(np.flatnonzero(tg == k).tolist()) for k in range(len(self.groups))]
        names = self.group_names or ()
        return [Combo(i, j, members[i], members[j], names[i] + names[j]) for i, j in neighbour_cycle(len(self.groups))]


@dataclass
class ClientPartition:
    """One client's documents and query combos (doc lists hold the corpus's Document objects)."""

    client: int
    seen: Combo
    unseen: Combo
    train: list[Document]
    holdout: list[Document]
    test: list[Document]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def seen_train(self) -> list[Document]:
        """All train documents, hold-out included."""
        return self.train + self.holdout

    @property
    def documents(self) -> list[Document]:
        return self.train + self.holdout + self.test

    def sizes(self) -> dict[str, int]:
        return {
            "documents": len(self.documents),
            "train": len(self.train),
            "holdout": len(self.holdout),
            "test": len(self.test),
        }

    def doc_ids(self, part: str = "train") -> list[str]:
        return [d.doc_id for d in getattr(self, part)]


def eligible_documents(corpus: Corpus) -> tuple[list[Document], list[tuple[str, str]]]:
    """``(kept, excluded)``: documents with at least one entity; excluded as ``(doc_id, reason)``."""
    kept, excluded = [], []
    for d in corpus.documents:
        if d.num_entities == 0:
            excluded.append((d.doc_id, f"no entities ({d.split} document whose concepts have no mention)"))
        else:
            kept.append(d)
    return kept, excluded


def balanced_groups(corpus: Corpus, num_groups: int = 2) -> NerGroupSplit:
    """Greedy grouping of the entity types balancing entity counts (largest type first, to the lightest group)."""
    counts = corpus.type_counts()
    order = sorted(range(len(counts)), key=lambda k: (-int(counts[k]), corpus.entity_types[k]))
    if len(order) < num_groups:
        raise DataError(f"{len(order)} entity types cannot form {num_groups} groups")
    groups: list[list[str]] = [[] for _ in range(num_groups)]
    load = [0] * num_groups
    for k in order:
        g = min(range(num_groups), key=lambda i: (load[i], len(groups[i]), i))
        groups[g].append(corpus.entity_types[k])
        load[g] += int(counts[k])
    return NerGroupSplit(tuple(tuple(g) for g in groups))


def _round(x: float) -> int:
    return int(np.floor(x + 0.5))


def split_sizes(num_documents: int, num_clients: int) -> list[int]:
    """Client sizes as equal as possible, larger first: ``split_sizes(799, 4) == [200, 200, 200, 199]``."""
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    base, extra = divmod(num_documents, num_clients)
    return [base + (1 if c < extra else 0) for c in range(num_clients)]


def shared_sizes(num_documents: int, num_combos: int, poor_share: float = 0.2) -> list[int]:
    """Client sizes of the shared split: per combo block (:func:`split_sizes`) a rich client with
    ``block - round(block · poor_share)`` documents, then a poor one with the rest (each at least 1)."""
    if not 0.0 < poor_share < 0.5:
        raise ValueError(f"poor_share must be in (0, 0.5), got {poor_share}")
    out = []
    for block in split_sizes(num_documents, num_combos):
        poor = min(max(1, _round(block * poor_share)), block - 1)
        out.extend([block - poor, poor])
    return out


def split_clients(
    corpus: Corpus,
    num_clients: int = 4,
    groups: NerGroupSplit | Sequence[Sequence[str]] | None = None,
    seed: int = 0,
    test_ratio: float = 0.25,
    holdout: float = 0.1,
    scheme: str = "paper",
    poor_share: float = 0.2,
) -> list[ClientPartition]:
    """Partition the eligible documents of ``corpus`` into ``num_clients`` clients (see module docstring).

    ``groups``: a :class:`NerGroupSplit`, a sequence of type-name groups, or None for
    :meth:`NerGroupSplit.for_corpus`. ``scheme``: ``paper`` (one client per combo, cycling) or ``shared`` (a
    data-rich and a data-poor client per combo). Deterministic in ``seed`` (numpy ``default_rng``; no global
    RNG).
    """
    if scheme not in ("paper", "shared"):
        raise ValueError(f"split scheme must be 'paper' or 'shared', got {scheme!r}")
    if not 0.0 < test_ratio < 1.0:
        raise ValueError(f"test_ratio must be in (0, 1), got {test_ratio}")
    if not 0.0 <= holdout < 1.0:
        raise ValueError(f"holdout must be in [0, 1), got {holdout}")
    if groups is None:
        split = NerGroupSplit.for_corpus(corpus)
    elif isinstance(groups, NerGroupSplit):
        split = groups
    else:
        split = NerGroupSplit(tuple(tuple(g) for g in groups))
    combos = split.combos(corpus.entity_types)
    docs, excluded = eligible_documents(corpus)
    if len(docs) < num_clients:
        raise DataError(
            f"{len(docs)} eligible documents (with entities; {len(excluded)} excluded) cannot be split over "
            f"{num_clients} clients: set num_clients to at most {max(len(docs), 1)} or add documents"
        )
    if scheme == "shared" and num_clients != 2 * len(combos):
        raise DataError(
            f"data.split: shared needs num_clients = 2 x {len(combos)} combos = {2 * len(combos)} "
            f"(a data-rich and a data-poor client per combo), got {num_clients}"
        )
    sizes = (
        split_sizes(len(docs), num_clients) if scheme == "paper" else shared_sizes(len(docs), len(combos), poor_share)
    )
    docs = sorted(docs, key=lambda d: d.doc_id)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(docs))
    out = []
    offset = 0
    for c, size in enumerate(sizes):
        mine = [docs[int(k)] for k in order[offset : offset + size]]
        offset += size
        n_test = _round(size * test_ratio)
        perm = rng.permutation(size)
        test = [mine[int(k)] for k in sorted(perm[:n_test])]
        train_all = [mine[int(k)] for k in sorted(perm[n_test:])]
        n_hold = _round(len(train_all) * holdout)
        hperm = rng.permutation(len(train_all))
        hold_idx = set(hperm[:n_hold].tolist())
        k = c % len(combos) if scheme == "paper" else c // 2
        role = "all" if scheme == "paper" else ("rich" if c % 2 == 0 else "poor")
        out.append(
            ClientPartition(
                client=c,
                seen=combos[k],
                unseen=combos[(k + 1) % len(combos)],
                train=[d for k, d in enumerate(train_all) if k not in hold_idx],
                holdout=[d for k, d in enumerate(train_all) if k in hold_idx],
                test=test,
                meta={
                    "groups": [list(g) for g in split.groups],
                    "seed": seed,
                    "excluded": excluded,
                    "scheme": scheme,
                    "role": role,
                },
            )
        )
    return out


def query_mask(doc: Document, combo: Combo, include_diagonal: bool = False) -> np.ndarray:
    """(N, N) bool: ``mask[h, t]`` = (h, t) is a query pair of ``combo`` (type(h) in head group, type(t) in
    tail group; ``h != t`` unless ``include_diagonal``)."""
    types = doc.entity_types
    head = np.isin(types, np.fromiter(combo.head_types, dtype=np.int64, count=len(combo.head_types)))
    tail = np.isin(types, np.fromiter(combo.tail_types, dtype=np.int64, count=len(combo.tail_types)))
    mask = np.outer(head, tail)
    if not include_diagonal:
        np.fill_diagonal(mask, False)
    return mask


def partition_stats(part: ClientPartition) -> dict[str, int]:
    """Document counts plus query pairs and gold facts (off-diagonal) of the seen/unseen combos."""
    stats = dict(part.sizes())
    for name, docs, combo in (
        ("seen_train", part.seen_train, part.seen),
        ("seen_test", part.test, part.seen),
        ("unseen_test", part.test, part.unseen),
    ):
        pairs = facts = 0
        for d in docs:
            m = query_mask(d, combo)
            pairs += int(m.sum())
            if d.num_facts:
                facts += int(m[d.facts[:, 0], d.facts[:, 2]].sum())
        stats[f"{name}_pairs"] = pairs
        stats[f"{name}_facts"] = facts
    return stats

"""The rule store's state (:class:`StoreBase`): names, triples and lookups shared by its recording, query and
serialisation parts."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from rules.fol import MAX_BODY_LENGTH, RelationVocab
from rules.store.records import ClientId, Triple, TripleRecord


@dataclass
class StoreBase:
    """The store's state and naming: relation/type names plus one :class:`TripleRecord` per triple.

    relations: R relation names (token layout of :class:`rules.fol.RelationVocab`); types: entity type names
    (None: shown as ids); body_length: L of the padded bodies (3); meta: free-form run information;
    reading_order: how the recorded reading order of the triples (``TripleRecord.ranked``) was measured
    (:mod:`rules.reading_order`), None when none is recorded.
    """

    relations: tuple[str, ...]
    types: tuple[str, ...] | None = None
    body_length: int = MAX_BODY_LENGTH
    triples: dict[Triple, TripleRecord] = field(default_factory=dict)
    rounds: list[int] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    reading_order: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.relations = tuple(self.relations)
        self.types = tuple(self.types) if self.types is not None else None

    @cached_property
    def vocab(self) -> RelationVocab:
        return RelationVocab(self.relations)

    # --- names ----------------------------------------------------------------------------------
    def type_name(self, t: int) -> str:
        if self.types is None:
            return str(t)
        return self.types[t]

    def triple_name(self, triple: Triple) -> str:
        """``head[head_type->tail_type]``."""
        h, th, tt = triple
        return f"{self.relations[h]}[{self.type_name(th)}->{self.type_name(tt)}]"

    def relation_id(self, head: str | int) -> int:
        if isinstance(head, str) and not head.lstrip("-").isdigit():
            return self.vocab.relation_id(head)
        h = int(head)
        if not 0 <= h < len(self.relations):
            raise ValueError(f"relation id {h} outside [0, {len(self.relations)})")
        return h

    def type_id(self, t: str | int) -> int:
        if isinstance(t, str) and not t.isdigit():
            if self.types is None or t not in self.types:
                raise ValueError(f"unknown entity type {t!r}; known: {list(self.types or [])}")
            return self.types.index(t)
        return int(t)

    def rule_text(self, triple: Triple, tokens: Iterable[int]) -> str:
        return f"{self.relations[triple[0]]} <- {self.vocab.format_body(tokens)}"

    @property
    def ranked(self) -> bool:
        """Whether a reading order is recorded for every triple (:mod:`rules.reading_order`)."""
        return (
            self.reading_order is not None
            and bool(self.triples)
            and all(rec.ranked is not None for rec in self.triples.values())
        )

    @property
    def clients(self) -> list[ClientId]:
        seen: dict[ClientId, None] = {}
        for rec in self.triples.values():
            seen.update(dict.fromkeys(rec.clients))
        return sorted(seen, key=lambda c: (len(c), c))

    # --- recording ------------------------------------------------------------------------------
    def _check_triple(self, triple: Sequence[int]) -> Triple:
        t = tuple(int(v) for v in triple)
        if len(t) != 3:
            raise ValueError(f"a triple is (head relation, head type, tail type), got {triple}")
        if not 0 <= t[0] < len(self.relations):
            raise ValueError(f"triple {t}: head relation outside [0, {len(self.relations)})")
        if self.types is not None and not (0 <= t[1] < len(self.types) and 0 <= t[2] < len(self.types)):
            raise ValueError(f"triple {t}: entity type outside [0, {len(self.types)})")
        return t

    def _record(self, triple: Sequence[int]) -> TripleRecord:
        t = self._check_triple(triple)
        if t not in self.triples:
            raise KeyError(f"triple {self.triple_name(t)} {t} has no bodies yet: call add_triple first")
        return self.triples[t]

    # --- lookups ------------------------------------------------------------------------------
    def find_triples(self, head: str | int | None = None, types: tuple[Any, Any] | None = None) -> list[Triple]:
        """Triples (sorted by name) with the given head relation and/or (head type, tail type)."""
        h = None if head is None else self.relation_id(head)
        ty = None if types is None else (self.type_id(types[0]), self.type_id(types[1]))
        out = [t for t in self.triples if (h is None or t[0] == h) and (ty is None or t[1:] == ty)]
        return sorted(out, key=lambda t: (self.triple_name(t), t))

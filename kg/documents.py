"""The document type every reader produces and every model consumes.

A :class:`Document` is one annotated text: ``N`` entities (each with a coarse type id and one or more
mentions) and ``F`` facts ``(head_entity, relation_id, tail_entity)``. A :class:`Corpus` is a list of
documents sharing one relation :class:`Vocab` and one entity-type :class:`Vocab`, plus the
:class:`LoadReport` that says what a reader dropped or resolved and why (never silently).

Conventions (shared with ``kg.graph`` and ``kg.grounding``):

- relation ids ``0..R-1`` index ``Corpus.relations``; the inverse of relation ``r`` is channel ``R + r``
  and the identity ("stay") channel is ``2R`` (spec §5.2);
- facts are stored unique and sorted (``np.unique(axis=0)``), so two documents with the same facts compare
  equal whatever order a file listed them in;
- token mentions use document-level token offsets ``[start, end)`` into ``Document.tokens`` (the docred
  reader/writer converts from/to sentence-local offsets); char mentions use ``[start, end)`` into the
  original article text (which DWIE does not ship).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn

import numpy as np

__all__ = [
    "DataError",
    "UnknownNameError",
    "Vocab",
    "Mention",
    "Document",
    "Corpus",
    "LoadReport",
    "SkippedDocument",
    "validate_document",
    "validate_corpus",
    "canonical_facts",
]


class DataError(ValueError):
    """Bad input data; the message names the file and the document id when they are known."""

    def __init__(self, message: str, *, file: str | None = None, doc_id: str | None = None) -> None:
        self.file = file
        self.doc_id = doc_id
        self.reason = message
        where = []
        if file:
            where.append(str(file))
        if doc_id:
            where.append(f"document {doc_id}")
        super().__init__(": ".join([*where, message]))


class UnknownNameError(DataError, KeyError):
    """A relation or entity-type name that is not in the vocabulary."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return ValueError.__str__(self)


@dataclass(frozen=True)
class Vocab:
    """An ordered, immutable list of names; ``index(name)`` is the inverse of ``names[i]``."""

    names: tuple[str, ...]
    kind: str = field(default="name", compare=False)

    def __post_init__(self) -> None:
        names = tuple(str(n) for n in self.names)
        object.__setattr__(self, "names", names)
        seen: dict[str, int] = {}
        for i, name in enumerate(names):
            if name in seen:
                raise DataError(f"duplicate {self.kind} {name!r} in vocabulary (positions {seen[name]} and {i})")
            seen[name] = i
        object.__setattr__(self, "_index", seen)

    @classmethod
    def from_mapping(
        cls, mapping: Mapping[str, int], *, drop: Iterable[str] = (), strip_prefix: str = "", kind: str = "name"
    ) -> Vocab:
        """Vocabulary from a ``name -> id`` mapping (e.g. LogiRE's ``rel2id.json``), ordered by id.

        Names in ``drop`` (e.g. ``"Na"``, ``"BLANK"``) are removed and the rest renumbered ``0..``.
        """
        drop = set(drop)
        items = sorted(mapping.items(), key=lambda kv: (int(kv[1]), kv[0]))
        names = [_strip(k, strip_prefix) for k, _ in items if k not in drop and _strip(k, strip_prefix) not in drop]
        return cls(tuple(names), kind=kind)

    def index(self, name: str) -> int:
        """Id of ``name``; raises :class:`UnknownNameError` naming it (and a few known names)."""
        try:
            return self._index[name]  # type: ignore[attr-defined]
        except KeyError:
            known = ", ".join(self.names[:8]) + (", ..." if len(self.names) > 8 else "")
            raise UnknownNameError(f"unknown {self.kind} {name!r} (known: {known})") from None

    def __contains__(self, name: object) -> bool:
        return name in self._index  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __getitem__(self, i: int) -> str:
        return self.names[i]


def _strip(name: str, prefix: str) -> str:
    return name[len(prefix) :] if prefix and name.startswith(prefix) else name


@dataclass(frozen=True)
class Mention:
    """One mention of entity ``entity`` at ``[start, end)`` in ``unit`` ("token" or "char") offsets."""

    entity: int
    start: int
    end: int
    text: str
    sent: int = 0
    unit: Literal["char", "token"] = "token"


def canonical_facts(facts: Any) -> np.ndarray:
    """``(F, 3)`` int64 array of unique ``(head, relation, tail)`` rows in sorted order."""
    arr = np.asarray(facts, dtype=np.int64)
    if arr.size == 0:
        return np.zeros((0, 3), dtype=np.int64)
    arr = arr.reshape(-1, 3)
    return np.unique(arr, axis=0)


@dataclass(eq=False)
class Document:
    """One annotated document.

    Shapes: ``entity_types`` (N,) int64 type ids; ``facts`` (F, 3) int64 rows ``(head, relation, tail)``.
    ``sentence_starts`` holds the token index where each sentence begins (``None``: one sentence).
    ``meta`` keeps format-specific extras (e.g. docred ``evidence`` per fact, DWIE ``tags``).
    """

    doc_id: str
    entity_names: list[str]
    entity_types: np.ndarray
    facts: np.ndarray
    split: str = "train"
    mentions: list[Mention] = field(default_factory=list)
    tokens: list[str] | None = None
    sentence_starts: list[int] | None = None
    text: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.doc_id = str(self.doc_id)
        self.entity_names = [str(n) for n in self.entity_names]
        self.entity_types = np.asarray(self.entity_types, dtype=np.int64).reshape(-1)
        self.facts = canonical_facts(self.facts)
        if len(self.entity_names) != len(self.entity_types):
            raise DataError(
                f"{len(self.entity_names)} entity names but {len(self.entity_types)} entity types",
                doc_id=self.doc_id,
            )

    @property
    def num_entities(self) -> int:
        return int(self.entity_types.shape[0])

    @property
    def num_facts(self) -> int:
        return int(self.facts.shape[0])

    def sentences(self) -> list[list[str]]:
        """Tokens grouped by sentence (empty list when the document has no tokens)."""
        if self.tokens is None:
            return []
        starts = list(self.sentence_starts or [0])
        bounds = [*starts[1:], len(self.tokens)]
        return [self.tokens[s:e] for s, e in zip(starts, bounds)]

    def mentions_of(self, entity: int) -> list[Mention]:
        return [m for m in self.mentions if m.entity == entity]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Document):
            return NotImplemented
        return (
            self.doc_id == other.doc_id
            and self.entity_names == other.entity_names
            and np.array_equal(self.entity_types, other.entity_types)
            and np.array_equal(self.facts, other.facts)
            and self.split == other.split
            and self.mentions == other.mentions
            and self.tokens == other.tokens
            and (self.sentence_starts or [0]) == (other.sentence_starts or [0])
            and self.text == other.text
        )

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class SkippedDocument:
    """A document left out under ``skip_bad=True``: where it was and why."""

    file: str
    doc_id: str
    reason: str


@dataclass
class LoadReport:
    """What a reader did besides copying: counts by reason, never silent.

    ``dropped``: items removed (e.g. ``concept_without_mention``, ``relation_to_dropped_concept``,
    ``duplicate_fact``). ``resolved``: items kept after a documented rule (e.g. ``multi_type_last_tag``,
    ``untyped_as_other``). ``skipped``: whole documents skipped as bad input (only with ``skip_bad``).
    """

    source: str = ""
    format: str = ""
    dropped: Counter = field(default_factory=Counter)
    resolved: Counter = field(default_factory=Counter)
    skipped: list[SkippedDocument] = field(default_factory=list)

    def skip(self, file: str, doc_id: str, reason: str) -> None:
        self.skipped.append(SkippedDocument(str(file), str(doc_id), reason))

    def merge(self, other: LoadReport) -> None:
        self.dropped.update(other.dropped)
        self.resolved.update(other.resolved)
        self.skipped.extend(other.skipped)

    def lines(self) -> list[str]:
        out = [f"source: {self.source} (format {self.format})"]
        for key, counter in (("dropped", self.dropped), ("resolved", self.resolved)):
            for reason, n in sorted(counter.items()):
                out.append(f"{key} {reason}: {n}")
        if self.skipped:
            out.append(f"skipped bad documents: {len(self.skipped)}")
            out.extend(f"  {s.file} [{s.doc_id}]: {s.reason}" for s in self.skipped)
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


@dataclass
class Corpus:
    """Documents with their shared relation and entity-type vocabularies."""

    documents: list[Document]
    relations: Vocab
    entity_types: Vocab
    name: str = ""
    report: LoadReport = field(default_factory=LoadReport)
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.documents)

    def __iter__(self) -> Iterator[Document]:
        return iter(self.documents)

    @property
    def splits(self) -> dict[str, int]:
        """``split name -> number of documents``, in first-seen order."""
        return dict(Counter(d.split for d in self.documents))

    def split(self, name: str) -> list[Document]:
        return [d for d in self.documents if d.split == name]

    def by_id(self, doc_id: str) -> Document:
        for d in self.documents:
            if d.doc_id == doc_id:
                return d
        raise KeyError(f"no document {doc_id!r} in corpus {self.name!r}")

    def relation_counts(self) -> np.ndarray:
        """(R,) int64: number of facts per relation over all documents."""
        counts = np.zeros(len(self.relations), dtype=np.int64)
        for d in self.documents:
            np.add.at(counts, d.facts[:, 1], 1)
        return counts

    def type_counts(self) -> np.ndarray:
        """(T,) int64: number of entities per coarse type."""
        counts = np.zeros(len(self.entity_types), dtype=np.int64)
        for d in self.documents:
            np.add.at(counts, d.entity_types, 1)
        return counts

    def type_pair_counts(self) -> np.ndarray:
        """(T, T) int64: number of facts per (head type, tail type)."""
        t = len(self.entity_types)
        counts = np.zeros((t, t), dtype=np.int64)
        for d in self.documents:
            if d.num_facts:
                np.add.at(counts, (d.entity_types[d.facts[:, 0]], d.entity_types[d.facts[:, 2]]), 1)
        return counts

    def validate(self) -> None:
        validate_corpus(self)


def validate_document(doc: Document, num_relations: int, num_entity_types: int, *, file: str = "") -> None:
    """Raise :class:`DataError` (naming ``file`` and ``doc.doc_id``) unless ``doc`` is internally consistent.

    Checks: type ids in ``[0, T)``; fact entity ids in ``[0, N)`` and relation ids in ``[0, R)``; mention
    entity ids in range, ``0 <= start < end`` and ``end`` within the tokens / text when those are present;
    sentence ids within ``sentence_starts``.
    """

    def fail(msg: str) -> NoReturn:
        raise DataError(msg, file=file or None, doc_id=doc.doc_id)

    n = doc.num_entities
    if n and (doc.entity_types.min() < 0 or doc.entity_types.max() >= num_entity_types):
        bad = int(doc.entity_types[(doc.entity_types < 0) | (doc.entity_types >= num_entity_types)][0])
        fail(f"entity type id {bad} out of range [0, {num_entity_types})")
    if doc.num_facts:
        ents = doc.facts[:, [0, 2]]
        if ents.min() < 0 or ents.max() >= n:
            bad = int(ents[(ents < 0) | (ents >= n)][0])
            fail(f"fact entity id {bad} out of range [0, {n})")
        rels = doc.facts[:, 1]
        if rels.min() < 0 or rels.max() >= num_relations:
            bad = int(rels[(rels < 0) | (rels >= num_relations)][0])
            fail(f"relation id {bad} out of range [0, {num_relations})")
    num_sents = len(doc.sentence_starts) if doc.sentence_starts else 1
    for m in doc.mentions:
        if not 0 <= m.entity < n:
            fail(f"mention {m.text!r} refers to entity {m.entity}, out of range [0, {n})")
        if m.start < 0 or m.end <= m.start:
            fail(f"mention {m.text!r} has offsets [{m.start}, {m.end}) (need 0 <= start < end)")
        if m.unit == "token" and doc.tokens is not None and m.end > len(doc.tokens):
            fail(f"mention {m.text!r} ends at token {m.end}, beyond the {len(doc.tokens)} tokens")
        if m.unit == "char" and doc.text is not None and m.end > len(doc.text):
            fail(f"mention {m.text!r} ends at char {m.end}, beyond the text ({len(doc.text)} chars)")
        if doc.tokens is not None and not 0 <= m.sent < num_sents:
            fail(f"mention {m.text!r} has sentence id {m.sent}, out of range [0, {num_sents})")
    if doc.sentence_starts is not None and doc.tokens is not None:
        starts = doc.sentence_starts
        if starts[:1] != [0] or any(b < a for a, b in zip(starts, starts[1:])) or starts[-1] > len(doc.tokens):
            fail(f"sentence_starts {starts[:5]}... are not increasing offsets starting at 0")


def validate_corpus(corpus: Corpus) -> None:
    """Validate every document and reject duplicate document ids."""
    seen: set[str] = set()
    for doc in corpus.documents:
        if doc.doc_id in seen:
            raise DataError(f"duplicate document id {doc.doc_id!r} in corpus {corpus.name!r}", doc_id=doc.doc_id)
        seen.add(doc.doc_id)
        validate_document(doc, len(corpus.relations), len(corpus.entity_types), file=doc.meta.get("file", ""))


def ensure_unique_ids(docs: Sequence[Document], report: LoadReport, skip_bad: bool) -> list[Document]:
    """Drop (``skip_bad``) or reject later documents whose id repeats an earlier one."""
    seen: dict[str, str] = {}
    out: list[Document] = []
    for doc in docs:
        file = doc.meta.get("file", "")
        if doc.doc_id in seen:
            msg = f"duplicate document id (first seen in {seen[doc.doc_id]})"
            if not skip_bad:
                raise DataError(msg, file=file, doc_id=doc.doc_id)
            report.skip(file, doc.doc_id, msg)
            continue
        seen[doc.doc_id] = file
        out.append(doc)
    return out

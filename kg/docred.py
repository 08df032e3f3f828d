"""Read and write the DocRED / LogiRE "docred-style" format (spec §5.1), for exchange with LogiRE/ATLOP.

Layout (LogiRE ``DWIE/data/docred-style``)::

    DIR/train_annotated.json   DIR/dev.json   DIR/test.json     (optionally .json.gz)
    DIR/meta/rel2id.json       {"Na": 0, "<relation>": 1, ...}
    DIR/meta/ner2id.json       {"type::location": 0, ...}
    DIR/ref/train_annotated.fact   [[head mention name, tail mention name, relation], ...]  (Ign F1)

Each file is a JSON list of documents ``{title, vertexSet, labels, sents}``: ``sents`` is a list of token
lists; ``vertexSet[i]`` lists entity ``i``'s mentions ``{name, pos: [start, end), sent_id, type}`` with
token offsets local to sentence ``sent_id``; ``labels`` are ``{h, t, r, evidence}`` with ``r`` a relation
name (a key of ``rel2id.json``). Split names: ``train_annotated`` → ``"train"``, otherwise the file stem.

Rules (counted in ``Corpus.report``): the entity type is its first mention's type (LogiRE's DWIE files have
11 entities whose mentions disagree: ``resolved['mixed_mention_types_first']``); repeated labels are kept
once (``dropped['duplicate_fact']``); the type prefix ``type::`` is stripped on reading and restored on
writing (``Corpus.meta['type_prefix']``).
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from kg.documents import (
    Corpus,
    DataError,
    Document,
    LoadReport,
    Mention,
    UnknownNameError,
    Vocab,
    canonical_facts,
    ensure_unique_ids,
    validate_document,
)

__all__ = [
    "SPLIT_FILES",
    "split_of_file",
    "docred_files",
    "is_docred_source",
    "document_from_docred",
    "document_to_docred",
    "read_docred",
    "write_docred",
]

#: Conventional file stem per split (LogiRE / DocRED naming).
SPLIT_FILES = {"train": "train_annotated", "dev": "dev", "test": "test"}
_SPLIT_ORDER = {"train": 0, "dev": 1, "test": 2}
_TYPE_PREFIX = "type::"
#: JSON files that may sit beside the split files but hold no documents (DocRED's rel_info, our manifest).
_NOT_SPLITS = {"synthetic.json", "rel_info.json", "rel2id.json", "ner2id.json", "word2id.json", "char2id.json"}


def split_of_file(path: Path) -> str:
    """``train_annotated.json(.gz)`` → ``"train"``; other files → their stem."""
    stem = path.name.removesuffix(".gz").removesuffix(".json")
    return {v: k for k, v in SPLIT_FILES.items()}.get(stem, stem)


def docred_files(path: Path) -> list[Path]:
    """The split files of a docred folder (or ``[path]`` for one file), in train, dev, test, other order."""
    path = Path(path)
    if path.is_file():
        return [path]
    files = [
        p
        for p in path.iterdir()
        if p.is_file() and p.name.endswith((".json", ".json.gz")) and p.name.removesuffix(".gz") not in _NOT_SPLITS
    ]
    return sorted(files, key=lambda p: (_SPLIT_ORDER.get(split_of_file(p), 3), p.name))


def is_docred_source(path: Path) -> bool:
    """True when ``path`` is a docred-style file or a folder holding one (a JSON list of {title, vertexSet})."""
    path = Path(path)
    if path.is_dir() and not docred_files(path):
        return False
    if not path.exists():
        return False
    for f in docred_files(path)[:3]:
        try:
            with _open(f) as fh:
                head = fh.read(2048)
        except (UnicodeDecodeError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise DataError(_unreadable(exc), file=str(f)) from None
        except OSError:
            continue
        if head.lstrip().startswith("[") and ('"vertexSet"' in head or '"title"' in head or head.strip() == "[]"):
            return True
    return False


def _unreadable(exc: BaseException) -> str:
    """What a decoding error means for the user: binary/non-UTF-8 text or a damaged gzip stream."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte {exc.start}: {exc.reason}); expected a JSON list of documents"
    return f"corrupt or truncated gzip data ({exc or type(exc).__name__}); expected a JSON list of documents"


def _open(path: Path, mode: str = "rt"):
    if path.name.endswith(".gz"):
        if "w" in mode:
            return gzip.open(path, mode, encoding="utf-8", compresslevel=6)
        return gzip.open(path, mode, encoding="utf-8")
    return path.open(mode, encoding="utf-8")


def _strip_type(name: str) -> str:
    return name[len(_TYPE_PREFIX) :] if name.startswith(_TYPE_PREFIX) else name


def _find_meta(path: Path, name: str) -> Path | None:
    base = path if path.is_dir() else path.parent
    for cand in (base / "meta" / name, base.parent / "meta" / name):
        if cand.is_file():
            return cand
    return None


def document_from_docred(
    obj: Any, *, file: str, split: str, report: LoadReport, type_vocab: Vocab | None, position: int
) -> tuple[Document, list[tuple[int, str, int]], list[str]]:
    """Convert one docred item; returns the document (facts filled later), named facts, raw type names.

    Raises :class:`DataError` naming ``file`` and the title on structural errors.
    """
    doc_id = str(obj.get("title", f"#{position}")) if isinstance(obj, dict) else f"#{position}"

    def fail(msg: str) -> NoReturn:
        raise DataError(msg, file=file, doc_id=doc_id)

    if not isinstance(obj, dict):
        fail(f"item {position} is not a JSON object")
    for key in ("vertexSet", "sents"):
        if not isinstance(obj.get(key), list):
            fail(f"missing or non-list field {key!r}")
    sents = obj["sents"]
    if not all(isinstance(s, list) for s in sents):
        fail("'sents' must be a list of token lists")
    starts: list[int] = []
    tokens: list[str] = []
    for s in sents:
        starts.append(len(tokens))
        tokens.extend(str(t) for t in s)

    names: list[str] = []
    raw_types: list[str] = []
    mentions: list[Mention] = []
    for i, vertex in enumerate(obj["vertexSet"]):
        if not isinstance(vertex, list) or not vertex:
            fail(f"entity {i} has no mentions (vertexSet[{i}] must be a non-empty list)")
        vtypes = []
        for m in vertex:
            try:
                name, (s, e), sent = str(m["name"]), m["pos"], int(m["sent_id"])
                s, e = int(s), int(e)
            except (KeyError, TypeError, ValueError):
                fail(f"entity {i}: mention lacks name/pos/sent_id: {str(m)[:80]}")
            if not 0 <= sent < len(sents):
                fail(f"entity {i}: mention {name!r} has sent_id {sent}, out of range [0, {len(sents)})")
            if not 0 <= s < e <= len(sents[sent]):
                fail(
                    f"entity {i}: mention {name!r} has pos [{s}, {e}) outside sentence {sent} "
                    f"({len(sents[sent])} tokens)"
                )
            vtypes.append(str(m.get("type", "")))
            mentions.append(
                Mention(entity=i, start=starts[sent] + s, end=starts[sent] + e, text=name, sent=sent, unit="token")
            )
        if len(set(vtypes)) > 1:
            report.resolved["mixed_mention_types_first"] += 1
        names.append(str(vertex[0]["name"]))
        raw_types.append(_strip_type(vtypes[0]))

    n = len(names)
    facts: list[tuple[int, str, int]] = []
    evidence: dict[tuple[int, str, int], list[int]] = {}
    for lab in obj.get("labels", []) or []:
        try:
            h, t, r = int(lab["h"]), int(lab["t"]), lab["r"]
        except (KeyError, TypeError, ValueError):
            fail(f"label lacks h/t/r: {str(lab)[:80]}")
        if not isinstance(r, str):
            fail(f"label relation must be a name (a key of rel2id.json), got {r!r}")
        for e in (h, t):
            if not 0 <= e < n:
                fail(f"label {r!r} refers to entity {e}, out of range [0, {n})")
        fact = (h, r, t)
        if fact in evidence:
            report.dropped["duplicate_fact"] += 1
            continue
        evidence[fact] = list(lab.get("evidence", []) or [])
        facts.append(fact)

    if type_vocab is not None:
        try:
            types = [type_vocab.index(t) for t in raw_types]
        except UnknownNameError as exc:
            fail(exc.reason)
    else:
        types = [0] * n
    doc = Document(
        doc_id=doc_id,
        entity_names=names,
        entity_types=np.asarray(types, dtype=np.int64),
        facts=np.zeros((0, 3), dtype=np.int64),
        split=split,
        mentions=mentions,
        tokens=tokens,
        sentence_starts=starts if starts else [0],
        text=None,
        meta={"file": file, "evidence_by_name": evidence},
    )
    return doc, facts, raw_types


def read_docred(
    path: str | Path, *, relations: Vocab | None = None, entity_types: Vocab | None = None, skip_bad: bool = False
) -> Corpus:
    """Read a docred-style folder (all split files) or one file into a :class:`Corpus`.

    Vocabularies default to ``meta/rel2id.json`` (``"Na"`` removed) and ``meta/ner2id.json`` (``BLANK``
    removed, ``type::`` stripped) beside the data, else to the sorted names found in the data. With a
    vocabulary, an unknown relation/type name is a :class:`DataError` naming file and title. A file that is
    not valid JSON cannot be split into documents and always raises.
    """
    path = Path(path)
    report = LoadReport(source=str(path), format="docred")
    files = docred_files(path)
    if not files:
        raise DataError(f"no docred-style files (*.json, *.json.gz) in {path}")
    if relations is None and (meta := _find_meta(path, "rel2id.json")) is not None:
        relations = Vocab.from_mapping(json.loads(meta.read_text(encoding="utf-8")), drop=("Na",), kind="relation")
    if entity_types is None and (meta := _find_meta(path, "ner2id.json")) is not None:
        entity_types = Vocab.from_mapping(
            json.loads(meta.read_text(encoding="utf-8")),
            drop=("BLANK", "blank"),
            strip_prefix=_TYPE_PREFIX,
            kind="entity type",
        )

    parsed: list[tuple[Document, list[tuple[int, str, int]], list[str]]] = []
    prefixed = False
    for f in files:
        try:
            with _open(f) as fh:
                items = json.load(fh)
        except (UnicodeDecodeError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise DataError(_unreadable(exc), file=str(f)) from None
        except (json.JSONDecodeError, OSError) as exc:
            raise DataError(f"malformed JSON (no document can be read from this file): {exc}", file=str(f)) from None
        if not isinstance(items, list):
            raise DataError(f"expected a JSON list of documents, got {type(items).__name__}", file=str(f))
        prefixed = prefixed or any(
            str(m.get("type", "")).startswith(_TYPE_PREFIX)
            for obj in items[:1]
            if isinstance(obj, dict)
            for vertex in obj.get("vertexSet", [])
            if isinstance(vertex, list)
            for m in vertex
            if isinstance(m, dict)
        )
        for pos, obj in enumerate(items):
            local = LoadReport()
            try:
                parsed.append(
                    document_from_docred(
                        obj, file=str(f), split=split_of_file(f), report=local, type_vocab=entity_types, position=pos
                    )
                )
            except DataError as exc:
                if not skip_bad:
                    raise
                report.skip(str(f), exc.doc_id or f"#{pos}", exc.reason)
                continue
            report.merge(local)

    if entity_types is None:
        entity_types = Vocab(tuple(sorted({t for _, _, ts in parsed for t in ts})), kind="entity type")
    if relations is None:
        relations = Vocab(tuple(sorted({r for _, facts, _ in parsed for _, r, _ in facts})), kind="relation")
    docs: list[Document] = []
    for doc, named, raw_types in parsed:
        file = doc.meta["file"]
        try:
            doc.entity_types = np.asarray([entity_types.index(t) for t in raw_types], dtype=np.int64)
            ids = [(h, relations.index(r), t) for h, r, t in named]
        except UnknownNameError as exc:
            if not skip_bad:
                raise DataError(exc.reason, file=file, doc_id=doc.doc_id) from None
            report.skip(file, doc.doc_id, exc.reason)
            continue
        doc.facts = canonical_facts(ids)
        evidence = doc.meta.pop("evidence_by_name")
        doc.meta["evidence"] = {(h, relations.index(r), t): ev for (h, r, t), ev in evidence.items()}
        validate_document(doc, len(relations), len(entity_types), file=file)
        docs.append(doc)
    docs = ensure_unique_ids(docs, report, skip_bad)
    return Corpus(
        documents=docs,
        relations=relations,
        entity_types=entity_types,
        name=path.name,
        report=report,
        meta={"type_prefix": _TYPE_PREFIX if prefixed else "", "format": "docred"},
    )


def document_to_docred(doc: Document, relations: Vocab, entity_types: Vocab, type_prefix: str = "") -> dict[str, Any]:
    """One document as a docred item. Needs tokens and token mentions (every entity at least one)."""
    if doc.tokens is None:
        raise DataError(
            "has no tokens: the docred format needs tokenised text (DWIE annotations without the "
            "article text cannot be written as docred; see `fednsl data prepare dwie`)",
            doc_id=doc.doc_id,
        )
    starts = list(doc.sentence_starts or [0])
    vertex: list[list[dict[str, Any]]] = [[] for _ in range(doc.num_entities)]
    for m in doc.mentions:
        if m.unit != "token":
            raise DataError(f"mention {m.text!r} is in {m.unit} offsets; docred needs token offsets", doc_id=doc.doc_id)
        base = starts[m.sent]
        vertex[m.entity].append(
            {
                "name": m.text,
                "pos": [m.start - base, m.end - base],
                "sent_id": m.sent,
                "type": type_prefix + entity_types[int(doc.entity_types[m.entity])],
            }
        )
    for i, v in enumerate(vertex):
        if not v:
            raise DataError(
                f"entity {i} ({doc.entity_names[i]!r}) has no mention; docred needs one per entity", doc_id=doc.doc_id
            )
    evidence = doc.meta.get("evidence", {})
    labels = [
        {"h": int(h), "t": int(t), "r": relations[int(r)], "evidence": list(evidence.get((int(h), int(r), int(t)), []))}
        for h, r, t in doc.facts
    ]
    return {"title": doc.doc_id, "vertexSet": vertex, "labels": labels, "sents": doc.sentences()}


def _fact_ref(docs: Iterable[Document], relations: Vocab) -> list[list[str]]:
    """DocRED/LogiRE ``ref/train_annotated.fact``: every (head mention name, tail mention name, relation)."""
    out: set[tuple[str, str, str]] = set()
    for doc in docs:
        names: dict[int, set[str]] = {}
        for m in doc.mentions:
            names.setdefault(m.entity, set()).add(m.text)
        for h, r, t in doc.facts:
            for n1 in names.get(int(h), ()):
                for n2 in names.get(int(t), ()):
                    out.add((n1, n2, relations[int(r)]))
    return [list(x) for x in sorted(out)]


def write_docred(
    corpus: Corpus,
    directory: str | Path,
    *,
    compress: bool = False,
    type_prefix: str | None = None,
    fact_ref: bool = True,
) -> list[Path]:
    """Write ``corpus`` as a docred-style folder (one file per split + ``meta/`` + ``ref/``).

    ``type_prefix`` defaults to ``corpus.meta['type_prefix']`` (``"type::"`` for DWIE-derived data).
    Returns the written split files.
    """
    directory = Path(directory)
    prefix = corpus.meta.get("type_prefix", "") if type_prefix is None else type_prefix
    (directory / "meta").mkdir(parents=True, exist_ok=True)
    by_split: dict[str, list[Document]] = {}
    for doc in corpus.documents:
        by_split.setdefault(doc.split, []).append(doc)
    written = []
    for split, docs in by_split.items():
        items = []
        for doc in docs:
            try:
                items.append(document_to_docred(doc, corpus.relations, corpus.entity_types, prefix))
            except DataError as exc:
                raise DataError(exc.reason, file=doc.meta.get("file") or str(directory), doc_id=doc.doc_id) from None
        name = SPLIT_FILES.get(split, split) + (".json.gz" if compress else ".json")
        target = directory / name
        with _open(target, "wt") as fh:
            json.dump(items, fh, ensure_ascii=False)
        written.append(target)
    rel2id = {"Na": 0, **{name: i + 1 for i, name in enumerate(corpus.relations.names)}}
    ner2id = {prefix + name: i for i, name in enumerate(corpus.entity_types.names)}
    (directory / "meta" / "rel2id.json").write_text(json.dumps(rel2id, ensure_ascii=False), encoding="utf-8")
    (directory / "meta" / "ner2id.json").write_text(json.dumps(ner2id, ensure_ascii=False), encoding="utf-8")
    if fact_ref and "train" in by_split:
        (directory / "ref").mkdir(exist_ok=True)
        ref = _fact_ref(by_split["train"], corpus.relations)
        (directory / "ref" / "train_annotated.fact").write_text(json.dumps(ref, ensure_ascii=False), encoding="utf-8")
    return written

"""Reader for the official DWIE annotation format (klimzaporojets/DWIE, GPL-3.0; spec §5.1, §7).

One JSON object per document: ``id``, ``tags`` (``["all", "train"|"test"]``), ``mentions`` [{begin, end,
text, concept, ...}] (character offsets into the article text, which is only present as ``content`` after
the publisher download), ``concepts`` [{concept, text, tags: ["type::person", ...]}] and ``relations``
[{s, p, o}] over concept ids. The reader accepts the distributed ``dwie_annos.tar.gz``, a folder of
``DW_*.json`` files (``data/annos`` or ``data/annos_with_content``), a repository checkout, or one file.

Rules (each application is counted in ``Corpus.report``):

- entities = concepts with at least one mention (``dropped['concept_without_mention']``); relations
  touching a dropped concept are dropped (``dropped['relation_to_dropped_concept']``), repeated
  ``(s, p, o)`` triples are kept once (``dropped['duplicate_fact']``); entities keep concept-id order
  (this matches LogiRE's docred-style files: same entities, same order, same labels);
- coarse type = the concept's single tag among the ten coarse types (:data:`DWIE_COARSE_TYPES`). When
  several are present the LAST one in tag order wins (DWIE tags are sorted; this reproduces LogiRE's types
  on all 17 multi-tag entities of its dev/test files) — ``resolved['multi_type_last_tag']``; when none is
  present the entity gets ``untyped`` (default ``"other"``, the catch-all) — ``resolved['untyped_as_other']``
  (LogiRE's script leaves these to a stale variable, i.e. effectively arbitrary);
- split = ``"train"`` or ``"test"`` from the document tags; relation vocabulary from a ``meta/rel2id.json``
  found beside the data (order of its ids, ``"Na"`` removed; an unknown relation name is then an error),
  else :data:`DWIE_RELATIONS` (LogiRE's order) when the data uses only DWIE's relations, else the sorted
  relation names found in the data (any relation set works).
"""

from __future__ import annotations

import json
import re
import tarfile
import zlib
from collections.abc import Iterator
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
    "DWIE_COARSE_TYPES",
    "DWIE_RELATIONS",
    "tokenize_documents",
    "coarse_type",
    "document_from_dwie",
    "iter_dwie_json",
    "find_meta",
    "read_dwie",
    "is_dwie_source",
]

#: The ten coarse entity types, in the order of LogiRE's ``meta/ner2id.json`` (spec §4).
DWIE_COARSE_TYPES: tuple[str, ...] = (
    "location",
    "organization",
    "person",
    "misc",
    "event",
    "ethnicity",
    "time",
    "role",
    "money",
    "other",
)

#: The 65 DWIE relations in the id order of LogiRE's ``meta/rel2id.json`` ("Na" removed; spec §4).
DWIE_RELATIONS: tuple[str, ...] = (
    "citizen_of",
    "in0",
    "in0-x",
    "gpe0",
    "member_of",
    "agent_of",
    "citizen_of-x",
    "head_of_gov",
    "institution_of",
    "part_of",
    "based_in0",
    "based_in0-x",
    "head_of",
    "minister_of",
    "minister_of-x",
    "based_in2",
    "product_of",
    "head_of_gov-x",
    "agent_of-x",
    "head_of_state",
    "head_of_state-x",
    "agency_of",
    "agency_of-x",
    "ministry_of",
    "in2",
    "player_of",
    "event_in0",
    "mayor_of",
    "award_received",
    "parent_of",
    "spouse_of",
    "child_of",
    "appears_in",
    "vs",
    "won_vs",
    "spokesperson_of",
    "in1",
    "based_in1",
    "based_in1-x",
    "gpe1",
    "created_by",
    "law_of",
    "coach_of",
    "event_in2",
    "signed_by",
    "based_in2-x",
    "present_in0",
    "event_in",
    "directed_by",
    "character_in",
    "plays_in",
    "is_meeting",
    "sanctions",
    "sibling",
    "advisor_of",
    "brand_of",
    "event_in0-x",
    "artifact_of",
    "gpe2",
    "played_by",
    "artifact_of-x",
    "founder_of",
    "royalty_of",
    "event_in1",
    "publisher",
)

_DOC_FILE = re.compile(r"(^|/)DW_[^/]*\.json$")


def coarse_type(
    tags: list[str], coarse: tuple[str, ...] = DWIE_COARSE_TYPES, untyped: str = "other"
) -> tuple[str, str]:
    """``(type, how)`` for a concept's tag list; ``how`` is ``"single"``, ``"multi"`` or ``"untyped"``."""
    found = [t[6:] for t in tags if t.startswith("type::") and t[6:] in coarse]
    if len(found) == 1:
        return found[0], "single"
    if found:
        return found[-1], "multi"
    return untyped, "untyped"


def find_meta(path: Path, name: str) -> Path | None:
    """``meta/<name>`` beside the data: in ``path``, its parent, or a ``docred_style`` sibling folder."""
    base = path if path.is_dir() else path.parent
    for cand in (
        base / "meta" / name,
        base / "docred_style" / "meta" / name,
        base.parent / "meta" / name,
        base.parent / "docred_style" / "meta" / name,
    ):
        if cand.is_file():
            return cand
    return None


def is_dwie_source(path: Path) -> bool:
    """True when ``path`` looks like DWIE annotations (tar.gz, folder of DW_*.json, checkout, one file)."""
    path = Path(path)
    if path.is_file():
        if path.name.endswith((".tar.gz", ".tgz")):
            return True
        if path.suffix == ".json":
            try:
                obj = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return path.name.startswith("DW_")
            return isinstance(obj, dict) and "concepts" in obj
        return False
    if not path.is_dir():
        return False
    if (path / "dwie_annos.tar.gz").is_file():
        return True
    return _annos_dir(path) is not None


def _annos_dir(path: Path) -> Path | None:
    """The folder holding ``DW_*.json`` files under ``path`` (content version preferred)."""
    for cand in (
        path / "data" / "annos_with_content",
        path / "annos_with_content",
        path / "data" / "annos",
        path / "annos",
        path,
    ):
        if cand.is_dir() and any(cand.glob("DW_*.json")):
            return cand
    return None


def iter_dwie_json(path: str | Path) -> Iterator[tuple[str, Any]]:
    """Yield ``(file name, parsed JSON or the JSONDecodeError)`` for every DWIE document under ``path``."""
    path = Path(path)
    if path.is_dir() and (path / "dwie_annos.tar.gz").is_file() and _annos_dir(path) is None:
        path = path / "dwie_annos.tar.gz"
    if path.is_file() and path.name.endswith((".tar.gz", ".tgz", ".tar")):
        # Read members in archive order (seeking backwards in a gzip stream re-decompresses from the start),
        # then yield them sorted by name so the order does not depend on how the archive was packed.
        raw: list[tuple[str, bytes]] = []
        try:
            with tarfile.open(path, mode="r:*") as tar:
                for m in tar:
                    if m.isfile() and _DOC_FILE.search(m.name):
                        fh = tar.extractfile(m)
                        assert fh is not None
                        raw.append((f"{path}:{m.name}", fh.read()))
        except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
            raise DataError(
                f"truncated or corrupt archive after {len(raw)} documents "
                f"({type(exc).__name__}: {exc or 'unexpected end of data'}); expected a complete "
                "tar(.gz) of DW_*.json files",
                file=str(path),
            ) from None
        for name, data in sorted(raw):
            yield name, _parse(data, name)
        return
    if path.is_file():
        yield str(path), _parse(path.read_bytes(), str(path))
        return
    folder = _annos_dir(path)
    if folder is None:
        raise DataError(f"no DWIE annotations (dwie_annos.tar.gz or DW_*.json files) under {path}")
    for f in sorted(folder.glob("DW_*.json")):
        yield str(f), _parse(f.read_bytes(), str(f))


def _parse(raw: bytes, name: str) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return exc


def _doc_id_from_file(name: str) -> str:
    return Path(name.rsplit(":", 1)[-1]).stem


def document_from_dwie(
    obj: dict[str, Any], *, file: str, type_vocab: Vocab, report: LoadReport, untyped: str = "other"
) -> tuple[Document, list[tuple[int, str, int]]]:
    """Convert one DWIE JSON object; returns the document (without facts) and its facts with relation names.

    Counts dropped concepts/relations and type resolutions into ``report``. Raises :class:`DataError`
    (naming ``file`` and the document id) on structural errors.
    """
    doc_id = str(obj.get("id") or _doc_id_from_file(file)) if isinstance(obj, dict) else _doc_id_from_file(file)

    def fail(msg: str) -> NoReturn:
        raise DataError(msg, file=file, doc_id=doc_id)

    if not isinstance(obj, dict):
        fail(f"expected a JSON object, got {type(obj).__name__}")
    for key in ("tags", "mentions", "concepts", "relations"):
        if not isinstance(obj.get(key), list):
            fail(f"missing or non-list field {key!r}")
    tags = obj["tags"]
    splits = [t for t in ("train", "test") if t in tags]
    if len(splits) != 1:
        fail(f"tags {tags} must contain exactly one of 'train' / 'test'")
    content = obj.get("content")

    concepts: dict[int, dict[str, Any]] = {}
    for c in obj["concepts"]:
        if not isinstance(c, dict) or not isinstance(c.get("concept"), int):
            fail(f"concept without an integer 'concept' id: {str(c)[:80]}")
        if c["concept"] in concepts:
            fail(f"duplicate concept id {c['concept']}")
        concepts[c["concept"]] = c

    mentioned: dict[int, list[dict[str, Any]]] = {}
    for m in obj["mentions"]:
        if not isinstance(m, dict):
            fail(f"mention is not an object: {str(m)[:80]}")
        try:
            cid, begin, end, text = m["concept"], int(m["begin"]), int(m["end"]), str(m["text"])
        except (KeyError, TypeError, ValueError):
            fail(f"mention lacks concept/begin/end/text: {str(m)[:80]}")
        if cid not in concepts:
            fail(f"mention {text!r} refers to concept {cid}, which is not among the {len(concepts)} concepts")
        if begin < 0 or end <= begin:
            fail(f"mention {text!r} has offsets [{begin}, {end}) (need 0 <= begin < end)")
        if content is not None:
            if end > len(content):
                fail(f"mention {text!r} ends at char {end}, beyond the text ({len(content)} chars)")
            if content[begin:end] != text:
                report.resolved["mention_text_differs_from_content"] += 1
        elif end - begin != len(text):
            fail(f"mention {text!r} spans [{begin}, {end}) but its text has {len(text)} chars")
        mentioned.setdefault(cid, []).append(m)

    kept = sorted(mentioned)
    report.dropped["concept_without_mention"] += len(concepts) - len(kept)
    index = {cid: i for i, cid in enumerate(kept)}
    names, types = [], []
    for cid in kept:
        c = concepts[cid]
        ctype, how = coarse_type(list(c.get("tags") or []), untyped=untyped)
        if how == "multi":
            report.resolved["multi_type_last_tag"] += 1
        elif how == "untyped":
            report.resolved[f"untyped_as_{untyped}"] += 1
        types.append(type_vocab.index(ctype))
        names.append(str(c.get("text") or mentioned[cid][0]["text"]))

    mentions = [
        Mention(
            entity=index[m["concept"]],
            start=int(m["begin"]),
            end=int(m["end"]),
            text=str(m["text"]),
            sent=0,
            unit="char",
        )
        for m in obj["mentions"]
    ]
    facts: list[tuple[int, str, int]] = []
    seen: set[tuple[int, str, int]] = set()
    for r in obj["relations"]:
        if not isinstance(r, dict) or not {"s", "p", "o"} <= set(r):
            fail(f"relation lacks s/p/o: {str(r)[:80]}")
        s, p, o = r["s"], r["p"], r["o"]
        for end_id in (s, o):
            if end_id not in concepts:
                fail(f"relation {p!r} refers to concept {end_id}, which is not among the {len(concepts)} concepts")
        if s not in index or o not in index:
            report.dropped["relation_to_dropped_concept"] += 1
            continue
        fact = (index[s], str(p), index[o])
        if fact in seen:
            report.dropped["duplicate_fact"] += 1
            continue
        seen.add(fact)
        facts.append(fact)

    doc = Document(
        doc_id=doc_id,
        entity_names=names,
        entity_types=np.asarray(types, dtype=np.int64),
        facts=np.zeros((0, 3), dtype=np.int64),
        split=splits[0],
        mentions=mentions,
        tokens=None,
        text=content,
        meta={"file": file, "tags": list(tags)},
    )
    return doc, facts


def read_dwie(
    path: str | Path,
    *,
    relations: Vocab | None = None,
    entity_types: Vocab | None = None,
    skip_bad: bool = False,
    untyped: str = "other",
) -> Corpus:
    """Read DWIE annotations into a :class:`Corpus` (documents sorted by id).

    ``relations``: the relation vocabulary; by default ``meta/rel2id.json`` beside the data, else
    :data:`DWIE_RELATIONS` when the data uses only those, else the sorted relation names found.
    ``entity_types``: default ``meta/ner2id.json`` beside the data, else :data:`DWIE_COARSE_TYPES`.
    ``skip_bad``: skip (and count in ``report.skipped``) documents with bad input instead of raising
    :class:`DataError`.
    """
    path = Path(path)
    report = LoadReport(source=str(path), format="dwie")
    if relations is None and (meta := find_meta(path, "rel2id.json")) is not None:
        relations = Vocab.from_mapping(json.loads(meta.read_text()), drop=("Na",), kind="relation")
    if entity_types is None:
        meta = find_meta(path, "ner2id.json")
        if meta is not None:
            entity_types = Vocab.from_mapping(
                json.loads(meta.read_text()), drop=("blank", "BLANK"), strip_prefix="type::", kind="entity type"
            )
        else:
            entity_types = Vocab(DWIE_COARSE_TYPES, kind="entity type")

    parsed: list[tuple[Document, list[tuple[int, str, int]]]] = []
    for file, obj in iter_dwie_json(path):
        local = LoadReport()
        try:
            if isinstance(obj, Exception):
                raise DataError(f"malformed JSON: {obj}", file=file, doc_id=_doc_id_from_file(file))
            parsed.append(document_from_dwie(obj, file=file, type_vocab=entity_types, report=local, untyped=untyped))
        except DataError as exc:
            if not skip_bad:
                raise
            report.skip(file, exc.doc_id or _doc_id_from_file(file), exc.reason)
            continue
        report.merge(local)

    if relations is None:
        found = {p for _, facts in parsed for _, p, _ in facts}
        # DWIE's own relations keep LogiRE's ids (so rule files and dumps line up); any other set: sorted names
        names = DWIE_RELATIONS if found <= set(DWIE_RELATIONS) else tuple(sorted(found))
        relations = Vocab(names, kind="relation")
    docs: list[Document] = []
    for doc, named in parsed:
        try:
            ids = [(h, relations.index(p), t) for h, p, t in named]
        except UnknownNameError as exc:
            if not skip_bad:
                raise DataError(exc.reason, file=doc.meta["file"], doc_id=doc.doc_id) from None
            report.skip(doc.meta["file"], doc.doc_id, exc.reason)
            continue
        doc.facts = canonical_facts(ids)
        validate_document(doc, len(relations), len(entity_types), file=doc.meta["file"])
        docs.append(doc)
    docs = ensure_unique_ids(sorted(docs, key=lambda d: d.doc_id), report, skip_bad)
    if not docs and not report.skipped:
        raise DataError(f"no DWIE documents found under {path}")
    return Corpus(
        documents=docs,
        relations=relations,
        entity_types=entity_types,
        name="dwie",
        report=report,
        meta={"type_prefix": "type::", "format": "dwie"},
    )


def tokenize_documents(corpus: Corpus, nlp: Any = None) -> Corpus:
    """Tokenised copy of a DWIE corpus read WITH article text (``content``, after ``dwie_download.py``).

    Like LogiRE's docred-style files, the whole article is one sentence; each char mention ``[begin, end)``
    becomes the smallest token span covering it (spaCy ``char_span(..., alignment_mode="expand")`` with the
    tokenizer of ``nlp``, default ``spacy.blank("en")``). Documents without text raise :class:`DataError`.
    """
    if nlp is None:
        import spacy

        nlp = spacy.blank("en")
    docs = []
    for doc in corpus.documents:
        if doc.text is None:
            raise DataError(
                "has no article text; run DWIE's src/dwie_download.py first (data/annos_with_content)",
                file=doc.meta.get("file"),
                doc_id=doc.doc_id,
            )
        sdoc = nlp.make_doc(doc.text)
        mentions = []
        for m in doc.mentions:
            span = sdoc.char_span(m.start, m.end, alignment_mode="expand")
            if span is None or len(span) == 0:
                raise DataError(
                    f"mention {m.text!r} [{m.start}, {m.end}) covers no token",
                    file=doc.meta.get("file"),
                    doc_id=doc.doc_id,
                )
            mentions.append(Mention(entity=m.entity, start=span.start, end=span.end, text=m.text, sent=0, unit="token"))
        mentions.sort(key=lambda m: (m.entity, m.start, m.end))
        docs.append(
            Document(
                doc_id=doc.doc_id,
                entity_names=list(doc.entity_names),
                entity_types=doc.entity_types,
                facts=doc.facts,
                split=doc.split,
                mentions=mentions,
                tokens=[t.text for t in sdoc],
                sentence_starts=[0],
                text=doc.text,
                meta=dict(doc.meta),
            )
        )
    return Corpus(
        documents=docs,
        relations=corpus.relations,
        entity_types=corpus.entity_types,
        name=corpus.name,
        report=corpus.report,
        meta=dict(corpus.meta),
    )

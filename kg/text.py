"""Turn raw user text into :class:`~kg.documents.Document` objects with spaCy (``fednsl data import-text``).

Tokenisation and sentence split come from spaCy; entity mentions come either from an installed spaCy
pipeline with NER (``model="en_core_web_sm"``, ...) or from a user entity list applied by an
``entity_ruler`` on ``spacy.blank("en")`` + ``sentencizer`` (no model download needed).

Mentions become entities by a simple, documented rule: mentions with the same pattern ``id`` (entity-list
patterns may carry one, e.g. to join "Merkel" and "Angela Merkel") or else the same lower-cased text and
label are one entity. Relations are left empty: the user or a backbone fills them (docred ``labels``).

Entity-list files: ``*.jsonl`` holds spaCy patterns (``{"label": ..., "pattern": ..., "id": ...}`` per
line); any other file holds ``text<TAB>label`` lines (``#`` starts a comment).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kg.documents import Corpus, DataError, Document, LoadReport, Mention, Vocab

__all__ = ["read_entity_list", "build_pipeline", "document_from_text", "import_texts"]


def read_entity_list(path: str | Path) -> list[dict[str, Any]]:
    """spaCy entity-ruler patterns from a ``.jsonl`` pattern file or a ``text<TAB>label`` file."""
    path = Path(path)
    patterns: list[dict[str, Any]] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if path.suffix == ".jsonl":
            try:
                pat = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"line {lineno}: malformed JSON pattern: {exc}", file=str(path)) from None
            if not isinstance(pat, dict) or "label" not in pat or "pattern" not in pat:
                raise DataError(f"line {lineno}: a pattern needs 'label' and 'pattern'", file=str(path))
        else:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
                raise DataError(f"line {lineno}: expected 'text<TAB>label', got {line!r}", file=str(path))
            pat = {"label": parts[1].strip(), "pattern": parts[0].strip()}
        patterns.append(pat)
    if not patterns:
        raise DataError("entity list is empty", file=str(path))
    return patterns


def build_pipeline(
    model: str | None = None, entities: Sequence[dict[str, Any]] | None = None, ignore_case: bool = False
):
    """A spaCy ``Language``: the installed pipeline ``model``, or ``spacy.blank("en")`` + sentencizer.

    ``entities`` (entity-ruler patterns) are added before any statistical NER, so they take precedence.
    """
    import spacy

    if model is None and not entities:
        raise DataError(
            "give an installed spaCy pipeline (model) or an entity list: there is no other source of entity mentions"
        )
    if model is not None:
        try:
            nlp = spacy.load(model)
        except OSError as exc:
            raise DataError(
                f"spaCy pipeline {model!r} is not installed ({exc}); install it or pass an entity list instead"
            ) from None
        if not nlp.has_pipe("parser") and not nlp.has_pipe("senter") and not nlp.has_pipe("sentencizer"):
            nlp.add_pipe("sentencizer", first=True)
    else:
        nlp = spacy.blank("en")
        nlp.add_pipe("sentencizer")
    if entities:
        config = {"phrase_matcher_attr": "LOWER"} if ignore_case else {}
        ruler: Any  # spacy's EntityRuler (add_pipe is typed as returning a plain callable)
        if nlp.has_pipe("ner"):
            ruler = nlp.add_pipe("entity_ruler", before="ner", config=config)
        else:
            ruler = nlp.add_pipe("entity_ruler", config=config)
        ruler.add_patterns(list(entities))
    return nlp


def document_from_text(
    text: str, doc_id: str, nlp, *, split: str = "train", type_map: Mapping[str, str] | None = None
) -> tuple[Document, list[str]]:
    """Tokenise, sentence-split and collect entities of ``text``; returns the document and its type names.

    ``entity_types`` of the returned document index the returned type-name list (local to this document);
    :func:`import_texts` re-maps them onto the corpus vocabulary.
    """
    sdoc = nlp(text)
    tokens = [t.text for t in sdoc]
    sents = list(sdoc.sents) if sdoc.has_annotation("SENT_START") else [sdoc[:]]
    starts = [s.start for s in sents] or [0]
    sent_of = np.zeros(len(tokens), dtype=np.int64)
    for i, s in enumerate(sents):
        sent_of[s.start : s.end] = i
    type_map = dict(type_map or {})
    keys: dict[tuple[str, str], int] = {}
    names: list[str] = []
    types: list[str] = []
    mentions: list[Mention] = []
    for ent in sdoc.ents:
        label = type_map.get(ent.label_, ent.label_)
        key = (ent.id_, "") if ent.id_ else (ent.text.lower(), label)
        if key not in keys:
            keys[key] = len(names)
            names.append(ent.text)
            types.append(label)
        mentions.append(
            Mention(
                entity=keys[key],
                start=ent.start,
                end=ent.end,
                text=ent.text,
                sent=int(sent_of[ent.start]),
                unit="token",
            )
        )
    mentions.sort(key=lambda m: (m.entity, m.start, m.end))  # entity-major, as docred's vertexSet
    type_names = sorted(set(types))
    local = {t: i for i, t in enumerate(type_names)}
    doc = Document(
        doc_id=doc_id,
        entity_names=names,
        entity_types=np.asarray([local[t] for t in types], dtype=np.int64),
        facts=np.zeros((0, 3), dtype=np.int64),
        split=split,
        mentions=mentions,
        tokens=tokens,
        sentence_starts=starts,
        text=text,
        meta={},
    )
    return doc, type_names


def import_texts(
    files: Iterable[str | Path],
    nlp,
    *,
    split: str = "train",
    type_map: Mapping[str, str] | None = None,
    entity_types: Vocab | None = None,
    relations: Vocab | None = None,
) -> Corpus:
    """Import text files (document id = file stem) into a :class:`Corpus` without facts.

    ``entity_types``: a fixed type vocabulary (an entity label outside it is an error naming the file);
    by default the sorted labels found. ``relations``: the vocabulary later labels will use (default empty).
    """
    report = LoadReport(source="text", format="text")
    docs: list[tuple[Document, list[str]]] = []
    seen: dict[str, str] = {}
    for f in files:
        f = Path(f)
        try:
            text = f.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"cannot read text: {exc}", file=str(f), doc_id=f.stem) from None
        if f.stem in seen:
            raise DataError(
                f"duplicate document id {f.stem!r} (also {seen[f.stem]}); rename one file", file=str(f), doc_id=f.stem
            )
        seen[f.stem] = str(f)
        doc, type_names = document_from_text(text, f.stem, nlp, split=split, type_map=type_map)
        doc.meta["file"] = str(f)
        docs.append((doc, type_names))
    if entity_types is None:
        entity_types = Vocab(tuple(sorted({t for _, names in docs for t in names})), kind="entity type")
    out = []
    for doc, type_names in docs:
        try:
            doc.entity_types = np.asarray([entity_types.index(type_names[i]) for i in doc.entity_types], dtype=np.int64)
        except DataError as exc:
            raise DataError(exc.reason, file=doc.meta["file"], doc_id=doc.doc_id) from None
        out.append(doc)
    return Corpus(
        documents=out,
        relations=relations or Vocab((), kind="relation"),
        entity_types=entity_types,
        name="text",
        report=report,
        meta={"type_prefix": "", "format": "text"},
    )

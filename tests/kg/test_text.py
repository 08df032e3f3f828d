"""spaCy import of raw text (entity list on spacy.blank("en"))."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kg.docred import read_docred, write_docred
from kg.documents import DataError, Vocab
from kg.text import build_pipeline, document_from_text, import_texts, read_entity_list

TEXT = "Angela Merkel visited Berlin on Monday. Merkel met the mayor of Berlin.\nThe Bundestag sits in Berlin."


@pytest.fixture(scope="module")
def nlp():
    patterns = [
        {"label": "person", "pattern": "Angela Merkel", "id": "merkel"},
        {"label": "person", "pattern": "Merkel", "id": "merkel"},
        {"label": "location", "pattern": "Berlin"},
        {"label": "organization", "pattern": "Bundestag"},
    ]
    return build_pipeline(entities=patterns)


def test_document_from_text(nlp) -> None:
    doc, type_names = document_from_text(TEXT, "merkel", nlp)
    assert type_names == ["location", "organization", "person"]
    assert doc.entity_names == ["Angela Merkel", "Berlin", "Bundestag"]  # "Merkel" joined by the pattern id
    assert [type_names[t] for t in doc.entity_types] == ["person", "location", "organization"]
    assert len(doc.sentence_starts) == 3 and doc.num_facts == 0
    for m in doc.mentions:  # token offsets point at the mention text, sentence ids match
        assert " ".join(doc.tokens[m.start:m.end]) == m.text
        assert doc.sentence_starts[m.sent] <= m.start
        assert m.sent == len(doc.sentence_starts) - 1 or m.end <= doc.sentence_starts[m.sent + 1]
    assert [(m.entity, m.text) for m in doc.mentions] == [(0, "Angela Merkel"), (0, "Merkel"), (1, "Berlin"),
                                                          (1, "Berlin"), (1, "Berlin"), (2, "Bundestag")]


def test_import_write_read(nlp, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text(TEXT)
    (tmp_path / "b.txt").write_text("Nothing here.")
    corpus = import_texts([tmp_path / "a.txt", tmp_path / "b.txt"], nlp, split="test",
                          relations=Vocab(("in0",), kind="relation"))
    assert [d.doc_id for d in corpus] == ["a", "b"] and corpus.documents[1].num_entities == 0
    write_docred(corpus, tmp_path / "out")
    back = read_docred(tmp_path / "out")
    assert all(d.text is None for d in back)  # docred carries tokens, not the raw text
    for d in corpus:
        d.text = None
    assert back.documents == corpus.documents and back.relations.names == ("in0",)
    items = json.loads((tmp_path / "out" / "test.json").read_text())
    assert items[0]["labels"] == []


def test_entity_list_files(tmp_path: Path) -> None:
    (tmp_path / "e.tsv").write_text("# comment\nAngela Merkel\tperson\nBerlin\tlocation\n")
    assert read_entity_list(tmp_path / "e.tsv") == [{"label": "person", "pattern": "Angela Merkel"},
                                                   {"label": "location", "pattern": "Berlin"}]
    (tmp_path / "bad.tsv").write_text("Angela Merkel person\n")
    with pytest.raises(DataError, match="bad.tsv: line 1"):
        read_entity_list(tmp_path / "bad.tsv")
    (tmp_path / "p.jsonl").write_text('{"label": "person", "pattern": "Merkel"}\n{oops\n')
    with pytest.raises(DataError, match="line 2: malformed JSON"):
        read_entity_list(tmp_path / "p.jsonl")


def test_fixed_type_vocab_and_missing_model(nlp, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text(TEXT)
    with pytest.raises(DataError, match="a.txt: document a: unknown entity type 'person'"):
        import_texts([tmp_path / "a.txt"], nlp, entity_types=Vocab(("location", "organization"), kind="entity type"))
    with pytest.raises(DataError, match="not installed"):
        build_pipeline(model="no_such_pipeline_xyz")

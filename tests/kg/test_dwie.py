"""DWIE reader: measured counts on the real annotations, agreement with LogiRE's files, bad input."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest

from kg.docred import _fact_ref
from kg.documents import DataError
from kg.dwie import DWIE_COARSE_TYPES, DWIE_RELATIONS, coarse_type, read_dwie, tokenize_documents
from tests.kg import _data

pytestmark = pytest.mark.data


def test_real_counts(dwie_dir: Path) -> None:
    c = _data.dwie(dwie_dir)
    assert len(c) == 802
    assert c.splits == {"train": 702, "test": 100}
    assert len(c.relations) == 65 and c.relations.names == DWIE_RELATIONS
    assert c.entity_types.names == DWIE_COARSE_TYPES
    assert sum(d.num_entities for d in c) == 21902
    assert sum(len(d.mentions) for d in c) == 43373
    assert sum(d.num_facts for d in c) == 19466
    # 23,130 concepts = 21,902 entities + 1,228 without a mention; 21,749 relations = 19,466 + 2,256 + 27
    assert c.report.dropped == {"concept_without_mention": 1228, "relation_to_dropped_concept": 2256,
                                "duplicate_fact": 27}
    assert c.report.resolved == {"multi_type_last_tag": 42, "untyped_as_other": 276}
    assert not c.report.skipped
    assert (c.relation_counts() > 0).all()  # all 65 relations occur
    assert [d.doc_id for d in c if d.num_entities == 0] == ["DW_19492126", "DW_38763222", "DW_39718698"]


def test_agrees_with_logire_docred_files(dwie_dir: Path) -> None:
    """Same entities (order, mention strings) and the same labels as LogiRE's dev/test files."""
    dw = {d.doc_id: d for d in _data.dwie(dwie_dir)}
    ref = _data.docred(dwie_dir / "docred_style")
    assert ref.relations == _data.dwie(dwie_dir).relations
    type_diff = 0
    for d in ref:
        x = dw[d.doc_id]
        assert x.num_entities == d.num_entities
        assert np.array_equal(x.facts, d.facts), d.doc_id
        for e in range(d.num_entities):
            assert sorted(m.text for m in x.mentions_of(e)) == sorted(m.text for m in d.mentions_of(e))
        type_diff += int((x.entity_types != d.entity_types).sum())
    # differences only where LogiRE's script leaves untyped concepts to a stale variable (58 of 5,408)
    assert type_diff == 58


def test_train_fact_reference_reproduced(dwie_dir: Path) -> None:
    """LogiRE's ref/train_annotated.fact = the facts of DWIE train minus dev minus the 2 empty documents."""
    c = _data.dwie(dwie_dir)
    dev = {d.doc_id for d in _data.docred(dwie_dir / "docred_style").split("dev")}
    train = [d for d in c if d.split == "train" and d.doc_id not in dev and d.num_entities > 0]
    assert len(train) == 602
    ref = json.loads((dwie_dir / "docred_style" / "ref" / "train_annotated.fact").read_text())
    assert sorted(map(tuple, ref)) == sorted(map(tuple, _fact_ref(train, c.relations)))


def test_coarse_type_rule() -> None:
    assert coarse_type(["type::entity", "type::person", "type::writer"]) == ("person", "single")
    assert coarse_type(["type::location", "type::organization"]) == ("organization", "multi")
    assert coarse_type(["type::entity", "type::language"]) == ("other", "untyped")


# --- small hand-written documents -----------------------------------------------------------------

def _doc(doc_id: str = "DW_1", **over) -> dict:
    doc = {
        "id": doc_id, "tags": ["all", "train"],
        "mentions": [
            {"begin": 0, "end": 6, "text": "Merkel", "concept": 0},
            {"begin": 10, "end": 16, "text": "Berlin", "concept": 1},
            {"begin": 20, "end": 26, "text": "Merkel", "concept": 0},
        ],
        "concepts": [
            {"concept": 0, "text": "Angela Merkel", "tags": ["type::entity", "type::person"]},
            {"concept": 1, "text": "Berlin", "tags": ["type::location", "type::gpe"]},
            {"concept": 2, "text": "Germany", "tags": ["type::location"]},
        ],
        "relations": [{"s": 0, "p": "in0", "o": 1}, {"s": 1, "p": "in0", "o": 2}, {"s": 0, "p": "in0", "o": 1}],
    }
    doc.update(over)
    return doc


def _write(folder: Path, docs: list[dict | str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for k, d in enumerate(docs):
        name = d["id"] if isinstance(d, dict) else f"DW_bad{k}"
        (folder / f"{name}.json").write_text(d if isinstance(d, str) else json.dumps(d))
    return folder


def test_small_document_and_report(tmp_path: Path) -> None:
    c = read_dwie(_write(tmp_path / "annos", [_doc()]))
    d = c.documents[0]
    assert d.entity_names == ["Angela Merkel", "Berlin"]
    assert d.entity_types.tolist() == [2, 0]
    assert d.facts.tolist() == [[0, c.relations.index("in0"), 1]]
    assert c.report.dropped == {"concept_without_mention": 1, "relation_to_dropped_concept": 1, "duplicate_fact": 1}
    assert [m.unit for m in d.mentions] == ["char"] * 3


def test_tar_and_folder_read_the_same(tmp_path: Path) -> None:
    folder = _write(tmp_path / "data" / "annos", [_doc("DW_2"), _doc("DW_1")])
    tar_path = tmp_path / "annos.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tar:
        for f in sorted(folder.iterdir(), reverse=True):
            tar.add(f, arcname=f"data/annos/{f.name}")
    a, b = read_dwie(tmp_path), read_dwie(tar_path)
    assert [d.doc_id for d in a] == ["DW_1", "DW_2"]
    assert a.documents == b.documents and a.relations == b.relations


def test_any_relation_set(tmp_path: Path) -> None:
    doc = _doc(relations=[{"s": 0, "p": "lives_in", "o": 1}])
    c = read_dwie(_write(tmp_path / "annos", [doc]))
    assert c.relations.names == ("lives_in",)


@pytest.mark.parametrize("doc, message", [
    ('{"id": "DW_x", "tags": [', "malformed JSON"),
    (_doc("DW_9", mentions=[{"begin": 5, "end": 3, "text": "ab", "concept": 0}]), "need 0 <= begin < end"),
    (_doc("DW_9", mentions=[{"begin": 0, "end": 3, "text": "Merkel", "concept": 0}]), "its text has 6 chars"),
    (_doc("DW_9", content="short", mentions=[{"begin": 0, "end": 9, "text": "Merkel ab", "concept": 0}]),
     "beyond the text"),
    (_doc("DW_9", relations=[{"s": 0, "p": "in0", "o": 7}]), "concept 7, which is not among"),
    (_doc("DW_9", mentions=[{"begin": 0, "end": 6, "text": "Merkel", "concept": 5}]), "refers to concept 5"),
    (_doc("DW_9", concepts=[{"concept": 0, "tags": []}, {"concept": 0, "tags": []}]), "duplicate concept id 0"),
    (_doc("DW_9", tags=["all"]), "exactly one of 'train' / 'test'"),
])
def test_bad_documents_name_file_and_doc(tmp_path: Path, doc, message) -> None:
    folder = _write(tmp_path / "annos", [_doc("DW_1"), doc])
    with pytest.raises(DataError, match=message) as err:
        read_dwie(folder)
    text = str(err.value)
    assert ".json" in text and ("DW_9" in text or "DW_bad1" in text)
    c = read_dwie(folder, skip_bad=True)
    assert [d.doc_id for d in c] == ["DW_1"] and len(c.report.skipped) == 1
    assert message.split()[0] in c.report.skipped[0].reason


def test_unknown_relation_against_meta(tmp_path: Path) -> None:
    folder = _write(tmp_path / "annos", [_doc("DW_1"), _doc("DW_2", relations=[{"s": 0, "p": "lives_in", "o": 1}])])
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "rel2id.json").write_text(json.dumps({"Na": 0, "in0": 1}))
    with pytest.raises(DataError, match="unknown relation 'lives_in'") as err:
        read_dwie(tmp_path)
    assert "DW_2" in str(err.value) and "DW_2.json" in str(err.value)
    c = read_dwie(tmp_path, skip_bad=True)
    assert len(c) == 1 and c.report.skipped[0].doc_id == "DW_2"
    assert folder.exists()


def test_duplicate_document_ids(tmp_path: Path) -> None:
    folder = _write(tmp_path / "a", [_doc("DW_1")])
    (folder / "DW_1b.json").write_text(json.dumps(_doc("DW_1")))
    with pytest.raises(DataError, match="duplicate document id"):
        read_dwie(folder)
    assert len(read_dwie(folder, skip_bad=True).report.skipped) == 1


def test_tokenize_with_content(tmp_path: Path) -> None:
    content = "Merkel in Berlin and Merkel again."
    doc = _doc(content=content, mentions=[
        {"begin": 0, "end": 6, "text": "Merkel", "concept": 0},
        {"begin": 10, "end": 16, "text": "Berlin", "concept": 1},
        {"begin": 21, "end": 27, "text": "Merkel", "concept": 0},
    ])
    c = read_dwie(_write(tmp_path / "annos_with_content", [doc]))
    t = tokenize_documents(c)
    d = t.documents[0]
    assert d.tokens[:3] == ["Merkel", "in", "Berlin"]
    assert [(m.entity, m.start, m.end) for m in d.mentions] == [(0, 0, 1), (0, 4, 5), (1, 2, 3)]
    with pytest.raises(DataError, match="no article text"):
        tokenize_documents(read_dwie(_write(tmp_path / "plain", [_doc()])))
    shutil.rmtree(tmp_path / "plain")

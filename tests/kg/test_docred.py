"""docred / LogiRE format: real files, round trip, bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kg.docred import read_docred, write_docred
from kg.documents import Corpus, DataError, Document, Mention, Vocab
from tests.kg import _data


def _same(a: Corpus, b: Corpus) -> None:
    assert a.relations == b.relations and a.entity_types == b.entity_types
    assert [d.doc_id for d in a] == [d.doc_id for d in b]
    for x, y in zip(a, b):
        assert x == y, x.doc_id
        assert x.meta.get("evidence") == y.meta.get("evidence")


@pytest.mark.data
def test_real_files(dwie_dir: Path) -> None:
    c = _data.docred(dwie_dir / "docred_style")
    assert c.splits == {"dev": 98, "test": 99}
    assert len(c.relations) == 65 and len(c.entity_types) == 10
    assert c.meta["type_prefix"] == "type::"
    assert c.report.dropped == {"duplicate_fact": 10}
    assert c.report.resolved == {"mixed_mention_types_first": 11}
    dev = c.split("dev")
    assert round(sum(d.num_entities for d in dev) / len(dev), 1) == 28.4  # spec §5.1


@pytest.mark.data
@pytest.mark.parametrize("compress", [False, True])
def test_round_trip_real(dwie_dir: Path, tmp_path: Path, compress: bool) -> None:
    c = _data.docred(dwie_dir / "docred_style")
    written = write_docred(c, tmp_path, compress=compress)
    assert sorted(p.name for p in written) == sorted(["dev.json" + (".gz" if compress else ""),
                                                      "test.json" + (".gz" if compress else "")])
    back = read_docred(tmp_path)
    _same(c, back)
    # a second cycle is byte-identical
    write_docred(back, tmp_path / "again", compress=False)
    if not compress:
        assert (tmp_path / "dev.json").read_bytes() == (tmp_path / "again" / "dev.json").read_bytes()
    raw = json.load(gzip.open(dwie_dir / "docred_style" / "dev.json.gz"))
    mine = json.loads((tmp_path / "again" / "dev.json").read_text())
    assert [x["title"] for x in raw] == [x["title"] for x in mine]
    assert raw[0]["sents"] == mine[0]["sents"]
    assert [[m["pos"] for m in v] for v in raw[0]["vertexSet"]] == [[m["pos"] for m in v] for v in mine[0]["vertexSet"]]


def _item(title: str = "doc1", **over) -> dict:
    item = {
        "title": title,
        "sents": [["Merkel", "visited", "Berlin", "."], ["Berlin", "is", "in", "Germany", "."]],
        "vertexSet": [
            [{"name": "Merkel", "pos": [0, 1], "sent_id": 0, "type": "PER"}],
            [{"name": "Berlin", "pos": [2, 3], "sent_id": 0, "type": "LOC"},
             {"name": "Berlin", "pos": [0, 1], "sent_id": 1, "type": "LOC"}],
            [{"name": "Germany", "pos": [3, 4], "sent_id": 1, "type": "LOC"}],
        ],
        "labels": [{"h": 1, "t": 2, "r": "P17", "evidence": [1]}, {"h": 0, "t": 1, "r": "P551", "evidence": []}],
    }
    item.update(over)
    return item


def _write(folder: Path, items: list, name: str = "train_annotated.json", meta: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(items if isinstance(items, str) else json.dumps(items))
    if meta is not None:
        (folder / "meta").mkdir(exist_ok=True)
        (folder / "meta" / "rel2id.json").write_text(json.dumps(meta))
    return folder


def test_multi_sentence_round_trip(tmp_path: Path) -> None:
    c = read_docred(_write(tmp_path / "in", [_item(), _item("doc2", labels=[])]))
    d = c.documents[0]
    assert d.split == "train" and d.sentence_starts == [0, 4]
    assert [(m.entity, m.start, m.end, m.sent) for m in d.mentions] == [(0, 0, 1, 0), (1, 2, 3, 0), (1, 4, 5, 1),
                                                                        (2, 7, 8, 1)]
    assert d.tokens[7] == "Germany"
    assert c.relations.names == ("P17", "P551") and c.entity_types.names == ("LOC", "PER")
    assert c.meta["type_prefix"] == ""
    write_docred(c, tmp_path / "out")
    back = read_docred(tmp_path / "out")
    _same(c, back)
    raw = json.loads((tmp_path / "out" / "train_annotated.json").read_text())
    assert raw[0]["vertexSet"] == _item()["vertexSet"]
    assert json.loads((tmp_path / "out" / "meta" / "rel2id.json").read_text()) == {"Na": 0, "P17": 1, "P551": 2}
    ref = json.loads((tmp_path / "out" / "ref" / "train_annotated.fact").read_text())
    assert ["Berlin", "Germany", "P17"] in ref and len(ref) == 2


@pytest.mark.parametrize("item, message", [
    (_item("bad", vertexSet=[[{"name": "M", "pos": [0, 9], "sent_id": 0, "type": "PER"}]], labels=[]),
     "outside sentence 0"),
    (_item("bad", vertexSet=[[{"name": "M", "pos": [0, 1], "sent_id": 4, "type": "PER"}]], labels=[]),
     "sent_id 4, out of range"),
    (_item("bad", labels=[{"h": 0, "t": 7, "r": "P17"}]), "entity 7, out of range"),
    (_item("bad", labels=[{"h": 0, "t": 1, "r": "P999"}]), "unknown relation 'P999'"),
    (_item("bad", labels=[{"h": 0, "t": 1, "r": 3}]), "must be a name"),
    (_item("bad", vertexSet=[[]]), "entity 0 has no mentions"),
    (_item("doc1"), "duplicate document id"),
])
def test_bad_items(tmp_path: Path, item: dict, message: str) -> None:
    folder = _write(tmp_path, [_item(), item], meta={"Na": 0, "P17": 1, "P551": 2})
    with pytest.raises(DataError, match=message) as err:
        read_docred(folder)
    assert "train_annotated.json" in str(err.value) and ("document bad" in str(err.value)
                                                         or "document doc1" in str(err.value))
    c = read_docred(folder, skip_bad=True)
    assert len(c) == 1 and len(c.report.skipped) == 1


def test_malformed_file(tmp_path: Path) -> None:
    folder = _write(tmp_path, '[{"title": "x", ', name="dev.json")
    with pytest.raises(DataError, match="dev.json: malformed JSON"):
        read_docred(folder)


def test_write_needs_tokens(tmp_path: Path) -> None:
    doc = Document("DW_1", ["Berlin"], [0], [], mentions=[Mention(0, 0, 6, "Berlin", unit="char")])
    with pytest.raises(DataError, match="DW_1: has no tokens"):
        write_docred(Corpus([doc], Vocab(("in0",)), Vocab(("location",))), tmp_path)

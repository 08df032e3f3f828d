"""`fednsl data` commands through click's test runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fednsl.cli.data import command


def _run(*args: str) -> str:
    result = CliRunner().invoke(command, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_info_synthetic() -> None:
    out = _run("info", "synthetic:num_documents=40")
    assert "40 documents" in out and "planted rules (10)" in out
    assert "groups: A = {location, organization}; B = {person, event}" in out
    data = json.loads(_run("info", "synthetic:num_documents=40", "--json", "--clients", "4"))
    assert [c["documents"] for c in data["clients"]] == [10, 10, 10, 10]
    assert [(c["seen"], c["unseen"]) for c in data["clients"]] == [("AA", "AB"), ("AB", "BB"), ("BB", "BA"),
                                                                   ("BA", "AA")]


@pytest.mark.data
def test_info_dwie(dwie_dir: Path) -> None:
    data = json.loads(_run("info", str(dwie_dir), "--json"))
    assert data["documents"] == 802 and data["relations"] == 65 and data["entity_types"] == 10
    assert data["report"]["dropped"]["concept_without_mention"] == 1228
    assert [x["doc_id"] for x in data["excluded_from_split"]] == ["DW_19492126", "DW_38763222", "DW_39718698"]
    assert [c["documents"] for c in data["clients"]] == [200, 200, 200, 199]
    assert [c["test"] for c in data["clients"]] == [50, 50, 50, 50]


def test_prepare_synthetic_and_import_text(tmp_path: Path) -> None:
    _run("prepare", "synthetic", "--out", str(tmp_path / "syn"), "--seed", "2")
    assert (tmp_path / "syn" / "planted_rules.txt").exists()
    assert "200 documents" in _run("info", str(tmp_path / "syn"), "--clients", "0")
    (tmp_path / "t.txt").write_text("Angela Merkel visited Berlin. Merkel left Berlin.")
    (tmp_path / "e.tsv").write_text("Angela Merkel\tperson\nBerlin\tlocation\n")
    out = _run("import-text", str(tmp_path / "t.txt"), "--entities", str(tmp_path / "e.tsv"), "--out",
               str(tmp_path / "txt"), "--relations", "lives_in,in0", "--split", "test")
    assert "imported 1 documents, 2 entities, 3 mentions" in out
    assert f"fednsl train fednsl_dwie --set data.path={tmp_path / 'txt'} --set data.num_clients=1" in out
    assert f"check them: fednsl data info {tmp_path / 'txt'}" in out and "very few" in out
    items = json.loads((tmp_path / "txt" / "test.json").read_text())
    assert [len(v) for v in items[0]["vertexSet"]] == [1, 2]
    # the user fills a label, the reader checks it against meta/rel2id.json
    items[0]["labels"] = [{"h": 0, "t": 1, "r": "lives_in", "evidence": [0]}]
    (tmp_path / "txt" / "test.json").write_text(json.dumps(items))
    assert "lives_in" in _run("info", str(tmp_path / "txt"), "--clients", "0")
    items[0]["labels"] = [{"h": 0, "t": 1, "r": "works_for"}]
    (tmp_path / "txt" / "test.json").write_text(json.dumps(items))
    bad = CliRunner().invoke(command, ["info", str(tmp_path / "txt")])
    assert bad.exit_code != 0 and "test.json: document t: unknown relation 'works_for'" in bad.output
    skipped = _run("info", str(tmp_path / "txt"), "--skip-bad", "--clients", "0")
    assert "skipped bad documents: 1" in skipped


def test_prepare_dwie_from_folder(tmp_path: Path) -> None:
    annos = tmp_path / "DWIE" / "data" / "annos_with_content"
    annos.mkdir(parents=True)
    content = "Merkel lives in Berlin."
    doc = {"id": "DW_1", "tags": ["all", "test"], "content": content,
           "mentions": [{"begin": 0, "end": 6, "text": "Merkel", "concept": 0},
                        {"begin": 16, "end": 22, "text": "Berlin", "concept": 1}],
           "concepts": [{"concept": 0, "text": "Angela Merkel", "tags": ["type::person"]},
                        {"concept": 1, "text": "Berlin", "tags": ["type::location"]}],
           "relations": [{"s": 0, "p": "citizen_of", "o": 1}], "frames": [], "iptc": []}
    (annos / "DW_1.json").write_text(json.dumps(doc))
    out = _run("prepare", "dwie", "--from", str(tmp_path / "DWIE"), "--out", str(tmp_path / "out"))
    assert "1 documents (test 1)" in out
    assert (tmp_path / "out" / "dwie_annos.tar.gz").exists()
    rel2id = json.loads((tmp_path / "out" / "docred_style" / "meta" / "rel2id.json").read_text())
    assert len(rel2id) == 66 and rel2id["citizen_of"] == 1
    items = json.loads((tmp_path / "out" / "docred_style" / "test.json").read_text())
    assert items[0]["labels"] == [{"h": 0, "t": 1, "r": "citizen_of", "evidence": []}]
    assert items[0]["sents"] == [["Merkel", "lives", "in", "Berlin", "."]]
    info = json.loads(_run("info", str(tmp_path / "out"), "--json", "--clients", "0"))
    assert info["documents"] == 1 and info["format"] == "dwie"


def test_prepare_dwie_needs_from(tmp_path: Path) -> None:
    result = CliRunner().invoke(command, ["prepare", "dwie", "--out", str(tmp_path)])
    assert result.exit_code != 0 and "--from" in result.output


def test_a_small_import_says_which_setting_to_change(tmp_path: Path) -> None:
    """Training on two imported documents with the default four clients: one line naming the setting to change."""
    from fednsl.cli.main import cli

    (tmp_path / "t.txt").write_text("Angela Merkel visited Berlin.")
    (tmp_path / "u.txt").write_text("Olaf Scholz lives in Hamburg.")
    (tmp_path / "e.tsv").write_text("Angela Merkel\tperson\nBerlin\tlocation\nOlaf Scholz\tperson\nHamburg\tlocation\n")
    _run("import-text", str(tmp_path / "t.txt"), str(tmp_path / "u.txt"), "--entities", str(tmp_path / "e.tsv"),
         "--out", str(tmp_path / "txt"), "--relations", "lives_in")
    res = CliRunner().invoke(cli, ["train", "fednsl_dwie", "--set", f"data.path={tmp_path / 'txt'}",
                                   "--set", "data.golden_rules=none", "--out", str(tmp_path / "run")])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines()[-1] == (
        "Error: 2 eligible documents (with entities; 0 excluded) cannot be split over 4 clients: "
        "set num_clients to at most 2 or add documents")

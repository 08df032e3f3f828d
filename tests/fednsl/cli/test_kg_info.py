"""``fednsl data info`` on knowledge graphs, through click's CliRunner."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fednsl.cli.data import command


def _invoke(*args: str):
    return CliRunner().invoke(command, ["info", *args])


def _folder(path: Path, test: str = "a\tr\tc\n") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "train.txt").write_text("a\tr\tb\nb\ts\tc\nc\tr\ta\n")
    (path / "valid.tsv").write_text("b\tr\tc\n")
    (path / "test.txt.gz").write_bytes(gzip.compress(test.encode()))
    return path


def test_info_on_a_triples_folder(tmp_path: Path) -> None:
    result = _invoke(str(_folder(tmp_path / "toy")))
    assert result.exit_code == 0, result.output
    assert "knowledge graph toy: 3 entities, 2 relations" in result.output
    assert "triples: train 3, valid 1, test 1 (total 5)" in result.output
    data = json.loads(_invoke(str(tmp_path / "toy"), "--json").output)
    assert data["triples"] == {"train": 3, "valid": 1, "test": 1}
    assert data["top_relations"][0] == {"relation": "r", "triples": 4}


def test_bad_line_is_one_line_and_exit_2(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "bad", test="a\tr\tc\nbroken line\n")
    result = _invoke(str(folder))
    assert result.exit_code == 2
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "test.txt.gz: line 2: expected 3 tab-separated fields" in lines[0]
    assert "Traceback" not in result.output


def test_federated_folder_lists_clients(tmp_path: Path) -> None:
    for k, rel in enumerate(("r", "s")):
        sub = tmp_path / "fed" / f"client{k}"
        sub.mkdir(parents=True)
        for split in ("train", "valid", "test"):
            (sub / f"{split}.txt.gz").write_bytes(gzip.compress(f"a{k}\t{rel}\tb\n".encode()))
    data = json.loads(_invoke(str(tmp_path / "fed"), "--json").output)
    assert data["entities"] == 3 and data["relations"] == 2
    assert [c["relations"] for c in data["clients"]] == [1, 1] and data["triples"]["train"] == 2


def test_synthetic_kg_needs_format_kg_and_lists_planted_rules() -> None:
    result = _invoke("synthetic:1", "--format", "kg", "--top", "0")
    assert result.exit_code == 0, result.output
    assert "knowledge graph synthetic:1" in result.output and "planted rules (11):" in result.output
    assert "grandparent_of(X,Y) <- parent_of(X,Z1), parent_of(Z1,Y)" in result.output
    plain = _invoke("synthetic", "--clients", "0")  # the document corpus, unchanged
    assert plain.exit_code == 0 and plain.output.startswith("corpus")


def test_pykeen_and_unknown_names() -> None:
    bad = _invoke("pykeen:fb15k")
    assert bad.exit_code == 2 and "unknown dataset" in bad.output
    if importlib.util.find_spec("pykeen") is None:
        pytest.skip("pykeen not installed")
    data = json.loads(_invoke("pykeen:nations", "--json").output)
    assert (data["entities"], data["relations"], data["triples"]["test"]) == (14, 55, 201)


def test_info_fb15k237(shared_data: Path) -> None:
    folder = shared_data / "kg" / "fb15k237"
    if not folder.is_dir():
        pytest.skip(f"FB15k-237 not found at {folder}")
    data = json.loads(_invoke(str(folder), "--json").output)
    assert (data["entities"], data["relations"]) == (14541, 237)
    assert data["triples"] == {"train": 272115, "valid": 17535, "test": 20466}


def test_info_names_the_files_it_read(tmp_path: Path) -> None:
    """Issue 35: which files of a triples folder were read, with their triples (dev read as valid)."""
    folder = _folder(tmp_path / "toy")
    (folder / "valid.tsv").rename(folder / "dev.tsv")
    (folder / "entity_types.txt").write_text("a\tx\n")
    result = _invoke(str(folder))
    assert result.exit_code == 0, result.output
    assert (
        f"read {folder.resolve()}: train.txt 3, dev.tsv (as valid) 1, test.txt.gz 1 triples; "
        "entity types from entity_types.txt"
    ) in result.output.splitlines()
    data = json.loads(_invoke(str(folder), "--json").output)
    assert data["files"] == [
        {"path": "train.txt", "split": "train", "triples": 3},
        {"path": "dev.tsv", "split": "valid", "triples": 1},
        {"path": "test.txt.gz", "split": "test", "triples": 1},
        {"path": "entity_types.txt", "split": "entity_types"},
    ]
    synthetic = _invoke("synthetic:1", "--format", "kg", "--json")
    assert json.loads(synthetic.output)["files"] == []


def test_info_names_the_files_of_each_client(tmp_path: Path) -> None:
    for k in range(3):
        sub = tmp_path / "fed" / f"client{k}"
        sub.mkdir(parents=True)
        for split in ("train", "valid", "test"):
            (sub / f"{split}.txt").write_text(f"a{k}\tr\tb\n")
    result = _invoke(str(tmp_path / "fed"))
    assert result.exit_code == 0, result.output
    folder = (tmp_path / "fed").resolve()
    line = f"read {folder}: client0..client2/ train.txt, valid.txt, test.txt (triples per client below)"
    assert line in result.output.splitlines()
    (folder / "client1" / "valid.txt").rename(folder / "client1" / "valid.tsv")
    line = f"read {folder}: client0/, client2/ train.txt, valid.txt, test.txt; client1/ train.txt, valid.tsv, test.txt"
    assert line + " (triples per client below)" in _invoke(str(folder)).output.splitlines()


def test_a_folder_of_csv_triples_says_what_was_looked_for(tmp_path: Path) -> None:
    """Issue 35: CSV triples are not read; both the auto-detected and the --format kg error say what was looked for
    and what the folder holds, in one line, exit status 2."""
    folder = tmp_path / "csv"
    folder.mkdir()
    for split in ("train", "valid", "test"):
        (folder / f"{split}.csv").write_text("a,r,b\n")
    auto = _invoke(str(folder))
    assert auto.exit_code == 2
    (line,) = [x for x in auto.output.splitlines() if x.strip()]
    assert "knowledge-graph triples (<split>.txt, .tsv, .txt.gz or .tsv.gz for each of train, valid (or dev)" in line
    assert "found test.csv, train.csv, valid.csv (triples files are read only as tab-separated" in line
    kg = _invoke(str(folder), "--format", "kg")
    assert kg.exit_code == 2
    (line,) = [x for x in kg.output.splitlines() if x.strip()]
    assert line.count(str(folder)) == 1 and "no train, valid, test file" in line and "found test.csv" in line
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "; the folder is empty" in _invoke(str(empty)).output


def test_a_missing_kg_path_is_named_once(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    result = _invoke(str(missing), "--format", "kg")
    assert result.exit_code == 2
    (line,) = [x for x in result.output.splitlines() if x.strip()]
    assert line.count(str(missing)) == 1 and "no such file or folder" in line

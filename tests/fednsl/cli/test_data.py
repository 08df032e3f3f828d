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


def test_a_small_import_without_facts_says_what_it_lacks(tmp_path: Path) -> None:
    """Training on two imported documents without relation facts: one line naming the file and what it lacks."""
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
        f"Error: {tmp_path / 'txt'}/train_annotated.json: the 2 documents with entities hold no relation facts "
        "(labels between entities); fednsl trains on documents with entities and relation facts")
    assert not (tmp_path / "run").exists()


# `fednsl data split`: a KG over clients in FedLU's folder layout; `to-kg`/`split` refuse a non-empty --out

FAST_KG = ["rounds=1", "method_kwargs.predictor={epochs: 5, eval_every: 5, patience: 1}",
           "method_kwargs.mining={samples_per_relation: 80, max_rules_per_head: 20}",
           "method_kwargs.max_bodies=12", "method_kwargs.pool_top=8", "method_kwargs.num_samples=30",
           "method_kwargs.report_valid=false", "method_kwargs.generator={pretrain_epochs: 1, epochs: 1, "
           "samples_per_epoch: 500}"]


def _named(kg) -> dict[str, list[tuple[str, str, str]]]:
    return {s: [(kg.entities[h], kg.relations[r], kg.entities[t]) for h, r, t in kg.split(s).tolist()]
            for s in ("train", "valid", "test")}


def _one_line_error(args: list[str], option: str) -> str:
    res = CliRunner().invoke(command, args)
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {option}: "), res.output
    return lines[0]


def test_split_by_entity_reads_back_and_trains(tmp_path: Path) -> None:
    from fednsl.cli.main import cli
    from kg.kg_partition import partition_kg, partition_report, read_federated_kg
    from kg.kg_sources import load_kg

    out = tmp_path / "fed"
    text = _run("split", "synthetic", "--partition", "entity", "--num-clients", "3", "--shares", "0.5,0.25,0.25",
                "--seed", "1", "--out", str(out))
    kg = load_kg("synthetic")
    parts = partition_kg(kg, 3, by="entity", seed=1, shares=[0.5, 0.25, 0.25])
    report = partition_report(kg, parts)
    lines = text.splitlines()
    assert lines[0] == ("split synthetic:0 (196 entities, 8 relations, train 901 / valid 113 / test 112) by entity "
                        "over 3 clients (seed 1)")
    assert [ln.split(":")[0] for ln in lines[1:4]] == ["  client0", "  client1", "  client2"]
    assert lines[1].startswith("  client0: 98 entities owned, ")  # half of the 196 entities
    assert lines[4] == ("dropped (triples between two clients' entities): train {train} / valid {valid} / "
                        "test {test}").format(**{s: r["dropped"] for s, r in report.items()})
    assert lines[-1] == f"train on it: fednsl train fednsl_kg_synthetic --set data.federated_folder={out}"
    back = read_federated_kg(out)
    assert [_named(p) for p in back] == [_named(p) for p in parts]
    info = json.loads((out / "split.json").read_text())
    assert info["partition"] == "entity" and info["shares"] == [0.5, 0.25, 0.25] and info["seed"] == 1
    assert info["dropped"] == {s: r["dropped"] for s, r in report.items()}
    assert [c["train"] for c in info["clients"]] == [len(p.train) for p in parts]
    assert [c["entities_owned"] for c in info["clients"]] == [98, 49, 49]
    assert not (out / "entity_types.txt").exists()  # the planted-rule KG is untyped
    # the printed command trains on the folder: one round, three clients, every client's test triples ranked
    args = lines[-1].removeprefix("train on it: fednsl ").split() + ["--out", str(tmp_path / "run"), "-q"]
    for o in FAST_KG:
        args += ["--set", o]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["round"] == 1 and summary["test_queries"] == 2 * sum(len(p.test) for p in parts)


def test_split_a_typed_kg_folder_by_triple_keeps_the_types(tmp_path: Path) -> None:
    from kg.kg_partition import read_federated_kg
    from kg.kg_sources import load_kg

    _run("to-kg", "synthetic", "--out", str(tmp_path / "kg"))
    text = _run("split", str(tmp_path / "kg"), "--partition", "triple", "--num-clients", "2", "--shares", "3,1",
                "--out", str(tmp_path / "fed"))
    assert "dropped: none" in text and "entity_types.txt" in text
    kg = load_kg(tmp_path / "kg")
    back = read_federated_kg(tmp_path / "fed")
    assert [len(p.train) for p in back] == [round(0.75 * len(kg.train)), len(kg.train) - round(0.75 * len(kg.train))]
    types = {e: kg.type_names[t] for e, t in zip(kg.entities, kg.entity_types)}
    assert back[0].type_names and all(types[e] == back[0].type_names[t]
                                      for e, t in zip(back[0].entities, back[0].entity_types))


def test_split_refuses_bad_options_and_a_non_empty_out(tmp_path: Path) -> None:
    out = str(tmp_path / "fed")
    base = ["split", "synthetic", "--out", out]
    assert "'node' is not one of entity, triple, relation" in _one_line_error(
        [*base, "--partition", "node", "--num-clients", "2"], "--partition")
    _one_line_error([*base, "--partition", "entity", "--num-clients", "0"], "--num-clients")
    for shares in ("0.5,0.5", "1,0,1", "1,-2,1", "1,x,1", "1,nan,1"):
        assert "3 positive numbers" in _one_line_error(
            [*base, "--partition", "entity", "--num-clients", "3", "--shares", shares], "--shares")
    _one_line_error([*base, "--partition", "relation", "--num-clients", "2", "--shares", "1,1"], "--shares")
    assert "at most 196" in _one_line_error([*base, "--partition", "entity", "--num-clients", "197"],
                                            "--num-clients")
    assert not (tmp_path / "fed").exists()  # nothing written by a refused command
    _run(*base, "--partition", "entity", "--num-clients", "4")
    assert "pass --force" in _one_line_error([*base, "--partition", "triple", "--num-clients", "2"], "--out")
    (tmp_path / "fed" / "notes.md").write_text("mine")
    _run(*base, "--partition", "triple", "--num-clients", "2", "--force")  # the old client2/, client3/ go
    assert sorted(p.name for p in (tmp_path / "fed").iterdir()) == ["client0", "client1", "notes.md", "split.json"]
    assert "the source KG's folder" in _one_line_error(
        ["split", out, "--out", out, "--partition", "triple", "--num-clients", "2", "--force"], "--out")


def test_to_kg_refuses_a_non_empty_out_unless_force(tmp_path: Path) -> None:
    from kg.kg_sources import load_kg

    out = tmp_path / "kg"
    _run("to-kg", "synthetic", "--out", str(out), "--seed", "1")
    first = load_kg(out)
    assert "pass --force" in _one_line_error(["to-kg", "synthetic", "--out", str(out)], "--out")
    (out / "valid.tsv").write_text("a\tr\tb\n")  # stale: would be read beside valid.txt
    _run("to-kg", "synthetic", "--out", str(out), "--seed", "2", "--force")
    second = load_kg(out)
    assert len(second.valid) == len(first.valid) and _named(second)["test"] != _named(first)["test"]

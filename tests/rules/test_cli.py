"""``fednsl rules`` commands on a small store written to a temporary run directory (click CliRunner)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fednsl.cli.rules import command
from rules.fol import RelationVocab, parse_rules
from rules.formats import parse_amie, parse_anyburl, parse_rnnlogic
from rules.store import RuleStore
from tests.rules.conftest import RELATIONS


@pytest.fixture
def run_dir(tmp_path: Path, small_store: RuleStore) -> Path:
    small_store.save(tmp_path / "run")
    return tmp_path / "run"


def invoke(*args: object, ok: bool = True):
    result = CliRunner().invoke(command, [str(a) for a in args])
    if ok:
        assert result.exit_code == 0, result.output
    return result


def test_command_is_a_group() -> None:
    assert command.name == "rules"
    assert set(command.commands) >= {"list", "export", "diff", "explain", "convert", "check"}
    for sub in command.commands.values():
        assert all(p.help for p in sub.params if p.param_type_name == "option"), sub.name


def test_list_text(run_dir: Path) -> None:
    out = invoke("list", run_dir).output
    assert "parent_of[person->person]  (round 2, 3 bodies, sorted by posterior)" in out
    assert out.count("<-") == 8
    top = invoke("list", run_dir, "--head", "parent_of", "--top", "1").output
    assert top.count("<-") == 1 and "parent_of <- ~child_of" in top
    client = invoke("list", run_dir, "--client", "1").output
    assert "client 1 posterior" in client and "child_of[" not in client
    assert invoke("list", run_dir, "--client", "1", "--head", "child_of").output == (
        "no rules of head child_of with a posterior of client 1\n"
    )


def test_list_tsv_and_json(run_dir: Path) -> None:
    tsv = invoke("list", run_dir, "--format", "tsv", "--client", "0").output.splitlines()
    header = tsv[0].split("\t")
    assert header[:3] == ["triple", "rule", "probability"] and len(tsv) == 1 + 5
    row = dict(zip(header, tsv[1].split("\t")))
    assert row["client"] == "0" and row["weight"] != ""
    rows = json.loads(invoke("list", run_dir, "--format", "json").output)
    assert len(rows) == 8 and rows[0]["triple_name"] == "child_of[person->person]"


def test_list_errors(run_dir: Path, tmp_path: Path) -> None:
    res = invoke("list", run_dir, "--client", "9", ok=False)
    assert res.exit_code != 0 and "client '9' not in the store" in res.output
    res = invoke("list", run_dir, "--head", "parnt_of", ok=False)
    assert res.exit_code != 0 and "did you mean 'parent_of'" in res.output
    (tmp_path / "empty").mkdir()
    res = invoke("list", tmp_path / "empty", ok=False)
    assert res.exit_code != 0 and "no rule store" in res.output


def test_export_formats(run_dir: Path, tmp_path: Path, small_store: RuleStore) -> None:
    vocab = RelationVocab(RELATIONS)
    out = tmp_path / "rules.anyburl"
    res = invoke("export", run_dir, "--format", "anyburl", "--out", out)
    assert "left out 1 identity" in res.output
    items = parse_anyburl(out.read_text(), vocab)
    assert len(items) == 7 and all(i.support is not None for i in items)
    counts = small_store.triples[(0, 0, 0)].global_counts()
    first = next(i for i in items if i.rule.head == 0 and i.rule.body == (5,))
    assert (first.support, first.body_size) == (counts.support[0], counts.body_size[0])
    amie = parse_amie(invoke("export", run_dir, "--format", "amie").stdout, vocab)
    assert [a.rule for a in amie] == [i.rule for i in items]
    golden = parse_rules(invoke("export", run_dir, "--format", "golden").stdout, vocab)
    assert golden == [i.rule for i in items]
    assert parse_rnnlogic(invoke("export", run_dir, "--format", "rnnlogic").stdout, vocab) == golden
    rows = json.loads(invoke("export", run_dir, "--format", "json", "--head", "lives_in").stdout)
    assert {r["triple_name"] for r in rows} == {"lives_in[person->location]"}


def test_export_without_counts(tmp_path: Path) -> None:
    store = RuleStore(RELATIONS)
    store.add_triple((0, 0, 0), [[5]], [1.0])
    store.save(tmp_path)
    res = invoke("export", tmp_path, "--format", "anyburl")
    assert "no confidence counts" in res.stderr and res.stdout == "parent_of(X,Y) <= child_of(Y,X)\n"


def test_diff(run_dir: Path) -> None:
    out = invoke("diff", run_dir, "--client", "0", "--client", "1", "--top", "2", "--by", "triple").output
    assert "parent_of[person->person]" in out and "p_A 0.8000  p_B 0.1000  parent_of <- ~child_of" in out
    data = json.loads(invoke("diff", run_dir, "--client", "0", "--client", "1", "--format", "json").output)
    assert data["by"] == "head" and data["rows"][0]["name"] == "parent_of"
    assert data["rows"][0]["total_variation"] == pytest.approx(0.7)
    out = invoke("diff", run_dir, "--client", "0", "--client", "1", "--head", "child_of", "--by", "triple").output
    assert "share no triple (try --by head)" in out
    res = invoke("diff", run_dir, "--client", "0", ok=False)
    assert res.exit_code == 2 and "exactly twice" in res.output
    res = invoke("diff", run_dir, "--client", "0", "--client", "8", ok=False)
    assert res.exit_code == 1 and "client '8' not in the store" in res.output


def test_explain(run_dir: Path, tmp_path: Path) -> None:
    x = np.full((3, 3, 4), 0.05)
    x[1, 0, 1] = 0.9  # child_of(1, 0): parent_of(0, 1) <- ~child_of
    npz = tmp_path / "doc.npz"
    np.savez(npz, values=x, entity_names=np.array(["ann", "bob", "cy"]), entity_types=np.array([0, 0, 0]))
    args = ("explain", run_dir, "--values", npz)
    out = invoke(*args, "--head", "parent_of", "--pair", "ann", "bob", "--client", "0").output
    assert "parent_of(ann#0, bob#1)" in out and "ann#0 -~child_of(0.9)-> bob#1" in out and "logit" in out
    data = json.loads(
        invoke(*args, "--head", "0", "--pair", 0, 1, "--top", 1, "--format", "json").output
    )
    assert len(data["items"]) == 1 and data["items"][0]["value"] == pytest.approx(0.9)
    res = invoke("explain", run_dir, "--values", npz, "--head", "parent_of", "--pair", "ann", "zed", ok=False)
    assert res.exit_code == 1 and "entity 'zed'" in res.output
    np.savez(tmp_path / "bad.npz", a=np.zeros(3), b=np.zeros(2))
    res = invoke("explain", run_dir, "--values", tmp_path / "bad.npz", "--head", "parent_of", "--pair", 0, 1, ok=False)
    assert res.exit_code == 1 and "expected a 'values' array" in res.output


def test_check_and_convert(tmp_path: Path) -> None:
    rel = tmp_path / "rel2id.json"
    rel.write_text(json.dumps({"Na": 0, **{n: i + 1 for i, n in enumerate(RELATIONS)}}))
    rules = tmp_path / "golden.txt"
    rules.write_text("# golden\nparent_of <- ~child_of\nlives_in <- spouse_of, lives_in\n")
    out = invoke("check", rules, "--relations", rel).output
    assert "2 rules OK" in out and "1/1/0" in out
    anyburl = invoke("convert", rules, "--relations", rel, "--to", "anyburl").output
    assert anyburl.splitlines()[0] == "parent_of(X,Y) <= child_of(Y,X)"
    (tmp_path / "r.anyburl").write_text(anyburl)
    back = invoke("convert", tmp_path / "r.anyburl", "--relations", rel, "--from", "anyburl", "--to", "golden").output
    assert back.splitlines() == ["parent_of <- ~child_of", "lives_in <- spouse_of, lives_in"]
    logire = invoke("convert", rules, "--relations", rel, "--to", "logire").output
    assert json.loads(logire) == [[0, [5]], [3, [2, 3]]]
    rules.write_text("parent_of <- ~child_of\n\nlives_in <- spouse_of, livs_in\n")
    res = invoke("check", rules, "--relations", rel, ok=False)
    assert res.exit_code == 2 and "golden.txt:3: unknown relation 'livs_in' (did you mean 'lives_in'?)" in res.output


@pytest.mark.data
def test_check_real_golden_rules(dwie_dir: Path) -> None:
    out = invoke(
        "check", dwie_dir / "golden_rules.txt", "--relations", dwie_dir / "docred_style" / "meta" / "rel2id.json"
    ).output
    assert "39 rules OK (65 relations; body lengths 1/2/3: 16/23/0)" in out

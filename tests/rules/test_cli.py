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


def one_error_line(res) -> str:
    """The command failed with exit status 2 and printed exactly one line (``Error: ...``); that line."""
    assert res.exit_code == 2, res.output
    lines = res.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), res.output
    return lines[0]


def test_list_errors(run_dir: Path, tmp_path: Path) -> None:
    assert "--client: client '9' not in the store; clients: 0, 1" in one_error_line(
        invoke("list", run_dir, "--client", "9", ok=False)
    )
    for cmd in ("list", "export"):
        fmt = ("--format", "amie") if cmd == "export" else ()
        line = one_error_line(invoke(cmd, run_dir, *fmt, "--head", "parnt_of", ok=False))
        assert "--head: unknown relation 'parnt_of' (did you mean 'parent_of'" in line
        assert "--head: relation id 7 outside [0, 4)" in one_error_line(
            invoke(cmd, run_dir, *fmt, "--head", 7, ok=False)
        )
        (tmp_path / "empty").mkdir(exist_ok=True)
        line = one_error_line(invoke(cmd, tmp_path / "empty", *fmt, ok=False))
        assert f"no rule store at {tmp_path / 'empty' / 'rules.json'}" in line


def test_damaged_store_errors_name_the_file(run_dir: Path, tmp_path: Path) -> None:
    path = run_dir / "rules.json"
    text = path.read_text()
    torn = tmp_path / "torn"
    torn.mkdir()
    (torn / "rules.json").write_text(text[: len(text) // 2])
    data = json.loads(text)
    data["triples"][0]["bodies"][0][0] = 99  # a body token outside the vocabulary (2R+1 = 9 tokens)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "rules.json").write_text(json.dumps(data))
    del data["triples"][0]["rules"]  # without the rule texts the tokens are only checked when read
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "rules.json").write_text(json.dumps(data))
    for cmd, fmt in (("list", ()), ("export", ("--format", "anyburl")), ("export", ("--format", "json"))):
        line = one_error_line(invoke(cmd, torn, *fmt, ok=False))
        assert f"{torn / 'rules.json'}: not valid JSON" in line
        assert f"{bad / 'rules.json'}: " in one_error_line(invoke(cmd, bad, *fmt, ok=False))
        line = one_error_line(invoke(cmd, bare, *fmt, ok=False))
        assert f"{bare / 'rules.json'}: triple parent_of[person->person]: body token 99 outside the vocabulary" in line


def test_export_formats(run_dir: Path, tmp_path: Path, small_store: RuleStore) -> None:
    vocab = RelationVocab(RELATIONS)
    out = tmp_path / "rules.anyburl"
    res = invoke("export", run_dir, "--format", "anyburl", "--out", out)
    assert "left out 1 identity" in res.output
    # zero-support rules (counts recorded, body and head never hold together) are never exported
    scored, _, _ = small_store.scored_rules()
    zero = {s.rule for s in scored if s.support == 0}
    assert len(scored) == 7 and len(zero) == 4
    assert res.stderr.count("left out 4 rules with support 0") == 1
    items = parse_anyburl(out.read_text(), vocab)
    assert len(items) == 3 and all(i.support for i in items) and not zero & {i.rule for i in items}
    counts = small_store.triples[(0, 0, 0)].global_counts()
    first = next(i for i in items if i.rule.head == 0 and i.rule.body == (5,))
    assert (first.support, first.body_size) == (counts.support[0], counts.body_size[0])
    amie = parse_amie(invoke("export", run_dir, "--format", "amie").stdout, vocab)
    assert [a.rule for a in amie] == [i.rule for i in items]
    golden = parse_rules(invoke("export", run_dir, "--format", "golden").stdout, vocab)
    assert golden == [i.rule for i in items]
    assert parse_rnnlogic(invoke("export", run_dir, "--format", "rnnlogic").stdout, vocab) == golden
    res = invoke("export", run_dir, "--format", "json", "--head", "parent_of")
    rows = json.loads(res.stdout)
    assert {r["triple_name"] for r in rows} == {"parent_of[person->person]"}
    assert [r["measures"]["support"] for r in rows] == [1, 1] and "left out 1 rules with support 0" in res.stderr
    res = invoke("export", run_dir, "--format", "json", "--head", "lives_in")
    assert json.loads(res.stdout) == [] and "left out 3 rules with support 0" in res.stderr


def test_export_out_paths(run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # a bare file name goes to RUN_DIR/exports/, never into the current folder (the repository root)
    res = invoke("export", run_dir, "--format", "golden", "--out", "rules.txt")
    assert res.stdout == "" and (run_dir / "exports" / "rules.txt").is_file() and not (tmp_path / "rules.txt").exists()
    assert f"wrote {run_dir / 'exports' / 'rules.txt'}" in res.stderr
    # a path with a folder part is taken as given; without --out the rules go to stdout and nothing is written
    invoke("export", run_dir, "--format", "golden", "--out", "./here.txt")
    assert (tmp_path / "here.txt").read_text() == (run_dir / "exports" / "rules.txt").read_text()
    assert invoke("export", run_dir, "--format", "golden").stdout == (tmp_path / "here.txt").read_text()
    res = invoke("export", run_dir, "--format", "golden", "--out", tmp_path / "missing" / "x.txt", ok=False)
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "--out: cannot write" in res.output


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
    data = json.loads(invoke(*args, "--head", "0", "--pair", 0, 1, "--top", 1, "--format", "json").output)
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

"""``fednsl rules explain`` and ``rules export`` on a fednsl-kg run: a hand-made family KG trained for one round."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from fednsl.cli.main import cli
from fednsl.config import load_config
from fednsl.pipeline import train

CONFIG = "configs/fednsl_kg_synthetic.yaml"
TINY = [
    "rounds=1",
    "method_kwargs.predictor={epochs: 5, eval_every: 5, patience: 1}",
    "method_kwargs.mining={samples_per_relation: 80, max_rules_per_head: 20}",
    "method_kwargs.max_bodies=12",
    "method_kwargs.pool_top=8",
    "method_kwargs.num_samples=30",
    "method_kwargs.report_valid=false",
    "method_kwargs.generator={pretrain_epochs: 1, epochs: 1, samples_per_epoch: 500}",
]


def family_kg(folder: Path) -> None:
    """Four three-generation families plus anna -> {bob, eve}, bob -> {carl, dora}, eve -> finn, with parent_of,
    child_of, sibling_of and grandparent_of; grandparent_of(anna, carl) is the test fact, (anna, finn) the valid one."""
    parent = []
    for f in range(4):
        kids = [f"f{f}_p{i}" for i in range(2)]
        parent += [(f"f{f}_gp{g}", k) for g in range(2) for k in kids]
        parent += [(k, f"f{f}_c{j}{c}") for j, k in enumerate(kids) for c in range(2)]
    parent += [("anna", "bob"), ("bob", "carl"), ("bob", "dora"), ("anna", "eve"), ("eve", "finn")]
    children: dict[str, list[str]] = {}
    for a, b in parent:
        children.setdefault(a, []).append(b)
    test, valid = [("anna", "grandparent_of", "carl")], [("anna", "grandparent_of", "finn")]
    train_rows = [(a, "parent_of", b) for a, b in parent] + [(b, "child_of", a) for a, b in parent]
    train_rows += sorted({(x, "sibling_of", y) for kids in children.values() for x in kids for y in kids if x != y})
    grand = sorted({(a, "grandparent_of", c) for a, bs in children.items() for b in bs for c in children.get(b, [])})
    train_rows += [g for g in grand if g not in test + valid]
    folder.mkdir(parents=True)
    for name, rows in (("train", train_rows), ("valid", valid), ("test", test)):
        (folder / f"{name}.txt").write_text("".join("\t".join(r) + "\n" for r in rows))


@pytest.fixture(scope="module")
def kg_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("family")
    family_kg(base / "family")
    result = train(load_config(CONFIG, [*TINY, f"data.source={base / 'family'}"]), base / "run", progress=False)
    return result.run_dir


def invoke(*args: object) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, ["rules", *(str(a) for a in args)])
    return res.exit_code, res.stdout, res.stderr


def test_explain_names_the_middle_entity_of_a_grandparent_path(kg_run: Path) -> None:
    code, out, err = invoke("explain", kg_run, "--head", "grandparent_of", "--pair", "anna", "carl", "--top", "3")
    assert code == 0, out + err
    lines = out.splitlines()
    assert re.fullmatch(r"grandparent_of\(anna, carl\): \d+ of \d+ rules fire", lines[0])
    assert lines[1] == "evidence: training triples of KG family (1 client, 135 facts)"
    assert lines[2].startswith("ranked by global posterior; std/pca: AMIE confidence")
    # a two-hop grounding through bob: anna -parent_of-> bob -parent_of-> carl (or an equivalent child_of step)
    assert any(re.fullmatch(r"\s+anna \S+ bob \S+ carl", ln) for ln in lines), out
    assert "anna -parent_of-> bob -parent_of-> carl" in out or "anna -parent_of-> bob <-child_of- carl" in out
    data = json.loads(invoke("explain", kg_run, "--head", "3", "--pair", "anna", "carl", "--format", "json")[1])
    assert data["score"] == "global posterior" and data["pair_names"] == ["anna", "carl"] and data["items"]
    scores = [it["score"] for it in data["items"]]
    assert scores == sorted(scores, reverse=True) and all(it["groundings"] >= 1 for it in data["items"])
    assert any(p["names"] == ["anna", "bob", "carl"] for it in data["items"] for p in it["paths"])
    assert all(it["support"] is not None and it["std_confidence"] is not None for it in data["items"])


def test_explain_inverse_heads_clients_and_known_facts(kg_run: Path) -> None:
    for head in ("~grandparent_of", "inv_grandparent_of"):
        code, out, _ = invoke("explain", kg_run, "--head", head, "--pair", "carl", "anna", "--client", "c0")
        assert code == 0 and out.startswith("~grandparent_of(carl, anna): ")
        assert "ranked by posterior of client c0" in out and "(client c0, 135 facts)" in out
        assert any(re.fullmatch(r"\s+carl \S+ bob \S+ anna", ln) for ln in out.splitlines()), out
    # a training fact is left out of its own evidence
    code, out, _ = invoke("explain", kg_run, "--head", "grandparent_of", "--pair", "anna", "dora")
    assert code == 0 and "; the fact itself left out" in out and "grandparent_of <- grandparent_of\n" not in out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ("--head", "grandparnt_of", "--pair", "anna", "carl"),
            "--head: unknown relation 'grandparnt_of' (did you mean 'grandparent_of'",
        ),
        (("--head", "~grandparnt_of", "--pair", "anna", "carl"), "--head: unknown relation 'grandparnt_of'"),
        (("--head", "grandparent_of", "--pair", "ana", "carl"), "--pair: unknown entity 'ana' "),
        (("--head", "grandparent_of", "--pair", "anna", "999"), "'999' (not a name or an id < 38 of the KG)"),
        (
            ("--head", "grandparent_of", "--pair", "anna", "carl", "--client", "c7"),
            "--client: unknown client 'c7'; the run's clients: c0",
        ),
        (("--head", "grandparent_of", "--pair", "anna", "carl", "--doc", "d1"), "--doc: a fednsl-kg run has no"),
    ],
)
def test_explain_errors_exit_2_with_one_line(kg_run: Path, args: tuple[str, ...], expected: str) -> None:
    res = CliRunner().invoke(cli, ["rules", "explain", str(kg_run), *args])
    assert res.exit_code == 2 and len(res.output.splitlines()) == 1 and expected in res.output, res.output
    if args[3] == "ana":
        assert "closest: 'anna'" in res.output


def test_export_leaves_out_zero_support_rules(kg_run: Path) -> None:
    listed = json.loads(invoke("list", kg_run, "--all", "--format", "json")[1])
    zero = sum(r["measures"]["support"] == 0 for r in listed)
    assert zero > 0  # one round of tiny settings keeps some bodies that never predict a training fact
    code, out, err = invoke("export", kg_run, "--format", "anyburl")
    assert code == 0 and f"left out {zero} rules with support 0" in err
    rows = [line.split("\t") for line in out.splitlines()]
    assert len(rows) == len(listed) - zero and all(int(r[1]) > 0 for r in rows)
    code, _, err = invoke("export", kg_run, "--format", "amie", "--out", "rules.tsv")
    assert code == 0 and (kg_run / "exports" / "rules.tsv").read_text().count("\n") == len(rows) + 1


def test_list_groups_rules_that_are_one_rule_on_the_data(kg_run: Path) -> None:
    code, grouped, _ = invoke("list", kg_run, "--sort", "posterior")
    assert code == 0, grouped
    code, every, _ = invoke("list", kg_run, "--all")
    assert code == 0 and "variants" not in every and "[uses head]" not in every
    stored = json.loads(invoke("list", kg_run, "--all", "--format", "json")[1])
    rows = json.loads(invoke("list", kg_run, "--format", "json", "--sort", "posterior")[1])
    # every stored rule is shown or is a variant of a shown one, once
    assert sum(r["variants"] for r in rows) == len(stored) and len(rows) < len(stored)
    assert all(len(r["variant_rules"]) == r["variants"] - 1 for r in rows)
    shown = sorted([r["rule"] for r in rows] + [v for r in rows for v in r["variant_rules"]])
    assert shown == sorted(r["rule"] for r in stored)
    # per triple: non-head-using, non-detour rules first, then by probability
    for triple in {r["triple_name"] for r in rows}:
        mine = [r for r in rows if r["triple_name"] == triple]
        keys = [(r["uses_head"], r["detour"]) for r in mine]
        assert keys == sorted(keys)
        for k in set(keys):
            probs = [r["probability"] for r in mine if (r["uses_head"], r["detour"]) == k]
            assert probs == sorted(probs, reverse=True)
    # sibling_of is symmetric and child_of the inverse of parent_of in the family KG: no shown rule has a
    # variant that differs other than by writing sibling_of / ~sibling_of, child_of / ~parent_of, parent_of / ~child_of
    canon = {"~sibling_of": "sibling_of", "~parent_of": "child_of", "~child_of": "parent_of"}

    def canonical(rule: str) -> list[str]:
        return [canon.get(a.strip(), a.strip()) for a in rule.split("<-")[1].split(",")]

    for r in rows:
        assert all(canonical(v) == canonical(r["rule"]) for v in r["variant_rules"]), r
    lines = grouped.splitlines()
    assert re.fullmatch(
        r"grandparent_of\S*  \(round 1, \d+ bodies as \d+ rules, sorted by posterior; head-using rules last\)",
        next(ln for ln in lines if ln.startswith("grandparent_of")),
    )
    assert lines[1].split()[-2:] == ["variants", "rule"]
    marked = [ln for ln in lines if ln.endswith("[uses head]")]
    assert marked and all("<-" in ln for ln in marked)
    top = json.loads(
        invoke("list", kg_run, "--head", "grandparent_of", "--top", "2", "--format", "json", "--sort", "posterior")[1]
    )
    assert [r["rule"] for r in top] == [r["rule"] for r in rows if r["triple_name"].startswith("grandparent_of")][:2]
    tsv = invoke("list", kg_run, "--format", "tsv", "--sort", "posterior")[1].splitlines()
    assert tsv[0].split("\t")[-5:] == ["variants", "uses_head", "detour", "explains", "loo_conf"]
    assert len(tsv) == len(rows) + 1
    # a threshold above what the data shows: only exact duplicates merge, nothing else
    loose = json.loads(invoke("list", kg_run, "--format", "json", "--threshold", "1")[1])
    assert len(loose) >= len(rows)


def test_list_ranks_rules_by_what_they_explain_beyond_the_rules_above(kg_run: Path) -> None:
    from kg.grounding.sparse import SparseGraph
    from kg.kg_sources import load_kg
    from rules.marginal import contributions

    code, text, _ = invoke("list", kg_run)
    assert code == 0 and "ranked by what each explains beyond those above" in text
    assert text.splitlines()[1].split()[-4:] == ["explains", "loo_conf", "variants", "rule"]
    rows = json.loads(invoke("list", kg_run, "--format", "json")[1])
    by_head: dict[str, list[dict]] = {}
    for r in rows:
        by_head.setdefault(r["rule"].split(" <- ")[0], []).append(r)
    # the textbook rules of the family KG come first: child_of <- ~parent_of, grandparent_of <- parent_of, parent_of
    # (or a form equal to it on the data: ~child_of for parent_of), sibling_of <- ~sibling_of / sibling_of
    assert by_head["child_of"][0]["rule"] in ("child_of <- ~parent_of",)
    first = by_head["grandparent_of"][0]
    assert {first["rule"], *first["variant_rules"]} & {"grandparent_of <- parent_of, parent_of"}
    # tiers: plain rules, then detours, then head-using rules; within the plain rules gains never increase much
    for mine in by_head.values():
        tiers = [2 * r["uses_head"] + r["detour"] for r in mine]
        assert tiers == sorted(tiers)
        plain = [r["explains"] for r in mine if not r["uses_head"] and not r["detour"]]
        assert all(b <= a / (1 - 0.05) + 1e-12 for a, b in zip(plain, plain[1:]))
    # the explains column is the module's noisy-OR gain on the run's training facts, recomputed here
    kg = load_kg(str(kg_run.parent / "family"))
    graph = SparseGraph.from_triples(kg.train, kg.num_entities, kg.num_relations)
    head = list(kg.relations).index("child_of")
    mine = by_head["child_of"]
    names = {
        **{r: i for i, r in enumerate(kg.relations)},
        **{f"~{r}": i + kg.num_relations for i, r in enumerate(kg.relations)},
    }
    bodies = [tuple(names[a.strip()] for a in r["rule"].split(" <- ")[1].split(",")) for r in mine]
    c = contributions(
        graph,
        head,
        bodies,
        kg.train[kg.train[:, 1] == head][:, [0, 2]],
        tiers=[2 * r["uses_head"] + r["detour"] for r in mine],
        tie=[r["probability"] for r in mine],
    )
    assert list(c.order) == list(range(len(mine)))
    assert [round(r["explains"], 9) for r in mine] == [round(g / c.facts, 9) for g in c.gain]


def _tsv(path: Path) -> list[dict[str, str]]:
    header, *lines = path.read_text().splitlines()
    return [dict(zip(header.split("\t"), ln.split("\t"))) for ln in lines]


def _anyburl_rules(run: Path, text: str) -> list[str]:
    """The rules of an anyburl export as the store writes them (``head <- b1, ~b2``)."""
    from rules.formats import parse_anyburl
    from rules.store import RuleStore

    store = RuleStore.load(run)
    rules = parse_anyburl(text, store.vocab)
    return [f"{store.relations[s.rule.head]} <- {store.vocab.format_body(s.rule.body)}" for s in rules]


def test_rules_tsv_and_exports_follow_the_list_order(kg_run: Path) -> None:
    from rules.store import RuleStore

    store = RuleStore.load(kg_run)
    assert store.ranked and store.reading_order is not None and store.reading_order["threshold"] == 0.6
    summary = json.loads((kg_run / "summary.json").read_text())
    assert summary["rule_order"]["source"] == "computed" and summary["rule_order"]["training_triples"] == 135
    listed = json.loads(invoke("list", kg_run, "--format", "json")[1])
    tsv = _tsv(kg_run / "rules.tsv")
    # per triple, the rules.tsv lines that carry `explains` (each rule's shown form) are the list, in its order
    for triple in {r["triple_name"] for r in listed}:
        mine = [r for r in listed if r["triple_name"] == triple]
        lines = [r for r in tsv if r["triple"] == triple]
        assert [r["rule"] for r in lines if r["explains"]] == [r["rule"] for r in mine]
        explains = [float(r["explains"]) for r in lines if r["explains"]]  # written with 6 significant digits
        assert explains == pytest.approx([r["explains"] for r in mine], rel=1e-5)
        assert [int(r["rank"]) for r in lines] == sorted(int(r["rank"]) for r in lines)
        # each rule's other stored forms follow it, in the list's variant order
        forms = [f for r in mine for f in [r["rule"], *r["variant_rules"]]]
        assert [r["rule"] for r in lines] == forms
    # the anyburl export: per head, the same order, rules with support 0 left out
    stored = json.loads(invoke("list", kg_run, "--all", "--format", "json")[1])
    support = {r["rule"]: r["measures"]["support"] for r in stored}
    code, out, err = invoke("export", kg_run, "--format", "anyburl")
    assert code == 0 and "no reading order" not in err
    exported = _anyburl_rules(kg_run, out)
    expected = [f for r in listed for f in [r["rule"], *r["variant_rules"]] if support[f] > 0]
    for head in store.relations:
        mine = f"{head} <- "
        assert [x for x in exported if x.startswith(mine)] == [x for x in expected if x.startswith(mine)]
    golden = invoke("export", kg_run, "--format", "golden")[1]
    assert [ln for ln in golden.splitlines() if "<-" in ln and not ln.startswith("#")] == exported
    json_export = json.loads(invoke("export", kg_run, "--format", "json")[1])
    assert [r["rule"] for r in json_export] == [f for f in expected if f in {r["rule"] for r in json_export}]
    assert [r["explains"] for r in json_export if r["rule"] in {x["rule"] for x in listed}] == pytest.approx(
        [r["explains"] for r in listed if support[r["rule"]] > 0]
    )


def test_a_store_without_the_recorded_order_lists_as_before(kg_run: Path, tmp_path: Path) -> None:
    import shutil

    old = tmp_path / "old"
    shutil.copytree(kg_run, old)
    data = json.loads((old / "rules.json").read_text())
    del data["reading_order"]
    for item in data["triples"]:
        del item["ranked"]
    data["version"] = 1
    (old / "rules.json").write_text(json.dumps(data))
    # the list measures the order again on the KG rebuilt from config.yaml: the same as the recorded one
    for args in (("--format", "json"), ("--top", "2"), ("--sort", "posterior", "--format", "tsv")):
        assert invoke("list", old, *args)[:2] == invoke("list", kg_run, *args)[:2]
    # exports keep the posterior order, and say how to record the list's order
    code, out, err = invoke("export", old, "--format", "anyburl")
    assert code == 0 and "note: no reading order recorded" in err and f"fednsl rules counts {old}" in err
    probs = {r["rule"]: r["probability"] for r in json.loads(invoke("list", old, "--all", "--format", "json")[1])}
    texts = _anyburl_rules(old, out)
    assert len(texts) == len(set(texts)) and all(
        probs[a] >= probs[b] for a, b in zip(texts, texts[1:]) if a.split(" <- ")[0] == b.split(" <- ")[0]
    )
    # `rules counts` records it; then everything reads as on a new run, without the KG
    code, out, _ = invoke("counts", old)
    assert code == 0 and "rules.tsv follows that order" in out, out
    assert invoke("counts", old)[1].splitlines()[-1] == "the rules' reading order is already recorded"
    assert (old / "rules.tsv").read_text() == (kg_run / "rules.tsv").read_text()
    (old / "config.yaml").unlink()  # the recorded order needs no KG
    code, text, err = invoke("list", old)
    assert code == 0 and not err and text == invoke("list", kg_run)[1]

"""fednsl-kg: the V-EM loop on the planted-rule KG, centralised and federated, through the CLI and the Python API."""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from fednsl.cli.main import cli
from fednsl.config import load_config
from fednsl.federation.records import Message, validate
from fednsl.methods.fednsl_kg.bodies import mirror, query_rule_sets
from fednsl.methods.fednsl_kg.client import (
    FedNSLKGClient,
    amie_counts,
    mine_forward_rules,
    type_signature_counts,
)
from fednsl.methods.fednsl_kg.messages import (
    EVAL_SCHEMA,
    decode_rank_sums,
    encode_rank_sums,
    head_signature,
)
from fednsl.methods.fednsl_kg.scoring import score_rules
from fednsl.pipeline import build_federation, train
from fednsl.tasks.rule_learning import strip
from kg.grounding.sparse import SparseGraph
from kg.kg_partition import partition_kg
from kg.kg_sources import load_kg
from kg.kg_synthetic import planted_kg
from kg.linkpred import RankingMetrics
from kg.triples import write_triples
from rules.store import RuleStore
from rules.workers import spawn_map

CONFIG = "configs/fednsl_kg_synthetic.yaml"
SYNTH = {"num_families": 5}
FAST = ["rounds=2", "method_kwargs.predictor={epochs: 5, eval_every: 5, patience: 1}",
        "method_kwargs.mining={samples_per_relation: 80, max_rules_per_head: 20}",
        "method_kwargs.max_bodies=12", "method_kwargs.pool_top=8", "method_kwargs.num_samples=30",
        "method_kwargs.report_valid=false", f"data.synthetic={json.dumps(SYNTH)}",
        "method_kwargs.generator={pretrain_epochs: 1, epochs: 1, samples_per_epoch: 500}"]
FED3 = [*FAST, "data.num_clients=3"]
TEST_KEYS = ("test_mrr", "test_mr", "test_hits@1", "test_hits@3", "test_hits@10")


def _invoke(args: list[str]) -> str:
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.stdout


def _equivalence_canon():
    """Canonical body tokens under the planted length-1 rules (exact equivalences such as child_of = ~parent_of):
    the family KG has many logically equal bodies, so "the planted rule" means its equivalence class."""
    kg, planted = planted_kg(seed=0, **SYNTH)
    R = kg.num_relations
    root = list(range(2 * R))  # union-find over tokens; each class is named by its smallest token

    def find(t: int) -> int:
        while root[t] != t:
            t = root[t]
        return t
    for r in planted:
        if len(r.body) == 1:
            for a, b in ((r.head, r.body[0]), (r.head + R, (r.body[0] + R) % (2 * R))):
                ra, rb = find(a), find(b)
                root[max(ra, rb)] = min(ra, rb)

    def canon(body) -> tuple[int, ...]:
        return tuple(find(int(t)) for t in body)
    return kg, planted, canon


@pytest.fixture(scope="module")
def central(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("kg") / "central"
    args = ["train", CONFIG, "--out", str(out), "--quiet"]
    for o in FAST:
        args += ["--set", o]
    _invoke(args)
    return out


@pytest.fixture(scope="module")
def federated(tmp_path_factory):
    out = tmp_path_factory.mktemp("kg") / "fed"
    return train(load_config(CONFIG, FED3), out, progress=False)


def test_cli_run_writes_summary_metrics_and_bytes(central: Path) -> None:
    s = json.loads((central / "summary.json").read_text())
    for k in TEST_KEYS:
        assert k in s and np.isfinite(s[k])
    assert 0 < s["test_mrr"] <= 1 and s["test_mr"] >= 1 and s["test_hits@1"] <= s["test_hits@3"] <= s["test_hits@10"]
    assert set(s["clients"]) == {"c0"} and s["clients"]["c0"]["test_mrr"] == pytest.approx(s["test_mrr"])
    rows = [json.loads(line) for line in (central / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if r["scope"] == "server" and r["stage"] == "train"]
    assert len(train_rows) == 2 and all(r["train.bytes_up"] > 0 and r["train.bytes_down"] > 0 for r in train_rows)
    assert s["peak_rss_mb"] > 0 and "c0: sparse graph of" in (central / "run.log").read_text()


def test_mrr_beats_no_rule_baseline(central: Path) -> None:
    kg, _ = planted_kg(seed=0, **SYNTH)
    baseline, _ = score_rules([], kg, predictor={"epochs": 5, "eval_every": 5, "patience": 1})
    s = json.loads((central / "summary.json").read_text())
    assert s["test_mrr"] > baseline.compute()["mrr"] + 0.2


def test_planted_rules_in_top5_through_cli(central: Path) -> None:
    kg, planted, canon = _equivalence_canon()
    R = kg.num_relations
    per_head: dict[int, list[bool]] = {}
    tops: dict[int, set[tuple[int, ...]]] = {}
    for rule in planted:
        out = _invoke(["rules", "list", str(central), "--head", kg.relations[rule.head], "--top", "5", "--format", "json"])
        rows = json.loads(out)
        assert 1 <= len(rows) <= 5 and all(r["measures"]["support"] is not None for r in rows)
        tops[rule.head] = {canon(strip(r["tokens"], R)) for r in rows}
        per_head.setdefault(rule.head, []).append(canon(rule.body) in tops[rule.head])
    # the exact planted rules (length 1: inverse equivalences) are in the top 5 of their heads (all but at most
    # one: with the test's tiny budget grandchild_of <- ~grandparent_of can lose to redundant detour bodies) ...
    exact = {kg.relations[r.head]: canon(r.body) in tops[r.head] for r in planted if len(r.body) == 1}
    assert sum(exact.values()) >= len(exact) - 1, f"exact planted rules missing from the top 5: {exact}"
    # ... a regression guard, not the goal: KNOWN GAP — the multi-atom planted rules (grandparent_of <- parent_of,
    # parent_of; uncle_of <- sibling_of, parent_of; great_grandparent_of <- ...) are not in the top 5 at this
    # budget: redundant 3-atom detour bodies (r, ~r', r'') get as high an H(rule) and more mined support.
    hit_heads = [h for h, hits in per_head.items() if any(hits)]
    assert len(hit_heads) >= 3, f"planted rules in the top 5 only for {hit_heads}"


def test_export_anyburl_and_amie_with_real_counts(central: Path, tmp_path: Path) -> None:
    kg, _ = planted_kg(seed=0, **SYNTH)
    text = _invoke(["rules", "export", str(central), "--format", "anyburl"])
    lines = [line.split("\t") for line in text.splitlines() if line.strip()]
    assert lines and all(len(f) == 4 for f in lines)
    # counts equal an independent recount of the rule on the training graph
    graph = SparseGraph.from_triples(kg.train, kg.num_entities, kg.num_relations)
    predicted, correct, _, rule = lines[0]
    from rules.fol import RelationVocab
    from rules.formats import parse_anyburl_rule
    parsed = parse_anyburl_rule(rule, RelationVocab(kg.relations))
    c = amie_counts(graph, parsed.head, [parsed.body])
    assert (int(predicted), int(correct)) == (int(c.body_size[0]), int(c.support[0]))
    amie = _invoke(["rules", "export", str(central), "--format", "amie"])
    assert amie.splitlines()[0].startswith("Rule") and len(amie.splitlines()) == len(lines) + 1
    # and another learner's file format scores through the same predictor and evaluator
    (tmp_path / "rules.txt").write_text(text)
    (tmp_path / "kg").mkdir()
    for split in ("train", "valid", "test"):
        arr = getattr(kg, split)
        (tmp_path / "kg" / f"{split}.txt").write_text(
            "".join(f"{kg.entities[h]}\t{kg.relations[r]}\t{kg.entities[t]}\n" for h, r, t in arr.tolist()))
    out = _invoke(["rules", "score", str(tmp_path / "rules.txt"), "--kg", str(tmp_path / "kg"), "--format", "anyburl",
                   "--top", "3", "--epochs", "5", "--json"])
    scored = json.loads(out)
    assert scored["queries"] == 2 * len(kg.test) and 0 < scored["mrr"] <= 1
    assert scored["paths"] == scored["grounded_on"] == "walks"
    for paths, grounded in (("simple", {"simple"}), ("auto", {"simple", "walks"})):
        other = json.loads(_invoke(["rules", "score", str(tmp_path / "rules.txt"), "--kg", str(tmp_path / "kg"),
                                    "--format", "anyburl", "--top", "3", "--epochs", "5", "--paths", paths, "--json"]))
        assert other["paths"] == paths and other["grounded_on"] in grounded and 0 < other["mrr"] <= 1
    # rules with constants beside the file's, as given or chosen on valid (the choice and its valid MRRs reported)
    base = [str(tmp_path / "rules.txt"), "--kg", str(tmp_path / "kg"), "--format", "anyburl", "--top", "3",
            "--epochs", "5", "--constant-rules", "20"]
    fixed = json.loads(_invoke(["rules", "score", *base, "--json"]))
    assert fixed["constants"] == "fixed" and fixed["constant_rules"] > 0 and "constants_chosen" not in fixed
    auto = json.loads(_invoke(["rules", "score", *base, "--constants", "auto", "--json"]))
    assert auto["constants_chosen"] in ("on", "off") and set(auto["constants_valid_mrr"]) == {"off", "on"}
    assert auto["constant_rules"] == (fixed["constant_rules"] if auto["constants_chosen"] == "on" else 0)
    same = fixed if auto["constants_chosen"] == "on" else scored
    assert auto["mrr"] == same["mrr"]  # the chosen way's fit, to the bit
    text = _invoke(["rules", "score", *base, "--constants", "auto"])
    assert f"rules with constants {auto['constants_chosen']}, chosen on valid (valid MRR off " in text
    # the same rules written as AMIE TSV and as RNNLogic integer rules (with its relations.dict) score identically
    (tmp_path / "rules.amie").write_text(amie)
    (tmp_path / "rules.rnnlogic").write_text(_invoke(["rules", "export", str(central), "--format", "rnnlogic"]))
    (tmp_path / "relations.dict").write_text("".join(f"{i}\t{name}\n" for i, name in enumerate(kg.relations)))
    for fmt, extra in (("amie", []), ("rnnlogic", ["--relations", str(tmp_path / "relations.dict")])):
        other = json.loads(_invoke(["rules", "score", str(tmp_path / f"rules.{fmt}"), "--kg", str(tmp_path / "kg"),
                                    "--format", fmt, *extra, "--top", "3", "--epochs", "5", "--json"]))
        keep = [k for k in scored if k not in ("rule_file", "format", "fit_s", "eval_s")]
        assert {k: other[k] for k in keep} == {k: scored[k] for k in keep}, fmt


def test_rules_score_bad_input_exits_2(tmp_path: Path) -> None:
    (tmp_path / "bad.txt").write_text("no_such_relation(X,Y) <= parent_of(X,Y)\n")
    res = CliRunner().invoke(cli, ["rules", "score", str(tmp_path / "bad.txt"), "--kg", "synthetic", "--format", "anyburl"])
    assert res.exit_code == 2 and "no_such_relation" in res.output
    res = CliRunner().invoke(cli, ["rules", "score", str(tmp_path / "bad.txt"), "--kg", "synthetic", "--format",
                                   "anyburl", "--constants", "auto"])
    assert res.exit_code == 2 and "--constant-rules" in res.output


def test_federated_aggregate_equals_merged_client_sums(federated) -> None:
    fed = federated.federation
    s = json.loads((federated.run_dir / "summary.json").read_text())
    assert len(fed.clients) == 3 and set(s["clients"]) == set(fed.clients)
    merged = RankingMetrics()
    for cid in sorted(fed.clients):
        m = fed.clients[cid].ranking()
        assert s["clients"][cid]["test_mrr"] == m.compute()["mrr"]
        merged.merge(m)
    expected = merged.compute()
    for k in ("mrr", "mr", "hits@1", "hits@3", "hits@10"):
        assert s[f"test_{k}"] == expected[k]
    # relation partition: each client's relations are disjoint; queries = 2 per test triple over all clients
    assert s["test_queries"] == sum(2 * len(c.part.test) for c in fed.clients.values())


def test_seeded_runs_reproduce_exactly(federated, tmp_path: Path) -> None:
    again = train(load_config(CONFIG, FED3), tmp_path / "again", progress=False)
    a = json.loads((federated.run_dir / "summary.json").read_text())
    b = json.loads((again.run_dir / "summary.json").read_text())
    assert {k: a[k] for k in TEST_KEYS} == {k: b[k] for k in TEST_KEYS}
    assert (federated.run_dir / "rules.tsv").read_text() == (again.run_dir / "rules.tsv").read_text()


def test_local_only_trains_each_client_alone(tmp_path: Path) -> None:
    res = train(load_config(CONFIG, [*FED3, "rounds=1", "method_kwargs.local_only=true"]), tmp_path / "lo",
                progress=False)
    s = json.loads((res.run_dir / "summary.json").read_text())
    assert np.isfinite(s["test_mrr"]) and len(s["clients"]) == 3
    assert sorted(p.name for p in (res.run_dir / "local").iterdir()) == sorted(s["clients"])
    strategy = res.federation.strategy
    assert len(strategy.learners) == 3  # one generator and pool per client, none shared


def test_server_aggregation_changes_what_clients_score() -> None:
    """Two different posterior uploads must give different round-2 rules, priors and client scores."""
    fed = build_federation(load_config(CONFIG, FAST))
    strategy, client = fed.strategy, fed.clients["c0"]
    stats = client.train_stats(Message("train.stats", 1, config={"max_body_len": 3, "seed": 1}))
    strategy.aggregate_train_stats(1, {"c0": stats}, {})
    msg = strategy.configure_train(1, ["c0"])["c0"]
    reply = client.train(Message("train", 1, arrays=msg.arrays, config={**msg.config, "seed": 2}))
    flipped = copy.deepcopy(reply)
    post, mask = flipped.arrays["posterior"], flipped.arrays["mask"]
    for t in range(post.shape[0]):  # all mass on each head's last body instead of the client's posterior
        if mask[t].any():
            post[t] = 0.0
            post[t, np.flatnonzero(mask[t])[-1]] = 1.0
    validate(flipped, strategy.reply_schema("train"))
    outs = []
    for rep in (reply, flipped):
        s = copy.deepcopy(strategy)
        s.aggregate_train(1, {"c0": rep}, {})
        m2 = s.configure_train(2, ["c0"])["c0"]
        c = copy.deepcopy(client)
        c.train(Message("train", 2, arrays=m2.arrays, config={**m2.config, "seed": 3}))
        queries = np.stack([c.part.test[:, 0], c.part.test[:, 1]], 1)
        import torch
        outs.append((m2.arrays, c.predictor.score(torch.from_numpy(queries)).numpy()))
    (a1, s1), (a2, s2) = outs
    assert not (np.array_equal(a1["bodies"], a2["bodies"]) and np.allclose(a1["log_prior"], a2["log_prior"]))
    assert not np.allclose(s1, s2)


def test_rank_sums_round_trip_is_exact() -> None:
    rng = np.random.default_rng(0)
    m = RankingMetrics()
    m.update_counts(rng.integers(0, 5000, 3000), rng.integers(1, 300, 3000))
    limbs = encode_rank_sums(m)
    validate(Message("evaluate", 1, "c", arrays={"rank_sums": limbs}, metrics={"queries": m.count}), EVAL_SCHEMA)
    back = decode_rank_sums(limbs, m.count)
    assert back.state_dict() == m.state_dict() and back.compute() == m.compute()


def test_mirror_and_query_rule_sets() -> None:
    R = 4
    assert mirror((0, 5, 2), R) == (6, 1, 4)
    heads = np.array([1])
    bodies = np.array([[[0, 5, 8], [2, 8, 8]]])
    sets = query_rule_sets(heads, bodies, np.array([[True, True]]), R)
    assert sets == {1: [(0, 5), (2,)], 5: [(1, 4), (6,)]}


def test_bad_options_name_the_key() -> None:
    with pytest.raises(ValueError, match="aggregator"):
        build_federation(load_config(CONFIG, ["method_kwargs.aggregator=mean"]))
    with pytest.raises(ValueError, match="partition"):
        build_federation(load_config(CONFIG, ["data.partition=node"]))
    with pytest.raises(ValueError, match="no_such"):
        build_federation(load_config(CONFIG, ["method_kwargs.no_such=1"]))
    with pytest.raises(ValueError, match="shares"):
        build_federation(load_config(CONFIG, ["data.num_clients=3", "data.shares=[0.5,0.5]", "data.partition=triple"]))
    with pytest.raises(ValueError, match=r"predictor.*unknown option\(s\) \['no_such'\]"):
        build_federation(load_config(CONFIG, ["method_kwargs.predictor.no_such=1"]))
    with pytest.raises(ValueError, match=r"predictor \(fednsl-kg\): paths must be one of .*, got 'trails'"):
        build_federation(load_config(CONFIG, ["method_kwargs.predictor.paths=trails"]))
    with pytest.raises(ValueError, match="constants must be one of .*, got False"):  # YAML reads off as false
        build_federation(load_config(CONFIG, ["method_kwargs.predictor.constants=off"]))
    with pytest.raises(ValueError, match="needs constant_rules > 0"):
        build_federation(load_config(CONFIG, ["method_kwargs.predictor.constants=auto"]))
    with pytest.raises(ValueError, match=r"predictor \(fednsl-kg\): feature must be one or more of .*, got 'log2'"):
        build_federation(load_config(CONFIG, ["method_kwargs.predictor.feature=log2"]))
    with pytest.raises(ValueError, match=r"predictor \(fednsl-kg\): constant_rules must be an integer, got 'abc'"):
        build_federation(load_config(CONFIG, ["method_kwargs.predictor.constant_rules=abc"]))
    with pytest.raises(ValueError, match="valid_filter='test'"):
        build_federation(load_config(CONFIG, ["method_kwargs.valid_filter=test"]))
    with pytest.raises(ValueError, match=r"mining.*unknown option\(s\) sample_per_relation"):
        build_federation(load_config(CONFIG, ["method_kwargs.mining.sample_per_relation=10"]))
    with pytest.raises(ValueError, match=r"mining.*workers must be an integer 1..64, got 0"):
        build_federation(load_config(CONFIG, ["method_kwargs.mining.workers=0"]))
    with pytest.raises(ValueError, match=r"mining.*rank_by='lift'"):
        build_federation(load_config(CONFIG, ["method_kwargs.mining.rank_by=lift"]))
    with pytest.raises(ValueError, match=r"mining.*pool_by_length must be true or false, got 'yes please'"):
        build_federation(load_config(CONFIG, ["method_kwargs.mining.pool_by_length=yes please"]))
    with pytest.raises(ValueError, match=r"mining.*with rank_by='support' it would do nothing"):
        build_federation(load_config(CONFIG, ["method_kwargs.mining.pool_by_length=true"]))


def test_shares_give_unequal_clients() -> None:
    fed = build_federation(
        load_config(CONFIG, ["data.num_clients=3", "data.partition=triple", "data.shares=[0.8,0.1,0.1]"])
    )
    sizes = [len(c.part.train) for c in fed.clients.values()]  # type: ignore[attr-defined]
    assert sizes[0] > 6 * max(sizes[1:])


def test_entity_partition_with_shares_gives_each_client_its_own_entities() -> None:
    over = ["data.num_clients=3", "data.partition=entity", "data.shares=[0.7,0.15,0.15]", "seed=4"]
    fed = build_federation(load_config(CONFIG, [*FAST, *over]))
    parts = [c.part for c in fed.clients.values()]  # type: ignore[attr-defined]
    kg, _ = planted_kg(seed=0, **SYNTH)
    expected = partition_kg(kg, 3, by="entity", seed=4, shares=[0.7, 0.15, 0.15])
    assert all(np.array_equal(p.train, q.train) and np.array_equal(p.test, q.test) for p, q in zip(parts, expected))
    with pytest.raises(ValueError, match="shares"):
        build_federation(load_config(CONFIG, ["data.num_clients=2", "data.shares=[0.5,0.5]"]))  # relation


def test_resume_equals_an_uninterrupted_run(federated, tmp_path: Path) -> None:
    out = tmp_path / "resumed"
    train(load_config(CONFIG, [*FED3, "rounds=1"]), out, progress=False)
    train(load_config(CONFIG, FED3), out, resume=True, progress=False)
    a = json.loads((federated.run_dir / "summary.json").read_text())
    b = json.loads((out / "summary.json").read_text())
    assert {k: a[k] for k in TEST_KEYS} == {k: b[k] for k in TEST_KEYS}
    assert (federated.run_dir / "rules.tsv").read_text() == (out / "rules.tsv").read_text()


NATIONS = ["data.source=pykeen:nations", "rounds=1", "method_kwargs.max_body_len=2",
           "method_kwargs.predictor={epochs: 5, eval_every: 5, patience: 1}",
           "method_kwargs.mining={samples_per_relation: 20, max_neighbors: 8, max_rules_per_head: 10}",
           "method_kwargs.max_bodies=10", "method_kwargs.pool_top=6", "method_kwargs.num_samples=20",
           "method_kwargs.report_valid=false", "method_kwargs.counts=never",
           "method_kwargs.generator={pretrain_epochs: 1, epochs: 1, samples_per_epoch: 300}"]


def test_whole_loop_on_nations_sized_data(tmp_path: Path) -> None:
    """Mining, generator, predictor, E/M-steps and filtered evaluation end to end on Nations (14 entities,
    55 relations, read from the pykeen wheel), at CI settings: rules must beat the no-rule (bias-only) predictor."""
    from kg.kg_sources import load_kg
    from kg.triples import TriplesError

    try:
        kg = load_kg("pykeen:nations")
    except TriplesError:
        pytest.skip("pykeen (the optional 'kg' extra) is not installed")
    res = train(load_config(CONFIG, NATIONS), tmp_path / "nations", progress=False)
    s = json.loads((res.run_dir / "summary.json").read_text())
    assert all(np.isfinite(s[k]) for k in TEST_KEYS)
    assert s["test_queries"] == 2 * len(kg.test)
    baseline, _ = score_rules([], kg, predictor={"epochs": 5, "eval_every": 5, "patience": 1})
    assert s["test_mrr"] > baseline.compute()["mrr"] + 0.05


def test_mining_ranked_by_confidence_reorders_by_amie_counts() -> None:
    """``mining.rank_by: confidence``: the same bodies as support ranking, reordered by support / body size as
    ``amie_counts`` counts them, and the cap keeps the most confident ones."""
    kg, _ = planted_kg(seed=0, **SYNTH)
    graph = SparseGraph.from_triples(kg.train, kg.num_entities, kg.num_relations)
    opts = {"samples_per_relation": 80, "max_rules_per_head": None}
    by_support = mine_forward_rules(graph, kg.train, 2, 0, opts)
    by_conf = mine_forward_rules(graph, kg.train, 2, 0, {**opts, "rank_by": "confidence"})
    capped = mine_forward_rules(graph, kg.train, 2, 0, {**opts, "rank_by": "confidence", "max_rules_per_head": 3})
    assert by_conf.keys() == by_support.keys()
    for r, table in by_conf.items():
        assert table == by_support[r]  # same bodies, same supports
        bodies = list(table)
        c = amie_counts(graph, r, bodies)
        conf = c.support / np.maximum(c.body_size, 1)
        assert np.all(np.diff(conf) <= 1e-12)
        assert list(capped[r]) == bodies[:3]
    with pytest.raises(ValueError, match="rank_by"):
        mine_forward_rules(graph, kg.train, 2, 0, {"rank_by": "lift"})


def test_mining_pool_by_length_counts_the_best_supported_of_each_length() -> None:
    """``mining.pool_by_length``: with a pool of 3 by support, the confidence ranking sees the 3 best supported
    bodies of each length, in support order, and orders them by confidence."""
    kg, _ = planted_kg(seed=0, **SYNTH)
    graph = SparseGraph.from_triples(kg.train, kg.num_entities, kg.num_relations)
    opts = {"samples_per_relation": 80, "max_rules_per_head": None, "rank_by": "support"}
    by_support = mine_forward_rules(graph, kg.train, 2, 0, opts)
    pooled = mine_forward_rules(graph, kg.train, 2, 0, {**opts, "rank_by": "confidence", "pool_per_head": 3})
    by_length = mine_forward_rules(
        graph, kg.train, 2, 0, {**opts, "rank_by": "confidence", "pool_per_head": 3, "pool_by_length": True}
    )
    for r, table in by_support.items():
        ranked = list(table)
        assert sorted(pooled[r]) == sorted(ranked[:3])
        pool = [b for n in (1, 2) for b in [b for b in ranked if len(b) == n][:3]]
        assert sorted(by_length[r]) == sorted(pool)
        c = amie_counts(graph, r, list(by_length[r]))
        assert np.all(np.diff(c.support / np.maximum(c.body_size, 1)) <= 1e-12)


def test_mining_one_body_per_rule_identity() -> None:
    """``mining.identity``: bodies equal up to the measured symmetric / inverse relations are mined once, written
    with the fewest inverse atoms, in the place of the class's best member; the cap counts classes."""
    from kg.kg_synthetic import RELATIONS
    from rules.identity import canonical_body, equivalences

    kg, _ = planted_kg(seed=0)
    R = kg.num_relations
    graph = SparseGraph.from_triples(kg.train, kg.num_entities, R)
    opts = {"samples_per_relation": 200, "max_rules_per_head": None}
    flat = mine_forward_rules(graph, kg.train, 2, 0, opts)
    once = mine_forward_rules(graph, kg.train, 2, 0, {**opts, "identity": True})
    eq = equivalences(kg.train, R, 0.6)
    assert eq[RELATIONS.index("sibling_of") + R] == RELATIONS.index("sibling_of")  # measured symmetric at .6
    for r, table in flat.items():
        classes: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        for b in table:  # brute force: the classes in order of their first member
            classes.setdefault(canonical_body(b, eq, 2 * R), []).append(b)
        assert [canonical_body(b, eq, 2 * R) for b in once[r]] == list(classes)
        for b in once[r]:
            members = classes[canonical_body(b, eq, 2 * R)]
            fewest = min(sum(t >= R for t in m) for m in members)
            assert b in members and sum(t >= R for t in b) == fewest
    gp = RELATIONS.index("grandparent_of")
    assert len(once[gp]) < len(flat[gp])  # e.g. parent_of, ~child_of and parent_of, parent_of are one rule
    capped = mine_forward_rules(graph, kg.train, 2, 0, {**opts, "identity": True, "max_rules_per_head": 5})
    assert all(list(capped[r]) == list(once[r])[:5] for r in once)


@pytest.mark.parametrize("identity", [False, True])
def test_mining_in_worker_processes_equals_one_process(identity: bool) -> None:
    """``mining.workers: 2`` deals the relations out to two processes and mines exactly what one process mines
    (every head samples from its own seed): same bodies, same order, same supports."""
    kg, _ = planted_kg(seed=1)
    graph = SparseGraph.from_triples(kg.train, kg.num_entities, kg.num_relations)
    opts = {"samples_per_relation": 60, "max_rules_per_head": 8, "rank_by": "confidence", "identity": identity}
    one = mine_forward_rules(graph, kg.train, 3, 5, opts)
    two = mine_forward_rules(graph, kg.train, 3, 5, {**opts, "workers": 2})
    assert list(one) == list(two) == sorted(one)
    for r in one:
        assert list(one[r].items()) == list(two[r].items())
    assert sum(len(t) for t in one.values()) > kg.num_relations


def test_constant_rules_and_confidence_mining_run_through_the_loop(tmp_path: Path) -> None:
    """The options of the KG configs (predictor.constant_rules, mining.rank_by), end to end on the embedded KG."""
    over = [*FAST, "rounds=1", "method_kwargs.predictor={epochs: 5, eval_every: 5, patience: 1, constant_rules: 20}",
            "method_kwargs.mining={samples_per_relation: 80, max_rules_per_head: 20, rank_by: confidence}"]
    out = tmp_path / "const"
    train(load_config(CONFIG, over), out, progress=False)
    s = json.loads((out / "summary.json").read_text())
    assert all(np.isfinite(s[k]) for k in TEST_KEYS) and s["test_mrr"] > 0.2


def test_choices_on_valid_run_through_the_loop_and_are_reported(tmp_path: Path) -> None:
    """predictor.paths, constants and lengths auto and the non-redundant noisy-OR end to end: the client reports
    whether its valid MRR chose simple paths and rules with constants, the length of the longest rules it kept and
    how many heads took NR, in metrics.jsonl, the run log and summary.json. Paths, constants and lengths are chosen
    in the first round's fit and kept after it (the second fit grounds one way alone, with or without constants,
    up to that length), resumed alike."""
    over = [
        *FAST,
        "rounds=2",
        "method_kwargs.predictor={epochs: 5, eval_every: 5, patience: 1, paths: auto, nonredundant: true, "
        "constants: auto, constant_rules: 20, lengths: auto}",
    ]
    out = tmp_path / "auto"
    result = train(load_config(CONFIG, over), out, progress=False)
    s = json.loads((out / "summary.json").read_text())
    assert all(np.isfinite(s[k]) for k in TEST_KEYS) and s["test_mrr"] > 0.2
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    simple = [v for row in rows for k, v in row.items() if k.endswith("simple_paths")]
    assert simple and set(simple) <= {0.0, 1.0}
    took = [v for row in rows for k, v in row.items() if k.endswith("heads_nonredundant")]
    assert took
    constants = [v for row in rows for k, v in row.items() if k.endswith("constant_rules_on")]
    assert constants and set(constants) <= {0.0, 1.0} and constants[0] == constants[-1]
    lengths = [v for row in rows for k, v in row.items() if k.endswith("rule_length")]
    assert lengths and set(lengths) <= {2.0, 3.0} and lengths[0] == lengths[-1]
    line = [x for x in (out / "run.log").read_text().splitlines() if "chosen on valid" in x][-1]  # round 2's
    assert "c0: chosen on valid: paths " in line and f"non-redundant noisy-OR on {int(took[-1])} of " in line
    # and in summary.json, as the run log says it
    chosen = s["chosen_on_valid"]["c0"]
    assert chosen["paths"] == ("simple" if simple[-1] else "walks") and simple[0] == simple[-1]
    assert chosen["nonredundant_heads"] == int(took[-1])
    assert f"of {chosen['heads_with_valid_queries']} heads with valid queries" in line
    assert f"paths {chosen['paths']}, kept from the first fit (valid MRR " in line
    assert chosen["constant_rules"] == ("on" if constants[-1] else "off")
    assert f"rules with constants {chosen['constant_rules']}, kept from the first fit (valid MRR off " in line
    assert chosen["rule_length"] == int(lengths[-1])
    assert f"rules up to length {chosen['rule_length']}, kept from the first fit (valid MRR 3 " in line
    client = result.federation.clients["c0"]
    pcfg = client.predictor.config
    assert pcfg.paths == chosen["paths"]  # the second fit grounded one way, with or without constants
    assert pcfg.constants == "fixed" and pcfg.constant_rules == (20 if constants[-1] else 0)
    assert pcfg.lengths == "fixed" and pcfg.max_length == chosen["rule_length"]
    assert {m.max_length for m in client.predictor.models.values()} == {chosen["rule_length"]}
    again = FedNSLKGClient("c0", client.part, client.cfg, client.filter_index)
    again.load_state_dict(client.state_dict())
    assert again.valid_choice == client.valid_choice and again.valid_choice is not None
    assert again.valid_choice["paths"] == chosen["paths"]
    assert again.valid_choice["constants"] == chosen["constant_rules"]
    assert again.valid_choice["max_length"] == chosen["rule_length"]


@pytest.mark.parametrize(("counts", "rounds"), [("every", 1), ("last", 2)])
def test_a_time_budget_bounds_the_ways_chosen_among_and_the_rounds(tmp_path: Path, counts: str, rounds: int) -> None:
    """Under ``time_budget_s`` each train request carries the seconds left; with almost none, the first fit keeps
    its first way (simple paths, without constants) and names the three it did not fit in the run log,
    metrics.jsonl and summary.json, and every head it trains stops after ``eval_every`` epochs (2 of 6), the least
    a cut leaves, which the same three report.
    A second round would end past the budget: round 1 is the last of 3 when it counted its rules (``counts:
    every``); with ``counts: last`` round 2 runs as the last, so the rules get counts, and it runs without a time
    limit (no head cut). The budget is spent at the end, so the reading order is left out, and ``fednsl rules
    counts`` records it afterwards."""
    over = [
        *FAST,
        "rounds=3",
        "time_budget_s=0.001",
        f"method_kwargs.counts={counts}",
        "method_kwargs.predictor={epochs: 6, eval_every: 2, patience: 1, paths: auto, constants: auto, "
        "constant_rules: 20}",
    ]
    out = tmp_path / "budget"
    result = train(load_config(CONFIG, over), out, progress=False)
    s = json.loads((out / "summary.json").read_text())
    assert (s["rounds"], s["rounds_planned"]) == (rounds, 3) and result.rounds_done == rounds
    assert not RuleStore.load(out).missing_counts()
    chosen = s["chosen_on_valid"]["c0"]
    cut_last = chosen.pop("heads_cut_by_budget", 0)
    assert chosen == {"paths": "simple", "constant_rules": "off", "ways_not_fitted": 3}
    predictor = result.federation.clients["c0"].predictor
    heads = 0 if predictor is None else len(predictor.bodies)  # every head of this KG has training facts
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [v for row in rows for k, v in row.items() if k.endswith("ways_not_fitted")][:1] == [3.0]
    # round 1 cut every head after eval_every epochs; a round 2 run past the budget trains without a limit
    assert [v for row in rows for k, v in row.items() if k.endswith("heads_cut_by_budget")] == [float(heads)]
    assert heads > 0 and cut_last == (heads if rounds == 1 else 0)
    text = (out / "run.log").read_text()
    assert "not fitted within the time budget: walks, simple+constants, walks+constants" in text
    line = f"c0: the time budget ended training after fewer epochs on {heads} of {heads} heads (a larger time_budget_s"
    assert line in text
    assert f"time budget: round {rounds} is the last of 3 planned" in text
    # the budget was spent when the rounds ended: the reading order is left to `fednsl rules counts`
    assert s["rule_order"]["source"] == "unavailable" and "time budget spent" in s["rule_order"]["note"]
    assert "rules.tsv keeps the posterior order: contributions not measured (time budget spent" in text
    assert not RuleStore.load(out).ranked
    _invoke(["rules", "counts", str(out)])
    assert RuleStore.load(out).ranked


def test_rules_counts_records_the_order_a_spent_budget_left_out_without_counts(tmp_path: Path) -> None:
    """A run without counts (``counts: never``, as the FB15k-237 and WN18RR configs) whose budget is spent leaves
    the reading order out; ``fednsl rules counts`` then records it, and says that it adds no counts."""
    out = tmp_path / "never"
    train(load_config(CONFIG, [*FAST, "rounds=1", "time_budget_s=0.001", "method_kwargs.counts=never"]), out)
    assert not RuleStore.load(out).ranked
    text = _invoke(["rules", "counts", str(out)])
    assert "confidence counts not added: this run's clients did not count them" in text
    assert "rules.tsv follows that order" in text and RuleStore.load(out).ranked


def test_ranking_in_worker_processes_equals_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``predictor.workers: 2`` and an evaluation of MIN_PARALLEL_WORK (query, rule) pairs or more, the test
    relations are ranked in worker processes: the same exact rank sums as one process. A smaller one stays here."""
    over = [
        *FAST,
        "rounds=1",
        "method_kwargs.predictor={epochs: 5, eval_every: 5, patience: 1, constant_rules: 20, workers: 2}",
    ]
    client = train(load_config(CONFIG, over), tmp_path / "w", progress=False).federation.clients["c0"]
    calls: list[int] = []

    def counted(fn: Any, items: Any, workers: int, shared: Any, work: Any = None) -> Any:
        calls.append(workers)
        return spawn_map(fn, items, workers, shared, work)

    monkeypatch.setattr("fednsl.methods.fednsl_kg.client.spawn_map", counted)
    one = client.ranking()
    assert calls == []  # the embedded KG's evaluation is below the threshold
    monkeypatch.setattr("rules.workers.MIN_PARALLEL_WORK", 0)
    two = client.ranking()
    assert calls == [2]
    assert one.count == two.count == 2 * len(client.part.test) and one.sums == two.sums
    assert one.compute()["mrr"] > 0.2


# ------------------------------------------------------------------------------------------------ entity types
def _typed_kg_folder(folder: Path) -> Path:
    """The planted KG with two entity types (parents, everyone else) written as a typed triples folder."""
    kg, _ = planted_kg(seed=0, **SYNTH)
    parents = set(kg.all_triples()[kg.all_triples()[:, 1] == kg.relations.index("parent_of"), 0].tolist())
    types = np.array([0 if e in parents else 1 for e in range(kg.num_entities)])
    write_triples(kg.replace(entity_types=types, type_names=("parent", "person")), folder)
    return folder


def test_type_signature_counts_match_enumeration(tmp_path: Path) -> None:
    kg = load_kg(_typed_kg_folder(tmp_path / "typed"))
    rels, pairs, counts = type_signature_counts(kg)
    expected = Counter((int(r), int(kg.entity_types[h]), int(kg.entity_types[t])) for h, r, t in kg.train)
    assert {(int(r), int(a), int(b)): int(n) for r, (a, b), n in zip(rels, pairs, counts)} == expected
    assert all(len(a) == 0 for a in type_signature_counts(planted_kg(seed=0, **SYNTH)[0]))  # untyped: none


def test_signature_is_the_most_frequent_type_pair_over_clients() -> None:
    fed = build_federation(load_config(CONFIG, FAST))
    group = fed.strategy.learners["global"]

    def reply(rels: list[int], pairs: list[tuple[int, int]], counts: list[int]) -> Message:
        return Message("train.stats", 1, "c", arrays={
            "signature_heads": np.array(rels), "signature_types": np.array(pairs).reshape(-1, 2),
            "signature_counts": np.array(counts)})
    # relation 0: (1, 0) wins only once the clients' counts are summed (3 + 3 > 5); relation 2: a tie -> smaller ids
    group.signature = head_signature([reply([0, 0, 2, 2], [(0, 1), (1, 0), (1, 1), (0, 1)], [5, 3, 2, 2]),
                                      reply([0], [(1, 0)], [3])], num_types=2)
    assert group.signature == {0: (1, 0), 2: (0, 1)}
    assert group.key(0) == (0, 1, 0) and group.key(5) == (5, 0, 0)


def test_typed_kg_keys_rule_heads_by_domain_and_range(tmp_path: Path) -> None:
    folder = _typed_kg_folder(tmp_path / "typed")
    typed = [o for o in FAST if not o.startswith("data.synthetic")] + [f"data.source={folder}"]
    info = _invoke(["data", "info", str(folder)])
    assert "entity types (2): parent" in info
    out = tmp_path / "run"
    args = ["train", CONFIG, "--out", str(out), "--quiet"]
    for o in [*typed, "rounds=1", "data.num_clients=2"]:
        args += ["--set", o]
    _invoke(args)
    kg = load_kg(folder)
    rels, pairs, counts = type_signature_counts(kg)  # the two clients' counts sum to the whole train split's
    best: dict[int, tuple[int, tuple[int, int]]] = {}
    for r, pair, n in zip(rels.tolist(), map(tuple, pairs.tolist()), counts.tolist()):
        if r not in best or n > best[r][0]:
            best[r] = (n, pair)
    store = json.loads((out / "rules.json").read_text())
    assert store["types"] == ["parent", "person"]
    heads = {tuple(t["triple"]) for t in store["triples"]}
    assert heads == {(r, *pair) for r, (_, pair) in best.items()}
    assert (kg.relations.index("parent_of"), 0, 1) in heads  # parents have children of either type; most are not parents
    rows = json.loads(_invoke(["rules", "list", str(out), "--head", "parent_of", "--top", "3", "--format", "json"]))
    assert rows and all(r["triple_name"] == "parent_of[parent->person]" for r in rows)
    fed = build_federation(load_config(CONFIG, typed))
    assert fed.strategy.gen_config.num_types == 2
    stats = fed.clients["c0"].train_stats(Message("train.stats", 1, config={"max_body_len": 3, "seed": 1}))
    bad = copy.deepcopy(stats)
    bad.arrays["signature_types"][0, 0] = 2  # a type id outside the KG's two types
    with pytest.raises(ValueError, match="signature_types"):
        validate(bad, fed.strategy.reply_schema("train.stats"))
    fed.strategy.aggregate_train_stats(1, {"c0": stats}, {})
    again = build_federation(load_config(CONFIG, typed)).strategy
    again.load_state_dict(fed.strategy.state_dict())  # resume keeps the signature
    assert again.learners["global"].signature == fed.strategy.learners["global"].signature != {}

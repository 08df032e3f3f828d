"""fednsl.rule_counts.order_rules: the post-run step that records a fednsl-kg run's reading order in rules.json."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from fednsl.config import load_config
from fednsl.rule_counts import kg_training, order_rules, run_paths
from rules.store import RuleStore

RELATIONS = ("parent_of", "child_of")
PAIRS = [(0, 1), (0, 2), (1, 3), (2, 4), (5, 6)]


def _run(folder: Path) -> Path:
    """A fednsl-kg run's rules.json: head child_of with child_of (uses the head), parent_of and ~parent_of."""
    store = RuleStore(RELATIONS, meta={"method": "fednsl-kg"})
    S = store.vocab.stay
    store.add_triple((1, 0, 0), [[1, S, S], [0, S, S], [2, S, S]], [0.5, 0.3, 0.2], round=1)
    store.save(folder)
    return folder


def _federation() -> SimpleNamespace:
    train = np.array([(a, 0, b) for a, b in PAIRS] + [(b, 1, a) for a, b in PAIRS], dtype=np.int64)
    part = SimpleNamespace(train=train, num_entities=7, relations=RELATIONS, num_relations=2)
    return SimpleNamespace(clients={"c0": SimpleNamespace(part=part)})


def test_order_from_the_federation_in_memory(tmp_path: Path) -> None:
    run = _run(tmp_path / "run")
    config = load_config("configs/fednsl_kg_synthetic.yaml", [f"data.source={tmp_path / 'gone'}"])
    report = order_rules(run, config, _federation())
    assert report is not None and report.source == "computed" and report.rules == 2 and report.training_triples == 10
    store = RuleStore.load(run)
    assert store.ranked and [r.bodies for r in store.triples[(1, 0, 0)].ranked or []] == [(2, 0), (1,)]
    assert [ln.split("\t")[1] for ln in (run / "rules.tsv").read_text().splitlines()[1:]] == [
        "child_of <- ~parent_of",
        "child_of <- child_of",
        "child_of <- parent_of",
    ]
    assert order_rules(run, config, _federation(), again=False).source == "recorded"  # type: ignore[union-attr]


def test_data_that_cannot_be_rebuilt_keeps_the_posterior_order(tmp_path: Path, caplog) -> None:
    run = _run(tmp_path / "run")
    before = (run / "rules.tsv").read_text()
    config = load_config("configs/fednsl_kg_synthetic.yaml", [f"data.source={tmp_path / 'gone'}"])
    with caplog.at_level(logging.WARNING, logger="fednsl.rule_counts"):
        report = order_rules(run, config)
    assert report is not None and report.source == "unavailable" and report.note
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("rules.tsv keeps the posterior order: contributions not measured (") and "\n" not in line
    assert (run / "rules.tsv").read_text() == before and not RuleStore.load(run).ranked
    # a federation of another KG (other relations) is refused the same way
    other = _federation()
    other.clients["c0"].part.relations = ("a", "b")
    assert order_rules(run, config, other).source == "unavailable"  # type: ignore[union-attr]


def test_runs_of_other_methods_are_left_alone(tmp_path: Path) -> None:
    run = _run(tmp_path / "run")
    before = (run / "rules.json").read_text()
    assert order_rules(run, load_config("configs/fednsl_synthetic.yaml")) is None
    assert order_rules(tmp_path / "empty", load_config("configs/fednsl_kg_synthetic.yaml")) is None
    assert (run / "rules.json").read_text() == before



def test_training_graph_grounds_as_the_run_did(tmp_path: Path) -> None:
    """The reading order is measured on walks or simple paths, as the run's ``predictor.paths`` counted."""
    store = RuleStore.load(_run(tmp_path / "run"))
    for paths, want in (("walks", "walks"), ("simple", "simple"), ("auto", "simple")):
        extra = [f"method_kwargs.predictor.paths={paths}"]
        config = load_config("configs/fednsl_kg_synthetic.yaml", [f"data.source={tmp_path / 'gone'}", *extra])
        assert run_paths(config) == want
        assert kg_training(config, store, _federation()).graph.paths == want


def test_auto_runs_read_back_the_way_the_fit_chose(tmp_path: Path) -> None:
    """Under ``paths: auto`` the order and explanations count as the clients' fits chose (their last reported
    ``simple_paths``): one client's own choice, else most clients' (simple on a tie); simple with no report."""
    import json

    run = _run(tmp_path / "run")
    store = RuleStore.load(run)
    config = load_config(
        "configs/fednsl_kg_synthetic.yaml", [f"data.source={tmp_path / 'gone'}", "method_kwargs.predictor.paths=auto"]
    )
    rows = [
        {"round": 1, "scope": "client:c0", "stage": "train", "simple_paths": 1.0},
        {"round": 1, "scope": "client:c1", "stage": "train", "simple_paths": 1.0},
        {"round": 1, "scope": "server", "stage": "train", "simple_paths": 1.0},
        {"round": 2, "scope": "client:c0", "stage": "train", "simple_paths": 0.0},
        {"round": 2, "scope": "client:c1", "stage": "train", "simple_paths": 0.0},
        {"round": 2, "scope": "client:c2", "stage": "train", "simple_paths": 1.0},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n")
    assert run_paths(config, run) == "walks"  # two of three clients chose walks in the last round
    assert run_paths(config, run, "c2") == "simple" and run_paths(config, run, "c0") == "walks"
    assert kg_training(config, store, _federation(), run).graph.paths == "walks"
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[3:5] + rows[:2]))
    assert run_paths(config, run) == "simple"
    (run / "metrics.jsonl").write_text(json.dumps(rows[3]) + "\n" + json.dumps(rows[5]) + "\n")
    assert run_paths(config, run) == "simple"  # a tie
    walks = load_config(
        "configs/fednsl_kg_synthetic.yaml", [f"data.source={tmp_path / 'gone'}", "method_kwargs.predictor.paths=walks"]
    )
    assert run_paths(walks, run, "c2") == "walks"  # a run configured one way counts that way, whatever is logged
    (run / "metrics.jsonl").unlink()
    assert run_paths(config, run) == "simple"

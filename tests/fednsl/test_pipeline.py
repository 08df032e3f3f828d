"""The shared pipeline's outputs: headline metrics of every method, run.log, the plot list, confidence counts at
the end of a rule-learning run (and `fednsl rules counts` for old runs), and the `fednsl train` closing line."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from fednsl.cli.main import cli
from fednsl.cli.result import lookup
from fednsl.config import dump_config
from fednsl.pipeline import peak_rss_mb, train
from fednsl.registry import METHODS, headline_of
from rules.measures import count_bodies
from rules.store import RuleStore
from tests.fednsl.federation.tiny_configs import TINY, tiny


def test_every_method_has_a_tiny_config() -> None:
    assert set(METHODS.names()) <= set(TINY)


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS.names())
def test_declared_headline_keys_are_in_the_summary(method: str, tmp_path: Path) -> None:
    """What `fednsl train` ends with exists: every declared metric and reference resolves to a number."""
    config = tiny(method)
    train(config, tmp_path, progress=False)
    summary = json.loads((tmp_path / "summary.json").read_text())
    resolved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    for h in headline_of(method):
        assert lookup(h.metric, summary, resolved) is not None, f"{method}: {h.metric} not in summary.json"
        if h.reference is not None:
            ref = lookup(h.reference, summary, resolved)
            assert ref is not None or h.reference_default is not None, f"{method}: reference {h.reference}"
    assert summary["plots"] == sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "plots").glob("*.png"))
    assert 0 < summary["peak_rss_mb"] <= peak_rss_mb()  # the peak so far can only have grown since
    log = (tmp_path / "run.log").read_text()
    assert f"method {config.method}" in log and "round 2" in log and "done in" in log and "peak memory" in log
    if (tmp_path / "rules.json").exists():  # rule learners (fednsl, fednsl-kg): every rule has its counts
        assert RuleStore.load(tmp_path).missing_counts() == []
        assert summary["rule_counts"]["source"] in ("computed", "recorded")


@pytest.fixture(scope="module")
def fednsl_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A tiny FedNSL run through `fednsl train` (its output lines)."""
    root = tmp_path_factory.mktemp("fednsl-run")
    cfg_path = root / "tiny.yaml"
    dump_config(tiny("fednsl"), cfg_path)
    res = CliRunner().invoke(cli, ["train", str(cfg_path), "--out", str(root / "run")])
    assert res.exit_code == 0, res.output
    return root / "run", res.output.splitlines()


@pytest.mark.slow
def test_train_ends_with_the_headline_line(fednsl_run: tuple[Path, list[str]]) -> None:
    run, lines = fednsl_run
    number = r"(\d\.\d+|\d|n/a)"
    assert re.fullmatch(
        rf"fednsl: seen F1 {number} \(backbone {number}\) · unseen F1 {number} \(backbone {number}\) → "
        + re.escape(str(run / "summary.json")),
        lines[-1],
    ), lines[-1]
    assert lines[-2].startswith(f"wrote {run}/:") and "plots/fednsl_f1_logic.png" in lines[-2]
    assert not any("it/s" in ln or "round/s" in ln for ln in lines)  # no bar: the output is not a terminal
    summary = json.loads((run / "summary.json").read_text())
    assert {"plots/metrics.png", "plots/fednsl_f1_logic.png"} <= set(summary["plots"])


@pytest.mark.slow
def test_rule_counts_are_added_at_the_end_of_the_run(fednsl_run: tuple[Path, list[str]]) -> None:
    """Global counts of each triple = one count over the union of all clients' training documents."""
    from fednsl.config import load_config
    from fednsl.methods.fednsl.rule_documents import rule_documents

    run, _ = fednsl_run
    store = RuleStore.load(run)
    assert store.triples and store.missing_counts() == []
    docs = [d for part in rule_documents(load_config(str(run / "config.yaml"))).values() for d in part]
    assert docs
    for t, rec in store.triples.items():
        union = count_bodies(t[0], rec.bodies, docs, len(store.relations), pair_types=(t[1], t[2]))
        assert rec.global_counts().to_dict() == union.to_dict(), store.triple_name(t)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rule_counts"]["source"] == "computed"
    assert summary["rule_counts"]["triples"] == len(store.triples)


@pytest.mark.slow
def test_rules_counts_command_restores_the_counts_of_an_old_run(
    fednsl_run: tuple[Path, list[str]], tmp_path: Path
) -> None:
    run, _ = fednsl_run
    old = tmp_path / "old"
    shutil.copytree(run, old)
    data = json.loads((old / "rules.json").read_text())
    for t in data["triples"]:  # a run from before counts were added
        t["counts"] = None
        for c in t["clients"].values():
            c["counts"] = None
    (old / "rules.json").write_text(json.dumps(data))
    runner = CliRunner()
    listed = runner.invoke(cli, ["rules", "list", str(old), "--format", "tsv"])
    assert listed.exit_code == 0 and all(row.split("\t")[8] == "" for row in listed.output.splitlines()[1:])
    exported = runner.invoke(cli, ["rules", "export", str(old), "--format", "anyburl"])
    assert "rules counts" in exported.output  # the note says how to add them

    res = runner.invoke(cli, ["rules", "counts", str(old)])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("counted ") and "wrote" in res.output
    assert json.loads((old / "rules.json").read_text()) == json.loads((run / "rules.json").read_text())
    again = runner.invoke(cli, ["rules", "counts", str(old)])
    assert again.exit_code == 0 and "already have confidence counts" in again.output

    listed = runner.invoke(cli, ["rules", "list", str(old), "--format", "tsv"])
    assert all(row.split("\t")[8] != "" for row in listed.output.splitlines()[1:])  # support column
    exported = runner.invoke(cli, ["rules", "export", str(old), "--format", "anyburl"])
    assert exported.exit_code == 0
    for line in exported.stdout.splitlines():
        predicted, correct, conf, rule = line.split("\t")
        assert int(predicted) >= int(correct) >= 0 and 0.0 <= float(conf) <= 1.0 and " <= " in rule
        assert conf != "nan"


def test_rules_counts_refuses_what_it_cannot_count(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["rules", "counts", str(tmp_path)])
    assert res.exit_code == 2 and "config.yaml not found" in res.output
    dump_config(tiny("fedavg"), tmp_path / "config.yaml")
    res = runner.invoke(cli, ["rules", "counts", str(tmp_path)])
    assert res.exit_code == 2 and "rules.json not found" in res.output


def test_bad_engine_is_refused_with_the_engines_methods_lists(tmp_path: Path) -> None:
    from fednsl.registry import ENGINE_TABLE

    cfg_path = tmp_path / "tiny.yaml"
    dump_config(tiny("fedavg"), cfg_path)
    res = CliRunner().invoke(cli, ["train", str(cfg_path), "--out", str(tmp_path / "r"), "--engine", "flowr"])
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1] == f"Error: unknown engine 'flowr'; known: {', '.join(ENGINE_TABLE)}"
    listed = CliRunner().invoke(cli, ["methods"]).output
    engines = [ln.split()[0] for ln in listed.split("engines (--engine NAME):")[1].strip().splitlines()]
    assert engines == list(ENGINE_TABLE)


def test_peak_rss_counts_memory_the_process_touched() -> None:
    """In a fresh process (this one's peak is whatever earlier tests reached), writing 300 MB more than the peak so
    far (which may be a finished child's) raises the peak by at least that much minus the interpreter's own."""
    code = (
        "import numpy as np; from fednsl.pipeline import peak_rss_mb; b = peak_rss_mb(); "
        "x = np.ones(int(b + 300) * 2**20 // 8); print(b, peak_rss_mb())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    before, after = map(float, out.split())
    assert 0 < before and after >= before + 250


def test_counts_turned_off_in_the_config_are_not_warned_of(tmp_path: Path) -> None:
    from fednsl.config import load_config
    from tests.fednsl.methods.fednsl_kg.test_fednsl_kg import CONFIG, FAST

    result = train(
        load_config(CONFIG, [*FAST, "rounds=1", "method_kwargs.counts=never"]), tmp_path / "r", progress=False
    )
    text = (result.run_dir / "run.log").read_text()
    assert "confidence counts not added (method_kwargs.counts: never)" in text
    assert "WARNING" not in text


def test_default_run_folders_of_the_same_second_do_not_collide(tmp_path: Path) -> None:
    from fednsl.config import load_config
    from fednsl.pipeline import default_run_dir

    cfg = load_config("configs/fednsl_synthetic.yaml")
    first = default_run_dir(cfg, tmp_path)
    first.mkdir()
    second = default_run_dir(cfg, tmp_path)
    assert second != first and second.name.startswith(first.name) and not second.exists()

"""bench.kg_completion: aggregation over seeds, the results table, and re-rendering a stored result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bench.kg_completion as kc

PAPER = {"source": "x", "metrics": ["mrr", "hits@1", "hits@10"], "Model_A": [0.5, None, 0.7], "Model_B_mrr": 0.4}


def run(mrr: float, peak: float | None) -> dict:
    return {"test_mrr": mrr, "test_mr": 3.0, "test_hits@1": mrr / 2, "test_hits@3": mrr, "test_hits@10": 0.9,
            "test_mrr_pessimistic": mrr - 0.01, "wall_s": 10.0, "peak_rss_mb": peak, "clients": {}, "curve": []}


def test_aggregate_gives_mean_and_t_interval_and_skips_metrics_some_run_lacks() -> None:
    agg = kc.aggregate([run(0.3, 100.0), run(0.5, None)])
    assert agg["test_mrr"]["mean"] == pytest.approx(0.4)
    assert agg["test_mrr"]["ci95"] == pytest.approx(12.706 * 0.1414214 / 2**0.5, rel=1e-3)  # t(0.975, 1) · s / √n
    assert "peak_rss_mb" not in agg and agg["test_mrr_pessimistic"]["mean"] == pytest.approx(0.39)


def test_table_columns_line_up_for_measured_and_published_rows() -> None:
    settings = {"centralised": {"aggregate": kc.aggregate([run(0.3, 100.0), run(0.5, 300.0)])}}
    rows = kc.table(settings, PAPER)
    assert len({row.count("|") for row in rows}) == 1  # every row has the header's cells
    assert "| **fednsl-kg centralised** | 0.400 ± " in rows[2] and rows[2].endswith("| 200 ± 1271 |")
    assert rows[3].startswith("| Model_A (published) | 0.500 | – | – | 0.700 |")
    assert rows[4].startswith("| Model_B_mrr (published) | 0.400 | – | – | – |")


def test_render_replaces_only_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kc, "RESULTS", tmp_path)
    payload = {"settings": {"centralised": {"runs": [run(0.3, None), run(0.5, None)], "commands": []}},
               "paper": PAPER, "seeds": [0, 1]}
    (tmp_path / "kg_completion_umls.json").write_text(json.dumps(payload))
    (tmp_path / "kg_completion_umls.md").write_text("# title\n\nhand-written text\n\n| model | MRR |\n|---|---|\n"
                                                    "| old | 1 |\n\nCommands kept\n")
    kc.render("umls")
    text = (tmp_path / "kg_completion_umls.md").read_text()
    assert "hand-written text" in text and "Commands kept" in text and "| old |" not in text
    assert "| MRR, pessimistic |" in text and text.count(kc.COLUMNS) == 1
    kc.render("umls")  # idempotent: the column note is not added twice
    assert (tmp_path / "kg_completion_umls.md").read_text() == text


def test_collect_sums_the_bytes_of_each_rounds_stages(tmp_path: Path) -> None:
    summary = {"wall_time_s": 5.0, **{k: 0.5 for k in kc.METRICS}, "test_mrr_pessimistic": 0.4, "peak_rss_mb": 9.0}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    rows = [{"round": 1, "scope": "server", "stage": "train.stats", "train.stats.bytes_up": 10, "train.stats.bytes_down": 1},
            {"round": 1, "scope": "server", "stage": "train", "train.bytes_up": 20, "train.bytes_down": 2},
            {"round": 1, "scope": "client:c0", "stage": "train", "train.bytes_up": 999},  # a client's row: not counted
            {"round": 1, "scope": "server", "stage": "round", "round_time_s": 3.0},
            {"round": 2, "scope": "server", "stage": "train", "train.bytes_up": 7, "train.bytes_down": 3}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = kc.collect(tmp_path)
    assert got["bytes_per_round"] == [{"up": 30.0, "down": 3.0}, {"up": 7.0, "down": 3.0}]
    md = kc.markdown("r10", {"federated": {"aggregate": kc.aggregate([got]), "runs": [got], "commands": []}}, PAPER,
                     [0])
    assert "- federated: round 1 30 / 3, round 2 7 / 3" in md


def test_embedding_rows_share_the_table_and_the_report() -> None:
    """--embedding: a pykeen model trained on the config's KG, scored by our evaluator, in the same table."""
    pytest.importorskip("pykeen")
    emb = kc.embedding_setting("configs/fednsl_kg_synthetic.yaml", [], [0, 1], "DistMult", budget_s=30.0,
                               max_epochs=2, eval_every=1, threads=1, invocation="python -m bench.kg_completion x")
    assert [r["seed"] for r in emb["runs"]] == [0, 1] and all(r["epochs"] == 2 for r in emb["runs"])
    assert 0.0 < emb["aggregate"]["test_mrr"]["mean"] <= 1.0 and "peak_rss_mb" not in emb["aggregate"]
    settings = {"centralised": {"aggregate": kc.aggregate([run(0.3, 100.0), run(0.5, 300.0)]), "commands": ["c"],
                                "runs": [{**run(0.3, 100.0), "curve": [{"round": 1, "round_end_s": 2.0, "mrr": 0.3}]}]},
                "pykeen DistMult": emb}
    rows = kc.table(settings, PAPER)
    assert len({row.count("|") for row in rows}) == 1
    assert rows[3].startswith("| pykeen DistMult (this run) | ") and rows[3].endswith("| – |")  # no peak memory
    md = kc.markdown("synthetic", settings, PAPER, [0, 1])
    assert md.startswith("# fednsl-kg on synthetic: filtered link prediction (rule-only, beside pykeen DistMult)")
    assert "*pykeen DistMult (this run)*: pykeen DistMult, dim 200" in md
    assert "pykeen DistMult, valid MRR against training time (first seed): epoch 1 " in md
    assert "| centralised | 1 | 2 | 0.300 |" in md and "- pykeen DistMult: `python -m bench.kg_completion x`" in md


def test_per_client_mrr_is_a_mean_and_interval_over_the_seeds() -> None:
    runs = []
    for mrr in (0.2, 0.4):
        r = run(mrr, None)
        r["clients"] = {"c0": {"test_mrr": mrr}, "c1": {"test_mrr": mrr / 2}}
        runs.append(r)
    settings = {"federated": {"aggregate": kc.aggregate(runs), "runs": runs, "commands": []}}
    text = kc.markdown("kinship_skew", settings, {}, [0, 1])
    half = 12.706 * 0.1414214 / 2**0.5  # t(0.975, 1) · s / √n for c0's 0.2 and 0.4
    assert f"- federated: c0 0.300 ± {half:.3f}, c1 0.150 ± {half / 2:.3f}" in text
    assert "data-poor" in text and "(published)" not in text
    assert set(kc.SETTINGS["kinship_skew"]) == {"federated", "local-only"}
    assert "method_kwargs.local_only=true" in kc.SETTINGS["kinship_skew"]["local-only"]

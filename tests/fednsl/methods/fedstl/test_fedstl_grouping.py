"""FedSTL says whether CLUSTER_ID found groups and whether its forecasts beat the naive ones."""

from __future__ import annotations

import pytest

from fednsl.pipeline import build_federation
from tests.fednsl.federation.tiny_configs import tiny


@pytest.mark.parametrize("rule", ["argmin", "balanced"])
def test_grouping_report_names_a_collapse_and_the_naive_comparison(rule: str):
    fed = build_federation(tiny("fedstl", extra=["method_kwargs.num_clusters=2", f"method_kwargs.rule={rule}"]))
    strat = fed.strategy
    ids = sorted(fed.clients)
    strat.assignment = {c: 0 for c in ids}
    strat._last_eval = {
        "mse": 0.007,
        "s_mse": 0.006,
        "t_mse": 0.0065,
        "naive_mean_mse": 0.0058,
        "naive_last_mse": 0.0064,
    }
    report = strat.grouping_report()
    assert report["clusters_used"] == 1 and report["members"][0] == ids and report["members"][1] == []
    assert "uses 1 of K=2 clusters" in report["note"] and "no groups found" in report["note"]
    assert ("rule: balanced" in report["note"]) == (rule == "argmin")
    assert "naive_mean_mse 0.00580: FedSTL does not beat the naive forecast" in report["note"]

    strat.assignment = {c: i % 2 for i, c in enumerate(ids)}
    strat._last_eval["t_mse"] = 0.005
    report = strat.grouping_report()
    assert report["clusters_used"] == 2 and "no groups found" not in report["note"]
    assert "FedSTL beats the naive forecast" in report["note"]
    assert strat.summary_metrics()["grouping_check"] == report

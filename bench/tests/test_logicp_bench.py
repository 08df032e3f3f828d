"""bench/logicp_table.py: job grid, one real cell, and the table summaries on known numbers."""

from __future__ import annotations

import pytest

from bench import logicp_table as lt


def test_job_grid_covers_the_three_tables():
    size = lt.SIZES["quick"]
    jobs = lt.build_jobs("synthetic", size, ["rnn"], [0, 1], {"1", "4", "7"}, True, None)
    t1 = [j for j in jobs if j["table"] == "1"]
    assert {j["run"] for j in t1} == {"fedavg", "ifca", "cp_ifca", "fedbayes", "fedstl", "logicp"} and len(t1) == 12
    t4 = [j for j in jobs if j["table"] == "4"]
    assert {j["clients"] for j in t4} == set(size["counts"]) and {j["model"] for j in t4} == {"transformer"}
    t7 = [j for j in jobs if j["table"] == "7"]
    assert {j["alpha"] for j in t7} == set(lt.ALPHAS)
    assert {"logicp_random", "logicp_loss", "logicp_argmin"} <= {j["run"] for j in t7}
    over = lt.overrides("logicp_random", "transformer", "synthetic", size, 4, 2, 0.2, None)
    assert "method_kwargs.clustering=random" in over and "method_kwargs.alpha=0.2" in over


def test_one_cell_runs_and_reports_coverage():
    size = {**lt.SIZES["quick"], "rounds": 2}
    cell = lt.run_cell({"table": "1", "run": "logicp", "model": "rnn", "seed": 0, "clients": 4, "clusters": 2,
                        "alpha": 0.2, "data": "synthetic", "size": size, "fhwa_path": None})
    m = cell["metrics"]
    for key in ("mse", "s_mse", "t_mse", "naive_mean_mse", "cov_joint", "cov_step", "width", "nominal"):
        assert key in m, key
    assert m["nominal"] >= 80.0


def test_summary_and_markdown_on_known_cells():
    def cell(run, seed, mse, **extra):
        return {"table": "1", "run": run, "model": "rnn", "seed": seed, "clients": 4, "alpha": 0.1, "wall_s": 1.0,
                "metrics": {"mse": mse, "mse_orig": mse, "step_rho": 90.0, "rho": 50.0, "naive_mean_mse": 0.01,
                            "naive_mean_mse_orig": 0.01, "naive_mean_step_rho": 100.0, "naive_mean_rho": 100.0,
                            **extra}}
    cp = {"cov_joint": 92.0, "cov_step": 99.0, "s_cov_joint": 91.0, "s_cov_step": 98.0, "width": 0.2,
          "width_orig": 2.0, "nominal": 90.5, "qhat_finite": 1.0, "s_mse": 0.03, "s_mse_orig": 0.03,
          "s_step_rho": 80.0, "s_rho": 40.0}
    cells = [cell("fedavg", 0, 0.02), cell("fedavg", 1, 0.04), cell("logicp", 0, 0.01, **cp),
             cell("logicp", 1, 0.03, **cp)]
    t = lt.summarise(cells, lt.TABLE1_ROWS, "model", "mse")
    assert t["FedAvg"]["rnn"]["mse_main"] == pytest.approx(0.03)
    assert t["FedAvg"]["rnn"]["mse_main_std"] == pytest.approx(0.0141421356)
    assert t["LogiCP"]["rnn"]["over_naive"] == pytest.approx(2.0)
    assert t["LogiCP-S"]["rnn"]["cov_joint"] == pytest.approx(91.0) and "cov_joint" not in t["FedAvg"]["rnn"]
    payload = {"data": "synthetic", "mse_unit": "min-max", "models": ["rnn"], "seeds": [0, 1], "seeds_small": [0],
               "size": lt.SIZES["quick"], "counts": [], "alphas": list(lt.ALPHAS), "table1": t, "table4": {},
               "table7": {}, "command": "x", "wall_s": 1.0, "jobs": 1, "machine": {"cpus": 2}}
    md = lt.markdown(payload)
    assert "| LogiCP | 0.0200 ± 0.0141 | 90.0 | 92.0 / 99.0 | 0.200 (2.000) | 2.00 | 0.048 / 85.09 |" in md

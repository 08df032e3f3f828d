"""bench/fedstl_table.py: every cell config resolves, and the table maths (mean ± std over seeds)."""

import statistics

import pytest

from bench.fedstl_table import MODELS, ROWS, RUNS, SIZES, markdown, overrides, summarise
from fednsl.config import load_config
from fednsl.methods.fedstl import FedSTLConfig
from fednsl.registry import build_kwargs, load_methods


@pytest.mark.parametrize("run", list(RUNS))
def test_every_cell_config_resolves(run):
    for model in MODELS:
        cfg = load_config(RUNS[run], overrides(run, model, "synthetic", SIZES["quick"], None) + ["seed=1"])
        assert cfg.method in load_methods()
        assert cfg.method_kwargs["model"]["name"] == model and cfg.seed == 1
        assert cfg.federation.evaluate_every == SIZES["quick"]["rounds"]
        if run.startswith("fedstl"):
            fc = build_kwargs(FedSTLConfig, cfg.method_kwargs, "test")
            assert fc.rule == ("balanced" if run == "fedstl_balanced" else "argmin")


def test_summary_mean_std_and_markdown():
    def cell(run, seed, mse):
        m = {"mse": mse, "mse_orig": 10 * mse, "rho": 50.0 + seed, "step_rho": 90.0, "naive_mean_mse": 0.5,
             "naive_mean_mse_orig": 5.0, "naive_mean_rho": 100.0, "naive_mean_step_rho": 100.0,
             "naive_last_mse": 0.6, "naive_last_mse_orig": 6.0, "naive_last_rho": 90.0, "naive_last_step_rho": 99.0}
        if run == "fedstl":
            m.update({"s_mse": mse / 2, "s_mse_orig": 5 * mse, "s_rho": 1.0, "s_step_rho": 2.0,
                      "t_mse": mse / 4, "t_mse_orig": 2.5 * mse, "t_rho": 100.0, "t_step_rho": 100.0})
        return {"run": run, "model": "rnn", "seed": seed, "metrics": m}

    cells = [cell(r, s, v) for r in ("ts_fedavg", "fedstl") for s, v in enumerate((1.0, 2.0, 3.0))]
    table = summarise(cells, ["rnn"])
    e = table["FedSTL-T"]["rnn"]
    assert e["mse"] == pytest.approx(0.5) and e["mse_std"] == pytest.approx(statistics.stdev([.25, .5, .75]))
    assert e["mse_over_naive"] == pytest.approx(1.0) and e["seeds"] == 3
    assert table["FedAvg"]["rnn"]["rho"] == pytest.approx(51.0)
    assert table["Naive: last day"]["rnn"]["mse_orig"] == pytest.approx(6.0)
    assert "IFCA" not in table
    md = markdown({"models": ["rnn"], "table": table, "unit": "u", "data": "synthetic", "size": SIZES["quick"],
                   "seeds": [0, 1, 2], "command": "x", "wall_s": 1.0, "machine": {"cpus": 2}})
    assert "| FedSTL-T | 5.0000 ± 2.5000 | 100.0 ± 0.0 | 100.0 | 1.00 |" in md
    assert {label for label, _, _ in ROWS} >= set(table)

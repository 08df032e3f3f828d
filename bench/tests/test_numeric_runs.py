"""Every numeric method end to end on the federation core: shipped configs load, resume is bit-exact,
the CLI trains one, and the whole comparison (bench/numeric.py) runs at reduced size."""

import json

import pytest
from click.testing import CliRunner

from fednsl.config import load_config
from fednsl.pipeline import train
from tests.fednsl.tasks.numeric.helpers import one_torch_thread  # noqa: F401 (autouse fixture)

# shipped config → overrides that shrink local work for the test
SMALL = {
    "numeric_fednsl": ["method_kwargs.em_steps=2"],
    "numeric_fedavg": [],
    "numeric_pfedme": ["method_kwargs.local_rounds=3", "method_kwargs.K=2"],
    "numeric_perfedavg": ["method_kwargs.local_steps=3", "method_kwargs.variant=hf"],
    "numeric_pfedbayes": ["method_kwargs.local_epochs=3", "method_kwargs.personal_steps=2"],
    "numeric_lrxfl": ["method_kwargs.local_epochs=3"],
}
TIMING = ("time_s", "bytes")


def strip(rows):
    return [{k: v for k, v in r.items() if not any(t in k for t in TIMING)} for r in rows]


@pytest.mark.parametrize("name", sorted(SMALL))
def test_resume_is_bit_exact(name, tmp_path):
    full = train(load_config(name, ["rounds=3", *SMALL[name]]), tmp_path / "full", progress=False)
    train(load_config(name, ["rounds=2", *SMALL[name]]), tmp_path / "part", progress=False)
    resumed = train(load_config(name, ["rounds=3", *SMALL[name]]), tmp_path / "part", resume=True, progress=False)
    assert strip(resumed.rows) == strip(full.rows)
    last = [r for r in full.rows if r["scope"] == "server" and r["stage"] == "evaluate"][-1]
    assert {"train_acc_given", "train_acc_true", "unseen_acc_h0", "unseen_acc_h33", "unseen_acc_h50"} <= set(last)


def test_cli_train_and_bench_help(tmp_path):
    from fednsl.cli.main import cli

    runner = CliRunner()
    res = runner.invoke(cli, ["train", "configs/numeric_fedavg.yaml", "--set", "rounds=1", "--out",
                              str(tmp_path / "run"), "--quiet"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "run" / "metrics.jsonl").exists()
    res = runner.invoke(cli, ["bench", "--help"])
    assert res.exit_code == 0 and "numeric" in res.output
    res = runner.invoke(cli, ["bench", "numeric", "--methods", "nope", "--seeds", "1", "--out", str(tmp_path)])
    assert res.exit_code != 0 and "unknown method" in res.output


def test_whole_comparison_at_reduced_size(tmp_path):
    from bench.numeric import METHODS, run_comparison

    payload = run_comparison([0, 1], rounds=2, out_dir=tmp_path, echo=lambda *_: None)
    saved = json.loads((tmp_path / "numeric.json").read_text())
    assert set(saved["final"]) == set(METHODS)
    cell = saved["final"]["fednsl"]["unseen_acc_h50"]
    assert set(cell) == {"c1", "c2", "avg"} and len(cell["avg"]["values"]) == 2
    assert cell["avg"]["mean"] == pytest.approx(sum(cell["avg"]["values"]) / 2)
    assert payload["headline"]["unseen_acc_h0"]["paper_claim_gain"] == 0.29
    assert "reproduced" in payload["headline"]["train_acc_given"]
    assert saved["reference"]["loglik_ratio_ours_over_sklearn"]["values"]
    for f in ("numeric.md", "numeric_a.png", "numeric_a_true.png", "numeric_heterogeneity.png"):
        assert (tmp_path / f).stat().st_size > 0
    assert "| FedNSL |" in (tmp_path / "numeric.md").read_text()

"""Reliability cases of resuming: nothing lost, nothing duplicated, a clear message when it cannot resume."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from fednsl.cli.main import cli
from fednsl.config import RunConfig
from fednsl.federation.tracking import Checkpoints, MetricsLog
from fednsl.pipeline import train

TIMING = ("time_s", "bytes")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def config(rounds: int = 3, **fed) -> RunConfig:
    return RunConfig(method="fedavg", rounds=rounds, seed=7, name="t",
                     data={"num_clients": 3, "samples_per_client": 30, "features": 4},
                     method_kwargs={"hidden": 4}, federation={"min_clients": 1, "keep_checkpoints": 3, **fed})


def strip(rows):
    return [{k: v for k, v in r.items() if not any(t in k for t in TIMING)} for r in rows]


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("full") / "run"
    return strip(train(config(3), out, progress=False).rows)


def _partial(tmp_path: Path, rounds: int = 2) -> Path:
    run = tmp_path / "run"
    train(config(rounds), run, progress=False)
    return run


def test_all_checkpoints_unreadable_refuses_and_changes_nothing(tmp_path: Path) -> None:
    run = _partial(tmp_path)
    for p in Checkpoints(run).list():
        p.write_bytes(b"garbage")
    before = (run / "metrics.jsonl").read_bytes()
    with pytest.raises(ValueError) as err:
        train(config(3), run, resume=True, progress=False)
    msg = str(err.value)
    assert "none of the 2 checkpoints can be read" in msg and "--start-over" in msg and "\n" not in msg
    assert (run / "metrics.jsonl").read_bytes() == before


def test_start_over_sets_the_old_run_aside_and_never_duplicates_rows(tmp_path: Path, full) -> None:
    run = _partial(tmp_path)
    old = (run / "metrics.jsonl").read_bytes()
    for p in Checkpoints(run).list():
        p.write_bytes(b"garbage")
    res = train(config(3), run, resume=True, start_over=True, progress=False)
    assert strip(res.rows) == full and strip(MetricsLog(run).rows()) == full  # no duplicated rows
    aside = list(run.glob("discarded-*"))
    assert len(aside) == 1 and (aside[0] / "metrics.jsonl").read_bytes() == old  # nothing deleted


def test_torn_last_metrics_line_is_recovered_with_a_warning(tmp_path: Path, full, caplog) -> None:
    run = _partial(tmp_path)
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"round": 3, "scope": "server", "sta')
    with caplog.at_level(logging.WARNING, logger="fednsl"):
        res = train(config(3), run, resume=True, progress=False)
    assert strip(res.rows) == full
    warned = [r.getMessage() for r in caplog.records if "incomplete" in r.getMessage()]
    assert warned and str(run / "metrics.jsonl") in warned[0] and "recovered" in warned[0]


def test_a_bad_line_inside_metrics_names_file_and_line(tmp_path: Path) -> None:
    run = _partial(tmp_path)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[1] = "{oops"
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"metrics\.jsonl:2: not a metrics row"):
        MetricsLog(run).rows()


def test_truncated_newest_checkpoint_falls_back_and_says_so(tmp_path: Path, full, caplog) -> None:
    run = _partial(tmp_path)
    newest = Checkpoints(run).list()[-1]
    newest.write_bytes(newest.read_bytes()[:100])
    with caplog.at_level(logging.WARNING, logger="fednsl"):
        res = train(config(3), run, resume=True, progress=False)
    assert strip(res.rows) == full
    assert any("round_0002.pt: unreadable" in r.getMessage() and "round_0001.pt" in r.getMessage()
               for r in caplog.records)


def test_resume_with_fewer_rounds_is_refused(tmp_path: Path) -> None:
    run = _partial(tmp_path, rounds=3)
    with pytest.raises(ValueError, match=r"already at round 3 .* but rounds=2; set rounds >= 3"):
        train(config(2), run, resume=True, progress=False)


def test_missing_config_yaml_falls_back_to_the_checkpoint_config(tmp_path: Path, full) -> None:
    run = _partial(tmp_path)
    (run / "config.yaml").unlink()
    with pytest.raises(ValueError, match=r"config differs from the one saved in .*round_0002\.pt \(config\.yaml is "
                                         r"missing\) in \['seed'\]"):
        train(RunConfig(**{**config(3).__dict__, "seed": 8}), run, resume=True, progress=False)
    assert strip(train(config(3), run, resume=True, progress=False).rows) == full


def test_checkpoint_missing_keys_is_named(tmp_path: Path) -> None:
    run = _partial(tmp_path)
    for p in Checkpoints(run).list():
        torch.save({"round": int(p.stem.split("_")[1]), "clients": {}}, p)
    with pytest.raises(ValueError, match=r"round_0002\.pt: not a fednsl checkpoint \(lacks \['strategy'\]\)"):
        train(config(3), run, resume=True, progress=False)


def test_crash_before_the_first_checkpoint_does_not_duplicate_round_one(tmp_path: Path, full) -> None:
    run = _partial(tmp_path, rounds=1)
    for p in Checkpoints(run).list():
        p.unlink()
    res = train(config(3), run, resume=True, progress=False)
    assert strip(res.rows) == full


def test_cli_refused_resume_is_one_line_exit_2(tmp_path: Path) -> None:
    run = _partial(tmp_path)
    (run / "config.yaml").write_text(json.dumps(config(2).to_dict()))
    for p in Checkpoints(run).list():
        p.write_bytes(b"")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({k: v for k, v in config(3).to_dict().items()}))
    res = CliRunner().invoke(cli, ["train", str(cfg), "--out", str(run), "--resume", "--quiet"])
    assert res.exit_code == 2, res.output
    assert "none of the 2 checkpoints" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(cli, ["train", str(cfg), "--out", str(run), "--start-over", "--quiet"])
    assert res.exit_code == 2 and "only applies with --resume" in res.output

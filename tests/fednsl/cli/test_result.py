"""The closing line of `fednsl train`: headline values read from summary.json and the config, then formatted."""

from __future__ import annotations

import math
from pathlib import Path

from fednsl.cli.result import fmt, headline_parts, lookup, result_line
from fednsl.registry import Headline

SUMMARY = {
    "method": "fednsl",
    "test_mrr": 0.4123,
    "final": {"evaluate": {"seen_f1": 0.8661, "backbone_seen_f1": 0.7369, "unseen_f1": 0.81, "backbone_unseen_f1": 0.7,
                           "flag": True, "text": "x"}},
}


def test_lookup_reads_stage_metrics_top_level_keys_and_config() -> None:
    assert lookup("evaluate/seen_f1", SUMMARY) == 0.8661
    assert lookup("test_mrr", SUMMARY) == 0.4123
    assert lookup("config:method_kwargs.alpha", SUMMARY, {"method_kwargs": {"alpha": 0.2}}) == 0.2
    for missing in ("evaluate/nope", "train/seen_f1", "nope", "evaluate/flag", "evaluate/text", "config:a.b"):
        assert lookup(missing, SUMMARY, {"a": 3}) is None, missing


def test_fmt() -> None:
    assert [fmt(0.86612), fmt(0.0123456), fmt(87.54), fmt(12345.6), fmt(None), fmt(math.nan)] == [
        "0.866", "0.0123", "87.5", "12346", "n/a", "n/a"]


def test_headline_parts_with_references_defaults_and_complement() -> None:
    heads = (
        Headline("seen F1", "evaluate/seen_f1", "evaluate/backbone_seen_f1", "backbone"),
        Headline("coverage", "evaluate/seen_f1", "config:method_kwargs.alpha", "target", 0.1, complement=True),
        Headline("missing", "evaluate/absent", "evaluate/absent_too", "ref"),
    )
    assert headline_parts(heads, SUMMARY, {"method_kwargs": {"alpha": 0.25}}) == [
        "seen F1 0.866 (backbone 0.737)", "coverage 0.866 (target 0.75)", "missing n/a"]
    assert headline_parts(heads[1:2], SUMMARY, {}) == ["coverage 0.866 (target 0.9)"]  # the declared default


def test_result_line_of_the_fednsl_headline() -> None:
    line = result_line(Path("runs/x"), SUMMARY, {})
    assert line == ("fednsl: seen F1 0.866 (backbone 0.737) · unseen F1 0.81 (backbone 0.7) → "
                    f"{Path('runs/x') / 'summary.json'}")
    assert result_line(Path("r"), {"method": "someone-elses"}).startswith("someone-elses: done → ")

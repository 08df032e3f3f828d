"""bench.kg_rules: ``--predictor KEY=VALUE`` reaches PredictorConfig, and a wrong key stops with one line."""

from __future__ import annotations

import pytest

from bench.kg_rules import predictor_overrides


def test_predictor_overrides_are_typed_by_yaml() -> None:
    assert predictor_overrides(["lr=0.01", "entity_bias=false", "max_train_queries=null"]) == {
        "lr": 0.01,
        "entity_bias": False,
        "max_train_queries": None,
    }


def test_unknown_predictor_field_names_the_option() -> None:
    with pytest.raises(SystemExit, match="--predictor 'learning_rate=1': not a PredictorConfig field"):
        predictor_overrides(["learning_rate=1"])

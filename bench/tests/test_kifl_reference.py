"""bench.kifl's engine-free reference of Alg. 1 equals a federated KIFL run (kept beside the bench it tests)."""

from __future__ import annotations

import pytest

from fednsl.pipeline import build_federation, train
from tests.fednsl.methods.kifl import test_kifl as kifl_tests


def test_federated_run_equals_an_engine_free_algorithm_1(tmp_path):
    """Alg. 1 written directly in PyTorch (bench.kifl.reference_alg1) reaches the same θ-based accuracies."""
    from bench.kifl import reference_alg1

    cfg = kifl_tests.wine(rounds=2, optimizer="adam")
    cfg.federation.fraction = 0.67          # |S_t| = ⌈τM⌉ = 2 of 3 clients
    res = train(cfg, tmp_path / "r", progress=False)
    ours = {r["scope"][7:]: r["correct"] / r["num_examples"] for r in res.rows
            if r["scope"].startswith("client:") and r["stage"] == "evaluate" and r["round"] == 2}
    ref, _ = reference_alg1(build_federation(cfg), cfg)
    assert ours == pytest.approx(ref, abs=1e-12)


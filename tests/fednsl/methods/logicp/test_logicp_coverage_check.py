"""The coverage check a LogiCP run prints: its mean and SD against a Monte Carlo of the two-stage sampling
(calibration-conditional coverage F ~ Beta per cluster, then Binomial test hits), and its verdicts."""

from __future__ import annotations

import numpy as np
import pytest

from fednsl.methods.logicp.federated_cp import coverage_check
from rules.conformal import choose_ranks


def _beta(mean: float, sd: float) -> tuple[float, float]:
    common = mean * (1 - mean) / sd**2 - 1
    return mean * common, (1 - mean) * common


def test_mean_and_sd_match_a_monte_carlo_of_calibration_and_test_sampling():
    rng = np.random.default_rng(0)
    nominal, level_sd, n_test = [0.9035, 0.92, 0.88], [0.064, 0.05, 0.07], [24, 40, 16]
    sims = 200_000
    hits = np.zeros(sims)
    for c, s, n in zip(nominal, level_sd, n_test):
        f = rng.beta(*_beta(c, s), size=sims)
        hits += rng.binomial(n, f)
    achieved = 100 * hits / sum(n_test)
    report = coverage_check(float(achieved.mean()), nominal, level_sd, n_test)
    assert report["nominal"] == pytest.approx(100 * np.average(nominal, weights=n_test), abs=1e-9)
    assert report["nominal"] == pytest.approx(achieved.mean(), abs=0.05)
    assert report["sd"] == pytest.approx(achieved.std(), rel=0.02)


def test_synthetic_showcase_numbers_and_verdicts():
    r = choose_ranks(8, 3, 0.1)  # the synthetic LogiCP config: 3 clients x 8 calibration windows per cluster
    assert (r.ell, r.kappa) == (8, 2) and r.coverage == pytest.approx(0.9035294117647059)
    args = ([r.coverage] * 4, [r.level_sd] * 4, [24] * 4)
    low = coverage_check(84.375, *args)
    assert low["nominal"] == pytest.approx(90.3529, abs=1e-4)
    assert -2 < low["z"] < -1 and "within sampling error" in low["note"]
    assert "not exchangeable" in coverage_check(70.0, *args)["note"]
    assert "at or above" in coverage_check(95.0, *args)["note"]
    assert coverage_check(90.0, [], [], []) == {}

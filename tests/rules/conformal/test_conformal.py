"""Tests for rules.conformal: exact coverage (vs enumeration and Monte Carlo), rank choice,
client/server quantiles, multi-horizon normalisation, metrics, MAPIE/crepes oracles, CLI."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.special import roots_legendre
from scipy.stats import binomtest

from fednsl.cli.conformal import command as conformal_cli
from rules.conformal import (
    AUTHORS_RANKS,
    FederatedSplitConformal,
    aggregate_quantiles,
    aggregate_scales,
    calibrate_cluster,
    choose_ranks,
    coverage,
    horizon_scale,
    interval,
    interval_width,
    local_quantile,
    normalized_scores,
    qq_coverage,
    qq_coverage_fraction,
    qq_coverage_matrix,
    qq_level_moments,
    split_conformal_rank,
)
from rules.conformal.coverage import _survival
from rules.conformal.simulation import batched_cluster_qhat, simulate_rank_pairs, synthetic_residuals

DRAWS = 20_000


def cp_interval(hits: int, draws: int, level: float = 0.999) -> tuple[float, float]:
    ci = binomtest(hits, draws).proportion_ci(confidence_level=level, method="exact")
    return ci.low, ci.high


# ---------------------------------------------------------------- exact coverage formula


def _all_assignments(n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Every way to deal the ranks 0..m·n to a test point and m clients of n (order within a
    client irrelevant): (count, m, n) client scores and (count,) test scores. Exchangeability
    makes all of them equally likely, so coverage = share of assignments covering the test."""
    total = n * m + 1
    clients, tests = [], []
    for test in range(total):
        rest = [r for r in range(total) if r != test]

        def deal(pool: list[int], k: int):
            if k == 0:
                yield []
                return
            for block in itertools.combinations(pool, n):  # clients are labelled: any block first
                left = [r for r in pool if r not in block]
                for tail in deal(left, k - 1):
                    yield [list(block), *tail]

        for split in deal(rest, m):
            clients.append(split)
            tests.append(test)
    return np.asarray(clients, dtype=float), np.asarray(tests, dtype=float)


@pytest.mark.parametrize("n,m", [(1, 2), (2, 2), (3, 2), (2, 3), (1, 4), (3, 3), (2, 4)])
def test_coverage_formula_equals_exact_enumeration(n: int, m: int) -> None:
    scores, test = _all_assignments(n, m)
    assert len(test) == math.factorial(n * m + 1) // math.factorial(n) ** m
    matrix = qq_coverage_matrix(n, m)
    for ell in range(1, n + 1):
        local = local_quantile(np.moveaxis(scores, 2, 0), ell)  # (count, m) via the client API
        for kappa in range(1, m + 1):
            qhat = aggregate_quantiles(local.T, kappa)  # (count,) via the server API
            enumerated = Fraction(int((test <= qhat).sum()), len(test))
            assert qq_coverage_fraction(n, m, ell, kappa) == enumerated
            assert qq_coverage(n, m, ell, kappa) == pytest.approx(float(enumerated), abs=1e-13)
            assert matrix[ell - 1, kappa - 1] == pytest.approx(float(enumerated), abs=1e-13)


def test_fraction_and_quadrature_agree_and_reduce_to_split() -> None:
    for n, m, ell, kappa in [(90, 10, 79, 7), (90, 10, 80, 8), (30, 7, 12, 4), (50, 3, 50, 3), (10, 20, 1, 1)]:
        assert float(qq_coverage_fraction(n, m, ell, kappa)) == pytest.approx(qq_coverage(n, m, ell, kappa), abs=1e-12)
    for n, ell in [(1, 1), (19, 18), (90, 82)]:
        assert qq_coverage_fraction(n, 1, ell, 1) == Fraction(ell, n + 1)
    # (n, m) at the top ranks is the pooled maximum: n·m/(n·m+1)
    assert qq_coverage_fraction(4, 3, 4, 3) == Fraction(12, 13)


def test_composite_quadrature_matches_exact_rule() -> None:
    n, m = 90, 100  # degree 9000: beyond the exact rule, composite panels are used
    x, w = roots_legendre((n * m + 2) // 2)
    x, w = (x + 1) / 2, w / 2
    for ell, kappa in [(79, 82), (80, 50), (85, 95), (60, 10)]:
        exact_rule = float(np.sum(w * _survival(n, m, ell, kappa, x)))
        assert qq_coverage(n, m, ell, kappa) == pytest.approx(exact_rule, abs=1e-12)


def test_coverage_formula_matches_monte_carlo_on_paired_draws() -> None:
    pairs = [(19, 3), (18, 3), (19, 2), (10, 1), (15, 5), (20, 5)]
    results = simulate_rank_pairs(20, 5, 0.1, pairs, rng=np.random.default_rng(11), draws=DRAWS, scale_mode="none")
    for res in results:
        low, high = cp_interval(res.joint_hits, res.draws)
        assert low <= res.exact_coverage <= high, res


def test_level_moments_match_monte_carlo() -> None:
    # uniform scores: F(Q̂) = Q̂, so the mean and sd of Q̂ are those of the conditional coverage
    n, m, ell, kappa = 15, 6, 13, 4
    rng = np.random.default_rng(5)
    u = rng.random((n, DRAWS, m))
    qhat = aggregate_quantiles(local_quantile(u, ell).T, kappa)
    mean, sd = qq_level_moments(n, m, ell, kappa)
    assert mean == pytest.approx(qq_coverage(n, m, ell, kappa), abs=1e-12)
    assert qhat.mean() == pytest.approx(mean, abs=4 * sd / math.sqrt(DRAWS))
    assert qhat.std() == pytest.approx(sd, rel=0.05)
    b_mean, b_sd = qq_level_moments(20, 1, 18, 1)
    assert (b_mean, b_sd) == pytest.approx((18 / 21, math.sqrt(18 * 3 / (21**2 * 22))))


# ---------------------------------------------------------------- rank choice


@pytest.mark.parametrize(
    "n,m,alpha", [(5, 4, 0.1), (12, 3, 0.2), (20, 5, 0.1), (25, 8, 0.1), (30, 6, 0.05), (40, 2, 0.3)]
)
def test_choose_ranks_is_the_minimal_feasible_pair(n: int, m: int, alpha: float) -> None:
    r = choose_ranks(n, m, alpha)
    assert r.feasible and r.method == "quantile-of-quantiles"
    assert qq_coverage_fraction(n, m, r.ell, r.kappa) >= 1 - Fraction(str(alpha))
    assert r.coverage == pytest.approx(float(qq_coverage_fraction(n, m, r.ell, r.kappa)), abs=1e-15)
    matrix = qq_coverage_matrix(n, m)
    feasible = matrix >= 1 - alpha - 1e-12
    assert r.coverage == pytest.approx(matrix[feasible].min(), abs=1e-12)
    # one rank lower in either coordinate under-covers
    if r.ell > 1:
        assert qq_coverage_fraction(n, m, r.ell - 1, r.kappa) < 1 - Fraction(str(alpha))
    if r.kappa > 1:
        assert qq_coverage_fraction(n, m, r.ell, r.kappa - 1) < 1 - Fraction(str(alpha))


def test_spec_numbers_and_authors_ranks() -> None:
    ours = choose_ranks(90, 10, 0.1)
    assert (
        (ours.ell, ours.kappa) == (80, 8) and ours.coverage == pytest.approx(0.9024, abs=5e-5) and ours.coverage >= 0.9
    )
    authors = qq_coverage_fraction(
        AUTHORS_RANKS["n_cal"], AUTHORS_RANKS["n_clients"], AUTHORS_RANKS["ell"], AUTHORS_RANKS["kappa"]
    )
    assert float(authors) == pytest.approx(0.8832, abs=5e-5) and authors < Fraction(9, 10)
    single = choose_ranks(90, 1, 0.1)
    assert (single.ell, single.kappa, single.method) == (82, 1, "split")
    assert single.coverage == pytest.approx(82 / 91)
    assert Fraction(AUTHORS_RANKS["single_client_ell"], 91) < Fraction(9, 10)  # 81/91 = 0.890


def test_split_rank_and_infeasible_cases() -> None:
    for n in [9, 10, 19, 49, 90, 99, 100, 250]:
        for alpha in [0.05, 0.1, 0.15, 0.2, 0.3]:
            ell = math.ceil((n + 1) * (1 - Fraction(str(alpha))))
            assert split_conformal_rank(n, alpha) == ell
            r = choose_ranks(n, 1, alpha)
            if ell <= n:
                assert (r.ell, r.kappa, r.feasible) == (ell, 1, True)
            else:
                assert not r.feasible and r.ell is None
    boundary = choose_ranks(99, 1, 0.1)  # 90/100 is exactly 0.9: feasible, decided exactly
    assert (boundary.ell, boundary.coverage) == (90, 0.9)
    r = choose_ranks(8, 1, 0.1)
    assert not r.feasible and r.method == "infeasible" and r.min_n_cal == 9
    r = choose_ranks(2, 3, 0.1)  # best possible 6/7 < 0.9
    assert not r.feasible and r.min_n_cal == 3 and choose_ranks(3, 3, 0.1).feasible
    with pytest.raises(ValueError, match="alpha"):
        choose_ranks(10, 2, 1.5)


# ---------------------------------------------------------------- Monte Carlo validity with teeth


def test_authors_ranks_under_cover_in_simulation_ours_do_not() -> None:
    (ours, authors) = simulate_rank_pairs(
        90, 10, 0.1, [(80, 8), (79, 7)], rng=np.random.default_rng(1), draws=DRAWS, scale_mode="none"
    )
    lo, hi = cp_interval(ours.joint_hits, DRAWS)
    assert hi >= 0.9 and lo <= ours.exact_coverage <= hi
    lo_a, hi_a = cp_interval(authors.joint_hits, DRAWS)
    assert hi_a < 0.9 and lo_a <= authors.exact_coverage <= hi_a
    (split_ours, split_authors) = simulate_rank_pairs(
        90, 1, 0.1, [(82, 1), (81, 1)], rng=np.random.default_rng(2), draws=DRAWS, scale_mode="none"
    )
    assert cp_interval(split_ours.joint_hits, DRAWS)[1] >= 0.9
    assert split_authors.exact_coverage < 0.9


@pytest.mark.parametrize(
    "n,m,alpha,horizon,scale_mode",
    [
        (20, 5, 0.1, 1, "none"),
        (30, 5, 0.2, 1, "none"),
        (25, 8, 0.1, 1, "none"),
        (19, 1, 0.1, 1, "none"),
        (40, 4, 0.1, 1, "none"),
        (20, 5, 0.1, 6, "cluster"),
        (30, 5, 0.2, 4, "cluster"),
        (20, 5, 0.1, 6, "none"),
    ],
)
def test_joint_coverage_valid_and_fails_with_lower_rank(
    n: int, m: int, alpha: float, horizon: int, scale_mode: str
) -> None:
    r = choose_ranks(n, m, alpha)
    seed = n * 1000 + m * 10 + horizon
    chosen, lowered = simulate_rank_pairs(
        n,
        m,
        alpha,
        [(r.ell, r.kappa), (r.ell - 1, r.kappa)],
        rng=np.random.default_rng(seed),
        horizon=horizon,
        draws=DRAWS,
        scale_mode=scale_mode,
    )
    lo, hi = cp_interval(chosen.joint_hits, DRAWS)
    assert hi >= 1 - alpha, f"coverage {chosen.joint_coverage} significantly below {1 - alpha}"
    assert lo <= chosen.exact_coverage <= hi
    lo_l, hi_l = cp_interval(lowered.joint_hits, DRAWS)
    assert hi_l < 1 - alpha, f"one-lower ranks not detected: {lowered.joint_coverage}"
    assert lo_l <= lowered.exact_coverage <= hi_l
    assert chosen.per_step_coverage >= chosen.joint_coverage


def test_paper_literal_client_scales_are_not_the_exact_formula() -> None:
    # per-client σ (Eq 17 literal) leaves the joint coverage off the exact value (here above it)
    r = choose_ranks(20, 5, 0.1)
    (res,) = simulate_rank_pairs(
        20, 5, 0.1, [(r.ell, r.kappa)], rng=np.random.default_rng(3), horizon=6, draws=8_000, scale_mode="client"
    )
    lo, hi = cp_interval(res.joint_hits, res.draws)
    assert not lo <= res.exact_coverage <= hi
    assert res.per_step_coverage >= res.joint_coverage


# ---------------------------------------------------------------- protocol, quantiles, scores


def test_local_and_aggregate_quantiles_are_order_statistics() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(13, 4, 3))
    for k in (1, 5, 13):
        assert np.array_equal(local_quantile(x, k), np.sort(x, axis=0)[k - 1])
        assert np.array_equal(aggregate_quantiles(x, k), np.sort(x, axis=0)[k - 1])
    assert local_quantile(np.array([3.0, 1.0, 2.0]), 2).shape == ()
    sigma = np.array([1.0, 2.0, 4.0])
    assert np.allclose(local_quantile(np.array([3.0, 1.0, 2.0]), 2, scale=sigma), 2.0 * sigma)
    with pytest.raises(ValueError, match="NaN"):
        local_quantile(np.array([1.0, np.nan]), 1)
    with pytest.raises(ValueError, match="out of range"):
        aggregate_quantiles(np.ones(3), 4)


def test_normalisation_equations_15_to_18() -> None:
    rng = np.random.default_rng(4)
    m, n, n_nor, h = 4, 30, 12, 5
    cal = [rng.normal(size=(n, h)) * np.arange(1, h + 1) for _ in range(m)]
    nor = [rng.normal(size=(n_nor, h)) * np.arange(1, h + 1) for _ in range(m)]
    res = calibrate_cluster(cal, 0.2, nor)
    ell, kappa = res.ranks.ell, res.ranks.kappa
    sigma = np.max([np.abs(e).max(axis=0) for e in nor], axis=0)  # Eq 15 on the pooled D_nor
    assert np.allclose(res.sigma, sigma)
    q = [sorted(np.max(np.abs(e) / sigma, axis=1))[ell - 1] for e in cal]  # Eq 16 + ell-th smallest
    assert np.allclose(res.local, np.outer(q, sigma))  # Eq 17
    per_step = np.sort(res.local, axis=0)[kappa - 1]  # Eq 18, step by step
    assert np.allclose(res.qhat, per_step) and np.allclose(res.qhat, sorted(q)[kappa - 1] * sigma)
    literal = calibrate_cluster(cal, 0.2, nor, scale_mode="client")
    sig_i = np.stack([np.abs(e).max(axis=0) for e in nor])
    q_i = [sorted(np.max(np.abs(e) / s, axis=1))[ell - 1] for e, s in zip(cal, sig_i, strict=True)]
    assert np.allclose(literal.qhat, np.sort(np.asarray(q_i)[:, None] * sig_i, axis=0)[kappa - 1])
    plain = calibrate_cluster(cal, 0.2)
    assert plain.scale_mode == "none" and np.allclose(
        plain.qhat, sorted(sorted(np.abs(e).max(axis=1))[ell - 1] for e in cal)[kappa - 1]
    )
    assert np.allclose(horizon_scale(np.zeros((3, 2)), eps=1e-6), 1e-6)
    assert np.allclose(aggregate_scales(np.array([[1.0, 4.0], [3.0, 2.0]]), "mean"), [2.0, 3.0])
    assert np.allclose(normalized_scores(np.array([[1.0, -4.0], [2.0, 1.0]]), np.array([1.0, 2.0])), [2.0, 2.0])


def test_batched_pipeline_equals_per_cluster_protocol() -> None:
    rng = np.random.default_rng(8)
    n, b, m, h, n_nor = 12, 7, 3, 4, 5
    cal = synthetic_residuals(rng, (n, b, m), h)
    nor = synthetic_residuals(rng, (n_nor, b, m), h)
    for mode in ("cluster", "client", "none"):
        r = choose_ranks(n, m, 0.2)
        (batched,) = batched_cluster_qhat(cal, None if mode == "none" else nor, [(r.ell, r.kappa)], mode)
        for i in range(b):
            one = calibrate_cluster(
                [cal[:, i, j] for j in range(m)],
                0.2,
                None if mode == "none" else [nor[:, i, j] for j in range(m)],
                scale_mode=mode,
            )
            assert np.allclose(one.qhat, batched[i])


def test_unequal_sizes_and_infeasible_cluster() -> None:
    rng = np.random.default_rng(9)
    cal = [rng.normal(size=40), rng.normal(size=35)]
    with pytest.raises(ValueError, match="pass rng"):
        calibrate_cluster(cal, 0.1)
    res = calibrate_cluster(cal, 0.1, rng=np.random.default_rng(0))
    assert res.ranks.n_cal == 35 and res.ranks.n_clients == 2
    with pytest.warns(RuntimeWarning, match="infeasible"):
        bad = calibrate_cluster([rng.normal(size=4)], 0.1)
    assert np.isinf(bad.qhat).all()
    assert bad.evaluate(np.zeros(3), np.ones(3)).joint == 1.0


# ---------------------------------------------------------------- metrics


def test_interval_coverage_and_width() -> None:
    pred = np.zeros((4, 2))
    lo, hi = interval(pred, np.array([1.0, 2.0]))
    y = np.array([[0.5, 1.5], [1.5, 0.0], [0.0, 2.5], [-1.0, -2.0]])
    cov = coverage(y, lo, hi)
    assert cov.joint == 0.5 and np.allclose(cov.per_step, [0.75, 0.75]) and cov.marginal == 0.75 and cov.n == 4
    lo2, hi2 = interval(pred, 0.5, scale=np.array([2.0, 4.0]))
    assert np.allclose(hi2 - lo2, [[2.0, 4.0]] * 4)
    w = interval_width(np.array([1.0, 2.0, 3.0]), unit_scale=10.0)
    assert w.normalized == 4.0 and w.original == 40.0 and np.allclose(w.per_step, [2, 4, 6])
    assert interval_width(np.array([1.0, 3.0]), unit_scale=np.array([1.0, 2.0])).original == pytest.approx(7.0)


# ---------------------------------------------------------------- single-client oracles


@pytest.mark.parametrize("n_cal,alpha", [(90, 0.1), (99, 0.1), (50, 0.2), (200, 0.05)])
def test_single_client_matches_mapie_and_crepes(n_cal: int, alpha: float) -> None:
    from crepes import ConformalRegressor
    from mapie.regression import SplitConformalRegressor
    from sklearn.linear_model import LinearRegression

    rng = np.random.default_rng(n_cal)
    x = rng.normal(size=(200 + n_cal + 100, 3))
    y = x @ np.array([1.0, -2.0, 0.5]) + rng.standard_t(3, size=len(x))
    model = LinearRegression().fit(x[:200], y[:200])
    x_cal, y_cal, x_test, y_test = x[200 : 200 + n_cal], y[200 : 200 + n_cal], x[200 + n_cal :], y[200 + n_cal :]
    fsc = FederatedSplitConformal(alpha=alpha)
    fsc.calibrate([y_cal - model.predict(x_cal)])
    lo, hi = fsc.interval(model.predict(x_test))
    mapie = SplitConformalRegressor(model, confidence_level=1 - alpha, prefit=True).conformalize(x_cal, y_cal)
    _, bounds = mapie.predict_interval(x_test)
    assert np.allclose(lo, bounds[:, 0, 0], atol=1e-12) and np.allclose(hi, bounds[:, 1, 0], atol=1e-12)
    residuals = y_cal - model.predict(x_cal)
    crepes = ConformalRegressor().fit(residuals).predict_int(model.predict(x_test), confidence=1 - alpha)
    rank = math.ceil((n_cal + 1) * (1 - Fraction(str(alpha))))
    if (n_cal + 1) * (1 - Fraction(str(alpha))) == rank:
        # exact boundary (n=99, alpha=0.1: 90/100 = 0.9): crepes computes int((1-0.9)·100) in
        # floats (9.999…) and takes one rank higher — conservative, not the exact minimum
        half = np.sort(np.abs(residuals))[rank]
        assert np.allclose(crepes[:, 1] - model.predict(x_test), half, atol=1e-12)
    else:
        assert np.allclose(np.stack([lo, hi], axis=1), crepes, atol=1e-12)
    assert fsc.ranks_.method == "split"
    assert 0.0 <= fsc.evaluate(y_test, model.predict(x_test)).joint <= 1.0


# ---------------------------------------------------------------- CLI


def test_cli_ranks_coverage_and_simulate() -> None:
    runner = CliRunner()
    out = runner.invoke(conformal_cli, ["ranks", "--n-cal", "90", "--clients", "10", "--alpha", "0.1"])
    assert out.exit_code == 0 and "ell=80 kappa=8 coverage=0.902401" in out.output
    out = runner.invoke(conformal_cli, ["ranks", "--n-cal", "90", "--clients", "10", "--format", "json"])
    data = json.loads(out.output)
    assert (data["ell"], data["kappa"], data["feasible"]) == (80, 8, True) and data["coverage"] >= 0.9
    out = runner.invoke(
        conformal_cli,
        ["ranks", "--n-cal", "90", "--n-cal", "30", "--clients", "1", "--clients", "5", "--format", "markdown"],
    )
    assert out.exit_code == 0 and len(out.output.strip().splitlines()) == 2 + 4
    out = runner.invoke(conformal_cli, ["ranks", "--n-cal", "5", "--clients", "1"])
    assert out.exit_code == 0 and "INFEASIBLE" in out.output and "needs >= 9" in out.output
    out = runner.invoke(
        conformal_cli,
        ["coverage", "--n-cal", "90", "--clients", "10", "--ell", "79", "--kappa", "7", "--alpha", "0.1", "--exact"],
    )
    assert out.exit_code == 0 and "coverage=0.883234" in out.output and "UNDER-COVERS" in out.output
    out = runner.invoke(conformal_cli, ["coverage", "--n-cal", "9", "--clients", "2", "--ell", "10", "--kappa", "1"])
    assert out.exit_code != 0
    out = runner.invoke(
        conformal_cli,
        ["simulate", "--n-cal", "20", "--clients", "5", "--horizon", "3", "--draws", "500", "--format", "json"],
    )
    assert out.exit_code == 0 and json.loads(out.output)["draws"] == 500

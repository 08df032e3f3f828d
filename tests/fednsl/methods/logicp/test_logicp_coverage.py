"""Coverage of LogiCP's conformal regions, end to end and vectorised (cannot pass by luck).

Each setting (α, clients m, calibration windows n per client) draws D independent federations of
exchangeable forecasting windows (i.i.d. across windows and clients), forecasts them with a LogiCP
forecaster, partitions every client's windows with LogiCP's own ``SplitConfig``, runs the method's
client steps (σ on D^nor, local quantile on D^cal) and server steps (ranks from ``choose_ranks``, one σ per
cluster, κ-th smallest per step) with the functions the LogiCP client and strategy call, and scores one
fresh test window per draw.  The D joint hits are then Binomial(D, cov(ℓ, κ)):

* the exact coverage cov(ℓ, κ) (rules.conformal) lies inside the two-sided 99.9 % Clopper–Pearson
  interval and the interval's upper end is ≥ 1 − α (the method is valid), and
* with ℓ − 1 (and κ − 1) the same draws are significantly *below* 1 − α (the ranks matter: an interval
  that is simply too wide, or wiring that ignored the ranks, would fail).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import beta

from fednsl.methods.logicp.calibration import (
    calibrate_batch,
    client_quantile,
    client_scale,
    cluster_ranks,
    cluster_region,
    cluster_scale,
)
from fednsl.methods.logicp.splits import SplitConfig
from fednsl.tasks.timeseries.models import build_forecaster
from fednsl.tasks.timeseries.training import predict
from rules.conformal import (
    calibrate_cluster,
    client_local_quantile,
    coverage,
    qq_coverage,
)

L, H = 36, 6
SPLIT = SplitConfig(pretrain=0.1, cal=0.5, nor=0.25, public=0.1)   # 2n windows per client → n for D^cal


def clopper_pearson(k: int, n: int, level: float = 0.999) -> tuple[float, float]:
    a = 1 - level
    lo = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def windows(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """i.i.d. windows (…, L + H): a daily sinusoid of random phase and amplitude plus AR(1) noise whose
    scale is log-normal per window (heavy-tailed residuals)."""
    t = np.arange(L + H, dtype=np.float32)
    phase = rng.uniform(0, 24, size=shape + (1,)).astype(np.float32)
    amp = rng.uniform(0.5, 1.5, size=shape + (1,)).astype(np.float32)
    scale = (0.1 * rng.lognormal(0.0, 0.5, size=shape)).astype(np.float32)
    eps = rng.standard_normal(size=(L + H,) + shape, dtype=np.float32) * scale
    for s in range(1, L + H):
        eps[s] += 0.7 * eps[s - 1]
    return 0.5 + 0.4 * amp * np.sin(2 * np.pi * (t + phase) / 24) + np.moveaxis(eps, 0, -1)


@pytest.fixture(scope="module")
def model():
    return build_forecaster({"name": "rnn", "hidden": 8}, L, H, seed=0)


def residuals(model, w: np.ndarray) -> np.ndarray:
    """Y − Ŷ of the forecaster for windows (…, L + H) → (…, H), float64."""
    flat = torch.from_numpy(w.reshape(-1, L + H))
    with torch.no_grad():
        pred = predict(model, flat[:, :L], batch_size=65536).numpy()
    return (flat[:, L:].numpy() - pred).astype(np.float64).reshape(w.shape[:-1] + (H,))


def simulate(model, m: int, n: int, draws: int, seed: int) -> tuple[list[dict[str, np.ndarray]], np.ndarray, np.ndarray]:
    """``draws`` independent federations of ``m`` clients with ``2n`` windows each, partitioned by LogiCP's
    ``SplitConfig``, and one test window per draw: (parts, residuals (D, m, 2n, H), test residuals (D, H))."""
    rng = np.random.default_rng(seed)
    parts = [SPLIT.partition(2 * n, np.random.default_rng([seed, i])) for i in range(m)]
    assert all(len(p["cal"]) == n for p in parts)
    return parts, residuals(model, windows(rng, (draws, m, 2 * n))), residuals(model, windows(rng, (draws,)))


def method_hits(parts: list[dict[str, np.ndarray]], e: np.ndarray, e_test: np.ndarray, alpha: float,
                ranks: tuple[int, int] | None = None) -> tuple[int, float]:
    """The LogiCP calibration on every draw at once; returns (joint hits, exact coverage of the ranks)."""
    m = len(parts)
    # client side: residuals stay on the client; σ_i (Eq. 15) and, later, ℓ^(i) (Eq. 16–17)
    cal = [np.moveaxis(e[:, i, parts[i]["cal"]], 1, 0) for i in range(m)]    # (n, D, H) each
    nor = [np.moveaxis(e[:, i, parts[i]["nor"]], 1, 0) for i in range(m)]
    sigmas = np.stack([client_scale(r) for r in nor])                      # (m, D, H) — sent
    # server side: ranks from the counts (choose_ranks), one σ per cluster
    choice = cluster_ranks([len(p["cal"]) for p in parts], alpha)
    ell, kappa = ranks if ranks is not None else (choice.ell, choice.kappa)
    sigma = cluster_scale(sigmas)                                          # (D, H) — broadcast back
    local = np.stack([client_quantile(r, ell, sigma) for r in cal])        # (m, D, H) — sent
    qhat = cluster_region(local, kappa)                                    # (D, H)  Eq. 18
    # evaluation: region Ŷ ± Q̂ on one fresh window per draw, joint over the horizon
    cov = coverage(e_test, -qhat, qhat)
    return int(round(cov.joint * len(e_test))), qq_coverage(len(parts[0]["cal"]), m, ell, kappa)


SETTINGS = [  # (alpha, clients in the cluster, calibration windows per client)
    (0.1, 1, 19),
    (0.1, 3, 10),
    (0.2, 4, 8),
    (0.1, 5, 12),
    (0.25, 3, 10),
    (0.15, 8, 6),
]


@pytest.mark.parametrize("alpha,m,n", SETTINGS)
def test_joint_coverage_is_valid_and_ranks_one_lower_fail(model, alpha, m, n):
    draws = 2000
    parts, e, e_test = simulate(model, m, n, draws, seed=int(1000 * alpha) + 10 * m + n)
    hits, exact = method_hits(parts, e, e_test, alpha)
    lo, hi = clopper_pearson(hits, draws)
    choice = cluster_ranks([n] * m, alpha)
    assert choice.coverage >= 1 - alpha and exact == pytest.approx(choice.coverage, abs=1e-9)
    assert lo <= exact <= hi, f"empirical {hits / draws:.4f} [{lo:.4f}, {hi:.4f}] vs exact {exact:.4f}"
    assert hi >= 1 - alpha
    # one rank lower (ℓ − 1; κ − 1 where that loses enough to be detectable with these draws): the same
    # draws are significantly below the target
    lower = [(choice.ell - 1, choice.kappa)]
    if choice.kappa > 1 and qq_coverage(n, m, choice.ell, choice.kappa - 1) < 1 - alpha - 0.035:
        lower.append((choice.ell, choice.kappa - 1))
    for ranks in lower:
        h2, exact2 = method_hits(parts, e, e_test, alpha, ranks)
        lo2, hi2 = clopper_pearson(h2, draws)
        assert exact2 < 1 - alpha and lo2 <= exact2 <= hi2
        assert hi2 < 1 - alpha, f"ranks {ranks}: empirical {h2 / draws:.4f} [{lo2:.4f}, {hi2:.4f}] not below {1 - alpha}"


def test_batched_client_and_server_steps_match_rules_conformal():
    rng = np.random.default_rng(7)
    m, n, n_nor, d = 4, 12, 6, 5
    cal = [rng.standard_t(3, size=(n, d, H)) for _ in range(m)]
    nor = [rng.standard_t(3, size=(n_nor, d, H)) for _ in range(m)]
    for mode in ("cluster", "client", "none"):
        qhat, choice = calibrate_batch(cal, nor, 0.2, mode)
        for j in range(d):   # one draw at a time through the rules layer's reference protocol
            ref = calibrate_cluster([c[:, j] for c in cal], 0.2, [r[:, j] for r in nor], scale_mode=mode)
            np.testing.assert_allclose(qhat[j], ref.qhat, rtol=0, atol=1e-12)
            assert (ref.ranks.ell, ref.ranks.kappa) == (choice.ell, choice.kappa)
    # the client message equals the rules layer's client function
    sigma = client_scale(nor[0][:, 0])
    np.testing.assert_allclose(client_quantile(cal[0][:, 0], 5, sigma), client_local_quantile(cal[0][:, 0], 5, sigma))


def test_single_client_region_matches_mapie_and_crepes():
    """m = 1, H = 1, σ ≡ 1: LogiCP's region is split conformal; MAPIE 1.6 and crepes 0.9 as oracles."""
    from crepes import ConformalRegressor
    from mapie.regression import SplitConformalRegressor
    from sklearn.linear_model import LinearRegression

    rng = np.random.default_rng(3)
    x = rng.normal(size=(400, 3))
    y = x @ np.array([1.0, -2.0, 0.5]) + rng.standard_t(4, size=400)
    est = LinearRegression().fit(x[:200], y[:200])
    x_cal, y_cal, x_test = x[200:287], y[200:287], x[287:]   # n = 87 (not a boundary case for crepes)
    res = (y_cal - est.predict(x_cal))[:, None]
    for alpha in (0.1, 0.2, 0.05):
        qhat, choice = calibrate_batch([res], None, alpha, "none")
        assert choice.ell == int(np.ceil((len(res) + 1) * (1 - alpha)))
        mapie = SplitConformalRegressor(est, confidence_level=1 - alpha, prefit=True).conformalize(x_cal, y_cal)
        _, iv = mapie.predict_interval(x_test)
        np.testing.assert_allclose((iv[:, 1, 0] - iv[:, 0, 0]) / 2, qhat[0], rtol=1e-9)
        cr = ConformalRegressor().fit(residuals=res[:, 0])
        ivc = cr.predict_int(y_hat=est.predict(x_test), confidence=1 - alpha)
        np.testing.assert_allclose((ivc[:, 1] - ivc[:, 0]) / 2, qhat[0], rtol=1e-9)

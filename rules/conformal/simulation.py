"""Monte Carlo check of federated conformal coverage on exchangeable synthetic residuals.

One draw = one cluster calibration (m clients × n calibration residuals, plus n_nor
normalisation residuals each when normalising) and ONE independent test residual, so the
joint hit of a draw is Bernoulli(true coverage) and the hit count over independent draws is
Binomial — hence the Clopper–Pearson interval. Draws are vectorised in chunks through the
same client/server functions the protocol uses (``local_quantile``, ``aggregate_quantiles``,
``horizon_scale``, ``aggregate_scales``, ``normalized_scores``).

Residual model (exchangeable across samples and clients): Gaussian AR(1) over the horizon
(rho), times a log-normal per-sample scale (heavy tails), times a per-step scale growing
linearly from 0.5 to 3 (error growing with lead time).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import binomtest

from rules.conformal.coverage import qq_coverage
from rules.conformal.quantiles import aggregate_quantiles, local_quantile
from rules.conformal.ranks import choose_ranks
from rules.conformal.scores import aggregate_scales, horizon_scale, normalized_scores

__all__ = [
    "synthetic_residuals",
    "SimulationResult",
    "batched_cluster_qhat",
    "simulate_coverage",
    "simulate_rank_pairs",
]


def synthetic_residuals(rng: np.random.Generator, shape: tuple[int, ...], horizon: int, rho: float = 0.8) -> np.ndarray:
    """i.i.d. residual vectors of shape (*shape, horizon) from the module's residual model."""
    z = rng.standard_normal((*shape, horizon))
    e = np.empty_like(z)
    e[..., 0] = z[..., 0]
    c = math.sqrt(1.0 - rho * rho)
    for t in range(1, horizon):
        e[..., t] = rho * e[..., t - 1] + c * z[..., t]
    e *= np.exp(0.5 * rng.standard_normal(shape))[..., None]
    return e * np.linspace(0.5, 3.0, horizon) if horizon > 1 else e


@dataclass(frozen=True)
class SimulationResult:
    """joint_coverage = joint_hits/draws with Clopper–Pearson 95 % CI; exact_coverage = Eq (★)."""

    n_cal: int
    n_clients: int
    alpha: float
    horizon: int
    scale_mode: str
    ell: int
    kappa: int
    draws: int
    joint_hits: int
    joint_coverage: float
    ci_low: float
    ci_high: float
    per_step_coverage: float
    exact_coverage: float
    width: float

    def to_dict(self) -> dict:
        return asdict(self)


def batched_cluster_qhat(
    cal: np.ndarray, nor: np.ndarray | None, pairs: list[tuple[int, int]], scale_mode: str = "cluster"
) -> list[np.ndarray]:
    """Q̂ (B, H) for B independent clusters at once, one array per rank pair.

    cal: (n, B, m, H) calibration residuals; nor: (n_nor, B, m, H) normalisation residuals
    (None for scale_mode "none"). Same steps as ``calibrate_cluster`` (Eq 15–18), batched."""
    _, b, m, horizon = cal.shape
    if scale_mode == "none":
        sig_i = np.ones((b, m, horizon))
    else:
        if nor is None:
            raise ValueError(f"scale_mode={scale_mode!r} needs normalisation residuals")
        sig_i = horizon_scale(nor)  # Eq 15: (B, m, H)
    if scale_mode == "cluster":
        sig = aggregate_scales(np.moveaxis(sig_i, 1, 0), "max")  # (B, H)
        sig_i = np.broadcast_to(sig[:, None, :], (b, m, horizon))
    elif scale_mode not in ("client", "none"):
        raise ValueError(f"unknown scale_mode {scale_mode!r}")
    scores = normalized_scores(cal, sig_i)  # Eq 16: (n, B, m)
    out = []
    for ell, kappa in pairs:
        local = local_quantile(scores, ell)[..., None] * sig_i  # Eq 17: (B, m, H)
        out.append(aggregate_quantiles(np.moveaxis(local, 1, 0), kappa))  # Eq 18: (B, H)
    return out


def simulate_coverage(
    n_cal: int,
    n_clients: int,
    alpha: float,
    *,
    rng: np.random.Generator,
    horizon: int = 1,
    n_nor: int = 10,
    draws: int = 20_000,
    scale_mode: str = "cluster",
    ranks: tuple[int, int] | None = None,
    chunk_values: int = 4_000_000,
) -> SimulationResult:
    """Empirical joint/per-step coverage over ``draws`` independent calibrations + test points.

    ranks: override (ell, kappa) (e.g. the LogiCP code's (79, 7)); default ``choose_ranks``.
    scale_mode: "cluster" (shared σ = max of client σ's), "client" (paper-literal per-client σ)
    or "none" (σ ≡ 1). width: mean over draws of mean_τ 2·Q̂_τ.
    """
    if ranks is None:
        choice = choose_ranks(n_cal, n_clients, alpha)
        if not choice.feasible:
            raise ValueError(f"ranks infeasible for n_cal={n_cal}, n_clients={n_clients}, alpha={alpha}")
        assert choice.ell is not None and choice.kappa is not None
        ranks = (choice.ell, choice.kappa)
    (result,) = simulate_rank_pairs(
        n_cal,
        n_clients,
        alpha,
        [ranks],
        rng=rng,
        horizon=horizon,
        n_nor=n_nor,
        draws=draws,
        scale_mode=scale_mode,
        chunk_values=chunk_values,
    )
    return result


def simulate_rank_pairs(
    n_cal: int,
    n_clients: int,
    alpha: float,
    pairs: list[tuple[int, int]],
    *,
    rng: np.random.Generator,
    horizon: int = 1,
    n_nor: int = 10,
    draws: int = 20_000,
    scale_mode: str = "cluster",
    chunk_values: int = 4_000_000,
) -> list[SimulationResult]:
    """``simulate_coverage`` for several rank pairs evaluated on the SAME draws (paired)."""
    n, m = n_cal, n_clients
    if scale_mode not in ("cluster", "client", "none"):
        raise ValueError(f"unknown scale_mode {scale_mode!r}")
    per_draw = m * (n + (n_nor if scale_mode != "none" else 0)) * horizon
    chunk = max(1, min(draws, chunk_values // max(per_draw, 1)))
    hits = np.zeros(len(pairs), dtype=np.int64)
    step_hits = np.zeros(len(pairs), dtype=np.int64)
    width_sum = np.zeros(len(pairs))
    done = 0
    while done < draws:
        b = min(chunk, draws - done)
        cal = synthetic_residuals(rng, (n, b, m), horizon)  # (n, B, m, H)
        test = np.abs(synthetic_residuals(rng, (b,), horizon))  # (B, H)
        nor = None if scale_mode == "none" else synthetic_residuals(rng, (n_nor, b, m), horizon)
        for i, qhat in enumerate(batched_cluster_qhat(cal, nor, pairs, scale_mode)):
            inside = test <= qhat
            hits[i] += int(inside.all(axis=1).sum())
            step_hits[i] += int(inside.sum())
            width_sum[i] += float((2.0 * qhat).mean(axis=1).sum())
        done += b
    out = []
    for i, (ell, kappa) in enumerate(pairs):
        k = int(hits[i])
        ci = binomtest(k, draws).proportion_ci(confidence_level=0.95, method="exact")
        out.append(
            SimulationResult(
                n,
                m,
                float(alpha),
                horizon,
                scale_mode,
                ell,
                kappa,
                draws,
                k,
                k / draws,
                float(ci.low),
                float(ci.high),
                int(step_hits[i]) / (draws * horizon),
                qq_coverage(n, m, ell, kappa),
                float(width_sum[i]) / draws,
            )
        )
    return out

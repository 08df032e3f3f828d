"""The conformal steps of LogiCP as pure, batched functions (§4.3, Eq. 12–18).

The LogiCP client and server call exactly these (``client.py`` / ``strategy.py``), and the method-level
coverage test calls them on thousands of independent calibrations at once.  All functions keep any
batch axes between the sample axis and the horizon axis:

==========================  ======  =================================================  =========
function                    side    computes                                           paper
==========================  ======  =================================================  =========
``client_scale``            client  σ_τ = max_j |e_jτ| over D_nor                        Eq. 15
``cluster_scale``           server  one σ for the cluster (max over members = Eq. 15
                                    on the pooled D_nor)                               –
``cluster_ranks``           server  (ℓ, κ) from (min n_cal, members, α), exact          Eq. 14
``client_quantile``         client  ℓ^(i)_τ = σ_τ · Q_(ℓ)(max_τ |e_jτ| / σ_τ)            Eq. 16–17
``cluster_region``          server  Q̂_τ = Q_(κ)(ℓ^(1..m)_τ)                             Eq. 18
==========================  ======  =================================================  =========

Only σ vectors, local quantile vectors (length H) and calibration counts leave a client; residuals
never do.  Scale modes (``rules.conformal.SCALE_MODES``): ``"cluster"`` (default; one σ per cluster, so
all scores share one normalisation and the joint guarantee P(|Y_τ − Ŷ_τ| ≤ Q̂_τ ∀τ) ≥ 1 − α is exact
under exchangeability), ``"client"`` (paper-literal Eq. 17 with each client's own σ; heuristic),
``"none"`` (σ ≡ 1).  Ranks are never hard-coded: :func:`rules.conformal.choose_ranks`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rules.conformal import (
    RankChoice,
    aggregate_quantiles,
    aggregate_scales,
    choose_ranks,
    horizon_scale,
    local_quantile,
    normalized_scores,
)

SCALE_MODES = ("cluster", "client", "none")


def client_scale(nor_residuals: np.ndarray, eps: float = 1e-8) -> np.ndarray:
    """Eq. 15: ``(n_nor, *batch, H)`` residuals on D_nor → σ ``(*batch, H)`` (floored at ``eps``)."""
    return horizon_scale(nor_residuals, eps)


def cluster_scale(sigmas: np.ndarray, how: str = "max") -> np.ndarray:
    """Server: the members' σ vectors ``(m, *batch, H)`` → the cluster's σ ``(*batch, H)``."""
    return aggregate_scales(sigmas, how)


def cluster_ranks(n_cal: Sequence[int], alpha: float) -> RankChoice:
    """Ranks for a cluster whose members hold ``n_cal`` calibration windows each: every member uses
    ``min(n_cal)`` of them (value-independent subsampling keeps exchangeability)."""
    sizes = [int(n) for n in n_cal]
    if not sizes or min(sizes) < 1:
        raise ValueError(f"every cluster member needs >= 1 calibration window, got sizes {sizes}")
    return choose_ranks(min(sizes), len(sizes), alpha)


def client_quantile(cal_residuals: np.ndarray, ell: int, sigma: np.ndarray | None) -> np.ndarray:
    """Eq. 16–17: residuals on D_cal ``(n, *batch, H)`` → ℓ^(i) ``(*batch, H)``; ``sigma`` ``(*batch, H)``,
    ``(H,)`` or None (σ ≡ 1)."""
    e = np.asarray(cal_residuals, dtype=float)
    if e.ndim < 2:
        raise ValueError(f"calibration residuals must be (n, ..., H), got shape {e.shape}")
    s = np.ones(e.shape[-1]) if sigma is None else np.asarray(sigma, dtype=float)
    s = np.broadcast_to(s, e.shape[1:])
    scores = normalized_scores(e, s)  # (n, *batch)   Eq. 16
    return local_quantile(scores, ell)[..., None] * s  # (*batch, H)   Eq. 17


def cluster_region(local: np.ndarray, kappa: int) -> np.ndarray:
    """Eq. 18: the members' vectors ``(m, *batch, H)`` → Q̂ ``(*batch, H)`` (κ-th smallest per step)."""
    return aggregate_quantiles(local, kappa)


def subsample_calibration(n: int, keep: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``keep`` of ``n`` calibration windows drawn uniformly without replacement (sorted)."""
    if not 1 <= keep <= n:
        raise ValueError(f"cannot keep {keep} of {n} calibration windows")
    return np.arange(n) if keep == n else np.sort(rng.choice(n, size=keep, replace=False))


def calibrate_batch(
    cal_residuals: Sequence[np.ndarray],
    nor_residuals: Sequence[np.ndarray] | None,
    alpha: float,
    scale_mode: str = "cluster",
    ranks: tuple[int, int] | None = None,
) -> tuple[np.ndarray, RankChoice]:
    """The whole protocol for one cluster in process, batched: per member ``(n, *batch, H)`` residuals
    (all members the same n) → (Q̂ ``(*batch, H)``, ranks).  ``ranks`` overrides (ℓ, κ) (tests only)."""
    if scale_mode not in SCALE_MODES:
        raise ValueError(f"scale_mode must be one of {SCALE_MODES}, got {scale_mode!r}")
    choice = cluster_ranks([len(r) for r in cal_residuals], alpha)
    ell, kappa = ranks if ranks is not None else (choice.ell, choice.kappa)
    if ell is None or kappa is None:
        shape = np.asarray(cal_residuals[0]).shape[1:]
        return np.full(shape, np.inf), choice
    if scale_mode == "none":
        sigmas: list[np.ndarray | None] = [None] * len(cal_residuals)
    else:
        if nor_residuals is None:
            raise ValueError(f"scale_mode={scale_mode!r} needs normalisation residuals")
        own = [client_scale(r) for r in nor_residuals]
        sigmas = list(own) if scale_mode == "client" else [cluster_scale(np.stack(own))] * len(own)
    local = np.stack([client_quantile(r, ell, s) for r, s in zip(cal_residuals, sigmas, strict=True)])
    return cluster_region(local, kappa), choice


__all__ = [
    "SCALE_MODES",
    "calibrate_batch",
    "client_quantile",
    "client_scale",
    "cluster_ranks",
    "cluster_region",
    "cluster_scale",
    "subsample_calibration",
]

"""Per-cluster federated split conformal prediction (LogiCP §4.3, Eq 12–18).

Protocol for one cluster of m clients (what crosses the network is marked ⇄):
 1. client i ⇄ its calibration size n_i (a count). Sizes must agree; with ``rng`` every client
    drops points uniformly at random down to min_i n_i (value-independent, so exchangeability
    is kept).
 2. server: (ell, kappa) = ``choose_ranks(n, m, alpha)`` ⇄ ell to the clients.
 3. scale (multi-horizon normalisation, Eq 15):
    - "cluster" (default when normalisation residuals are given): client ⇄ σ_i (Eq 15 on its
      D_nor); server ⇄ σ = aggregate (max = Eq 15 on the pooled D_nor). All scores share σ,
      so the joint guarantee P(|e_τ| <= Q̂_τ ∀τ) >= 1 - alpha holds exactly, and Eq 18 reduces
      to Q̂_τ = σ_τ · Q_(kappa)(Q_(ell)(R_i)).
    - "client": paper-literal Eq 17 with each client's own σ_i; Q̂_τ is the per-step
      kappa-th smallest of σ_iτ·q_i (Eq 18). Scores of different clients are then on different
      scales, so the guarantee is no longer exact (heuristic; measured in the README).
    - "none": σ ≡ 1, score max_τ |e_τ| (joint, unnormalised).
 4. client ⇄ ℓ^(i) = σ · Q_(ell)(R_i), a length-H vector (Eq 16–17).
 5. server: Q̂_τ = Q_(kappa)(ℓ_τ^(1..m)) (Eq 18); region [Ŷ_τ - Q̂_τ, Ŷ_τ + Q̂_τ] (Eq 13).
If no finite threshold is valid (ranks infeasible) Q̂ = +inf: the trivial region, with a warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rules.conformal.metrics import Coverage, Width, coverage, interval, interval_width
from rules.conformal.quantiles import aggregate_quantiles, local_quantile
from rules.conformal.ranks import RankChoice, choose_ranks
from rules.conformal.scores import aggregate_scales, horizon_scale, normalized_scores

__all__ = [
    "SCALE_MODES",
    "ClusterCalibration",
    "client_local_quantile",
    "equalize_calibration_sizes",
    "calibrate_cluster",
    "FederatedSplitConformal",
]

SCALE_MODES = ("cluster", "client", "none")


def _as_2d(residuals: np.ndarray, what: str) -> np.ndarray:
    r = np.asarray(residuals, dtype=float)
    if r.ndim == 1:
        r = r[:, None]
    if r.ndim != 2 or r.shape[0] == 0:
        raise ValueError(f"{what} must be (n >= 1,) or (n >= 1, H), got shape {np.shape(residuals)}")
    return r


def client_local_quantile(cal_residuals: np.ndarray, ell: int, sigma: np.ndarray | None = None) -> np.ndarray:
    """Client message (Eq 16–17): σ_τ · (ell-th smallest of R_j = max_τ |e_jτ|/σ_τ), shape (H,).

    cal_residuals: (n, H) or (n,) residuals Y - Ŷ on the client's D_cal; sigma: (H,) or None (σ ≡ 1)."""
    r = _as_2d(cal_residuals, "calibration residuals")
    s = np.ones(r.shape[1]) if sigma is None else np.broadcast_to(np.asarray(sigma, dtype=float), (r.shape[1],))
    return local_quantile(normalized_scores(r, s), ell, scale=s)


def equalize_calibration_sizes(cal_residuals: Sequence[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
    """Subsample every client's calibration set uniformly at random to the smallest size."""
    n_min = min(len(r) for r in cal_residuals)
    out = []
    for r in cal_residuals:
        r = np.asarray(r, dtype=float)
        out.append(r if len(r) == n_min else r[np.sort(rng.choice(len(r), size=n_min, replace=False))])
    return out


@dataclass(frozen=True)
class ClusterCalibration:
    """Result for one cluster. qhat: (H,) Q̂_τ (Eq 18; +inf if infeasible); local: (m, H) client
    vectors (Eq 17); sigma: (H,) shared σ ("cluster"/"none") or (m, H) per-client σ ("client")."""

    qhat: np.ndarray
    ranks: RankChoice
    local: np.ndarray
    sigma: np.ndarray
    scale_mode: str

    @property
    def horizon(self) -> int:
        return int(self.qhat.shape[0])

    def interval(self, pred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) = Ŷ ∓ Q̂_τ for predictions (n, H) (or (n,) when H = 1)."""
        p = np.asarray(pred, dtype=float)
        return interval(p, self.qhat if p.ndim > 1 or self.horizon > 1 else self.qhat[0])

    def evaluate(self, y: np.ndarray, pred: np.ndarray) -> Coverage:
        """Joint and per-step coverage of the region on test targets y and predictions pred."""
        return coverage(y, *self.interval(pred))

    def width(self, unit_scale: np.ndarray | float | None = None) -> Width:
        """mean_τ 2·Q̂_τ in model units, and in original units given the data scaler's unit."""
        return interval_width(self.qhat, unit_scale)


def calibrate_cluster(
    cal_residuals: Sequence[np.ndarray],
    alpha: float,
    nor_residuals: Sequence[np.ndarray] | None = None,
    *,
    scale_mode: str | None = None,
    scale_agg: str = "max",
    eps: float = 1e-8,
    rng: np.random.Generator | None = None,
) -> ClusterCalibration:
    """Run the protocol of the module docstring in-process for one cluster.

    cal_residuals: per client (n_i, H) or (n_i,) residuals Y - Ŷ on D_cal (the cluster model's
    predictions); nor_residuals: per client (n_nor_i, H) residuals on D_nor, disjoint from D_cal
    (required for "cluster"/"client" scaling); scale_mode: None -> "cluster" if nor_residuals
    else "none"; rng: needed only when calibration sizes differ (random equalisation).
    """
    if len(cal_residuals) == 0:
        raise ValueError("a cluster needs at least one client with calibration residuals")
    cal = [_as_2d(r, f"calibration residuals of client {i}") for i, r in enumerate(cal_residuals)]
    horizon = cal[0].shape[1]
    if any(r.shape[1] != horizon for r in cal):
        raise ValueError(f"clients disagree on the horizon: {[r.shape[1] for r in cal]}")
    mode = scale_mode or ("cluster" if nor_residuals is not None else "none")
    if mode not in SCALE_MODES:
        raise ValueError(f"unknown scale_mode {mode!r}; choose one of {SCALE_MODES}")
    sizes = [len(r) for r in cal]
    if len(set(sizes)) > 1:
        if rng is None:
            raise ValueError(f"calibration sizes differ across clients {sizes}; pass rng to subsample to {min(sizes)}")
        cal = equalize_calibration_sizes(cal, rng)
    m, n = len(cal), len(cal[0])
    ranks = choose_ranks(n, m, alpha)

    if mode == "none":
        sigma = np.ones(horizon)
        sigmas = np.broadcast_to(sigma, (m, horizon))
    else:
        if nor_residuals is None or len(nor_residuals) != m:
            raise ValueError(f"scale_mode={mode!r} needs normalisation residuals for each of the {m} clients")
        nor = [_as_2d(r, f"normalisation residuals of client {i}") for i, r in enumerate(nor_residuals)]
        if any(r.shape[1] != horizon for r in nor):
            raise ValueError("normalisation residuals must have the same horizon as calibration residuals")
        client_sigmas = np.stack([horizon_scale(r, eps) for r in nor])  # Eq 15 per client
        if mode == "cluster":
            sigma = aggregate_scales(client_sigmas, scale_agg)
            sigmas = np.broadcast_to(sigma, (m, horizon))
        else:
            sigma = client_sigmas
            sigmas = client_sigmas

    if not ranks.feasible:
        warnings.warn(
            f"conformal calibration infeasible: {m} client(s) x {n} scores cannot reach coverage "
            f"{1 - float(alpha):g} (needs >= {ranks.min_n_cal} per client); interval is (-inf, inf)",
            RuntimeWarning,
            stacklevel=2,
        )
        local = np.full((m, horizon), np.inf)
        return ClusterCalibration(np.full(horizon, np.inf), ranks, local, sigma, mode)

    assert ranks.ell is not None and ranks.kappa is not None
    local = np.stack([client_local_quantile(r, ranks.ell, s) for r, s in zip(cal, sigmas, strict=True)])  # Eq 17
    qhat = aggregate_quantiles(local, ranks.kappa)  # Eq 18
    return ClusterCalibration(qhat, ranks, local, sigma, mode)


class FederatedSplitConformal:
    """In-process convenience around ``calibrate_cluster`` for one cluster.

    Usage (lists run over the cluster's clients; arrays are residuals Y - Ŷ of shape (n, H)):

    ```python
    fsc = FederatedSplitConformal(alpha=0.1)
    fsc.calibrate(cal_residuals, nor_residuals)
    lo, hi = fsc.interval(pred)
    fsc.evaluate(y, pred).joint, fsc.width(unit_scale).original
    ```
    """

    def __init__(
        self, alpha: float = 0.1, *, scale_mode: str | None = None, scale_agg: str = "max", eps: float = 1e-8
    ) -> None:
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
        self.alpha = alpha
        self.scale_mode = scale_mode
        self.scale_agg = scale_agg
        self.eps = eps
        self.calibration_: ClusterCalibration | None = None

    def calibrate(
        self,
        cal_residuals: Sequence[np.ndarray],
        nor_residuals: Sequence[np.ndarray] | None = None,
        rng: np.random.Generator | None = None,
    ) -> ClusterCalibration:
        """Calibrate on per-client residuals (see ``calibrate_cluster``); stores and returns it."""
        self.calibration_ = calibrate_cluster(
            cal_residuals,
            self.alpha,
            nor_residuals,
            scale_mode=self.scale_mode,
            scale_agg=self.scale_agg,
            eps=self.eps,
            rng=rng,
        )
        return self.calibration_

    def _fitted(self) -> ClusterCalibration:
        if self.calibration_ is None:
            raise RuntimeError("FederatedSplitConformal: call calibrate() first")
        return self.calibration_

    @property
    def qhat_(self) -> np.ndarray:
        return self._fitted().qhat

    @property
    def ranks_(self) -> RankChoice:
        return self._fitted().ranks

    def interval(self, pred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._fitted().interval(pred)

    def evaluate(self, y: np.ndarray, pred: np.ndarray) -> Coverage:
        return self._fitted().evaluate(y, pred)

    def width(self, unit_scale: np.ndarray | float | None = None) -> Width:
        return self._fitted().width(unit_scale)

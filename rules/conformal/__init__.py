"""Federated split conformal prediction by the quantile of quantiles (LogiCP §4.3, Eq 12–18).

Modules: ``coverage`` (exact coverage of rank pairs), ``ranks`` (choosing ell, kappa),
``scores`` (residuals, multi-horizon normalisation), ``quantiles`` (client/server order
statistics), ``federated`` (per-cluster protocol, ``FederatedSplitConformal``), ``metrics``
(intervals, joint/per-step coverage, widths), ``simulation`` (Monte Carlo coverage on
synthetic exchangeable residuals). See the README section "Federated conformal prediction".
"""

from rules.conformal.coverage import (
    qq_coverage,
    qq_coverage_fraction,
    qq_coverage_matrix,
    qq_level_moments,
    split_coverage,
)
from rules.conformal.federated import (
    SCALE_MODES,
    ClusterCalibration,
    FederatedSplitConformal,
    calibrate_cluster,
    client_local_quantile,
    equalize_calibration_sizes,
)
from rules.conformal.metrics import Coverage, Width, coverage, interval, interval_width
from rules.conformal.quantiles import aggregate_quantiles, local_quantile, order_statistic
from rules.conformal.ranks import (
    AUTHORS_RANKS,
    RankChoice,
    alpha_fraction,
    choose_ranks,
    meets_target,
    split_conformal_rank,
)
from rules.conformal.scores import absolute_residuals, aggregate_scales, horizon_scale, normalized_scores

__all__ = [
    "AUTHORS_RANKS",
    "SCALE_MODES",
    "ClusterCalibration",
    "Coverage",
    "FederatedSplitConformal",
    "RankChoice",
    "Width",
    "absolute_residuals",
    "aggregate_quantiles",
    "aggregate_scales",
    "alpha_fraction",
    "calibrate_cluster",
    "choose_ranks",
    "client_local_quantile",
    "coverage",
    "equalize_calibration_sizes",
    "horizon_scale",
    "interval",
    "interval_width",
    "local_quantile",
    "meets_target",
    "normalized_scores",
    "order_statistic",
    "qq_coverage",
    "qq_coverage_fraction",
    "qq_coverage_matrix",
    "qq_level_moments",
    "split_conformal_rank",
    "split_coverage",
]

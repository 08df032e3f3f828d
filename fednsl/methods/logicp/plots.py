"""LogiCP's figures: joint coverage of the per-cluster conformal region against the 1 − α target, with the
cluster model (LogiCP-S); test MSE and STL satisfaction of LogiCP / -S / -T against the naive forecasts.
Also the figures of its baselines CP-IFCA and Fed-Bayes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fednsl.methods.logicp.config import LogiCPConfig
from fednsl.plots import Panel, PlotSpec, Series, forecast_panels, register_plot


def coverage_target(config: Mapping[str, Any]) -> float:
    """100·(1 − α) of the run (``method_kwargs.alpha``, default :class:`LogiCPConfig`'s)."""
    return 100.0 * (1.0 - float((config.get("method_kwargs") or {}).get("alpha", LogiCPConfig.alpha)))


def coverage_panel(method: str) -> Panel:
    return Panel(
        "Joint coverage: all 24 steps inside the region (%)",
        (
            Series("evaluate/cov_joint", method),
            Series("evaluate/s_cov_joint", f"{method}-S (cluster model)", "variant"),
        ),
        "coverage (%)",
        target=coverage_target,
        target_label="target 1 − α",
    )


WIDTH = Panel("Region width (mean 2·Q̂, normalised)", (Series("evaluate/width", "LogiCP"),), "width")

LOGICP = register_plot("logicp")(
    PlotSpec(
        "logicp_coverage",
        "LogiCP: joint coverage of the conformal regions against the 1 − α target; forecasts against naive baselines",
        (
            coverage_panel("LogiCP"),
            *forecast_panels([("", "LogiCP"), ("s_", "LogiCP-S (cluster model)"), ("t_", "LogiCP-T (corrected)")]),
            WIDTH,
        ),
        key_metrics=(
            "evaluate/cov_joint",
            "evaluate/cov_step",
            "evaluate/mse",
            "evaluate/rho",
            "evaluate/width",
            "train/train_loss",
        ),
    )
)

CP_IFCA = register_plot("cp-ifca")(
    PlotSpec(
        "cp_ifca_coverage",
        "CP-IFCA (LogiCP baseline): joint coverage against the 1 − α target; forecasts against naive baselines",
        (
            coverage_panel("CP-IFCA"),
            *forecast_panels([("", "CP-IFCA"), ("s_", "CP-IFCA-S (cluster model)")]),
            Panel("Region width (mean 2·Q̂, normalised)", (Series("evaluate/width", "CP-IFCA"),), "width"),
        ),
        key_metrics=("evaluate/cov_joint", "evaluate/mse", "evaluate/rho", "evaluate/width", "train/train_loss"),
    )
)

FED_BAYES = register_plot("ts-fedbayes")(
    PlotSpec(
        "ts_fedbayes_forecast",
        "Fed-Bayes (LogiCP baseline): Bayesian last layer against the naive forecasts",
        forecast_panels([("", "Fed-Bayes")]),
        key_metrics=("evaluate/mse", "evaluate/rho", "train/train_loss"),
    )
)

"""FedSTL's figure: test MSE and STL satisfaction of the client models (FedSTL), the cluster models
(FedSTL-S) and the corrected forecasts (FedSTL-T) against the naive forecasts, and how many clusters are used."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fednsl.plots import Panel, PlotSpec, Series, forecast_panels, register_plot


def true_groups(config: Mapping[str, Any]) -> float | None:
    """``data.groups`` of the synthetic set (the planted daily-profile groups), else None."""
    data = config.get("data") or {}
    return float(data["groups"]) if data.get("name") == "synthetic" and "groups" in data else None


FEDSTL = register_plot("fedstl")(
    PlotSpec(
        "fedstl_forecast",
        "FedSTL: client, cluster (-S) and corrected (-T) forecasts against naive baselines; clusters in use",
        (
            *forecast_panels([("", "FedSTL"), ("s_", "FedSTL-S (cluster model)"), ("t_", "FedSTL-T (corrected)")]),
            Panel(
                "Clusters in use (CLUSTER_ID, Alg. 1)",
                (Series("train/clusters_used", "clusters used"),),
                "clusters",
                target=true_groups,
                target_label="groups in the data",
                integer_y=True,
            ),
        ),
        key_metrics=("evaluate/mse", "evaluate/rho", "evaluate/t_rho", "train/clusters_used", "train/train_loss"),
    )
)

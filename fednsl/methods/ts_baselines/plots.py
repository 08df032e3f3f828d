"""Figures of the forecasting baselines: test MSE and STL satisfaction against the naive forecasts."""

from __future__ import annotations

from fednsl.plots import PlotSpec, forecast_panels, register_plot

KEYS = ("evaluate/mse", "evaluate/rho", "train/train_loss")

for _method, _label in (
    ("ts-fedavg", "FedAvg"),
    ("ts-fedprox", "FedProx"),
    ("ts-fedrep", "FedRep"),
    ("ts-ditto", "Ditto"),
):
    register_plot(_method)(
        PlotSpec(
            f"{_method.replace('-', '_')}_forecast",
            f"{_label} (forecasting baseline) against the naive forecasts",
            forecast_panels([("", _label)]),
            key_metrics=KEYS,
        )
    )

IFCA = register_plot("ts-ifca")(
    PlotSpec(
        "ts_ifca_forecast",
        "IFCA (forecasting baseline): client and cluster models against the naive forecasts",
        forecast_panels([("", "IFCA"), ("s_", "IFCA-S (cluster model)")]),
        key_metrics=KEYS,
    )
)

"""Time-series layer: per-client forecasting data, forecasters with a shared encoder and a private
head, naive seasonal baselines, mined STL properties and the building blocks of federated forecasting
methods (FedSTL, its baselines, LogiCP).

Quick start::

    from fednsl.tasks.timeseries import TSDataConfig, load_timeseries, build_forecaster, seasonal_mean
    data = load_timeseries(TSDataConfig(name="synthetic", num_clients=6), seed=0)
    c = data.clients["s0"]                      # ClientSeries: x_train (n, 120), y_train (n, 24), ...
    model = build_forecaster({"name": "gru"}, data.input_len, data.horizon, seed=0)
    naive = seasonal_mean(c.x_test, data.horizon)

See the README section "FedSTL and the time-series layer".
"""

from fednsl.common.torch_utils import get_weights, set_weights
from fednsl.tasks.timeseries.baselines import NAIVE, last_period, seasonal_mean
from fednsl.tasks.timeseries.data import (
    DATASETS,
    PERIOD,
    ClientSeries,
    TSData,
    TSDataConfig,
    chronological_split,
    load_timeseries,
    make_synthetic,
    make_windows,
    split_series_into_clients,
)
from fednsl.tasks.timeseries.models import (
    MODEL_NAMES,
    Forecaster,
    ModelConfig,
    RecurrentForecaster,
    TransformerForecaster,
    build_forecaster,
)
from fednsl.tasks.timeseries.properties import (
    ClientProperty,
    PropertyConfig,
    make_template,
    mine_property,
    property_loss,
)
from fednsl.tasks.timeseries.training import forecast_metrics, predict, sgd_epochs

__all__ = [
    "DATASETS",
    "MODEL_NAMES",
    "NAIVE",
    "PERIOD",
    "ClientProperty",
    "ClientSeries",
    "Forecaster",
    "ModelConfig",
    "PropertyConfig",
    "RecurrentForecaster",
    "TSData",
    "TSDataConfig",
    "TransformerForecaster",
    "build_forecaster",
    "chronological_split",
    "forecast_metrics",
    "get_weights",
    "last_period",
    "load_timeseries",
    "make_synthetic",
    "make_template",
    "make_windows",
    "mine_property",
    "predict",
    "property_loss",
    "seasonal_mean",
    "set_weights",
    "sgd_epochs",
    "split_series_into_clients",
]

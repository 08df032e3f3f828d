"""Forecasting baselines of FedSTL Table 2: FedAvg, FedProx, FedRep, Ditto, IFCA (+ IFCA-S).

Registered methods ``ts_fedavg``, ``ts_fedprox``, ``ts_fedrep``, ``ts_ditto``, ``ts_ifca`` run any
forecaster of :mod:`fednsl.tasks.timeseries.models` on any dataset of :mod:`fednsl.tasks.timeseries.data`
(``data:`` block, default ``synthetic``).  Every evaluation reports MSE (normalised and original
units), ρ% w.r.t. each client's mined property, the teacher-corrected ("-T") rows and the naive
seasonal baselines (see :mod:`fednsl.tasks.timeseries.federated`).  IFCA's evaluation also reports the
cluster model ("-S" = IFCA-S, prefix ``s_``).
"""

from __future__ import annotations

from fednsl.common.torch_utils import get_weights
from fednsl.config import RunConfig
from fednsl.federation.runner import Federation
from fednsl.registry import build_kwargs, register_method
from fednsl.tasks.timeseries.clients import TSDittoClient, TSFedAvgClient, TSFedRepClient, TSIFCAClient
from fednsl.tasks.timeseries.configs import (
    TSDittoConfig,
    TSFedAvgConfig,
    TSFedProxConfig,
    TSFedRepConfig,
    TSIFCAConfig,
)
from fednsl.tasks.timeseries.federated import FORECAST_HEADLINE, TSSetup, TSTrainConfig, make_clients, ts_setup
from fednsl.tasks.timeseries.strategies import TSAverageStrategy, TSIFCAStrategy

__all__ = [
    "TSAverageStrategy",
    "TSDittoClient",
    "TSDittoConfig",
    "TSFedAvgClient",
    "TSFedAvgConfig",
    "TSFedProxConfig",
    "TSFedRepClient",
    "TSFedRepConfig",
    "TSIFCAClient",
    "TSIFCAConfig",
    "TSIFCAStrategy",
]


def _clients(setup: TSSetup, cls: type, cfg: TSTrainConfig) -> dict:
    return make_clients(
        setup,
        lambda cid, series, model: cls(cid, series, model, setup.template, setup.margin, cfg.eval_split, cfg.threads),
    )


def _summary(setup: TSSetup, clients: dict) -> dict:
    return {**setup.summary(), "train_examples": int(sum(c.num_examples for c in clients.values()))}


@register_method(
    "ts-fedavg", doc="FedAvg for forecasters (McMahan et al. 2017); FedSTL Table 2 baseline", headline=FORECAST_HEADLINE
)
def build_ts_fedavg(config: RunConfig) -> Federation:
    cfg = build_kwargs(TSFedAvgConfig, config.method_kwargs, "method_kwargs (ts-fedavg)")
    setup = ts_setup(config, cfg)
    init = get_weights(setup.new_model(setup.model_seed("global")))
    clients = _clients(setup, TSFedAvgClient, cfg)
    return Federation(TSAverageStrategy(init, cfg, config.rounds), clients, _summary(setup, clients))


@register_method(
    "ts-fedprox", doc="FedProx for forecasters (Li et al. 2020): proximal local objective", headline=FORECAST_HEADLINE
)
def build_ts_fedprox(config: RunConfig) -> Federation:
    cfg = build_kwargs(TSFedProxConfig, config.method_kwargs, "method_kwargs (ts-fedprox)")
    setup = ts_setup(config, cfg)
    init = get_weights(setup.new_model(setup.model_seed("global")))
    clients = _clients(setup, TSFedAvgClient, cfg)
    return Federation(TSAverageStrategy(init, cfg, config.rounds, {"mu": cfg.mu}), clients, _summary(setup, clients))


@register_method(
    "ts-fedrep",
    doc="FedRep for forecasters (Collins et al. 2021): shared body, private head",
    headline=FORECAST_HEADLINE,
)
def build_ts_fedrep(config: RunConfig) -> Federation:
    cfg = build_kwargs(TSFedRepConfig, config.method_kwargs, "method_kwargs (ts-fedrep)")
    setup = ts_setup(config, cfg)
    model = setup.new_model(setup.model_seed("global"))
    init = get_weights(model, model.shared_keys())
    clients = _clients(setup, TSFedRepClient, cfg)
    return Federation(
        TSAverageStrategy(init, cfg, config.rounds, {"head_epochs": cfg.head_epochs}), clients, _summary(setup, clients)
    )


@register_method(
    "ts-ditto", doc="Ditto for forecasters (Li et al. 2021): regularised personal models", headline=FORECAST_HEADLINE
)
def build_ts_ditto(config: RunConfig) -> Federation:
    cfg = build_kwargs(TSDittoConfig, config.method_kwargs, "method_kwargs (ts-ditto)")
    setup = ts_setup(config, cfg)
    init = get_weights(setup.new_model(setup.model_seed("global")))
    clients = _clients(setup, TSDittoClient, cfg)
    extra = {
        "lam": cfg.lam,
        "personal_epochs": cfg.personal_epochs if cfg.personal_epochs is not None else cfg.local_epochs,
    }
    return Federation(TSAverageStrategy(init, cfg, config.rounds, extra), clients, _summary(setup, clients))


@register_method(
    "ts-ifca", doc="IFCA for forecasters (Ghosh et al. 2020); reports IFCA and IFCA-S rows", headline=FORECAST_HEADLINE
)
def build_ts_ifca(config: RunConfig) -> Federation:
    cfg = build_kwargs(TSIFCAConfig, config.method_kwargs, "method_kwargs (ts-ifca)")
    setup = ts_setup(config, cfg)
    init = [get_weights(setup.new_model(setup.model_seed("ifca", j))) for j in range(cfg.num_clusters)]
    clients = _clients(setup, TSIFCAClient, cfg)
    return Federation(
        TSIFCAStrategy(init, cfg, config.rounds, cfg.selection_split),
        clients,
        {**_summary(setup, clients), "num_clusters": cfg.num_clusters},
    )


from fednsl.methods.ts_baselines import plots as _plots  # noqa: E402,F401  (registers the curated figure)

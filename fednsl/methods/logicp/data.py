"""Data for the forecasting methods of this package: :func:`fednsl.tasks.timeseries.federated.ts_setup` plus the
paper's temperature and electricity sets (``data.name`` ``ct_temperature`` / ``uci_electricity``, loaded by
:mod:`fednsl.tasks.timeseries.external` from files prepared with ``python -m fednsl.tasks.timeseries.external``)."""

from __future__ import annotations

from fednsl.config import RunConfig
from fednsl.registry import build_kwargs
from fednsl.tasks.timeseries.external import EXTERNAL, ExternalDataConfig, load_external
from fednsl.tasks.timeseries.federated import TSSetup, TSTrainConfig, ts_setup
from fednsl.tasks.timeseries.properties import make_template


def logicp_setup(config: RunConfig, cfg: TSTrainConfig) -> TSSetup:
    """Data + model + property template for ``config`` (any :mod:`fednsl.tasks.timeseries.data` set, or an
    external one)."""
    name = (config.data or {}).get("name", "synthetic")
    if name not in EXTERNAL:
        return ts_setup(config, cfg)
    data = load_external(build_kwargs(ExternalDataConfig, config.data, f"data ({name})"))
    pcfg = cfg.property_config()
    return TSSetup(data, cfg.model_config(), make_template(pcfg, data.horizon), pcfg.margin, config.seed)


__all__ = ["logicp_setup"]

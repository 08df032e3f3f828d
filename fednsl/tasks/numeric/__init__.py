"""The FedNSL paper's numerical experiment (§4.1.1, App. A.5–A.6): shared data, evaluation and server.

The methods compared on it live in method packages: ``fednsl_gmm`` (FedNSL), ``pfedme``, ``perfedavg``,
``pfedbayes``, ``lrxfl``, and ``fedavg`` (``fedavg-numeric``, :mod:`fednsl.methods.fedavg.numeric`).
"""

from __future__ import annotations

from fednsl.tasks.numeric.client import BatchStream, NumericClient, eval_metric_names, eval_schema
from fednsl.tasks.numeric.data import (
    NumericClientData,
    NumericDataConfig,
    level_name,
    make_numeric_federation,
    sample_class,
)
from fednsl.tasks.numeric.strategy import NumericWeightsStrategy

__all__ = [
    "BatchStream",
    "NumericClient",
    "NumericClientData",
    "NumericDataConfig",
    "NumericWeightsStrategy",
    "eval_metric_names",
    "eval_schema",
    "level_name",
    "make_numeric_federation",
    "sample_class",
]

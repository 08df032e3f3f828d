"""The FedNSL paper's numerical experiment (§4.1.1, App. A.5–A.6): shared data, evaluation and FedAvg.

The methods compared on it live in sibling packages: ``fednsl_gmm`` (FedNSL), ``pfedme``, ``perfedavg``,
``pfedbayes``, ``lrxfl``; FedAvg (``fedavg-numeric``) is registered here.
"""

from __future__ import annotations

from fednsl.methods.numeric.client import BatchStream, NumericClient, eval_metric_names, eval_schema
from fednsl.methods.numeric.data import (NumericClientData, NumericDataConfig, level_name,
                                         make_numeric_federation, sample_class)
from fednsl.methods.numeric.fedavg import NumericFedAvgConfig, build_fedavg_numeric
from fednsl.methods.numeric.strategy import NumericWeightsStrategy

__all__ = ["BatchStream", "NumericClient", "NumericClientData", "NumericDataConfig", "NumericFedAvgConfig",
           "NumericWeightsStrategy", "build_fedavg_numeric", "eval_metric_names", "eval_schema", "level_name",
           "make_numeric_federation", "sample_class"]

"""Server side shared by the weight-sharing numeric methods (FedAvg, pFedMe, Per-FedAvg, pFedBayes).

The aggregation is :class:`fednsl.methods.fedavg.FedAvgStrategy`'s: ``w ← w + β·(Σ_i n_i w_i / Σ_i n_i − w)``
(β = ``server_lr``; β = 1 is plain FedAvg, pFedMe's Alg. 1 line 9 is the general β). Only the train
configuration sent to clients and the numeric evaluation differ.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from fednsl.common.fedavg import FedAvgConfig, FedAvgStrategy
from fednsl.federation.records import ConfigValue, Message, Schema
from fednsl.federation.roles import Metrics
from fednsl.tasks.numeric.client import eval_schema, mean_over_clients
from fednsl.tasks.numeric.data import NumericDataConfig


class NumericWeightsStrategy(FedAvgStrategy):
    """FedAvg-style server for the numeric experiment.

    ``train_config`` is broadcast with the weights in every train message; ``evaluate_with_weights`` sends
    the global weights with evaluate messages too (needed by clients that deploy or adapt the global model).
    """

    def __init__(
        self,
        initial: dict[str, np.ndarray],
        train_config: Mapping[str, ConfigValue],
        data_cfg: NumericDataConfig,
        server_lr: float = 1.0,
        evaluate_with_weights: bool = True,
    ):
        super().__init__(initial, FedAvgConfig(server_lr=server_lr))
        self.train_config = dict(train_config)
        self.data_cfg = data_cfg
        self.evaluate_with_weights = evaluate_with_weights

    def configure_train(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message("train", rnd, arrays=self.weights, config=dict(self.train_config))

    def configure_evaluate(self, rnd: int, clients: Sequence[str]) -> Message:
        return Message(
            "evaluate", rnd, arrays=self.weights if self.evaluate_with_weights else {}, config=dict(self.train_config)
        )

    def aggregate_evaluate(self, rnd: int, replies: Mapping[str, Message], failures: Mapping[str, str]) -> Metrics:
        return mean_over_clients(replies)

    def evaluate_reply_schema(self) -> Schema:
        return eval_schema(self.data_cfg)

"""FedAvg on the numeric experiment: the fifth baseline (spec §3 assumption), built from fednsl.methods.fedavg.

Clients run TorchClassifierClient's local SGD (:func:`~fednsl.tasks.classifier.local_sgd`) on the given labels;
the server is :class:`~fednsl.common.fedavg.FedAvgStrategy`'s weighted mean; every client deploys the global
model.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from fednsl.common.fedavg import check_hidden
from fednsl.common.torch_utils import get_weights, set_weights
from fednsl.config import RunConfig
from fednsl.federation.records import Message
from fednsl.federation.roles import handles
from fednsl.federation.runner import Federation
from fednsl.registry import build_kwargs, register_method
from fednsl.tasks.blobs import mlp
from fednsl.tasks.classifier import local_sgd
from fednsl.tasks.numeric.client import (
    NUMERIC_HEADLINE,
    NumericClient,
    Predictor,
    client_data_summary,
    softmax_predictor,
)
from fednsl.tasks.numeric.data import NumericClientData, NumericDataConfig, make_numeric_federation
from fednsl.tasks.numeric.strategy import NumericWeightsStrategy


@dataclass
class NumericFedAvgConfig:
    """FedAvg options (McMahan et al., AISTATS 2017, Alg. 1: E local epochs of minibatch SGD with batch B).

    Defaults follow the FedAvg runs in the comparison of Dinh et al. (NeurIPS 2020, pFedMe repository README,
    "Synthetic, non-convex"): client learning rate 0.005, batch size 20; E = 1 local epoch (≈ 28 steps on a
    550-point client, close to their 20 local iterations). ``hidden`` = 64 is the paper's MLP (App. A.6).
    """

    hidden: int = 64
    lr: float = 0.005
    local_epochs: int = 1
    batch_size: int = 20
    server_lr: float = 1.0

    def __post_init__(self) -> None:
        check_hidden(self.hidden)


class NumericFedAvgClient(NumericClient):
    """TorchClassifierClient's train (:func:`~fednsl.tasks.classifier.local_sgd`); deploys the global weights it
    is sent for evaluation (NumericClient's evaluate)."""

    def __init__(self, cid: str, data: NumericClientData, hidden: int, classes: int):
        self.model = mlp(data.x_train.shape[1], hidden, classes, seed=0)
        self.loss_fn = nn.CrossEntropyLoss()
        super().__init__(cid, data)

    @handles("train")
    def train(self, msg: Message) -> Message:
        return local_sgd(self.cid, self.model, self.loss_fn, self.data.x_train, self.data.y_train, msg)

    def deployed(self, msg: Message) -> Predictor:
        set_weights(self.model, msg.arrays)
        self.model.eval()
        return softmax_predictor(self.model)


@register_method(
    "fedavg-numeric", doc="FedAvg on the FedNSL numerical experiment (fifth baseline)", headline=NUMERIC_HEADLINE
)
def build_fedavg_numeric(config: RunConfig) -> Federation:
    cfg = build_kwargs(NumericFedAvgConfig, config.method_kwargs, "method_kwargs (fedavg-numeric)")
    data_cfg = build_kwargs(NumericDataConfig, config.data, "data (fedavg-numeric)")
    parts = make_numeric_federation(data_cfg, config.seed)
    init = get_weights(mlp(data_cfg.features, cfg.hidden, data_cfg.classes, seed=config.seed))
    clients = {cid: NumericFedAvgClient(cid, d, cfg.hidden, data_cfg.classes) for cid, d in parts.items()}
    strategy = NumericWeightsStrategy(
        init,
        {"lr": cfg.lr, "local_epochs": cfg.local_epochs, "batch_size": cfg.batch_size},
        data_cfg,
        server_lr=cfg.server_lr,
    )
    return Federation(strategy, clients, client_data_summary(parts))

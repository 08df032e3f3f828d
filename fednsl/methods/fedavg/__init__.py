"""FedAvg (McMahan et al., 2017): ``fedavg`` on the blobs task and ``fedavg-numeric`` on the numeric experiment
(:mod:`.numeric`). The server (:class:`~fednsl.common.fedavg.FedAvgStrategy`) is shared by other methods and
lives in :mod:`fednsl.common`."""

from __future__ import annotations

from fednsl.common.fedavg import FedAvgConfig, FedAvgStrategy, check_model_size
from fednsl.common.torch_utils import get_weights
from fednsl.config import RunConfig
from fednsl.federation.runner import Federation
from fednsl.methods.fedavg.numeric import NumericFedAvgConfig, build_fedavg_numeric
from fednsl.registry import Headline, build_kwargs, register_method
from fednsl.tasks.blobs import BlobsConfig, make_blobs_federation, mlp
from fednsl.tasks.classifier import TorchClassifierClient

__all__ = [
    "FedAvgConfig",
    "FedAvgStrategy",
    "NumericFedAvgConfig",
    "TorchClassifierClient",
    "build_fedavg",
    "build_fedavg_numeric",
]


@register_method(
    "fedavg",
    doc="FedAvg: weighted mean of client weights (McMahan et al. 2017)",
    headline=(Headline("accuracy", "evaluate/accuracy"),),
)
def build_fedavg(config: RunConfig) -> Federation:
    cfg = build_kwargs(FedAvgConfig, config.method_kwargs, "method_kwargs (fedavg)")
    data_cfg = build_kwargs(BlobsConfig, config.data, "data (fedavg)")
    if data_cfg.name != "blobs":
        raise ValueError(f"fedavg: unknown data.name {data_cfg.name!r}; available: 'blobs'")
    check_model_size(data_cfg.features, cfg.hidden, data_cfg.classes, data_cfg.num_clients + 1)
    parts = make_blobs_federation(data_cfg, config.seed)
    init = get_weights(mlp(data_cfg.features, cfg.hidden, data_cfg.classes, seed=config.seed))
    clients = {
        cid: TorchClassifierClient(cid, d, mlp(data_cfg.features, cfg.hidden, data_cfg.classes, seed=0))
        for cid, d in parts.items()
    }
    summary = {"clients": len(clients), "train_examples": int(sum(len(d.y_train) for d in parts.values()))}
    strategy = FedAvgStrategy(init, cfg)
    strategy.example_limits = {cid: max(len(d.y_train), len(d.y_test)) for cid, d in parts.items()}
    return Federation(strategy, clients, summary)


from fednsl.methods.fedavg import plots as _plots  # noqa: E402,F401  (registers the curated figure)

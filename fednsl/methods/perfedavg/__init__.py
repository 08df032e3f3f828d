"""Per-FedAvg (Fallah et al., NeurIPS 2020): MAML-style personalised FL, on the numerical experiment."""

from __future__ import annotations

from fednsl.common.torch_utils import get_weights
from fednsl.config import RunConfig
from fednsl.federation.records import ConfigValue
from fednsl.federation.runner import Federation
from fednsl.methods.perfedavg.client import PerFedAvgClient, hessian_vector_product, maml_step
from fednsl.methods.perfedavg.config import PerFedAvgConfig
from fednsl.registry import build_kwargs, register_method
from fednsl.tasks.blobs import mlp
from fednsl.tasks.numeric.client import NUMERIC_HEADLINE, client_data_summary
from fednsl.tasks.numeric.data import NumericDataConfig, make_numeric_federation
from fednsl.tasks.numeric.strategy import NumericWeightsStrategy

__all__ = ["PerFedAvgClient", "PerFedAvgConfig", "build_perfedavg", "hessian_vector_product", "maml_step"]


@register_method(
    "perfedavg",
    doc="Per-FedAvg: MAML personalised FL (Fallah et al. 2020), numeric experiment",
    headline=NUMERIC_HEADLINE,
)
def build_perfedavg(config: RunConfig) -> Federation:
    cfg = build_kwargs(PerFedAvgConfig, config.method_kwargs, "method_kwargs (perfedavg)")
    data_cfg = build_kwargs(NumericDataConfig, config.data, "data (perfedavg)")
    parts = make_numeric_federation(data_cfg, config.seed)
    init = get_weights(mlp(data_cfg.features, cfg.hidden, data_cfg.classes, seed=config.seed))
    clients = {cid: PerFedAvgClient(cid, d, cfg.hidden, data_cfg.classes) for cid, d in parts.items()}
    train_cfg: dict[str, ConfigValue] = {
        "alpha": cfg.alpha,
        "beta": cfg.beta,
        "local_steps": cfg.local_steps,
        "batch_size": cfg.batch_size,
        "variant": cfg.variant,
    }
    return Federation(
        NumericWeightsStrategy(init, train_cfg, data_cfg, server_lr=cfg.server_lr), clients, client_data_summary(parts)
    )


from fednsl.methods.perfedavg import plots as _plots  # noqa: E402,F401  (registers the curated figure)

"""pFedMe (Dinh et al., NeurIPS 2020): personalised FL with Moreau envelopes, on the numerical experiment."""

from __future__ import annotations

from fednsl.common.torch_utils import get_weights
from fednsl.config import RunConfig
from fednsl.federation.runner import Federation
from fednsl.methods.pfedme.client import PFedMeClient, pfedme_local_update
from fednsl.methods.pfedme.config import PFedMeConfig
from fednsl.methods.pfedme.update import moreau_inner_step, moreau_outer_step
from fednsl.registry import build_kwargs, register_method
from fednsl.tasks.blobs import mlp
from fednsl.tasks.numeric.client import NUMERIC_HEADLINE, client_data_summary
from fednsl.tasks.numeric.data import NumericDataConfig, make_numeric_federation
from fednsl.tasks.numeric.strategy import NumericWeightsStrategy

__all__ = [
    "PFedMeClient",
    "PFedMeConfig",
    "build_pfedme",
    "moreau_inner_step",
    "moreau_outer_step",
    "pfedme_local_update",
]


@register_method(
    "pfedme",
    doc="pFedMe: Moreau-envelope personalised FL (Dinh et al. 2020), numeric experiment",
    headline=NUMERIC_HEADLINE,
)
def build_pfedme(config: RunConfig) -> Federation:
    cfg = build_kwargs(PFedMeConfig, config.method_kwargs, "method_kwargs (pfedme)")
    data_cfg = build_kwargs(NumericDataConfig, config.data, "data (pfedme)")
    parts = make_numeric_federation(data_cfg, config.seed)
    init = get_weights(mlp(data_cfg.features, cfg.hidden, data_cfg.classes, seed=config.seed))
    clients = {cid: PFedMeClient(cid, d, cfg.hidden, data_cfg.classes) for cid, d in parts.items()}
    train_cfg = {
        "lr": cfg.lr,
        "personal_lr": cfg.personal_learning_rate,
        "lamda": cfg.lamda,
        "local_rounds": cfg.local_rounds,
        "K": cfg.K,
        "batch_size": cfg.batch_size,
        "mu": cfg.mu,
    }
    return Federation(
        NumericWeightsStrategy(init, train_cfg, data_cfg, server_lr=cfg.beta), clients, client_data_summary(parts)
    )


from fednsl.methods.pfedme import plots as _plots  # noqa: E402,F401  (registers the curated figure)

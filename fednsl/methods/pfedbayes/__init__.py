"""pFedBayes (Zhang et al., ICML 2022): variational Bayesian personalised FL, on the numerical experiment."""

from __future__ import annotations

from fednsl.common import bnn
from fednsl.config import RunConfig
from fednsl.federation.runner import Federation
from fednsl.methods.pfedbayes.client import PFedBayesClient, global_copy_loss, personal_loss
from fednsl.methods.pfedbayes.config import PFedBayesConfig
from fednsl.registry import build_kwargs, register_method
from fednsl.tasks.numeric.client import NUMERIC_HEADLINE, client_data_summary
from fednsl.tasks.numeric.data import NumericDataConfig, make_numeric_federation
from fednsl.tasks.numeric.strategy import NumericWeightsStrategy

__all__ = ["PFedBayesClient", "PFedBayesConfig", "bnn", "build_pfedbayes", "global_copy_loss", "personal_loss"]


@register_method(
    "pfedbayes",
    doc="pFedBayes: variational Bayesian personalised FL (Zhang et al. 2022), numeric",
    headline=NUMERIC_HEADLINE,
)
def build_pfedbayes(config: RunConfig) -> Federation:
    cfg = build_kwargs(PFedBayesConfig, config.method_kwargs, "method_kwargs (pfedbayes)")
    data_cfg = build_kwargs(NumericDataConfig, config.data, "data (pfedbayes)")
    parts = make_numeric_federation(data_cfg, config.seed)
    init = bnn.init_distribution(
        data_cfg.features, cfg.hidden, data_cfg.classes, cfg.weight_scale, cfg.rho_offset, seed=config.seed
    )
    clients = {
        cid: PFedBayesClient(cid, d, init, cfg.personal_learning_rate, cfg.learning_rate) for cid, d in parts.items()
    }
    train_cfg = {
        "zeta": cfg.zeta,
        "local_epochs": cfg.local_epochs,
        "personal_steps": cfg.personal_steps,
        "batch_size": cfg.batch_size,
        "eps_std": cfg.eps_std,
        "eval_samples": cfg.eval_samples,
    }
    return Federation(
        NumericWeightsStrategy(init, train_cfg, data_cfg, server_lr=cfg.beta, evaluate_with_weights=False),
        clients,
        client_data_summary(parts),
    )


from fednsl.methods.pfedbayes import plots as _plots  # noqa: E402,F401  (registers the curated figure)

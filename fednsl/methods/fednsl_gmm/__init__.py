"""FedNSL on the numerical experiment (§4.1.1, App. A.6): server 3-GMM prior, client MLPs with a KL to it."""

from __future__ import annotations

from fednsl.config import RunConfig
from fednsl.federation.runner import Federation
from fednsl.methods.fednsl_gmm.client import FedNSLGMMClient, kl_to_prior, prior_log_probs
from fednsl.methods.fednsl_gmm.config import FedNSLGMMConfig
from fednsl.methods.fednsl_gmm.gmm import GMM, init_from_posteriors, log_responsibilities, m_step, sufficient_stats
from fednsl.methods.fednsl_gmm.strategy import FedNSLGMMStrategy
from fednsl.registry import build_kwargs, register_method
from fednsl.tasks.numeric.client import NUMERIC_HEADLINE, client_data_summary
from fednsl.tasks.numeric.data import NumericDataConfig, make_numeric_federation

__all__ = [
    "GMM",
    "FedNSLGMMClient",
    "FedNSLGMMConfig",
    "FedNSLGMMStrategy",
    "build_fednsl_gmm",
    "init_from_posteriors",
    "kl_to_prior",
    "log_responsibilities",
    "m_step",
    "prior_log_probs",
    "sufficient_stats",
]


@register_method(
    "fednsl-gmm",
    doc="FedNSL numeric variant: server 3-GMM prior by federated EM, client MLP + KL",
    headline=NUMERIC_HEADLINE,
)
def build_fednsl_gmm(config: RunConfig) -> Federation:
    cfg = build_kwargs(FedNSLGMMConfig, config.method_kwargs, "method_kwargs (fednsl-gmm)")
    data_cfg = build_kwargs(NumericDataConfig, config.data, "data (fednsl-gmm)")
    parts = make_numeric_federation(data_cfg, config.seed)
    clients = {
        cid: FedNSLGMMClient(cid, d, cfg.hidden, data_cfg.classes, seed=config.seed, em_steps=cfg.em_steps)
        for cid, d in parts.items()
    }
    return Federation(FedNSLGMMStrategy(cfg, data_cfg), clients, client_data_summary(parts))


from fednsl.methods.fednsl_gmm import plots as _plots  # noqa: E402,F401  (registers the curated figure)

"""FedSTL (An, Johnson, Ma; AAAI'24): STL-property-guided clustered personalised FL for forecasting.

Clients mine their operational-range property φ_i (FedSTL Table 1 row 1, :mod:`rules.stl`), cluster
devices group clients by how well each cluster model satisfies their properties (Alg. 1: argmin or
balanced greedy), cluster models average their members' shared layers while heads stay private and
fine-tune on the members' shared samples (Alg. 2), and every objective is ``MSE + λ·L_p`` (Eq. 2, 4).
Evaluation reports FedSTL (client models), FedSTL-S (cluster models, prefix ``s_``) and FedSTL-T
(teacher-projected client forecasts, prefix ``t_``).  See the README section "FedSTL and the time-series layer".
"""

from __future__ import annotations

from fednsl.common.torch_utils import get_weights
from fednsl.config import RunConfig
from fednsl.federation.runner import Federation
from fednsl.methods.fedstl.client import FedSTLClient
from fednsl.methods.fedstl.cluster_id import alignment_losses, assign, cluster_id, cluster_predictions
from fednsl.methods.fedstl.config import FedSTLConfig
from fednsl.methods.fedstl.strategy import FedSTLStrategy
from fednsl.registry import build_kwargs, register_method
from fednsl.tasks.timeseries.federated import FORECAST_HEADLINE, make_clients, ts_setup
from fednsl.tasks.timeseries.properties import has_band

__all__ = [
    "FedSTLClient",
    "FedSTLConfig",
    "FedSTLStrategy",
    "alignment_losses",
    "assign",
    "build_fedstl",
    "cluster_id",
    "cluster_predictions",
]


@register_method(
    "fedstl",
    doc="FedSTL: STL-property clustering + logic-regularised personalised FL (An et al. 2024)",
    headline=FORECAST_HEADLINE,
)
def build_fedstl(config: RunConfig) -> Federation:
    cfg = build_kwargs(FedSTLConfig, config.method_kwargs, "method_kwargs (fedstl)")
    setup = ts_setup(config, cfg)
    if cfg.lp in ("l1", "squared") and not has_band(setup.template):
        raise ValueError(
            f"method_kwargs (fedstl): lp={cfg.lp!r} needs a band template (operational_range), "
            f"got {setup.template.name!r}; use lp='violation'"
        )
    initial = [get_weights(setup.new_model(setup.model_seed("cluster", j))) for j in range(cfg.num_clusters)]
    clients = make_clients(
        setup,
        lambda cid, series, model: FedSTLClient(
            cid, series, model, setup.template, setup.margin, cfg.eval_split, cfg.threads
        ),
    )
    strategy = FedSTLStrategy(
        cfg, config.rounds, config.seed, setup.template, setup.data.horizon, initial, lambda: setup.new_model(0)
    )
    summary = {
        **setup.summary(),
        "num_clusters": cfg.num_clusters,
        "rule": cfg.rule,
        "train_examples": int(sum(c.num_examples for c in clients.values())),
    }
    return Federation(strategy, clients, summary)


from fednsl.methods.fedstl import plots as _plots  # noqa: E402,F401  (registers the curated figure)

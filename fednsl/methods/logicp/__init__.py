"""LogiCP (He, An, Ma, JAIR 2026): STL-guided clustering + per-cluster federated conformal prediction.

Registered methods:

* ``logicp`` — Alg. 1 (``strategy.py``, ``client.py``): optional FedAvg pretraining, STL mining and
  clustering by R_STL (Eq. 10), federated split CP by the quantile of quantiles with multi-horizon
  normalisation (Eq. 12–18), training on ω1·MSE + ω2·L_STL + (1−ω1−ω2)·L_CP (Eq. 19–22), runtime
  correction with CP priority (Eq. 23–25, ``correction.py``) and runtime assignment of new clients
  (:meth:`LogiCPStrategy.assign_new_client`).  Reports LogiCP (client models), LogiCP-S (cluster
  models, prefix ``s_``) and LogiCP-T (corrected, ``t_``) rows with coverage and width.
* ``cp_ifca`` — the CP-IFCA baseline: IFCA (Ghosh et al. 2020) + the same per-cluster federated CP.
* ``ts_fedbayes`` — the Fed-Bayes baseline for forecasters: pFedBayes (Zhang et al. 2022) on a Bayesian
  last layer.

Data (``data:``): every dataset of :mod:`fednsl.tasks.timeseries.data` plus ``ct_temperature`` and
``uci_electricity`` (:mod:`fednsl.tasks.timeseries.external`, prepared from the original files).
"""

from __future__ import annotations

import torch

from fednsl.common.torch_utils import get_weights
from fednsl.config import RunConfig
from fednsl.federation.runner import Federation
from fednsl.methods.logicp import baselines as _baselines  # noqa: E402,F401  (registers cp_ifca, ts_fedbayes)
from fednsl.methods.logicp.calibration import calibrate_batch, client_quantile, client_scale, cluster_region
from fednsl.methods.logicp.client import LogiCPClient
from fednsl.methods.logicp.config import LogiCPConfig
from fednsl.methods.logicp.correction import conflicts, correct, validate
from fednsl.methods.logicp.data import logicp_setup
from fednsl.methods.logicp.federated_cp import CONFORMAL_HEADLINE
from fednsl.methods.logicp.losses import LossWeights, cp_loss, logicp_loss, mse_loss, stl_loss
from fednsl.methods.logicp.splits import SplitConfig
from fednsl.methods.logicp.strategy import LogiCPStrategy, PublicData
from fednsl.registry import build_kwargs, register_method
from fednsl.tasks.timeseries.federated import make_clients

__all__ = [
    "LogiCPClient",
    "LogiCPConfig",
    "LogiCPStrategy",
    "LossWeights",
    "PublicData",
    "SplitConfig",
    "build_logicp",
    "calibrate_batch",
    "client_quantile",
    "client_scale",
    "cluster_region",
    "conflicts",
    "correct",
    "cp_loss",
    "logicp_loss",
    "mse_loss",
    "stl_loss",
    "validate",
]


def _public_part(client: LogiCPClient) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A client's D^pub windows ``x, y`` and its band ``lower, upper (1, H)`` (server-side cluster training)."""
    x, y = client.part("public")
    lower, upper = client.prop.need_band("LogiCP's server-side cluster training")
    return x, y, lower[None], upper[None]


@register_method(
    "logicp",
    doc="LogiCP: STL clustering + per-cluster federated conformal prediction (He et al. 2026)",
    headline=CONFORMAL_HEADLINE,
)
def build_logicp(config: RunConfig) -> Federation:
    cfg = build_kwargs(LogiCPConfig, config.method_kwargs, "method_kwargs (logicp)")
    setup = logicp_setup(config, cfg)
    split = cfg.split_config()
    clients = make_clients(
        setup,
        lambda cid, series, model: LogiCPClient(
            cid,
            series,
            model,
            setup.template,
            setup.margin,
            cfg.eval_split,
            split,
            setup.model_seed("split", int(sorted(setup.data.clients).index(cid))),
        ),
    )
    probe = setup.new_model(setup.model_seed("global"))
    public = None
    if cfg.cluster_training == "server":  # D^pub is published to the server once (Alg. 1 line 27)
        public = PublicData({cid: _public_part(c) for cid, c in clients.items()})
    strategy = LogiCPStrategy(
        get_weights(probe),
        cfg,
        config.rounds,
        config.seed,
        setup.data.horizon,
        probe.shared_keys(),
        model_factory=lambda: setup.new_model(0),
        public=public,
    )
    sizes = {p: int(sum(c.sizes()[p] for c in clients.values())) for p in ("pretrain", "cal", "nor", "public", "train")}
    summary = {
        **setup.summary(),
        "train_examples": int(sum(c.num_examples for c in clients.values())),
        **{f"{p}_windows": n for p, n in sizes.items()},
        "num_clusters": cfg.num_clusters,
    }
    return Federation(strategy, clients, summary)


from fednsl.methods.logicp import plots as _plots  # noqa: E402,F401  (registers the curated figure)

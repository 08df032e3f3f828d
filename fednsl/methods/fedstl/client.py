"""FedSTL client (Alg. 2 lines 5–10).

* ``share`` (round 1): sends its desensitised sample D_i^s (a seeded random ``shared_fraction`` of its
  training windows, as in the code's 50 % shared half) and its mined property φ_i (parameter vector) —
  the only data and property that leave the client, as in the paper.
* ``train``: loads the cluster's shared layers ϕ_j beside its own private head h_i (line 6; before its
  first update, the cluster's head when sent), runs τ
  epochs of SGD on Eq. 2 ``MSE + λ·L_p(φ_i, ŷ)`` (lines 7–9) and sends back ϕ_i (line 10); it keeps
  θ_i = (ϕ_i, h_i) as its deployed model.
* ``evaluate``: the client row from θ_i (before its first training: ϕ_j + the cluster or initial head), the
  cluster row ("-S") from the cluster's full model, the teacher row ("-T") = projection of the client
  forecast onto φ_i.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

import numpy as np
import torch

from fednsl.common.torch_utils import get_weights, set_weights
from fednsl.federation.records import Message
from fednsl.federation.roles import handles
from fednsl.tasks.timeseries.federated import ForecastClient, sgd_kwargs
from fednsl.tasks.timeseries.properties import property_loss
from fednsl.tasks.timeseries.training import predict, sgd_epochs


def shared_sample(n: int, fraction: float, seed: int) -> np.ndarray:
    """Sorted indices of ``max(1, round(fraction·n))`` windows drawn without replacement."""
    k = min(n, max(1, round(fraction * n)))
    return np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))


class FedSTLClient(ForecastClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.local: dict[str, np.ndarray] | None = None  # θ_i after the latest local update

    @handles("share")
    def share(self, msg: Message) -> Message:
        idx = shared_sample(self.num_examples, msg.config_float("shared_fraction"), msg.config_int("seed"))
        return msg.reply(
            self.cid,
            arrays={"x_s": self.data.x_train[idx], "y_s": self.data.y_train[idx], "property": self.prop.vector()},
            metrics={"num_examples": self.num_examples, "num_shared": len(idx)},
        )

    def _load_cluster(self, arrays: Mapping[str, np.ndarray]) -> None:
        """ϕ_j from the cluster beside the client's own head h_i (Alg. 2 line 6).  Before its first
        update the client has no head of its own: it takes the cluster head when one was sent
        (``head_init="cluster"``), else keeps its random initial head."""
        if self.local is not None:
            head = {k: self.local[k] for k in self.model.head_keys()}
        elif all(k in arrays for k in self.model.head_keys()):
            head = {k: arrays[k] for k in self.model.head_keys()}
        else:
            head = None
        set_weights(self.model, {k: arrays[k] for k in self.model.shared_keys()})
        if head is not None:
            set_weights(self.model, head)

    @handles("train")
    def train(self, msg: Message) -> Message:
        c = msg.config
        self._load_cluster(msg.arrays)
        obj = self.objective(msg.config_float("lam"), str(c["lp"]))
        lp_before = self._lp(str(c["lp"]))
        loss = sgd_epochs(self.model, self.x, self.y, gen=self.seed_generator(msg), objective=obj, **sgd_kwargs(c))
        self.local = get_weights(self.model)
        return msg.reply(
            self.cid,
            arrays=get_weights(self.model, self.model.shared_keys()),
            metrics={"num_examples": self.num_examples, "train_loss": loss, "lp_before": lp_before},
        )

    @torch.no_grad()
    def _lp(self, kind: str) -> float:
        """L_p(φ_i) of the loaded model on the training inputs."""
        return float(property_loss(predict(self.model, self.x), self.prop, kind))

    @handles("evaluate")
    def evaluate(self, msg: Message) -> Message:
        cluster = self._clone()
        set_weights(cluster, msg.arrays)
        if self.local is not None:
            set_weights(self.model, self.local)
        else:
            self._load_cluster(msg.arrays)
        out = self.evaluation(self.model, msg.config_str("split"), cluster_model=cluster)
        return msg.reply(self.cid, metrics={**out, "cluster": msg.config_int("cluster")})

    def _clone(self) -> torch.nn.Module:
        return copy.deepcopy(self.model)

    def state_dict(self) -> dict[str, Any]:
        return {"local": self.local}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        p = state.get("local")
        self.local = None if p is None else {k: np.asarray(v) for k, v in p.items()}
